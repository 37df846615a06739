/* http.c — the libmicrohttpd front of jailboxd (see http.h). */
#define _GNU_SOURCE
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/config.h"
#include "server/log.h"

struct jb_http_server {
  struct MHD_Daemon *mhd;
  int listen_fd;
  int port;
  const struct jb_route *routes;
  size_t n_routes;
  void *app;
  long max_body;
  atomic_long inflight; /* requests between first callback and completion */
};

/* A body over the limit is read and dropped up to this many times the limit before the
 * answer (so that clients still sending see the 413); past it the connection is closed. */
#define DISCARD_FACTOR 8

/* Per-request state, kept in MHD's con_cls. */
struct req_ctx {
  struct timespec start;
  char *body;
  size_t len, cap;
  bool too_large;      /* over the limit: the rest is dropped, then 413 */
  size_t discarded;    /* bytes dropped so far */
  bool answered;
  int status;
  char method[16];
  char path[160]; /* for the log line, cut */
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

/* ---------- request handling ---------- */

static enum MHD_Result send_resp(struct MHD_Connection *conn, struct req_ctx *ctx,
                                 struct jb_http_resp *r) {
  size_t len = r->body ? strlen(r->body) : 0;
  struct MHD_Response *m =
      MHD_create_response_from_buffer(len, r->body ? r->body : (char *)"", MHD_RESPMEM_MUST_FREE);
  if (!m) {
    free(r->body);
    return MHD_NO;
  }
  r->body = NULL; /* owned by the response now */
  if (len || r->content_type)
    MHD_add_response_header(m, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->content_type ? r->content_type : "application/json");
  MHD_add_response_header(m, "Cache-Control", "no-store");
  MHD_add_response_header(m, "X-Content-Type-Options", "nosniff");
  if (r->allow[0]) MHD_add_response_header(m, MHD_HTTP_HEADER_ALLOW, r->allow);
  if (r->status == 401) /* RFC 6750 §3 */
    MHD_add_response_header(m, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"jailbox\"");
  if (r->close) MHD_add_response_header(m, MHD_HTTP_HEADER_CONNECTION, "close");
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

struct header_counts {
  int total, content_length, transfer_encoding;
  size_t longest;
};

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
  struct header_counts *c = cls;
  c->total++;
  size_t l = strlen(key) + (value ? strlen(value) : 0);
  if (l > c->longest) c->longest = l;
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) c->content_length++;
  if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) c->transfer_encoding++;
  return MHD_YES;
}

/* Checks done once the headers are in and before any body byte is read. Returns MHD_YES
 * with ctx->answered set when it answered, MHD_YES otherwise. */
static enum MHD_Result check_headers(struct jb_http_server *srv, struct MHD_Connection *conn,
                                     struct req_ctx *ctx) {
  struct header_counts c = {0};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, count_header, &c);
  if (c.content_length > 1 || (c.content_length && c.transfer_encoding) || c.transfer_encoding > 1)
    return send_error(conn, ctx, 400, "bad_request",
                      "conflicting Content-Length / Transfer-Encoding headers", true);
  if (c.total > JB_HTTP_MAX_HEADERS)
    return send_error(conn, ctx, 431, "headers_too_large", "more than 100 request headers", true);
  if (c.longest > JB_HTTP_MAX_HEADER_BYTES)
    return send_error(conn, ctx, 431, "headers_too_large", "a request header is over 8 KiB", true);
  const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (cl) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(cl, &end, 10);
    if (errno || end == cl || *end) /* MHD refuses these itself; be safe */
      return send_error(conn, ctx, 400, "bad_request", "bad Content-Length", true);
    if (v > (unsigned long long)srv->max_body * DISCARD_FACTOR) {
      char m[96];
      snprintf(m, sizeof m, "request body over the limit of %ld bytes", srv->max_body);
      return send_error(conn, ctx, 413, "payload_too_large", m, true);
    }
    /* a moderate excess is read and dropped, so that the client sees the 413 instead of a
     * reset connection */
    if (v > (unsigned long long)srv->max_body) ctx->too_large = true;
  }
  return MHD_YES;
}

