/* worker.h — what the parts of jailbox-worker share: the worker (struct jb_worker, one per
 * process, made by main.c and passed to every function and thread), the sessions it runs
 * (struct jb_session), a pooled connection released at the end of its scope, and the
 * functions one part calls in another.
 *
 * Threads, and what each owns:
 *   main        (main.c)          settings and start-up (adopt.c: with up to 8 threads of
 *                                 its own while it re-adopts); then claims launch and teardown
 *                                 jobs (launch.c), reaps finished sessions, probes the walls
 *                                 again, kills on jb_kill; at the end stops every other thread.
 *                                 Adds sessions to the table and removes them.
 *   session     (launch.c)        one per session: pre-scan, walls, watching the sandbox until
 *                                 it ends, removal, the workspace given back. Owns s->grant.
 *   op          (relay.c)         finds the sessions with queued ops (LISTEN jb_op, and a
 *                                 sweep once a second) and hands them to the runners.
 *   runners     (relay.c)         JB_QUEUED_RUNNERS threads: each runs the queued ops of one
 *                                 session at a time, in order; a session is on one runner
 *                                 at most, so that a slow op holds up only its own session.
 *   commands    (commands.c)      a thread per running exec (exec_op.c), with a connection of
 *                                 the commands' own pool (idle: no session row) while its
 *                                 command runs; the session's later ops wait for it.
 *   control     (control.c)       the operators' control socket, a thread per client.
 *   ops socket  (direct_server.c) accepts jailboxd's connections; a pool of its own runs
 *                                 their reads, lists and stats (relay.c).
 *   heads       (heads.c)         announces the audit heads those direct ops committed.
 *
 * Locks. None of w->lock, a session's s->lock, w->heads.lock and w->due.lock is ever taken
 * while another of them is held. A pooled connection may be held while one of them is taken (an op runs in
 * the shim with its transaction open), but none is held while a connection is borrowed; the
 * pool's own lock (db/db.c) is innermost.
 *   w->lock        the session table, the probe, each session's container id (cid)
 *   s->lock        the session's sandbox (sb): an op in flight holds it for its whole call
 *   w->heads.lock  the announcement schedule and the stop flag of the heads thread
 *   w->due.lock    the sessions whose queued ops are due, and what each runner has */
#ifndef JB_SANDBOX_WORKER_H
#define JB_SANDBOX_WORKER_H

#include <jansson.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "db/db.h"
#include "db/events.h"
#include "db/ops.h"
#include "lib/err.h"
#include "lib/escape_policy.h"
#include "db/signer.h"
#include "lib/keyring.h"
#include "lib/log.h"
#include "lib/treehash.h"
#include "sandbox/worker/head_announce.h"
#include "sandbox/worker/oomwatch.h"
#include "sandbox/worker/walls.h"
#include "sandbox/worker/workspace_access.h"
#include "sandbox/worker/workspace_scan.h"

#define JB_WORKER_SESSIONS_MAX \
  1024 /* sessions in the table at most (JAILBOX_WORKER_MAX_SESSIONS) */
#define JB_HEAD_ANNOUNCE_MS 100 /* one audit-head announcement per session at most this often */
/* Threads that run queued ops, each for one session at a time. An op holds one of the
 * worker's 8 pooled database connections while it runs: 4 leave the others to the ops
 * socket's requests and the launch jobs. */
#define JB_QUEUED_RUNNERS 4
/* Commands (execs) running at once on a worker at most, whatever JAILBOX_WORKER_MAX_COMMANDS
 * says; each on a thread and a connection of its own (commands.c), never on a runner. */
#define JB_WORKER_COMMANDS_MAX 64

/* One session this worker runs. job_id, launch_job, workspace and limits do not change after
 * it is added to the table. */
