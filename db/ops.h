/* ops.h — storage of a session's file operations on their way through: jailboxd
 * stores each checked op (queued at once, or pending the buyer's approval), the worker that
 * holds the session claims queued ops (FOR UPDATE SKIP LOCKED), runs them in the shim and
 * completes them with their audit entry in the same transaction; jailboxd reads the outcome.
 * The row is the hand-over between processes, so any jailboxd instance can take the agent's
 * call and any worker host can hold the session. Wake-ups ride on the same commits: channel
 * jb_op (migration 009) carries "<op id> <state> <job id>" when an op is queued (approved)
 * or finished (done, failed, rejected), and "0 <state> <job id>" when its session changes
 * state — the worker wakes on the first kind, the waiting call (server/opwait.h) on the
 * second. A notification is sent only if its transaction commits, so it never announces a
 * row that is not there; a lost one only delays (both sides re-read on a slow timer). */
#ifndef JB_DB_OPS_H
#define JB_DB_OPS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

#include "db/op_state.h"
#include "lib/audit.h"
#include "lib/err.h"

struct jb_keyring;

/* Stores an op of session `job_id`: `tool` (read, write, list), `path`, `args_json` (JSON
 * object text: the shim's arguments plus, for writes, "size" and "sha256"). With `pending`
 * the op waits for the buyer (state pending); without, it is queued at once (state approved,
 * decision auto). Only while the session is active or paused (a paused session's ops wait),
 * and, with `expect_json` (JSON object text {mode, exclude, flagged}; NULL: no check), only
 * while the session's mode, exclusions and pre-scan flags are those (the caller decided on a
 * copy of the session; this makes the decision and the insert one atomic step).
 * JB_OK with *op_id; JB_ERR_CONFLICT with `state` (20 bytes) = the session's state, or ""
 * when `expect_json` no longer holds (read the session again); JB_ERR_NOT_FOUND; JB_ERR_FAIL. */
int jb_db_op_create(PGconn *c, const char *job_id, const char *tool, const char *path,
                    const char *args_json, bool pending, const char *expect_json, long long *op_id,
                    char state[20], jb_error *err);

/* As jb_db_op_create, with who decided the op: `decided_by` ("rule:<id>"; NULL: the
 * session's mode, or the buyer when the op is pending) and `reason` (nullable) stored in the
 * row (migration 023) and, when the op runs, in its audit entry (decidedBy, reason).
 * `rules_version` >= 0: the version of the session's rules (migration 024) the op was decided
 * on; the insert holds the session row FOR KEY SHARE (a rule change waits for it, or it waits
 * for the change and reads what the change left) and stores nothing when the version is
 * another: JB_ERR_CONFLICT with `state` "" and *rules_stale (nullable) true — decide again on
 * the rules as they are. -1: no check, no lock. `diff_json` (nullable): a pending op's diff
 * preview (JSON text, lib/diff.h; `diff` in GET …/ops, migration 010), stored by the
 * same insert so that the op is never seen pending without it. */
int jb_db_op_create_decided(PGconn *c, const char *job_id, const char *tool, const char *path,
                            const char *args_json, bool pending, const char *expect_json,
                            const char *decided_by, const char *reason, long long rules_version,
                            const char *diff_json, bool *rules_stale, long long *op_id,
                            char state[20], jb_error *err);

/* The outcome so far of op `op_id` of `job_id`: its state and the session's (20 bytes each),
 * its result (JSON text, new, NULL while none) and reason (new, NULL when none). A finished
 * read's or stat's file content is dropped from the stored result by the same statement (it
 * is delivered from this answer; the audit chain keeps its size or hash), and a finished
 * exec's stdout and stderr are cut to their first 4 KiB (stdoutStored/stderrStored say so;
 * their SHA-256 and byte counts stay). JB_OK, JB_ERR_NOT_FOUND,
 * JB_ERR_FAIL. */
int jb_db_op_poll(PGconn *c, const char *job_id, long long op_id, char op_state[20],
                  char sess_state[20], char **result_json, char **reason, jb_error *err);

/* Whether session `job_id` has an op running now (*busy): its sandbox runs one command at a
 * time, so an op queued behind it is not late. JB_OK or JB_ERR_FAIL. */
int jb_db_session_busy(PGconn *c, const char *job_id, bool *busy, jb_error *err);

