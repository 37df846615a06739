/* ops.c — storage of file operations between jailboxd and the worker (see ops.h). */
#define _GNU_SOURCE
#include "db/ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/audit_store.h"
#include "db/db.h"
#include "db/events.h"
#include "db/op_decide.h"

int jb_db_op_create(PGconn *c, const char *job_id, const char *tool, const char *path,
                    const char *args_json, bool pending, const char *expect_json, long long *op_id,
                    char state[20], jb_error *err) {
  return jb_db_op_create_decided(c, job_id, tool, path, args_json, pending, expect_json, NULL, NULL,
                                 -1, NULL, NULL, op_id, state, err);
}

/* The op insert of jb_db_op_create_decided. It reads the session row FOR KEY SHARE: a state
 * change (an abort, an accept, a rule change: all hold the row FOR UPDATE) and the insert then
 * happen one after the other, and the insert sees the state and rules version the change
 * left. Read without the lock, a snapshot taken before an abort commits would still say
 * `active`, and the op would be stored after the abort failed the session's queued ops, to
 * stay `approved` in an ended session. The lock adds no wait: the foreign key check of the
 * insert takes the same one. */
#define OP_INSERT_SQL                                                                          \
  "WITH cfg AS (SELECT CASE WHEN $5 = 'approved'"                                              \
  "   THEN set_config('synchronous_commit', 'off', true) END AS v),"                           \
  " s AS (SELECT state, rules_version, ($6::jsonb IS NULL OR jsonb_build_object('mode', mode," \
  "   'exclude', exclude, 'flagged', coalesce(walls->'prescan'->'flagged', '[]'::jsonb))"      \
  "   = $6::jsonb) AS fresh FROM sessions WHERE job_id = $1 FOR KEY SHARE"                     \
  "),"                                                                                         \
  " ins AS (INSERT INTO ops (job_id, tool, path, args, state, decision, decided_at,"           \
  "   decided_by, decision_reason, diff)"                                                      \
  "  SELECT $1, $2, $3, $4::jsonb, $5, CASE WHEN $5 = 'approved' THEN 'auto' END,"             \
  "         CASE WHEN $5 = 'approved' THEN now() END, $7, $8, $10::jsonb"                      \
  "  FROM s, cfg WHERE s.state IN ('active', 'paused') AND s.fresh"                            \
  "   AND ($9::bigint IS NULL OR s.rules_version = $9::bigint) RETURNING op_id)"               \
  " SELECT (SELECT state FROM s), (SELECT op_id FROM ins), (SELECT fresh FROM s),"             \
  "   (SELECT $9::bigint IS NULL OR rules_version = $9::bigint FROM s)"

int jb_db_op_create_decided(PGconn *c, const char *job_id, const char *tool, const char *path,
                            const char *args_json, bool pending, const char *expect_json,
                            const char *decided_by, const char *reason, long long rules_version,
                            const char *diff_json, bool *rules_stale, long long *op_id,
                            char state[20], jb_error *err) {
  char ver[24];
  if (rules_version >= 0) snprintf(ver, sizeof ver, "%lld", rules_version);
  if (rules_stale) *rules_stale = false;
  const char *p[10] = {job_id,
                       tool,
                       path,
                       args_json,
                       jb_op_state_name(pending ? JB_OP_PENDING : JB_OP_APPROVED),
                       expect_json,
                       decided_by,
                       reason,
                       rules_version >= 0 ? ver : NULL,
                       diff_json};
  /* a queued op is committed without waiting for the WAL flush: nothing has happened yet, and
   * the worker's commit of its outcome (synchronous, with the audit entry) flushes the WAL up
   * to and past this insert before anyone is told the op ran; a pending op is announced to
   * the buyer, so it is flushed first */
  PGresult *r = jb_db_exec(c, OP_INSERT_SQL, 10, p, PGRES_TUPLES_OK, NULL, err, "store op");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_OK;
  if (PQgetisnull(r, 0, 0)) {
    rc = JB_ERR_NOT_FOUND;
  } else if (PQgetisnull(r, 0, 1) && strcmp(PQgetvalue(r, 0, 2), "f") == 0) {
    state[0] = '\0';
    rc = JB_ERR_CONFLICT; /* the session's mode, exclusions or flags are not `expect_json` */
  } else if (PQgetisnull(r, 0, 1) && strcmp(PQgetvalue(r, 0, 3), "f") == 0 &&
             (!strcmp(PQgetvalue(r, 0, 0), "active") || !strcmp(PQgetvalue(r, 0, 0), "paused"))) {
    state[0] = '\0';
    if (rules_stale) *rules_stale = true;
    rc = JB_ERR_CONFLICT; /* the rules changed since they decided */
  } else if (PQgetisnull(r, 0, 1)) {
    snprintf(state, 20, "%s", PQgetvalue(r, 0, 0));
    rc = JB_ERR_CONFLICT;
  } else {
    snprintf(state, 20, "%s", PQgetvalue(r, 0, 0));
    *op_id = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
  }
  PQclear(r);
  return rc;
}

