/* test_rollback.c — the rollback control through the core (api/core/rollback.h), with no door
 * and no worker: a real PostgreSQL (the embedded cluster of db/pgembed.h under a scratch state
 * directory) and the migrations. Ops and pre-image rows are written as the worker would leave
 * them; the checks are the arguments (parsed once, for both doors), who may ask, each refusal
 * (with its code and in its order), the dry run's plan, the queued launch job and its payload,
 * resume refused while it waits, a rollback's state, and the summary of GET …/changes. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/core/controls.h"
#include "api/core/rollback.h"
#include "db/db.h"
#include "db/migrate.h"
#include "db/pgembed.h"
#include "db/preimages.h"
#include "db/sessions.h"
#include "db/signer.h"
#include "server/app.h"
#include "server/bus.h"

static struct jb_pgembed pg;
static struct jb_app app;
static char state_dir[] = "/tmp/jbrb.XXXXXX";
static int rollback_events; /* jailbox:rollback published since the last run */

static void on_bus(void *ctx, const char *job, enum jb_event_kind kind, json_t *payload) {
  (void)ctx, (void)job, (void)payload;
  if (kind == JB_EVENT_ROLLBACK) rollback_events++;
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

/* Runs `sql` with up to three text parameters; the first value of its first row into `out`
 * (`len` bytes; "" when none). */
static void sql(const char *q, const char *p1, const char *p2, const char *p3, char *out,
                size_t len) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_non_null(c);
  const char *p[3] = {p1, p2, p3};
  int n = p3 ? 3 : p2 ? 2 : p1 ? 1 : 0;
  PGresult *r = PQexecParams(c, q, n, NULL, p, NULL, NULL, 0);
  int st = PQresultStatus(r);
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) fail_msg("%s: %s", q, PQerrorMessage(c));
  if (out) snprintf(out, len, "%s", PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
  PQclear(r);
  jb_db_release(app.db, c);
}

/* A new session `job`, moved from created to `state` by the state machine. */
static void session(const char *job, const char *state) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_non_null(c);
  unsigned char bh[32] = {3}, ah[32] = {4};
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
  static const char *const from[] = {"created", NULL};
  struct jb_transition t;
  assert_int_equal(jb_db_session_transition(c, jb_signer_key(app.signer), job, from, state, NULL,
                                            "system", &t, &err),
                   JB_OK);
  jb_db_release(app.db, c);
}

/* An op of `tool` on `path` in `state`, with `args` (JSON text). Its id. */
static long long op(const char *job, const char *tool, const char *path, const char *state,
                    const char *args) {
  char id[24], spec[512];
  snprintf(spec, sizeof spec, "{\"tool\":\"%s\",\"path\":\"%s\",\"state\":\"%s\"}", tool, path,
           state);
  sql("INSERT INTO ops (job_id, tool, path, state, args)"
      " SELECT $1, s->>'tool', s->>'path', s->>'state', $3::jsonb"
      " FROM (SELECT $2::jsonb AS s) x RETURNING op_id",
      job, spec, args, id, sizeof id);
  return atoll(id);
}

/* A pre-image row of op `op_id` for `path` (kind file, with a sha256 made of `fill`). */
static void preimage(const char *job, long long op_id, const char *path, char fill) {
  char ids[24], sha[65];
  snprintf(ids, sizeof ids, "%lld", op_id);
  memset(sha, fill, 64);
  sha[64] = '\0';
  char spec[256];
  snprintf(spec, sizeof spec, "{\"path\":\"%s\",\"sha\":\"%s\"}", path, sha);
  sql("INSERT INTO preimages (job_id, op_id, path, kind, sha256, mode, after_kind)"
      " SELECT $1, $2::bigint, s->>'path', 'file', s->>'sha', 420, 'file'"
      " FROM (SELECT $3::jsonb AS s) x",
      job, ids, spec, NULL, 0);
}

static void run_as(enum jb_role role, const char *job, const char *args, struct jb_reply *r) {
  rollback_events = 0;
  json_t *a = args[0] ? json_loads(args, 0, NULL) : NULL;
  if (args[0]) assert_non_null(a);
  struct jb_principal who = {.role = role};
  if (role == JB_ROLE_BUYER) snprintf(who.job_id, sizeof who.job_id, "%s", job);
  jb_control_run(&app, NULL, &who, job, JB_CONTROL_ROLLBACK, a, r);
  json_decref(a);
}

