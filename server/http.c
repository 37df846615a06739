/* http.c — the libmicrohttpd front of jailboxd (see http.h). */
#define _GNU_SOURCE
#include "server/http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/config.h"
#include "lib/log.h"

/* Client addresses are hashed into this many slots for their share of the body budget. */
#define ADDR_SLOTS 4096

struct jb_http_server {
  struct MHD_Daemon *mhd;
  int listen_fd;
  int port;
  const struct jb_route *routes;
  size_t n_routes;
  void *app;
  struct jb_http_opts opts;
  atomic_long inflight; /* requests between first callback and completion */
  atomic_long buffered; /* request body bytes held in memory, all connections */
  atomic_long share[ADDR_SLOTS]; /* the same per client address (hashed; a collision shares) */
  pthread_mutex_t later_lock; /* guards `laters` */
  struct jb_http_later *laters; /* deferred requests not yet answered to their client */
};

/* A deferred response (jb_http_defer): held by the server's side (until the response is
 * queued or the request ends) and by the answering side (until jb_http_later_answer). */
struct jb_http_later {
  pthread_mutex_t lock; /* guards the fields below */
  int refs;
  bool answered; /* `resp` holds the response */
  bool suspended; /* the connection is suspended, waiting for it */
  bool abandoned; /* the server drained or the request ended: answers are dropped */
  struct jb_http_resp resp;
  struct MHD_Connection *conn;
  struct jb_http_server *srv;
  struct jb_http_later *next, **prev; /* in srv->laters (under srv->later_lock) */
  /* a streamed answer (jb_http_later_stream): bytes queued and not yet read by the server */
  char *sbuf;
  size_t slen, soff;
  bool stream_end; /* jb_http_later_end: nothing comes after the queued bytes */
};

#define STREAM_PENDING_MAX (1024 * 1024) /* bytes of a stream that may wait unsent */

/* A body over the limit is read and dropped up to this many times the limit before the
 * answer (so that clients still sending see the 413); past it the connection is closed. */
#define DISCARD_FACTOR 8

/* Per-request state, kept in MHD's con_cls. */
struct req_ctx {
  struct timespec start;
  char *body;
  size_t len, cap;
  bool too_large; /* over the limit: the rest is dropped, then 413 */
  bool busy; /* no room to buffer it (JAILBOX_HTTP_BODY_BUDGET): the rest is dropped, then 503 */
  struct timespec body_start; /* the headers were taken: the body's deadline counts from here */
  size_t discarded; /* bytes dropped so far */
  bool answered;
  int status;
  char method[16];
  char path[160]; /* for the log line: cut, non-ASCII bytes as '?' */
  char *raw_uri; /* the request target as sent, before percent-decoding */
  size_t held; /* bytes of `body` counted in srv->buffered and in its address share */
  size_t declared; /* Content-Length, when given */
  unsigned slot; /* the client address's slot in srv->share */
  struct jb_http_later *later; /* a deferred response (the server's reference) */
};

/* ---------- JSON error shape and responses ---------- */

char *jb_error_body(const char *code, const char *message) {
  json_t *o = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message);
  if (!o) /* message was not UTF-8: keep the code, drop the text */
    o = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", "(unprintable)");
  if (!o) return NULL;
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return s;
}

void jb_resp_error(struct jb_http_resp *resp, int status, const char *code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  free(resp->body);
  resp->status = status;
  resp->body = jb_error_body(code, msg);
  resp->content_type = "application/json";
}

void jb_resp_json(struct jb_http_resp *resp, int status, json_t *body) {
  free(resp->body);
  resp->body = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (body && !resp->body) {
    jb_resp_error(resp, 500, "internal", "out of memory");
    return;
  }
  resp->status = status;
  resp->content_type = "application/json";
}

