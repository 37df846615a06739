/* test_controls.c — the buyer's controls through the core (api/core/controls.h
 * jb_control_run), with no door and no socket: a real PostgreSQL (the embedded cluster of
 * db/pgembed.h under a scratch state directory), the migrations, a signing key and the bus.
 * Each control's reply (status, code, state, body, Socket.IO wrap) and the events it publishes;
 * and the one database-result mapping (api/core/reply.h jb_reply_db) for every result. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/core/controls.h"
#include "db/db.h"
#include "db/migrate.h"
#include "db/ops.h"
#include "db/pgembed.h"
#include "db/sessions.h"
#include "db/signer.h"
#include "server/app.h"
#include "server/bus.h"

static struct jb_pgembed pg;
static struct jb_app app;
static char state_dir[] = "/tmp/jbctl.XXXXXX";
static int events[JB_EVENT_KINDS]; /* published per kind since the last reset */
static char state_actor[16], state_reason[64]; /* of the last jailbox:state published */

static void on_bus(void *ctx, const char *job, enum jb_event_kind kind, json_t *payload) {
  (void)ctx, (void)job;
  if ((int)kind >= 0 && kind < JB_EVENT_KINDS) events[kind]++;
  if (kind == JB_EVENT_STATE) {
    const char *a = json_string_value(json_object_get(payload, "actor"));
    const char *r = json_string_value(json_object_get(payload, "reason"));
    snprintf(state_actor, sizeof state_actor, "%s", a ? a : "");
    snprintf(state_reason, sizeof state_reason, "%s", r ? r : "");
  }
}

static int setup(void **state) {
  (void)state;
  jb_error err = {0};
  if (!mkdtemp(state_dir)) return -1;
  if (jb_pgembed_start(&pg, state_dir, "", "nobody", &err) < 0) {
    fprintf(stderr, "embedded PostgreSQL: %s\n", err.msg);
    return -1;
  }
  app.bus = jb_bus_new();
  if (!app.bus || jb_bus_subscribe(app.bus, on_bus, NULL) < 0) return -1;
  if (jb_db_open(&app.db, pg.conninfo, 4, 10, &err) < 0) return -1;
  PGconn *c = jb_db_acquire(app.db, &err);
  int applied = 0;
  if (!c || jb_migrate(c, jb_migrations, jb_migrations_count, &applied, &err) < 0) {
    fprintf(stderr, "migrate: %s\n", err.msg);
    return -1;
  }
  jb_db_release(app.db, c);
  if (jb_signer_open(&app.signer, app.db, state_dir, "", "test", &err) < 0) {
    fprintf(stderr, "signer: %s\n", err.msg);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  jb_error err = {0};
  jb_signer_close(app.signer);
  jb_db_close(app.db);
  jb_pgembed_stop(&pg, &err);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", state_dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* A new session `job`, moved to `state` (by the state machine's own transition). */
static void session(const char *job, const char *state) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_non_null(c);
  unsigned char bh[32] = {1}, ah[32] = {2};
  bh[1] = ah[1] = (unsigned char)strlen(job);
  bh[2] = ah[2] = (unsigned char)job[strlen(job) - 1];
  char ws[64];
  snprintf(ws, sizeof ws, "/nonexistent/%s", job);
  struct jb_session_new s = {.job_id = job,
                             .agent_id = "agent-1",
                             .workspace = ws,
                             .mode = "supervised",
                             .exclude_json = "[]",
                             .limits_json = "{}",
                             .image = "jailbox/sandbox:test",
                             .buyer_hash = bh,
                             .agent_hash = ah};
  struct jb_audit_head head;
  assert_int_equal(jb_db_session_create(c, jb_signer_key(app.signer), &s, &head, &err), JB_OK);
  if (strcmp(state, "created") != 0) {
    static const char *const from[] = {"created", NULL};
    struct jb_transition t;
    assert_int_equal(jb_db_session_transition(c, jb_signer_key(app.signer), job, from, state, NULL,
                                              "system", &t, &err),
                     JB_OK);
  }
  jb_db_release(app.db, c);
}

/* A pending op of `tool` on `path` in session `job`: its id. */
static long long pending_op(const char *job, const char *tool, const char *path) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_non_null(c);
  long long id = 0;
  char st[20];
  assert_int_equal(
      jb_db_op_create(c, job, tool, path, "{\"path\":\"a.txt\"}", true, NULL, &id, st, &err),
      JB_OK);
  jb_db_release(app.db, c);
  return id;
}

