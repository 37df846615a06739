/* pool.h — a pool of threads that run queued calls in the order they came, with a fixed
 * number of threads free for new calls however many of its calls wait.
 *
 * A call that is about to wait a long time (an agent's tool call waiting for the buyer, a
 * command that runs for minutes, a paused session) says so with jb_pool_block_begin; the pool
 * then starts a stand-in thread, so the calls queued behind it (a buyer's approve, another
 * agent's connect) are not held up by it. When the wait ends (jb_pool_block_end) the spare
 * thread ends at its next idle moment. The pool keeps `threads` threads that are not waiting,
 * however many are: what bounds the waits is the caller's count of them (the process's limit
 * on waiting calls, JAILBOX_MAX_WAITING_CALLS). Thread-safe. */
#ifndef JB_POOL_H
#define JB_POOL_H

#include <stdbool.h>

#include "lib/err.h"

struct jb_pool;

#define JB_POOL_MAX_SPARE 1024 /* stand-in threads a pool starts at most */

/* A queued call: fn(arg, true) runs it on a pool thread; fn(arg, false) is called instead,
 * on the stopping thread, for a call still queued when the pool stops (free `arg` only). */
typedef void jb_pool_fn(void *arg, bool run);

/* Starts a pool of `threads` threads (1 ≤ threads) taking at most `max_queued` calls queued
 * and not yet running (more: jb_pool_submit fails). On success *out is new (end it with
 * jb_pool_stop). Returns 0, or -1 with `err` set (out of memory, a thread cannot start). */
int jb_pool_start(struct jb_pool **out, long threads, long max_queued, jb_error *err);

/* Queues fn(arg, true) behind the calls queued before it. Returns 0, or -1 when the queue is
 * full or the pool is stopping (fn is not called; `arg` stays the caller's). */
int jb_pool_submit(struct jb_pool *p, jb_pool_fn *fn, void *arg);

/* Says that the calling thread — a pool thread running a call — is about to wait a long time:
 * a thread is started for the pool if fewer than its `threads` would stay free. Pair with
 * jb_pool_block_end on the same thread; a second begin before that end counts nothing. On a
 * thread that is not a pool's it counts nothing. Returns false when a stand-in was needed and
 * could not start, or the pool has JB_POOL_MAX_SPARE stand-ins already (nothing counted: the
 * caller should refuse to wait, or wait without a stand-in), true otherwise. */
bool jb_pool_block_begin(void);

/* Whether this thread is in a wait jb_pool_block_begin counted. */
bool jb_pool_blocking(void);

/* Ends the wait jb_pool_block_begin counted on this thread (none counted: nothing to do); a
 * spare thread ends when it finds no call queued. */
void jb_pool_block_end(void);

/* Threads the pool has now (running, waiting or idle), and of them the ones in a counted
 * wait, for tests and metrics. NULL: 0. */
long jb_pool_threads(struct jb_pool *p, long *blocked);

/* Stops the pool: no call is taken any more, calls still queued get fn(arg, false), and it
 * returns once every thread has ended (a thread in a wait ends when its call returns) and
 * frees `p`. NULL is allowed. */
void jb_pool_stop(struct jb_pool *p);

#endif
