/* socket.c — Socket.IO roles and event handlers (see socket.h): CONNECT with auth {token};
 * buyers join their session's room and send the controls of api/core/controls.h
 * (jailbox:pause/resume/abort/accept/mode/pre_scan_done/approve/reject/kill/rule_add/
 * rule_revoke/effects_clear/rollback; and jailbox:changeset, a changeset's files), checked against the same schemas as the REST forms and answered through the
 * ack with {ok:true,…} or {error:{code,message}} — the same rules, codes and state machine
 * (db/sessions.h) as api/rest/; an ended session's buyer is read-only (the snapshot; controls
 * answer invalid_state); agents are bound to their session and speak MCP (JSON-RPC 2.0) on the
 * `mcp` event; bus events fan out to the sockets of their session. */
#define _GNU_SOURCE
#include "api/socket/socket_private.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/auth.h"
#include "api/core/changeset.h"
#include "api/core/controls.h"
#include "api/core/mcp.h"
#include "api/core/ops.h"
#include "api/core/reply.h"
#include "db/db.h"
#include "db/sessions.h"
#include "lib/log.h"
#include "lib/token.h"
#include "server/ws.h"

#define PENDING_ON_CONNECT 500 /* pending approvals sent to a buyer that (re)connects */

/* One per process: the bus keeps a pointer to it for the process lifetime (the bus has no
 * unsubscribe), so it is never freed. */
static struct jb_socket the_socket = {.lock = PTHREAD_RWLOCK_INITIALIZER};

/* ---------- answers ---------- */

/* [ {error:{code,message}} ] — a new reference. */
static json_t *fail(const char *code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *fail(const char *code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return json_pack("[{s:{s:s,s:s}}]", "error", "code", code, "message", msg);
}

/* ---------- CONNECT ---------- */

/* Whether `origin` (RFC 6454 serialization, "scheme://host[:port]") may connect with the
 * console's cookie: exactly the origin of this jailboxd's console page for the host name the
 * browser used — "http://" + the host of the upgrade's `host` header (the page connects to
 * its own host name on the Socket.IO port) + ":" + the HTTP listener's port (none for 80) —
 * or one of the configured browser origins (JAILBOX_MCP_ALLOWED_ORIGINS, exact; a console
 * behind a TLS proxy is listed there). SameSite=Strict keeps other sites' pages from sending
 * the cookie; this keeps out the pages of other ports and other host names of the same site. */
static bool console_origin_ok(const struct jb_app *app, const char *origin, const char *host) {
  if (!origin || !origin[0]) return false;
  size_t hl = 0;
  if (host && host[0] == '[') {
    const char *close = strchr(host, ']');
    hl = close ? (size_t)(close - host) + 1 : 0;
  } else if (host) {
    hl = strcspn(host, ":");
  }
  int port = atomic_load(&((struct jb_app *)app)->http_port);
  if (hl > 0 && port > 0) {
    char want[320];
    if (port == 80)
      snprintf(want, sizeof want, "http://%.*s", (int)hl, host);
    else
      snprintf(want, sizeof want, "http://%.*s:%d", (int)hl, host, port);
    if (strcasecmp(want, origin) == 0) return true;
  }
  const char *list = app->cfg ? app->cfg->mcp_allowed_origins : NULL;
  size_t n = strlen(origin);
  for (const char *p = list; p && *p;) {
    while (*p == ' ' || *p == ',') p++;
    size_t l = strcspn(p, ",");
    size_t t = l;
    while (t && p[t - 1] == ' ') t--;
    if (t == n && strncmp(p, origin, n) == 0) return true;
    p += l;
  }
  return false;
}

static void on_connect(void *ctx, const struct jb_ws_peer *peer, json_t *auth,
                       struct jb_ws_connect_result *res) {
  struct jb_socket *s = ctx;
  const char *tok = json_string_value(json_object_get(auth, "token"));
  const char *corigin = json_string_value(json_object_get(auth, "consoleOrigin"));
  const char *chost = json_string_value(json_object_get(auth, "consoleHost"));
  if (corigin && !console_origin_ok(s->app, corigin, chost)) {
    snprintf(res->message, sizeof res->message,
             "the console's sign-in is accepted only from its own page's origin");
    return;
  }
  if (!tok) {
    snprintf(res->message, sizeof res->message,
             "authentication required: connect with auth {token}");
    return;
  }
  jb_error err = {0};
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) {
    snprintf(res->message, sizeof res->message, "database unavailable, try again");
    return;
  }
  struct jb_principal who;
  struct jb_reply r = {0};
  int rc = jb_auth_check(s->app, c, tok, false, NULL, JB_ROLE_BUYER | JB_ROLE_AGENT, &who, &r);
  jb_db_release(s->app->db, c);
  if (rc < 0) {
    if (r.status == 403) /* a service token: the one role a socket refuses */
      snprintf(res->message, sizeof res->message,
               "the service token cannot open a socket: use the session's buyer or agent token");
    else
      snprintf(res->message, sizeof res->message, "%s", r.msg);
    return;
  }
  const char *role = jb_role_name(who.role), *job = who.job_id;
  res->ok = true;
  res->role = who.role;
  snprintf(res->room, sizeof res->room, "%s", job);
  jb_token_hash(tok, res->cred); /* checked again on every control (buyer_event) */
  jb_log(JB_LOG_INFO, "socket connected", "jobId", job, "role", role, "addr", peer->addr, NULL);
}

