/* rollback.c — SQL of a rollback request (see rollback.h). */
#define _GNU_SOURCE
#include "db/rollback.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/audit_sql.h"
#include "db/db.h"

void jb_rollback_facts_free(struct jb_rollback_facts *f) {
  free(f->not_restorable);
  f->not_restorable = NULL;
}

/* The facts of $1 back to op $2 (text of a bigint >= 0). A writable command's changes are its
 * ops.changes total (migration 042), else the length of its result's change list (before
 * 042). A writable command that was started (started_at) and has neither — its outcome is
 * unknown: its session ended while it ran, its worker died and the reaper failed it, its
 * outcome could not be stored — may have changed anything: it counts as having changed files,
 * unless it failed with a code that means its command never ran. So does an op of any tool
 * marked {"preimagesLost": true} (the shim had run it before a restarted worker took them).
 * A command run on an overlay (args.changeset) changed nothing: its changeset op did. */
#define FACTS_SQL                                                                                 \
  "SELECT s.state, s.preimages_gone_at IS NOT NULL,"                                              \
  " (SELECT count(*) FROM ops WHERE job_id = s.job_id AND state IN ('approved', 'running')),"     \
  " coalesce((SELECT min(id) FROM launch_jobs WHERE job_id = s.job_id AND kind = 'rollback'"      \
  "   AND state IN ('queued', 'claimed')), 0),"                                                   \
  " $2::bigint = 0 OR EXISTS (SELECT 1 FROM ops WHERE job_id = s.job_id AND op_id = $2::bigint)," \
  " coalesce((SELECT json_agg(o.op_id ORDER BY o.op_id) FROM ops o WHERE o.job_id = s.job_id"     \
  "   AND o.op_id > $2::bigint AND (o.changes @> '{\"preimagesLost\": true}'::jsonb"              \
  "   OR o.tool = 'exec' AND o.args->'writable' = 'true'::jsonb"                                  \
  "   AND o.args->'changeset' IS DISTINCT FROM 'true'::jsonb"                                     \
  "   AND (coalesce((o.changes->>'total')::bigint, jsonb_array_length(CASE WHEN"                  \
  "     jsonb_typeof(o.result->'result'->'changes') = 'array'"                                    \
  "     THEN o.result->'result'->'changes' END), 0) > 0"                                          \
  "    OR (o.changes IS NULL AND o.started_at IS NOT NULL"                                        \
  "     AND jsonb_typeof(o.result->'result'->'changes') IS DISTINCT FROM 'array'"                 \
  "     AND coalesce(o.result->'error'->>'code', '') NOT IN ('busy', 'effects_incomplete',"       \
  "       'unavailable'))))"                                                                      \
  "   AND NOT EXISTS (SELECT 1 FROM preimages p WHERE p.job_id = o.job_id"                        \
  "     AND p.op_id = o.op_id)), '[]')::text,"                                                    \
  " CASE WHEN s.preimages_gone_at IS NOT NULL OR s.state = 'accepted' THEN 0 ELSE"                \
  " (SELECT count(DISTINCT op_id) FROM preimages WHERE job_id = s.job_id"                         \
  "   AND rolled_back_by IS NULL AND op_id > $2::bigint) END," JB_SQL_CHAIN_CLOSED(               \
      "s.job_id") " FROM sessions s WHERE s.job_id = $1"

static int read_facts(PGresult *r, struct jb_rollback_facts *out, jb_error *err) {
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  snprintf(out->state, sizeof out->state, "%s", PQgetvalue(r, 0, 0));
  out->preimages_gone = PQgetvalue(r, 0, 1)[0] == 't';
  out->ops_running = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
  out->rollback_running = strtoll(PQgetvalue(r, 0, 3), NULL, 10);
  out->to_found = PQgetvalue(r, 0, 4)[0] == 't';
  out->not_restorable = strdup(PQgetvalue(r, 0, 5));
  out->would_undo = strtoll(PQgetvalue(r, 0, 6), NULL, 10);
  out->sealed = PQgetvalue(r, 0, 7)[0] == 't';
  PQclear(r);
  return out->not_restorable ? JB_OK : jb_fail(err, ENOMEM, "out of memory");
}

int jb_db_rollback_facts(PGconn *c, const char *job_id, long long to, struct jb_rollback_facts *out,
                         jb_error *err) {
  memset(out, 0, sizeof *out);
  char ts[24];
  snprintf(ts, sizeof ts, "%lld", to);
  const char *p[2] = {job_id, ts};
  PGresult *r = jb_db_exec(c, FACTS_SQL, 2, p, PGRES_TUPLES_OK, NULL, err, "read rollback facts");
  return r ? read_facts(r, out, err) : JB_ERR_FAIL;
}