/* Clears the diff previews (ops.diff) of at most `max_ops` ops of sessions that ended more
 * than `retention_s` seconds ago (sessions.ended_at), in one statement; *cleared (may be
 * NULL) receives how many. The op rows and their audit entries stay. JB_OK or JB_ERR_FAIL. */
int jb_db_ops_forget_previews(PGconn *c, long retention_s, int max_ops, long long *cleared,
                              jb_error *err);

/* Names op `op_id` of `job_id` by `task_id` (an MCP task's id, migration 021; at most 64
 * bytes, unguessable: the caller draws it at random). JB_OK; JB_ERR_NOT_FOUND (no such op in
 * that session); JB_ERR_FAIL (also when the id is already taken). */
int jb_db_op_set_task(PGconn *c, const char *job_id, long long op_id, const char *task_id,
                      jb_error *err);

/* The op of `job_id` that task `task_id` names: *op_id, its tool and path (new; path NULL when
 * none), a move's destination and the op's diff preview as JSON text (new; NULL when none),
 * and its times as ISO 8601 UTC with milliseconds (`created`, and `updated` = the latest
 * of its creation, decision and completion; 32 bytes each). JB_OK; JB_ERR_NOT_FOUND (no such
 * task in that session: another session's task is not found either); JB_ERR_FAIL. */
struct jb_op_task_row {
  long long op_id;
  char *tool, *path, *destination, *diff; /* owned (jb_op_task_row_clear); may be NULL */
  char created[32], updated[32];
};
int jb_db_op_task(PGconn *c, const char *job_id, const char *task_id, struct jb_op_task_row *out,
                  jb_error *err);
void jb_op_task_row_clear(struct jb_op_task_row *row);

/* Op `op_id` of `job_id` as the whole-diff route reads it (api/core/ops.h jb_op_full_diff):
 * its tool (24 bytes), its state and its session's (20 bytes each), its path (new; "" when
 * none) and, only while it is pending, its arguments as JSON text (new; NULL otherwise: the
 * content of an op with an outcome is dropped, migration 030). JB_OK; JB_ERR_NOT_FOUND (no
 * such op in that session); JB_ERR_FAIL. Clear with jb_op_args_row_clear. */
struct jb_op_args_row {
  char tool[24], state[20], session_state[20];
  char *path, *args;
};
int jb_db_op_pending_args(PGconn *c, const char *job_id, long long op_id,
                          struct jb_op_args_row *out, jb_error *err);
void jb_op_args_row_clear(struct jb_op_args_row *row);

/* An op claimed by the worker. Strings are owned (jb_op_claim_free). */
struct jb_op_claim {
  long long op_id;
  char tool[16];
  char *path;
  char *args_json;
  char decision[16];
  char decided_by[80]; /* "rule:<id>", "buyer", "mode"; "" when not recorded */
  char *decision_reason; /* owned; NULL when none */
};
void jb_op_claim_free(struct jb_op_claim *o);

/* Worker: begins a transaction and locks the oldest queued op of `job_id` whose session is
 * active (first the session row FOR UPDATE, waited for — the lock order of every chain
 * writer — when the session has a queued op, then the op FOR UPDATE SKIP LOCKED). JB_OK with
 * *out filled and the transaction left open for jb_db_op_complete; JB_ERR_NOT_FOUND (nothing
 * to run; no transaction open); JB_ERR_FAIL. */
int jb_db_op_claim(PGconn *c, const char *job_id, struct jb_op_claim *out, jb_error *err);

/* Worker, for an op jailboxd hands over directly (sandbox/proto/direct.h) instead of queuing it:
 * begins a transaction, locks the session row, and inserts the op (`tool`, `path`,
 * `args_json` as jb_db_op_create) as already claimed by this transaction — only while the
 * session is active with no op queued before it (an op never overtakes one queued earlier in
 * its session) and, with `expect_json`, its mode, exclusions and flags are those. No jb_op
 * wake-up is sent for it (nobody waits on the row). JB_OK with *op_id and the transaction
 * left open for jb_db_op_complete; otherwise rolled back: JB_ERR_CONFLICT with `state` (20
 * bytes) = the session's state (not active: paused, ended…), "queued" when an op queued
 * before it waits, or "" when `expect_json` no longer holds; JB_ERR_NOT_FOUND; JB_ERR_FAIL. */
