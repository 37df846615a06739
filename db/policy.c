/* policy.c — storage of a session's approval rules (see policy.h). */
#define _GNU_SOURCE
#include "db/policy.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/audit_store.h"
#include "db/db.h"
#include "db/ops.h"
#include "db/op_decide.h"
#include "lib/policy.h"

#define RULE_IN_ENTRY_MAX (16 * 1024) /* bytes of a rule's JSON recorded whole in its entry */

/* One audit entry of rule change `operation` with `details` (stolen) in the open transaction. */
static int audit_rule(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                      const char *operation, json_t *details, struct jb_audit_head *head,
                      jb_error *err) {
  if (!details) return jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL;
  int rc = jb_audit_append(c, keys, job_id, operation, NULL, details, head, err);
  json_decref(details);
  return rc;
}

/* Adds one to session `job_id`'s rules_version in the open transaction (which holds the row):
 * the rules that are live changed (migration 024). */
static int bump_version(PGconn *c, const char *job_id, jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r =
      jb_db_exec(c, "UPDATE sessions SET rules_version = rules_version + 1 WHERE job_id = $1", 1, p,
                 PGRES_COMMAND_OK, NULL, err, "rules version");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

/* Locks session `job_id`'s row in a new transaction, held by `tx`: JB_OK (transaction open),
 * or rolled back with JB_ERR_NOT_FOUND / JB_ERR_CONFLICT (ended; `msg`) / JB_ERR_FAIL. */
static int begin_locked(struct jb_tx *tx, PGconn *c, const char *job_id, char *msg, size_t msize,
                        jb_error *err) {
  if (jb_tx_begin(tx, c, err) < 0) return JB_ERR_FAIL;
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c, "SELECT state FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p,
                           PGRES_TUPLES_OK, NULL, err, "lock session");
  if (!r) {
    jb_tx_rollback(tx);
    return JB_ERR_FAIL;
  }
  int rc = JB_OK;
  if (PQntuples(r) == 0) {
    rc = JB_ERR_NOT_FOUND;
  } else {
    const char *st = PQgetvalue(r, 0, 0);
    if (!strcmp(st, "accepted") || !strcmp(st, "aborted") || !strcmp(st, "failed")) {
      if (msg) snprintf(msg, msize, "the session is %s: its rules cannot change", st);
      rc = JB_ERR_CONFLICT;
    }
  }
  PQclear(r);
  if (rc != JB_OK) jb_tx_rollback(tx);
  return rc;
}

/* The details of a rule_add entry (new): {ruleId, rule, by}; a rule whose JSON is over
 * RULE_IN_ENTRY_MAX bytes (an argvPrefix may hold 64 strings of 4 KiB) as ruleSha256 (of its
 * JSON_COMPACT | JSON_SORT_KEYS text, as stored in policy_rules) and ruleBytes, so that the
 * entry always fits the chain's size cap. */
static json_t *rule_details(const char *id, json_t *rule, const char *by) {
  char *text = json_dumps(rule, JSON_COMPACT | JSON_SORT_KEYS);
  size_t n = text ? strlen(text) : 0;
  json_t *d;
  if (text && n > RULE_IN_ENTRY_MAX) {
    unsigned char h[32];
    char hx[65];
    crypto_hash_sha256(h, (const unsigned char *)text, n);
    sodium_bin2hex(hx, sizeof hx, h, sizeof h);
    d = json_pack("{s:s,s:s,s:I,s:s}", "ruleId", id, "ruleSha256", hx, "ruleBytes", (json_int_t)n,
                  "by", by);
  } else {
    d = json_pack("{s:s,s:O,s:s}", "ruleId", id, "rule", rule, "by", by);
  }
  free(text);
  return d;
}