/* Runs `ctl` on `job` with the JSON argument `args` ("" none) for `role` (a buyer: of the
 * session; the service token: of none). */
static void run_as(enum jb_role role, const char *job, enum jb_control ctl, const char *args,
                   struct jb_reply *r) {
  memset(events, 0, sizeof events);
  state_actor[0] = state_reason[0] = '\0';
  json_t *a = args[0] ? json_loads(args, 0, NULL) : NULL;
  if (args[0]) assert_non_null(a);
  struct jb_principal who = {.role = role};
  if (role == JB_ROLE_BUYER) snprintf(who.job_id, sizeof who.job_id, "%s", job);
  jb_control_run(&app, NULL, &who, job, ctl, a, r);
  json_decref(a);
}

/* Runs `ctl` on `job` with the JSON argument `args` ("" none) for the session's buyer. */
static void run(const char *job, enum jb_control ctl, const char *args, struct jb_reply *r) {
  run_as(JB_ROLE_BUYER, job, ctl, args, r);
}

/* The details of the last audit entry of `operation` in session `job`: a new object. */
static json_t *last_entry(const char *job, const char *operation) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_non_null(c);
  const char *p[2] = {job, operation};
  PGresult *res = PQexecParams(c,
                               "SELECT jb_audit_details(canonical)::text FROM audit_entries"
                               " WHERE job_id = $1 AND operation = $2 ORDER BY seq DESC LIMIT 1",
                               2, NULL, p, NULL, NULL, 0);
  assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
  assert_int_equal(PQntuples(res), 1);
  json_t *d = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
  PQclear(res);
  jb_db_release(app.db, c);
  assert_non_null(d);
  return d;
}

