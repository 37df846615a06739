/* op_decide.c — the buyer's side of a session's ops: listed, decided (see op_decide.h). */
#define _GNU_SOURCE
#include "db/op_decide.h"

#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/audit_store.h"
#include "db/db.h"
#include "db/op_state.h"

/* Copies column 0 of row 0 into a new string. */
static char *dup_value(PGresult *r) {
  return strndup(PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0));
}

int jb_db_ops_list(PGconn *c, const char *job_id, const char *state, long long after, int limit,
                   char **json_out, jb_error *err) {
  return jb_db_ops_list_by(c, job_id, state, NULL, after, limit, json_out, err);
}

int jb_db_ops_list_by(PGconn *c, const char *job_id, const char *state, const char *decided_by,
                      long long after, int limit, char **json_out, jb_error *err) {
  char a[24], l[16];
  snprintf(a, sizeof a, "%lld", after);
  snprintf(l, sizeof l, "%d", limit);
  const char *p[5] = {job_id, state, a, l, decided_by};
  /* one more row than asked tells whether a next page exists */
  PGresult *r =
      jb_db_exec(c,
                 "WITH page AS (SELECT o.* FROM ops o WHERE o.job_id = $1 AND ($2::text "
                 "IS NULL OR o.state = $2)"
                 "   AND ($5::text IS NULL OR o.decided_by = $5 OR ($5 = 'rule'"
                 "     AND starts_with(o.decided_by, 'rule:')))"
                 "   AND o.op_id > $3::bigint ORDER BY o.op_id LIMIT $4::int + 1),"
                 " shown AS (SELECT * FROM page ORDER BY op_id LIMIT $4::int)"
                 " SELECT json_build_object('ops', coalesce((SELECT json_agg(" JB_DB_OP_JSON
                 " ORDER BY o.op_id)"
                 "   FROM shown o), '[]'::json),"
                 "  'next', CASE WHEN (SELECT count(*) FROM page) > $4::int"
                 "   THEN (SELECT max(op_id) FROM shown) END)::text",
                 5, p, PGRES_TUPLES_OK, NULL, err, "list ops");
  if (!r) return JB_ERR_FAIL;
  *json_out = dup_value(r);
  PQclear(r);
  return *json_out ? JB_OK : jb_fail(err, 12, "out of memory");
}

/* The audit entry of a rejected op, inside the open transaction; fills *head. */
static int audit_rejection(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                           const char *op_json, const char *by, struct jb_audit_head *head,
                           jb_error *err) {
  json_t *op = json_loads(op_json, 0, NULL);
  if (!op) return jb_fail(err, ENOMEM, "out of memory");
  json_t *d =
      json_pack("{s:I,s:s,s:s,s:b}", "opId", json_integer_value(json_object_get(op, "opId")),
                "decision", "rejected", "decidedBy", by, "ok", 0);
  const char *why = json_string_value(json_object_get(op, "decisionReason"));
  if (d && why) json_object_set_new(d, "reason", json_string(why));
  const char *tool = json_string_value(json_object_get(op, "tool"));
  const char *path = json_string_value(json_object_get(op, "path"));
  /* a rejection must always be recordable: fields that could not be are left out, a path
   * that is too long is recorded by its SHA-256 */
  char path_note[80];
  if (path && strlen(path) > 4096) {
    unsigned char h[32];
    char hex[65];
    crypto_hash_sha256(h, (const unsigned char *)path, strlen(path));
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    snprintf(path_note, sizeof path_note, "sha256:%s", hex);
    path = path_note;
  }
  /* what the agent said of its content (size, SHA-256), never the content */
  json_t *args = json_object_get(op, "args");
  json_t *size = json_object_get(args, "size"), *sha = json_object_get(args, "sha256");
  if (json_is_integer(size) && json_integer_value(size) >= 0) json_object_set(d, "size", size);
  const char *shs = json_string_value(sha);
  if (shs && strlen(shs) == 64 && strspn(shs, "0123456789abcdef") == 64)
    json_object_set(d, "sha256", sha);
  static const char *const tools[] = {"read", "write",  "list",   "done", "read_many",
                                      "edit", "find",   "search", "stat", "mkdir",
                                      "move", "delete", NULL};
  bool known = false;
  for (size_t i = 0; tool && tools[i]; i++) known = known || !strcmp(tool, tools[i]);
  if (tool && !known) tool = "op";
  int rc = d ? jb_audit_append(c, keys, job_id, tool ? tool : "op", path, d, head, err)
             : jb_fail(err, ENOMEM, "out of memory");
  json_decref(d);
  json_decref(op);
  return rc;
}

