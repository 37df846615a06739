/* changes.c — SQL of a session's change summary (see changes.h). */
#define _GNU_SOURCE
#include "db/changes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"

int jb_db_changes_list(PGconn *c, const char *job_id, char **json_out, jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(
      c,
      "SELECT json_build_object('jobId', s.job_id, 'changes', coalesce((SELECT json_agg("
      "   json_build_object('path', o.path, 'opId', o.op_id,"
      "     'sha256Before', CASE WHEN o.result->'result' ? 'previousSha256'"
      "       THEN o.result->'result'->'previousSha256'"
      "       ELSE to_jsonb(nullif(o.args->>'expectSha256', '')) END,"
      "     'sha256After', o.args->'sha256', 'size', o.args->'size', 'at', jb_ts(o.completed_at))"
      "   ORDER BY o.op_id) FROM (SELECT * FROM ops WHERE job_id = s.job_id AND tool = 'write'"
      "     AND state = 'done' ORDER BY op_id LIMIT 10000) o), '[]'::json))::text"
      " FROM sessions s WHERE s.job_id = $1",
      1, p, PGRES_TUPLES_OK, NULL, err, "list changes");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_ERR_NOT_FOUND;
  if (PQntuples(r) == 1) {
    *json_out = strndup(PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0));
    rc = *json_out ? JB_OK : jb_fail(err, ENOMEM, "out of memory");
  }
  PQclear(r);
  return rc;
}