int jb_db_op_poll(PGconn *c, const char *job_id, long long op_id, char op_state[20],
                  char sess_state[20], char **result_json, char **reason, jb_error *err) {
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  const char *p[2] = {id, job_id};
  *result_json = NULL;
  *reason = NULL;
  /* one round trip: the row as it is, and a finished read's or stat's content dropped from it (the
   * statement's snapshot still returns it). Dropping it need not wait for the WAL flush: if
   * it is lost in a crash the content stays stored, nothing is misreported. */
  PGresult *r = jb_db_exec(
      c,
      "WITH o AS (SELECT o.state, s.state AS session_state, o.result, o.reason"
      "   FROM ops o JOIN sessions s USING (job_id)"
      "   WHERE o.op_id = $1::bigint AND o.job_id = $2),"
      " f AS (UPDATE ops SET result = CASE WHEN tool = 'read_many'"
      "     THEN jsonb_set(result, '{result,files}', (SELECT coalesce(jsonb_agg("
      "       x #- '{result,content}' ORDER BY n), '[]'::jsonb) FROM"
      "       jsonb_array_elements(result #> '{result,files}') WITH ORDINALITY"
      "       AS e(x, n)))"
      "     WHEN tool = 'exec' THEN jsonb_set(jsonb_set(jsonb_set(result, '{result,stdout}',"
      "       to_jsonb(left(result #>> '{result,stdout}', 4096))), '{result,stderr}',"
      "       to_jsonb(left(result #>> '{result,stderr}', 4096))), '{result,outputCut}',"
      "       'true'::jsonb)"
      "     ELSE result #- '{result,content}' END"
      "   WHERE op_id = $1::bigint AND job_id = $2"
      "   AND tool IN ('read', 'stat', 'read_many', 'exec')"
      "   AND state IN ('done', 'failed') AND (result #> '{result,content}' IS NOT NULL"
      "     OR jsonb_typeof(result #> '{result,files}') = 'array'"
      "     OR (jsonb_typeof(result #> '{result,stdout}') = 'string'"
      "       AND result #> '{result,outputCut}' IS NULL))"
      "   AND set_config('synchronous_commit', 'off', true) = 'off' RETURNING 1)"
      " SELECT o.state, o.session_state, o.result::text, o.reason,"
      "  (SELECT count(*) FROM f) FROM o",
      2, p, PGRES_TUPLES_OK, NULL, err, "read op");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 0) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  snprintf(op_state, 20, "%s", PQgetvalue(r, 0, 0));
  snprintf(sess_state, 20, "%s", PQgetvalue(r, 0, 1));
  if (!PQgetisnull(r, 0, 2)) *result_json = strdup(PQgetvalue(r, 0, 2));
  if (!PQgetisnull(r, 0, 3)) *reason = strdup(PQgetvalue(r, 0, 3));
  PQclear(r);
  return JB_OK;
}

void jb_op_claim_free(struct jb_op_claim *o) {
  if (!o) return;
  free(o->path);
  free(o->args_json);
  free(o->decision_reason);
  o->path = o->args_json = o->decision_reason = NULL;
}

int jb_db_op_claim(PGconn *c, const char *job_id, struct jb_op_claim *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  const char *p[1] = {job_id};
  /* the lock order of every chain writer: the session row, then the op. Locking both in one
   * statement took the op's row first, and a buyer's abort — holding the session row, then
   * failing the session's queued ops — deadlocked with it; PostgreSQL then cancelled one of
   * the two, sometimes the abort. The session row is waited for (a chain append holds it for
   * a moment): skipping it would leave the op to the next sweep, a second later; after the
   * wait the state is read again (an abort that committed meanwhile leaves no row). Only a
   * session with a queued op is waited for: an op handed straight to the worker (sandbox/
   * direct.h) holds its session row for its whole run in the shim, unseen until it commits,
   * and the sweep of every session — one thread, the other sessions' queued ops after it —
   * must not wait on a session that has nothing queued. */
  PGresult *r =
      jb_db_exec(c,
                 "SELECT 1 FROM sessions s WHERE s.job_id = $1 AND s.state = 'active'"
                 " AND EXISTS (SELECT 1 FROM ops o WHERE o.job_id = $1 AND o.state = 'approved')"
                 " FOR UPDATE OF s",
                 1, p, PGRES_TUPLES_OK, NULL, err, "claim op: lock session");
  if (!r) return JB_ERR_FAIL;
  int live = PQntuples(r);
  PQclear(r);
  if (live == 0) return JB_ERR_NOT_FOUND;
  r = jb_db_exec(
      c,
      "SELECT o.op_id, o.tool, coalesce(o.path, ''), o.args::text, coalesce(o.decision, 'auto'),"
      " coalesce(o.decided_by, ''), o.decision_reason"
      " FROM ops o WHERE o.job_id = $1 AND o.state = 'approved'"
      " ORDER BY o.op_id LIMIT 1 FOR UPDATE SKIP LOCKED", /* held by another claim: skipped */
      1, p, PGRES_TUPLES_OK, NULL, err, "claim op");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 0) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  out->op_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  snprintf(out->tool, sizeof out->tool, "%s", PQgetvalue(r, 0, 1));
  out->path = strdup(PQgetvalue(r, 0, 2));
  out->args_json = strdup(PQgetvalue(r, 0, 3));
  snprintf(out->decision, sizeof out->decision, "%s", PQgetvalue(r, 0, 4));
  snprintf(out->decided_by, sizeof out->decided_by, "%s", PQgetvalue(r, 0, 5));
  out->decision_reason = PQgetisnull(r, 0, 6) ? NULL : strdup(PQgetvalue(r, 0, 6));
  PQclear(r);
  if (!out->path || !out->args_json) {
    jb_op_claim_free(out);
    return jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL;
  }
  jb_tx_hand_over(&tx); /* held until jb_db_op_complete */
  return JB_OK;
}

