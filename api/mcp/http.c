/* mcp_http.c — MCP Streamable HTTP on POST /mcp (see mcp_http.h). */
#define _GNU_SOURCE
#include "api/mcp/http.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/core/mcp.h"
#include "api/core/ops.h"
#include "api/core/auth.h"
#include "api/http/door.h"
#include "lib/json.h"
#include "lib/log.h"
#include "server/app.h"
#include "server/config.h"

#define MCP_JSON_DEPTH 64

/* Sessions whose agent's arrival this process already handled (jb_op_agent_arrived): a
 * session leaves awaiting_agent only forwards, so one attempt per process is enough. A slot
 * overwritten by another session only costs that session one more attempt. */
#define ARRIVED_SLOTS 1024
static struct {
  pthread_mutex_t lock;
  char job[ARRIVED_SLOTS][129];
} arrived = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t arrived_slot(const char *job) {
  size_t h = 5381;
  for (const char *p = job; *p; p++) h = h * 33 + (unsigned char)*p;
  return h % ARRIVED_SLOTS;
}

static void agent_arrived(struct jb_app *app, PGconn *c, const char *job) {
  size_t i = arrived_slot(job);
  pthread_mutex_lock(&arrived.lock);
  bool known = !strcmp(arrived.job[i], job);
  pthread_mutex_unlock(&arrived.lock);
  if (known) return;
  jb_op_agent_arrived(c, app, job); /* quiet unless the session awaits its agent */
  pthread_mutex_lock(&arrived.lock);
  snprintf(arrived.job[i], sizeof arrived.job[i], "%s", job);
  pthread_mutex_unlock(&arrived.lock);
}

/* ---------- header checks ---------- */

/* Whether the host of origin `o` ("scheme://host[:port]") is a loopback name. */
static bool loopback_origin(const char *o) {
  const char *h = strstr(o, "://");
  if (!h) return false;
  h += 3;
  size_t n = h[0] == '[' ? strcspn(h, "]") + 1 : strcspn(h, ":/");
  if (n == 9 && !strncasecmp(h, "localhost", 9)) return true;
  if (n == 5 && !strncmp(h, "[::1]", 5)) return true;
  if (n >= 9 && !strncmp(h, "127.", 4)) {
    for (size_t i = 4; i < n; i++)
      if (!isdigit((unsigned char)h[i]) && h[i] != '.') return false;
    return true;
  }
  return false;
}

/* 2026-07-28 streamable-http "Security & Endpoint": an Origin header that is present must be
 * valid. Valid: a loopback origin (a local client), or one listed in `allowed`. */
static bool origin_ok(const char *origin, const char *allowed) {
  if (!origin) return true;
  if (strncasecmp(origin, "http://", 7) && strncasecmp(origin, "https://", 8)) return false;
  if (loopback_origin(origin)) return true;
  size_t ol = strlen(origin);
  for (const char *p = allowed ? allowed : ""; *p;) {
    while (*p == ' ' || *p == ',') p++;
    size_t n = strcspn(p, ",");
    size_t m = n;
    while (m && p[m - 1] == ' ') m--;
    if (m && m == ol && !strncasecmp(p, origin, m)) return true;
    p += n;
  }
  return false;
}

/* Whether media range list `accept` (RFC 9110 §12.5.1) names `type` ("application/json"), its
 * family `family` ("application/" and a star) or, when `any`, every type (star/star) — with
 * a q-value above 0. No header admits anything when `any`. */
static bool accepts(const char *accept, const char *type, const char *family, bool any) {
  if (!accept) return any;
  size_t tl = strlen(type), fl = strlen(family);
  for (const char *p = accept; *p;) {
    while (*p == ' ' || *p == ',') p++;
    size_t n = strcspn(p, ",;");
    size_t m = n;
    while (m && (p[m - 1] == ' ' || p[m - 1] == '\t')) m--;
    if ((m == tl && !strncasecmp(p, type, tl)) || (m == fl && !strncasecmp(p, family, fl)) ||
        (any && m == 3 && !strncmp(p, "*/*", 3))) {
      /* q=0 means "not acceptable" */
      const char *q = p + n;
      if (*q == ';') {
        const char *end = q + strcspn(q, ",");
        const char *qq = strcasestr(q, "q=");
        if (qq && qq < end && strtod(qq + 2, NULL) == 0.0) goto next;
      }
      return true;
    }
  next:
    p += strcspn(p, ",");
  }
  return false;
}

