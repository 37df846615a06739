/* http.h — the HTTP front (libmicrohttpd): routing by method and path pattern, request body
 * limit, smuggling refusal, the JSON error shape, request logging and graceful drain. */
#ifndef JB_HTTP_H
#define JB_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/err.h"

#define JB_HTTP_MAX_PARAMS 4
#define JB_HTTP_MAX_HEADERS 100 /* more request headers: 431 */
#define JB_HTTP_MAX_HEADER_BYTES 8192 /* a longer name+value: 431 */

struct MHD_Connection;

struct jb_http_server;
struct jb_http_later;

struct jb_http_req {
  struct MHD_Connection *conn; /* for header and query lookups */
  struct jb_http_server *srv; /* the server (for jb_http_defer) */
  void *ctx; /* the server's per-request state (for jb_http_defer) */
  const char *method; /* "GET", "POST", … */
  const char *path; /* the URL path, without the query */
  const char *body; /* NUL-terminated; NULL when there is none */
  size_t body_len; /* bytes, at most the configured limit */
  const char *params[JB_HTTP_MAX_PARAMS]; /* values of ":name" segments, in pattern order */
  int n_params;
};

/* A response body made piece by piece, sent with chunked transfer coding (RFC 9112 §7.1), so
 * that a large body never sits in memory whole. `read` runs on an HTTP worker thread (it may
 * block, e.g. on the database) and fills at most `max` bytes of `buf`: it returns how many
 * (> 0), 0 at the end of the body, or -1 on an error — the connection is then closed
 * without the last chunk, so the client sees a cut-off transfer rather than a short body
 * (JB_HTTP_STREAM_WAIT, the server's own streams only: nothing now, the connection is
 * suspended until more comes).
 * `free` releases `ctx` once the response is done or abandoned (always called once). */
#define JB_HTTP_STREAM_WAIT (-2)

struct jb_http_stream {
  long (*read)(void *ctx, char *buf, size_t max);
  void (*free)(void *ctx);
  void *ctx;
};

/* The console's sign-in cookie (an HttpOnly token, see api/rest/console.c) and the request
 * header that must come with it on every request that changes state (CSRF: a cross-site page
 * cannot add a header to a request without a CORS preflight, which this server never grants). */
#define JB_CONSOLE_COOKIE "jb_console"
#define JB_CONSOLE_HEADER "X-Jailbox-Console"

struct jb_http_resp {
  int status; /* HTTP status code */
  char *body; /* new allocation, freed by the server; NULL = empty */
  struct jb_http_stream stream; /* .read set: the body comes from it (chunked), not `body` */
  const char *content_type; /* static string; default application/json */
  char allow[64]; /* Allow header value for 405, "" when none */
  bool close; /* send Connection: close */
  const char *const *headers; /* static list name, value, name, value …, NULL-ended; or NULL */
  char set_cookie[256]; /* a Set-Cookie value (RFC 6265 §4.1), "" when none */
  struct jb_http_later *later; /* set by jb_http_defer: the response comes later */
};

/* A handler fills `resp`; it runs on an HTTP worker thread and may block (database). */
typedef void (*jb_http_handler)(void *app, const struct jb_http_req *req,
                                struct jb_http_resp *resp);

#define JB_ROUTE_BODY 1u /* a route outside /v1/ that takes request bodies (with a bearer token) */

struct jb_route {
  const char *method; /* "GET", … */
  const char *pattern; /* "/v1/jailbox/:jobId", literal segments and ":name" segments */
  jb_http_handler fn;
  unsigned flags; /* JB_ROUTE_* */
};

struct jb_http_opts {
  long max_body; /* request body limit, bytes: larger gets 413 */
  int threads; /* worker threads */
  long max_conns_per_ip; /* connections one client address may hold */
  long body_budget; /* request body bytes held at once, all connections (one client
                           * address at most a quarter of it): past it 503 */
  long timeout_s; /* idle connection timeout, s; a body must arrive within twice it */
  /* Called before any body byte of an API request (/v1/…) is read, with its Authorization
   * header: true when the token is one the application knows (it may ask the database).
   * NULL: the syntax check alone. A body is read only when it answers true. */
  bool (*authorize_body)(void *app, const char *authorization);
};

/* Binds `listen` ("host:port", port 0 for any), and serves `routes` (`n` items, kept
 * borrowed) with the limits of `opts`, passing `app` to handlers. On success *out is a new
 * server. Returns 0, or -1 with `err`.
 * HTTP/1.1 per RFC 9110/9112; requests with two Content-Length headers or Content-Length
 * together with Transfer-Encoding are refused with 400 and the connection closed
 * (RFC 9112 §6.3, request smuggling); so are header names that are not tokens, a
 * missing or repeated Host, repeated Authorization or Content-Type, transfer codings other
 * than chunked (501), and paths with encoded '/', '\' or control bytes. An API request
 * (/v1/…, or a route with JB_ROUTE_BODY) with a body and no well-formed credential (bearer token,
 * or console cookie with the console header: jb_http_credential) is refused (401) before the
 * body is read. Residual (libmicrohttpd 0.9.75): obs-folded lines and NUL bytes inside header values
 * are handled by the library before this code sees them; put a strict proxy in front. */