int jb_db_rules_insert_tx(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                          const json_t *rules, const char *by, long long op_id,
                          struct jb_audit_head *head, char *msg, size_t msize, jb_error *err) {
  size_t n = json_array_size(rules);
  if (n == 0) return JB_OK;
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT count(*) FROM policy_rules WHERE job_id = $1"
                           " AND revoked_at IS NULL AND expired_at IS NULL",
                           1, p, PGRES_TUPLES_OK, NULL, err, "count rules");
  if (!r) return JB_ERR_FAIL;
  long long live = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  if (live + (long long)n > JB_RULES_MAX) {
    snprintf(msg, msize, "the session has %lld live rules; %zu more would pass the limit of %d",
             live, n, JB_RULES_MAX);
    return JB_ERR_CONFLICT;
  }
  if (bump_version(c, job_id, err) != JB_OK) return JB_ERR_FAIL;
  for (size_t i = 0; i < n; i++) {
    json_t *rule = json_array_get(rules, i);
    char *text = json_dumps(rule, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text) return jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL;
    char uses[24];
    json_t *ju = json_object_get(rule, "uses");
    if (json_is_integer(ju)) snprintf(uses, sizeof uses, "%lld", (long long)json_integer_value(ju));
    const char *q[5] = {job_id, json_string_value(json_object_get(rule, "id")), text,
                        json_is_integer(ju) ? uses : NULL,
                        json_string_value(json_object_get(rule, "expiresAt"))};
    char st[6] = "";
    r = jb_db_exec(c,
                   "INSERT INTO policy_rules (job_id, rule_id, rule, uses_left, expires_at)"
                   " VALUES ($1, $2, $3::jsonb, $4::int, $5::timestamptz)",
                   5, q, PGRES_COMMAND_OK, st, err, "add rule");
    free(text);
    if (!r) {
      if (!strcmp(st, "23505")) {
        snprintf(msg, msize, "rule id \"%s\" is taken in this session", q[1]);
        return JB_ERR_CONFLICT;
      }
      return JB_ERR_FAIL;
    }
    PQclear(r);
    json_t *d = rule_details(q[1], rule, by);
    if (d && op_id > 0) json_object_set_new(d, "opId", json_integer(op_id));
    int rc = audit_rule(c, keys, job_id, "rule_add", d, head, err);
    if (rc == JB_ERR_CONFLICT) snprintf(msg, msize, "the session's audit chain is sealed");
    if (rc != JB_OK) return rc;
  }
  return JB_OK;
}

int jb_db_rules_add(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                    const json_t *rules, const char *by, long long op_id,
                    struct jb_audit_head *head, char *msg, size_t msize, jb_error *err) {
  cleanup_tx struct jb_tx tx = {0};
  int rc = begin_locked(&tx, c, job_id, msg, msize, err);
  if (rc != JB_OK) return rc;
  rc = jb_db_rules_insert_tx(c, keys, job_id, rules, by, op_id, head, msg, msize, err);
  if (rc == JB_OK && jb_tx_commit(&tx, err) < 0) rc = JB_ERR_FAIL;
  return rc;
}

int jb_db_rules_expire_due(PGconn *c, const struct jb_keyring *keys, const char *job_id, int *n,
                           struct jb_audit_head *head, jb_error *err) {
  *n = 0;
  const char *p[1] = {job_id};
  /* most calls find nothing due: a look without a lock first */
  PGresult *r = jb_db_exec(c,
                           "SELECT 1 FROM policy_rules WHERE job_id = $1 AND revoked_at IS NULL"
                           " AND expired_at IS NULL AND expires_at <= now() LIMIT 1",
                           1, p, PGRES_TUPLES_OK, NULL, err, "rules due");
  if (!r) return JB_ERR_FAIL;
  int due = PQntuples(r);
  PQclear(r);
  if (!due) return JB_OK;
  cleanup_tx struct jb_tx tx = {0};
  int rc = begin_locked(&tx, c, job_id, NULL, 0, err);
  if (rc == JB_ERR_NOT_FOUND || rc == JB_ERR_CONFLICT) return JB_OK; /* nothing to decide */
  if (rc != JB_OK) return rc;
  r = jb_db_exec(c,
                 "UPDATE policy_rules SET expired_at = now() WHERE job_id = $1"
                 " AND revoked_at IS NULL AND expired_at IS NULL AND expires_at <= now()"
                 " RETURNING rule_id",
                 1, p, PGRES_TUPLES_OK, NULL, err, "expire rules");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) > 0 && bump_version(c, job_id, err) != JB_OK) {
    PQclear(r);
    return JB_ERR_FAIL;
  }
  int expired = 0; /* *n only once committed */
  for (int i = 0; i < PQntuples(r); i++) {
    rc = audit_rule(c, keys, job_id, "rule_expire",
                    json_pack("{s:s,s:s}", "ruleId", PQgetvalue(r, i, 0), "why", "expiresAt"), head,
                    err);
    if (rc != JB_OK) {
      PQclear(r);
      return JB_ERR_FAIL;
    }
    expired++;
  }
  PQclear(r);
  if (jb_tx_commit(&tx, err) < 0) return JB_ERR_FAIL;
  *n = expired;
  return JB_OK;
}