static bool accepts_json(const char *accept) {
  return accepts(accept, "application/json", "application/*", true);
}

/* Whether the client takes a text/event-stream answer (named, not by star/star: Streamable
 * HTTP clients list it beside application/json). */
static bool accepts_sse(const char *accept) {
  return accepts(accept, "text/event-stream", "text/*", false);
}

static bool content_type_json(const char *ct) {
  if (!ct) return false;
  size_t n = strcspn(ct, ";");
  while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
  return n == 16 && !strncasecmp(ct, "application/json", 16);
}

/* ---------- answers ---------- */

static void reply_json(struct jb_http_resp *resp, int status, json_t *reply) {
  if (!reply) { /* an accepted notification: 202, no body; a refused one: the status alone */
    free(resp->body);
    resp->body = NULL;
    resp->status = status;
    resp->content_type = NULL;
    return;
  }
  jb_resp_json(resp, status, reply);
}

/* A tools/call, run on a socket handler thread while its connection is suspended. */
struct http_call {
  struct jb_app *app;
  json_t *msg; /* holds what `r` borrows */
  struct jb_mcp_req r;
  char job[129];
  struct jb_http_later *later;
  bool sse; /* the client takes text/event-stream: progress goes out as SSE events */
  bool streaming; /* the answer became an event stream (at the first notification) */
};

/* `msg` (stolen) as one server-sent event "message" (HTML Living Standard §9.2.6; MCP
 * Streamable HTTP, "Sending Messages to the Server": the answer to a POST may be an SSE
 * stream of the request's notifications and then its response). Compact JSON has no line
 * breaks, so one data line carries it. NULL on OOM. */
static char *sse_event(json_t *msg, size_t *len) {
  char *line = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
  json_decref(msg);
  if (!line) return NULL;
  char *ev = NULL;
  int n = asprintf(&ev, "event: message\ndata: %s\n\n", line);
  free(line);
  if (n < 0) return NULL;
  *len = (size_t)n;
  return ev;
}

/* jb_progress_sink: the first notification turns the answer into an event stream. */
static int sse_send(void *ctx, json_t *msg) {
  struct http_call *hc = ctx;
  size_t len = 0;
  char *ev = sse_event(msg, &len);
  if (!ev) return -1;
  int rc = 0;
  if (!hc->streaming) {
    rc = jb_http_later_stream(hc->later, 200, "text/event-stream");
    hc->streaming = rc == 0;
  }
  if (rc == 0) rc = jb_http_later_push(hc->later, ev, len);
  free(ev);
  return rc;
}

static void http_call_run(void *arg, bool run) {
  struct http_call *hc = arg;
  struct jb_http_resp resp = {0};
  if (run) {
    int status = 200;
    const struct jb_progress_sink sink = {.send = sse_send, .ctx = hc};
    json_t *reply =
        jb_mcp_answer(&hc->r, hc->app, hc->job, jb_op_tool, NULL, hc->sse ? &sink : NULL, &status);
    if (hc->streaming) { /* the response is the stream's last event */
      size_t len = 0;
      char *ev = sse_event(reply, &len);
      jb_http_later_end(hc->later, ev, ev ? len : 0);
      free(ev);
      json_decref(hc->msg);
      free(hc);
      return;
    }
    reply_json(&resp, status, reply);
  } else {
    reply_json(
        &resp, 503,
        jb_mcp_error_reply(hc->r.id, JB_MCP_UNAVAILABLE, "the server is shutting down; try again",
                           json_pack("{s:s}", "reason", "unavailable")));
  }
  jb_http_later_answer(hc->later, &resp);
  json_decref(hc->msg);
  free(hc);
}

