/* ops.h — storage of a session's file operations on their way through (issue 7): jailboxd
 * stores each checked op (queued at once, or pending the buyer's approval), the worker that
 * holds the session claims queued ops (FOR UPDATE SKIP LOCKED), runs them in the shim and
 * completes them with their audit entry in the same transaction; jailboxd reads the outcome.
 * The row is the hand-over between processes, so any jailboxd instance can take the agent's
 * call and any worker host can hold the session; the change notification on jb_change
 * (migration 004) wakes the worker. */
#ifndef JB_DB_OPS_H
#define JB_DB_OPS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

#include "server/audit.h"
#include "server/err.h"

struct jb_keyring;

/* Stores an op of session `job_id`: `tool` (read, write, list), `path`, `args_json` (JSON
 * object text: the shim's arguments plus, for writes, "size" and "sha256"). With `pending`
 * the op waits for the buyer (state pending); without, it is queued at once (state approved,
 * decision auto). Only while the session is active or paused (a paused session's ops wait).
 * JB_OK with *op_id; JB_ERR_CONFLICT with `state` (20 bytes) = the session's state;
 * JB_ERR_NOT_FOUND; JB_ERR_FAIL. */
int jb_db_op_create(PGconn *c, const char *job_id, const char *tool, const char *path,
                    const char *args_json, bool pending, long long *op_id, char state[20],
                    jb_error *err);

/* The outcome so far of op `op_id` of `job_id`: its state and the session's (20 bytes each),
 * its result (JSON text, new, NULL while none) and reason (new, NULL when none). JB_OK,
 * JB_ERR_NOT_FOUND, JB_ERR_FAIL. */
int jb_db_op_poll(PGconn *c, const char *job_id, long long op_id, char op_state[20],
                  char sess_state[20], char **result_json, char **reason, jb_error *err);

/* Drops the file content from a finished read's or stat's stored result (it was delivered;
 * the audit chain keeps its size or hash). JB_OK or JB_ERR_FAIL. */
int jb_db_op_forget_content(PGconn *c, long long op_id, jb_error *err);

/* Stores the diff preview of op `op_id` (api/diff.h; borrowed; NULL or JSON null: none) —
 * shown as `diff` in GET …/ops (migration 010). JB_OK or JB_ERR_FAIL. */
int jb_db_op_set_diff(PGconn *c, long long op_id, const json_t *diff, jb_error *err);

/* An op claimed by the worker. Strings are owned (jb_op_claim_free). */
struct jb_op_claim {
  long long op_id;
  char tool[16];
  char *path;
  char *args_json;
  char decision[16];
};
void jb_op_claim_free(struct jb_op_claim *o);

/* Worker: begins a transaction and locks the oldest queued op of `job_id` whose session is
 * active (FOR UPDATE SKIP LOCKED). JB_OK with *out filled and the transaction left open for
 * jb_db_op_complete; JB_ERR_NOT_FOUND (nothing to run; no transaction open); JB_ERR_FAIL. */
int jb_db_op_claim(PGconn *c, const char *job_id, struct jb_op_claim *out, jb_error *err);

/* Worker: completes the claimed op — state done (`ok`) or failed, `result_json` stored —
 * appends its audit entry (operation = the tool, `path`, `details` borrowed) and commits.
 * On any failure the transaction is rolled back (the op stays queued). *head receives the new
 * audit head. JB_OK or JB_ERR_FAIL / JB_ERR_CONFLICT (chain sealed). */
int jb_db_op_complete(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                      const struct jb_op_claim *op, bool ok, const char *result_json,
                      json_t *details, struct jb_audit_head *head, jb_error *err);

#endif
