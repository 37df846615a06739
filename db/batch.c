/* batch.c — SQL of an agent's batch (see batch.h). */
#define _GNU_SOURCE
#include "db/batch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"
#include "db/op_decide.h"

/* Locks session `job_id`'s row and reads its state into `state`: JB_OK when it is active or
 * paused and (expect_json given) its settings are those, else JB_ERR_CONFLICT (state empty
 * for settings that changed) or JB_ERR_NOT_FOUND. */
static int lock_live(PGconn *c, const char *job_id, const char *expect_json, char state[20],
                     jb_error *err) {
  const char *p[2] = {job_id, expect_json};
  PGresult *r =
      jb_db_exec(c,
                 "SELECT state, ($2::jsonb IS NULL OR jsonb_build_object('mode', mode,"
                 "  'exclude', exclude, 'flagged', coalesce(walls->'prescan'->'flagged',"
                 "  '[]'::jsonb)) = $2::jsonb) FROM sessions WHERE job_id = $1 FOR UPDATE",
                 2, p, PGRES_TUPLES_OK, NULL, err, "lock session");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_ERR_NOT_FOUND;
  if (PQntuples(r) == 1) {
    snprintf(state, 20, "%s", PQgetvalue(r, 0, 0));
    bool live = !strcmp(state, "active") || !strcmp(state, "paused");
    if (PQgetvalue(r, 0, 1)[0] != 't') state[0] = '\0';
    rc = live && state[0] ? JB_OK : JB_ERR_CONFLICT;
  }
  PQclear(r);
  return rc;
}

int jb_db_op_stage(PGconn *c, const char *job_id, const struct jb_db_stage *s, long long *op_id,
                   long long *first, char state[20], jb_error *err) {
  *op_id = *first = 0;
  state[0] = '\0';
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  int rc = lock_live(c, job_id, s->expect_json, state, err);
  if (rc != JB_OK) return rc;
  const char *p[5] = {job_id, s->tool, s->path, s->args_json, s->diff_json};
  const char *q[4] = {job_id, s->name, s->path, s->dest ? s->dest : s->path};
  PGresult *r = jb_db_exec(c,
                           "SELECT op_id FROM ops WHERE job_id = $1 AND state = 'staged'"
                           " AND parent_op_id IS NULL AND args->>'changeset' = $2"
                           " AND (path IN ($3, $4) OR args->>'destination' IN ($3, $4))"
                           " ORDER BY op_id LIMIT 1",
                           4, q, PGRES_TUPLES_OK, NULL, err, "find a staged op on the path");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 1) {
    *first = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return JB_ERR_EXISTS;
  }
  PQclear(r);
  r = jb_db_exec(c,
                 "INSERT INTO ops (job_id, tool, path, args, state, diff)"
                 " VALUES ($1, $2, $3, $4::jsonb, 'staged', $5::jsonb) RETURNING op_id",
                 5, p, PGRES_TUPLES_OK, NULL, err, "store a staged op");
  if (!r) return JB_ERR_FAIL;
  *op_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  return jb_tx_commit(&tx, err) < 0 ? JB_ERR_FAIL : JB_OK;
}

int jb_db_batch_members(PGconn *c, const char *job_id, const char *name, char **json_out,
                        jb_error *err) {
  *json_out = NULL;
  const char *p[2] = {job_id, name};
  PGresult *r = jb_db_exec(
      c,
      "SELECT coalesce(json_agg(json_build_object('opId', op_id, 'tool', tool, 'path', path,"
      "  'args', args, 'diff', diff) ORDER BY op_id), '[]')::text FROM ops"
      " WHERE job_id = $1 AND state = 'staged' AND parent_op_id IS NULL"
      "   AND args->>'changeset' = $2",
      2, p, PGRES_TUPLES_OK, NULL, err, "read a batch");
  if (!r) return JB_ERR_FAIL;
  *json_out = strdup(PQgetvalue(r, 0, 0));
  PQclear(r);
  return *json_out ? JB_OK : jb_fail(err, ENOMEM, "out of memory");
}

/* The rows of committed batch op `id` (`p` = {job, id, rows_json, approve}). */
#define ROWS_SQL                                                                       \
  "INSERT INTO changeset_files (job_id, op_id, idx, path, change, old_type, new_type," \
  "  old_sha256, new_sha256, old_mode, new_mode, size, old_size, \"binary\", diff,"    \
  "  approvable, why, member_op_id, decision)"                                         \
  " SELECT $1, $2::bigint, (x.i - 1)::int, r->>'path', r->>'change', r->>'oldType',"   \
  "  r->>'newType', r->>'oldSha256', r->>'newSha256', (r->>'oldMode')::int,"           \
  "  (r->>'newMode')::int, coalesce((r->>'size')::bigint, 0),"                         \
  "  coalesce((r->>'oldSize')::bigint, 0), coalesce((r->>'binary')::bool, false),"     \
  "  CASE WHEN jsonb_typeof(r->'diff') = 'object' THEN r->'diff' END,"                 \
  "  (r->>'approvable')::bool, r->>'why', (r->>'memberOpId')::bigint,"                 \
  "  CASE WHEN $4 = 't' THEN 'approved' END"                                           \
  " FROM jsonb_array_elements($3::jsonb) WITH ORDINALITY AS x(r, i)"