int jb_db_rules_list(PGconn *c, const struct jb_keyring *keys, const char *job_id, bool all,
                     json_t **out, long long *version, struct jb_audit_head *head, jb_error *err) {
  *out = NULL;
  int n = 0;
  if (jb_db_rules_expire_due(c, keys, job_id, &n, head, err) != JB_OK) return JB_ERR_FAIL;
  const char *p[2] = {job_id, all ? "t" : "f"};
  PGresult *r =
      jb_db_exec(c,
                 "SELECT (SELECT rules_version FROM sessions WHERE job_id = $1), coalesce((SELECT"
                 "   json_agg(r.rule ||"
                 "   jsonb_strip_nulls(jsonb_build_object('usesLeft', r.uses_left,"
                 "   'createdAt', jb_ts(r.created_at), 'revokedAt', jb_ts(r.revoked_at),"
                 "   'expiredAt', jb_ts(r.expired_at), 'state', CASE WHEN r.revoked_at IS NOT NULL"
                 "   THEN 'revoked' WHEN r.expired_at IS NOT NULL THEN 'expired' ELSE 'live' END))"
                 "   ORDER BY r.position) FROM policy_rules r WHERE r.job_id = $1 AND ($2::bool OR"
                 "   (r.revoked_at IS NULL AND r.expired_at IS NULL))), '[]'::json)::text",
                 2, p, PGRES_TUPLES_OK, NULL, err, "list rules");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_OK;
  if (PQgetisnull(r, 0, 0)) {
    rc = JB_ERR_NOT_FOUND;
  } else {
    if (version) *version = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    *out = json_loads(PQgetvalue(r, 0, 1), 0, NULL);
    if (!*out) {
      jb_fail(err, ENOMEM, "rules: unreadable list");
      rc = JB_ERR_FAIL;
    }
  }
  PQclear(r);
  return rc;
}

int jb_db_rule_revoke(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                      const char *rule_id, const char *by, struct jb_audit_head *head, char *msg,
                      size_t msize, jb_error *err) {
  cleanup_tx struct jb_tx tx = {0};
  int rc = begin_locked(&tx, c, job_id, msg, msize, err);
  if (rc != JB_OK) return rc;
  const char *p[2] = {job_id, rule_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT revoked_at IS NOT NULL, expired_at IS NOT NULL,"
                           " coalesce((rule->>'locked')::bool, false)"
                           " FROM policy_rules WHERE job_id = $1 AND rule_id = $2 FOR UPDATE",
                           2, p, PGRES_TUPLES_OK, NULL, err, "read rule");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 0) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  bool revoked = !strcmp(PQgetvalue(r, 0, 0), "t"), expired = !strcmp(PQgetvalue(r, 0, 1), "t"),
       locked = !strcmp(PQgetvalue(r, 0, 2), "t");
  PQclear(r);
  if (revoked || expired || locked) {
    snprintf(msg, msize, "rule \"%s\" is %s", rule_id,
             revoked   ? "revoked already"
             : expired ? "expired"
                       : "locked by the operator");
    return JB_ERR_CONFLICT;
  }
  r = jb_db_exec(c, "UPDATE policy_rules SET revoked_at = now() WHERE job_id = $1 AND rule_id = $2",
                 2, p, PGRES_COMMAND_OK, NULL, err, "revoke rule");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  if (bump_version(c, job_id, err) != JB_OK) return JB_ERR_FAIL;
  rc = audit_rule(c, keys, job_id, "rule_revoke",
                  json_pack("{s:s,s:s}", "ruleId", rule_id, "by", by), head, err);
  if (rc == JB_ERR_CONFLICT) {
    snprintf(msg, msize, "the session's audit chain is sealed");
    return rc;
  }
  if (rc != JB_OK || jb_tx_commit(&tx, err) < 0) return JB_ERR_FAIL;
  return JB_OK;
}

int jb_db_op_facts(PGconn *c, const char *job_id, long long op_id, json_t **out, jb_error *err) {
  *out = NULL;
  char id[24];
  snprintf(id, sizeof id, "%lld", op_id);
  const char *p[2] = {job_id, id};
  PGresult *r = jb_db_exec(c,
                           "SELECT json_build_object('tool', tool, 'path', path, 'state', state,"
                           " 'args', args)::text FROM ops WHERE job_id = $1 AND op_id = $2::bigint",
                           2, p, PGRES_TUPLES_OK, NULL, err, "read op");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_OK;
  if (PQntuples(r) == 0) {
    rc = JB_ERR_NOT_FOUND;
  } else if (!(*out = json_loads(PQgetvalue(r, 0, 0), 0, NULL))) {
    jb_fail(err, ENOMEM, "out of memory");
    rc = JB_ERR_FAIL;
  }
  PQclear(r);
  return rc;
}