int jb_http_start(struct jb_http_server **out, const char *listen, const struct jb_route *routes,
                  size_t n, void *app, const struct jb_http_opts *opts, jb_error *err);

/* Defers the response of the request `req` that the handler runs for: the handler returns
 * at once, with `resp` left as it is (its status and body are not sent), and the response is
 * given later, from any thread, with jb_http_later_answer — exactly once, also when the work
 * could not even be started (then before the handler returns, which is allowed). Meanwhile the
 * connection is suspended (libmicrohttpd MHD_suspend_connection): no HTTP thread waits for
 * it. When the server drains before the answer, the client gets 503 and the later answer is
 * dropped. Returns the handle, or NULL when out of memory (the handler then answers itself). */
struct jb_http_later *jb_http_defer(const struct jb_http_req *req, struct jb_http_resp *resp);

/* Gives the response of a deferred request: `resp`'s fields are taken (its body and stream
 * belong to the server afterwards, and `later` must not be used again). Any thread. */
void jb_http_later_answer(struct jb_http_later *later, struct jb_http_resp *resp);

/* Answers a deferred request with a body given piece by piece as it comes (e.g. server-sent
 * events, text/event-stream of the HTML Living Standard §9.2), sent with chunked transfer
 * coding: status `status` and `content_type` (a static string) go out now; the body is
 * given with jb_http_later_push and ends with jb_http_later_end (which takes the place of
 * jb_http_later_answer: exactly one of the two is called). While no bytes wait, the
 * connection is suspended: no HTTP thread waits for the next ones. Returns 0, or -1 when the
 * request was answered or abandoned already (a drain, or the client went away); the caller
 * then still ends it. Any thread. */
int jb_http_later_stream(struct jb_http_later *later, int status, const char *content_type);

/* Queues `len` bytes of `data` (copied) for a stream begun with jb_http_later_stream. Returns
 * 0, or -1 when the client is gone, the server drains, or more than 1 MiB waits unsent (a
 * client that does not read): nothing more needs to be pushed then. Any thread. */
int jb_http_later_push(struct jb_http_later *later, const char *data, size_t len);

/* Queues the last `len` bytes of `data` (copied; none when 0) and ends the stream begun with
 * jb_http_later_stream; `later` must not be used again. Any thread. */
void jb_http_later_end(struct jb_http_later *later, const char *data, size_t len);

/* The TCP port actually bound (useful with port 0). */
int jb_http_port(const struct jb_http_server *srv);

/* Stops accepting connections, lets requests in flight finish for at most `grace_ms`
 * milliseconds, then closes every connection and frees `srv`. */
void jb_http_drain(struct jb_http_server *srv, long grace_ms);

/* Matches `path` against `pattern` ("/a/:x/b"). On a match returns true and stores pointers
 * to NUL-terminated copies of the ":name" segment values in `params` (within `buf` of
 * `buflen` bytes), their count in *n. Segments must be non-empty; a trailing slash matches only a pattern
 * that ends in one. */
bool jb_route_match(const char *pattern, const char *path, char *buf, size_t buflen,
                    const char *params[JB_HTTP_MAX_PARAMS], int *n);

/* Returns a new string {"error":{"code":code,"message":message}} (free it), NULL on OOM. */
char *jb_error_body(const char *code, const char *message);

/* Sets `resp` to `status` with the JSON error shape; `fmt` is printf-style. */
void jb_resp_error(struct jb_http_resp *resp, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sets `resp` to `status` with `body` serialized (a *stolen* reference). */
void jb_resp_json(struct jb_http_resp *resp, int status, json_t *body);

/* The value of request header `name` (case-insensitive), or NULL. Borrowed. */
const char *jb_http_header(const struct jb_http_req *req, const char *name);

/* The value of the request's cookie `name` (RFC 6265 §5.4), or NULL. Borrowed. */
const char *jb_http_cookie(const struct jb_http_req *req, const char *name);

/* The request's credential: the token of its "Authorization: Bearer" header; else, when it has
 * none, the token of its JB_CONSOLE_COOKIE cookie — for methods other than GET and HEAD only
 * when the JB_CONSOLE_HEADER header is "1" as well. Copies it into `out` (`len` bytes) and
 * returns 1 for a bearer token, 2 for a console cookie; 0 when there is none (no syntax check
 * of the token), -2 for a cookie without the header on a state-changing request. */
int jb_http_credential(struct MHD_Connection *conn, const char *method, char *out, size_t len);

/* The value of query argument `name`, or NULL. Borrowed. */
const char *jb_http_query(const struct jb_http_req *req, const char *name);

#endif
