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
      "SELECT json_build_object('jobId', s.job_id, 'changes', coalesce((SELECT json_agg(ch"
      "   ORDER BY ch_id) FROM (SELECT o.op_id AS ch_id,"
      "   jsonb_build_object('tool', o.tool, 'path', o.path, 'opId', o.op_id,"
      "     'at', jb_ts(o.completed_at)) || CASE"
      "   WHEN o.tool IN ('write', 'edit') THEN jsonb_build_object("
      "     'sha256Before', CASE WHEN o.result->'result' ? 'previousSha256'"
      "       THEN o.result->'result'->'previousSha256'"
      "       ELSE to_jsonb(nullif(o.args->>'expectSha256', '')) END,"
      "     'sha256After', o.args->'sha256', 'size', o.args->'size')"
      "   WHEN o.tool = 'mkdir' THEN jsonb_build_object('type', 'dir')"
      "   WHEN o.tool = 'exec' AND o.args->'changeset' = 'true'::jsonb THEN jsonb_build_object("
      "     'argv', o.args->'argv', 'effects', coalesce((SELECT jsonb_agg(jsonb_strip_nulls("
      "       jsonb_build_object('path', f.path, 'change', f.change, 'type', f.new_type,"
      "       'sha256', f.new_sha256, 'size', f.size)) ORDER BY f.idx) FROM (SELECT f.* FROM"
      "       changeset_files f JOIN ops c ON c.op_id = f.op_id WHERE c.job_id = o.job_id"
      "       AND c.parent_op_id = o.op_id AND c.tool = 'changeset' AND f.outcome = 'applied'"
      "       ORDER BY f.idx LIMIT 1000) f), '[]'::jsonb),"
      "     'effectsTotal', (SELECT count(*) FROM changeset_files f JOIN ops c ON c.op_id ="
      "       f.op_id WHERE c.job_id = o.job_id AND c.parent_op_id = o.op_id"
      "       AND c.tool = 'changeset' AND f.outcome = 'applied'),"
      "     'changesetOpId', (SELECT c.op_id FROM ops c WHERE c.job_id = o.job_id"
      "       AND c.parent_op_id = o.op_id AND c.tool = 'changeset' LIMIT 1))"
      "   WHEN o.tool = 'exec' AND o.changes IS NOT NULL THEN jsonb_build_object("
      "     'argv', o.args->'argv', 'effects', o.changes->'list',"
      "     'effectsTotal', o.changes->'total', 'effectsTruncated', o.changes->'truncated',"
      "     'effectsSummary', o.changes - 'list')"
      "   WHEN o.tool = 'exec' THEN jsonb_strip_nulls(jsonb_build_object('argv', o.args->'argv',"
      "     'effects', o.result->'result'->'changes',"
      "     'effectsTotal', o.result->'result'->'changesTotal'))"
      "   WHEN o.tool = 'move' THEN jsonb_strip_nulls(jsonb_build_object('from', o.path,"
      "     'to', o.args->'destination', 'type', o.result->'result'->'type',"
      "     'sha256', o.result->'result'->'sha256'))"
      "   ELSE jsonb_strip_nulls(jsonb_build_object('type', o.result->'result'->'type',"
      "     'deleted', o.result->'result'->'deleted',"
      "     'recursive', coalesce(o.args->'recursive', 'false'::jsonb))) END AS ch"
      "   FROM (SELECT * FROM ops WHERE job_id = s.job_id"
      "     AND tool IN ('write', 'edit', 'mkdir', 'move', 'delete', 'exec') AND state = 'done'"
      "     AND NOT (tool = 'mkdir' AND result->'result'->'created' = 'false'::jsonb)"
      "     AND NOT (tool = 'exec' AND coalesce((changes->>'total')::bigint,"
      "       jsonb_array_length(CASE WHEN jsonb_typeof(result->'result'->'changes') = 'array'"
      "       THEN result->'result'->'changes' END), 0) = 0"
      "       AND NOT EXISTS (SELECT 1 FROM changeset_files f JOIN ops c ON c.op_id = f.op_id"
      "         WHERE c.job_id = ops.job_id AND c.parent_op_id = ops.op_id"
      "         AND c.tool = 'changeset' AND f.outcome = 'applied'))"
      "     ORDER BY op_id LIMIT 10000) o) x), '[]'::json))::text"
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
