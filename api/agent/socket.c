/* socket.c — Socket.IO roles and event handlers (see socket.h): CONNECT with auth {token};
 * buyers join their session's room and send the controls of api/controls.h
 * (jailbox:pause/resume/abort/accept/mode/pre_scan_done/approve/reject/kill/rule_add/
 * rule_revoke), checked against the same schemas as the REST forms and answered through the
 * ack with {ok:true,…} or {error:{code,message}} — the same rules, codes and state machine
 * (db/sessions.h) as api/rest/; an ended session's buyer is read-only (the snapshot; controls
 * answer invalid_state); agents are bound to their session and speak MCP (JSON-RPC 2.0) on the
 * `mcp` event; bus events fan out to the sockets of their session. */
#define _GNU_SOURCE
#include "api/agent/socket.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "api/auth.h"
#include "api/controls.h"
#include "api/agent/escape.h"
#include "api/agent/mcp.h"
#include "lib/json.h"
#include "lib/line.h"
#include "api/agent/ops.h"
#include "api/agent/policy.h"
#include "api/agent/tools.h"
#include "db/audit_store.h"
#include "db/prescan.h"
#include "db/sessions.h"
#include "db/tokens.h"
#include "sandbox/proto/direct.h"
#include "lib/log.h"
#include "server/ws.h"

#define PENDING_ON_CONNECT 500 /* pending approvals sent to a buyer that (re)connects */

struct relay_conn;

struct jb_socket {
  struct jb_app *app;
  struct jb_ws *ws;
  pthread_rwlock_t lock; /* guards ws against bus publishes during stop */
  jb_mcp_tool_fn tool;
  void *tool_ctx;
  struct jb_mcp_direct_fns direct; /* set before agents connect */
  bool started;
  /* the direct path's connections to workers (service thread only) */
  struct relay_conn *relay;
  int n_relay;
  long long relay_seq; /* the "id" of the last request relayed (sandbox/proto/direct.h) */
  struct relay_call *wait_head, *wait_tail; /* calls waiting for a connection, oldest first */
  int n_wait;
  bool pumping; /* relay_pump is running (a close it causes does not pump again) */
};

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

static json_t *conflict(const char *what, const char *state) {
  return json_pack("[{s:{s:s,s:s++,s:s}}]", "error", "code", "invalid_state", "message", what,
                   " in state ", state, "state", state);
}

static json_t *db_failed(const jb_error *err) {
  char why[640];
  if (jb_signer_retired(why, sizeof why)) { /* every append is refused: say so, not "database" */
    jb_log(JB_LOG_ERROR, "signing key retired", "detail", err->msg, NULL);
    return fail("key_retired", "%s", why);
  }
  jb_log(JB_LOG_ERROR, "database error", "detail", err->msg, NULL);
  return fail("database_unavailable", "the database is unavailable; try again");
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
  unsigned char hash[32];
  if (jb_token_hash(tok, hash) < 0) {
    snprintf(res->message, sizeof res->message, "malformed token");
    return;
  }
  jb_error err = {0};
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) {
    snprintf(res->message, sizeof res->message, "database unavailable, try again");
    return;
  }
  struct jb_token_info t;
  int rc = jb_db_token_find(c, hash, s->app->cfg->buyer_read_retention_s, &t, &err);
  jb_db_release(s->app->db, c);
  if (rc == JB_ERR_FAIL) {
    jb_log(JB_LOG_ERROR, "database error", "detail", err.msg, NULL);
    snprintf(res->message, sizeof res->message, "database unavailable, try again");
    return;
  }
  if (rc != JB_OK || sodium_memcmp(hash, t.stored, 32) != 0) {
    snprintf(res->message, sizeof res->message, "unknown or revoked token");
    return;
  }
  if (t.lapsed) {
    snprintf(res->message, sizeof res->message,
             "the token's session ended more than %ld s ago: its read access has expired "
             "(JAILBOX_BUYER_READ_RETENTION_S)",
             s->app->cfg->buyer_read_retention_s);
    return;
  }
  const char *role = t.role, *job = t.job_id;
  if (strcmp(role, "buyer") != 0 && strcmp(role, "agent") != 0) {
    snprintf(res->message, sizeof res->message,
             "the %s token cannot open a socket: use the session's buyer or agent token", role);
    return;
  }
  res->ok = true;
  res->role = strcmp(role, "buyer") == 0 ? JB_ROLE_BUYER : JB_ROLE_AGENT;
  snprintf(res->room, sizeof res->room, "%s", job);
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