int jb_db_op_complete(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                      const struct jb_op_claim *op, bool ok, const char *result_json,
                      json_t *details, struct jb_audit_head *head, jb_error *err) {
  cleanup_tx struct jb_tx tx = {0};
  jb_tx_hold(&tx, c); /* jb_db_op_claim's, or complete_in_state's: rolled back on failure */
  /* who decided the op, beside what it did: a copy, the caller's details stay as they are */
  json_t *d = json_is_object(details) && op->decided_by[0] ? json_copy(details) : NULL;
  if (d) {
    json_object_set_new(d, "decidedBy", json_string(op->decided_by));
    if (op->decision_reason) json_object_set_new(d, "reason", json_string(op->decision_reason));
  }
  int rc = jb_audit_append(c, keys, job_id, op->tool, op->path[0] ? op->path : NULL,
                           d ? d : details, head, err);
  json_decref(d);
  if (rc != JB_OK) return rc;
  char id[24];
  snprintf(id, sizeof id, "%lld", op->op_id);
  const char *p[3] = {id, jb_op_state_name(ok ? JB_OP_DONE : JB_OP_FAILED), result_json};
  /* the outcome and the COMMIT in one round trip (a failed UPDATE stops the COMMIT) */
  const struct jb_db_step steps[2] = {
      JB_DB_STEP("UPDATE ops SET state = $2, result = $3::jsonb, completed_at = now()"
                 " WHERE op_id = $1::bigint",
                 3, p, PGRES_COMMAND_OK, "complete op"),
      JB_DB_STEP("COMMIT", 0, NULL, PGRES_COMMAND_OK, "commit")};
  PGresult *r = jb_db_pipeline(c, steps, 2, err);
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  jb_tx_hand_over(&tx); /* committed by the pipeline's last step */
  return JB_OK;
}

/* The checks of a direct op's insert (session $1, `expect` $5), as CTEs `s` (state; fresh:
 * mode, exclusions and flags are the expected ones; ahead: an op of the session is queued) and
 * `cfg` (jailbox.direct_op set for the transaction: the jb_op trigger wakes nobody, migration
 * 016). The session row is locked by the statement before. */
#define DIRECT_OP_CHECKS                                                                        \
  "WITH s AS (SELECT state, ($5::jsonb IS NULL OR jsonb_build_object('mode', mode, 'exclude', " \
  "exclude,"                                                                                    \
  "   'flagged', coalesce(walls->'prescan'->'flagged', '[]'::jsonb)) = $5::jsonb) AS fresh,"    \
  "   EXISTS (SELECT 1 FROM ops o WHERE o.job_id = $1 AND o.state = 'approved') AS ahead"       \
  "   FROM sessions WHERE job_id = $1),"                                                        \
  " cfg AS (SELECT set_config('jailbox.direct_op', 'on', true) AS v),"

