/* sessions.h — storage of sessions, their ops and agents; the session state machine is
 * enforced here, in the database: a transition is one UPDATE … WHERE state = ANY(from). */
#ifndef JB_DB_SESSIONS_H
#define JB_DB_SESSIONS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

#include "db/op_decide.h" /* the ops of a session: listed and decided */
#include "lib/audit.h"
#include "lib/err.h"

struct jb_keyring;

/* States of design.md's lifecycle, as stored. */
#define JB_LIVE_STATES "created", "prescanning", "awaiting_agent", "active", "paused", "done"
bool jb_state_is_live(const char *state);
bool jb_state_is_known(const char *state);

/* The same states, for the code that decides on them; stored and sent as their names. The
 * live states come first, in JB_LIVE_STATES order, then the end states. */
enum jb_session_state {
  JB_SESSION_UNKNOWN = -1, /* no name, or a name that is none of these */
  JB_SESSION_CREATED,
  JB_SESSION_PRESCANNING,
  JB_SESSION_AWAITING_AGENT,
  JB_SESSION_ACTIVE,
  JB_SESSION_PAUSED,
  JB_SESSION_DONE,
  JB_SESSION_ACCEPTED,
  JB_SESSION_ABORTED,
  JB_SESSION_FAILED,
};

/* The stored name of `state` ("awaiting_agent"; static), or NULL for JB_SESSION_UNKNOWN and
 * any value outside the enum. */
const char *jb_session_state_name(enum jb_session_state state);

/* The state named `name` (nullable; compared exactly, as stored), or JB_SESSION_UNKNOWN. */
enum jb_session_state jb_session_state_from_name(const char *name);

/* The modes of a session (migration 001's sessions.mode), for the code that decides on them:
 * a supervised session's writes wait for the buyer. */
enum jb_session_mode {
  JB_MODE_SUPERVISED,
  JB_MODE_UNSUPERVISED,
};

/* The stored name of `mode` ("supervised"; static), or NULL for a value outside the enum. */
const char *jb_session_mode_name(enum jb_session_mode mode);

/* Whether a session's sandbox can run commands, as its contract (walls.exec.available, written
 * by the worker at launch: sandbox/proto/PROTOCOL.md) says. */
enum jb_session_exec {
  JB_EXEC_UNKNOWN = 0, /* no contract yet (the session is being launched), or one without it */
  JB_EXEC_AVAILABLE,
  JB_EXEC_UNAVAILABLE, /* the image has no spawner, or it did not come up: exec_reason says */
};

/* What the op path decides an agent's tool call on, from the session's row. The struct owns
 * every pointer in it: jb_session_facts_clear frees them. */
struct jb_session_facts {
  enum jb_session_state state;
  enum jb_session_mode mode;
  char *worker; /* the worker its walls contract names (walls.worker); NULL when none */
  json_t *exclude; /* the exclusion globs as stored (a JSON array of strings) */
  json_t *flagged; /* the pre-scan's [{path, kind}] as stored (walls.prescan.flagged); NULL
                    * when the contract has none */
  char *effects_incomplete; /* why a writable command's effects were not checked whole
                               (migration 041); NULL: nothing for the buyer to decide */
  enum jb_session_exec exec; /* the contract's exec.available */
  char *exec_reason; /* why exec is unavailable (walls.exec.reason, at most 300 bytes); NULL
                      * when the contract gives none */
  char *state_reason; /* why the session is in its state (at most 300 bytes); NULL: none */
};

/* Reads what the op path decides on of session `job_id` into *out (overwritten: it must own
 * nothing; empty, as jb_session_facts_clear leaves it, on any failure; clear it after use) in
 * one query that selects only that.
 * JB_OK, JB_ERR_NOT_FOUND, JB_ERR_FAIL with `err`. */
int jb_db_session_facts(PGconn *c, const char *job_id, struct jb_session_facts *out, jb_error *err);

/* Records that a writable command of session `job_id` left effects that were not checked whole,
 * for `why` (at most 300 bytes kept; an earlier reason stays), and wakes the op path's copies
 * of the session (jb_op "0 effects JOB"). JB_OK, JB_ERR_FAIL with `err`. */
int jb_db_session_effects_incomplete(PGconn *c, const char *job_id, const char *why, jb_error *err);

