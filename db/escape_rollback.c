/* escape_rollback.c — SQL of the rollback an escape's seal waits for (see escape_rollback.h).
 * Lock order as every chain writer: the session row first. */
#include "db/escape_rollback.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/audit_store.h"
#include "db/db.h"

int jb_db_escape_rollback_queue(PGconn *c, const char *job_id, long wait_s, long long *id,
                                jb_error *err) {
  *id = 0;
  char ws[24];
  snprintf(ws, sizeof ws, "%ld", wait_s);
  const char *p[3] = {job_id, JB_ESCAPE_ROLLBACK_PAYLOAD, ws};
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  PGresult *r = jb_db_exec(c, "SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p,
                           PGRES_TUPLES_OK, NULL, err, "lock the session for an escape rollback");
  if (!r) return JB_ERR_FAIL;
  bool found = PQntuples(r) == 1;
  PQclear(r);
  if (!found) return JB_OK;
  r = jb_db_exec(c,
                 "WITH sp AS (SELECT p.job_id FROM seals_pending p JOIN sessions s USING (job_id)"
                 "   WHERE p.job_id = $1 AND p.rollback_id IS NULL AND s.preimages_gone_at IS NULL"
                 "    AND NOT coalesce((SELECT sealed FROM audit_heads WHERE job_id = $1), false)"
                 "    AND EXISTS (SELECT 1 FROM preimages WHERE job_id = $1 AND op_id IS NOT NULL"
                 "     AND rolled_back_by IS NULL)),"
                 " j AS (INSERT INTO launch_jobs (job_id, kind, payload)"
                 "   SELECT job_id, 'rollback', $2::jsonb FROM sp RETURNING id),"
                 " u AS (UPDATE seals_pending p SET rollback_id = j.id,"
                 "   rollback_until = now() + make_interval(secs => $3::bigint)"
                 "   FROM j WHERE p.job_id = $1 RETURNING j.id)"
                 " SELECT id, pg_notify('jb_change', $1) FROM u",
                 3, p, PGRES_TUPLES_OK, NULL, err, "queue escape rollback");
  if (!r) return JB_ERR_FAIL;
  long long queued = PQntuples(r) == 1 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
  PQclear(r);
  if (jb_tx_commit(&tx, err) < 0) return JB_ERR_FAIL;
  *id = queued;
  return JB_OK;
}

int jb_db_escape_rollback_of(PGconn *c, const char *job_id, long long rollback_id,
                             long long *ms_left, jb_error *err) {
  *ms_left = 0;
  char ids[24];
  snprintf(ids, sizeof ids, "%lld", rollback_id);
  const char *p[2] = {job_id, ids};
  PGresult *r = jb_db_exec(c,
                           "SELECT greatest(0, (extract(epoch FROM rollback_until - now())"
                           "   * 1000)::bigint)"
                           " FROM seals_pending WHERE job_id = $1 AND rollback_id = $2::bigint",
                           2, p, PGRES_TUPLES_OK, NULL, err, "escape rollback");
  if (!r) return -1;
  int n = PQntuples(r);
  if (n == 1) *ms_left = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  return n == 1;
}

int jb_db_escape_rollback_waiting(PGconn *c, const char *job_id, long long *ms_left,
                                  jb_error *err) {
  *ms_left = 0;
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT greatest(0, (extract(epoch FROM p.rollback_until - now())"
                           "   * 1000)::bigint)"
                           " FROM seals_pending p JOIN launch_jobs l ON l.id = p.rollback_id"
                           " WHERE p.job_id = $1 AND l.state IN ('queued', 'claimed')",
                           1, p, PGRES_TUPLES_OK, NULL, err, "escape rollback waiting");
  if (!r) return -1;
  int n = PQntuples(r);
  if (n == 1) *ms_left = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  return n == 1;
}

/* Ends rollback job `id` of `job_id` as failed for its time being up, with its audit entry. */
static int time_up(PGconn *c, const struct jb_keyring *keys, const char *job_id, const char *id,
                   jb_error *err) {
  const char *p[2] = {job_id, id};
  PGresult *r = jb_db_exec(
      c,
      "WITH n AS (SELECT count(*) AS restored FROM preimages WHERE job_id = $1"
      "   AND rolled_back_by = $2::bigint)"
      " UPDATE launch_jobs l SET state = 'failed', error = 'timeout', finished_at = now(),"
      "   result = jsonb_build_object('error', 'timeout', 'restored', n.restored)"
      " FROM n WHERE l.id = $2::bigint RETURNING n.restored",
      2, p, PGRES_TUPLES_OK, NULL, err, "end escape rollback (timeout)");
  if (!r) return -1;
  long long restored = PQntuples(r) == 1 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
  PQclear(r);
  json_t *d =
      json_pack("{s:I, s:n, s:b, s:s, s:s, s:s, s:I}", "rollbackId",
                (json_int_t)strtoll(id, NULL, 10), "to", "force", 0, "actor", "system", "reason",
                "escape_detected", "error", "timeout", "restored", (json_int_t)restored);
  if (!d) return jb_fail(err, ENOMEM, "out of memory"), -1;
  struct jb_audit_head h;
  int rc = jb_audit_append(c, keys, job_id, "rollback", NULL, d, &h, err);
  json_decref(d);
  return rc == JB_OK ? 0 : -1;
}

int jb_db_escape_rollback_gate(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                               jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT p.rollback_id, p.rollback_until > now()"
                           " FROM seals_pending p JOIN launch_jobs l ON l.id = p.rollback_id"
                           " WHERE p.job_id = $1 AND l.state IN ('queued', 'claimed')",
                           1, p, PGRES_TUPLES_OK, NULL, err, "read escape rollback");
  if (!r) return -1;
  if (PQntuples(r) != 1) { /* none named, or it has ended: seal */
    PQclear(r);
    return 0;
  }
  char id[24];
  snprintf(id, sizeof id, "%s", PQgetvalue(r, 0, 0));
  bool waiting = PQgetvalue(r, 0, 1)[0] == 't';
  PQclear(r);
  if (waiting) return 1;
  return time_up(c, keys, job_id, id, err);
}
