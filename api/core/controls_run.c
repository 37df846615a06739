/* controls_run.c — each buyer control once (see controls.h jb_control_run): the state changes
 * (pause, resume, abort, accept), approve and reject (with allow-similar), kill, the mode, the
 * rules, the end of the pre-scan, the clearing of incomplete effects and rollback
 * (api/core/rollback.h). Every door (REST,
 * Socket.IO) parses its request into the control's arguments, calls jb_control_run and renders
 * the struct jb_reply; the events a control causes are published here, and the session's read
 * cache dropped here, so that every door behaves the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/changeset.h"
#include "api/core/controls.h"
#include "api/core/escape.h"
#include "api/core/ops.h"
#include "api/core/policy.h"
#include "api/core/rollback.h"
#include "db/audit_store.h"
#include "db/prescan.h"
#include "db/sessions.h"
#include "lib/log.h"
#include "server/bus.h"
#include "server/cache.h"

/* The context of one control: the app, the connection it runs on, the session and who acts
 * ("buyer", or "service": the operator, through the platform's service token). */
struct control {
  struct jb_app *app;
  PGconn *c;
  const char *job;
  const char *actor;
  struct jb_reply *out;
};

static void no_session(struct control *k, int rc, const jb_error *err, const char *conflict,
                       const char *state) {
  char nf[200];
  snprintf(nf, sizeof nf, "no session '%s'", k->job);
  jb_reply_db(k->out, rc, err, nf, conflict, state);
}

static void no_op(struct control *k, long long op, int rc, const jb_error *err,
                  const char *conflict, const char *state) {
  char nf[200];
  snprintf(nf, sizeof nf, "no op %lld in session '%s'", op, k->job);
  jb_reply_db(k->out, rc, err, nf, conflict, state);
}

/* The session's read cache (server/cache.h) no longer holds `job`: a read after this control
 * sees it, on this instance at once (others drop theirs on the bus notice). */
static void changed(struct control *k) {
  if (k->app->cache) jb_cache_invalidate(k->app->cache, k->job);
}

static void publish_head(struct control *k, const struct jb_audit_head *head) {
  if (head->seq > 0)
    jb_bus_publish(k->app->bus, k->job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(head));
}

/* ---------- pause, resume, abort, accept ---------- */

static void transition(struct control *k, const char *reason, const char *const from[],
                       const char *to) {
  jb_error err = {0};
  struct jb_transition t;
  if (jb_session_state_from_name(to) == JB_SESSION_ABORTED)
    jb_escape_release_session(k->app, k->c, k->job); /* an op in flight */
  int rc = jb_db_session_transition(k->c, jb_signer_key(k->app->signer), k->job, from, to, reason,
                                    k->actor, &t, &err);
  if (rc == JB_ERR_CONFLICT && jb_session_state_from_name(t.state) == JB_SESSION_PAUSED &&
      jb_session_state_from_name(to) == JB_SESSION_ACTIVE && t.actor[0] &&
      strcmp(t.actor, k->actor) != 0) { /* a pause is lifted by whoever made it */
    jb_reply_invalid_state(k->out,
                           strcmp(t.actor, "service") == 0
                               ? "paused by the operator, who alone can resume it (the buyer may "
                                 "abort): the session is"
                               : "paused by the buyer, who alone can resume it: the session is",
                           t.state);
    return;
  }
  enum jb_session_state now = jb_session_state_from_name(t.state),
                        want = jb_session_state_from_name(to);
  if (rc == JB_ERR_CONFLICT && t.rollback_running &&
      ((now == JB_SESSION_PAUSED && want == JB_SESSION_ACTIVE) ||
       (now == JB_SESSION_DONE && want == JB_SESSION_ACCEPTED))) {
    jb_reply_fail(k->out, 409, "rollback_running",
                  "a rollback of this session is queued or running: %s once it has ended (GET "
                  "…/rollbacks/:rollbackId)",
                  want == JB_SESSION_ACTIVE ? "resume" : "accept");
    snprintf(k->out->state, sizeof k->out->state, "%s", t.state);
    return;
  }
  if (rc != JB_OK) {
    char what[64];
    snprintf(what, sizeof what, "cannot go to %s", to);
    no_session(k, rc, &err, what, t.state);
    return;
  }
  changed(k);
  jb_op_session_changed(k->job); /* before the buyer hears of it: no read runs after a pause */
  jb_reply_ok(k->out, 200,
              json_pack("{s:s,s:s,s:s,s:I}", "jobId", k->job, "state", t.state, "previous",
                        t.previous, "rejectedOps", (json_int_t)t.rejected_ops));
  jb_bus_publish(k->app->bus, k->job, JB_EVENT_STATE,
                 json_pack("{s:s,s:s,s:s,s:s?,s:s}", "jobId", k->job, "state", t.state, "previous",
                           t.previous, "reason", reason, "actor", k->actor));
  jb_bus_publish(k->app->bus, k->job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&t.head));
  jb_log(JB_LOG_INFO, "session state", "jobId", k->job, "from", t.previous, "to", t.state, NULL);
}