/* Why session `job_id`'s writable commands are held (migration 041) into `why` (`wsize`
 * bytes; "" when they are not). JB_OK, JB_ERR_NOT_FOUND, JB_ERR_FAIL with `err`. */
int jb_db_session_effects_held(PGconn *c, const char *job_id, char *why, size_t wsize,
                               jb_error *err);

/* The buyer's decision on incomplete effects: clears the hold of a live session and appends
 * its audit entry (operation "effects_clear", details {was, actor: "buyer", reason?}) in one
 * transaction. `reason` may be NULL. *cleared tells whether there was a hold (no entry when
 * there was none). JB_OK (*head set when cleared), JB_ERR_NOT_FOUND, JB_ERR_CONFLICT (ended:
 * `state` holds its state), JB_ERR_FAIL with `err`. */
int jb_db_session_effects_clear(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                                const char *reason, bool *cleared, char state[20],
                                struct jb_audit_head *head, jb_error *err);

/* What an op reviewer is told of session `job_id` (new into *out): {jobId, mode, image,
 * agentId, state}. JB_OK, JB_ERR_NOT_FOUND, JB_ERR_FAIL with `err`. */
int jb_db_session_context(PGconn *c, const char *job_id, json_t **out, jb_error *err);

/* Copies `src` into *dst (overwritten: it must own nothing): its own strings and deep copies of the JSON values,
 * so that neither shares anything with the other and each may be used on its own thread.
 * JB_OK, or JB_ERR_FAIL (out of memory; *dst is left empty). */
int jb_session_facts_copy(struct jb_session_facts *dst, const struct jb_session_facts *src,
                          jb_error *err);

/* Frees what `f` owns and leaves it empty (state JB_SESSION_UNKNOWN); NULL is allowed. */
void jb_session_facts_clear(struct jb_session_facts *f);
#define cleanup_session_facts __attribute__((cleanup(jb_session_facts_clear)))

struct jb_session_new {
  const char *job_id, *agent_id, *workspace, *mode;
  const char *exclude_json; /* JSON array text */
  const char *limits_json; /* JSON object text */
  const char *image; /* the sandbox image, canonical (lib/images.h) */
  const unsigned char *buyer_hash, *agent_hash; /* SHA-256 of the two tokens, 32 bytes each */
  const json_t *rules; /* the buyer's approval rules at open (normalized, lib/policy.h), or
                        * NULL: stored with a rule_add audit entry each (db/policy.h) */
};

/* Creates the session (state created), its agent row when new, its buyer and agent tokens,
 * a queued launch job and the first audit entry (operation "state", to created, with the
 * mode and the image), in one transaction. A live session whose workspace is the same
 * directory, or one above or below it, makes the open fail with JB_ERR_CONFLICT (one agent
 * per tree at a time).
 * JB_OK (*head: the chain head), JB_ERR_EXISTS when job_id is taken, JB_ERR_CONFLICT,
 * JB_ERR_FAIL with `err`. */
int jb_db_session_create(PGconn *c, const struct jb_keyring *keys, const struct jb_session_new *s,
                         struct jb_audit_head *head, jb_error *err);

/* The API view of a session as JSON text (new allocation, free it): jobId, agentId,
 * workspace, mode, state, stateReason, exclude, limits, image (null: stored without one, rows
 * older than migration 020), createdAt, updatedAt, endedAt,
 * pendingOps, auditHead {seq, hash}, walls. JB_OK, JB_ERR_NOT_FOUND, JB_ERR_FAIL. */
int jb_db_session_get(PGconn *c, const char *job_id, char **json_out, jb_error *err);

/* The newest `limit` sessions as a JSON array text (new allocation, free it) of {jobId,
 * agentId, state, mode, createdAt}, newest first. JB_OK or JB_ERR_FAIL. */
int jb_db_session_list(PGconn *c, long limit, char **json_out, jb_error *err);

/* As jb_db_session_get, and also the SHA-256 hashes of the session's unrevoked buyer tokens
 * without an expiry (console sign-ins, which expire, are checked in the database every time)
 * (new array of *n_readers * 32 bytes in *readers, NULL when none; free it), for the read
 * cache — none once the session ended: those tokens' reads expire (db/tokens.h), so each is
 * checked against the database. */