/* The current state, and for buyers the pre-scan and the pending approvals, so that a
 * client that (re)connects — to this or another instance — or missed events meanwhile has
 * everything. All from the database, the source of truth. */
static void send_snapshot(struct jb_socket *s, PGconn *c, struct jb_ws *ws,
                          const struct jb_ws_peer *peer) {
  jb_error err = {0};
  char *text = NULL;
  if (jb_db_session_get(c, peer->room, &text, &err) == JB_OK) {
    json_t *sess = json_loads(text, 0, NULL);
    json_t *ev =
        sess ? json_pack("{s:s,s:O,s:O,s:O,s:O,s:n,s:s,s:b}", "jobId", peer->room, "state",
                         json_object_get(sess, "state"), "mode", json_object_get(sess, "mode"),
                         "pendingOps", json_object_get(sess, "pendingOps"), "auditHead",
                         json_object_get(sess, "auditHead"), "previous", "actor", "system",
                         "snapshot", 1)
             : NULL;
    /* its audit head counts as handed: no older jailbox:audit_head after it (on_bus) */
    json_t *hs = json_object_get(json_object_get(sess, "auditHead"), "seq");
    if (ev)
      jb_ws_emit_seq(ws, peer->conn, jb_event_wire_name(JB_EVENT_STATE), ev,
                     json_is_integer(hs) ? json_integer_value(hs) : 0);
    /* the pre-scan, once the worker has made it (it is part of the session contract) */
    json_t *pre = json_object_get(json_object_get(sess, "walls"), "prescan");
    if (peer->role == JB_ROLE_BUYER && json_is_object(pre))
      jb_ws_emit(ws, peer->conn, jb_event_wire_name(JB_EVENT_PRE_SCAN),
                 json_pack("{s:s,s:O,s:b}", "jobId", peer->room, "prescan", pre, "snapshot", 1));
    json_decref(sess);
  }
  free(text);
  text = NULL;
  if (peer->role == JB_ROLE_BUYER &&
      jb_db_ops_list(c, peer->room, "pending", 0, PENDING_ON_CONNECT, &text, &err) == JB_OK) {
    json_t *page = json_loads(text, 0, NULL);
    size_t i;
    json_t *op;
    json_array_foreach (json_object_get(page, "ops"), i, op)
      jb_ws_emit(ws, peer->conn, jb_event_wire_name(JB_EVENT_APPROVAL_REQUEST), json_incref(op));
    json_decref(page);
  }
  free(text);
}

/* After CONNECT: an agent's arrival (api/core/ops.c), then the snapshot. */
static void on_connected(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer) {
  struct jb_socket *s = ctx;
  jb_error err = {0};
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) return;
  if (peer->role == JB_ROLE_AGENT) jb_op_agent_arrived(c, s->app, peer->room); /* api/core/ops.c */
  send_snapshot(s, c, ws, peer);
  jb_db_release(s->app->db, c);
}

/* After jb_socket_resync: the snapshot alone. */
static void on_resync(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer) {
  struct jb_socket *s = ctx;
  jb_error err = {0};
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) return;
  send_snapshot(s, c, ws, peer);
  jb_db_release(s->app->db, c);
}

/* ---------- buyer controls ---------- */

/* The ack of a core reply (api/core/reply.h): [{ok: true, …the body (or wrap: body)…, …extra}]
 * or [{error: {code, message[, state]}}]. Takes over r's fields. */