const char *jb_http_header(const struct jb_http_req *req, const char *name) {
  return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *jb_http_query(const struct jb_http_req *req, const char *name) {
  return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

/* ---------- routing ---------- */

bool jb_route_match(const char *pattern, const char *path, char *buf, size_t buflen,
                    const char *params[JB_HTTP_MAX_PARAMS], int *n) {
  size_t used = 0;
  *n = 0;
  const char *p = pattern, *s = path;
  while (*p && *s) {
    if (*p != '/' || *s != '/') return false;
    p++, s++;
    size_t pl = strcspn(p, "/"), sl = strcspn(s, "/");
    if (sl == 0 && pl == 0 && !*p && !*s) return true; /* "/a/" matches "/a/" */
    if (sl == 0) return false;
    if (*p == ':') {
      if (*n >= JB_HTTP_MAX_PARAMS || used + sl + 1 > buflen) return false;
      memcpy(buf + used, s, sl);
      buf[used + sl] = '\0';
      params[(*n)++] = buf + used;
      used += sl + 1;
    } else if (pl != sl || memcmp(p, s, pl) != 0) {
      return false;
    }
    p += pl, s += sl;
  }
  return *p == '\0' && *s == '\0';
}

/* ---------- deferred responses ---------- */

static void resp_free(struct jb_http_resp *r) {
  free(r->body);
  r->body = NULL;
  if (r->stream.free) r->stream.free(r->stream.ctx);
  memset(&r->stream, 0, sizeof r->stream);
}

static void later_unref(struct jb_http_later *l) {
  pthread_mutex_lock(&l->lock);
  bool last = --l->refs == 0;
  pthread_mutex_unlock(&l->lock);
  if (!last) return;
  if (l->resp.stream.ctx == l) memset(&l->resp.stream, 0, sizeof l->resp.stream);
  resp_free(&l->resp);
  free(l->sbuf);
  pthread_mutex_destroy(&l->lock);
  free(l);
}

struct jb_http_later *jb_http_defer(const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_http_server *srv = req->srv;
  struct req_ctx *ctx = req->ctx;
  if (!srv || !ctx || ctx->later) return NULL;
  struct jb_http_later *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  pthread_mutex_init(&l->lock, NULL);
  l->refs = 2; /* the server's side and the answering side */
  l->conn = req->conn;
  l->srv = srv;
  pthread_mutex_lock(&srv->later_lock);
  l->next = srv->laters;
  if (l->next) l->next->prev = &l->next;
  l->prev = &srv->laters;
  srv->laters = l;
  pthread_mutex_unlock(&srv->later_lock);
  ctx->later = l;
  resp->later = l;
  return l;
}

void jb_http_later_answer(struct jb_http_later *l, struct jb_http_resp *resp) {
  pthread_mutex_lock(&l->lock);
  if (l->answered || l->abandoned) {
    pthread_mutex_unlock(&l->lock);
    resp_free(resp);
  } else {
    l->resp = *resp;
    l->resp.later = NULL;
    l->answered = true;
    if (l->suspended) {
      l->suspended = false;
      MHD_resume_connection(l->conn); /* MHD calls on_request again, which sends it */
    }
    pthread_mutex_unlock(&l->lock);
  }
  memset(resp, 0, sizeof *resp);
  later_unref(l);
}

/* The server's side lets go of `l` (its response queued, or the request ended). */
static void later_release(struct jb_http_server *srv, struct jb_http_later *l) {
  pthread_mutex_lock(&srv->later_lock);
  if (l->prev) {
    *l->prev = l->next;
    if (l->next) l->next->prev = l->prev;
    l->prev = NULL;
  }
  pthread_mutex_unlock(&srv->later_lock);
  pthread_mutex_lock(&l->lock);
  l->abandoned = true;
  if (l->suspended) { /* a stream waiting for its next bytes: it ends */
    l->suspended = false;
    MHD_resume_connection(l->conn);
  }
  pthread_mutex_unlock(&l->lock);
  later_unref(l);
}

/* ---------- streamed answers ---------- */

/* The reader of a streamed answer (jb_http_stream.read; HTTP thread): the queued bytes, the
 * end, or JB_HTTP_STREAM_WAIT with the connection suspended until more come. */
static long later_stream_read(void *ctx, char *buf, size_t max) {
  struct jb_http_later *l = ctx;
  pthread_mutex_lock(&l->lock);
  long n = 0;
  if (l->slen > l->soff) {
    size_t k = l->slen - l->soff < max ? l->slen - l->soff : max;
    memcpy(buf, l->sbuf + l->soff, k);
    l->soff += k;
    if (l->soff == l->slen) l->soff = l->slen = 0;
    n = (long)k;
  } else if (!l->stream_end && !l->abandoned) {
    l->suspended = true;
    MHD_suspend_connection(l->conn); /* allowed from a content reader (libmicrohttpd) */
    n = JB_HTTP_STREAM_WAIT;
  }
  pthread_mutex_unlock(&l->lock);
  return n;
}

/* The server is done with a streamed answer (sent, or the client went away): its side of
 * `l` is let go. */
static void later_stream_done(void *ctx) {
  struct jb_http_later *l = ctx;
  later_release(l->srv, l);
}

int jb_http_later_stream(struct jb_http_later *l, int status, const char *content_type) {
  pthread_mutex_lock(&l->lock);
  if (l->answered || l->abandoned) {
    pthread_mutex_unlock(&l->lock);
    return -1;
  }
  l->resp = (struct jb_http_resp){
      .status = status,
      .content_type = content_type,
      .stream = {.read = later_stream_read, .free = later_stream_done, .ctx = l}};
  l->answered = true;
  if (l->suspended) {
    l->suspended = false;
    MHD_resume_connection(l->conn);
  }
  pthread_mutex_unlock(&l->lock);
  return 0;
}

/* Queues `len` bytes for the reader; `cap`: refuse past STREAM_PENDING_MAX. Caller holds the
 * lock. 0 or -1. */
static int stream_queue(struct jb_http_later *l, const char *data, size_t len, bool cap) {
  if (l->abandoned) return -1;
  if (!len) return 0;
  if (cap && l->slen - l->soff + len > STREAM_PENDING_MAX) return -1;
  if (l->soff) { /* keep what waits at the front */
    memmove(l->sbuf, l->sbuf + l->soff, l->slen - l->soff);
    l->slen -= l->soff;
    l->soff = 0;
  }
  char *nb = realloc(l->sbuf, l->slen + len);
  if (!nb) return -1;
  memcpy(nb + l->slen, data, len);
  l->sbuf = nb;
  l->slen += len;
  if (l->suspended) {
    l->suspended = false;
    MHD_resume_connection(l->conn);
  }
  return 0;
}

int jb_http_later_push(struct jb_http_later *l, const char *data, size_t len) {
  pthread_mutex_lock(&l->lock);
  int rc = stream_queue(l, data, len, true);
  pthread_mutex_unlock(&l->lock);
  return rc;
}

void jb_http_later_end(struct jb_http_later *l, const char *data, size_t len) {
  pthread_mutex_lock(&l->lock);
  (void)stream_queue(l, data, len, false);
  l->stream_end = true;
  if (l->suspended) { /* the reader waits: for the end, now */
    l->suspended = false;
    MHD_resume_connection(l->conn);
  }
  pthread_mutex_unlock(&l->lock);
  later_unref(l);
}

/* ---------- request handling ---------- */

/* libmicrohttpd's content reader over a jb_http_stream. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  struct jb_http_stream *st = cls;
  long n = st->read(st->ctx, buf, max);
  if (n > 0) return (ssize_t)n;
  if (n == JB_HTTP_STREAM_WAIT) return 0; /* nothing now: the connection is suspended */
  return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls) {
  struct jb_http_stream *st = cls;
  if (st->free) st->free(st->ctx);
  free(st);
}

#define STREAM_BLOCK (64 * 1024) /* bytes asked of a stream at a time */

static enum MHD_Result send_resp(struct MHD_Connection *conn, struct req_ctx *ctx,
                                 struct jb_http_resp *r) {
  size_t len = r->body ? strlen(r->body) : 0;
  struct MHD_Response *m = NULL;
  if (r->stream.read) {
    free(r->body);
    r->body = NULL;
    struct jb_http_stream *st = malloc(sizeof *st);
    if (st) *st = r->stream;
    m = st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, st,
                                               stream_free)
           : NULL;
    if (!m) {
      if (r->stream.free) r->stream.free(r->stream.ctx);
      free(st);
      return MHD_NO;
    }
  } else {
    m = r->body ? MHD_create_response_from_buffer(len, r->body, MHD_RESPMEM_MUST_FREE)
                : MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
  }
  if (!m) {
    free(r->body);
    return MHD_NO;
  }
  r->body = NULL; /* owned by the response now */
  if (len || r->content_type || r->stream.read)
    MHD_add_response_header(m, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->content_type ? r->content_type : "application/json");
  MHD_add_response_header(m, "Cache-Control", "no-store");
  MHD_add_response_header(m, "X-Content-Type-Options", "nosniff");
  if (r->allow[0]) MHD_add_response_header(m, MHD_HTTP_HEADER_ALLOW, r->allow);
  if (r->status == 401) /* RFC 6750 §3 */
    MHD_add_response_header(m, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"jailbox\"");
  if (r->close) MHD_add_response_header(m, MHD_HTTP_HEADER_CONNECTION, "close");
  for (const char *const *h = r->headers; h && h[0] && h[1]; h += 2)
    MHD_add_response_header(m, h[0], h[1]);
  if (r->set_cookie[0]) MHD_add_response_header(m, MHD_HTTP_HEADER_SET_COOKIE, r->set_cookie);
  enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, m);
  MHD_destroy_response(m);
  ctx->answered = true;
  ctx->status = r->status;
  return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *conn, struct req_ctx *ctx, int status,
                                  const char *code, const char *msg, bool close) {
  struct jb_http_resp r = {.status = status, .close = close};
  jb_resp_error(&r, status, code, "%s", msg);
  return send_resp(conn, ctx, &r);
}