int jb_db_op_decide(PGconn *c, const struct jb_keyring *keys, const char *job_id, long long op_id,
                    bool approve, const char *reason, const char *by, char **json_out,
                    char state[20], struct jb_audit_head *head, jb_error *err) {
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  by = by && !strcmp(by, "service") ? "service" : "buyer";
  const char *p[5] = {id, job_id, jb_op_state_name(approve ? JB_OP_APPROVED : JB_OP_REJECTED),
                      reason, by};
  if (head) memset(head, 0, sizeof *head);
  /* a rejection writes to the chain: take the session row first (the lock order of every
   * chain writer), then the op; an approval is one statement, in the caller's transaction
   * if there is one (left to the caller) */
  cleanup_tx struct jb_tx tx = {0};
  if (!approve) {
    if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
    PGresult *lk = jb_db_exec(c, "SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p + 1,
                              PGRES_TUPLES_OK, NULL, err, "lock session");
    if (!lk) return JB_ERR_FAIL;
    PQclear(lk);
  }
  PGresult *r = jb_db_exec(
      c,
      "UPDATE ops o SET state = $3, decision = $3, reason = $4, decided_at = now(),"
      "   decided_by = CASE WHEN $5 = 'service' THEN 'service' ELSE o.decided_by END"
      " FROM sessions s WHERE o.op_id = $1::bigint AND o.job_id = $2 AND o.state = 'pending'"
      "   AND s.job_id = o.job_id"
      "   AND s.state IN ('created', 'prescanning', 'awaiting_agent', 'active', 'paused', 'done')"
      " RETURNING " JB_DB_OP_JSON "::text",
      5, p, PGRES_TUPLES_OK, NULL, err, "decide op");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 1) {
    *json_out = dup_value(r);
    PQclear(r);
    if (!*json_out) return jb_fail(err, ENOMEM, "out of memory");
    if (!approve) {
      struct jb_audit_head h;
      if (audit_rejection(c, keys, job_id, *json_out, by, &h, err) != JB_OK ||
          jb_tx_commit(&tx, err) < 0) {
        free(*json_out);
        *json_out = NULL;
        return JB_ERR_FAIL;
      }
      if (head) *head = h;
    }
    return JB_OK;
  }
  PQclear(r);
  jb_tx_rollback(&tx); /* a rejection's: nothing was decided */
  return jb_db_op_undecided(c, job_id, op_id, state, err);
}

int jb_db_op_undecided(PGconn *c, const char *job_id, long long op_id, char state[20],
                       jb_error *err) {
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  const char *p[2] = {id, job_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT o.state, s.state FROM ops o JOIN sessions s USING (job_id)"
                           " WHERE o.op_id = $1::bigint AND o.job_id = $2",
                           2, p, PGRES_TUPLES_OK, NULL, err, "read op");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_ERR_NOT_FOUND;
  if (PQntuples(r) == 1) {
    /* pending but not decidable: the session ended */
    const char *ops = PQgetvalue(r, 0, 0);
    snprintf(state, 20, "%s",
             jb_op_state_from_name(ops) == JB_OP_PENDING ? PQgetvalue(r, 0, 1) : ops);
    rc = JB_ERR_CONFLICT;
  }
  PQclear(r);
  return rc;
}

int jb_db_op_decided_how(PGconn *c, const char *job_id, long long op_id, char *how, size_t len,
                         char state[20], jb_error *err) {
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  const char *p[2] = {id, job_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT o.state, coalesce(o.decision, o.state),"
                           " coalesce(o.decided_by, 'buyer'), coalesce(o.decided_at::text, ''),"
                           " coalesce(o.reason, o.decision_reason, '')"
                           " FROM ops o WHERE o.op_id = $1::bigint AND o.job_id = $2",
                           2, p, PGRES_TUPLES_OK, NULL, err, "read op decision");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_ERR_NOT_FOUND;
  if (PQntuples(r) == 1 && jb_op_state_from_name(PQgetvalue(r, 0, 0)) != JB_OP_PENDING) {
    const char *at = PQgetvalue(r, 0, 3), *why = PQgetvalue(r, 0, 4);
    snprintf(state, 20, "%s", PQgetvalue(r, 0, 0));
    snprintf(how, len, "op %lld was decided already: %s by %s%s%s%s%.200s%s", op_id,
             PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2), at[0] ? " at " : "", at,
             why[0] ? " (reason \"" : "", why, why[0] ? "\")" : "");
    rc = JB_OK;
  }
  PQclear(r);
  return rc;
}