static void run(const char *job, const char *args, struct jb_reply *r) {
  run_as(JB_ROLE_BUYER, job, args, r);
}

/* `job`'s rollback with `args` is refused with `status` and `code`. */
static void refused(const char *job, const char *args, int status, const char *code) {
  struct jb_reply r;
  run(job, args, &r);
  if (r.status != status || !r.code || strcmp(r.code, code) != 0)
    fail_msg("%s %s: %d %s (%s), wanted %d %s", job, args, r.status, r.code ? r.code : "-", r.msg,
             status, code);
  assert_int_equal(rollback_events, 0);
  jb_reply_release(&r);
}

static long long count_jobs(const char *job) {
  char n[24];
  sql("SELECT count(*) FROM launch_jobs WHERE job_id = $1 AND kind = 'rollback'", job, NULL, NULL,
      n, sizeof n);
  return atoll(n);
}

/* The arguments: one schema for both doors; the operator says why. */
static void arguments(void **state) {
  (void)state;
  session("rb-args", "paused");
  refused("rb-args", "{\"bogus\":1}", 400, "bad_request");
  refused("rb-args", "{\"to\":\"x\"}", 400, "bad_request");
  refused("rb-args", "{\"to\":0}", 400, "bad_request");
  refused("rb-args", "{\"to\":-3}", 400, "bad_request");
  refused("rb-args", "{\"force\":\"yes\"}", 400, "bad_request");
  refused("rb-args", "{\"dryRun\":1}", 400, "bad_request");
  refused("rb-args", "{\"reason\":\"a\\u0001b\"}", 400, "bad_request");
  refused("rb-args", "[1]", 400, "bad_request");
  struct jb_reply r;
  run_as(JB_ROLE_SERVICE, "rb-args", "{\"dryRun\":true}", &r); /* the operator: a reason */
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.msg, "reason"));
  jb_reply_release(&r);
  run_as(JB_ROLE_SERVICE, "rb-args", "{\"dryRun\":true,\"reason\":\"ticket 9\"}", &r);
  assert_int_equal(r.status, 200);
  jb_reply_release(&r);
  run_as(JB_ROLE_AGENT, "rb-args", "{}", &r); /* never the agent */
  assert_int_equal(r.status, 403);
  jb_reply_release(&r);
  refused("rb-args", "{\"to\":99999}", 404, "no_such_op"); /* not an op of the session */
  long long other = op("rb-args", "write", "x.txt", "done", "{}");
  session("rb-other", "paused");
  char args[64];
  snprintf(args, sizeof args, "{\"to\":%lld}", other); /* an op of another session */
  refused("rb-other", args, 404, "no_such_op");
  refused("rb-none", "{}", 404, "not_found");
  assert_int_equal(count_jobs("rb-args"), 0);
}

/* The states: paused or ended, never active; accepted or dropped pre-images are gone. */
static void states(void **state) {
  (void)state;
  struct jb_reply r;
  session("rb-active", "active");
  run("rb-active", "{}", &r);
  assert_int_equal(r.status, 409);
  assert_string_equal(r.code, "not_paused");
  assert_string_equal(r.state, "active");
  jb_reply_release(&r);
  session("rb-waiting", "awaiting_agent");
  refused("rb-waiting", "{\"dryRun\":true}", 409, "not_paused");
  session("rb-ended", "done"); /* ended, its chain open: taken */
  run("rb-ended", "{}", &r);
  assert_int_equal(r.status, 202);
  jb_reply_release(&r);
  session("rb-aborted", "aborted"); /* an abort seals the chain: nothing could record it */
  refused("rb-aborted", "{}", 409, "chain_sealed");
  session("rb-accepted", "done");
  sql("UPDATE sessions SET state = 'accepted' WHERE job_id = $1", "rb-accepted", NULL, NULL, NULL,
      0);
  refused("rb-accepted", "{}", 410, "preimages_gone");
  session("rb-gone", "failed");
  sql("UPDATE sessions SET preimages_gone_at = now() WHERE job_id = $1", "rb-gone", NULL, NULL,
      NULL, 0);
  refused("rb-gone", "{\"dryRun\":true}", 410, "preimages_gone");
  /* its rows stay, but with the blobs gone a rollback would undo nothing */
  preimage("rb-gone", op("rb-gone", "write", "g.txt", "done", "{}"), "g.txt", 'c');
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  jb_rollback_changes(c, "rb-gone", &r);
  jb_db_release(app.db, c);
  json_t *rb = json_object_get(r.body, "rollback");
  assert_string_equal(json_string_value(json_object_get(rb, "why")), "preimages_gone");
  assert_int_equal(json_integer_value(json_object_get(rb, "wouldUndo")), 0);
  jb_reply_release(&r);
  /* a sealed chain, or a seal pending (an escape's abort), could not record the rollback */
  session("rb-sealed", "aborted");
  sql("UPDATE audit_heads SET sealed = true WHERE job_id = $1", "rb-sealed", NULL, NULL, NULL, 0);
  refused("rb-sealed", "{}", 409, "chain_sealed");
  session("rb-sealing", "aborted");
  sql("INSERT INTO seals_pending (job_id) VALUES ($1)", "rb-sealing", NULL, NULL, NULL, 0);
  refused("rb-sealing", "{}", 409, "chain_sealed");
  assert_int_equal(count_jobs("rb-accepted") + count_jobs("rb-gone") + count_jobs("rb-active") +
                       count_jobs("rb-sealed") + count_jobs("rb-sealing"),
                   0);
}