/* RFC 9110 §5.6.2 token characters. */
static bool is_tchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c && strchr("!#$%&'*+-.^_`|~", c));
}

struct header_scan {
  int total, content_length, transfer_encoding, host, authorization, content_type;
  size_t longest;
  bool bad_name; /* a name that is not a token (whitespace before ':', folding, controls) */
  bool framing_like; /* a name that starts like a framing header but is another one */
  const char *te; /* the Transfer-Encoding value */
  const char *cl; /* the Content-Length value */
};

static bool starts_with_ci(const char *s, const char *prefix) {
  return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
  struct header_scan *c = cls;
  c->total++;
  size_t l = strlen(key) + (value ? strlen(value) : 0);
  if (l > c->longest) c->longest = l;
  if (!key[0]) c->bad_name = true;
  for (const char *k = key; *k; k++)
    if (!is_tchar((unsigned char)*k)) c->bad_name = true;
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
    c->content_length++;
    c->cl = value;
  } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
    c->transfer_encoding++;
    c->te = value;
  } else if (starts_with_ci(key, "content-length") || starts_with_ci(key, "transfer-encoding")) {
    c->framing_like = true;
  }
  if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0) c->host++;
  if (strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION) == 0) c->authorization++;
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_TYPE) == 0) c->content_type++;
  return MHD_YES;
}