struct jb_session {
  struct jb_worker *w; /* the worker it belongs to */
  char job_id[129];
  long long launch_job;
  char *workspace;
  json_t *limits;
  char image[JB_IMAGE_NAME_MAX + 8]; /* the sandbox image it runs in (lib/images.h) */
  pthread_t thread;
  atomic_bool teardown; /* the session ended elsewhere: remove the sandbox */
  atomic_bool finished; /* the thread is done; join and free */
  pthread_mutex_t lock; /* guards sb; an op in flight holds it for the whole call, so it
                                is never waited for while w->lock is held */
  struct jb_sandbox sb;
  atomic_bool sb_ready; /* written under lock; read without it as a hint (under it: sure) */
  atomic_int users; /* threads using the session outside w->lock: not reaped meanwhile */
  struct jb_workspace_grant grant; /* what the launch changed in the workspace, undone at the end */
  char cid[80]; /* the container, once up (guarded by w->lock, not lock: an op in
                                flight holds lock for the whole call) */
  atomic_bool killing; /* killed for an abort: an op in flight fails with "aborted" */
  bool adopted; /* taken over from an earlier run of this worker id (adopt.c) */
  atomic_bool kept; /* the keeper holds its channel: it can outlive this worker */
  struct jb_oomwatch *_Atomic oomwatch; /* its sandbox's OOM watch, set by its thread when it
                                           starts watching; stopped and freed with it */
  struct jb_scan_snapshot *_Atomic effects_prev; /* the walk after its last writable command
                                                    (its hashes are reused); freed with it */
};

/* The settings as read (lib/settings.h; the table is in main.c), in the order --help lists
 * them. Strings are new allocations, freed at exit. */
struct jb_worker_settings {
  char *database_url, *signing_key_file, *worker_id, *docker_socket, *sandbox_image;
  char *sandbox_images, *runtime;
  char *require_walls, *seccomp_profile;
  long container_tmp_mib, jail_tmp_mib, start_timeout_ms, call_timeout_ms;
  long changeset_upper_mib; /* JAILBOX_CHANGESET_UPPER_MIB */
  char *shim_socket_dir, *control_socket, *ops_socket, *pidfile;
  bool prescan_hold;
  bool prescan_exclude_secrets; /* JAILBOX_PRESCAN_EXCLUDE_SECRETS */
  long prescan_hash_max_mib, max_sessions;
  long tree_hash_max_bytes; /* JAILBOX_TREE_HASH_MAX_BYTES */
  long max_commands; /* JAILBOX_WORKER_MAX_COMMANDS: commands running at once (commands.c) */
  long effects_max_entries, effects_hash_max_mib, effects_max_ms; /* the walk around an exec */
  long effects_sweep_max_entries, effects_sweep_max_ms; /* the landing sweep past a cut walk */
  long lease_s; /* JAILBOX_WORKER_LEASE_S: a session's lease, renewed every third of it */
  char *log_level, *escape_abort, *alert_after;
  long trust_penalty;
  char *scan_rules; /* the scan rules file; "" = the embedded deploy/scan-rules */
  char *preimage_dir; /* JAILBOX_PREIMAGE_DIR as given ("": beside the pid file) */
  long preimage_max_bytes; /* JAILBOX_PREIMAGE_MAX_BYTES: a session's pre-image blobs, bytes */
  long preimage_retention_s; /* JAILBOX_PREIMAGE_RETENTION_S: kept after a session ended, s */
  bool rollback_on_escape; /* JAILBOX_ROLLBACK_ON_ESCAPE */
  long rollback_on_escape_timeout_s; /* JAILBOX_ROLLBACK_ON_ESCAPE_TIMEOUT_S: the seal waits, s */
};

struct jb_worker {
  /* written by the main thread before any other starts; read-only after */
  struct jb_worker_settings set;
  struct jb_walls_config walls;
  char *profile_buf; /* the seccomp profile read from JAILBOX_SECCOMP_PROFILE */
  struct jb_db *db;
  struct jb_signer *signer; /* its key (jb_signer_key) signs the audit entries the worker makes */
  long long prescan_hash_max; /* bytes */
  struct jb_tree_hash_limits tree_hash; /* of every tree hash the worker makes */
  struct jb_escape_policy policy;
  int control_fd, ops_fd; /* the listening sockets; -1: none */
  char keeper_path[108]; /* the descriptor keeper's socket (keeper.c); "": none */
  char preimage_dir[4096]; /* the pre-image store (preimage_store.h), absolute */