/* ops running, writable commands without pre-images, the dry run's plan newest first. */
static void plan_and_refusals(void **state) {
  (void)state;
  struct jb_reply r;
  session("rb-plan", "paused");
  long long w1 = op("rb-plan", "write", "a.txt", "done", "{}");
  preimage("rb-plan", w1, "a.txt", 'a');
  long long w2 = op("rb-plan", "edit", "b.txt", "done", "{}");
  preimage("rb-plan", w2, "b.txt", 'b');
  long long m = op("rb-plan", "move", "c.txt", "done", "{}");
  preimage("rb-plan", m, "c.txt", 'c');
  preimage("rb-plan", m, "d.txt", 'd');
  run("rb-plan", "{\"dryRun\":true}", &r);
  assert_int_equal(r.status, 200);
  json_t *undo = json_object_get(r.body, "wouldUndo"), *files = json_object_get(r.body, "files");
  assert_int_equal(json_array_size(undo), 3);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(undo, 0), "opId")), m);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(undo, 2), "opId")), w1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(undo, 1), "tool")), "edit");
  assert_int_equal(json_array_size(files), 4);
  assert_string_equal(json_string_value(json_object_get(json_array_get(files, 0), "path")),
                      "d.txt"); /* the newest row first */
  assert_string_equal(json_string_value(json_object_get(json_array_get(files, 3), "kind")), "file");
  assert_int_equal(json_integer_value(json_object_get(r.body, "count")), 4);
  assert_int_equal(rollback_events, 0);
  jb_reply_release(&r);
  char args[96];
  snprintf(args, sizeof args, "{\"to\":%lld,\"dryRun\":true}", w2); /* w2 stays */
  run("rb-plan", args, &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(json_array_size(json_object_get(r.body, "wouldUndo")), 1);
  assert_int_equal(json_integer_value(json_object_get(r.body, "count")), 2);
  jb_reply_release(&r);
  /* an op approved or running: pause first and let it end */
  long long x = op("rb-plan", "exec", "", "running", "{\"writable\":true}");
  refused("rb-plan", "{}", 409, "ops_running");
  char ids[24];
  snprintf(ids, sizeof ids, "%lld", x);
  sql("UPDATE ops SET state = 'approved' WHERE op_id = $1::bigint", ids, NULL, NULL, NULL, 0);
  refused("rb-plan", "{\"dryRun\":true}", 409, "ops_running");
  /* done, having changed files without pre-images: not restorable past it */
  sql("UPDATE ops SET state = 'done', changes = '{\"total\": 3}' WHERE op_id = $1::bigint", ids,
      NULL, NULL, NULL, 0);
  long long ro = op("rb-plan", "exec", "", "done", "{\"writable\":false}"); /* read-only */
  char ros[24];
  snprintf(ros, sizeof ros, "%lld", ro);
  sql("UPDATE ops SET changes = '{\"total\": 2}' WHERE op_id = $1::bigint", ros, NULL, NULL, NULL,
      0);
  run("rb-plan", "{}", &r);
  assert_int_equal(r.status, 409);
  assert_string_equal(r.code, "not_restorable");
  json_t *list = json_object_get(r.extra, "opIds");
  assert_int_equal(json_array_size(list), 1); /* the writable one only */
  assert_int_equal(json_integer_value(json_array_get(list, 0)), x);
  jb_reply_release(&r);
  snprintf(args, sizeof args, "{\"to\":%lld,\"dryRun\":true}", x); /* its effects stay: taken */
  run("rb-plan", args, &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(json_integer_value(json_object_get(r.body, "count")), 0);
  jb_reply_release(&r);
  /* the same command with pre-images (a changeset applied by the worker) is restorable */
  preimage("rb-plan", x, "gen.c", 'e');
  run("rb-plan", "{\"dryRun\":true}", &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(json_integer_value(json_object_get(r.body, "count")), 5);
  jb_reply_release(&r);
  assert_int_equal(count_jobs("rb-plan"), 0); /* a dry run queues nothing */
}

/* Queued: the launch job and its payload, the event, one at a time, resume refused, its state. */
static void queued(void **state) {
  (void)state;
  struct jb_reply r;
  session("rb-q", "active");
  long long w = op("rb-q", "write", "a.txt", "done", "{}");
  preimage("rb-q", w, "a.txt", 'a');
  static const char *const from[] = {"active", NULL};
  jb_error err = {0};
  struct jb_transition t;
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_int_equal(jb_db_session_transition(c, jb_signer_key(app.signer), "rb-q", from, "paused",
                                            NULL, "buyer", &t, &err),
                   JB_OK);
  jb_db_release(app.db, c);
  jb_rollback_changes(c = jb_db_acquire(app.db, &err), "rb-q", &r);
  jb_db_release(app.db, c);
  assert_int_equal(r.status, 200);
  json_t *rb = json_object_get(r.body, "rollback");
  assert_true(json_is_true(json_object_get(rb, "available")));
  assert_int_equal(json_integer_value(json_object_get(rb, "wouldUndo")), 1);
  assert_null(json_object_get(rb, "why"));
  assert_int_equal(json_array_size(json_object_get(r.body, "changes")), 1);
  jb_reply_release(&r);
  run("rb-q", "{\"force\":true}", &r);
  assert_int_equal(r.status, 202);
  assert_string_equal(json_string_value(json_object_get(r.body, "state")), "queued");
  long long id = json_integer_value(json_object_get(r.body, "rollbackId"));
  assert_true(id > 0);
  assert_int_equal(rollback_events, 1);
  jb_reply_release(&r);
  char payload[256];
  sql("SELECT payload::text FROM launch_jobs WHERE job_id = $1 AND kind = 'rollback'", "rb-q", NULL,
      NULL, payload, sizeof payload);
  json_t *p = json_loads(payload, 0, NULL);
  assert_true(json_is_null(json_object_get(p, "to")));
  assert_true(json_is_true(json_object_get(p, "force")));
  assert_string_equal(json_string_value(json_object_get(p, "by")), "buyer");
  json_decref(p);
  refused("rb-q", "{}", 409, "rollback_running"); /* one at a time */
  /* resume waits for it */
  struct jb_principal buyer = {.role = JB_ROLE_BUYER};
  snprintf(buyer.job_id, sizeof buyer.job_id, "rb-q");
  jb_control_run(&app, NULL, &buyer, "rb-q", JB_CONTROL_RESUME, NULL, &r);
  assert_int_equal(r.status, 409);
  assert_string_equal(r.code, "rollback_running");
  assert_string_equal(r.state, "paused");
  jb_reply_release(&r);
  c = jb_db_acquire(app.db, &err);
  char ids[24];
  snprintf(ids, sizeof ids, "%lld", id);
  jb_rollback_get(c, "rb-q", ids, &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(json_integer_value(json_object_get(r.body, "rollbackId")), id);
  assert_string_equal(json_string_value(json_object_get(r.body, "state")), "queued");
  assert_true(json_is_null(json_object_get(r.body, "to")));
  assert_true(json_is_true(json_object_get(r.body, "force")));
  jb_reply_release(&r);
  jb_rollback_get(c, "rb-plan", ids, &r); /* another session's id */
  assert_int_equal(r.status, 404);
  jb_reply_release(&r);
  jb_rollback_get(c, "rb-q", "1x", &r);
  assert_int_equal(r.status, 404);
  jb_reply_release(&r);
  jb_rollback_changes(c, "rb-q", &r);
  rb = json_object_get(r.body, "rollback");
  assert_false(json_is_true(json_object_get(rb, "available")));
  assert_string_equal(json_string_value(json_object_get(rb, "why")), "rollback_running");
  jb_reply_release(&r);
  jb_db_release(app.db, c);
  /* the worker ends it: resume goes through, a new rollback may be queued */
  sql("UPDATE launch_jobs SET state = 'done', result = '{\"conflicts\": 0}' WHERE id = $1::bigint",
      ids, NULL, NULL, NULL, 0);
  c = jb_db_acquire(app.db, &err);
  jb_rollback_get(c, "rb-q", ids, &r);
  assert_string_equal(json_string_value(json_object_get(r.body, "state")), "done");
  assert_int_equal(
      json_integer_value(json_object_get(json_object_get(r.body, "result"), "conflicts")), 0);
  jb_reply_release(&r);
  jb_db_release(app.db, c);
  run_as(JB_ROLE_SERVICE, "rb-q", "{\"reason\":\"incident 12\"}", &r);
  assert_int_equal(r.status, 202);
  jb_reply_release(&r);
  sql("SELECT payload->>'by' || ':' || (payload->>'reason') FROM launch_jobs WHERE job_id = $1"
      " AND kind = 'rollback' ORDER BY id DESC LIMIT 1",
      "rb-q", NULL, NULL, payload, sizeof payload);
  assert_string_equal(payload, "service:incident 12");
  sql("UPDATE launch_jobs SET state = 'failed' WHERE job_id = $1", "rb-q", NULL, NULL, NULL, 0);
  jb_control_run(&app, NULL, &buyer, "rb-q", JB_CONTROL_RESUME, NULL, &r);
  assert_int_equal(r.status, 200);
  jb_reply_release(&r);
}

/* A control run on its own thread (its own connection), to wait for a lock the test holds. */
struct bg {
  const char *job;
  enum jb_control ctl;
  struct jb_reply r;
};

static void *bg_run(void *arg) {
  struct bg *b = arg;
  struct jb_principal who = {.role = JB_ROLE_BUYER};
  snprintf(who.job_id, sizeof who.job_id, "%s", b->job);
  json_t *a = json_object();
  jb_control_run(&app, NULL, &who, b->job, b->ctl, a, &b->r);
  json_decref(a);
  return NULL;
}

/* `ctl` waits for the session row the test holds while the test queues a rollback: once the
 * lock is let go, it must see that rollback (a statement that waited for the lock reads with
 * the snapshot it began with, under READ COMMITTED: the facts are read after the lock). */
static void races_with_queue(const char *job, enum jb_control ctl) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_non_null(c);
  const char *p[1] = {job};
  PGresult *r = PQexec(c, "BEGIN");
  PQclear(r);
  r = PQexecParams(c, "SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, NULL, p, NULL, NULL,
                   0);
  assert_int_equal(PQntuples(r), 1);
  PQclear(r);
  struct bg b = {.job = job, .ctl = ctl};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, bg_run, &b), 0);
  usleep(400 * 1000); /* it reaches the lock and waits */
  r = PQexecParams(c, "INSERT INTO launch_jobs (job_id, kind) VALUES ($1, 'rollback')", 1, NULL, p,
                   NULL, NULL, 0);
  assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
  PQclear(r);
  r = PQexec(c, "COMMIT");
  PQclear(r);
  jb_db_release(app.db, c);
  assert_int_equal(pthread_join(t, NULL), 0);
  if (b.r.status != 409 || !b.r.code || strcmp(b.r.code, "rollback_running") != 0)
    fail_msg("%s raced a queued rollback: %d %s", job, b.r.status, b.r.msg);
  jb_reply_release(&b.r);
  sql("UPDATE launch_jobs SET state = 'done' WHERE job_id = $1", job, NULL, NULL, NULL, 0);
}