/* Is `te` exactly the chunked coding? Only that spelling (any case) is framed as chunked
 * by libmicrohttpd; anything else ("chunked " included) would be read as no body at all. */
static bool te_is_chunked(const char *te) { return strcasecmp(te, "chunked") == 0; }

/* A request target whose path holds an encoded '/', '\' or control byte is refused: routing
 * happens on the decoded path, and a segment must never split or end early after decoding. */
static bool raw_path_ok(const char *uri) {
  for (const char *p = uri; *p && *p != '?'; p++) {
    if ((unsigned char)*p < 0x21 || (unsigned char)*p == 0x7f) return false;
    if (*p != '%') continue;
    if (!isxdigit((unsigned char)p[1]) || !isxdigit((unsigned char)p[2])) return false;
    char hex[3] = {p[1], p[2], 0};
    unsigned v = (unsigned)strtoul(hex, NULL, 16);
    if (v < 0x20 || v == 0x7f || v == '/' || v == '\\') return false;
  }
  return true;
}

/* A well-formed "Bearer <token>" header, syntax only (the database decides the rest). */
int jb_http_credential(struct MHD_Connection *conn, const char *method, char *out, size_t len) {
  const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  int kind = 1;
  if (h) {
    if (strncasecmp(h, "Bearer ", 7) != 0) return 0;
    h += 7;
    while (*h == ' ' || *h == '\t') h++;
  } else {
    h = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, JB_CONSOLE_COOKIE);
    if (!h) return 0;
    const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, JB_CONSOLE_HEADER);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 && (!x || strcmp(x, "1") != 0))
      return -2;
    kind = 2;
  }
  size_t n = strcspn(h, " \t");
  if (n == 0 || n >= len) return 0;
  memcpy(out, h, n);
  out[n] = '\0';
  return kind;
}

const char *jb_http_cookie(const struct jb_http_req *req, const char *name) {
  return MHD_lookup_connection_value(req->conn, MHD_COOKIE_KIND, name);
}

/* Whether the request carries a credential of token syntax ("jbt_" + 43 characters); the
 * token, as "Bearer <token>", into `auth` (`len` bytes). */
static bool bearer_syntax_ok(struct MHD_Connection *conn, const char *method, char *auth,
                             size_t len) {
  char tok[64];
  if (jb_http_credential(conn, method, tok, sizeof tok) <= 0) return false;
  if (strlen(tok) != 47 || strncmp(tok, "jbt_", 4) != 0) return false;
  snprintf(auth, len, "Bearer %s", tok);
  return true;
}

static void dispatch(struct jb_http_server *srv, struct MHD_Connection *conn, const char *url,
                     const char *method, struct req_ctx *ctx, struct jb_http_resp *resp);

