/* workers.h — jailboxd's side of its workers: starts JAILBOX_WORKERS jailbox-worker
 * processes (found next to jailboxd unless JAILBOX_WORKER_BIN says otherwise) with the same
 * database, restarts one that dies (with a growing pause when it dies before it is ready; at
 * once after a clean exit, a drain, and after the death of a worker that was ready, unless that
 * repeats too often), adopts one left running by an earlier jailboxd (its pid file is locked),
 * and stops them at shutdown. A worker says it is ready by writing its pid into
 * "<pid file>.ready". */
#ifndef JB_SANDBOX_SUPERVISE_H
#define JB_SANDBOX_SUPERVISE_H

#include "lib/err.h"

struct jb_workers;

/* Starts `n` workers (n ≥ 1) running `bin` ("" = jailbox-worker in jailboxd's directory)
 * with JAILBOX_DATABASE_URL=`conninfo`, JAILBOX_SIGNING_KEY_FILE=`signing_key_file` (session
 * transitions are signed audit entries), ids "<host>:<state_dir>#<i>", pid files
 * "<state_dir>/worker-<i>.pid" and ops sockets "<state_dir>/worker-<i>.ops"; everything else they read from the inherited environment.
 * On success *out is new (free with jb_workers_stop). Returns 0, or -1 with `err` set when the
 * binary is missing or the supervising thread cannot start. */
int jb_workers_start(struct jb_workers **out, long n, const char *bin, const char *state_dir,
                     const char *conninfo, const char *signing_key_file, jb_error *err);

/* The ops socket (sandbox/proto/direct.h) of this process's worker `worker_id` — the id a session's
 * contract names as its worker —, or NULL when that worker is not one of `w`'s (another
 * instance's, or a worker run apart) or has none. `w` may be NULL. The string lives as long
 * as `w`. Thread-safe. */
const char *jb_workers_ops_socket(const struct jb_workers *w, const char *worker_id);

/* Sends SIGINT to every worker, waits up to `grace_ms` for each (a worker fails its live
 * sessions and removes their containers on the way out), then SIGKILL. NULL is allowed.
 * (SIGTERM to a worker is its drain: it leaves its sessions to the next worker under its id,
 * which this supervisor starts at once after the clean exit — the upgrade of the binary.) */
void jb_workers_stop(struct jb_workers *w, long grace_ms);

#endif
