/* changeset_decide.c — the buyer's side of a changeset: its rows read, the decision stored
 * per row with the op's, a page of its files (see changeset_decide.h). */
#define _GNU_SOURCE
#include "db/changeset_decide.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/audit_store.h"
#include "db/db.h"
#include "db/op_decide.h"
#include "db/op_state.h"

void jb_cs_facts_clear(struct jb_cs_facts *f) {
  for (size_t i = 0; f->rows && i < f->n; i++) free(f->rows[i].path);
  free(f->rows);
  *f = (struct jb_cs_facts){0};
}

/* The rows of changeset `p` = {job, op} into `out`. JB_OK or JB_ERR_FAIL. */
static int read_rows(PGconn *c, const char *const p[2], struct jb_cs_facts *out, jb_error *err) {
  PGresult *r = jb_db_exec(c,
                           "SELECT idx, path, change, coalesce(old_type, ''),"
                           " coalesce(new_type, ''), approvable, coalesce(member_op_id, 0)"
                           " FROM changeset_files"
                           " WHERE job_id = $1 AND op_id = $2::bigint ORDER BY idx",
                           2, p, PGRES_TUPLES_OK, NULL, err, "read a changeset's files");
  if (!r) return JB_ERR_FAIL;
  size_t n = (size_t)PQntuples(r);
  out->rows = calloc(n ? n : 1, sizeof *out->rows);
  if (!out->rows) {
    PQclear(r);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    struct jb_cs_row *w = &out->rows[i];
    w->idx = atoi(PQgetvalue(r, (int)i, 0));
    w->path = strdup(PQgetvalue(r, (int)i, 1));
    snprintf(w->change, sizeof w->change, "%s", PQgetvalue(r, (int)i, 2));
    snprintf(w->old_type, sizeof w->old_type, "%s", PQgetvalue(r, (int)i, 3));
    snprintf(w->new_type, sizeof w->new_type, "%s", PQgetvalue(r, (int)i, 4));
    w->approvable = PQgetvalue(r, (int)i, 5)[0] == 't';
    w->member = strtoll(PQgetvalue(r, (int)i, 6), NULL, 10);
    out->n = i + 1;
    if (!w->path) {
      PQclear(r);
      return jb_fail(err, ENOMEM, "out of memory");
    }
  }
  PQclear(r);
  return JB_OK;
}

int jb_db_changeset_facts(PGconn *c, const char *job_id, long long op_id, struct jb_cs_facts *out,
                          jb_error *err) {
  *out = (struct jb_cs_facts){0};
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  const char *p[2] = {job_id, id};
  PGresult *r = jb_db_exec(c,
                           "SELECT tool, state, coalesce(args->>'changesetSha256', '') FROM ops"
                           " WHERE job_id = $1 AND op_id = $2::bigint",
                           2, p, PGRES_TUPLES_OK, NULL, err, "read an op's tool");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  snprintf(out->tool, sizeof out->tool, "%s", PQgetvalue(r, 0, 0));
  snprintf(out->state, sizeof out->state, "%s", PQgetvalue(r, 0, 1));
  snprintf(out->sha256, sizeof out->sha256, "%s", PQgetvalue(r, 0, 2));
  PQclear(r);
  if (strcmp(out->tool, "changeset")) return JB_OK;
  int rc = read_rows(c, p, out, err);
  if (rc != JB_OK) jb_cs_facts_clear(out);
  return rc;
}

/* The idx of every approved row as a PostgreSQL int[] literal ("{0,3}"; new), or NULL. */
static char *approved_array(const struct jb_cs_row *rows, const bool *approved, size_t n) {
  char *s = malloc(n * 12 + 3), *w = s;
  if (!s) return NULL;
  *w++ = '{';
  for (size_t i = 0; approved && i < n; i++)
    if (approved[i]) w += sprintf(w, "%s%d", w[-1] == '{' ? "" : ",", rows[i].idx);
  *w++ = '}';
  *w = '\0';
  return s;
}