  atomic_bool stopping;
  /* SIGTERM: stopping leaves the sessions running for the next worker under this id (the
   * keeper holds their channels); SIGINT: stopping ends them */
  atomic_bool drain;
  atomic_int direct_conns; /* ops-socket connections held (direct_server.c) */
  atomic_int rollbacks; /* rollback threads running (rollback.c) */

  pthread_mutex_t lock; /* sessions, n_sessions, probe, each session's cid */
  struct jb_session *sessions[JB_WORKER_SESSIONS_MAX];
  size_t n_sessions;
  struct jb_probe probe;

  char queued_jobs[JB_WORKER_SESSIONS_MAX][129]; /* the op thread's own */

  /* sessions whose queued ops are due (relay.c), oldest first, each at most once here and
   * once on a runner */
  struct {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC: a session is due */
    struct jb_due {
      char job[129];
      int budget; /* claims to make at most (stops early when none is waiting) */
    } ring[JB_WORKER_SESSIONS_MAX], running[JB_QUEUED_RUNNERS];
    size_t head, n; /* the ring's oldest entry and its length */
    int again[JB_QUEUED_RUNNERS]; /* claims asked for a session while its runner had it */
  } due;

  /* the commands running and the sessions waiting for a place to run one (commands.c) */
  struct {
    pthread_mutex_t lock;
    pthread_cond_t ended; /* a command's thread ended (live went down) */
    struct jb_db *db; /* the commands' own pool: `max` connections */
    int max, live; /* places; threads not yet returned */
    struct {
      bool used;
      char job[129];
    } slot[JB_WORKER_COMMANDS_MAX];
    char waiting[JB_WORKER_SESSIONS_MAX][129]; /* first come, first served */
    size_t n_waiting;
  } cmds;

  struct {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC */
    struct jb_head_schedule sched;
    bool stop;
  } heads;
};

/* ---- a pooled connection (sessions.c) ----------------------------------------------------- */

/* A connection borrowed from the worker's pool; declared with cleanup_conn it goes back to
 * the pool when its scope ends. */
struct worker_conn {
  struct jb_db *db;
  PGconn *pg; /* NULL: the database could not be reached */
};

/* Borrows a connection of `w`'s pool (blocks while all are out). .pg is NULL with `err` set
 * when the database cannot be reached. */
struct worker_conn worker_conn(struct jb_worker *w, jb_error *err);

/* Gives c->pg back to its pool (a transaction left open is rolled back); NULL is allowed. */
void worker_conn_release(struct worker_conn *c);
#define cleanup_conn __attribute__((cleanup(worker_conn_release)))

/* ---- logging and the session table (sessions.c) ------------------------------------------ */

/* Logs about one session (`job`; NULL: about the worker): with the worker id always, and the
 * development override when active, so that no line about such a session can be read without
 * seeing it. Then string key/value pairs, ending in NULL. */
void slog(struct jb_worker *w, enum jb_log_level lvl, const char *job, const char *msg, ...)
    __attribute__((sentinel));

/* As slog with one JSON field `key`: `val` (stolen; NULL logs null). */
void slog_json(struct jb_worker *w, enum jb_log_level lvl, const char *job, const char *msg,
               const char *key, json_t *val);

/* The probe as it stands (a copy). */
struct jb_probe worker_probe(struct jb_worker *w);

/* Session `job` of the table, or NULL. Call with w->lock held. */
struct jb_session *session_find(struct jb_worker *w, const char *job);

/* Marks session `job` ending (teardown; with `killing` also killed for an abort) and copies
 * its container id into `cid` (80 bytes, may be NULL; "" when none is up or the session is
 * not here). */
void session_mark_ending(struct jb_worker *w, const char *job, bool killing, char *cid);

/* Session `job` with its lock held (NULL: none here), for a call into its shim. w->lock is
 * not held while the session's lock is waited for — an op in flight holds that lock for the
 * whole call, and the abort's kill, the op sweep and the other sessions' ops need w->lock
 * meanwhile —; the session is pinned instead, so that it is not reaped before
 * session_unlock. */
struct jb_session *session_lock(struct jb_worker *w, const char *job);

/* Lets go of a session session_lock returned (NULL is allowed). */
void session_unlock(struct jb_session *s);

/* Joins the threads of finished sessions nobody uses and frees them. */
void sessions_reap(struct jb_worker *w);