/* FNV-1a of the client's IP address (port excluded), as a slot of srv->share. */
static unsigned addr_slot(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  const struct sockaddr *sa = ci ? ci->client_addr : NULL;
  const unsigned char *b = NULL;
  size_t n = 0;
  if (sa && sa->sa_family == AF_INET) {
    b = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
    n = 4;
  } else if (sa && sa->sa_family == AF_INET6) {
    b = (const unsigned char *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
    n = 16;
  }
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
  return h % ADDR_SLOTS;
}

/* Reserves `grow` more body bytes for `ctx`: within the global budget and within a quarter
 * of it per client address. Returns false (nothing reserved) when either is exhausted. */
static bool reserve(struct jb_http_server *srv, struct req_ctx *ctx, long grow) {
  long per_addr = srv->opts.body_budget / 4;
  if (atomic_fetch_add(&srv->share[ctx->slot], grow) + grow > per_addr) {
    atomic_fetch_sub(&srv->share[ctx->slot], grow);
    return false;
  }
  if (atomic_fetch_add(&srv->buffered, grow) + grow > srv->opts.body_budget) {
    atomic_fetch_sub(&srv->buffered, grow);
    atomic_fetch_sub(&srv->share[ctx->slot], grow);
    return false;
  }
  return true;
}

static void release(struct jb_http_server *srv, struct req_ctx *ctx) {
  atomic_fetch_sub(&srv->buffered, (long)ctx->held);
  atomic_fetch_sub(&srv->share[ctx->slot], (long)ctx->held);
  ctx->held = 0;
}

/* Lets go of what a refused body held: its buffer and its share of the budget (the rest of it
 * is dropped as it comes). */
static void drop_body(struct jb_http_server *srv, struct req_ctx *ctx) {
  free(ctx->body);
  release(srv, ctx);
  ctx->body = NULL;
  ctx->len = ctx->cap = 0;
}

/* Whether `url` is the path of a route flagged JB_ROUTE_BODY. */
static bool takes_body(const struct jb_http_server *srv, const char *url) {
  char buf[2048];
  const char *params[JB_HTTP_MAX_PARAMS];
  int n;
  for (size_t i = 0; i < srv->n_routes; i++)
    if ((srv->routes[i].flags & JB_ROUTE_BODY) &&
        jb_route_match(srv->routes[i].pattern, url, buf, sizeof buf, params, &n))
      return true;
  return false;
}

/* Checks done once the headers are in and before any body byte is read (RFC 9112 §6: message
 * framing; §3.2: Host). Answers and sets ctx->answered when the request is refused. */
static enum MHD_Result check_headers(struct jb_http_server *srv, struct MHD_Connection *conn,
                                     struct req_ctx *ctx, const char *url, const char *version) {
  struct header_scan c = {0};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, scan_header, &c);
  bool http10 = version && strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
  if (c.bad_name || c.framing_like)
    return send_error(conn, ctx, 400, "bad_request", "malformed header name", true);
  if (c.content_length > 1 || (c.content_length && c.transfer_encoding) || c.transfer_encoding > 1)
    return send_error(conn, ctx, 400, "bad_request",
                      "conflicting Content-Length / Transfer-Encoding headers", true);
  if (c.content_length && (!c.cl || !c.cl[0]))
    return send_error(conn, ctx, 400, "bad_request", "empty Content-Length", true);
  if (c.transfer_encoding && http10)
    return send_error(conn, ctx, 400, "bad_request", "Transfer-Encoding in an HTTP/1.0 request",
                      true);
  if (c.transfer_encoding && !te_is_chunked(c.te ? c.te : ""))
    return send_error(conn, ctx, 501, "not_implemented",
                      "only the chunked transfer coding is supported", true);
  if ((!http10 && c.host != 1) || c.host > 1)
    return send_error(conn, ctx, 400, "bad_request", "exactly one Host header is required", true);
  if (c.authorization > 1 || c.content_type > 1)
    return send_error(conn, ctx, 400, "bad_request", "a single-valued header appears twice", true);
  if (c.total > JB_HTTP_MAX_HEADERS)
    return send_error(conn, ctx, 431, "headers_too_large", "more than 100 request headers", true);
  if (c.longest > JB_HTTP_MAX_HEADER_BYTES)
    return send_error(conn, ctx, 431, "headers_too_large", "a request header is over 8 KiB", true);
  if (ctx->raw_uri && !raw_path_ok(ctx->raw_uri))
    return send_error(conn, ctx, 400, "bad_request",
                      "the path holds an encoded '/', '\\\\' or control character", true);
  bool has_body = c.transfer_encoding > 0;
  if (c.cl) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(c.cl, &end, 10);
    if (errno || end == c.cl || *end) /* MHD refuses these itself; be safe */
      return send_error(conn, ctx, 400, "bad_request", "bad Content-Length", true);
    if (v > (unsigned long long)srv->opts.max_body * DISCARD_FACTOR) {
      char m[96];
      snprintf(m, sizeof m, "request body over the limit of %ld bytes", srv->opts.max_body);
      return send_error(conn, ctx, 413, "payload_too_large", m, true);
    }
    /* a moderate excess is read and dropped, so that the client sees the 413 instead of a
     * reset connection */
    if (v > (unsigned long long)srv->opts.max_body) ctx->too_large = true;
    has_body = v > 0;
    ctx->declared = (size_t)v;
  }
  if (!has_body) return MHD_YES;
  /* Only API requests take bodies, and only from a client whose token the application
   * accepts (a database lookup): nothing is buffered for anybody else. */
  if (strncmp(url, "/v1/", 4) != 0 && !takes_body(srv, url)) {
    struct jb_http_resp resp = {.status = 500, .close = true};
    dispatch(srv, conn, url, ctx->method, ctx, &resp); /* 404 / 405, without reading the body */
    resp.close = true;
    return send_resp(conn, ctx, &resp);
  }
  char auth[80];
  if (!bearer_syntax_ok(conn, ctx->method, auth, sizeof auth) ||
      (srv->opts.authorize_body && !srv->opts.authorize_body(srv->app, auth)))
    return send_error(conn, ctx, 401, "unauthorized", "missing, malformed or unknown bearer token",
                      true);
  return MHD_YES;
}