/* The decision's audit entry of the op decided (`op_json`), in the open transaction. */
static int audit_decision(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                          const char *op_json, bool approve, size_t n_approved, size_t n,
                          const char *sha256, const char *approved_sha, const char *by,
                          struct jb_audit_head *head, jb_error *err) {
  json_t *op = json_loads(op_json, 0, NULL);
  json_t *d =
      op ? json_pack("{s:O,s:s,s:s,s:b,s:s,s:I,s:I,s:s}", "opId", json_object_get(op, "opId"),
                     "decision", approve ? "approved" : "rejected", "decidedBy", by, "ok", approve,
                     "changesetSha256", sha256, "approved", (json_int_t)n_approved, "rejected",
                     (json_int_t)(n - n_approved), "approvedSha256", approved_sha)
         : NULL;
  const char *why = json_string_value(json_object_get(op, "reason"));
  if (d && why) json_object_set_new(d, "reason", json_string(why));
  const char *path = json_string_value(json_object_get(op, "path"));
  int rc = d ? jb_audit_append(c, keys, job_id, "changeset", path, d, head, err)
             : jb_fail(err, ENOMEM, "out of memory");
  json_decref(d);
  json_decref(op);
  return rc;
}

/* A batch's members (`q` = {job, the changeset op}; none for a command's changeset), once
 * its rows are decided: a member whose rows are all approved becomes 'approved' (the worker
 * runs it), the others 'rejected' ("not approved in changeset NAME"); the changeset op, which
 * the worker has nothing to apply for, holds {ok, result: {approved, rejected}} (members). */