/* Frees a session whose thread is joined (or never started). */
void session_free(struct jb_session *s);

/* Runs `fn(arg)` on up to SESSIONS_POOL_THREADS threads at once, the calling thread one of
 * them, for `jobs` items of work that `fn` takes one by one from a counter in `arg` until none
 * is left (so fewer threads than asked, even none started, still do all of it). Returns when
 * every thread has returned. Used where sessions are handled each on its own and one after
 * another would be too slow: adoption at start, the end of every session at a stop. Eight:
 * each thread holds one pooled database connection at a time (the pool has 8), and waits
 * mostly on the shim, Docker and PostgreSQL. */
enum { SESSIONS_POOL_THREADS = 8 };
void sessions_in_parallel(void *(*fn)(void *), void *arg, size_t jobs);

/* ---- a session's containers (containers.c) ------------------------------------------------ */

/* The containers of this deployment on this Docker daemon, running or not, and with `job`
 * (NULL: any) only those of that session (GET /containers/json, filtered by label): the array
 * (new), or NULL with `err`. */
json_t *list_containers(struct jb_worker *w, const char *job, jb_error *err);

/* Removes every container of this Docker daemon labelled with session `job`. */
void session_remove_containers(struct jb_worker *w, const char *job);

/* Waits at most `ms` for container `cid` to be gone (a removal by the teardown job may be
 * running at the same time: the second DELETE answers 409 before the first is done).
 * Returns whether it is gone. */
bool container_gone(struct jb_worker *w, const char *cid, long ms);

/* ---- launch and teardown (launch.c) ------------------------------------------------------ */

/* Claims and starts every launch and teardown job available now (main thread). */
void launch_drain_queue(struct jb_worker *w);

/* A session's thread (arg: the session, in the table): launches it unless it was adopted,
 * watches its sandbox until it ends, removes it (or, on a drain, leaves it to the keeper) and
 * gives the workspace back. Sets s->finished at its end. */
void *session_main(void *arg);

/* Enters `s` in the worker's table, which then holds at most `max` sessions (and never more
 * than JB_WORKER_SESSIONS_MAX), and starts its thread (session_main). 0; or -1 with `s` out of
 * the table again, for the caller to free, and *full telling whether the table was full (else
 * the thread could not start). Any thread. */
int session_start(struct jb_worker *w, struct jb_session *s, size_t max, bool *full);

/* Takes this worker's lease on session `job` (db/launch_jobs.h). JB_OK, JB_ERR_CONFLICT
 * (another worker drives it), JB_ERR_FAIL; logged. */
int session_lease(struct jb_worker *w, const char *job);

/* Whether session `s` can outlive this worker (the keeper holds its shim channel). */
bool session_keepable(struct jb_session *s);

/* Lets the sandbox of session `s` end by itself before a removal kills it: drops the keeper's
 * copies of its channels, closes the worker's (under s->lock; the sandbox is no longer ready
 * for ops), so that the shim reads the end of its input and exits, and waits at most `wait_ms`
 * for the container to stop. Its id goes to `cid` (80 bytes; "" when the sandbox was not up).
 * Why: containerd's runc shim (1.6, Debian 12) holds the task's lock while it kills; when a
 * gVisor sandbox with many stub processes (one per address space the jail made) dies under
 * that kill, their exits queue behind the lock and the removal stalls for 20–40 s. A shim busy
 * with an op reads the end only after it: then the removal's kill comes after `wait_ms`. */
void sandbox_quit(struct jb_session *s, long wait_ms, char *cid);

/* Fails live session `job` with `reason`; quiet when it has ended already. */
void session_fail(struct jb_worker *w, const char *job, const char *reason);

/* ---- rollback and the pre-images' end (rollback.c) ---------------------------------------- */

struct jb_launch_job;

/* Runs claimed rollback job `j` (ROLLBACK.md "Running it") on a thread of its own (taking
 * j's allocations: j is left empty), so that the main thread goes on renewing leases and
 * claiming jobs: the session's pre-image rows newer than its `to` are restored newest first in
 * j->workspace, its audit entry and result stored, jailbox:rollback published. A job whose
 * database connection cannot be had, or cut short by the worker's stop, stays claimed (queued
 * again when this worker id starts). When no thread can start it is run here. Main thread. */