/* Hands request `r` of `msg` to a socket handler thread, the response deferred. */
static void run_later(struct jb_app *app, const struct jb_http_req *req, struct jb_http_resp *resp,
                      json_t *msg, const struct jb_mcp_req *r, const char *job) {
  struct http_call *hc = calloc(1, sizeof *hc);
  struct jb_http_later *l = hc ? jb_http_defer(req, resp) : NULL;
  if (!l) {
    free(hc);
    reply_json(resp, 503,
               jb_mcp_error_reply(r->id, JB_MCP_UNAVAILABLE, "server busy; try again",
                                  json_pack("{s:s}", "reason", "unavailable")));
    return;
  }
  hc->app = app;
  hc->msg = json_incref(msg);
  hc->r = *r;
  hc->r.version = NULL; /* may point into the request's headers */
  hc->later = l;
  hc->sse = accepts_sse(jb_http_header(req, "Accept"));
  snprintf(hc->job, sizeof hc->job, "%s", job);
  if (jb_app_run(app, http_call_run, hc) == 0) return;
  struct jb_http_resp busy = {0};
  reply_json(&busy, 503,
             jb_mcp_error_reply(r->id, JB_MCP_UNAVAILABLE, "server busy; try again",
                                json_pack("{s:s}", "reason", "unavailable")));
  jb_http_later_answer(l, &busy);
  json_decref(hc->msg);
  free(hc);
}

void jb_api_mcp_post(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  if (!origin_ok(jb_http_header(req, "Origin"), app->cfg->mcp_allowed_origins)) {
    reply_json(resp, 403,
               jb_mcp_error_reply(NULL, -32600,
                                  "Forbidden: this Origin may not use the MCP endpoint (DNS "
                                  "rebinding protection; see JAILBOX_MCP_ALLOWED_ORIGINS)",
                                  NULL));
    return;
  }
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    jb_db_unavailable(resp, &err);
    return;
  }
  struct jb_principal who;
  if (jb_auth_require(app, c, req, NULL, JB_ROLE_AGENT, &who, resp) < 0) {
    jb_db_release(app->db, c);
    return;
  }
  if (!accepts_json(jb_http_header(req, "Accept"))) {
    jb_db_release(app->db, c);
    jb_resp_error(resp, 406, "not_acceptable",
                  "this endpoint answers application/json: list it in Accept");
    return;
  }
  if (!content_type_json(jb_http_header(req, "Content-Type"))) {
    jb_db_release(app->db, c);
    jb_resp_error(resp, 415, "unsupported_media_type",
                  "send one JSON-RPC message as Content-Type: application/json");
    return;
  }
  const char *b = req->body ? req->body : "";
  size_t skip = strspn(b, " \t\r\n");
  json_t *msg = NULL;
  if (b[skip] == '[') {
    msg = json_array(); /* a batch: jb_mcp_check refuses it */
  } else {
    msg = jb_json_parse_object(b, req->body_len, MCP_JSON_DEPTH, &err);
    if (!msg) {
      jb_db_release(app->db, c);
      char m[300];
      snprintf(m, sizeof m, "Parse error: %s", err.msg);
      reply_json(resp, 400, jb_mcp_error_reply(NULL, -32700, m, NULL));
      return;
    }
  }
  const struct jb_mcp_transport t = {.http = true,
                                     .version = jb_http_header(req, "MCP-Protocol-Version"),
                                     .method = jb_http_header(req, "Mcp-Method"),
                                     .name = jb_http_header(req, "Mcp-Name")};
  struct jb_mcp_req r;
  json_t *reply = NULL;
  int status = 200;
  if (!jb_mcp_check(msg, &t, &r, &reply, &status)) {
    jb_db_release(app->db, c);
    reply_json(resp, status, reply);
    json_decref(msg);
    return;
  }
  agent_arrived(app, c, who.job_id);
  jb_db_release(app->db, c);
  if (jb_mcp_may_block(&r)) {
    run_later(app, req, resp, msg, &r, who.job_id);
  } else {
    reply = jb_mcp_answer(&r, app, who.job_id, NULL, NULL, NULL, &status);
    reply_json(resp, status, reply);
  }
  json_decref(msg);
}