int jb_db_op_direct_begin(PGconn *c, const char *job_id, const char *tool, const char *path,
                          const char *args_json, const char *expect_json, long long *op_id,
                          char state[20], jb_error *err) {
  const char *p[5] = {job_id, tool, path, args_json, expect_json};
  /* the session row first (the lock order of every chain writer), then the op, inserted
   * already claimed by this transaction: nobody else sees it until it is done. The setting
   * tells the jb_op trigger (migration 016) that nobody waits for a wake-up about it. An op
   * queued before it in the session (approved, not yet run: the worker's op thread runs it)
   * goes first: this one is not inserted, and takes the queued path behind it. The lock is
   * its own statement, so that the insert's look for queued ops is made after the wait for
   * the row (a statement sees what was committed when it began). BEGIN, the lock and the
   * insert go in one round trip. */
  static const char sql[] = DIRECT_OP_CHECKS
      " ins AS (INSERT INTO ops (job_id, tool, path, args, state, decision, decided_at)"
      "  SELECT $1, $2, $3, $4::jsonb, 'approved', 'auto', now()"
      "  FROM s, cfg WHERE s.state = 'active' AND s.fresh AND NOT s.ahead RETURNING op_id)"
      " SELECT (SELECT state FROM s), (SELECT op_id FROM ins), (SELECT fresh FROM s), (SELECT "
      "ahead FROM s)";
  const struct jb_db_step steps[3] = {
      JB_DB_STEP("BEGIN", 0, NULL, PGRES_COMMAND_OK, "begin"),
      JB_DB_STEP("SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p, PGRES_TUPLES_OK,
                 "lock session"),
      JB_DB_STEP(sql, 5, p, PGRES_TUPLES_OK, "store direct op")};
  cleanup_tx struct jb_tx tx = {0};
  jb_tx_hold(&tx, c); /* the pipeline's BEGIN */
  PGresult *r = jb_db_pipeline(c, steps, 3, err);
  if (!r) return JB_ERR_FAIL;
  int rc = JB_OK;
  state[0] = '\0';
  if (PQgetisnull(r, 0, 0)) {
    rc = JB_ERR_NOT_FOUND;
  } else if (PQgetisnull(r, 0, 1)) {
    bool fresh = strcmp(PQgetvalue(r, 0, 2), "f") != 0;
    bool ahead = strcmp(PQgetvalue(r, 0, 3), "t") == 0;
    if (fresh) /* "" when the session changed */
      snprintf(state, 20, "%s",
               ahead && !strcmp(PQgetvalue(r, 0, 0), "active") ? "queued" : PQgetvalue(r, 0, 0));
    rc = JB_ERR_CONFLICT;
  } else {
    snprintf(state, 20, "%s", PQgetvalue(r, 0, 0));
    *op_id = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
  }
  PQclear(r);
  if (rc == JB_OK) jb_tx_hand_over(&tx); /* open for the op's outcome */
  return rc;
}

int jb_db_op_direct_store(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                          const char *tool, const char *path, const char *args_json,
                          const char *expect_json, bool ok, const char *result_json,
                          json_t *details, long long head,
                          const unsigned char prev[JB_AUDIT_HASH_LEN], long long *op_id,
                          struct jb_audit_head *out, jb_error *err) {
  struct jb_audit_pending pend;
  struct jb_db_step append;
  if (jb_audit_append_step(keys, job_id, tool, path[0] ? path : NULL, details, head, prev, &pend,
                           &append, err) < 0)
    return JB_ERR_FAIL;
  const char *p[7] = {job_id,     tool,        path,
                      args_json,  expect_json, jb_op_state_name(ok ? JB_OP_DONE : JB_OP_FAILED),
                      result_json};
  /* the op, stored already done: only while the session is active, unchanged, with no op
   * queued before it (as jb_db_op_direct_begin; the session row is locked by the step before).
   * No NOTIFY: one in the transaction made its commit wait on signalling every listening
   * backend (about a third of a read's commit on a 2-core machine); the caller announces
   * the new head after the answer (jb_db_announce_audit_head). */
  static const char sql_store[] = DIRECT_OP_CHECKS
      " ins AS (INSERT INTO ops (job_id, tool, path, args, state, decision, decided_at, result, "
      "completed_at)"
      "  SELECT $1, $2, $3, $4::jsonb, $6, 'auto', now(), $7::jsonb, now()"
      "  FROM s, cfg WHERE s.state = 'active' AND s.fresh AND NOT s.ahead RETURNING op_id)"
      " SELECT (SELECT op_id FROM ins)"
      "  WHERE jb_refuse_unless(EXISTS (SELECT 1 FROM ins), 'the session is not active, changed, "
      "or has an op queued')";
  PGresult *stored = NULL;
  const struct jb_db_step steps[5] = {
      JB_DB_STEP("BEGIN", 0, NULL, PGRES_COMMAND_OK, "begin"),
      JB_DB_STEP("SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p, PGRES_TUPLES_OK,
                 "lock session"),
      {.sql = sql_store,
       .n = 7,
       .params = p,
       .want = PGRES_TUPLES_OK,
       .what = "store direct op",
       .keep = &stored},
      append,
      JB_DB_STEP("COMMIT", 0, NULL, PGRES_COMMAND_OK, "commit")};
  PGresult *r = jb_db_pipeline(c, steps, 5, err);
  if (!r) {
    jb_db_rollback(c);
    jb_audit_append_settle(job_id, &pend, false, NULL);
    return JB_ERR_CONFLICT;
  }
  PQclear(r);
  *op_id = stored && PQntuples(stored) == 1 ? strtoll(PQgetvalue(stored, 0, 0), NULL, 10) : 0;
  PQclear(stored);
  jb_audit_append_settle(job_id, &pend, true, out);
  return JB_OK;
}