/* After CONNECT: an agent's arrival (api/agent/ops.c), then the snapshot. */
static void on_connected(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer) {
  struct jb_socket *s = ctx;
  jb_error err = {0};
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) return;
  if (peer->role == JB_ROLE_AGENT) jb_op_agent_arrived(c, s->app, peer->room); /* api/agent/ops.c */
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

static json_t *transition(struct jb_socket *s, const char *job, const char *reason,
                          const char *const from[], const char *to) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) return db_failed(&err);
  struct jb_transition t;
  if (jb_session_state_from_name(to) == JB_SESSION_ABORTED)
    jb_escape_release_session(s->app, c, job); /* an op in flight */
  int rc = jb_db_session_transition(c, jb_signer_key(s->app->signer), job, from, to, reason,
                                    "buyer", &t, &err);
  jb_db_release(s->app->db, c);
  if (rc == JB_OK) {
    jb_op_session_changed(job); /* before the buyer hears of it: no read runs after a pause */
    jb_bus_publish(s->app->bus, job, JB_EVENT_STATE,
                   json_pack("{s:s,s:s,s:s,s:s?,s:s}", "jobId", job, "state", t.state, "previous",
                             t.previous, "reason", reason, "actor", "buyer"));
    jb_bus_publish(s->app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&t.head));
    jb_log(JB_LOG_INFO, "session state", "jobId", job, "from", t.previous, "to", t.state, "via",
           "socket", NULL);
    return json_pack("[{s:b,s:s,s:s,s:s,s:I}]", "ok", 1, "jobId", job, "state", t.state, "previous",
                     t.previous, "rejectedOps", (json_int_t)t.rejected_ops);
  }
  if (rc == JB_ERR_NOT_FOUND) return fail("not_found", "no session '%s'", job);
  if (rc == JB_ERR_CONFLICT) {
    char what[64];
    snprintf(what, sizeof what, "cannot go to %s", to);
    return conflict(what, t.state);
  }
  return db_failed(&err);
}

/* The error code of a policy reply (api/agent/policy.h), as REST answers it. */
static const char *policy_code(const struct jb_policy_reply *r) {
  if (r->code) return r->code;
  return r->status == 404   ? "not_found"
         : r->status == 409 ? "conflict"
         : r->status == 503 ? "database_unavailable"
                            : "bad_request";
}

static json_t *decide(struct jb_socket *s, const char *job, const struct jb_control_args *a,
                      bool approve) {
  jb_error err = {0};
  long long op = a->op_id;
  const char *key = a->allow_similar, *reason = a->reason;
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) return db_failed(&err);
  json_t *similar = NULL;
  struct jb_policy_reply pr = {0};
  if (key) { /* the rule is made before the op is approved: a key that does not fit does nothing;
              * the op is approved and the rule added in one transaction */
    jb_policy_similar(c, job, op, key, &similar, &pr);
    if (!similar) {
      char how[512], st[20];
      bool decided =
          pr.status == 409 && jb_db_op_decided_how(c, job, op, how, sizeof how, st, &err) == JB_OK;
      jb_db_release(s->app->db, c);
      return decided ? conflict(how, st) : fail(policy_code(&pr), "%s", pr.msg);
    }
  }
  char *json = NULL, state[20] = "";
  struct jb_audit_head head = {0};
  /* with a rule: the op approved and the rule added in one transaction */
  int rc = similar
               ? jb_policy_approve_similar(s->app, c, job, op, reason, similar, &json, state, &pr)
               : jb_db_op_decide(c, jb_signer_key(s->app->signer), job, op, approve, reason, &json,
                                 state, &head, &err);
  if (rc == JB_OK && head.seq > 0)
    jb_bus_publish(s->app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
  json_decref(similar);
  char how[512], st[20];
  bool decided = rc == JB_ERR_CONFLICT && pr.status != 409 &&
                 jb_db_op_decided_how(c, job, op, how, sizeof how, st, &err) == JB_OK;
  jb_db_release(s->app->db, c);
  if (rc == JB_ERR_CONFLICT && pr.status == 409) return fail(policy_code(&pr), "%s", pr.msg);
  if (rc == JB_OK) {
    json_t *o = json_loads(json, 0, NULL);
    free(json);
    if (!o) {
      json_decref(pr.body);
      return fail("internal", "out of memory");
    }
    jb_bus_publish(s->app->bus, job, JB_EVENT_OP, json_incref(o));
    json_t *ack = json_pack("[{s:b,s:o}]", "ok", 1, "op", o);
    if (pr.body) json_object_set_new(json_array_get(ack, 0), "rule", pr.body);
    return ack;
  }
  if (rc == JB_ERR_NOT_FOUND) return fail("not_found", "no op %lld in session '%s'", op, job);
  if (decided) return conflict(how, st);
  if (rc == JB_ERR_CONFLICT) return conflict("op is not pending, or its session ended:", state);
  return db_failed(&err);
}

