/* opwait.h — wake-ups for the agent calls that wait on an op in this process. A call stores
 * its op in PostgreSQL (db/ops.h) and then sleeps on a ticket here; the LISTEN thread
 * (db/listen.h) hands every notification of channel jb_op (migration 009: "<op id> <state>
 * <job id>", op id 0 for a change of the session's state) to jb_opwait_notify, which wakes the
 * tickets it names. The row stays the truth: a woken call reads it again, and a call re-reads
 * it anyway after a safety-net interval, so a notification lost with a dropped connection
 * delays an answer but never hangs it. Thread-safe. */
#ifndef JB_OPWAIT_H
#define JB_OPWAIT_H

#include <pthread.h>
#include <stdbool.h>

struct jb_opwait;

/* One waiting call. Lives on the caller's stack between register and unregister. */
struct jb_opwait_ticket {
  char job_id[129];
  long long op_id;
  bool fired; /* a notification came since the last wait */
  pthread_cond_t cond;
  struct jb_opwait_ticket *next; /* registry list, guarded by the registry's lock */
};

/* A new, empty registry (free with jb_opwait_free); NULL on OOM. The registry starts "down":
 * until jb_opwait_set_up(true), waits are cut to the short fallback interval. */
struct jb_opwait *jb_opwait_new(void);
void jb_opwait_free(struct jb_opwait *w);

/* Says whether notifications are being received (the LISTEN connection is up). While down,
 * jb_opwait_wait returns after at most `fallback_ms` (the caller polls the row). Every ticket
 * is woken on each change, so nothing waits on a stale promise. NULL registry: no-op. */
void jb_opwait_set_up(struct jb_opwait *w, bool up);

/* Adds `t` for op `op_id` of `job_id` (over 128 bytes: truncated, which only costs wake-ups).
 * `op_id` -1: not stored yet, every op of the session fires it until jb_opwait_set_op. Register
 * before the op is stored (or before the first read of its row), so that no notification
 * falls in between. */
void jb_opwait_register(struct jb_opwait *w, struct jb_opwait_ticket *t, const char *job_id,
                        long long op_id);

/* Names the op of a ticket registered with -1, once it is stored. */
void jb_opwait_set_op(struct jb_opwait *w, struct jb_opwait_ticket *t, long long op_id);

/* Removes `t` (registered before) and destroys its condition variable. */
void jb_opwait_unregister(struct jb_opwait *w, struct jb_opwait_ticket *t);

/* Sleeps until `t` is fired or `timeout_ms` (milliseconds; `fallback_ms` instead while the
 * registry is down, when that is shorter) have passed; clears the fired flag. Returns true
 * when woken by a notification, false on timeout. */
bool jb_opwait_wait(struct jb_opwait *w, struct jb_opwait_ticket *t, long timeout_ms,
                    long fallback_ms);

/* Fires the tickets of op `op_id` of `job_id` (and those of the session not yet naming an
 * op), or every ticket of `job_id` when `op_id` is 0.
 * Cheap (a walk under a mutex); called on the LISTEN thread. */
void jb_opwait_notify(struct jb_opwait *w, const char *job_id, long long op_id);

/* Parses a jb_op payload "<op id> <state> <job id>" (migration 009) and notifies, except for
 * an op becoming approved (queued for the worker: nothing to read yet). Returns 0,
 * or -1 for a malformed payload (ignored). */
int jb_opwait_notify_payload(struct jb_opwait *w, const char *payload);

#endif
