/* policy.h — approval rules on the op path and from the buyer (lib/policy.h the grammar and
 * the match, db/policy.h the store): the decision of a mutating op by the session's rules,
 * and the buyer's adding, listing and revoking of rules, shared by REST and Socket.IO — each
 * change announced as a jailbox:rule event (api/events.md) with its audit head. */
#ifndef JB_API_AGENT_POLICY_H
#define JB_API_AGENT_POLICY_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/core/reply.h"
#include "lib/err.h"

struct jb_app;

/* Adds the rules `in` (one rule object, or an array of them; borrowed) of `by` ("buyer", or
 * "service": the operator through the service token) to the end of session `job`'s list:
 * checked (lib/policy.h; a locked rule is refused), stored with their audit entries (`by`
 * recorded), announced. 201 with body {rules: [the rules as stored]}. */
void jb_policy_add(struct jb_app *app, PGconn *c, const char *job, const json_t *in, const char *by,
                   struct jb_reply *out);

/* The session's rules: live ones, or with `all` the revoked and expired too. 200 {rules}. */
void jb_policy_list(struct jb_app *app, PGconn *c, const char *job, bool all, struct jb_reply *out);

/* Revokes rule `rule_id` of `job` (a rule of the session's) for `by` ("buyer" or "service",
 * recorded and announced). 200 {ruleId, state: "revoked"}. */
void jb_policy_revoke(struct jb_app *app, PGconn *c, const char *job, const char *rule_id,
                      const char *by, struct jb_reply *out);

/* The rule "approve and allow similar" `key` makes of pending op `op_id` of `job` (new into
 * *rule), before the op is approved: 200; 404 no such op; 400 the key does not fit the op
 * (a file at the root for "directory", an interpreter for "command"…); 409 the op is not
 * pending. */
void jb_policy_similar(PGconn *c, const char *job, long long op_id, const char *key, json_t **rule,
                       struct jb_reply *out);

/* Approves pending op `op_id` of `job` (`reason` nullable) and adds `rule` (borrowed; made by
 * jb_policy_similar) in one transaction (db/policy.h jb_db_op_approve_similar), then announces
 * the audit head and the rule. JB_OK with *json (the op, new JSON text) and out->body the rule
 * as stored; JB_ERR_NOT_FOUND; JB_ERR_CONFLICT with `state` (op not pending, session ended),
 * or with out->status 409 and its message when the rule could not be added (nothing done);
 * JB_ERR_FAIL (logged). */
int jb_policy_approve_similar(struct jb_app *app, PGconn *c, const char *job, long long op_id,
                              const char *reason, const json_t *rule, char **json, char state[20],
                              struct jb_reply *out);

/* The id of one of `rules` (a JSON array of checked rules, borrowed) that an operator's rule
 * has (a buyer's rule cannot take it: decidedBy "rule:<id>" would name the wrong rule, and
 * the revoke would be refused as the operator's), or NULL. Borrowed from `rules`. */
const char *jb_policy_operator_id_in(const json_t *rules);

/* Loads the operator's rules from `path` (lib/policy.h jb_policy_file_parse; NULL or "": none;
 * at most 1 MiB): the locked ones decide before every session's rules, the others after them
 * (a buyer's rule overrides those). Once, before any op is decided. 0, or -1 with err->msg
 * "FILE:LINE: what is wrong". */
int jb_policy_operator_load(const char *path, jb_error *err);

/* Drops this process's copy of session `job`'s rules (api/core/policy.c): the rules changed
 * here, or an op's insert found them changed elsewhere. The next op reads them again. */
void jb_policy_rules_changed(const char *job);

#endif