/* jailbox:kill {opId, reason?}: the buyer's kill of an exec (api/agent/ops.h jb_op_kill). */
static json_t *kill_op(struct jb_socket *s, const char *job, const struct jb_control_args *a) {
  jb_error err = {0};
  long long op = a->op_id;
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) return db_failed(&err);
  char state[20] = "";
  json_t *out = NULL;
  int rc = jb_op_kill(s->app, c, job, op, a->reason, &out, state, &err);
  jb_db_release(s->app->db, c);
  if (rc == JB_OK) {
    json_object_set_new(out, "ok", json_true());
    return json_pack("[o]", out);
  }
  if (rc == JB_ERR_NOT_FOUND) return fail("not_found", "no op %lld in session '%s'", op, job);
  if (rc == JB_ERR_CONFLICT)
    return conflict("only an exec that is pending, queued or running can be killed; it is", state);
  return db_failed(&err);
}

/* jailbox:mode {mode}: as PATCH /v1/jailbox/:jobId {mode}; ack {ok, session}. */
static json_t *set_mode(struct jb_socket *s, const char *job, const struct jb_control_args *a) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) return db_failed(&err);
  char state[20] = "", *json = NULL;
  struct jb_audit_head head = {0};
  int rc =
      jb_db_session_set_mode(c, jb_signer_key(s->app->signer), job, a->mode, state, &head, &err);
  if (rc == JB_OK) rc = jb_db_session_get(c, job, &json, &err);
  jb_db_release(s->app->db, c);
  if (rc == JB_OK) {
    if (head.seq > 0)
      jb_bus_publish(s->app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
    jb_bus_publish(s->app->bus, job, JB_EVENT_MODE,
                   json_pack("{s:s,s:s}", "jobId", job, "mode", a->mode));
    json_t *o = json_loads(json, 0, NULL);
    free(json);
    return o ? json_pack("[{s:b,s:o}]", "ok", 1, "session", o) : fail("internal", "out of memory");
  }
  free(json);
  if (rc == JB_ERR_NOT_FOUND) return fail("not_found", "no session '%s'", job);
  if (rc == JB_ERR_CONFLICT) return conflict("cannot change mode", state);
  return db_failed(&err);
}

static json_t *pre_scan_done(struct jb_socket *s, const char *job,
                             const struct jb_control_args *a) {
  json_t *ex = a->exclude;
  jb_error err = {0};
  char state[20] = "";
  if (ex && json_array_size(ex) > 0) {
    char *text = json_dumps(ex, JSON_COMPACT);
    if (!text) return fail("internal", "out of memory");
    PGconn *c = jb_db_acquire(s->app->db, &err);
    if (!c) {
      free(text);
      return db_failed(&err);
    }
    int rc = jb_db_session_add_exclusions(c, job, text, state, &err);
    jb_db_release(s->app->db, c);
    free(text);
    if (rc == JB_ERR_NOT_FOUND) return fail("not_found", "no session '%s'", job);
    if (rc == JB_ERR_CONFLICT) return conflict("cannot confirm the pre-scan", state);
    if (rc != JB_OK) return db_failed(&err);
  }
  static const char *const from[] = {"prescanning", NULL};
  json_t *r = transition(s, job, NULL, from, "awaiting_agent");
  /* the worker moves on by itself unless told to hold (JAILBOX_PRESCAN_HOLD): exclusions
   * given before the agent connects are still taken, and the answer says so */
  const char *cur =
      json_string_value(json_object_get(json_object_get(json_array_get(r, 0), "error"), "state"));
  if (jb_session_state_from_name(cur) == JB_SESSION_AWAITING_AGENT) {
    json_decref(r);
    r = json_pack("[{s:b,s:s,s:s}]", "ok", 1, "jobId", job, "state", "awaiting_agent");
  }
  return r;
}

/* jailbox:effects_clear {reason?}: as POST /v1/jailbox/:jobId/effects/clear; ack {ok, jobId,
 * cleared}. */
static json_t *effects_clear(struct jb_socket *s, const char *job,
                             const struct jb_control_args *a) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) return db_failed(&err);
  char state[20] = "";
  bool cleared = false;
  struct jb_audit_head head = {0};
  int rc = jb_db_session_effects_clear(c, jb_signer_key(s->app->signer), job, a->reason, &cleared,
                                       state, &head, &err);
  jb_db_release(s->app->db, c);
  if (rc == JB_OK) {
    jb_op_session_changed(job);
    if (head.seq > 0)
      jb_bus_publish(s->app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
    return json_pack("[{s:b,s:s,s:b}]", "ok", 1, "jobId", job, "cleared", cleared);
  }
  if (rc == JB_ERR_NOT_FOUND) return fail("not_found", "no session '%s'", job);
  if (rc == JB_ERR_CONFLICT) return conflict("cannot clear incomplete effects", state);
  return db_failed(&err);
}

