/* launch_jobs.c — SQL for the worker's job queue and session contract (see launch_jobs.h). */
#include "db/launch_jobs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"

void jb_launch_job_free(struct jb_launch_job *j) {
  free(j->workspace);
  free(j->limits_json);
  free(j->image);
  free(j->payload_json);
  j->workspace = j->limits_json = j->image = j->payload_json = NULL;
}

int jb_db_job_claim(PGconn *c, const char *worker_id, struct jb_launch_job *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  const char *p[1] = {worker_id};
  PGresult *r = jb_db_exec(
      c,
      "WITH next AS ("
      "  SELECT q.id FROM launch_jobs q"
      "  WHERE q.state = 'queued' AND (q.kind IN ('launch', 'rollback') OR NOT EXISTS ("
      "    SELECT 1 FROM launch_jobs l WHERE l.job_id = q.job_id AND l.kind = 'launch'"
      "      AND l.worker_id IS NOT NULL AND l.worker_id <> $1))"
      /* a rollback once the session's teardown is done (nothing in its sandbox writes) and no
       * other rollback of it runs (an escape's may come while the buyer's runs) */
      "   AND (q.kind <> 'rollback' OR NOT EXISTS (SELECT 1 FROM launch_jobs t"
      "    WHERE t.job_id = q.job_id AND (t.kind = 'teardown' AND t.state IN ('queued', 'claimed')"
      "     OR t.kind = 'rollback' AND t.state = 'claimed')))"
      "  ORDER BY q.id FOR UPDATE SKIP LOCKED LIMIT 1)"
      " UPDATE launch_jobs j SET state = 'claimed', worker_id = $1, attempts = j.attempts + 1,"
      "   claimed_at = now()"
      " FROM next, sessions s WHERE j.id = next.id AND s.job_id = j.job_id"
      " RETURNING j.id, j.job_id, j.kind, j.attempts, s.state, s.workspace, s.limits::text,"
      "   coalesce(s.image, ''), j.payload::text",
      1, p, PGRES_TUPLES_OK, NULL, err, "claim job");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  out->id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  snprintf(out->job_id, sizeof out->job_id, "%s", PQgetvalue(r, 0, 1));
  snprintf(out->kind, sizeof out->kind, "%s", PQgetvalue(r, 0, 2));
  out->attempts = atoi(PQgetvalue(r, 0, 3));
  snprintf(out->state, sizeof out->state, "%s", PQgetvalue(r, 0, 4));
  out->workspace = strdup(PQgetvalue(r, 0, 5));
  out->limits_json = strdup(PQgetvalue(r, 0, 6));
  out->image = strdup(PQgetvalue(r, 0, 7));
  out->payload_json = strdup(PQgetisnull(r, 0, 8) ? "{}" : PQgetvalue(r, 0, 8));
  PQclear(r);
  if (!out->workspace || !out->limits_json || !out->image || !out->payload_json) {
    jb_launch_job_free(out);
    return jb_fail(err, 12, "out of memory");
  }
  return JB_OK;
}