void rollback_start(struct jb_worker *w, struct jb_launch_job *j);

/* The tree hash v1 (lib/treehash.h, api/audit.md) of the workspace open on `rootfd`, as a new
 * JSON string; JSON null when it is not computed (over JAILBOX_TREE_HASH_MAX_BYTES, too many
 * entries, unreadable: the reason is logged). */
json_t *worker_tree_hash(struct jb_worker *w, const char *job, int rootfd);

/* With JAILBOX_ROLLBACK_ON_ESCAPE: waits while the rollback on escape of session `job` is
 * queued or claimed, within its time (db/escape_rollback.h), polling every 50 ms. The
 * session's thread calls it once its sandbox is gone and before it gives the workspace back
 * (workspace_access.h): the rollback restores what the session saw, and the give-back then
 * returns the modes and groups of the state at open. Holds no connection while it waits. */
void escape_rollback_wait(struct jb_worker *w, const char *job);

/* Waits at most `ms` for the rollback threads to end (they stop between two rows once
 * w->stopping is set). Main thread, at the stop, before the pool closes. */
void rollbacks_wait(struct jb_worker *w, long ms);

/* Drops the pre-image blobs of session `job` and sets its preimages_gone_at (logged when it
 * cannot). */
void preimages_drop(struct jb_worker *w, const char *job);

/* Once a minute (*last: the time of the last sweep, ms; the first a minute after the start): drops the pre-images of the sessions
 * accepted, or ended more than JAILBOX_PREIMAGE_RETENTION_S ago (at most 100 a sweep). Main
 * thread. */
void preimages_sweep(struct jb_worker *w, long long *last);

/* ---- start-up and re-adoption (adopt.c) --------------------------------------------------- */

/* At start (main thread, before the other threads): fails the launch jobs a previous run of
 * this worker id left claimed, re-adopts its running sessions whose shim channel the keeper
 * held for their own container, fails the other live sessions of ours whose container is
 * listed, removes what no live session of ours owns and lets the keeper drop what was not taken
 * over. The containers are handled by up to 8 threads; returns once all are done. */
void adopt_at_start(struct jb_worker *w);

/* ---- the descriptor keeper (keeper.c) ------------------------------------------------------ */

/* One session's channels as the keeper holds them: fd[0] the shim's socket, fd[1] the
 * spawner's, fd[2] a memfd with the workspace grant (each -1 when absent); copies owned by
 * the receiver. */
struct jb_kept {
  char job[129], cid[80];
  int fd[3];
};

/* `jailbox-worker --keeper PATH`: serves the keeper's socket at PATH until it holds nothing and
 * has been idle 30 s. The exit code. */
int keeper_main(const char *path);

/* Finds the keeper of this worker id (w->keeper_path), starting one when none answers. With
 * the attach-stream channel only (JAILBOX_SHIM_SOCKET_DIR=none) there is none: "" and 0.
 * 0, or -1 with `err` (the worker then runs without one: its sessions end with it). */
int keeper_init(struct jb_worker *w, jb_error *err);

/* Hands the keeper copies of session `job`'s descriptors (-1: none), replacing what it held
 * for the session. 0, or -1 with `err`. */
int keeper_put(struct jb_worker *w, const char *job, const char *cid, int conn, int spawner,
               int grant, jb_error *err);

/* The keeper closes what it holds for `job` (logged when it cannot be asked). */
void keeper_del(struct jb_worker *w, const char *job);

/* Everything the keeper holds, as copies: *out (new, kept_free) with *n entries. 0, or -1. */
int keeper_get(struct jb_worker *w, struct jb_kept **out, size_t *n, jb_error *err);
void kept_free(struct jb_kept *list, size_t n);

/* ---- security signals (signals.c) -------------------------------------------------------- */

/* ---- commands (commands.c) ------------------------------------------------------------------ */

/* Opens the commands' database pool (JAILBOX_WORKER_MAX_COMMANDS connections) and readies
 * w->cmds; main thread, before the op thread starts. 0, or -1 with `err`. */
int commands_init(struct jb_worker *w, jb_error *err);

/* Whether session `job` has a command running or waiting for a place: its queued ops then
 * wait (runners skip it) so that they keep their order. Any thread. */