/* The ack of a rule request: [body] or [{error: {code, message}}]. */
static json_t *policy_ack(struct jb_policy_reply *r) {
  if (r->body) return json_pack("[{s:b,s:o}]", "ok", 1, "result", r->body);
  return fail(policy_code(r), "%s", r->msg);
}

/* jailbox:rule_add {rule | rules} and jailbox:rule_revoke {ruleId}. */
static json_t *rules(struct jb_socket *s, const char *job, enum jb_control ctl,
                     const struct jb_control_args *a) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) return db_failed(&err);
  struct jb_policy_reply r;
  if (ctl == JB_CONTROL_RULE_ADD)
    jb_policy_add(s->app, c, job, a->rules, &r);
  else
    jb_policy_revoke(s->app, c, job, a->rule_id, &r);
  jb_db_release(s->app->db, c);
  return policy_ack(&r);
}

/* A buyer's event: a control (api/controls.h), checked as REST checks it — the session must be
 * live (an ended one is read-only: invalid_state with its state), then the argument against
 * the control's schema. */
static json_t *buyer_event(struct jb_socket *s, const char *job, const char *name, json_t *args) {
  static const char *const live[] = {JB_LIVE_STATES, NULL};
  static const char *const from_active[] = {"active", NULL};
  static const char *const from_paused[] = {"paused", NULL};
  static const char *const from_done[] = {"done", NULL};
  enum jb_control ctl = jb_control_from_event(name);
  if (ctl == JB_CONTROL_COUNT) {
    if (strcmp(name, "mcp") == 0) return fail("forbidden", "a buyer token may not do this");
    return fail("unknown_event", "unknown event '%s'", name);
  }
  if (json_array_size(args) > 1)
    return fail("bad_request", "send at most one argument (an object) before the ack");
  json_t *arg = json_array_get(args, 0);
  if (json_is_null(arg)) arg = NULL;
  jb_error err = {0};
  char state[20] = "";
  PGconn *c = jb_db_acquire(s->app->db, &err);
  if (!c) return db_failed(&err);
  int rc = jb_db_session_state(c, job, state, &err);
  jb_db_release(s->app->db, c);
  if (rc == JB_ERR_NOT_FOUND) return fail("not_found", "no session '%s'", job);
  if (rc != JB_OK) return db_failed(&err);
  if (!jb_state_is_live(state)) return conflict("the session is read-only: it ended", state);
  struct jb_control_args a;
  char msg[512];
  if (jb_control_check(ctl, arg, &a, msg, sizeof msg) < 0) return fail("bad_request", "%s", msg);
  switch (ctl) {
    case JB_CONTROL_PAUSE:
      return transition(s, job, a.reason, from_active, "paused");
    case JB_CONTROL_RESUME:
      return transition(s, job, a.reason, from_paused, "active");
    case JB_CONTROL_ABORT:
      return transition(s, job, a.reason, live, "aborted");
    case JB_CONTROL_ACCEPT:
      return transition(s, job, a.reason, from_done, "accepted");
    case JB_CONTROL_APPROVE:
      return decide(s, job, &a, true);
    case JB_CONTROL_REJECT:
      return decide(s, job, &a, false);
    case JB_CONTROL_KILL:
      return kill_op(s, job, &a);
    case JB_CONTROL_MODE:
      return set_mode(s, job, &a);
    case JB_CONTROL_RULE_ADD:
    case JB_CONTROL_RULE_REVOKE:
      return rules(s, job, ctl, &a);
    case JB_CONTROL_PRE_SCAN_DONE:
      return pre_scan_done(s, job, &a);
    case JB_CONTROL_EFFECTS_CLEAR:
      return effects_clear(s, job, &a);
    case JB_CONTROL_COUNT:
      break;
  }
  return fail("unknown_event", "unknown event '%s'", name);
}

/* ---------- the agent's MCP channel (api/agent/mcp.h) ---------- */

/* The ack of one `mcp` event: [response], or an empty ack for a notification. */
static json_t *ack_of(json_t *reply) { return reply ? json_pack("[o]", reply) : NULL; }

