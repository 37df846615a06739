/* escape.h — jailboxd's side of escape detection: escape signals seen on the op path (path syntax,
 * hard links found by a write's stat, excluded paths) acted on by the policy
 * (lib/escape_policy.h); the buyer's abort freeing a session held by an op in flight;
 * the sweeper that aborts sessions past their lifetime or idle timeout and seals chains a
 * crash left open; and the REST reads GET …/alerts and GET …/changes. */
#ifndef JB_API_ESCAPE_H
#define JB_API_ESCAPE_H

#include <libpq-fe.h>

#include "server/app.h"
#include "lib/escape_policy.h"

/* Parses the policy from app->cfg (validated by jb_config_load). Call once before serving. */
int jb_escape_init(struct jb_app *app, jb_error *err);

/* Acts on signal `kind` of session `job_id` with `detail` (a person's words, any length):
 * when the policy aborts on it, in order — session aborted with reason escape_detected (its
 * audit entry, the alert, the agent's trust score lowered), the container killed and removed
 * (NOTIFY jb_kill to the worker holding it, then its teardown job, waited for at most 1.5 s), pending ops rejected and queued ones
 * failed, the chain sealed, then jailbox:state/abort, jailbox:security_alert and
 * jailbox:audit_head announced (db/escape.h); otherwise counted, alerting every N-th.
 * Returns 1 when the session was aborted by this call, 0 otherwise (also on database errors,
 * which are logged: the caller refuses the op either way). */
int jb_escape_signal(struct jb_app *app, const char *job_id, enum jb_signal kind,
                     const char *detail);

/* Before an abort of live session `job_id`: asks the worker holding the session to kill its
 * container now (NOTIFY jb_kill), so that an op running in the shim — which holds the session
 * row until it completes — fails with "aborted" at once and the abort does not wait for it.
 * Should the abort then fail (database), the session is left without its sandbox until it is
 * aborted again or expires. `c` is idle. */
void jb_escape_release_session(struct jb_app *app, PGconn *c, const char *job_id);

/* The sweeper thread: every 500 ms aborts expired sessions (reason lifetime_exceeded or
 * idle_timeout, actor system) and finishes ended sessions whose chain is not sealed (3 s
 * after they ended). Returns 0, or -1 with `err`. */
struct jb_sweeper;
int jb_sweeper_start(struct jb_app *app, struct jb_sweeper **out, jb_error *err);
void jb_sweeper_stop(struct jb_sweeper *s);

#endif
