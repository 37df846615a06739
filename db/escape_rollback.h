/* escape_rollback.h — SQL of the rollback an escape's seal waits for (JAILBOX_ROLLBACK_ON_ESCAPE,
 * migration 046): queued for a session an escape ended (a launch job of kind 'rollback', named
 * by its seals_pending row with the time the seal waits until), what its run is told (that it
 * is that rollback, and how long it has), and the seal's side: wait while it runs, or record it
 * as failed when its time is up. */
#ifndef JB_DB_ESCAPE_ROLLBACK_H
#define JB_DB_ESCAPE_ROLLBACK_H

#include <libpq-fe.h>

#include "lib/err.h"
#include "lib/keyring.h"

/* The payload of the rollback an escape queues: everything (to null), not forced. */
#define JB_ESCAPE_ROLLBACK_PAYLOAD \
  "{\"to\": null, \"force\": false, \"by\": \"system\", \"reason\": \"escape_detected\"}"

/* One transaction, under the session row lock: when session `job_id` waits for its escape seal
 * (seals_pending), its chain is not sealed, no rollback is named for that seal yet and the
 * session has pre-image rows not rolled back (blobs not gone), queues a rollback job
 * (JB_ESCAPE_ROLLBACK_PAYLOAD) and names it in the seals_pending row with rollback_until =
 * now() + `wait_s` seconds, and wakes the workers (NOTIFY jb_change). *id: the job queued, or
 * 0 when none was (nothing to undo, no escape seal pending, one named already, sealed). A
 * worker claims it only once the session's teardown job is done (db/launch_jobs.h). JB_OK or
 * JB_ERR_FAIL. */
int jb_db_escape_rollback_queue(PGconn *c, const char *job_id, long wait_s, long long *id,
                                jb_error *err);

/* Whether rollback job `rollback_id` of `job_id` is the one its escape seal waits for: 1 with
 * *ms_left the milliseconds until the seal stops waiting for it (0 when past), 0 when it is
 * not, -1 with `err`. */
int jb_db_escape_rollback_of(PGconn *c, const char *job_id, long long rollback_id,
                             long long *ms_left, jb_error *err);

/* Whether session `job_id`'s escape seal waits for a rollback now (named, queued or claimed):
 * 1 with *ms_left the milliseconds until it stops waiting (0 when past), 0 when not, -1 with
 * `err`. */
int jb_db_escape_rollback_waiting(PGconn *c, const char *job_id, long long *ms_left, jb_error *err);

/* For jb_db_session_finish (db/escape.h), in its transaction, with the session row locked and
 * its seals_pending row present: 1 when the seal waits for the rollback named there (queued or
 * claimed, before rollback_until); 0 to seal now — when that rollback's time is up and it has
 * not ended, it is first ended here as failed ("timeout") and its audit entry `rollback`
 * appended ({rollbackId, to: null, force: false, actor: "system", reason: "escape_detected",
 * error: "timeout", restored: the rows it had restored}), so the chain the seal closes says so;
 * -1 with `err`. */
int jb_db_escape_rollback_gate(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                               jb_error *err);

#endif