static void dispatch(struct jb_http_server *srv, struct MHD_Connection *conn, const char *url,
                     const char *method, struct req_ctx *ctx, struct jb_http_resp *resp) {
  char buf[2048];
  struct jb_http_req req = {.conn = conn, .method = method, .path = url, .body = ctx->body,
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

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  struct jb_http_server *srv = cls;
  struct req_ctx *ctx = *con_cls;
  if (!ctx) {
    ctx = calloc(1, sizeof *ctx);
    if (!ctx) return MHD_NO;
    clock_gettime(CLOCK_MONOTONIC, &ctx->start);
    snprintf(ctx->method, sizeof ctx->method, "%s", method);
    snprintf(ctx->path, sizeof ctx->path, "%s", url);
    *con_cls = ctx;
    atomic_fetch_add(&srv->inflight, 1);
    return check_headers(srv, conn, ctx);
  }
  if (ctx->answered) {
    *upload_data_size = 0; /* discard the rest of a refused body */
    return MHD_YES;
  }
  if (*upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    if (ctx->too_large) {
      ctx->discarded += n;
      if (ctx->discarded > (size_t)srv->max_body * DISCARD_FACTOR) {
        char m[96];
        snprintf(m, sizeof m, "request body over the limit of %ld bytes", srv->max_body);
        return send_error(conn, ctx, 413, "payload_too_large", m, true);
      }
      return MHD_YES;
    }
    if (ctx->len + n > (size_t)srv->max_body) {
      ctx->too_large = true;
      free(ctx->body);
      ctx->body = NULL;
      ctx->len = 0;
      return MHD_YES;
    }
    if (ctx->len + n + 1 > ctx->cap) {
      size_t cap = ctx->cap ? ctx->cap : 1024;
      while (cap < ctx->len + n + 1) cap *= 2;
      char *nb = realloc(ctx->body, cap);
      if (!nb) return MHD_NO;
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
    snprintf(m, sizeof m, "request body over the limit of %ld bytes", srv->max_body);
    return send_error(conn, ctx, 413, "payload_too_large", m, true);
  }
  struct jb_http_resp resp = {.status = 500};
  dispatch(srv, conn, url, method, ctx, &resp);
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
  free(ctx->body);
  free(ctx);
  *con_cls = NULL;
  atomic_fetch_sub(&srv->inflight, 1);
}

__attribute__((format(printf, 2, 0)))
static void mhd_log(void *cls, const char *fmt, va_list ap) {
  char m[512];
  vsnprintf(m, sizeof m, fmt, ap);
  m[strcspn(m, "\n")] = '\0';
  jb_log(JB_LOG_WARN, "http", "detail", m, NULL);
}

static int bind_listen(const char *listen_addr, int *port_out, jb_error *err) {
  char host[256];
  int port;
  if (jb_parse_listen(listen_addr, host, sizeof host, &port, err) < 0) return -1;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
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
                  const struct jb_route *routes, size_t n, void *app, long max_body, int threads,
                  jb_error *err) {
  struct jb_http_server *srv = calloc(1, sizeof *srv);
  if (!srv) return jb_fail(err, ENOMEM, "out of memory");
  srv->routes = routes;
  srv->n_routes = n;
  srv->app = app;
  srv->max_body = max_body;
  atomic_init(&srv->inflight, 0);
  srv->listen_fd = bind_listen(listen_addr, &srv->port, err);
  if (srv->listen_fd < 0) {
    free(srv);
    return -1;
  }
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
  srv->mhd = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, srv,
      MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
      MHD_OPTION_LISTEN_SOCKET, srv->listen_fd,
      MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024),
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096,
      MHD_OPTION_END);
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
  MHD_stop_daemon(srv->mhd);
  free(srv);
}