static void lock_races(void **state) {
  (void)state;
  session("rb-race", "active");
  struct jb_reply r;
  struct jb_principal buyer = {.role = JB_ROLE_BUYER};
  snprintf(buyer.job_id, sizeof buyer.job_id, "rb-race");
  jb_control_run(&app, NULL, &buyer, "rb-race", JB_CONTROL_PAUSE, NULL, &r);
  assert_int_equal(r.status, 200);
  jb_reply_release(&r);
  races_with_queue("rb-race", JB_CONTROL_ROLLBACK);
  races_with_queue("rb-race", JB_CONTROL_RESUME);
}

/* An accept waits for the rollback too: it would drop the pre-images the rollback reads. */
static void accept_waits(void **state) {
  (void)state;
  session("rb-acc", "done");
  struct jb_reply r;
  run("rb-acc", "{}", &r); /* an ended (done) session is taken */
  assert_int_equal(r.status, 202);
  jb_reply_release(&r);
  struct jb_principal buyer = {.role = JB_ROLE_BUYER};
  snprintf(buyer.job_id, sizeof buyer.job_id, "rb-acc");
  jb_control_run(&app, NULL, &buyer, "rb-acc", JB_CONTROL_ACCEPT, NULL, &r);
  assert_int_equal(r.status, 409);
  assert_string_equal(r.code, "rollback_running");
  assert_string_equal(r.state, "done");
  jb_reply_release(&r);
  jb_control_run(&app, NULL, &buyer, "rb-acc", JB_CONTROL_RESUME, NULL, &r); /* not paused */
  assert_int_equal(r.status, 409);
  assert_string_equal(r.code, "invalid_state");
  jb_reply_release(&r);
  sql("UPDATE launch_jobs SET state = 'done' WHERE job_id = $1 AND kind = 'rollback'", "rb-acc",
      NULL, NULL, NULL, 0);
  jb_control_run(&app, NULL, &buyer, "rb-acc", JB_CONTROL_ACCEPT, NULL, &r);
  assert_int_equal(r.status, 200);
  jb_reply_release(&r);
}