static json_t *ack_reply(struct jb_reply *r) {
  json_t *ack;
  if (r->status >= 400 || r->status == 0) {
    ack = r->state[0]
              ? json_pack("[{s:{s:s,s:s,s:s}}]", "error", "code", r->code, "message", r->msg,
                          "state", r->state)
              : json_pack("[{s:{s:s,s:s}}]", "error", "code", r->code ? r->code : "internal",
                          "message", r->status ? r->msg : "no answer");
    json_t *e = json_object_get(json_array_get(ack, 0), "error");
    if (e && r->extra) json_object_update(e, r->extra); /* details beside code and message */
    jb_reply_release(r);
    return ack;
  }
  json_t *o = json_pack("{s:b}", "ok", 1);
  if (o && r->wrap)
    json_object_set(o, r->wrap, r->body);
  else if (o && r->body)
    json_object_update(o, r->body);
  if (o && r->extra) json_object_update(o, r->extra);
  jb_reply_release(r);
  return o ? json_pack("[o]", o) : fail("internal", "out of memory");
}

/* A buyer's event: a control (api/core/controls.h) run by the core as every door runs it. The
 * token the socket connected with is checked again first, as REST checks a request's: one
 * revoked or expired since CONNECT (a console sign-out, the cookie's end) controls nothing. */
static json_t *buyer_event(struct jb_socket *s, const struct jb_ws_peer *peer, const char *name,
                           json_t *args) {
  const char *job = peer->room;
  enum jb_control ctl = jb_control_from_event(name);
  bool changeset = strcmp(name, "jailbox:changeset") == 0; /* a read: {opId, after?, limit?} */
  if (ctl == JB_CONTROL_COUNT && !changeset) {
    if (strcmp(name, "mcp") == 0) return fail("forbidden", "a buyer token may not do this");
    return fail("unknown_event", "unknown event '%s'", name);
  }
  if (json_array_size(args) > 1)
    return fail("bad_request", "send at most one argument (an object) before the ack");
  json_t *arg = json_array_get(args, 0);
  if (json_is_null(arg)) arg = NULL;
  struct jb_reply r = {0};
  jb_error err = {0};
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) {
    jb_reply_db(&r, JB_ERR_FAIL, &err, "", "", NULL);
    return ack_reply(&r);
  }
  /* the token alone: whether the session ended since CONNECT is jb_control_run's (its state) */
  struct jb_principal who;
  if (jb_auth_check_hash(s->app, c, peer->cred, false, job, JB_ROLE_BUYER, &who, &r) == 0) {
    if (changeset)
      jb_changeset_view(c, job, arg, &r);
    else
      jb_control_run(s->app, c, &who, job, ctl, arg, &r);
  }
  jb_db_release(s->app->db, c);
  return ack_reply(&r);
}

/* ---------- events ---------- */

static json_t *on_event(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer,
                        const char *name, json_t *args, bool wants_ack) {
  struct jb_socket *s = ctx;
  if (peer->role == JB_ROLE_BUYER) return buyer_event(s, peer, name, args);
  if (strcmp(name, "mcp") == 0) return jb_socket_mcp(s, peer, args);
  if (strncmp(name, "jailbox:", 8) == 0) return fail("forbidden", "an agent token may not do this");
  return fail("unknown_event", "unknown event '%s'", name);
}

/* Bus subscriber: buyers get every event of their session; agents get state changes (which
 * carry pause and resume) and jailbox:abort. An abort is also announced as jailbox:abort. */
static void on_bus(void *ctx, const char *job_id, enum jb_event_kind kind, json_t *payload) {
  struct jb_socket *s = ctx;
  pthread_rwlock_rdlock(&s->lock);
  const char *event = jb_event_wire_name(kind);
  if (s->ws && event) {
    bool state = kind == JB_EVENT_STATE;
    /* audit heads reach this process from several writers over two transports, and the
     * worker announces the heads of direct reads a little after they commit
     * (sandbox/worker/heads.c): numbered by seq, no socket is handed one older than it has
     * (the snapshot's head counts, send_snapshot), nor one twice */
    json_t *seq = kind == JB_EVENT_AUDIT_HEAD ? json_object_get(payload, "seq") : NULL;
    jb_ws_broadcast_seq(s->ws, job_id, JB_ROLE_BUYER | (state ? JB_ROLE_AGENT : 0), event,
                        json_incref(payload), json_is_integer(seq) ? json_integer_value(seq) : 0);
    enum jb_session_state st =
        jb_session_state_from_name(json_string_value(json_object_get(payload, "state")));
    if (state && st == JB_SESSION_ABORTED)
      jb_ws_broadcast(s->ws, job_id, JB_ROLE_BUYER | JB_ROLE_AGENT, JB_WIRE_ABORT,
                      json_pack("{s:s,s:O?,s:O?}", "jobId", job_id, "reason",
                                json_object_get(payload, "reason"), "actor",
                                json_object_get(payload, "actor")));
    /* an ended session has no more use for its agent's socket (its token is revoked) */
    if (state && (st == JB_SESSION_ABORTED || st == JB_SESSION_ACCEPTED || st == JB_SESSION_FAILED))
      jb_ws_disconnect_room(s->ws, job_id, JB_ROLE_AGENT);
  }
  pthread_rwlock_unlock(&s->lock);
}