int jb_db_op_direct_begin(PGconn *c, const char *job_id, const char *tool, const char *path,
                          const char *args_json, const char *expect_json, long long *op_id,
                          char state[20], jb_error *err);

/* Worker, for an op that changes nothing (read, read_many, list, find, search, stat) handed
 * over directly that has already run in the shim, on the audit head `head`/`prev` (jb_audit_head_peek) this
 * process knew before the op ran: in one round trip, locks the session row, stores the op
 * done (`ok`) or failed with `result_json` (as jb_db_op_direct_begin would insert it, args
 * `args_json`, checked against `expect_json`), appends its audit entry (operation = `tool`,
 * `path` or none when "", `details` borrowed) on that head and commits (the new head is not
 * announced: the caller does that after answering, db/events.h jb_db_announce_audit_head) —
 * only if at that moment the session is active, unchanged,
 * has no op queued, and the head is still `head`. The head not having moved means no other
 * op of the session was committed since the op ran, nor was one running then (ops that change
 * files hold the session row from before they run until they commit): the chain's order is
 * the order in which the ops saw the files. JB_OK with *op_id and *out (the new head);
 * JB_ERR_CONFLICT when any condition failed or the database refused (`err` says which;
 * nothing is stored, the transaction is rolled back: run the op again the locked way,
 * jb_db_op_direct_begin); JB_ERR_FAIL (bad arguments, out of memory). */
int jb_db_op_direct_store(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                          const char *tool, const char *path, const char *args_json,
                          const char *expect_json, bool ok, const char *result_json,
                          json_t *details, long long head,
                          const unsigned char prev[JB_AUDIT_HASH_LEN], long long *op_id,
                          struct jb_audit_head *out, jb_error *err);

/* Worker: completes the claimed op — state done (`ok`) or failed, `result_json` stored —
 * appends its audit entry (operation = the tool, `path`, `details` borrowed, with the op's
 * decidedBy and reason added when the claim has them) and commits; the
 * caller publishes the new head (JB_EVENT_AUDIT_HEAD, db/events.h) once this returns.
 * On any failure the transaction is rolled back (the op stays queued). *head receives the new
 * audit head. JB_OK or JB_ERR_FAIL / JB_ERR_CONFLICT (chain sealed). */
int jb_db_op_complete(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                      const struct jb_op_claim *op, bool ok, const char *result_json,
                      json_t *details, struct jb_audit_head *head, jb_error *err);

/* Fails pending op `op_id` of `job_id` when it has waited at least `timeout_s` seconds for
 * the buyer (JAILBOX_APPROVAL_TIMEOUT): state failed, result {ok:false, error:{code:
 * "timeout"}}, and its audit entry (operation: the op's tool) {ok:false, error:"timeout", decision:"timeout",
 * size, sha256} in the same transaction (session row locked first, as every chain writer).
 * JB_OK with *head the new audit head and *op_out the op as it is now {opId, jobId, tool,
 * path, state, reason, result} (new; NULL on OOM); JB_ERR_CONFLICT when the op is no longer
 * pending or not that old (decided meanwhile: nothing changed); JB_ERR_FAIL with `err`. */
int jb_db_op_expire(PGconn *c, const struct jb_keyring *keys, const char *job_id, long long op_id,
                    long timeout_s, struct jb_audit_head *head, json_t **op_out, jb_error *err);

/* Worker, for a claimed exec (jb_db_op_claim's transaction open on `c`): marks it running and
 * commits, so that no session row is held while its command runs. JB_OK or JB_ERR_FAIL
 * (rolled back: the op stays queued). */
int jb_db_op_mark_running(PGconn *c, const struct jb_op_claim *op, jb_error *err);

/* Worker, at the re-adoption of session `job_id`: the ids of its ops marked running (execs an
 * earlier run of the worker started), oldest first, at most `max` into `ids`, *n of them.
 * JB_OK or JB_ERR_FAIL. */
int jb_db_ops_running(PGconn *c, const char *job_id, long long *ids, size_t max, size_t *n,
                      jb_error *err);

/* Worker: completes running exec `op` as jb_db_op_complete does (outcome, audit entry,
 * commit) in a transaction of its own that takes the session row first; `changes_json`
 * (nullable: none) is stored in ops.changes (a writable command's change list, migration
 * 042). JB_ERR_CONFLICT (and nothing stored) when the op is no longer running — its session
 * ended meanwhile (jb_db_session_end_ops failed it) — or the chain is sealed; JB_OK;
 * JB_ERR_FAIL (rolled back: the op is still running). */