static void dispatch(struct jb_http_server *srv, struct MHD_Connection *conn, const char *url,
                     const char *method, struct req_ctx *ctx, struct jb_http_resp *resp) {
  char buf[2048];
  struct jb_http_req req = {.conn = conn,
                            .srv = srv,
                            .ctx = ctx,
                            .method = method,
                            .path = url,
                            .body = ctx->body,
                            .body_len = ctx->len};
  bool path_known = false;
  char allow[64] = "";
  for (size_t i = 0; i < srv->n_routes; i++) {
    const struct jb_route *r = &srv->routes[i];
    const char *params[JB_HTTP_MAX_PARAMS];
    int n;
    if (!jb_route_match(r->pattern, url, buf, sizeof buf, params, &n)) continue;
    path_known = true;
    if (strcmp(r->method, method) == 0) {
      memcpy(req.params, params, sizeof params);
      req.n_params = n;
      resp->status = 200;
      r->fn(srv->app, &req, resp);
      return;
    }
    size_t al = strlen(allow);
    if (!strstr(allow, r->method))
      snprintf(allow + al, sizeof allow - al, "%s%s", al ? ", " : "", r->method);
  }
  if (path_known) {
    jb_resp_error(resp, 405, "method_not_allowed", "%s is not allowed on this path", method);
    snprintf(resp->allow, sizeof resp->allow, "%s", allow);
  } else {
    jb_resp_error(resp, 404, "not_found", "no such route");
  }
}

/* A deferred request: its response when it has come (then the server lets go of it), else the
 * connection suspended until jb_http_later_answer resumes it. */
