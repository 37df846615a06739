/* preimages.c — SQL for pre-images and rollback (see preimages.h). */
#include "db/preimages.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/audit_sql.h"
#include "db/audit_store.h"
#include "db/db.h"

int jb_db_preimage_bytes(PGconn *c, const char *job_id, long long *bytes, jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c, "SELECT preimage_bytes FROM sessions WHERE job_id = $1", 1, p,
                           PGRES_TUPLES_OK, NULL, err, "pre-image bytes");
  if (!r) return JB_ERR_FAIL;
  int n = PQntuples(r);
  *bytes = n == 1 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
  PQclear(r);
  return n == 1 ? JB_OK : JB_ERR_NOT_FOUND;
}

int jb_db_preimages_insert(PGconn *c, const char *job_id, long long op_id, long long rollback_id,
                           json_t *rows, jb_error *err) {
  if (json_array_size(rows) == 0) return JB_OK;
  char *text = json_dumps(rows, JSON_COMPACT);
  if (!text) return jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL;
  char ops[24], rbs[24];
  snprintf(ops, sizeof ops, "%lld", op_id);
  snprintf(rbs, sizeof rbs, "%lld", rollback_id);
  const char *p[4] = {job_id, op_id > 0 ? ops : NULL, rollback_id > 0 ? rbs : NULL, text};
  /* in the array's order (WITH ORDINALITY): seq follows it, and a rollback restores the
   * rows of an op newest first */
  PGresult *r = jb_db_exec(
      c,
      "WITH rows AS (SELECT x.r, x.i FROM jsonb_array_elements($4::jsonb) WITH ORDINALITY"
      "   AS x(r, i)),"
      " ins AS (INSERT INTO preimages (job_id, op_id, rollback_id, path, kind, sha256, mode,"
      "   target, from_path, bytes, after_kind, after_sha256, after_mode)"
      "  SELECT $1, $2::bigint, $3::bigint, r->>'path', r->>'kind', r->>'sha256',"
      "   (r->>'mode')::int, r->>'target', r->>'fromPath', coalesce((r->>'bytes')::bigint, 0),"
      "   r->>'afterKind', r->>'afterSha256', (r->>'afterMode')::int FROM rows ORDER BY i"
      "  RETURNING bytes)"
      " UPDATE sessions SET preimage_bytes = preimage_bytes +"
      "   (SELECT coalesce(sum(bytes), 0) FROM ins) WHERE job_id = $1",
      4, p, PGRES_COMMAND_OK, NULL, err, "insert pre-images");
  free(text);
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

json_t *jb_db_rollback_rows(PGconn *c, const char *job_id, long long to, long long rollback_id,
                            bool *gone, bool *sealed, jb_error *err) {
  char tos[24], rbs[24];
  snprintf(tos, sizeof tos, "%lld", to);
  snprintf(rbs, sizeof rbs, "%lld", rollback_id);
  const char *p[3] = {job_id, to >= 0 ? tos : NULL, rbs};
  PGresult *r = jb_db_exec(
      c,
      "SELECT s.preimages_gone_at IS NOT NULL, coalesce((SELECT json_agg(json_build_object("
      "   'seq', seq, 'opId', op_id, 'path', path, 'kind', kind, 'sha256', sha256, 'mode', mode,"
      "   'target', target, 'fromPath', from_path, 'afterKind', after_kind, 'afterSha256',"
      "   after_sha256, 'afterMode', after_mode, 'done', rolled_back_by IS NOT NULL)"
      "   ORDER BY seq DESC)"
      "  FROM preimages WHERE job_id = $1 AND op_id IS NOT NULL"
      "   AND (rolled_back_by IS NULL OR rolled_back_by = $3::bigint)"
      "   AND ($2::bigint IS NULL OR op_id > $2::bigint)), '[]')::text"
      " ," JB_SQL_CHAIN_CLOSED_BUT("$1", "$3::bigint") " FROM sessions s WHERE s.job_id = $1",
      3, p, PGRES_TUPLES_OK, NULL, err, "rollback rows");
  if (!r) return NULL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    jb_fail(err, ENOENT, "no such session");
    return NULL;
  }
  *gone = PQgetvalue(r, 0, 0)[0] == 't';
  *sealed = PQgetvalue(r, 0, 2)[0] == 't';
  json_t *rows = *gone || *sealed ? json_array() : json_loads(PQgetvalue(r, 0, 1), 0, NULL);
  PQclear(r);
  if (!rows) jb_fail(err, ENOMEM, "out of memory");
  return rows;
}

