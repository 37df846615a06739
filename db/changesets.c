/* changesets.c — SQL for changesets (see changesets.h). */
#include "db/changesets.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"

int jb_db_changeset_insert(PGconn *c, const char *job_id, long long exec_op_id, const char *path,
                           json_t *args, json_t *rows, long long *op_id, jb_error *err) {
  char *a = json_dumps(args, JSON_COMPACT), *t = json_dumps(rows, JSON_COMPACT);
  char ex[24];
  snprintf(ex, sizeof ex, "%lld", exec_op_id);
  const char *p[5] = {job_id, ex, path, a, t};
  /* one statement: the op only while the session is live, and every row with it */
  PGresult *r =
      a && t ? jb_db_exec(
                   c,
                   "WITH op AS (INSERT INTO ops (job_id, tool, path, args, state, parent_op_id)"
                   "  SELECT $1, 'changeset', $3, $4::jsonb, 'pending', $2::bigint FROM sessions"
                   "  WHERE job_id = $1 AND state IN ('active', 'paused') RETURNING op_id),"
                   " rows AS (INSERT INTO changeset_files (job_id, op_id, idx, path, change,"
                   "   old_type, new_type, old_sha256, new_sha256, old_mode, new_mode, old_target,"
                   "   new_target, size, old_size, \"binary\", diff, approvable, why, flags)"
                   "  SELECT $1, op.op_id, (x.i - 1)::int, r->>'path', r->>'change',"
                   "   r->>'oldType', r->>'newType', r->>'oldSha256', r->>'newSha256',"
                   "   (r->>'oldMode')::int, (r->>'newMode')::int, r->>'oldTarget',"
                   "   r->>'newTarget', coalesce((r->>'size')::bigint, 0),"
                   "   coalesce((r->>'oldSize')::bigint, 0), coalesce((r->>'binary')::bool, false),"
                   "   CASE WHEN jsonb_typeof(r->'diff') = 'object' THEN r->'diff' END,"
                   "   (r->>'approvable')::bool, r->>'why',"
                   "   CASE WHEN jsonb_typeof(r->'flags') = 'array' THEN r->'flags' END"
                   "  FROM op, jsonb_array_elements($5::jsonb) WITH ORDINALITY AS x(r, i)),"
                   " kept AS (UPDATE sessions SET preimage_bytes = preimage_bytes +"
                   "   coalesce(($4::jsonb->>'bytes')::bigint, 0)"
                   "  WHERE job_id = $1 AND EXISTS (SELECT 1 FROM op))"
                   " SELECT op_id FROM op",
                   5, p, PGRES_TUPLES_OK, NULL, err, "insert changeset")
             : (jb_fail(err, ENOMEM, "out of memory"), NULL);
  free(a);
  free(t);
  if (!r) return JB_ERR_FAIL;
  int n = PQntuples(r);
  if (n == 1) *op_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  return n == 1 ? JB_OK : (jb_fail(err, ESRCH, "the session has ended"), JB_ERR_CONFLICT);
}

json_t *jb_db_changeset_approved(PGconn *c, const char *job_id, long long op_id,
                                 long long *rejected, jb_error *err) {
  char ops[24];
  snprintf(ops, sizeof ops, "%lld", op_id);
  const char *p[2] = {job_id, ops};
  PGresult *r = jb_db_exec(
      c,
      "SELECT coalesce(json_agg(json_build_object('idx', idx, 'path', path, 'change', change,"
      "   'oldType', old_type, 'newType', new_type, 'oldSha256', old_sha256, 'newSha256',"
      "   new_sha256, 'oldMode', old_mode, 'newMode', new_mode, 'oldTarget', old_target,"
      "   'newTarget', new_target, 'size', size, 'oldSize', old_size) ORDER BY idx)"
      "   FILTER (WHERE decision = 'approved' AND approvable), '[]')::text,"
      " count(*) FILTER (WHERE decision IS DISTINCT FROM 'approved' OR NOT approvable)"
      " FROM changeset_files WHERE job_id = $1 AND op_id = $2::bigint",
      2, p, PGRES_TUPLES_OK, NULL, err, "read approved changeset rows");
  if (!r) return NULL;
  json_t *rows = PQntuples(r) == 1 ? json_loads(PQgetvalue(r, 0, 0), 0, NULL) : NULL;
  *rejected = PQntuples(r) == 1 ? strtoll(PQgetvalue(r, 0, 1), NULL, 10) : 0;
  PQclear(r);
  if (!rows) jb_fail(err, EPROTO, "the changeset's rows cannot be read");
  return rows;
}

int jb_db_changeset_outcomes(PGconn *c, long long op_id, json_t *outcomes, jb_error *err) {
  if (json_array_size(outcomes) == 0) return JB_OK;
  char *t = json_dumps(outcomes, JSON_COMPACT);
  if (!t) return jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL;
  char ops[24];
  snprintf(ops, sizeof ops, "%lld", op_id);
  const char *p[2] = {ops, t};
  PGresult *r = jb_db_exec(c,
                           "UPDATE changeset_files f SET outcome = x->>'outcome', detail ="
                           " x->>'detail' FROM jsonb_array_elements($2::jsonb) x"
                           " WHERE f.op_id = $1::bigint AND f.idx = (x->>'idx')::int",
                           2, p, PGRES_COMMAND_OK, NULL, err, "store changeset outcomes");
  free(t);
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}