int jb_db_session_get_with_readers(PGconn *c, const char *job_id, char **json_out,
                                   unsigned char **readers, size_t *n_readers, jb_error *err);

/* The SHA-256 hashes of all unrevoked service tokens: new array of *n * 32 bytes in *out
 * (NULL when none). JB_OK or JB_ERR_FAIL. */
int jb_db_service_token_hashes(PGconn *c, unsigned char **out, size_t *n, jb_error *err);

/* The state of session `job_id` into `state` (20 bytes). JB_OK, JB_ERR_NOT_FOUND, FAIL. */
int jb_db_session_state(PGconn *c, const char *job_id, char state[20], jb_error *err);

struct jb_transition {
  char previous[20]; /* the state before */
  char state[20]; /* the state after; on JB_ERR_CONFLICT the current state */
  char actor[16]; /* on JB_ERR_CONFLICT: who paused the session ("" none recorded) */
  bool rollback_running; /* on JB_ERR_CONFLICT: a rollback of it is queued or claimed */
  long rejected_ops; /* pending ops rejected because the session ended */
  struct jb_audit_head head; /* the audit chain head after it (the seal when it ended) */
};

/* Moves `job_id` from one of the NULL-terminated `from` states to `to`, with `reason`
 * (nullable) and `actor` ("buyer", "service" — the operator —, "agent", "system") recorded;
 * a pause keeps its actor (sessions.paused_by) and is lifted ("paused" → "active") only by
 * that actor (JB_ERR_CONFLICT, out->actor saying who paused); nor to "active" or "accepted"
 * while a rollback of the session is queued or claimed (JB_ERR_CONFLICT,
 * out->rollback_running: a resume would let the agent write under it, an accept drop the
 * pre-images it reads). Entering an end
 * state (accepted, aborted, failed) also sets ended_at, rejects pending ops, revokes the
 * session's agent tokens (its buyer tokens stay, for reading: db/tokens.h), queues a teardown
 * job and seals the audit chain. The change itself is an audit entry — operation "pause",
 * "resume", "abort", "accept" for those changes, "state" for the others; details {from, to,
 * actor, reason} — all in the same transaction. `keys` must not be NULL.
 * JB_OK; JB_ERR_NOT_FOUND; JB_ERR_CONFLICT with out->state = the current state; JB_ERR_FAIL. */
int jb_db_session_transition(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                             const char *const from[], const char *to, const char *reason,
                             const char *actor, struct jb_transition *out, jb_error *err);

/* For a session that is ending (to = "accepted", "aborted" or "failed") because of `reason`
 * (may be NULL), inside the caller's transaction with the session row locked: rejects its
 * pending ops (reason "session <to>"), fails its approved ops that have not run with result
 * {ok:false, error:{code:"aborted", message}}, and fails the execs still running (their
 * worker's completion then finds them failed and stores nothing) with result {ok:false,
 * error:{code:"aborted", message}}, reason "session <to> while the command ran: <reason>",
 * and for each an audit entry `exec {opId, decision:"approved", ok:false, error:"aborted",
 * reason}` signed with `keys` (the command's outcome is not known: the session and its
 * sandbox are going). *rejected and *failed (each may be NULL) receive the counts (failed:
 * queued and running). JB_OK or JB_ERR_FAIL. */
int jb_db_session_end_ops(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                          const char *to, const char *reason, long *rejected, long *failed,
                          jb_error *err);

/* Sets the mode of a live session and records the change in the audit chain (operation
 * "mode", details {from, to, actor: "buyer"}; nothing is written when the mode is already
 * `mode`) in one transaction. *head receives the new head (seq 0 when nothing was written).
 * JB_OK, JB_ERR_NOT_FOUND, JB_ERR_CONFLICT (ended; `state` of 20 bytes receives it),
 * JB_ERR_FAIL. */
int jb_db_session_set_mode(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                           const char *mode, char state[20], struct jb_audit_head *head,
                           jb_error *err);

/* The agent's trust score and history as JSON text (new). JB_OK, JB_ERR_NOT_FOUND, FAIL. */
int jb_db_agent_get(PGconn *c, const char *agent_id, char **json_out, jb_error *err);

#endif