bool commands_session_busy(struct jb_worker *w, const char *job);

/* Hands session `job`, whose oldest queued op is an exec (claimed and rolled back by the
 * caller), to a command thread: started now when a place is free and no session waits longer,
 * else put in the waiting line (started when a place frees, first come first served). The
 * thread claims the op again and runs it (exec_op_run) with a connection of the commands'
 * pool, then makes the session due again. 0; -1 with `err` (the line is full, or no thread
 * could be started: the op stays queued for the next sweep). A runner's thread. */
int commands_start(struct jb_worker *w, const char *job, jb_error *err);

/* At the worker's stop, after the runners ended: empties the waiting line, waits for every
 * command thread to return, closes the commands' pool. */
void commands_end(struct jb_worker *w);

/* Makes the queued ops of session `job` due for the runners (relay.c). Any thread. (due.c) */
void run_queued_session(struct jb_worker *w, const char *job);

/* Makes `max` claims of session `job` due: added to what its entry asks already when it is
 * due or on a runner, else a new entry at the end (dropped when the ring is full: the sweep
 * comes back to it). Any thread; takes w->due.lock. (due.c) */
void due_add(struct jb_worker *w, const char *job, int max);

/* Acts on signal `kind` of session `job` by the policy: aborts the session (kills and
 * removes its container, seals its chain) or counts the signal and alerts every N-th time.
 * Call without holding a connection or a session's lock. */
void raise_signal(struct jb_worker *w, const char *job, enum jb_signal kind, const char *detail);

/* raise_signal, alerting at this occurrence whatever the policy's alert_after for `kind`
 * (unless the policy aborts for it: then as raise_signal). */
void raise_alert_now(struct jb_worker *w, const char *job, enum jb_signal kind, const char *detail);

/* With JAILBOX_ROLLBACK_ON_ESCAPE: when session `job` waits for its escape seal and has
 * changes to undo, queues the rollback the seal then waits for (db/escape_rollback.h; claimed
 * once its teardown is done, sealed by rollback.c after it). Nothing otherwise; logged. Call
 * without holding a connection. */
void escape_rollback_queue(struct jb_worker *w, const char *job);

/* jb_kill: the session is being aborted; kill its container now, so that an op running in
 * the shim (holding the session row the abort needs) fails with "aborted" at once. */
void kill_for_abort(struct jb_worker *w, const char *job);

/* ---- ops (relay.c) ----------------------------------------------------------------------- */

/* The op thread (arg: the worker). */
void *relay_queued_main(void *arg);

/* Runs one op that changes nothing (read, read_many, list, find, search, stat) jailboxd
 * handed straight to this worker (`req`: the request of sandbox/proto/direct.h). The answer object (new). *head receives the audit head the op
 * committed without announcing it (0: none). */
json_t *relay_direct(struct jb_worker *w, const json_t *req, long long *head);

/* {ran:false, state, reason} (new): the answer to a direct op that did not run. */
json_t *relay_not_run(const char *state, const char *reason);

/* ---- exec (exec_op.c) --------------------------------------------------------------------- */

/* Fault injection for the tests of an op's commit (tests/node/audit_size.test.mjs): with
 * JB_TEST_FAULT=<file> in the worker's environment, whether <file> names `point` — once: it
 * removes <file> first. The points: op_entry_too_large (a queued op's audit entry is made
 * larger than the chain's cap), exec_entry_too_large (the same for an exec), exec_commit_lost
 * (neither an exec's outcome nor its failure is stored), rollback_midway (the worker _exits(86)
 * right after a rollback's first restored row is marked), escape_rollback_stall (a rollback on
 * escape sleeps until 3 s past the time it has, before it restores anything). Unset (always, outside tests) it
 * costs a getenv. (sessions.c) */
bool worker_test_fault(struct jb_worker *w, const char *job, const char *point);

/* Runs claimed exec `op` of `job` (jb_db_op_claim's transaction open on `c`): marks it running
 * (committed), runs its command in the session's spawner with its output published live to
 * the buyer, and stores its outcome and audit entry. *signal (enum jb_signal, -1: none) and
 * `detail` (dsize bytes) say what it told of the agent (a seccomp kill), to raise once the
 * connection is given back. JB_OK; JB_ERR_FAIL with `err` (the op stays queued when it could
 * not be marked running, running when its outcome could not be stored). */