static enum MHD_Result later_send(struct jb_http_server *srv, struct MHD_Connection *conn,
                                  struct req_ctx *ctx) {
  struct jb_http_later *l = ctx->later;
  pthread_mutex_lock(&l->lock);
  if (!l->answered) {
    l->suspended = true;
    MHD_suspend_connection(conn);
    pthread_mutex_unlock(&l->lock);
    return MHD_YES;
  }
  struct jb_http_resp resp = l->resp;
  memset(&l->resp, 0, sizeof l->resp);
  pthread_mutex_unlock(&l->lock);
  ctx->later = NULL;
  /* a streamed answer keeps the server's side of `l` until it is done (later_stream_done) */
  if (resp.stream.ctx != l) later_release(srv, l);
  if (resp.status == 0) resp.status = 500;
  if (resp.status == 500 && !resp.body && !resp.stream.read)
    jb_resp_error(&resp, 500, "internal", "internal error");
  return send_resp(conn, ctx, &resp);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  struct jb_http_server *srv = cls;
  struct req_ctx *ctx = *con_cls;
  if (!ctx) return MHD_NO; /* the URI callback could not allocate it */
  if (!ctx->method[0]) { /* first call: headers complete, no body byte read yet */
    snprintf(ctx->method, sizeof ctx->method, "%s", method);
    ctx->slot = addr_slot(conn);
    size_t i = 0;
    for (; url[i] && i + 1 < sizeof ctx->path; i++)
      ctx->path[i] = ((unsigned char)url[i] < 0x20 || (unsigned char)url[i] > 0x7e) ? '?' : url[i];
    ctx->path[i] = '\0';
    enum MHD_Result r = check_headers(srv, conn, ctx, url, version);
    /* after the header checks, which may wait on the database (the token): that wait is ours,
     * not the client's */
    clock_gettime(CLOCK_MONOTONIC, &ctx->body_start);
    return r;
  }
  if (ctx->answered) {
    *upload_data_size = 0; /* discard the rest of a refused body */
    return MHD_YES;
  }
  if (ctx->later) return later_send(srv, conn, ctx);
  if (*upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    /* MHD takes no response while a body is being received: a client this slow is cut off —
     * also one whose body is being dropped (over the limit or the budget), which a trickle of
     * bytes would otherwise keep open past the idle timeout */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - ctx->body_start.tv_sec > srv->opts.timeout_s * 2) {
      ctx->status = 408;
      jb_log(JB_LOG_WARN, "request body too slow: connection closed", "method", ctx->method, "path",
             ctx->path, NULL);
      return MHD_NO;
    }
    if (ctx->too_large || ctx->busy) {
      ctx->discarded += n;
      if (ctx->discarded > (size_t)srv->opts.max_body * DISCARD_FACTOR) {
        char m[96];
        snprintf(m, sizeof m, "request body over the limit of %ld bytes", srv->opts.max_body);
        return send_error(conn, ctx, 413, "payload_too_large", m, true);
      }
      return MHD_YES;
    }
    if (ctx->len + n > (size_t)srv->opts.max_body) {
      ctx->too_large = true;
      drop_body(srv, ctx);
      return MHD_YES;
    }
    if (ctx->len + n + 1 > ctx->cap) {
      size_t cap = ctx->cap ? ctx->cap : 1024;
      while (cap < ctx->len + n + 1) cap *= 2;
      if (ctx->declared && ctx->declared + 1 >= ctx->len + n + 1)
        cap = ctx->declared + 1; /* exact */
      if (cap > (size_t)srv->opts.max_body + 1) cap = (size_t)srv->opts.max_body + 1;
      long grow = (long)(cap - ctx->held);
      bool reserved = reserve(srv, ctx, grow);
      char *nb = reserved ? realloc(ctx->body, cap) : NULL;
      if (!nb) {
        if (reserved) {
          atomic_fetch_sub(&srv->buffered, grow);
          atomic_fetch_sub(&srv->share[ctx->slot], grow);
        }
        /* the rest is dropped and 503 answered at the end: MHD takes no response mid-body */
        ctx->busy = true;
        drop_body(srv, ctx);
        ctx->discarded = n;
        return MHD_YES;
      }
      ctx->held = cap;
      ctx->body = nb;
      ctx->cap = cap;
    }
    memcpy(ctx->body + ctx->len, upload_data, n);
    ctx->len += n;
    ctx->body[ctx->len] = '\0';
    return MHD_YES;
  }
  if (ctx->too_large) {
    char m[96];
    snprintf(m, sizeof m, "request body over the limit of %ld bytes", srv->opts.max_body);
    return send_error(conn, ctx, 413, "payload_too_large", m, true);
  }
  if (ctx->busy)
    return send_error(conn, ctx, 503, "busy", "too many request bodies in flight; try again", true);
  struct jb_http_resp resp = {.status = 500};
  dispatch(srv, conn, url, method, ctx, &resp);
  if (resp.later) { /* jb_http_defer: the answer comes from another thread */
    free(resp.body);
    return later_send(srv, conn, ctx);
  }
  if (resp.status == 500 && !resp.body) jb_resp_error(&resp, 500, "internal", "internal error");
  return send_resp(conn, ctx, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  struct jb_http_server *srv = cls;
  struct req_ctx *ctx = *con_cls;
  if (!ctx) return;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  double ms = (double)(now.tv_sec - ctx->start.tv_sec) * 1e3 +
              (double)(now.tv_nsec - ctx->start.tv_nsec) / 1e6;
  json_t *f = json_pack("{s:s%,s:s%,s:i,s:f,s:b}", "method", ctx->method, strlen(ctx->method),
                        "path", ctx->path, strlen(ctx->path), "status", ctx->status, "ms", ms,
                        "completed", toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
  jb_log_json(JB_LOG_DEBUG, "request", f);
  if (ctx->later) later_release(srv, ctx->later);
  release(srv, ctx);
  free(ctx->body);
  free(ctx->raw_uri);
  free(ctx);
  *con_cls = NULL;
  atomic_fetch_sub(&srv->inflight, 1);
}

/* MHD_OPTION_URI_LOG_CALLBACK: runs first for every request, with the request target as
 * sent. Its return value becomes the request's context. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
  struct jb_http_server *srv = cls;
  struct req_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return NULL;
  clock_gettime(CLOCK_MONOTONIC, &ctx->start);
  ctx->raw_uri = strndup(uri ? uri : "", 8192);
  atomic_fetch_add(&srv->inflight, 1);
  return ctx;
}

__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap) {
  char m[512];
  vsnprintf(m, sizeof m, fmt, ap);
  m[strcspn(m, "\n")] = '\0';
  jb_log(JB_LOG_WARN, "http", "detail", m, NULL);
}

static int bind_listen(const char *listen_addr, int *port_out, jb_error *err) {
  char host[256];
  int port;
  if (jb_parse_listen(listen_addr, host, sizeof host, &port, err) < 0) return -1;
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  char ps[8];
  snprintf(ps, sizeof ps, "%d", port);
  int rc = getaddrinfo(host, ps, &hints, &res);
  if (rc) return jb_fail(err, EINVAL, "listen address %s: %s", listen_addr, gai_strerror(rc));
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return jb_fail_errno(err, errno, "socket");
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
    int e = errno;
    freeaddrinfo(res);
    close(fd);
    return jb_fail_errno(err, e, "listen on %s", listen_addr);
  }
  freeaddrinfo(res);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

int jb_http_start(struct jb_http_server **out, const char *listen_addr,
                  const struct jb_route *routes, size_t n, void *app,
                  const struct jb_http_opts *opts, jb_error *err) {
  struct jb_http_server *srv = calloc(1, sizeof *srv);
  if (!srv) return jb_fail(err, ENOMEM, "out of memory");
  srv->routes = routes;
  srv->n_routes = n;
  srv->app = app;
  srv->opts = *opts;
  atomic_init(&srv->inflight, 0);
  atomic_init(&srv->buffered, 0);
  pthread_mutex_init(&srv->later_lock, NULL);
  for (size_t i = 0; i < ADDR_SLOTS; i++) atomic_init(&srv->share[i], 0);
  srv->listen_fd = bind_listen(listen_addr, &srv->port, err);
  if (srv->listen_fd < 0) {
    free(srv);
    return -1;
  }
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC |
                   MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  srv->mhd = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
      MHD_OPTION_LISTEN_SOCKET, srv->listen_fd, MHD_OPTION_THREAD_POOL_SIZE,
      (unsigned)opts->threads, MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)opts->max_conns_per_ip,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_CONNECTION_TIMEOUT,
      (unsigned)opts->timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024),
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096, MHD_OPTION_END);
  if (!srv->mhd) {
    close(srv->listen_fd);
    free(srv);
    return jb_fail(err, EIO, "cannot start the HTTP server on %s", listen_addr);
  }
  *out = srv;
  return 0;
}

int jb_http_port(const struct jb_http_server *srv) { return srv->port; }

void jb_http_drain(struct jb_http_server *srv, long grace_ms) {
  if (!srv) return;
  MHD_quiesce_daemon(srv->mhd); /* no new connections from here on */
  close(srv->listen_fd);
  struct timespec step = {0, 10 * 1000000};
  for (long waited = 0; atomic_load(&srv->inflight) > 0 && waited < grace_ms; waited += 10)
    nanosleep(&step, NULL);
  long left = atomic_load(&srv->inflight);
  if (left > 0) {
    char n[24];
    snprintf(n, sizeof n, "%ld", left);
    jb_log(JB_LOG_WARN, "shutdown grace over; closing requests in flight", "requests", n, NULL);
  }
  /* deferred requests still waiting: 503, and their connections resumed (libmicrohttpd must
   * not be stopped with suspended connections); answers that come later are dropped */
  pthread_mutex_lock(&srv->later_lock);
  bool resumed = false;
  for (struct jb_http_later *l = srv->laters; l; l = l->next) {
    pthread_mutex_lock(&l->lock);
    if (!l->answered) {
      l->answered = true;
      l->resp.status = 503;
      l->resp.close = true;
      l->resp.body = jb_error_body("draining", "the server is shutting down; try again");
      l->resp.content_type = "application/json";
    }
    l->abandoned = true;
    if (l->suspended) {
      l->suspended = false;
      MHD_resume_connection(l->conn);
      resumed = true;
    }
    pthread_mutex_unlock(&l->lock);
  }
  pthread_mutex_unlock(&srv->later_lock);
  if (resumed) { /* a moment for the 503s to go out */
    struct timespec t = {0, 200 * 1000000};
    nanosleep(&t, NULL);
  }
  MHD_stop_daemon(srv->mhd);
  pthread_mutex_destroy(&srv->later_lock);
  free(srv);
}