int jb_op_notice_parse(const char *payload, long long *op_id, char state[20], const char **job) {
  char *end;
  errno = 0;
  long long id = strtoll(payload, &end, 10);
  if (errno || end == payload || *end != ' ' || id < 0) return -1;
  const char *st = end + 1;
  const char *sp = strchr(st, ' ');
  if (!sp || sp == st || sp - st >= 20 || !sp[1]) return -1;
  memcpy(state, st, (size_t)(sp - st));
  state[sp - st] = '\0';
  *op_id = id;
  *job = sp + 1;
  return 0;
}

int jb_db_op_expire(PGconn *c, const struct jb_keyring *keys, const char *job_id, long long op_id,
                    long timeout_s, struct jb_audit_head *head, json_t **op_out, jb_error *err) {
  *op_out = NULL;
  char id[24], secs[24];
  snprintf(id, sizeof id, "%lld", op_id);
  snprintf(secs, sizeof secs, "%ld", timeout_s);
  const char *p[3] = {id, job_id, secs};
  /* the lock order of every chain writer: the session row, then the op */
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  PGresult *r = jb_db_exec(c, "SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p + 1,
                           PGRES_TUPLES_OK, NULL, err, "lock session");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  r = jb_db_exec(
      c,
      "UPDATE ops SET state = 'failed', reason = 'no decision within the approval timeout',"
      "  decided_by = 'timeout', decided_at = now(),"
      "  result = jsonb_build_object('ok', false, 'error', jsonb_build_object('code', 'timeout',"
      "    'message', 'no decision within the approval timeout')),"
      "  completed_at = now()"
      " WHERE op_id = $1::bigint AND job_id = $2 AND state = 'pending'"
      "   AND created_at <= now() - make_interval(secs => $3::int)"
      " RETURNING path, args->'size', args->>'sha256', tool,"
      "  json_build_object('opId', op_id, 'jobId', job_id, 'tool', tool, 'path', path,"
      "   'state', state, 'reason', reason, 'result', result)::text",
      3, p, PGRES_TUPLES_OK, NULL, err, "expire op");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_CONFLICT;
  }
  char *path = strdup(PQgetvalue(r, 0, 0));
  json_t *op_json = json_loads(PQgetvalue(r, 0, 4), 0, NULL);
  char tool[16];
  snprintf(tool, sizeof tool, "%s", PQgetvalue(r, 0, 3));
  json_t *details = json_pack("{s:b, s:s, s:s, s:s}", "ok", 0, "error", "timeout", "decision",
                              "timeout", "decidedBy", "timeout");
  json_t *size =
      PQgetisnull(r, 0, 1) ? NULL : json_loads(PQgetvalue(r, 0, 1), JSON_DECODE_ANY, NULL);
  if (json_is_integer(size)) json_object_set(details, "size", size);
  json_decref(size);
  const char *sha = PQgetisnull(r, 0, 2) ? "" : PQgetvalue(r, 0, 2);
  if (strlen(sha) == 64 && strspn(sha, "0123456789abcdef") == 64)
    json_object_set_new(details, "sha256", json_string(sha));
  PQclear(r);
  int rc = path && details ? jb_audit_append(c, keys, job_id, tool, path, details, head, err)
                           : jb_fail(err, ENOMEM, "out of memory");
  free(path);
  json_decref(details);
  if (rc != JB_OK) { /* JB_ERR_CONFLICT: the chain is sealed, the session has ended */
    json_decref(op_json);
    return rc;
  }
  if (jb_tx_commit(&tx, err) < 0) {
    json_decref(op_json);
    return JB_ERR_FAIL;
  }
  *op_out = op_json;
  return JB_OK;
}

int jb_db_ops_forget_previews(PGconn *c, long retention_s, int max_ops, long long *cleared,
                              jb_error *err) {
  char secs[24], lim[16];
  snprintf(secs, sizeof secs, "%ld", retention_s);
  snprintf(lim, sizeof lim, "%d", max_ops);
  const char *p[2] = {secs, lim};
  PGresult *r = jb_db_exec(c,
                           "UPDATE ops SET diff = NULL WHERE op_id IN (SELECT o.op_id FROM ops o"
                           "   JOIN sessions s USING (job_id)"
                           "   WHERE o.diff IS NOT NULL AND s.ended_at IS NOT NULL"
                           "   AND s.ended_at < now() - make_interval(secs => $1::double precision)"
                           "   LIMIT $2::int)",
                           2, p, PGRES_COMMAND_OK, NULL, err, "forget diff previews");
  if (!r) return JB_ERR_FAIL;
  if (cleared) *cleared = strtoll(PQcmdTuples(r), NULL, 10);
  PQclear(r);
  return JB_OK;
}

