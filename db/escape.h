/* escape.h — storage of how security signals end or mark a session: the abort of
 * an escape (state, audit entry, alert, trust score: one transaction), its completion after
 * the sandbox is gone (ops ended, chain sealed, its events handed back: a second one), alerts of
 * signals that only count, and the sweeps jailboxd makes for expired sessions and for ended
 * sessions left unsealed by a crash between those two transactions. */
#ifndef JB_DB_ESCAPE_H
#define JB_DB_ESCAPE_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "db/events.h"
#include "lib/audit.h"
#include "lib/err.h"

struct jb_keyring;

#define JB_ALERT_DETAIL_MAX 512 /* bytes of an alert's detail kept (cut at a UTF-8 boundary) */

struct jb_escape_out {
  char previous[20]; /* the state the escape ended */
  long long seq; /* the audit entry that records it (operation "abort") */
  long long alert_id; /* its security_alerts row */
  long trust_score; /* the agent's score after the penalty */
};

/* Step 1 of an escape abort, one transaction: moves live session `job_id` to aborted with
 * reason "escape_detected" (ended_at set, agent tokens revoked, a teardown job queued), appends the
 * audit entry (operation "abort", details {from, to, actor: "system", reason, kind, detail}),
 * records the security alert (escape = true, seq of that entry), lowers the agent's trust
 * score by `penalty` (not below 0) and adds {kind: "escape_detected", scoreDelta: -penalty,
 * detail: {kind, detail, seq}} to its history, and marks the chain as waiting for its seal
 * (seals_pending). Pending ops are left for step 2
 * (jb_db_session_finish), after the container is gone; nothing can decide or run them
 * meanwhile (the session is no longer live). `detail` is cut to JB_ALERT_DETAIL_MAX bytes.
 * JB_OK; JB_ERR_CONFLICT (the session had ended already: nothing recorded; out->previous =
 * its state); JB_ERR_NOT_FOUND; JB_ERR_FAIL. */
int jb_db_escape_abort(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                       const char *kind, const char *detail, long penalty,
                       struct jb_escape_out *out, jb_error *err);

struct jb_finish_out {
  long rejected_ops, failed_ops;
  bool sealed_now; /* false when the chain was sealed already, or its seal waits */
  bool rollback_pending; /* the seal waits for a rollback on escape (db/escape_rollback.h) */
  struct jb_audit_head head; /* the seal */
  struct jb_event_list events; /* to publish once committed (jb_event_list_clear after) */
};

/* Step 2, one transaction, for a session step 1 ended (its seals_pending row, taken here;
 * without one nothing is done: a chain is never sealed after the fact otherwise — a deleted
 * seal is tampering for the verifier to find): rejects its pending ops, fails its queued
 * ones ("aborted"), seals the chain when it is not sealed, and hands back in out->events the
 * session events it made, in this order: JB_EVENT_STATE (the end state and reason;
 * `previous` may be NULL), JB_EVENT_SECURITY_ALERT {jobId, kind, detail, seq, escape} for each
 * escape alert of the session (at most 20), and JB_EVENT_AUDIT_HEAD (the seal). While the
 * rollback on escape named by its seals_pending row runs, within its time, nothing is done
 * (out->rollback_pending: its worker seals after it); past its time it is recorded as failed
 * and the chain sealed (jb_db_escape_rollback_gate). JB_OK (also when already sealed or
 * waiting: then out->events is empty); JB_ERR_CONFLICT (still live);
 * JB_ERR_NOT_FOUND; JB_ERR_FAIL (out->events empty). */
int jb_db_session_finish(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                         const char *previous, struct jb_finish_out *out, jb_error *err);

struct jb_count_out {
  long long count; /* occurrences of this kind in the session so far, this one included */
  bool alerted; /* this one raised an alert */
  long long seq; /* its audit entry (operation "security_alert") when alerted */
  struct jb_event_list events; /* to publish once committed (jb_event_list_clear after) */
};

/* A signal that does not abort: counts it for (`job_id`, `kind`) and, at every `every`-th
 * occurrence, records a security alert (escape = false), its audit entry (operation
 * "security_alert", details {kind, detail, count}), an entry of the agent's history
 * (scoreDelta 0) — one transaction — and hands back in out->events JB_EVENT_SECURITY_ALERT
 * {jobId, kind, detail, seq, escape: false, count} and JB_EVENT_AUDIT_HEAD. Only while the
 * session is live.
 * JB_OK; JB_ERR_CONFLICT (ended); JB_ERR_NOT_FOUND; JB_ERR_FAIL. */
int jb_db_signal_count(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                       const char *kind, const char *detail, long every, struct jb_count_out *out,
                       jb_error *err);

/* The session's security alerts as JSON text (new): {"jobId", "alerts": [{id, kind, escape,
 * detail, seq, at}]} oldest first, at most 1000. JB_OK, JB_ERR_NOT_FOUND, JB_ERR_FAIL. */
int jb_db_alerts_list(PGconn *c, const char *job_id, char **json_out, jb_error *err);

/* Live sessions past their lifetime (limits.timeoutSec, else `lifetime_s`, from created_at)
 * or idle (limits.idleTimeoutSec, else `idle_s`: in awaiting_agent or active with no op
 * pending or queued, since the later of the last state change and the session's newest
 * audit entry — every op, allowed or refused, ends in one —), or whose worker's lease ran out
 * (its worker gone longer than JAILBOX_WORKER_LEASE_S: migration 035), at most 100, as a new
 * JSON text array [{"jobId", "reason": "lifetime_exceeded"|"idle_timeout"|"worker_unavailable"}].
 * JB_OK or JB_ERR_FAIL. */
int jb_db_sessions_expired(PGconn *c, long lifetime_s, long idle_s, char **json_out, jb_error *err);

/* Sessions an escape ended at least `grace_s` seconds ago (and within `window_s`; 0: any
 * time) still waiting for step 2 (a crash came between) — not those whose seal waits for a
 * rollback on escape still within its time —: a new JSON text array of job ids, at most 100.
 * JB_OK or FAIL. */
int jb_db_sessions_unsealed(PGconn *c, long grace_s, long window_s, char **json_out, jb_error *err);

/* NOTIFY jb_kill with `job_id`: the worker holding the session kills its container now.
 * JB_OK or JB_ERR_FAIL. */
int jb_db_kill_notice(PGconn *c, const char *job_id, jb_error *err);

/* Whether session `job_id` has a teardown job not yet finished: 1, 0, or -1 (`err`). */
int jb_db_teardown_pending(PGconn *c, const char *job_id, jb_error *err);

#endif