/* A writable command whose outcome is unknown (started, then failed with no change list: the
 * reaper's overdue, an abort while it ran) may have changed anything: a rollback past it is
 * not_restorable (after an abort the sealed chain refuses it first: chain_sealed); one that
 * never started, or was refused before its command ran, is not counted. */
static void unknown_outcome(void **state) {
  (void)state;
  session("rb-unk", "active");
  long long w = op("rb-unk", "write", "a.txt", "done", "{}");
  preimage("rb-unk", w, "a.txt", 'a');
  /* started, then failed by the worker's reaper with no change list: its outcome is unknown */
  long long x = op("rb-unk", "exec", "", "failed", "{\"writable\":true}");
  char ids[24];
  snprintf(ids, sizeof ids, "%lld", x);
  sql("UPDATE ops SET started_at = now(), result = '{\"ok\": false, \"error\": {\"code\":"
      " \"overdue\"}}' WHERE op_id = $1::bigint",
      ids, NULL, NULL, NULL, 0);
  long long q = op("rb-unk", "exec", "", "failed", "{\"writable\":true}"); /* never ran */
  long long b = op("rb-unk", "exec", "", "failed", "{\"writable\":true}"); /* refused: busy */
  char bs[24];
  snprintf(bs, sizeof bs, "%lld", b);
  sql("UPDATE ops SET started_at = now(), result = '{\"ok\": false, \"error\": {\"code\":"
      " \"busy\"}}' WHERE op_id = $1::bigint",
      bs, NULL, NULL, NULL, 0);
  static const char *const from[] = {"active", NULL};
  jb_error err = {0};
  struct jb_transition t;
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_int_equal(jb_db_session_transition(c, jb_signer_key(app.signer), "rb-unk", from, "paused",
                                            NULL, "buyer", &t, &err),
                   JB_OK);
  jb_db_release(app.db, c);
  struct jb_reply r;
  run("rb-unk", "{}", &r);
  if (r.status != 409 || !r.code || strcmp(r.code, "not_restorable") != 0)
    fail_msg("a command of unknown outcome: %d %s (%s)", r.status, r.code ? r.code : "-", r.msg);
  json_t *list = json_object_get(r.extra, "opIds");
  assert_int_equal(json_array_size(list), 1); /* not the queued one, not the refused one */
  assert_int_equal(json_integer_value(json_array_get(list, 0)), x);
  jb_reply_release(&r);
  char args[64];
  snprintf(args, sizeof args, "{\"to\":%lld,\"dryRun\":true}", q > b ? q : b);
  run("rb-unk", args, &r); /* past the refused and the unrun ones only: taken */
  assert_int_equal(r.status, 200);
  jb_reply_release(&r);
  assert_int_equal(count_jobs("rb-unk"), 0);
}

