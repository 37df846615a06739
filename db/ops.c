/* ops.c — storage of file operations between jailboxd and the worker (see ops.h). */
#define _GNU_SOURCE
#include "db/ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/audit_store.h"
#include "db/db.h"

int jb_db_op_create(PGconn *c, const char *job_id, const char *tool, const char *path,
                    const char *args_json, bool pending, long long *op_id, char state[20],
                    jb_error *err) {
  const char *p[5] = {job_id, tool, path, args_json, pending ? "pending" : "approved"};
  PGresult *r = jb_db_exec(
      c,
      "WITH s AS (SELECT state FROM sessions WHERE job_id = $1),"
      " ins AS (INSERT INTO ops (job_id, tool, path, args, state, decision, decided_at)"
      "  SELECT $1, $2, $3, $4::jsonb, $5, CASE WHEN $5 = 'approved' THEN 'auto' END,"
      "         CASE WHEN $5 = 'approved' THEN now() END"
      "  FROM s WHERE s.state IN ('active', 'paused') RETURNING op_id)"
      " SELECT (SELECT state FROM s), (SELECT op_id FROM ins)",
      5, p, PGRES_TUPLES_OK, NULL, err, "store op");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_OK;
  if (PQgetisnull(r, 0, 0)) {
    rc = JB_ERR_NOT_FOUND;
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
  PGresult *r = jb_db_exec(c,
                           "SELECT o.state, s.state, o.result::text, o.reason FROM ops o"
                           " JOIN sessions s USING (job_id) WHERE o.op_id = $1::bigint AND o.job_id = $2",
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

int jb_db_op_forget_content(PGconn *c, long long op_id, jb_error *err) {
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  const char *p[1] = {id};
  PGresult *r = jb_db_exec(c,
                           "UPDATE ops SET result = result #- '{result,content}'"
                           " WHERE op_id = $1::bigint AND tool IN ('read', 'stat') AND result IS NOT NULL",
                           1, p, PGRES_COMMAND_OK, NULL, err, "forget read content");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

void jb_op_claim_free(struct jb_op_claim *o) {
  if (!o) return;
  free(o->path);
  free(o->args_json);
  o->path = o->args_json = NULL;
}

int jb_db_op_claim(PGconn *c, const char *job_id, struct jb_op_claim *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  if (jb_db_begin(c, err) < 0) return JB_ERR_FAIL;
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT o.op_id, o.tool, coalesce(o.path, ''), o.args::text,"
                           " coalesce(o.decision, 'auto')"
                           " FROM ops o JOIN sessions s USING (job_id)"
                           " WHERE o.job_id = $1 AND o.state = 'approved' AND s.state = 'active'"
                           " ORDER BY o.op_id LIMIT 1 FOR UPDATE OF o, s SKIP LOCKED",
                           1, p, PGRES_TUPLES_OK, NULL, err, "claim op");
  if (!r) {
    jb_db_rollback(c);
    return JB_ERR_FAIL;
  }
  if (PQntuples(r) == 0) {
    PQclear(r);
    jb_db_rollback(c);
    return JB_ERR_NOT_FOUND;
  }
  out->op_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  snprintf(out->tool, sizeof out->tool, "%s", PQgetvalue(r, 0, 1));
  out->path = strdup(PQgetvalue(r, 0, 2));
  out->args_json = strdup(PQgetvalue(r, 0, 3));
  snprintf(out->decision, sizeof out->decision, "%s", PQgetvalue(r, 0, 4));
  PQclear(r);
  if (!out->path || !out->args_json) {
    jb_op_claim_free(out);
    jb_db_rollback(c);
    return jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL;
  }
  return JB_OK;
}

int jb_db_op_complete(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                      const struct jb_op_claim *op, bool ok, const char *result_json,
                      json_t *details, struct jb_audit_head *head, jb_error *err) {
  int rc = jb_audit_append(c, keys, job_id, op->tool, op->path[0] ? op->path : NULL, details, head, err);
  if (rc != JB_OK) {
    jb_db_rollback(c);
    return rc;
  }
  char id[24];
  snprintf(id, sizeof id, "%lld", op->op_id);
  const char *p[3] = {id, ok ? "done" : "failed", result_json};
  PGresult *r = jb_db_exec(c,
                           "UPDATE ops SET state = $2, result = $3::jsonb, completed_at = now()"
                           " WHERE op_id = $1::bigint",
                           3, p, PGRES_COMMAND_OK, NULL, err, "complete op");
  if (!r) {
    jb_db_rollback(c);
    return JB_ERR_FAIL;
  }
  PQclear(r);
  if (jb_db_commit(c, err) < 0) {
    jb_db_rollback(c);
    return JB_ERR_FAIL;
  }
  return JB_OK;
}

int jb_db_op_set_diff(PGconn *c, long long op_id, const json_t *diff, jb_error *err) {
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  char *text = diff && !json_is_null(diff) ? json_dumps(diff, JSON_COMPACT) : NULL;
  if (diff && !json_is_null(diff) && !text) return jb_fail(err, ENOMEM, "out of memory");
  const char *p[2] = {id, text};
  PGresult *r = jb_db_exec(c, "UPDATE ops SET diff = $2::jsonb WHERE op_id = $1::bigint", 2, p,
                           PGRES_COMMAND_OK, NULL, err, "store diff preview");
  free(text);
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}