static json_t *mcp(struct jb_socket *s, const struct jb_ws_peer *peer, json_t *args) {
  static const struct jb_mcp_transport t = {0}; /* no headers: the message alone decides */
  json_t *msg = json_array_get(args, 0);
  if (json_array_size(args) != 1)
    return ack_of(
        jb_mcp_error_reply(NULL, -32600, "Invalid Request: send one JSON-RPC 2.0 object", NULL));
  struct jb_mcp_req r;
  json_t *reply;
  int status;
  if (!jb_mcp_check(msg, &t, &r, &reply, &status)) return ack_of(reply);
  return ack_of(jb_mcp_answer(&r, s->app, peer->room, s->tool, s->tool_ctx, &status));
}

/* ---------- the direct path of reads and lists (service thread) ----------
 *
 * An agent's tools/call of read or list that the planner (api/agent/ops.h jb_op_direct_plan)
 * finds it may decide on alone — an active session held by one of this process's workers —
 * is written to the worker's ops socket from the service thread itself, and the worker's
 * answer line is read there too (server/ws.h jb_ws_watch_fd): no handler thread, so two
 * hand-overs between threads fewer per read. This is the one way such a read reaches a
 * worker; every other call (a refusal to audit, a paused session, a worker of another host)
 * goes to the handler threads, which store it as an ops row (api/agent/op_call.h).
 *
 * At most RELAY_CONNS connections are open; a call that finds them all busy waits here, in
 * order, for the first to come free (the worker's end queues as well,
 * sandbox/worker/direct_server.c): load never refuses a read. A call the worker did not run,
 * or whose connection failed, goes to the handler threads after all, which store it as an
 * ops row (a read or list changes nothing: running it there again is harmless). */

#define RELAY_CONNS 64 /* connections to workers kept open */
#define RELAY_WAIT_MAX \
  4096 /* calls waiting for a connection; more go to the handler threads (the ops row) */
#define RELAY_TIMEOUT_MS 120000 /* an answer must come within this (ops.c RUN_TIMEOUT_MS) */
#define RELAY_INLINE_MAX 65536 /* longer answers are made into results on a handler thread */

struct relay_call {
  struct jb_socket *s;
  struct jb_ws *ws;
  struct jb_ws_peer peer;
  long long ack;
  json_t *args; /* the event's arguments, for the ordinary path */
  json_t *id; /* the JSON-RPC id */
  bool modern; /* answered by the 2026-07-28 rules (api/agent/mcp.h) */
  long long seq; /* the request's "id" on the worker connection, echoed in its answer */
  struct jb_mcp_direct d;
  char *req_line; /* d.req with its "id", '\n'-terminated, req_len bytes */
  size_t req_len;
  char *
      line; /* the answer line (without its newline), when made into a result on a handler thread */
  size_t line_len;
  struct relay_call *next_wait; /* in the socket's wait list */
};

struct relay_conn {
  struct relay_conn *next;
  struct jb_socket *s;
  struct jb_ws_watch *w;
  char sock[108];
  struct relay_call *call; /* the request in flight; NULL: idle */
  bool closing; /* relay_close was called: takes no request */
  struct jb_line_reader answer; /* the worker's answer line */
};

static int relay_send(struct jb_socket *s, struct relay_call *rc);
static void relay_pump(struct jb_socket *s);

/* An answer line: JB_DIRECT_MAX_LINE bytes with its newline; a longer one ends the connection. */
static const struct jb_line_opts relay_lines = {.max_line = JB_DIRECT_MAX_LINE - 1,
                                                .over = JB_LINE_FAIL};

static void relay_call_free(struct relay_call *rc) {
  if (!rc) return;
  if (rc->s->direct.free) rc->s->direct.free(rc->d.ctx);
  json_decref(rc->d.req);
  free(rc->req_line);
  free(rc->line);
  json_decref(rc->args);
  json_decref(rc->id);
  free(rc);
}

/* The call takes the ordinary path after all (service thread). */
static void relay_fallback(struct relay_call *rc) {
  jb_ws_event_requeue(rc->ws, &rc->peer, "mcp", rc->args, rc->ack);
  relay_call_free(rc);
}

enum relay_outcome {
  RELAY_ANSWERED, /* the ACK is made */
  RELAY_NOT_RAN, /* the worker ran nothing: the ordinary path takes the call */
  RELAY_MALFORMED, /* not an answer: the same, and the connection is not to be trusted again */
};

/* The worker's answer line of `rc` (without its newline) made into the call's ACK; with
 * another outcome nothing was sent. */