static int decide_members(PGconn *c, const char *const q[3], jb_error *err) {
  PGresult *r = jb_db_exec(
      c,
      "WITH d AS (UPDATE ops m SET state = x.st, decision = x.st, decided_at = now(),"
      "   reason = CASE WHEN x.st = 'rejected' THEN 'not approved in changeset '"
      "   || (m.args->>'changeset') END"
      "  FROM (SELECT m2.op_id, CASE WHEN bool_and(f.decision = 'approved')"
      "   THEN 'approved' ELSE 'rejected' END AS st FROM ops m2 JOIN changeset_files f"
      "   ON f.job_id = m2.job_id AND f.op_id = $2::bigint AND f.member_op_id = m2.op_id"
      "   WHERE m2.job_id = $1 AND m2.parent_op_id = $2::bigint AND m2.state = 'staged'"
      "   GROUP BY m2.op_id) x"
      "  WHERE m.job_id = $1 AND m.op_id = x.op_id RETURNING m.state)"
      " UPDATE ops SET result = jsonb_build_object('ok', true, 'result', jsonb_build_object("
      "   'approved', (SELECT count(*) FROM d WHERE state = 'approved'),"
      "   'rejected', (SELECT count(*) FROM d WHERE state = 'rejected')))"
      " WHERE job_id = $1 AND op_id = $2::bigint AND args ? 'batch'",
      2, q, PGRES_COMMAND_OK, NULL, err, "decide a batch's members");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_db_changeset_decide(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                           long long op_id, bool approve, const struct jb_cs_row *rows,
                           const bool *approved, size_t n, const char *sha256,
                           const char *approved_sha, const char *reason, const char *by,
                           char **json_out, char state[20], struct jb_audit_head *head,
                           jb_error *err) {
  *json_out = NULL;
  memset(head, 0, sizeof *head);
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  by = by && !strcmp(by, "service") ? "service" : "buyer";
  size_t n_approved = 0;
  for (size_t i = 0; approve && i < n; i++) n_approved += approved[i];
  char *arr = approved_array(rows, approve ? approved : NULL, n);
  if (!arr) return jb_fail(err, ENOMEM, "out of memory");
  const char *p[7] = {job_id, id, jb_op_state_name(approve ? JB_OP_APPROVED : JB_OP_REJECTED),
                      reason, by, sha256,
                      arr};
  cleanup_tx struct jb_tx tx = {0};
  int rc = JB_ERR_FAIL;
  PGresult *r = NULL;
  if (jb_tx_begin(&tx, c, err) < 0) goto out;
  /* the lock order of every chain writer: the session row, then the op */
  r = jb_db_exec(c, "SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p, PGRES_TUPLES_OK,
                 NULL, err, "lock session");
  if (!r) goto out;
  PQclear(r);
  r = jb_db_exec(c,
                 "UPDATE ops o SET state = CASE WHEN o.args ? 'batch' AND $3 = 'approved'"
                 "   THEN 'done' ELSE $3 END, decision = $3, reason = $4, decided_at = now(),"
                 "   completed_at = CASE WHEN o.args ? 'batch' THEN now() END,"
                 "   decided_by = CASE WHEN $5 = 'service' THEN 'service' ELSE o.decided_by END"
                 " FROM sessions s WHERE o.op_id = $2::bigint AND o.job_id = $1"
                 "   AND o.state = 'pending' AND o.tool = 'changeset'"
                 "   AND coalesce(o.args->>'changesetSha256', '') = $6 AND s.job_id = o.job_id"
                 "   AND s.state IN ('created', 'prescanning', 'awaiting_agent', 'active',"
                 "   'paused', 'done')"
                 " RETURNING " JB_DB_OP_JSON "::text",
                 6, p, PGRES_TUPLES_OK, NULL, err, "decide changeset");
  if (!r) goto out;
  if (PQntuples(r) != 1) {
    PQclear(r);
    jb_tx_rollback(&tx);
    rc = jb_db_op_undecided(c, job_id, op_id, state, err);
    goto out;
  }
  *json_out = strdup(PQgetvalue(r, 0, 0));
  PQclear(r);
  if (!*json_out) {
    rc = jb_fail(err, ENOMEM, "out of memory");
    goto out;
  }
  const char *q[3] = {job_id, id, arr};
  r = jb_db_exec(c,
                 "UPDATE changeset_files SET decision = CASE WHEN idx = ANY($3::int[])"
                 "   THEN 'approved' ELSE 'rejected' END"
                 " WHERE job_id = $1 AND op_id = $2::bigint",
                 3, q, PGRES_COMMAND_OK, NULL, err, "decide changeset files");
  if (!r) goto out;
  PQclear(r);
  if (decide_members(c, q, err) != JB_OK) goto out;
  rc = audit_decision(c, keys, job_id, *json_out, approve, n_approved, n, sha256, approved_sha, by,
                      head, err);
  if (rc == JB_OK && jb_tx_commit(&tx, err) < 0) rc = JB_ERR_FAIL;
out:
  free(arr);
  if (rc != JB_OK) {
    free(*json_out);
    *json_out = NULL;
    memset(head, 0, sizeof *head);
  }
  return rc;
}

int jb_db_changeset_page(PGconn *c, const char *job_id, long long op_id, long long after, int limit,
                         char **json_out, jb_error *err) {
  *json_out = NULL;
  char id[24], a[24], l[16];
  snprintf(id, sizeof id, "%lld", op_id);
  snprintf(a, sizeof a, "%lld", after);
  snprintf(l, sizeof l, "%d", limit);
  const char *p[4] = {job_id, id, a, l};
  /* one more row than asked tells whether a next page exists */
  PGresult *r = jb_db_exec(
      c,
      "WITH op AS (SELECT * FROM ops WHERE job_id = $1 AND op_id = $2::bigint"
      "   AND tool = 'changeset'),"
      " page AS (SELECT f.* FROM changeset_files f WHERE f.job_id = $1 AND f.op_id = $2::bigint"
      "   AND f.idx > $3::bigint ORDER BY f.idx LIMIT $4::int + 1),"
      " shown AS (SELECT * FROM page ORDER BY idx LIMIT $4::int)"
      " SELECT json_build_object('opId', o.op_id, 'execOpId', coalesce(o.parent_op_id,"
      "   (o.args->>'execOpId')::bigint), 'state', o.state, 'changesetSha256',"
      "   o.args->>'changesetSha256', 'total', (SELECT count(*) FROM changeset_files f"
      "   WHERE f.job_id = $1 AND f.op_id = o.op_id), 'approvable', (SELECT count(*)"
      "   FROM changeset_files f WHERE f.job_id = $1 AND f.op_id = o.op_id AND f.approvable),"
      "  'files', coalesce((SELECT json_agg(json_build_object('idx', f.idx, 'path', f.path,"
      "   'change', f.change, 'oldType', f.old_type, 'newType', f.new_type, 'oldSha256',"
      "   f.old_sha256, 'newSha256', f.new_sha256, 'oldMode', f.old_mode, 'newMode', f.new_mode,"
      "   'oldTarget', f.old_target, 'newTarget', f.new_target, 'size', f.size, 'oldSize',"
      "   f.old_size, 'binary', f.binary, 'diff', f.diff, 'approvable', f.approvable, 'why',"
      "   f.why, 'flags', f.flags, 'decision', f.decision, 'outcome', f.outcome, 'detail',"
      "   f.detail) ORDER BY f.idx) FROM shown f), '[]'::json),"
      "  'next', CASE WHEN (SELECT count(*) FROM page) > $4::int"
      "   THEN (SELECT max(idx) FROM shown) END)::text FROM op o",
      4, p, PGRES_TUPLES_OK, NULL, err, "read a changeset");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_ERR_NOT_FOUND;
  if (PQntuples(r) == 1) {
    *json_out = strdup(PQgetvalue(r, 0, 0));
    rc = *json_out ? JB_OK : jb_fail(err, ENOMEM, "out of memory");
  }
  PQclear(r);
  return rc;
}