static const char *str(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/* pause, resume, abort, accept: the state machine, its events, and the read-only end. */
static void state_changes(void **state) {
  (void)state;
  struct jb_reply r;
  session("ctl-a", "active");
  run("ctl-a", JB_CONTROL_PAUSE, "{\"reason\":\"lunch\"}", &r);
  assert_int_equal(r.status, 200);
  assert_null(r.wrap);
  assert_string_equal(str(r.body, "state"), "paused");
  assert_string_equal(str(r.body, "previous"), "active");
  assert_int_equal(events[JB_EVENT_STATE], 1);
  assert_int_equal(events[JB_EVENT_AUDIT_HEAD], 1);
  jb_reply_release(&r);
  run("ctl-a", JB_CONTROL_PAUSE, "", &r); /* not from paused */
  assert_int_equal(r.status, 409);
  assert_string_equal(r.code, "invalid_state");
  assert_string_equal(r.state, "paused");
  assert_int_equal(events[JB_EVENT_STATE], 0);
  jb_reply_release(&r);
  run("ctl-a", JB_CONTROL_ACCEPT, "", &r); /* only from done */
  assert_int_equal(r.status, 409);
  assert_string_equal(r.state, "paused");
  jb_reply_release(&r);
  run("ctl-a", JB_CONTROL_RESUME, "", &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(str(r.body, "state"), "active");
  jb_reply_release(&r);
  run("ctl-a", JB_CONTROL_ABORT, "{\"reason\":\"done with it\"}", &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(str(r.body, "state"), "aborted");
  jb_reply_release(&r);
  /* an ended session is read-only for every control, before its arguments are looked at —
   * but rollback, which takes ended sessions (test_rollback.c) */
  for (int ctl = 0; ctl < JB_CONTROL_COUNT; ctl++) {
    if (jb_control_on_ended((enum jb_control)ctl)) continue;
    run("ctl-a", (enum jb_control)ctl, "{\"bogus\":1}", &r);
    assert_int_equal(r.status, 409);
    assert_string_equal(r.code, "invalid_state");
    assert_string_equal(r.state, "aborted");
    assert_non_null(strstr(r.msg, "read-only"));
    jb_reply_release(&r);
  }
}

/* approve and reject: the op answered under "op", announced; a second decision is told how
 * the first went. */
static void decisions(void **state) {
  (void)state;
  struct jb_reply r;
  session("ctl-d", "active");
  long long a = pending_op("ctl-d", "write", "a.txt"), b = pending_op("ctl-d", "write", "b.txt");
  char args[64];
  snprintf(args, sizeof args, "{\"opId\":%lld}", a);
  run("ctl-d", JB_CONTROL_APPROVE, args, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.wrap, "op");
  assert_string_equal(str(r.body, "state"), "approved");
  assert_null(r.extra);
  assert_int_equal(events[JB_EVENT_OP], 1);
  jb_reply_release(&r);
  run("ctl-d", JB_CONTROL_REJECT, args, &r); /* lost: it was approved */
  assert_int_equal(r.status, 409);
  assert_string_equal(r.code, "invalid_state");
  assert_int_equal(events[JB_EVENT_OP], 0);
  jb_reply_release(&r);
  snprintf(args, sizeof args, "{\"opId\":%lld,\"reason\":\"no\"}", b);
  run("ctl-d", JB_CONTROL_REJECT, args, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(str(r.body, "state"), "rejected");
  jb_reply_release(&r);
  run("ctl-d", JB_CONTROL_APPROVE, "{\"opId\":99999}", &r);
  assert_int_equal(r.status, 404);
  assert_string_equal(r.code, "not_found");
  jb_reply_release(&r);
  run("ctl-d", JB_CONTROL_APPROVE, "{\"opId\":\"one\"}", &r); /* the schema */
  assert_int_equal(r.status, 400);
  assert_string_equal(r.code, "bad_request");
  jb_reply_release(&r);
  /* allow-similar: the rule beside the op */
  long long c = pending_op("ctl-d", "write", "src/c.txt");
  snprintf(args, sizeof args, "{\"opId\":%lld,\"allowSimilar\":\"directory\"}", c);
  run("ctl-d", JB_CONTROL_APPROVE, args, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.wrap, "op");
  assert_non_null(json_object_get(r.extra, "rule"));
  assert_int_equal(events[JB_EVENT_OP], 1);
  jb_reply_release(&r);
}

/* mode (the session under "session"), rules (under "result"), kill, effects, pre-scan. */
static void the_others(void **state) {
  (void)state;
  struct jb_reply r;
  session("ctl-o", "active");
  run("ctl-o", JB_CONTROL_MODE, "{\"mode\":\"unsupervised\"}", &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.wrap, "session");
  assert_string_equal(str(r.body, "mode"), "unsupervised");
  assert_int_equal(events[JB_EVENT_MODE], 1);
  jb_reply_release(&r);
  run("ctl-o", JB_CONTROL_MODE, "{\"mode\":\"loose\"}", &r);
  assert_int_equal(r.status, 400);
  jb_reply_release(&r);
  run("ctl-o", JB_CONTROL_RULE_ADD,
      "{\"rule\":{\"id\":\"r1\",\"tool\":\"write\",\"effect\":\"allow\",\"path\":"
      "\"docs/**\"}}",
      &r);
  assert_int_equal(r.status, 201);
  assert_string_equal(r.wrap, "result");
  assert_int_equal(json_array_size(json_object_get(r.body, "rules")), 1);
  jb_reply_release(&r);
  run("ctl-o", JB_CONTROL_RULE_REVOKE, "{\"ruleId\":\"r1\"}", &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(str(r.body, "state"), "revoked");
  jb_reply_release(&r);
  run("ctl-o", JB_CONTROL_RULE_REVOKE, "{\"ruleId\":\"nope\"}", &r);
  assert_int_equal(r.status, 404);
  jb_reply_release(&r);
  long long w = pending_op("ctl-o", "write", "k.txt");
  char args[64];
  snprintf(args, sizeof args, "{\"opId\":%lld}", w);
  run("ctl-o", JB_CONTROL_KILL, args, &r); /* not an exec */
  assert_int_equal(r.status, 409);
  assert_string_equal(r.code, "invalid_state");
  jb_reply_release(&r);
  run("ctl-o", JB_CONTROL_EFFECTS_CLEAR, "", &r);
  assert_int_equal(r.status, 200);
  assert_true(json_is_false(json_object_get(r.body, "cleared")));
  jb_reply_release(&r);
  run("ctl-o", JB_CONTROL_PRE_SCAN_DONE, "", &r); /* the session is past its pre-scan */
  assert_int_equal(r.status, 409);
  assert_string_equal(r.state, "active");
  jb_reply_release(&r);
  session("ctl-p", "prescanning");
  run("ctl-p", JB_CONTROL_PRE_SCAN_DONE, "{\"exclude\":[\"secrets/**\"]}", &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(str(r.body, "state"), "awaiting_agent");
  jb_reply_release(&r);
  run("no-such-session", JB_CONTROL_PAUSE, "", &r);
  assert_int_equal(r.status, 404);
  assert_string_equal(r.code, "not_found");
  jb_reply_release(&r);
}

/* The operator (the service token): pause, resume and abort any session with a reason, which
 * the audit chain and the events record as the operator's ("service"); no reason is a 400;
 * the buyer's decisions stay the buyer's; a pause is lifted by whoever made it. */
static void operator_controls(void **state) {
  (void)state;
  struct jb_reply r;
  session("ctl-s", "active");
  static const char *const no_reason[] = {"", "{}", "{\"reason\":\"\"}", "{\"reason\":null}",
                                          "{\"reason\":\"a\\u0001b\"}"};
  for (size_t i = 0; i < sizeof no_reason / sizeof *no_reason; i++) {
    run_as(JB_ROLE_SERVICE, "ctl-s", JB_CONTROL_ABORT, no_reason[i], &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(r.code, "bad_request");
    assert_non_null(strstr(r.msg, "'reason'"));
    assert_int_equal(events[JB_EVENT_STATE], 0);
    jb_reply_release(&r);
  }
  run_as(JB_ROLE_SERVICE, "ctl-s", JB_CONTROL_PAUSE, "", &r);
  assert_int_equal(r.status, 400);
  jb_reply_release(&r);
  /* the buyer's decisions, mode and acceptance are not the operator's */
  long long op = pending_op("ctl-s", "write", "s.txt");
  char args[96];
  snprintf(args, sizeof args, "{\"opId\":%lld,\"reason\":\"ops\"}", op);
  static const enum jb_control buyers[] = {JB_CONTROL_APPROVE,       JB_CONTROL_REJECT,
                                           JB_CONTROL_MODE,          JB_CONTROL_ACCEPT,
                                           JB_CONTROL_EFFECTS_CLEAR, JB_CONTROL_PRE_SCAN_DONE};
  for (size_t i = 0; i < sizeof buyers / sizeof *buyers; i++) {
    run_as(JB_ROLE_SERVICE, "ctl-s", buyers[i],
           buyers[i] == JB_CONTROL_MODE ? "{\"mode\":\"unsupervised\"}" : args, &r);
    assert_int_equal(r.status, 403);
    assert_string_equal(r.code, "forbidden");
    assert_string_equal(r.msg, "the service token may not do this");
    jb_reply_release(&r);
  }
  /* the operator's pause: only the operator lifts it; the buyer's likewise */
  run_as(JB_ROLE_SERVICE, "ctl-s", JB_CONTROL_PAUSE, "{\"reason\":\"incident 42\"}", &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(str(r.body, "state"), "paused");
  assert_string_equal(state_actor, "service");
  assert_string_equal(state_reason, "incident 42");
  jb_reply_release(&r);
  run("ctl-s", JB_CONTROL_RESUME, "", &r);
  assert_int_equal(r.status, 409);
  assert_string_equal(r.state, "paused");
  assert_non_null(strstr(r.msg, "paused by the operator"));
  jb_reply_release(&r);
  run_as(JB_ROLE_SERVICE, "ctl-s", JB_CONTROL_RESUME, "{\"reason\":\"resolved\"}", &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(str(r.body, "state"), "active");
  jb_reply_release(&r);
  run("ctl-s", JB_CONTROL_PAUSE, "", &r);
  assert_int_equal(r.status, 200);
  jb_reply_release(&r);
  run_as(JB_ROLE_SERVICE, "ctl-s", JB_CONTROL_RESUME, "{\"reason\":\"go on\"}", &r);
  assert_int_equal(r.status, 409);
  assert_non_null(strstr(r.msg, "paused by the buyer"));
  jb_reply_release(&r);
  /* the operator's abort, in the chain as the operator's with its reason */
  run_as(JB_ROLE_SERVICE, "ctl-s", JB_CONTROL_ABORT, "{\"reason\":\"runaway session\"}", &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(str(r.body, "state"), "aborted");
  assert_int_equal(json_integer_value(json_object_get(r.body, "rejectedOps")), 1);
  assert_int_equal(events[JB_EVENT_STATE], 1);
  assert_string_equal(state_actor, "service");
  assert_string_equal(state_reason, "runaway session");
  jb_reply_release(&r);
  json_t *d = last_entry("ctl-s", "abort");
  assert_string_equal(str(d, "actor"), "service");
  assert_string_equal(str(d, "reason"), "runaway session");
  assert_string_equal(str(d, "from"), "paused");
  json_decref(d);
  d = last_entry("ctl-s", "pause");
  assert_string_equal(str(d, "actor"), "buyer");
  json_decref(d);
}

/* The one mapping of a database result, every result. */
static void db_result_mapping(void **state) {
  (void)state;
  struct jb_reply r = {0};
  jb_error err = {.msg = "connection refused"};
  assert_int_equal(jb_reply_db(&r, JB_OK, &err, "none", "what", "active"), 0);
  assert_int_equal(r.status, 0);
  assert_int_equal(jb_reply_db(&r, JB_ERR_NOT_FOUND, &err, "no session 'x'", "w", "s"), -1);
  assert_int_equal(r.status, 404);
  assert_string_equal(r.code, "not_found");
  assert_string_equal(r.msg, "no session 'x'");
  assert_int_equal(jb_reply_db(&r, JB_ERR_CONFLICT, &err, "", "cannot go to paused", "done"), -1);
  assert_int_equal(r.status, 409);
  assert_string_equal(r.code, "invalid_state");
  assert_string_equal(r.msg, "cannot go to paused in state done");
  assert_string_equal(r.state, "done");
  assert_int_equal(jb_reply_db(&r, JB_ERR_CONFLICT, &err, "", "rule id taken", NULL), -1);
  assert_string_equal(r.code, "conflict");
  assert_string_equal(r.state, "");
  assert_int_equal(jb_reply_db(&r, JB_ERR_EXISTS, &err, "", "a session exists", NULL), -1);
  assert_string_equal(r.code, "exists");
  assert_int_equal(jb_reply_db(&r, JB_ERR_FAIL, &err, "", "", NULL), -1);
  assert_int_equal(r.status, 503);
  assert_string_equal(r.code, "database_unavailable");
  assert_null(strstr(r.msg, "refused")); /* the detail goes to the log only */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(db_result_mapping), cmocka_unit_test(state_changes),
      cmocka_unit_test(decisions),         cmocka_unit_test(the_others),
      cmocka_unit_test(operator_controls),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
