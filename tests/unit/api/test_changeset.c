/* test_changeset.c — the buyer's decision on a changeset (api/core/changeset.h): the subset
 * check alone (each refusal, the closure rules, the all-approvable default, approvedSha256),
 * then the decision through the core as every door runs it (jb_control_run) on a real
 * PostgreSQL (the embedded cluster of db/pgembed.h, the migrations, a signing key): the rows'
 * decisions, the op's, its audit entry, the refusals over a stored changeset, a rejection,
 * another op left as it was, the page of files, and a session that ends with one pending. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/batch.h"
#include "api/core/changeset.h"
#include "api/core/controls.h"
#include "db/db.h"
#include "db/migrate.h"
#include "db/ops.h"
#include "db/pgembed.h"
#include "db/sessions.h"
#include "db/signer.h"
#include "server/app.h"
#include "server/bus.h"

/* ---- the subset check alone ---- */

#define ROW(i, p, ch, ot, nt, ok) \
  { i, (char *)(p), ch, ot, nt, ok, 0 }

/* d/ is a folder the command made (with d/x in it); gone/ one it removed (with gone/y); the
 * rest plain files, one of them not approvable. Sorted by path, as the worker stores them. */
static const struct jb_cs_row rows[] = {
    ROW(0, "a.txt", "modified", "file", "file", true),
    ROW(1, "b.txt", "modified", "file", "file", true),
    ROW(2, "bad.sh", "added", "absent", "file", false),
    ROW(3, "d", "added", "absent", "dir", true),
    ROW(4, "d/x", "added", "absent", "file", true),
    ROW(5, "gone", "deleted", "dir", "absent", true),
    ROW(6, "gone/y", "deleted", "file", "absent", true),
};
#define N (sizeof rows / sizeof rows[0])
#define SHA "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

/* The check of `files` (JSON text; NULL: absent) and `digest`: its return, approved[] and
 * the reply (released by the caller). */
static int check(const char *files, const char *digest, bool approved[N], struct jb_reply *r) {
  json_t *f = files ? json_loads(files, 0, NULL) : NULL;
  if (files) assert_non_null(f);
  int rc = jb_changeset_check_subset(rows, N, f, digest, SHA, approved, r);
  json_decref(f);
  return rc;
}

/* A refusal `status` `code` for `files`, naming `path` first (NULL: no list). */
static void refused(const char *files, const char *digest, int status, const char *code,
                    const char *path) {
  bool ap[N];
  struct jb_reply r;
  assert_int_equal(check(files, digest, ap, &r), -1);
  assert_int_equal(r.status, status);
  assert_string_equal(r.code, code);
  for (size_t i = 0; i < N; i++) assert_false(ap[i]);
  if (path) {
    json_t *paths = json_object_get(r.extra, "paths");
    assert_true(json_array_size(paths) >= 1);
    assert_string_equal(json_string_value(json_array_get(paths, 0)), path);
  }
  jb_reply_release(&r);
}