int jb_db_op_complete_running(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                              const struct jb_op_claim *op, bool ok, const char *result_json,
                              const char *changes_json, json_t *details, struct jb_audit_head *head,
                              jb_error *err);

/* Worker, after the commit of queued or running op `op`'s outcome failed (rolled back): fails
 * it with `result_json` and the audit entry `details` (small: they must fit whatever made the
 * first commit fail) as jb_db_op_complete_running does, whether it is back to approved (a
 * queued op's claim rolled back) or running. JB_ERR_CONFLICT (nothing stored) when it is in
 * neither state — it was stored after all, or its session ended —; JB_OK; JB_ERR_FAIL. */
int jb_db_op_fail_unstored(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                           const struct jb_op_claim *op, const char *result_json, json_t *details,
                           struct jb_audit_head *head, jb_error *err);

/* Seconds a running op may outlive its command's timeout (args.timeoutMs after started_at)
 * before it is overdue: the worker's commit of its outcome has failed or is stuck. */
#define JB_OP_RUNNING_GRACE_S 15

/* SQL condition: op row `o` (a table alias) is past started_at (else decided_at, created_at)
 * + its args.timeoutMs (else 600 s) + `grace` seconds (an SQL bigint expression). */
#define JB_DB_OP_OVERDUE(o, grace)                          \
  "now() > coalesce(" o ".started_at, " o ".decided_at, " o \
  ".created_at) + make_interval("                           \
  "secs => (coalesce((" o ".args->>'timeoutMs')::bigint, 600000) / 1000.0 + " grace ")::float8)"

/* A running op: its session and id. */
struct jb_op_ref {
  char job[129];
  long long op_id;
};

/* Worker: the running ops of every session that are overdue (JB_DB_OP_OVERDUE with `grace_s`
 * seconds), oldest first, at most `max` into `out`, *n of them (the caller keeps those of its
 * own sessions). JB_OK or JB_ERR_FAIL. */
int jb_db_ops_overdue(PGconn *c, long grace_s, struct jb_op_ref *out, size_t max, size_t *n,
                      jb_error *err);

/* What jb_db_op_kill did. */
enum jb_op_kill_outcome {
  JB_KILL_REJECTED, /* it was pending: rejected (as jb_db_op_decide), *op_json the op */
  JB_KILL_FAILED, /* it was queued, not started: failed {code:"killed"} with its audit entry */
  JB_KILL_SIGNALLED, /* it is running: the worker running it was told (NOTIFY jb_exec) */
};

/* The kill of exec op `op_id` of `job_id` by `by` ("buyer", or "service": the operator;
 * `reason` nullable, else "killed by the buyer" / "… the operator"), recorded as theirs: a
 * pending op's rejection has decidedBy `by`, a queued one's entry killedBy. JB_OK with *outcome,
 * *op_json (new JSON text of the op as OP_JSON shows it; NULL for JB_KILL_SIGNALLED) and
 * *head (the new audit head; seq 0 when none was written); JB_ERR_NOT_FOUND (no such op);
 * JB_ERR_CONFLICT with `state` (20 bytes) the op's state (it is not an exec, or it ended) or
 * the session's (it ended); JB_ERR_FAIL. */
int jb_db_op_kill(PGconn *c, const struct jb_keyring *keys, const char *job_id, long long op_id,
                  const char *reason, const char *by, enum jb_op_kill_outcome *outcome,
                  char **op_json, char state[20], struct jb_audit_head *head, jb_error *err);

/* NOTIFY jb_exec "<op id> <what> <job id>" (`what`: kill, stop, cont) for the worker that runs
 * exec op `op_id` (0: whatever exec of the session runs). JB_OK or JB_ERR_FAIL. */
int jb_db_exec_notice(PGconn *c, const char *job_id, long long op_id, const char *what,
                      jb_error *err);

/* Parses a jb_op notification payload "<op id> <state> <job id>" (migration 009): *op_id
 * (0: the session's state changed to `state`), `state` (20 bytes), *job (points into
 * `payload`). Returns 0, or -1 when malformed. */
int jb_op_notice_parse(const char *payload, long long *op_id, char state[20], const char **job);

#endif