int exec_op_run(struct jb_worker *w, PGconn *c, const char *job, struct jb_op_claim *op,
                int *signal, char *detail, size_t dsize, jb_error *err);

/* Sends `what` ("kill", "stop", "cont") to the command of exec op `op_id` of `job` running on
 * this worker (0: any exec of the session); nothing when none runs here. Any thread. */
void exec_op_signal(struct jb_worker *w, const char *job, long long op_id, const char *what);

/* Waits until no exec op of session `job` is running on this worker — its outcome stored, or
 * it given up — or `max_ms` have passed (polling every 20 ms). True when none runs. Called
 * before the session is ended for its sandbox's death, so that a command's true outcome
 * (killed for memory: oom) is what its op records, not the session's end. */
bool exec_op_wait_stored(const char *job, long max_ms);

/* At the re-adoption of session `job`: its exec ops an earlier run of this worker left marked
 * running (their command was killed when the spawner's channel was taken over, or with it) are
 * failed with the code
 * "worker_restarted" and an audit entry. */
void exec_op_fail_orphans(struct jb_worker *w, const char *job);

/* The reaper of exec ops of this worker's sessions left running past their timeout plus
 * JB_OP_RUNNING_GRACE_S (db/ops.h): one still running here is killed (its own thread stores
 * how it ended); one no thread of this worker runs — its outcome's commit and the commit of
 * that failure both failed — is failed with the code "overdue" and an audit entry. A dead
 * worker's are failed by the lease's expiry (jailboxd) or the re-adoption
 * (exec_op_fail_orphans). Blocks on the database; the relay's sweep calls it. */
void exec_op_reap(struct jb_worker *w);

/* Tells the spawner of session `job` (when it runs on this worker) to build the next command's
 * jail ahead (`ahead`: the session became active) or to kill the one built and build none
 * (the session was paused). Any thread. */
void exec_op_ahead(struct jb_worker *w, const char *job, bool ahead);

/* ---- sockets (control.c, direct_server.c) ------------------------------------------------ */

/* A listening Unix socket at `path` (mode 0600), named `what` in errors: the fd, or -1 with
 * `err`. */
int worker_unix_listen(const char *path, const char *what, jb_error *err);

/* Sends `ans` (stolen) on `fd` as one JSON line. */
void worker_send_line(int fd, json_t *ans);

/* The control socket's thread (arg: the worker; w->control_fd listening). */
void *control_main(void *arg);

/* The ops socket's thread (arg: the worker; w->ops_fd listening): accepts, and serves the
 * requests on its own pool of threads until w->stopping; returns once they have ended. */
void *direct_server_main(void *arg);

/* ---- session events and audit heads (heads.c) -------------------------------------------- */

/* Publishes event (`kind`, `payload` stolen; NULL: nothing) of `job` on NOTIFY jb_event, on
 * `c` once the commit that made it true has returned (`c` idle). Best effort: a failure is
 * logged (the change is committed; a socket that reconnects is sent the state). */
void worker_publish(struct jb_worker *w, PGconn *c, const char *job, enum jb_event_kind kind,
                    json_t *payload);

/* worker_publish of every event of `l`, in order; empties `l`. */
void worker_publish_list(struct jb_worker *w, PGconn *c, const char *job, struct jb_event_list *l);

/* Readies w->heads (before the heads thread starts). */
void heads_init(struct jb_worker *w);

/* Head `seq` of `job` was committed without an announcement. */
void heads_committed(struct jb_worker *w, const char *job, long long seq);

/* The heads thread (arg: the worker). */
void *heads_main(void *arg);

/* Tells the heads thread to announce what waits and end. */
void heads_stop(struct jb_worker *w);

/* ---- the database listener (sessions.c) ------------------------------------------------------ */

/* (Re)connects *listen and runs `listen_sql` ("LISTEN channel") when it is not connected;
 * leaves it NULL when the database cannot be reached (the caller's loop tries again). */
void worker_listen(struct jb_worker *w, PGconn **listen, const char *listen_sql);

#endif