static enum relay_outcome relay_answer(struct relay_call *rc, const char *line, size_t len) {
  jb_error err = {0};
  json_t *ans = jb_json_parse_object(line, len, JB_DIRECT_MAX_DEPTH, &err);
  if (!ans) {
    jb_log(JB_LOG_WARN, "direct op: the worker's answer is not JSON: the op takes the queued path",
           "jobId", rc->peer.room, "detail", err.msg, NULL);
    return RELAY_MALFORMED;
  }
  json_t *aid = json_object_get(ans, "id");
  if (!json_is_integer(aid) || json_integer_value(aid) != rc->seq) {
    jb_log(JB_LOG_WARN,
           "direct op: the worker answered another request: the op takes the queued path", "jobId",
           rc->peer.room, NULL);
    json_decref(ans);
    return RELAY_MALFORMED;
  }
  bool ran = false;
  struct jb_mcp_error e = {0};
  json_t *result = rc->s->direct.answer(rc->d.ctx, ans, &e, &ran);
  json_decref(ans);
  if (!ran) return RELAY_NOT_RAN;
  jb_ws_event_done(rc->ws, rc->peer.conn, rc->ack,
                   ack_of(jb_mcp_tool_reply(rc->id, rc->modern, result, &e)));
  return RELAY_ANSWERED;
}

/* Handler thread: a long answer made into the ACK; or, when the worker ran nothing, the call
 * on the ordinary path right here. */
static void relay_answer_job(void *arg, bool run) {
  struct relay_call *rc = arg;
  if (run && relay_answer(rc, rc->line, rc->line_len) != RELAY_ANSWERED)
    jb_ws_event_done(rc->ws, rc->peer.conn, rc->ack, mcp(rc->s, &rc->peer, rc->args));
  relay_call_free(rc);
}

static void relay_close(struct relay_conn *c) {
  c->closing = true;
  jb_ws_watch_close(c->w); /* CLOSED, then (or at once) relay_watch's cleanup */
}

/* Input on connection `c`: its call's answer (or the end of the connection). */
static void relay_readable(struct relay_conn *c, int fd);

static void relay_watch(void *arg, struct jb_ws_watch *w, int fd, enum jb_ws_watch_event ev) {
  struct relay_conn *c = arg;
  struct jb_socket *s = c->s;
  (void)w;
  if (ev == JB_WS_WATCH_CLOSED) {
    for (struct relay_conn **p = &s->relay; *p; p = &(*p)->next)
      if (*p == c) {
        *p = c->next;
        s->n_relay--;
        break;
      }
    if (c->call) relay_fallback(c->call);
    jb_line_free(&c->answer);
    free(c);
    relay_pump(s); /* a place for a waiting call */
    return;
  }
  if (ev == JB_WS_WATCH_TIMEOUT) {
    /* the worker holds it (it may have run): the call ends here, "try again" — the ordinary
     * path would hand it to the same worker and wait as long again */
    struct relay_call *rc = c->call;
    c->call = NULL;
    if (rc) {
      jb_log(JB_LOG_WARN, "direct op: no answer from the worker in time", "jobId", rc->peer.room,
             NULL);
      jb_ws_event_done(rc->ws, rc->peer.conn, rc->ack,
                       ack_of(jb_mcp_error_reply(rc->id, JB_MCP_UNAVAILABLE,
                                                 "the worker did not answer in time; try again",
                                                 json_pack("{s:s}", "reason", "unavailable"))));
      relay_call_free(rc);
    }
    relay_close(c);
    return;
  }
  relay_readable(c, fd);
  relay_pump(s); /* the connection is idle again, or a place comes free */
}

static void relay_readable(struct relay_conn *c, int fd) {
  for (;;) {
    jb_error rerr = {0};
    ssize_t r = jb_line_read(&c->answer, fd, &rerr);
    if (r < 0 && (rerr.code == EAGAIN || rerr.code == EWOULDBLOCK)) return;
    if (r < 0 && rerr.code == ENOMEM) {
      jb_log(JB_LOG_WARN,
             "direct op: the worker's answer is too long: the op takes the queued path", NULL);
      relay_close(c);
      return;
    }
    if (r <= 0 || !c->call) { /* closed, failed, or talking out of turn */
      relay_close(c);
      return;
    }
    char *line;
    size_t n;
    int lr = jb_line_next(&c->answer, &line, &n);
    if (lr == JB_LINE_AGAIN) continue;
    if (lr != JB_LINE_OK) { /* over the limit, or out of memory */
      jb_log(JB_LOG_WARN,
             "direct op: the worker's answer is too long: the op takes the queued path", NULL);
      relay_close(c);
      return;
    }
    if (jb_line_held(&c->answer) > 0) { /* one request in flight: nothing may follow its answer */
      relay_close(c);
      return;
    }
    struct relay_call *rc = c->call;
    c->call = NULL;
    jb_ws_watch_timeout(c->w, -1);
    if (n > RELAY_INLINE_MAX) {
      /* the service thread serves every socket: parsed on a handler thread. The connection is
       * not used again: whether the line was an answer is known only there */
      rc->line = jb_line_take(&c->answer, &rc->line_len); /* the reader's storage, not a copy */
      relay_close(c);
      if (!rc->line) {
        relay_fallback(rc);
        return;
      }
      if (jb_ws_run(rc->ws, relay_answer_job, rc) == 0) return;
      line = rc->line; /* cannot be queued: here after all */
    }
    enum relay_outcome o = relay_answer(rc, line, n);
    if (o == RELAY_MALFORMED && n <= RELAY_INLINE_MAX)
      relay_close(c); /* a line too many may follow: not again */
    if (o == RELAY_ANSWERED)
      relay_call_free(rc);
    else
      relay_fallback(rc);
    return;
  }
}