static void subset_default(void **state) {
  (void)state;
  bool ap[N];
  struct jb_reply r;
  assert_int_equal(check(NULL, NULL, ap, &r), 0); /* every approvable row */
  for (size_t i = 0; i < N; i++) assert_int_equal(ap[i], rows[i].approvable);
  assert_int_equal(check(NULL, SHA, ap, &r), 0); /* the digest seen, the same */
  assert_true(ap[0] && !ap[2]);
  char hex[65];
  bool one[N] = {false, true};
  jb_changeset_approved_sha(rows, N, one, hex); /* sha256("b.txt\n") */
  assert_string_equal(hex, "c880c199d0db1b5a2018f30227dacea822699f116f2968637777ed89bf499a94");
  bool none[N] = {false};
  jb_changeset_approved_sha(rows, N, none, hex); /* sha256("") */
  assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void subset_named(void **state) {
  (void)state;
  bool ap[N];
  struct jb_reply r;
  assert_int_equal(check("[\"b.txt\"]", NULL, ap, &r), 0);
  for (size_t i = 0; i < N; i++) assert_int_equal(ap[i], i == 1);
  assert_int_equal(check("[\"d/x\",\"d\",\"gone/y\",\"gone\"]", NULL, ap, &r), 0);
  assert_true(ap[3] && ap[4] && ap[5] && ap[6] && !ap[0] && !ap[1]);
  assert_int_equal(check("[\"d\"]", NULL, ap, &r), 0); /* a folder made, empty: lands alone */
  assert_int_equal(check("[\"gone/y\"]", NULL, ap, &r), 0); /* a file under a folder removed */
}

static void subset_refusals(void **state) {
  (void)state;
  refused("[\"a.txt\"]", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", 409,
          "changed", NULL);
  refused(NULL, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", 409, "changed",
          NULL);
  refused("[]", NULL, 422, "empty_subset", NULL);
  refused("[\"a.txt\",\"b.txt\",\"a.txt\",\"a.txt\"]", NULL, 422, "duplicate", "a.txt");
  refused("[\"a.txt\",\"zz\",\"./a.txt\"]", NULL, 422, "not_in_changeset", "./a.txt");
  refused("[\"a.txt\",\"bad.sh\"]", NULL, 409, "not_approvable", "bad.sh");
  refused("[\"d/x\"]", NULL, 422, "incomplete_subset", "d/x"); /* its folder left out */
  refused("[\"gone\"]", NULL, 422, "incomplete_subset", "gone"); /* a path under it left out */
  /* a duplicate is told before a path not there, which is told before one not approvable */
  refused("[\"bad.sh\",\"zz\",\"zz\"]", NULL, 422, "duplicate", "zz");
  refused("[\"bad.sh\",\"zz\"]", NULL, 422, "not_in_changeset", "zz");
}

/* Nothing approvable: approving without files is refused (reject it). */
static void subset_none_approvable(void **state) {
  (void)state;
  const struct jb_cs_row only[] = {ROW(0, "x", "added", "absent", "file", false)};
  bool ap[1];
  struct jb_reply r;
  assert_int_equal(jb_changeset_check_subset(only, 1, NULL, NULL, SHA, ap, &r), -1);
  assert_string_equal(r.code, "empty_subset");
  jb_reply_release(&r);
}

/* More refused paths than a refusal lists: the first 100 and pathsTruncated. */
static void subset_listed_max(void **state) {
  (void)state;
  json_t *f = json_array();
  for (int i = 0; i < 150; i++) {
    char p[16];
    snprintf(p, sizeof p, "no-%03d", i);
    json_array_append_new(f, json_string(p));
  }
  bool ap[N];
  struct jb_reply r;
  assert_int_equal(jb_changeset_check_subset(rows, N, f, NULL, SHA, ap, &r), -1);
  assert_string_equal(r.code, "not_in_changeset");
  assert_int_equal(json_array_size(json_object_get(r.extra, "paths")), JB_CHANGESET_LISTED_MAX);
  assert_true(json_is_true(json_object_get(r.extra, "pathsTruncated")));
  assert_non_null(strstr(r.msg, "(150)"));
  jb_reply_release(&r);
  json_decref(f);
}

/* ---- through the core, on a real database ---- */

static struct jb_pgembed pg;
static struct jb_app app;
static char state_dir[] = "/tmp/jbcs.XXXXXX";

static int setup(void **state) {
  (void)state;
  jb_error err = {0};
  if (!mkdtemp(state_dir)) return -1;
  if (jb_pgembed_start(&pg, state_dir, "", "nobody", &err) < 0) {
    fprintf(stderr, "embedded PostgreSQL: %s\n", err.msg);
    return -1;
  }
  app.bus = jb_bus_new();
  if (!app.bus || jb_db_open(&app.db, pg.conninfo, 4, 10, &err) < 0) return -1;
  PGconn *c = jb_db_acquire(app.db, &err);
  int applied = 0;
  if (!c || jb_migrate(c, jb_migrations, jb_migrations_count, &applied, &err) < 0) {
    fprintf(stderr, "migrate: %s\n", err.msg);
    return -1;
  }
  jb_db_release(app.db, c);
  if (jb_signer_open(&app.signer, app.db, state_dir, "", "test", &err) < 0) return -1;
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

/* An active supervised session `job`. */
static void session(const char *job) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_non_null(c);
  unsigned char bh[32] = {3}, ah[32] = {4};
  bh[1] = ah[1] = (unsigned char)job[strlen(job) - 1];
  char agent[32], ws[64];
  snprintf(agent, sizeof agent, "agent-%s", job);
  snprintf(ws, sizeof ws, "/nonexistent/%s", job);
  struct jb_session_new s = {.job_id = job,
                             .agent_id = agent,
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
  assert_int_equal(jb_db_session_transition(c, jb_signer_key(app.signer), job, from, "active", NULL,
                                            "system", &t, &err),
                   JB_OK);
  jb_db_release(app.db, c);
}

/* A pending changeset op in `job` with the rows above (as the worker stores them): its id. */
static long long changeset_op(const char *job) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_non_null(c);
  const char *p[2] = {job, SHA};
  PGresult *res =
      PQexecParams(c,
                   "INSERT INTO ops (job_id, tool, path, args, state) VALUES ($1, 'changeset', '.',"
                   " jsonb_build_object('execOpId', 1, 'changesetSha256', $2::text, 'files', 7,"
                   " 'approvable', 6, 'bytes', 10), 'pending') RETURNING op_id",
                   2, NULL, p, NULL, NULL, 0);
  assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
  char id[24];
  snprintf(id, sizeof id, "%s", PQgetvalue(res, 0, 0));
  PQclear(res);
  for (size_t i = 0; i < N; i++) {
    char idx[8];
    snprintf(idx, sizeof idx, "%d", rows[i].idx);
    const char *q[8] = {job,
                        id,
                        idx,
                        rows[i].path,
                        rows[i].change,
                        rows[i].old_type,
                        rows[i].new_type,
                        rows[i].approvable ? "t" : "f"};
    res = PQexecParams(c,
                       "INSERT INTO changeset_files (job_id, op_id, idx, path, change, old_type,"
                       " new_type, approvable, why) VALUES ($1, $2::bigint, $3::int, $4, $5, $6,"
                       " $7, $8::boolean, CASE WHEN $8::boolean THEN NULL ELSE 'flagged' END)",
                       8, NULL, q, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
    PQclear(res);
  }
  jb_db_release(app.db, c);
  return strtoll(id, NULL, 10);
}

/* The rows' decisions of op `op`, one letter a row: a(pproved), r(ejected), -(none). */
static void decisions_of(long long op, char out[N + 1]) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_non_null(c);
  char id[24];
  snprintf(id, sizeof id, "%lld", op);
  const char *p[1] = {id};
  PGresult *res = PQexecParams(c,
                               "SELECT string_agg(coalesce(left(decision, 1), '-'), '' ORDER BY"
                               " idx) FROM changeset_files WHERE op_id = $1::bigint",
                               1, NULL, p, NULL, NULL, 0);
  assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
  snprintf(out, N + 1, "%s", PQgetvalue(res, 0, 0));
  PQclear(res);
  jb_db_release(app.db, c);
}

/* The details of the newest audit entry `changeset` of `job` (new). */
static json_t *last_entry(const char *job) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_non_null(c);
  const char *p[1] = {job};
  PGresult *res = PQexecParams(c,
                               "SELECT jb_audit_details(canonical)::text FROM audit_entries"
                               " WHERE job_id = $1 AND operation = 'changeset'"
                               " ORDER BY seq DESC LIMIT 1",
                               1, NULL, p, NULL, NULL, 0);
  assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
  assert_int_equal(PQntuples(res), 1);
  json_t *d = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
  PQclear(res);
  jb_db_release(app.db, c);
  assert_non_null(d);
  return d;
}