int jb_db_rollback_queue(PGconn *c, const char *job_id, long long to, const char *payload_json,
                         jb_rollback_decide_fn decide, void *ctx, long long *id, jb_error *err) {
  *id = 0;
  char ts[24];
  snprintf(ts, sizeof ts, "%lld", to);
  const char *p[2] = {job_id, ts};
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  /* the lock first, the facts in a statement of their own: under READ COMMITTED a statement
   * that waited for the lock still reads with the snapshot it began with, and would miss the
   * rollback the holder of the lock just queued */
  PGresult *r = jb_db_exec(c, "SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p,
                           PGRES_TUPLES_OK, NULL, err, "lock the session for a rollback");
  if (!r) return JB_ERR_FAIL;
  bool found = PQntuples(r) == 1;
  PQclear(r);
  if (!found) return JB_ERR_NOT_FOUND;
  r = jb_db_exec(c, FACTS_SQL, 2, p, PGRES_TUPLES_OK, NULL, err, "read rollback facts");
  if (!r) return JB_ERR_FAIL;
  struct jb_rollback_facts f = {0};
  int rc = read_facts(r, &f, err);
  if (rc != JB_OK) return rc;
  rc = decide(&f, ctx);
  jb_rollback_facts_free(&f);
  if (rc != 0) return JB_ERR_CONFLICT;
  const char *pq[2] = {job_id, payload_json};
  r = jb_db_exec(c,
                 "WITH j AS (INSERT INTO launch_jobs (job_id, kind, payload)"
                 "   VALUES ($1, 'rollback', $2::jsonb) RETURNING id)"
                 " SELECT j.id, pg_notify('jb_change', $1) FROM j",
                 2, pq, PGRES_TUPLES_OK, NULL, err, "queue rollback");
  if (!r) return JB_ERR_FAIL;
  *id = PQntuples(r) == 1 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
  PQclear(r);
  if (*id <= 0) return jb_fail(err, EIO, "queue rollback: no job id returned");
  return jb_tx_commit(&tx, err) < 0 ? JB_ERR_FAIL : JB_OK;
}

/* One text value of the first row of `r` (taken over and cleared) into *json_out. */
static int text_out(PGresult *r, char **json_out, jb_error *err) {
  int rc = JB_ERR_NOT_FOUND;
  if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 0)) {
    *json_out = strndup(PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0));
    rc = *json_out ? JB_OK : jb_fail(err, ENOMEM, "out of memory");
  }
  PQclear(r);
  return rc;
}

int jb_db_rollback_plan(PGconn *c, const char *job_id, long long to, char **json_out,
                        jb_error *err) {
  *json_out = NULL;
  char ts[24];
  snprintf(ts, sizeof ts, "%lld", to);
  const char *p[2] = {job_id, ts};
  PGresult *r = jb_db_exec(
      c,
      "WITH pre AS (SELECT * FROM preimages WHERE job_id = $1 AND rolled_back_by IS NULL"
      "   AND op_id > $2::bigint),"
      " undo AS (SELECT o.op_id, o.tool, o.path FROM ops o WHERE o.job_id = $1"
      "   AND o.op_id IN (SELECT op_id FROM pre) ORDER BY o.op_id DESC LIMIT 1000),"
      " files AS (SELECT * FROM pre ORDER BY seq DESC LIMIT 1000)"
      " SELECT json_build_object("
      "  'wouldUndo', coalesce((SELECT json_agg(json_build_object('opId', op_id, 'tool', tool,"
      "    'path', path) ORDER BY op_id DESC) FROM undo), '[]'::json),"
      "  'files', coalesce((SELECT json_agg(json_strip_nulls(json_build_object('path', path,"
      "    'kind', kind, 'sha256', sha256, 'opId', op_id)) ORDER BY seq DESC) FROM files),"
      "    '[]'::json),"
      "  'count', (SELECT count(*) FROM pre),"
      "  'truncated', (SELECT count(*) FROM pre) > 1000"
      "    OR (SELECT count(DISTINCT op_id) FROM pre) > 1000)::text",
      2, p, PGRES_TUPLES_OK, NULL, err, "plan rollback");
  if (!r) return JB_ERR_FAIL;
  int rc = text_out(r, json_out, err);
  return rc == JB_ERR_NOT_FOUND ? jb_fail(err, EIO, "plan rollback: no row") : rc;
}

int jb_db_rollback_get(PGconn *c, const char *job_id, long long id, char **json_out,
                       jb_error *err) {
  *json_out = NULL;
  char ids[24];
  snprintf(ids, sizeof ids, "%lld", id);
  const char *p[2] = {job_id, ids};
  PGresult *r = jb_db_exec(
      c,
      "SELECT jsonb_strip_nulls(jsonb_build_object('rollbackId', id, 'state', state,"
      "  'by', payload->'by', 'reason', payload->'reason', 'createdAt', jb_ts(created_at),"
      "  'finishedAt', jb_ts(finished_at), 'result', result, 'error', error))"
      "  || jsonb_build_object('to', coalesce(payload->'to', 'null'::jsonb),"
      "    'force', coalesce(payload->'force', 'false'::jsonb))"
      " FROM launch_jobs WHERE job_id = $1 AND id = $2::bigint AND kind = 'rollback'",
      2, p, PGRES_TUPLES_OK, NULL, err, "read rollback");
  if (!r) return JB_ERR_FAIL;
  return text_out(r, json_out, err);
}