int jb_db_batch_commit(PGconn *c, const char *job_id, const char *name, const char *members,
                       const char *args_json, const char *rows_json, bool approve, long long *op_id,
                       char **op_json, char state[20], jb_error *err) {
  *op_id = 0;
  *op_json = NULL;
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  int rc = lock_live(c, job_id, NULL, state, err);
  if (rc != JB_OK) return rc;
  const char *p[3] = {job_id, name, members};
  PGresult *r = jb_db_exec(c,
                           "SELECT coalesce(array_agg(op_id ORDER BY op_id), '{}')::text = $3"
                           " FROM ops WHERE job_id = $1 AND state = 'staged'"
                           " AND parent_op_id IS NULL AND args->>'changeset' = $2",
                           3, p, PGRES_TUPLES_OK, NULL, err, "check a batch");
  if (!r) return JB_ERR_FAIL;
  bool same = PQgetvalue(r, 0, 0)[0] == 't';
  PQclear(r);
  if (!same) {
    state[0] = '\0';
    return JB_ERR_CONFLICT;
  }
  const char *pi[4] = {job_id, members, args_json, approve ? "t" : "f"};
  r = jb_db_exec(c,
                 "INSERT INTO ops AS o (job_id, tool, path, args, state, decision, decided_at,"
                 "  completed_at, result)"
                 " SELECT $1, 'changeset', '.', $3::jsonb, CASE WHEN $4 = 't' THEN 'done'"
                 "  ELSE 'pending' END, CASE WHEN $4 = 't' THEN 'auto' END,"
                 "  CASE WHEN $4 = 't' THEN now() END, CASE WHEN $4 = 't' THEN now() END,"
                 "  CASE WHEN $4 = 't' THEN jsonb_build_object('ok', true, 'result',"
                 "  jsonb_build_object('approved', cardinality($2::bigint[]), 'rejected', 0)) END"
                 " RETURNING op_id, " JB_DB_OP_JSON "::text",
                 4, pi, PGRES_TUPLES_OK, NULL, err, "store a batch's changeset");
  if (!r) return JB_ERR_FAIL;
  *op_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  char *json = strdup(PQgetvalue(r, 0, 1));
  PQclear(r);
  if (!json) return jb_fail(err, ENOMEM, "out of memory");
  char id[24];
  snprintf(id, sizeof id, "%lld", *op_id);
  const char *q[4] = {job_id, id, rows_json, approve ? "t" : "f"};
  r = jb_db_exec(c, ROWS_SQL, 4, q, PGRES_COMMAND_OK, NULL, err, "store a batch's rows");
  if (r) {
    PQclear(r);
    const char *m[4] = {job_id, id, members, approve ? "t" : "f"};
    r = jb_db_exec(c,
                   "UPDATE ops SET parent_op_id = $2::bigint,"
                   "  state = CASE WHEN $4 = 't' THEN 'approved' ELSE state END,"
                   "  decision = CASE WHEN $4 = 't' THEN 'auto' END,"
                   "  decided_at = CASE WHEN $4 = 't' THEN now() END"
                   " WHERE job_id = $1 AND op_id = ANY($3::bigint[]) AND state = 'staged'",
                   4, m, PGRES_COMMAND_OK, NULL, err, "join a batch's members");
  }
  if (r) PQclear(r);
  if (!r || jb_tx_commit(&tx, err) < 0) {
    free(json);
    return JB_ERR_FAIL;
  }
  *op_json = json;
  return JB_OK;
}

int jb_db_batch_outcome(PGconn *c, const char *job_id, long long op_id, char **json_out,
                        bool *finished, jb_error *err) {
  *json_out = NULL;
  *finished = false;
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  const char *p[2] = {job_id, id};
  PGresult *r = jb_db_exec(
      c,
      "SELECT json_build_object('state', o.state, 'session', (SELECT state FROM sessions"
      "   WHERE job_id = $1), 'members', coalesce((SELECT json_agg("
      "   json_strip_nulls(json_build_object('opId', m.op_id, 'path', m.path, 'tool', m.tool,"
      "   'state', m.state, 'error', CASE WHEN m.state = 'failed' THEN"
      "   m.result->'error' WHEN m.state = 'rejected' THEN to_jsonb(m.reason) END))"
      "   ORDER BY m.op_id) FROM ops m WHERE m.job_id = $1 AND m.parent_op_id = o.op_id"
      "   AND m.tool <> 'changeset'), '[]'))::text,"
      " o.state IN ('rejected', 'failed') OR NOT EXISTS (SELECT 1 FROM ops m WHERE m.job_id = $1"
      "   AND m.parent_op_id = o.op_id AND m.tool <> 'changeset'"
      "   AND m.state NOT IN ('done', 'failed', 'rejected'))"
      " FROM ops o WHERE o.job_id = $1 AND o.op_id = $2::bigint AND o.tool = 'changeset'",
      2, p, PGRES_TUPLES_OK, NULL, err, "read a batch's outcome");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_ERR_NOT_FOUND;
  if (PQntuples(r) == 1) {
    *json_out = strdup(PQgetvalue(r, 0, 0));
    *finished = PQgetvalue(r, 0, 1)[0] == 't';
    rc = *json_out ? JB_OK : jb_fail(err, ENOMEM, "out of memory");
  }
  PQclear(r);
  return rc;
}