int jb_db_job_finish(PGconn *c, long long id, bool ok, const char *error, const char *result_json,
                     jb_error *err) {
  char ids[24];
  snprintf(ids, sizeof ids, "%lld", id);
  const char *p[4] = {ids, ok ? "done" : "failed", error, result_json};
  PGresult *r = jb_db_exec(c,
                           "UPDATE launch_jobs SET state = $2, error = $3, finished_at = now(),"
                           " payload = payload || coalesce($4::jsonb, '{}'::jsonb)"
                           " WHERE id = $1::bigint",
                           4, p, PGRES_COMMAND_OK, NULL, err, "finish job");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_db_session_set_walls(PGconn *c, const char *job_id, const char *walls_json, jb_error *err) {
  const char *p[2] = {job_id, walls_json};
  PGresult *r = jb_db_exec(c,
                           "UPDATE sessions SET walls = $2::jsonb, updated_at = now()"
                           " WHERE job_id = $1",
                           2, p, PGRES_COMMAND_OK, NULL, err, "store walls");
  if (!r) return JB_ERR_FAIL;
  int n = atoi(PQcmdTuples(r));
  PQclear(r);
  return n == 1 ? JB_OK : JB_ERR_NOT_FOUND;
}

int jb_db_jobs_abandon(PGconn *c, const char *worker_id, const char *reason, char **launch_sessions,
                       jb_error *err) {
  *launch_sessions = NULL;
  const char *p[2] = {worker_id, reason};
  PGresult *r = jb_db_exec(
      c,
      "WITH again AS (UPDATE launch_jobs SET state = 'queued', worker_id = NULL"
      "  WHERE worker_id = $1 AND state = 'claimed' AND kind = 'rollback' RETURNING id),"
      " gone AS (UPDATE launch_jobs SET state = 'failed', error = $2, finished_at = now()"
      "  WHERE worker_id = $1 AND state = 'claimed' AND kind <> 'rollback'"
      "  RETURNING job_id, kind)"
      " SELECT coalesce(json_agg(DISTINCT job_id) FILTER (WHERE kind = 'launch'), '[]')::text"
      " FROM gone",
      2, p, PGRES_TUPLES_OK, NULL, err, "abandon jobs");
  if (!r) return JB_ERR_FAIL;
  *launch_sessions = strdup(PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "[]");
  PQclear(r);
  return *launch_sessions ? JB_OK : jb_fail(err, 12, "out of memory");
}

int jb_db_deployment_name(PGconn *c, char *out, size_t len, jb_error *err) {
  PGresult *r = jb_db_exec(
      c, "SELECT system_identifier::text || '/' || current_database() FROM pg_control_system()", 0,
      NULL, PGRES_TUPLES_OK, NULL, err, "deployment name");
  if (!r) {
    r = jb_db_exec(c,
                   "SELECT coalesce(host(inet_server_addr()), 'local') || ':' ||"
                   " coalesce(inet_server_port()::text, '') || '/' || current_database()",
                   0, NULL, PGRES_TUPLES_OK, NULL, err, "deployment name");
    if (!r) return JB_ERR_FAIL;
  }
  snprintf(out, len, "%s", PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "unknown");
  PQclear(r);
  return JB_OK;
}

int jb_db_session_adopt_info(PGconn *c, const char *job_id, const char *worker_id,
                             struct jb_launch_job *out, char **walls_json, jb_error *err) {
  memset(out, 0, sizeof *out);
  *walls_json = NULL;
  const char *p[2] = {job_id, worker_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT l.id, s.state, s.workspace, s.limits::text,"
                           " coalesce(s.image, ''), coalesce(s.walls::text, '')"
                           " FROM sessions s JOIN launch_jobs l ON l.job_id = s.job_id"
                           " AND l.kind = 'launch' AND l.worker_id = $2"
                           " WHERE s.job_id = $1 ORDER BY l.id DESC LIMIT 1",
                           2, p, PGRES_TUPLES_OK, NULL, err, "session to adopt");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  out->id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  snprintf(out->job_id, sizeof out->job_id, "%s", job_id);
  snprintf(out->kind, sizeof out->kind, "launch");
  snprintf(out->state, sizeof out->state, "%s", PQgetvalue(r, 0, 1));
  out->workspace = strdup(PQgetvalue(r, 0, 2));
  out->limits_json = strdup(PQgetvalue(r, 0, 3));
  out->image = strdup(PQgetvalue(r, 0, 4));
  *walls_json = strdup(PQgetvalue(r, 0, 5));
  PQclear(r);
  if (!out->workspace || !out->limits_json || !out->image || !*walls_json) {
    jb_launch_job_free(out);
    free(*walls_json);
    *walls_json = NULL;
    return jb_fail(err, 12, "out of memory");
  }
  return JB_OK;
}

int jb_db_session_lease(PGconn *c, const char *job_id, const char *worker_id, long lease_s,
                        jb_error *err) {
  char l[24];
  snprintf(l, sizeof l, "%ld", lease_s);
  const char *p[3] = {job_id, worker_id, l};
  PGresult *r = jb_db_exec(c,
                           "UPDATE sessions SET lease_worker = $2,"
                           " lease_until = now() + make_interval(secs => $3::bigint)"
                           " WHERE job_id = $1 AND (lease_worker IS NULL OR lease_worker = $2"
                           " OR lease_until < now())",
                           3, p, PGRES_COMMAND_OK, NULL, err, "take lease");
  if (!r) return JB_ERR_FAIL;
  int n = atoi(PQcmdTuples(r));
  PQclear(r);
  if (n == 1) return JB_OK;
  jb_fail(err, EBUSY, "session %s is driven by another worker (its lease holds)", job_id);
  return JB_ERR_CONFLICT;
}

int jb_db_leases_renew(PGconn *c, const char *worker_id, long lease_s, jb_error *err) {
  char l[24];
  snprintf(l, sizeof l, "%ld", lease_s);
  const char *p[2] = {worker_id, l};
  PGresult *r = jb_db_exec(c,
                           "UPDATE sessions SET lease_until = now() + make_interval(secs =>"
                           " $2::bigint) WHERE lease_worker = $1 AND lease_until >= now()"
                           " AND state IN ('created', 'prescanning', 'awaiting_agent', 'active',"
                           " 'paused', 'done')",
                           2, p, PGRES_COMMAND_OK, NULL, err, "renew leases");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}