/* ---------- approve, reject ---------- */

/* The 409 of a decision that lost: how the op was decided (another buyer, a rule, the
 * timeout were first), or else that it is not pending (its session ended). */
static void decided_already(struct control *k, long long op, const char *state) {
  char how[512], st[20];
  jb_error err = {0};
  if (jb_db_op_decided_how(k->c, k->job, op, how, sizeof how, st, &err) == JB_OK)
    jb_reply_invalid_state(k->out, how, st);
  else
    jb_reply_invalid_state(k->out, "op is not pending, or its session ended:", state);
}

/* The op decided (JSON text `json`, taken over), the rule made of it (`rule`, stolen; NULL:
 * none): 200 with the op, the rule beside it; the op and audit head announced. */
static void decided(struct control *k, char *json, json_t *rule, const struct jb_audit_head *head) {
  json_t *op = json ? json_loads(json, 0, NULL) : NULL;
  free(json);
  changed(k);
  if (jb_reply_ok(k->out, 200, op ? json_incref(op) : NULL) == 0) {
    k->out->wrap = "op";
    if (rule) k->out->extra = json_pack("{s:O}", "rule", rule);
    jb_bus_publish(k->app->bus, k->job, JB_EVENT_OP, json_incref(op));
  }
  json_decref(op);
  json_decref(rule);
  publish_head(k, head);
}

static void decide(struct control *k, const struct jb_control_args *a, bool approve) {
  jb_error err = {0};
  long long op = a->op_id;
  char *json = NULL, state[20] = "";
  struct jb_audit_head head = {0};
  json_t *similar = NULL;
  /* a changeset is decided file by file (api/core/changeset.h); any other op as below */
  switch (jb_changeset_decide(k->app, k->c, k->job, op, approve, a->reason, a->files,
                              a->changeset_sha256, a->allow_similar, k->actor, &json, state, &head,
                              k->out)) {
    case JB_CHANGESET_NOT_ONE:
      break;
    case JB_CHANGESET_DONE:
      decided(k, json, NULL, &head);
      return;
    case JB_CHANGESET_LOST:
      decided_already(k, op, state);
      return;
    case JB_CHANGESET_REFUSED:
      return;
  }
  if (a->allow_similar) { /* the rule is made before the op is approved: a key that does not
                           * fit does nothing; then the op approved and the rule added in one
                           * transaction */
    jb_policy_similar(k->c, k->job, op, a->allow_similar, &similar, k->out);
    if (!similar) {
      if (k->out->status == 409) decided_already(k, op, "pending"); /* decided meanwhile */
      return;
    }
    int rc = jb_policy_approve_similar(k->app, k->c, k->job, op, a->reason, similar, &json, state,
                                       k->out);
    json_decref(similar);
    if (rc == JB_ERR_CONFLICT && k->out->status == 409) return; /* the rule: nothing done */
    json_t *rule = k->out->body;
    k->out->body = NULL;
    if (rc == JB_OK) {
      decided(k, json, rule, &head);
      return;
    }
    json_decref(rule);
    free(json);
    if (rc == JB_ERR_CONFLICT)
      decided_already(k, op, state);
    else
      no_op(k, op, rc, &err, "", NULL);
    return;
  }
  int rc = jb_db_op_decide(k->c, jb_signer_key(k->app->signer), k->job, op, approve, a->reason,
                           k->actor, &json, state, &head, &err);
  if (rc == JB_OK) {
    decided(k, json, NULL, &head);
  } else if (rc == JB_ERR_CONFLICT) {
    decided_already(k, op, state);
  } else {
    no_op(k, op, rc, &err, "", NULL);
  }
}