/* Sends `rc`'s request on an idle connection to its worker, or a new one. 0 when it was sent;
 * 1 when all RELAY_CONNS connections are busy (nothing was sent: the call waits for one,
 * relay_pump); -1 when it could not be sent (nothing of it went out on a connection kept
 * open: the caller takes the ordinary path). */
static int relay_send(struct jb_socket *s, struct relay_call *rc) {
  for (int attempt = 0; attempt < 2; attempt++) {
    struct relay_conn *c = NULL;
    for (struct relay_conn *x = s->relay; x && attempt == 0; x = x->next)
      if (!x->call && !x->closing && !strcmp(x->sock, rc->d.sock)) {
        c = x;
        break;
      }
    bool fresh = !c;
    if (!c) {
      if (s->n_relay >= RELAY_CONNS) { /* full: an idle one (another worker's) makes room */
        struct relay_conn *idle = NULL;
        for (struct relay_conn *x = s->relay; x; x = x->next)
          if (!x->call && !x->closing) idle = x;
        if (!idle) return 1;
        relay_close(idle); /* not in its own callback: closed, and unlinked, at once */
      }
      struct sockaddr_un a = {.sun_family = AF_UNIX};
      if (strlen(rc->d.sock) >= sizeof a.sun_path) return -1;
      memcpy(a.sun_path, rc->d.sock, strlen(rc->d.sock) + 1);
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return -1;
      if (connect(fd, (struct sockaddr *)&a, sizeof a) <
          0) { /* a Unix socket connects at once, or not */
        close(fd);
        return -1;
      }
      c = calloc(1, sizeof *c);
      if (!c) {
        close(fd);
        return -1;
      }
      jb_line_init(&c->answer, &relay_lines);
      c->s = s;
      snprintf(c->sock, sizeof c->sock, "%s", rc->d.sock);
      c->w = jb_ws_watch_fd(rc->ws, fd, relay_watch, c); /* closes fd when it fails */
      if (!c->w) {
        free(c);
        return -1;
      }
      c->next = s->relay;
      s->relay = c;
      s->n_relay++;
    }
    ssize_t w =
        send(jb_ws_watch_fd_of(c->w), rc->req_line, rc->req_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w == (ssize_t)rc->req_len) {
      c->call = rc;
      jb_ws_watch_timeout(c->w, RELAY_TIMEOUT_MS);
      return 0;
    }
    relay_close(c); /* idle: no call to fall back; a part of a line dies with it */
    /* a kept connection the worker closed meanwhile (it restarted): once more, new */
    if (fresh || w > 0) return -1;
  }
  return -1;
}

/* Sends the waiting calls, oldest first, while connections can be had; a call that cannot be
 * sent at all takes the ordinary path. */
static void relay_pump(struct jb_socket *s) {
  if (s->pumping) return; /* a close relay_send makes comes back here */
  s->pumping = true;
  while (s->wait_head) {
    struct relay_call *rc = s->wait_head;
    int r = relay_send(s, rc);
    if (r > 0) break;
    s->wait_head = rc->next_wait;
    if (!s->wait_head) s->wait_tail = NULL;
    s->n_wait--;
    rc->next_wait = NULL;
    if (r < 0) relay_fallback(rc);
  }
  s->pumping = false;
}

/* ws event_direct handler: an agent's tools/call of a tool that changes nothing, when the planner
 * allows (jb_op_direct_plan). */