static void run(const char *job, enum jb_control ctl, const char *args, struct jb_reply *r) {
  json_t *a = json_loads(args, 0, NULL);
  assert_non_null(a);
  struct jb_principal who = {.role = JB_ROLE_BUYER};
  snprintf(who.job_id, sizeof who.job_id, "%s", job);
  jb_control_run(&app, NULL, &who, job, ctl, a, r);
  json_decref(a);
}

static void decide_subset(void **state) {
  (void)state;
  session("cs-a");
  long long op = changeset_op("cs-a");
  char args[512], got[N + 1];
  struct jb_reply r;
  /* refusals leave everything pending */
  snprintf(args, sizeof args, "{\"opId\":%lld,\"files\":[\"nope\"]}", op);
  run("cs-a", JB_CONTROL_APPROVE, args, &r);
  assert_int_equal(r.status, 422);
  assert_string_equal(r.code, "not_in_changeset");
  jb_reply_release(&r);
  snprintf(args, sizeof args, "{\"opId\":%lld,\"changesetSha256\":\"%064d\",\"files\":[\"a.txt\"]}",
           op, 0);
  run("cs-a", JB_CONTROL_APPROVE, args, &r);
  assert_int_equal(r.status, 409);
  assert_string_equal(r.code, "changed");
  jb_reply_release(&r);
  snprintf(args, sizeof args, "{\"opId\":%lld,\"allowSimilar\":\"argv\"}", op);
  run("cs-a", JB_CONTROL_APPROVE, args, &r);
  assert_int_equal(r.status, 400);
  jb_reply_release(&r);
  decisions_of(op, got);
  assert_string_equal(got, "-------");
  /* the subset */
  snprintf(args, sizeof args,
           "{\"opId\":%lld,\"changesetSha256\":\"%s\",\"files\":[\"b.txt\",\"d\",\"d/x\"]}", op,
           SHA);
  run("cs-a", JB_CONTROL_APPROVE, args, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.wrap, "op");
  assert_string_equal(json_string_value(json_object_get(r.body, "state")), "approved");
  assert_string_equal(json_string_value(json_object_get(r.body, "tool")), "changeset");
  jb_reply_release(&r);
  decisions_of(op, got);
  assert_string_equal(got, "raraarr");
  json_t *d = last_entry("cs-a");
  assert_int_equal(json_integer_value(json_object_get(d, "approved")), 3);
  assert_int_equal(json_integer_value(json_object_get(d, "rejected")), 4);
  assert_string_equal(json_string_value(json_object_get(d, "decision")), "approved");
  char hex[65];
  bool ap[N] = {false, true, false, true, true};
  jb_changeset_approved_sha(rows, N, ap, hex);
  assert_string_equal(json_string_value(json_object_get(d, "approvedSha256")), hex);
  json_decref(d);
  /* decided: a second decision is told how */
  run("cs-a", JB_CONTROL_REJECT, args, &r);
  assert_int_equal(r.status, 400); /* reject takes no files */
  jb_reply_release(&r);
  snprintf(args, sizeof args, "{\"opId\":%lld}", op);
  run("cs-a", JB_CONTROL_REJECT, args, &r);
  assert_int_equal(r.status, 409);
  assert_string_equal(r.code, "invalid_state");
  jb_reply_release(&r);
}