int jb_db_session_busy(PGconn *c, const char *job_id, bool *busy, jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r =
      jb_db_exec(c, "SELECT EXISTS (SELECT 1 FROM ops WHERE job_id = $1 AND state = 'running')", 1,
                 p, PGRES_TUPLES_OK, NULL, err, "is an op of the session running");
  if (!r) return JB_ERR_FAIL;
  *busy = PQntuples(r) == 1 && !strcmp(PQgetvalue(r, 0, 0), "t");
  PQclear(r);
  return JB_OK;
}

int jb_db_op_set_task(PGconn *c, const char *job_id, long long op_id, const char *task_id,
                      jb_error *err) {
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  const char *p[3] = {id, job_id, task_id};
  PGresult *r = jb_db_exec(c,
                           "UPDATE ops SET task_id = $3 WHERE op_id = $1::bigint AND job_id = $2"
                           " AND task_id IS NULL",
                           3, p, PGRES_COMMAND_OK, NULL, err, "name an op's task");
  if (!r) return JB_ERR_FAIL;
  int n = atoi(PQcmdTuples(r));
  PQclear(r);
  return n == 1 ? JB_OK : JB_ERR_NOT_FOUND;
}

void jb_op_task_row_clear(struct jb_op_task_row *row) {
  free(row->tool);
  free(row->path);
  free(row->destination);
  free(row->diff);
  *row = (struct jb_op_task_row){0};
}

/* A new copy of column `col` of row 0, NULL when SQL NULL; *oom set when it could not be made. */
static char *column_dup(PGresult *r, int col, bool *oom) {
  if (PQgetisnull(r, 0, col)) return NULL;
  char *s = strdup(PQgetvalue(r, 0, col));
  if (!s) *oom = true;
  return s;
}