static bool on_event_direct(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer,
                            const char *name, json_t *args, long long ack) {
  struct jb_socket *s = ctx;
  pthread_rwlock_rdlock(&s->lock);
  bool planner = s->direct.plan != NULL;
  pthread_rwlock_unlock(&s->lock);
  if (peer->role != JB_ROLE_AGENT || strcmp(name, "mcp") || ack < 0 || !planner) return false;
  /* only a well-formed call: every other message takes mcp()'s path, which answers it */
  static const struct jb_mcp_transport none = {0};
  json_t *msg = json_array_get(args, 0);
  if (!json_is_object(msg) || json_array_size(args) != 1) return false;
  struct jb_mcp_req r;
  json_t *reply = NULL;
  int status;
  if (!jb_mcp_check(msg, &none, &r, &reply, &status)) {
    json_decref(reply);
    return false;
  }
  if (!r.id || strcmp(r.method, "tools/call") || !json_is_object(r.params)) return false;
  json_t *id = r.id, *params = r.params;
  const char *tool = json_string_value(json_object_get(params, "name"));
  json_t *arguments = json_object_get(params, "arguments");
  enum jb_tool t = tool ? jb_tool_from_name(tool) : JB_TOOL_UNKNOWN;
  if (t == JB_TOOL_UNKNOWN || (arguments && !json_is_object(arguments))) /* the planner decides */
    return false;
  struct relay_call *rc = calloc(1, sizeof *rc);
  if (!rc) return false;
  json_t *empty = arguments ? NULL : json_object();
  bool planned = s->direct.plan(s->app, peer->room, tool, arguments ? arguments : empty, &rc->d);
  json_decref(empty);
  if (!planned) {
    free(rc);
    return false;
  }
  rc->s = s;
  /* the request numbered: its answer must carry the same id (sandbox/proto/direct.h) */
  rc->seq = ++s->relay_seq;
  if (json_object_set_new(rc->d.req, "id", json_integer(rc->seq)) == 0)
    rc->req_line = json_dumps(rc->d.req, JSON_COMPACT);
  rc->req_len = rc->req_line ? strlen(rc->req_line) + 1 : 0;
  if (!rc->req_line || rc->req_len > JB_DIRECT_MAX_LINE) {
    relay_call_free(rc);
    return false;
  }
  rc->req_line[rc->req_len - 1] =
      '\n'; /* json_dumps leaves room for the NUL: it becomes the newline */
  rc->ws = ws;
  rc->peer = *peer;
  rc->ack = ack;
  rc->args = json_incref(args);
  rc->id = json_incref(id);
  rc->modern = r.modern;
  /* behind the calls that wait already: in order */
  int sent = s->wait_head ? 1 : relay_send(s, rc);
  if (sent < 0 || (sent > 0 && s->n_wait >= RELAY_WAIT_MAX)) {
    relay_call_free(rc);
    return false;
  }
  if (sent > 0) {
    if (s->wait_tail)
      s->wait_tail->next_wait = rc;
    else
      s->wait_head = rc;
    s->wait_tail = rc;
    s->n_wait++;
  }
  return true;
}

/* ---------- events ---------- */

static json_t *on_event(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer,
                        const char *name, json_t *args, bool wants_ack) {
  struct jb_socket *s = ctx;
  if (peer->role == JB_ROLE_BUYER) return buyer_event(s, peer->room, name, args);
  if (strcmp(name, "mcp") == 0) return mcp(s, peer, args);
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
                             .event_direct = on_event_direct};
  s->app = app;
  struct jb_ws *ws;
  if (jb_ws_start(&ws, &set, &h, err) < 0) return -1;
  pthread_rwlock_wrlock(&s->lock);
  s->ws = ws;
  pthread_rwlock_unlock(&s->lock);
  if (!s->started && jb_bus_subscribe(app->bus, on_bus, s) < 0) {
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

int jb_socket_port(const struct jb_socket *s) { return s->ws ? jb_ws_port(s->ws) : 0; }

int jb_socket_run(struct jb_socket *s, void (*fn)(void *arg, bool run), void *arg) {
  if (!s) return -1;
  pthread_rwlock_rdlock(&s->lock);
  int rc = s->ws ? jb_ws_run(s->ws, fn, arg) : -1;
  pthread_rwlock_unlock(&s->lock);
  return rc;
}

void jb_socket_tool(const struct jb_socket *s, jb_mcp_tool_fn *fn, void **ctx) {
  *fn = s->tool;
  *ctx = s->tool_ctx;
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

void jb_socket_counts(struct jb_socket *s, long *buyers, long *agents) {
  *buyers = *agents = 0;
  if (!s) return;
  pthread_rwlock_rdlock(&s->lock);
  if (s->ws) {
    *buyers = jb_ws_count_role(s->ws, JB_ROLE_BUYER);
    *agents = jb_ws_count_role(s->ws, JB_ROLE_AGENT);
  }
  pthread_rwlock_unlock(&s->lock);
}

void jb_socket_stop(struct jb_socket *s) {
  if (!s) return;
  pthread_rwlock_wrlock(&s->lock);
  struct jb_ws *ws = s->ws;
  s->ws = NULL;
  pthread_rwlock_unlock(&s->lock);
  jb_ws_stop(ws);
}