/* ---------- kill, mode, effects, pre-scan, rules ---------- */

static void kill_op(struct control *k, const struct jb_control_args *a) {
  jb_error err = {0};
  char state[20] = "";
  json_t *out = NULL;
  int rc = jb_op_kill(k->app, k->c, k->job, a->op_id, a->reason, k->actor, &out, state, &err);
  if (rc == JB_OK) {
    changed(k);
    jb_reply_ok(k->out, 200, out);
    return;
  }
  no_op(k, a->op_id, rc, &err,
        "only an exec that is pending, queued or running can be killed; it is", state);
}

static void set_mode(struct control *k, const struct jb_control_args *a) {
  jb_error err = {0};
  char state[20] = "", *json = NULL;
  struct jb_audit_head head = {0};
  int rc = jb_db_session_set_mode(k->c, jb_signer_key(k->app->signer), k->job, a->mode, state,
                                  &head, &err);
  if (rc == JB_OK) {
    publish_head(k, &head);
    changed(k);
    rc = jb_db_session_get(k->c, k->job, &json, &err);
  }
  if (rc != JB_OK) {
    free(json);
    no_session(k, rc, &err, "cannot change mode", state);
    return;
  }
  json_t *o = json_loads(json, 0, NULL);
  free(json);
  if (jb_reply_ok(k->out, 200, o) == 0) k->out->wrap = "session";
  jb_bus_publish(k->app->bus, k->job, JB_EVENT_MODE,
                 json_pack("{s:s,s:s}", "jobId", k->job, "mode", a->mode));
}

static void effects_clear(struct control *k, const struct jb_control_args *a) {
  jb_error err = {0};
  char state[20] = "";
  bool cleared = false;
  struct jb_audit_head head = {0};
  int rc = jb_db_session_effects_clear(k->c, jb_signer_key(k->app->signer), k->job, a->reason,
                                       &cleared, state, &head, &err);
  if (rc != JB_OK) {
    no_session(k, rc, &err, "cannot clear incomplete effects", state);
    return;
  }
  changed(k);
  jb_op_session_changed(k->job);
  publish_head(k, &head);
  jb_reply_ok(k->out, 200, json_pack("{s:s,s:b}", "jobId", k->job, "cleared", cleared));
}

/* The pre-scan confirmed, with more exclusions: the session goes on to awaiting_agent. The
 * worker moves on by itself unless told to hold (JAILBOX_PRESCAN_HOLD): exclusions given
 * before the agent connects are still taken, and the answer says so. */
static void pre_scan_done(struct control *k, const struct jb_control_args *a) {
  static const char *const from[] = {"prescanning", NULL};
  if (a->exclude && json_array_size(a->exclude) > 0) {
    jb_error err = {0};
    char state[20] = "";
    char *text = json_dumps(a->exclude, JSON_COMPACT);
    if (!text) {
      jb_reply_fail(k->out, 500, "internal", "out of memory");
      return;
    }
    int rc = jb_db_session_add_exclusions(k->c, k->job, text, state, &err);
    free(text);
    if (rc != JB_OK) {
      no_session(k, rc, &err, "cannot confirm the pre-scan", state);
      return;
    }
  }
  transition(k, NULL, from, "awaiting_agent");
  if (k->out->status == 409 &&
      jb_session_state_from_name(k->out->state) == JB_SESSION_AWAITING_AGENT) {
    jb_reply_release(k->out);
    *k->out = (struct jb_reply){0};
    jb_reply_ok(k->out, 200, json_pack("{s:s,s:s}", "jobId", k->job, "state", "awaiting_agent"));
  }
}

static void rules(struct control *k, enum jb_control ctl, const struct jb_control_args *a) {
  if (ctl == JB_CONTROL_RULE_ADD)
    jb_policy_add(k->app, k->c, k->job, a->rules, k->actor, k->out);
  else
    jb_policy_revoke(k->app, k->c, k->job, a->rule_id, k->actor, k->out);
  if (k->out->status < 400) k->out->wrap = "result";
}