/* An op the shim ran before a restarted worker could keep its pre-images (ops.changes
 * {"preimagesLost": true}, jb_db_preimages_lost) has no rows: a rollback past it would leave
 * its change in place while saying the workspace is back — not_restorable instead. */
static void preimages_lost(void **state) {
  (void)state;
  session("rb-lost", "paused");
  long long w1 = op("rb-lost", "write", "a.txt", "done", "{}");
  preimage("rb-lost", w1, "a.txt", 'a');
  long long w2 = op("rb-lost", "write", "b.txt", "done", "{}");
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_int_equal(jb_db_preimages_lost(c, "rb-lost", w2, &err), JB_OK);
  jb_db_release(app.db, c);
  struct jb_reply r;
  run("rb-lost", "{}", &r);
  if (r.status != 409 || !r.code || strcmp(r.code, "not_restorable") != 0)
    fail_msg("an op whose pre-images were lost: %d %s (%s)", r.status, r.code ? r.code : "-",
             r.msg);
  json_t *list = json_object_get(r.extra, "opIds");
  assert_int_equal(json_array_size(list), 1);
  assert_int_equal(json_integer_value(json_array_get(list, 0)), w2);
  jb_reply_release(&r);
  char args[64];
  snprintf(args, sizeof args, "{\"to\":%lld}", w2); /* its effect stays: taken */
  run("rb-lost", args, &r);
  assert_int_equal(r.status, 202);
  jb_reply_release(&r);
}