int jb_db_preimage_mark(PGconn *c, const char *job_id, long long seq, long long rollback_id,
                        jb_error *err) {
  char ss[24], rs[24];
  snprintf(ss, sizeof ss, "%lld", seq);
  snprintf(rs, sizeof rs, "%lld", rollback_id);
  const char *p[3] = {job_id, ss, rs};
  PGresult *r = jb_db_exec(c,
                           "UPDATE preimages SET rolled_back_by = $3::bigint"
                           " WHERE job_id = $1 AND seq = $2::bigint",
                           3, p, PGRES_COMMAND_OK, NULL, err, "mark pre-image restored");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_db_rollback_finish(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                          long long rollback_id, json_t *details, json_t *result, bool ok,
                          const char *error, struct jb_audit_head *head, jb_error *err) {
  memset(head, 0, sizeof *head);
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  const char *p0[1] = {job_id};
  PGresult *r = jb_db_exec(c, "SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p0,
                           PGRES_TUPLES_OK, NULL, err, "lock session");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  int rc = jb_audit_append(c, keys, job_id, "rollback", NULL, details, head, err);
  if (rc == JB_ERR_CONFLICT) { /* sealed: an ended session's chain takes no entry */
    memset(head, 0, sizeof *head);
  } else if (rc != JB_OK) {
    return JB_ERR_FAIL;
  }
  json_object_set_new(result, "auditSeq", head->seq > 0 ? json_integer(head->seq) : json_null());
  char *text = json_dumps(result, JSON_COMPACT);
  if (!text) return jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL;
  char ids[24];
  snprintf(ids, sizeof ids, "%lld", rollback_id);
  const char *p[4] = {ids, ok ? "done" : "failed", error, text};
  r = jb_db_exec(c,
                 "UPDATE launch_jobs SET state = $2, error = $3, finished_at = now(),"
                 " result = $4::jsonb WHERE id = $1::bigint AND state = 'claimed'",
                 4, p, PGRES_COMMAND_OK, NULL, err, "finish rollback");
  free(text);
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return jb_tx_commit(&tx, err) < 0 ? JB_ERR_FAIL : JB_OK;
}

json_t *jb_db_preimages_due(PGconn *c, long retention_s, int max, jb_error *err) {
  char rs[24], ms[24];
  snprintf(rs, sizeof rs, "%ld", retention_s);
  snprintf(ms, sizeof ms, "%d", max);
  const char *p[2] = {rs, ms};
  PGresult *r =
      jb_db_exec(c,
                 "SELECT coalesce(json_agg(job_id), '[]')::text FROM (SELECT job_id FROM sessions"
                 "  WHERE preimages_gone_at IS NULL AND (state = 'accepted' OR (state IN ('done',"
                 "   'aborted', 'failed') AND coalesce(ended_at, updated_at) <"
                 "   now() - make_interval(secs => $1::bigint)))"
                 /* never under a rollback that reads them */
                 "   AND NOT EXISTS (SELECT 1 FROM launch_jobs l WHERE l.job_id = sessions.job_id"
                 "    AND l.kind = 'rollback' AND l.state IN ('queued', 'claimed'))"
                 "  ORDER BY job_id LIMIT $2::int) d",
                 2, p, PGRES_TUPLES_OK, NULL, err, "pre-images due");
  if (!r) return NULL;
  json_t *v = json_loads(PQgetvalue(r, 0, 0), 0, NULL);
  PQclear(r);
  if (!v) jb_fail(err, ENOMEM, "out of memory");
  return v;
}

int jb_db_preimages_gone(PGconn *c, const char *job_id, jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c,
                           "UPDATE sessions SET preimages_gone_at = now()"
                           " WHERE job_id = $1 AND preimages_gone_at IS NULL",
                           1, p, PGRES_COMMAND_OK, NULL, err, "pre-images gone");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_db_preimages_lost(PGconn *c, const char *job_id, long long op_id, jb_error *err) {
  char ids[24];
  snprintf(ids, sizeof ids, "%lld", op_id);
  const char *p[2] = {job_id, ids};
  PGresult *r = jb_db_exec(c,
                           "UPDATE ops SET changes = jsonb_build_object('preimagesLost', true)"
                           " WHERE job_id = $1 AND op_id = $2::bigint",
                           2, p, PGRES_COMMAND_OK, NULL, err, "pre-images lost");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}