/* ---------- the one entry ---------- */

/* The session must be live: an ended one is read-only (409 invalid_state with its state). */
static int live(struct control *k) {
  jb_error err = {0};
  char state[20] = "";
  int rc = jb_db_session_state(k->c, k->job, state, &err);
  if (rc != JB_OK) {
    no_session(k, rc, &err, "", NULL);
    return -1;
  }
  if (!jb_state_is_live(state))
    return jb_reply_invalid_state(k->out, "the session is read-only: it ended", state);
  return 0;
}

static void dispatch(struct control *k, enum jb_control ctl, const struct jb_control_args *a) {
  static const char *const from_live[] = {JB_LIVE_STATES, NULL};
  static const char *const from_active[] = {"active", NULL};
  static const char *const from_paused[] = {"paused", NULL};
  static const char *const from_done[] = {"done", NULL};
  switch (ctl) {
    case JB_CONTROL_PAUSE:
      return transition(k, a->reason, from_active, "paused");
    case JB_CONTROL_RESUME:
      return transition(k, a->reason, from_paused, "active");
    case JB_CONTROL_ABORT:
      return transition(k, a->reason, from_live, "aborted");
    case JB_CONTROL_ACCEPT:
      return transition(k, a->reason, from_done, "accepted");
    case JB_CONTROL_APPROVE:
    case JB_CONTROL_REJECT:
      return decide(k, a, ctl == JB_CONTROL_APPROVE);
    case JB_CONTROL_KILL:
      return kill_op(k, a);
    case JB_CONTROL_MODE:
      return set_mode(k, a);
    case JB_CONTROL_RULE_ADD:
    case JB_CONTROL_RULE_REVOKE:
      return rules(k, ctl, a);
    case JB_CONTROL_PRE_SCAN_DONE:
      return pre_scan_done(k, a);
    case JB_CONTROL_EFFECTS_CLEAR:
      return effects_clear(k, a);
    case JB_CONTROL_ROLLBACK:
      return jb_rollback_request(k->app, k->c, k->job, k->actor, a, k->out);
    case JB_CONTROL_COUNT:
      break;
  }
  jb_reply_fail(k->out, 400, "bad_request", "no such control");
}

/* The arguments of `ctl` checked into `a` for `who`: 0, or -1 with a 400 in k->out. The
 * operator's pause, resume and abort carry their reason (the buyer's need not). */
static int arguments(struct control *k, const struct jb_principal *who, enum jb_control ctl,
                     const json_t *args, struct jb_control_args *a) {
  char msg[sizeof k->out->msg];
  if (jb_control_check(ctl, args, a, msg, sizeof msg) < 0)
    return jb_reply_fail(k->out, 400, "bad_request", "%s", msg);
  if (who->role == JB_ROLE_SERVICE && jb_control_operator_needs_reason(ctl) &&
      (!a->reason || !a->reason[0]))
    return jb_reply_fail(k->out, 400, "bad_request",
                         "field 'reason' is required: the operator (the service token) says why "
                         "it pauses, resumes, aborts or rolls back a session (1 to 1024 bytes, "
                         "no control characters)");
  return 0;
}

void jb_control_run(struct jb_app *app, PGconn *c, const struct jb_principal *who, const char *job,
                    enum jb_control ctl, const json_t *args, struct jb_reply *out) {
  *out = (struct jb_reply){0};
  if (!(jb_control_roles(ctl) & who->role)) { /* the doors check it too: here it holds for all */
    jb_reply_fail(out, 403, "forbidden", "the %s token may not do this", jb_role_name(who->role));
    return;
  }
  jb_error err = {0};
  struct control k = {.app = app,
                      .c = c,
                      .job = job,
                      .actor = who->role == JB_ROLE_SERVICE ? "service" : "buyer",
                      .out = out};
  if (!c && !(k.c = jb_db_acquire(app->db, &err))) {
    jb_reply_db(out, JB_ERR_FAIL, &err, "", "", NULL);
    return;
  }
  struct jb_control_args a;
  if ((who->live_checked || jb_control_on_ended(ctl) || live(&k) == 0) &&
      arguments(&k, who, ctl, args, &a) == 0)
    dispatch(&k, ctl, &a);
  if (!c) jb_db_release(app->db, k.c);
}
