/* op_decide.h — the buyer's side of a session's ops: a page of them, a pending op approved
 * or rejected (a rejection with its audit entry), and how a decision that lost was made. */
#ifndef JB_DB_OP_DECIDE_H
#define JB_DB_OP_DECIDE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/audit.h"
#include "lib/err.h"

struct jb_keyring;

/* The SQL expression of op row `o` (ops o) as the buyer sees it (GET …/ops, the decided op):
 * {opId, jobId, tool, path, args (an exec's shown fields; other tools' as stored), state,
 * decision, reason, result, createdAt, decidedAt, completedAt, diff, decidedBy,
 * decisionReason}. */
#define JB_DB_OP_JSON                                                                        \
  "json_build_object('opId', o.op_id, 'jobId', o.job_id, 'tool', o.tool, 'path', o.path,"    \
  " 'args', CASE WHEN o.tool = 'exec' THEN jsonb_build_object('argv', o.args->'argv',"       \
  "   'command', o.args->'command', 'cwd', o.args->'cwd', 'envNames', (SELECT"               \
  "   coalesce(jsonb_agg(k ORDER BY k), '[]'::jsonb) FROM jsonb_object_keys(coalesce("       \
  "   o.args->'env', '{}'::jsonb)) k), 'env', CASE WHEN o.state = 'pending' THEN"            \
  "   o.args->'envShown' END, 'writable', o.args->'writable', 'timeoutMs',"                  \
  "   o.args->'timeoutMs', 'stdinBytes', coalesce(octet_length(o.args->>'stdin'),"           \
  "   (o.args->>'stdinBytes')::bigint)) || CASE WHEN o.args ? 'changeset' THEN"              \
  "   jsonb_build_object('changeset', o.args->'changeset') ELSE '{}'::jsonb END"             \
  "   ELSE o.args END, 'state', o.state, 'decision', o.decision, 'reason', o.reason,"        \
  " 'result', o.result, 'createdAt', jb_ts(o.created_at), 'decidedAt', jb_ts(o.decided_at)," \
  " 'completedAt', jb_ts(o.completed_at), 'diff', o.diff, 'decidedBy', o.decided_by,"        \
  " 'decisionReason', o.decision_reason)"

/* A page of ops as JSON text {"ops":[…],"next":opId|null} (new allocation): ops of `job_id`
 * with op_id > `after`, in op_id order, at most `limit`, only `state` when non-NULL. Each op
 * carries decidedBy ("rule:<id>", "buyer", "timeout", "mode"; null while undecided) and
 * decisionReason. JB_OK or JB_ERR_FAIL. */
/* jb_db_ops_list, only the ops decided by `decided_by` when non-NULL ("rule": by any rule). */
int jb_db_ops_list_by(PGconn *c, const char *job_id, const char *state, const char *decided_by,
                      long long after, int limit, char **json_out, jb_error *err);
int jb_db_ops_list(PGconn *c, const char *job_id, const char *state, long long after, int limit,
                   char **json_out, jb_error *err);

/* Decides a pending op: approve (true) or reject, with `reason` (nullable), by `by` ("buyer",
 * or "service": the operator's kill; a rejection's entry has decidedBy `by`). Exactly one of
 * two concurrent decisions succeeds. An approval is one committed UPDATE (the op's audit
 * entry is written when it executes); a rejection also appends its audit entry (the op's
 * tool, path and {decision: "rejected", ok: false}) in the same transaction, with the session
 * row locked first; *head (may be NULL) receives the new head, seq 0 when none was written. On JB_OK *json_out is the op as JSON text (new).
 * JB_ERR_NOT_FOUND (no such op in that session); JB_ERR_CONFLICT (op not pending, or the
 * session ended; `state` of 20 bytes receives the op's state); JB_ERR_FAIL. */
int jb_db_op_decide(PGconn *c, const struct jb_keyring *keys, const char *job_id, long long op_id,
                    bool approve, const char *reason, const char *by, char **json_out,
                    char state[20], struct jb_audit_head *head, jb_error *err);

/* Why a decision of op `op_id` of `job_id` found nothing to update: JB_ERR_CONFLICT with the
 * op's state in `state` (20 bytes; the session's state when the op is still pending: its
 * session ended), JB_ERR_NOT_FOUND when there is no such op, or JB_ERR_FAIL. */
int jb_db_op_undecided(PGconn *c, const char *job_id, long long op_id, char state[20],
                       jb_error *err);

/* For a decision that lost (jb_db_op_decide's JB_ERR_CONFLICT): when op `op_id` of `job_id`
 * is no longer pending, says how it was decided into `how` (`len` bytes), e.g. "op 7 was
 * decided already: approved by buyer at 2026-12-03 12:00:00.123+00 (reason \"ok\")", and its
 * state into `state` (20 bytes). JB_OK; JB_ERR_NOT_FOUND when there is no such op or it is
 * still pending (its session ended); JB_ERR_FAIL. */
int jb_db_op_decided_how(PGconn *c, const char *job_id, long long op_id, char *how, size_t len,
                         char state[20], jb_error *err);

#endif