int jb_db_op_approve_similar(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                             long long op_id, const char *reason, const json_t *rule,
                             char **json_out, char state[20], bool *rule_failed,
                             struct jb_audit_head *head, char *msg, size_t msize, jb_error *err) {
  *rule_failed = false;
  *json_out = NULL;
  cleanup_tx struct jb_tx tx = {0};
  int rc = begin_locked(&tx, c, job_id, msg, msize, err);
  if (rc == JB_ERR_CONFLICT) snprintf(state, 20, "ended");
  if (rc != JB_OK) return rc;
  /* an approval is one statement on the op row, made here inside this transaction */
  rc = jb_db_op_decide(c, keys, job_id, op_id, true, reason, "buyer", json_out, state, NULL, err);
  if (rc != JB_OK) return rc;
  json_t *one = json_pack("[O]", (json_t *)rule);
  rc = one ? jb_db_rules_insert_tx(c, keys, job_id, one, "allowSimilar", op_id, head, msg, msize,
                                   err)
           : JB_ERR_FAIL;
  json_decref(one);
  if (rc == JB_OK && jb_tx_commit(&tx, err) < 0) rc = JB_ERR_FAIL;
  if (rc != JB_OK) {
    free(*json_out);
    *json_out = NULL;
    *rule_failed = rc == JB_ERR_CONFLICT;
  }
  return rc;
}

int jb_db_op_create_used(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                         const struct jb_op_new *op, long long rules_version, const char *rule_id,
                         bool *rules_stale, bool *expired, struct jb_audit_head *head,
                         long long *op_id, char state[20], jb_error *err) {
  *rules_stale = *expired = false;
  state[0] = '\0';
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  char ver[24];
  snprintf(ver, sizeof ver, "%lld", rules_version);
  const char *p[3] = {job_id, rule_id, ver};
  /* the row FOR UPDATE: no rule changes until this commits, and the version is the latest */
  PGresult *r =
      jb_db_exec(c,
                 "SELECT state, rules_version = $2::bigint FROM sessions"
                 " WHERE job_id = $1 FOR UPDATE",
                 2, (const char *[]){job_id, ver}, PGRES_TUPLES_OK, NULL, err, "lock session");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 0) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  bool same = !strcmp(PQgetvalue(r, 0, 1), "t");
  snprintf(state, 20, "%s", PQgetvalue(r, 0, 0));
  PQclear(r);
  if (strcmp(state, "active") && strcmp(state, "paused")) return JB_ERR_CONFLICT;
  if (!same) {
    state[0] = '\0';
    *rules_stale = true;
    return JB_ERR_CONFLICT;
  }
  r = jb_db_exec(c,
                 "UPDATE policy_rules SET uses_left = uses_left - 1,"
                 "  expired_at = CASE WHEN uses_left = 1 THEN now() END"
                 " WHERE job_id = $1 AND rule_id = $2 AND revoked_at IS NULL AND expired_at IS NULL"
                 "  AND (expires_at IS NULL OR expires_at > now()) AND uses_left > 0"
                 " RETURNING uses_left",
                 2, p, PGRES_TUPLES_OK, NULL, err, "use rule");
  if (!r) goto clear_state;
  if (PQntuples(r) == 0) { /* past its expiresAt, not yet marked: decide again */
    PQclear(r);
    state[0] = '\0';
    *rules_stale = true;
    return JB_ERR_CONFLICT;
  }
  bool last = !strcmp(PQgetvalue(r, 0, 0), "0");
  PQclear(r);
  if (last) {
    int rc = bump_version(c, job_id, err);
    if (rc == JB_OK)
      rc = audit_rule(c, keys, job_id, "rule_expire",
                      json_pack("{s:s,s:s}", "ruleId", rule_id, "why", "uses"), head, err);
    if (rc != JB_OK) goto clear_state;
  }
  int rc = jb_db_op_create_decided(c, job_id, op->tool, op->path, op->args_json, op->pending,
                                   op->expect_json, op->decided_by, op->reason, -1, op->diff_json,
                                   NULL, op_id, state, err);
  if (rc != JB_OK) return rc;
  /* the insert asks a queued op not to wait for the WAL flush; the use and its audit entry do */
  r = jb_db_exec(c, "SELECT set_config('synchronous_commit', 'on', true)", 0, NULL, PGRES_TUPLES_OK,
                 NULL, err, "synchronous commit");
  if (!r) goto clear_state;
  PQclear(r);
  if (jb_tx_commit(&tx, err) < 0) goto clear_state;
  *expired = last;
  return JB_OK;
clear_state: /* a failure says nothing of the session's state (rolled back by tx) */
  state[0] = '\0';
  return JB_ERR_FAIL;
}