static void decide_default_and_reject(void **state) {
  (void)state;
  session("cs-b");
  long long a = changeset_op("cs-b"), b = changeset_op("cs-b");
  char args[128], got[N + 1];
  struct jb_reply r;
  snprintf(args, sizeof args, "{\"opId\":%lld}", a);
  run("cs-b", JB_CONTROL_APPROVE, args, &r); /* every approvable row */
  assert_int_equal(r.status, 200);
  jb_reply_release(&r);
  decisions_of(a, got);
  assert_string_equal(got, "aaraaaa");
  snprintf(args, sizeof args, "{\"opId\":%lld,\"reason\":\"no\"}", b);
  run("cs-b", JB_CONTROL_REJECT, args, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(json_string_value(json_object_get(r.body, "state")), "rejected");
  jb_reply_release(&r);
  decisions_of(b, got);
  assert_string_equal(got, "rrrrrrr");
  json_t *d = last_entry("cs-b");
  assert_int_equal(json_integer_value(json_object_get(d, "approved")), 0);
  assert_int_equal(json_integer_value(json_object_get(d, "rejected")), 7);
  assert_false(json_is_true(json_object_get(d, "ok")));
  json_decref(d);
  /* another op: files refused, and decided as before without them */
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  long long w = 0;
  char st[20];
  assert_int_equal(jb_db_op_create(c, "cs-b", "write", "a.txt", "{\"path\":\"a.txt\"}", true, NULL,
                                   &w, st, &err),
                   JB_OK);
  jb_db_release(app.db, c);
  snprintf(args, sizeof args, "{\"opId\":%lld,\"files\":[\"a.txt\"]}", w);
  run("cs-b", JB_CONTROL_APPROVE, args, &r);
  assert_int_equal(r.status, 400);
  jb_reply_release(&r);
  snprintf(args, sizeof args, "{\"opId\":%lld}", w);
  run("cs-b", JB_CONTROL_APPROVE, args, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(json_string_value(json_object_get(r.body, "tool")), "write");
  jb_reply_release(&r);
}

/* A session that ends with a changeset pending: the op and every row rejected. */
static void session_end(void **state) {
  (void)state;
  session("cs-d");
  long long op = changeset_op("cs-d");
  char got[N + 1];
  struct jb_reply r;
  run("cs-d", JB_CONTROL_ABORT, "{\"reason\":\"enough\"}", &r);
  assert_int_equal(r.status, 200);
  jb_reply_release(&r);
  decisions_of(op, got);
  assert_string_equal(got, "rrrrrrr");
}

static void view_page(void **state) {
  (void)state;
  session("cs-c");
  long long op = changeset_op("cs-c");
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app.db, &err);
  assert_non_null(c);
  char q[128];
  snprintf(q, sizeof q, "{\"opId\":\"%lld\",\"limit\":\"3\"}", op);
  json_t *qj = json_loads(q, 0, NULL);
  struct jb_reply r;
  jb_changeset_view(c, "cs-c", qj, &r);
  json_decref(qj);
  assert_int_equal(r.status, 200);
  assert_int_equal(json_integer_value(json_object_get(r.body, "total")), 7);
  assert_int_equal(json_integer_value(json_object_get(r.body, "approvable")), 6);
  assert_string_equal(json_string_value(json_object_get(r.body, "changesetSha256")), SHA);
  assert_int_equal(json_array_size(json_object_get(r.body, "files")), 3);
  assert_int_equal(json_integer_value(json_object_get(r.body, "next")), 2);
  jb_reply_release(&r);
  snprintf(q, sizeof q, "{\"opId\":%lld,\"after\":2,\"limit\":10}", op);
  qj = json_loads(q, 0, NULL);
  jb_changeset_view(c, "cs-c", qj, &r);
  json_decref(qj);
  json_t *f0 = json_array_get(json_object_get(r.body, "files"), 0);
  assert_string_equal(json_string_value(json_object_get(f0, "path")), "d");
  assert_true(json_is_null(json_object_get(r.body, "next")));
  jb_reply_release(&r);
  qj = json_pack("{s:I,s:i}", "opId", (json_int_t)op, "limit", 1001);
  jb_changeset_view(c, "cs-c", qj, &r);
  json_decref(qj);
  assert_int_equal(r.status, 400);
  jb_reply_release(&r);
  qj = json_pack("{s:I}", "opId", (json_int_t)op + 100);
  jb_changeset_view(c, "cs-c", qj, &r);
  json_decref(qj);
  assert_int_equal(r.status, 404);
  jb_reply_release(&r);
  jb_db_release(app.db, c);
}

/* ---- a batch's rows ---- */

/* A move's two rows (one member) are approved together: one end alone is incomplete_subset. */
static void subset_batch_move(void **state) {
  (void)state;
  const struct jb_cs_row b[] = {
      {0, (char *)"a.txt", "modified", "file", "file", true, 11},
      {1, (char *)"old.c", "deleted", "file", "absent", true, 12},
      {2, (char *)"new.c", "added", "absent", "file", true, 12},
  };
  bool ap[3];
  struct jb_reply r;
  json_t *f = json_loads("[\"a.txt\",\"new.c\"]", 0, NULL);
  assert_int_equal(jb_changeset_check_subset(b, 3, f, NULL, SHA, ap, &r), -1);
  assert_string_equal(r.code, "incomplete_subset");
  assert_string_equal(json_string_value(json_array_get(json_object_get(r.extra, "paths"), 0)),
                      "new.c");
  jb_reply_release(&r);
  json_decref(f);
  f = json_loads("[\"a.txt\"]", 0, NULL);
  assert_int_equal(jb_changeset_check_subset(b, 3, f, NULL, SHA, ap, &r), 0);
  assert_true(ap[0] && !ap[1] && !ap[2]);
  json_decref(f);
  f = json_loads("[\"old.c\",\"new.c\"]", 0, NULL);
  assert_int_equal(jb_changeset_check_subset(b, 3, f, NULL, SHA, ap, &r), 0);
  assert_true(!ap[0] && ap[1] && ap[2]);
  json_decref(f);
}

#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"

/* The rows of each member tool: change, types, hashes, the move's pair, the diff kept. */
static void batch_rows(void **state) {
  (void)state;
  json_t *m = json_loads(
      "[{\"opId\":5,\"tool\":\"write\",\"path\":\"n.txt\",\"args\":{\"content\":\"hi\","
      "\"expectSha256\":\"\"},\"diff\":{\"format\":\"unified\",\"text\":\"+hi\"}},"
      "{\"opId\":6,\"tool\":\"edit\",\"path\":\"e.txt\",\"args\":{\"content\":\"aGk=\","
      "\"encoding\":\"base64\",\"expectSha256\":\"" H1
      "\"},\"diff\":null},"
      "{\"opId\":7,\"tool\":\"mkdir\",\"path\":\"d\",\"args\":{\"expectCurrent\":[{\"path\":"
      "\"d\",\"exists\":false}]}},"
      "{\"opId\":8,\"tool\":\"delete\",\"path\":\"x\",\"args\":{\"expectCurrent\":[{\"path\":"
      "\"x\",\"exists\":true,\"type\":\"file\",\"sha256\":\"" H1
      "\"}]}},"
      "{\"opId\":9,\"tool\":\"move\",\"path\":\"s\",\"args\":{\"destination\":\"t\","
      "\"expectCurrent\":[{\"path\":\"s\",\"exists\":true,\"type\":\"file\",\"sha256\":"
      "\"" H2 "\"},{\"path\":\"t\",\"exists\":false}]}}]",
      0, NULL);
  assert_non_null(m);
  json_t *br = jb_batch_rows(m);
  assert_non_null(br);
  assert_int_equal(json_array_size(br), 6);
  static const char *const want[][4] = {
      {"n.txt", "added", "absent", "file"}, {"e.txt", "modified", "file", "file"},
      {"d", "added", "absent", "dir"},      {"x", "deleted", "file", "absent"},
      {"s", "deleted", "file", "absent"},   {"t", "added", "absent", "file"},
  };
  for (size_t i = 0; i < 6; i++) {
    json_t *r = json_array_get(br, i);
    assert_string_equal(json_string_value(json_object_get(r, "path")), want[i][0]);
    assert_string_equal(json_string_value(json_object_get(r, "change")), want[i][1]);
    assert_string_equal(json_string_value(json_object_get(r, "oldType")), want[i][2]);
    assert_string_equal(json_string_value(json_object_get(r, "newType")), want[i][3]);
  }
  /* sha256("hi"), the write's content and the edit's decoded base64 alike */
  const char *hi = "8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4";
  assert_string_equal(json_string_value(json_object_get(json_array_get(br, 0), "newSha256")), hi);
  assert_null(json_object_get(json_array_get(br, 0), "oldSha256"));
  assert_string_equal(json_string_value(json_object_get(json_array_get(br, 1), "newSha256")), hi);
  assert_string_equal(json_string_value(json_object_get(json_array_get(br, 1), "oldSha256")), H1);
  assert_string_equal(
      json_string_value(json_object_get(json_object_get(json_array_get(br, 0), "diff"), "text")),
      "+hi");
  assert_true(json_is_null(json_object_get(json_array_get(br, 2), "diff")));
  assert_int_equal(json_integer_value(json_object_get(json_array_get(br, 4), "memberOpId")), 9);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(br, 5), "memberOpId")), 9);
  assert_string_equal(json_string_value(json_object_get(json_array_get(br, 5), "newSha256")), H2);
  /* the digest: one line per row, as a command's changeset's */
  char a[65], b[65];
  jb_batch_digest(br, a);
  json_array_remove(br, 5);
  jb_batch_digest(br, b);
  assert_int_equal(strlen(a), 64);
  assert_string_not_equal(a, b);
  json_decref(br);
  /* a member of another tool cannot be shown */
  json_array_append_new(
      m, json_pack("{s:i,s:s,s:s,s:{}}", "opId", 10, "tool", "exec", "path", ".", "args"));
  assert_null(jb_batch_rows(m));
  json_decref(m);
  /* names */
  json_t *ok = json_string("refactor-1.v2_x"), *bad = json_string("a/b"), *empty = json_string("");
  assert_true(jb_batch_name_ok(ok));
  assert_false(jb_batch_name_ok(bad));
  assert_false(jb_batch_name_ok(empty));
  json_decref(ok);
  json_decref(bad);
  json_decref(empty);
}

int main(void) {
  const struct CMUnitTest pure[] = {
      cmocka_unit_test(subset_default),    cmocka_unit_test(subset_named),
      cmocka_unit_test(subset_refusals),   cmocka_unit_test(subset_none_approvable),
      cmocka_unit_test(subset_listed_max), cmocka_unit_test(subset_batch_move),
      cmocka_unit_test(batch_rows),
  };
  const struct CMUnitTest db[] = {
      cmocka_unit_test(decide_subset),
      cmocka_unit_test(decide_default_and_reject),
      cmocka_unit_test(view_page),
      cmocka_unit_test(session_end),
  };
  int failed = cmocka_run_group_tests(pure, NULL, NULL);
  return failed + cmocka_run_group_tests(db, setup, teardown);
}