int jb_db_op_task(PGconn *c, const char *job_id, const char *task_id, struct jb_op_task_row *out,
                  jb_error *err) {
  *out = (struct jb_op_task_row){0};
  const char *p[2] = {job_id, task_id};
  PGresult *r =
      jb_db_exec(c,
                 "SELECT op_id, tool, path, args->>'destination', diff::text,"
                 " to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),"
                 " to_char(greatest(created_at, decided_at, completed_at) AT TIME ZONE 'UTC',"
                 "   'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
                 " FROM ops WHERE job_id = $1 AND task_id = $2",
                 2, p, PGRES_TUPLES_OK, NULL, err, "read an op's task");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  bool oom = false;
  out->op_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  out->tool = column_dup(r, 1, &oom);
  out->path = column_dup(r, 2, &oom);
  out->destination = column_dup(r, 3, &oom);
  out->diff = column_dup(r, 4, &oom);
  snprintf(out->created, sizeof out->created, "%s", PQgetvalue(r, 0, 5));
  snprintf(out->updated, sizeof out->updated, "%s", PQgetvalue(r, 0, 6));
  PQclear(r);
  if (oom || !out->tool) {
    jb_op_task_row_clear(out);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  return JB_OK;
}

int jb_db_op_pending_args(PGconn *c, const char *job_id, long long op_id,
                          struct jb_op_args_row *out, jb_error *err) {
  *out = (struct jb_op_args_row){0};
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  const char *p[2] = {job_id, id};
  PGresult *r = jb_db_exec(c,
                           "SELECT o.tool, o.state, s.state, coalesce(o.path, ''),"
                           " CASE WHEN o.state = 'pending' THEN o.args::text END"
                           " FROM ops o JOIN sessions s ON s.job_id = o.job_id"
                           " WHERE o.job_id = $1 AND o.op_id = $2::bigint",
                           2, p, PGRES_TUPLES_OK, NULL, err, "read a pending op's arguments");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  bool oom = false;
  snprintf(out->tool, sizeof out->tool, "%s", PQgetvalue(r, 0, 0));
  snprintf(out->state, sizeof out->state, "%s", PQgetvalue(r, 0, 1));
  snprintf(out->session_state, sizeof out->session_state, "%s", PQgetvalue(r, 0, 2));
  out->path = column_dup(r, 3, &oom);
  out->args = column_dup(r, 4, &oom);
  PQclear(r);
  if (oom) {
    jb_op_args_row_clear(out);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  return JB_OK;
}

void jb_op_args_row_clear(struct jb_op_args_row *row) {
  free(row->path);
  free(row->args);
  *row = (struct jb_op_args_row){0};
}

int jb_db_op_mark_running(PGconn *c, const struct jb_op_claim *op, jb_error *err) {
  char id[24];
  snprintf(id, sizeof id, "%lld", op->op_id);
  const char *p[1] = {id};
  const struct jb_db_step steps[2] = {
      JB_DB_STEP("UPDATE ops SET state = 'running', started_at = now()"
                 " WHERE op_id = $1::bigint AND state = 'approved'",
                 1, p, PGRES_COMMAND_OK, "mark op running"),
      JB_DB_STEP("COMMIT", 0, NULL, PGRES_COMMAND_OK, "commit")};
  PGresult *r = jb_db_pipeline(c, steps, 2, err);
  if (!r) {
    jb_db_rollback(c);
    return JB_ERR_FAIL;
  }
  PQclear(r);
  return JB_OK;
}

/* jb_db_op_complete_running over an op in one of `states` (an SQL text[] literal). */
static int complete_in_state(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                             const struct jb_op_claim *op, const char *states, bool ok,
                             const char *result_json, const char *changes_json, json_t *details,
                             struct jb_audit_head *head, jb_error *err) {
  char id[24];
  snprintf(id, sizeof id, "%lld", op->op_id);
  const char *p[4] = {job_id, id, changes_json, states};
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  /* the lock order of every chain writer: the session row, then the op */
  PGresult *r = jb_db_exec(c, "SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p,
                           PGRES_TUPLES_OK, NULL, err, "lock session");
  if (r) {
    PQclear(r);
    const char *q[3] = {job_id, id, states};
    r = jb_db_exec(c,
                   "SELECT 1 FROM ops WHERE job_id = $1 AND op_id = $2::bigint"
                   " AND state = ANY($3::text[]) FOR UPDATE",
                   3, q, PGRES_TUPLES_OK, NULL, err, "lock running op");
  }
  if (!r) return JB_ERR_FAIL;
  int running = PQntuples(r);
  PQclear(r);
  if (!running) {
    jb_fail(err, ESRCH, "the op is no longer running (its session ended)");
    return JB_ERR_CONFLICT;
  }
  if (changes_json) {
    r = jb_db_exec(c, "UPDATE ops SET changes = $3::jsonb WHERE job_id = $1 AND op_id = $2::bigint",
                   3, p, PGRES_COMMAND_OK, NULL, err, "store the op's changes");
    if (!r) return JB_ERR_FAIL;
    PQclear(r);
  }
  jb_tx_hand_over(&tx); /* jb_db_op_complete ends it */
  return jb_db_op_complete(c, keys, job_id, op, ok, result_json, details, head, err);
}

int jb_db_op_complete_running(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                              const struct jb_op_claim *op, bool ok, const char *result_json,
                              const char *changes_json, json_t *details, struct jb_audit_head *head,
                              jb_error *err) {
  return complete_in_state(c, keys, job_id, op, "{running}", ok, result_json, changes_json, details,
                           head, err);
}

int jb_db_op_fail_unstored(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                           const struct jb_op_claim *op, const char *result_json, json_t *details,
                           struct jb_audit_head *head, jb_error *err) {
  return complete_in_state(c, keys, job_id, op, "{approved,running}", false, result_json, NULL,
                           details, head, err);
}

int jb_db_exec_notice(PGconn *c, const char *job_id, long long op_id, const char *what,
                      jb_error *err) {
  char payload[200];
  snprintf(payload, sizeof payload, "%lld %s %s", op_id, what, job_id);
  const char *p[1] = {payload};
  PGresult *r = jb_db_exec(c, "SELECT pg_notify('jb_exec', $1)", 1, p, PGRES_TUPLES_OK, NULL, err,
                           "exec notice");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_db_op_kill(PGconn *c, const struct jb_keyring *keys, const char *job_id, long long op_id,
                  const char *reason, const char *by, enum jb_op_kill_outcome *outcome,
                  char **op_json, char state[20], struct jb_audit_head *head, jb_error *err) {
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  bool svc = by && strcmp(by, "service") == 0;
  by = svc ? "service" : "buyer";
  const char *who = svc ? "the operator" : "the buyer";
  char why[64];
  snprintf(why, sizeof why, "killed by %s", who);
  const char *p[4] = {job_id, id, reason ? reason : why, who};
  *op_json = NULL;
  memset(head, 0, sizeof *head);
  state[0] = '\0';
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  PGresult *r = jb_db_exec(c, "SELECT state FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p,
                           PGRES_TUPLES_OK, NULL, err, "lock session");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 0) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  char sstate[20];
  snprintf(sstate, sizeof sstate, "%s", PQgetvalue(r, 0, 0));
  PQclear(r);
  r = jb_db_exec(c,
                 "SELECT tool, state, coalesce(path, '') FROM ops"
                 " WHERE job_id = $1 AND op_id = $2::bigint FOR UPDATE",
                 2, p, PGRES_TUPLES_OK, NULL, err, "lock op");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 0) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  bool exec = !strcmp(PQgetvalue(r, 0, 0), "exec");
  enum jb_op_state st = jb_op_state_from_name(PQgetvalue(r, 0, 1));
  char path[4100];
  snprintf(path, sizeof path, "%s", PQgetvalue(r, 0, 2));
  snprintf(state, 20, "%s", PQgetvalue(r, 0, 1));
  PQclear(r);
  if (!exec || (st != JB_OP_PENDING && st != JB_OP_APPROVED && st != JB_OP_RUNNING))
    return JB_ERR_CONFLICT;
  jb_tx_rollback(&tx);
  if (st == JB_OP_PENDING) { /* not started: the buyer's kill is a rejection */
    *outcome = JB_KILL_REJECTED;
    return jb_db_op_decide(c, keys, job_id, op_id, false, p[2], by, op_json, state, head, err);
  }
  if (st == JB_OP_RUNNING) {
    *outcome = JB_KILL_SIGNALLED;
    return jb_db_exec_notice(c, job_id, op_id, svc ? "kill-service" : "kill", err);
  }
  /* queued, not started: failed here, with its audit entry (the worker's claim skips a row
   * this transaction holds, and finds it failed after) */
  *outcome = JB_KILL_FAILED;
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  r = jb_db_exec(c, "SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p, PGRES_TUPLES_OK,
                 NULL, err, "lock session");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  r = jb_db_exec(
      c,
      "UPDATE ops o SET state = 'failed', reason = $3, completed_at = now(),"
      "  result = jsonb_build_object('ok', false, 'error', jsonb_build_object('code', 'killed',"
      "    'message', 'killed by ' || $4 || ' before it started'))"
      " WHERE o.job_id = $1 AND o.op_id = $2::bigint AND o.state = 'approved'"
      " RETURNING json_build_object('opId', o.op_id, 'jobId', o.job_id, 'tool', o.tool,"
      "  'path', o.path, 'state', o.state, 'reason', o.reason, 'result', o.result)::text",
      4, p, PGRES_TUPLES_OK, NULL, err, "kill queued op");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 0) { /* started meanwhile: now running, or over */
    PQclear(r);
    jb_tx_rollback(&tx);
    r = jb_db_exec(c, "SELECT state FROM ops WHERE job_id = $1 AND op_id = $2::bigint", 2, p,
                   PGRES_TUPLES_OK, NULL, err, "read op");
    if (!r) return JB_ERR_FAIL;
    snprintf(state, 20, "%s", PQntuples(r) ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    if (jb_op_state_from_name(state) != JB_OP_RUNNING) return JB_ERR_CONFLICT;
    *outcome = JB_KILL_SIGNALLED;
    return jb_db_exec_notice(c, job_id, op_id, svc ? "kill-service" : "kill", err);
  }
  *op_json = strdup(PQgetvalue(r, 0, 0));
  PQclear(r);
  json_t *d = json_pack("{s:I,s:s,s:b,s:s,s:s}", "opId", (json_int_t)op_id, "decision", "killed",
                        "ok", 0, "error", "killed", "killedBy", by);
  int rc = *op_json && d
               ? jb_audit_append(c, keys, job_id, "exec", path[0] ? path : NULL, d, head, err)
               : jb_fail(err, ENOMEM, "out of memory");
  json_decref(d);
  if (rc == JB_OK && jb_tx_commit(&tx, err) < 0) rc = JB_ERR_FAIL;
  if (rc != JB_OK) {
    free(*op_json);
    *op_json = NULL;
    if (rc == JB_ERR_CONFLICT) snprintf(state, 20, "%s", sstate);
  }
  return rc;
}

int jb_db_ops_running(PGconn *c, const char *job_id, long long *ids, size_t max, size_t *n,
                      jb_error *err) {
  *n = 0;
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT op_id FROM ops WHERE job_id = $1 AND state = 'running'"
                           " ORDER BY op_id",
                           1, p, PGRES_TUPLES_OK, NULL, err, "running ops");
  if (!r) return JB_ERR_FAIL;
  for (int i = 0; i < PQntuples(r) && *n < max; i++)
    ids[(*n)++] = strtoll(PQgetvalue(r, i, 0), NULL, 10);
  PQclear(r);
  return JB_OK;
}

int jb_db_ops_overdue(PGconn *c, long grace_s, struct jb_op_ref *out, size_t max, size_t *n,
                      jb_error *err) {
  *n = 0;
  char g[24], m[24];
  snprintf(g, sizeof g, "%ld", grace_s);
  snprintf(m, sizeof m, "%zu", max);
  const char *p[2] = {g, m};
  /* the running ops are few (partial index ops_running, migration 042): one look for all */
  PGresult *r = jb_db_exec(c,
                           "SELECT job_id, op_id FROM ops WHERE state = 'running'"
                           " AND " JB_DB_OP_OVERDUE("ops", "$1::bigint") " ORDER BY op_id"
                           " LIMIT $2::bigint",
                           2, p, PGRES_TUPLES_OK, NULL, err, "overdue running ops");
  if (!r) return JB_ERR_FAIL;
  for (int i = 0; i < PQntuples(r) && *n < max; i++) {
    snprintf(out[*n].job, sizeof out[*n].job, "%s", PQgetvalue(r, i, 0));
    out[(*n)++].op_id = strtoll(PQgetvalue(r, i, 1), NULL, 10);
  }
  PQclear(r);
  return JB_OK;
}