/* ---------- start / stop ---------- */

int jb_socket_start(struct jb_app *app, jb_mcp_tool_fn tool, void *tool_ctx,
                    const struct jb_mcp_direct_fns *direct, struct jb_socket **out, jb_error *err) {
  struct jb_socket *s = &the_socket;
  if (s->started) return jb_fail(err, EBUSY, "the Socket.IO endpoint is already running");
  if (!tool) return jb_fail(err, EINVAL, "the Socket.IO endpoint needs a tool handler");
  s->tool = tool;
  s->tool_ctx = tool_ctx;
  if (direct)
    s->direct = *direct;
  else
    memset(&s->direct, 0, sizeof s->direct);
  const struct jb_config *cfg = app->cfg;
  struct jb_ws_settings set = {
      .listen = cfg->ws_listen,
      .max_payload = (size_t)cfg->ws_max_payload,
      .ping_interval_ms = cfg->ws_ping_interval_ms,
      .ping_timeout_ms = cfg->ws_ping_timeout_ms,
      .handshake_timeout_ms = cfg->ws_handshake_timeout_ms,
      .max_per_ip = cfg->ws_max_per_ip,
      .send_queue_bytes = (size_t)cfg->ws_send_queue_bytes,
      .workers = cfg->ws_workers,
  };
  struct jb_ws_handlers h = {.ctx = s,
                             .connect = on_connect,
                             .connected = on_connected,
                             .event = on_event,
                             .resync = on_resync,
                             .event_direct = jb_socket_relay_event};
  s->app = app;
  struct jb_ws *ws;
  if (jb_ws_start(&ws, &set, &h, err) < 0) return -1;
  pthread_rwlock_wrlock(&s->lock);
  s->ws = ws;
  pthread_rwlock_unlock(&s->lock);
  jb_app_set_ws(app, ws); /* the other doors' handler threads (server/app.h) */
  if (!s->started && jb_bus_subscribe(app->bus, on_bus, s) < 0) {
    jb_app_set_ws(app, NULL);
    jb_ws_stop(ws);
    s->ws = NULL;
    return jb_fail(err, ENOMEM, "cannot subscribe to the event bus");
  }
  s->started = true;
  char host[256], addr[300], url[340];
  int port;
  jb_parse_listen(cfg->ws_listen, host, sizeof host, &port, NULL);
  snprintf(addr, sizeof addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, jb_ws_port(ws));
  snprintf(url, sizeof url, "ws://%s/socket.io/", addr);
  jb_log(JB_LOG_INFO, "ws listening", "addr", addr, "url", url, NULL);
  *out = s;
  return 0;
}

void jb_socket_resync(struct jb_socket *s) {
  if (!s) return;
  pthread_rwlock_rdlock(&s->lock);
  if (s->ws) jb_ws_resync(s->ws);
  pthread_rwlock_unlock(&s->lock);
}

void jb_socket_drain(struct jb_socket *s) {
  if (!s) return;
  pthread_rwlock_rdlock(&s->lock);
  jb_ws_drain(s->ws);
  pthread_rwlock_unlock(&s->lock);
}

void jb_socket_drain_wait(struct jb_socket *s, long grace_ms) {
  if (!s) return;
  pthread_rwlock_rdlock(&s->lock);
  jb_ws_drain_wait(s->ws, grace_ms);
  pthread_rwlock_unlock(&s->lock);
}

void jb_socket_stop(struct jb_socket *s) {
  if (!s) return;
  pthread_rwlock_wrlock(&s->lock);
  struct jb_ws *ws = s->ws;
  s->ws = NULL;
  pthread_rwlock_unlock(&s->lock);
  if (s->app) jb_app_set_ws(s->app, NULL);
  jb_ws_stop(ws);
}