/* The retention sweep never drops the blobs of a session whose rollback is queued or running
 * (it would fail every file it has not restored yet); once the rollback ended they are due. */
static void sweep_waits(void **state) {
  (void)state;
  session("rb-sweep", "done");
  sql("UPDATE sessions SET ended_at = now() - interval '1 hour' WHERE job_id = $1", "rb-sweep",
      NULL, NULL, NULL, 0);
  sql("INSERT INTO launch_jobs (job_id, kind, state) VALUES ($1, 'rollback', 'claimed')",
      "rb-sweep", NULL, NULL, NULL, 0);
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  json_t *due = jb_db_preimages_due(c, 60, 1000, &err);
  assert_non_null(due);
  size_t i;
  json_t *j;
  json_array_foreach (due, i, j)
    if (!strcmp(json_string_value(j), "rb-sweep")) fail_msg("dropped under its rollback");
  json_decref(due);
  sql("UPDATE launch_jobs SET state = 'done' WHERE job_id = $1", "rb-sweep", NULL, NULL, NULL, 0);
  due = jb_db_preimages_due(c, 60, 1000, &err);
  bool found = false;
  json_array_foreach (due, i, j) found = found || !strcmp(json_string_value(j), "rb-sweep");
  assert_true(found);
  json_decref(due);
  jb_db_release(app.db, c);
}

/* The decision alone: its order when several refusals hold. */
static void decision_order(void **state) {
  (void)state;
  struct jb_reply r = {0};
  struct jb_rollback_facts f = {.state = "active",
                                .preimages_gone = true,
                                .ops_running = 2,
                                .rollback_running = 7,
                                .to_found = false,
                                .not_restorable = "[4]"};
  const char *order[] = {"no_such_op",       "preimages_gone", "not_paused",
                         "rollback_running", "ops_running",    "not_restorable"};
  for (int i = 0; i < 6; i++) {
    memset(&r, 0, sizeof r);
    assert_int_equal(jb_rollback_decide(&f, 3, &r), -1);
    assert_string_equal(r.code, order[i]);
    jb_reply_release(&r);
    if (i == 0) f.to_found = true;
    if (i == 1) f.preimages_gone = false;
    if (i == 2) snprintf(f.state, sizeof f.state, "done");
    if (i == 3) f.rollback_running = 0;
    if (i == 4) f.ops_running = 0;
  }
  f.not_restorable = "[]";
  memset(&r, 0, sizeof r);
  assert_int_equal(jb_rollback_decide(&f, 3, &r), 0);
  assert_int_equal(r.status, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(decision_order), cmocka_unit_test(arguments),
      cmocka_unit_test(states),         cmocka_unit_test(plan_and_refusals),
      cmocka_unit_test(queued),         cmocka_unit_test(lock_races),
      cmocka_unit_test(accept_waits),   cmocka_unit_test(unknown_outcome),
      cmocka_unit_test(preimages_lost), cmocka_unit_test(sweep_waits),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
