/* policy.h — storage of a session's approval rules (lib/policy.h; migration 023): added at
 * the end of the session's list (at open, by the buyer, by "approve and allow similar"),
 * revoked, counted and expired, each change with its audit entry and a new rules_version
 * (migration 024) in the same transaction
 * (operations rule_add, rule_revoke, rule_expire; api/audit.md) — so that every instance
 * decides on the same list, and the chain says which rules stood when an op was decided. */
#ifndef JB_DB_POLICY_H
#define JB_DB_POLICY_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/audit.h"
#include "lib/err.h"

struct jb_keyring;

/* Inside the caller's transaction, which holds session `job_id`'s row (FOR UPDATE, or just
 * inserted it): appends the normalized rules `rules` (JSON array, borrowed; lib/policy.h
 * jb_rules_check) to the end of the session's list and an audit entry rule_add {ruleId, rule,
 * by, opId?} for each. `by`: "open", "buyer", "allowSimilar" (then `op_id` the approved op).
 * JB_OK (*head the last new head; untouched when `rules` is empty); JB_ERR_CONFLICT with a
 * sentence in `msg` (an id taken by a rule of the session, revoked ones included; more than
 * JB_RULES_MAX live rules; the chain sealed); JB_ERR_FAIL (the transaction is then aborted). */
int jb_db_rules_insert_tx(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                          const json_t *rules, const char *by, long long op_id,
                          struct jb_audit_head *head, char *msg, size_t msize, jb_error *err);

/* jb_db_rules_insert_tx in a transaction of its own that locks the session row first, only
 * while the session has not ended. JB_OK; JB_ERR_NOT_FOUND (no session); JB_ERR_CONFLICT with
 * `msg` (also: the session ended); JB_ERR_FAIL. */
int jb_db_rules_add(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                    const json_t *rules, const char *by, long long op_id,
                    struct jb_audit_head *head, char *msg, size_t msize, jb_error *err);

/* The session's rules in their order (new JSON array into *out): each the rule as added with
 * "usesLeft" (when it has uses), "createdAt", and "state": live, revoked (with "revokedAt")
 * or expired (with "expiredAt"); only the live ones without `all`. Rules whose expiresAt has
 * passed are expired first (jb_db_rules_expire_due). *version (may be NULL) gets the session's
 * rules_version read in the same statement as the list (the list is the rules of that
 * version). JB_OK; JB_ERR_NOT_FOUND; JB_ERR_FAIL. */
int jb_db_rules_list(PGconn *c, const struct jb_keyring *keys, const char *job_id, bool all,
                     json_t **out, long long *version, struct jb_audit_head *head, jb_error *err);

/* Marks the live rules of `job_id` whose expiresAt has passed expired, each with an audit
 * entry rule_expire {ruleId, why: "expiresAt"}, in one transaction (session row first).
 * *n the number expired (0: nothing written, *head untouched). JB_OK or JB_ERR_FAIL. */
int jb_db_rules_expire_due(PGconn *c, const struct jb_keyring *keys, const char *job_id, int *n,
                           struct jb_audit_head *head, jb_error *err);

/* Revokes live rule `rule_id` of `job_id` (audit entry rule_revoke {ruleId, by}; `by`
 * "buyer"). A locked rule is not revoked. JB_OK; JB_ERR_NOT_FOUND (no such rule);
 * JB_ERR_CONFLICT with `msg` (revoked or expired already, locked, session ended);
 * JB_ERR_FAIL. */
int jb_db_rule_revoke(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                      const char *rule_id, const char *by, struct jb_audit_head *head, char *msg,
                      size_t msize, jb_error *err);

/* An op to store (db/ops.h jb_db_op_create_decided's arguments; all borrowed). */
struct jb_op_new {
  const char *tool, *path, *args_json;
  bool pending;
  const char *expect_json, *decided_by, *reason;
  const char *diff_json; /* a pending op's diff preview (nullable), stored with it */
};

/* Stores op `op` of `job_id` decided by live rule `rule_id`, which has uses, on the rules of
 * version `rules_version`, and counts the use, in one transaction that holds the session row
 * FOR UPDATE: the use is counted only when the op is stored, and the op only while the rules
 * are still of that version and the rule still has a use left. The rule's last use expires it
 * (audit entry rule_expire {ruleId, why: "uses"}, *expired true, *head the new head).
 * JB_OK with *op_id and `state`; JB_ERR_CONFLICT with `state` "" and *rules_stale (the rules
 * changed, or the rule is past its expiresAt: decide again), "" without it (the session's
 * settings are not `op->expect_json`), or the session's state (not active nor paused);
 * JB_ERR_NOT_FOUND; JB_ERR_FAIL (nothing stored, nothing counted). */
int jb_db_op_create_used(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                         const struct jb_op_new *op, long long rules_version, const char *rule_id,
                         bool *rules_stale, bool *expired, struct jb_audit_head *head,
                         long long *op_id, char state[20], jb_error *err);

/* Approves pending op `op_id` of `job_id` (as jb_db_op_decide, `reason` nullable) and adds
 * `rule` (normalized, borrowed) made from it by allow-similar at the end of the session's
 * list (rule_add {by: "allowSimilar", opId}), in one transaction that locks the session row
 * first: the rule stands before the op is queued, so the next op is decided by it. JB_OK with
 * *json_out (the op as jb_db_op_decide gives it, new) and *head; JB_ERR_NOT_FOUND (no such op
 * or session); JB_ERR_CONFLICT with `state` (the op is not pending, the session ended) or,
 * with *rule_failed, `msg` (the rule could not be added: nothing was done); JB_ERR_FAIL. */
int jb_db_op_approve_similar(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                             long long op_id, const char *reason, const json_t *rule,
                             char **json_out, char state[20], bool *rule_failed,
                             struct jb_audit_head *head, char *msg, size_t msize, jb_error *err);

/* What op `op_id` of `job_id` is, for the rule allow-similar makes of it: {tool, path, state,
 * args} (new into *out; args as stored: a move's destination, an exec's argv or command).
 * JB_OK; JB_ERR_NOT_FOUND; JB_ERR_FAIL. */
int jb_db_op_facts(PGconn *c, const char *job_id, long long op_id, json_t **out, jb_error *err);

#endif
