/* heads.c — the worker's session events: publishing them after their commits
 * (worker_publish), and the thread that announces the audit heads of direct ops. The worker
 * has no bus: what it commits it announces on NOTIFY jb_event once the commit returned (never
 * inside the transaction: db/events.h), and every jailboxd delivers that to its sockets
 * (server/bus.h). A read, list or stat
 * handed straight to this worker commits its audit entry without a NOTIFY (db/ops.h
 * jb_db_op_direct_store): its head is announced here, on this thread's own time, after the
 * answer has gone — at most one announcement per session every JB_HEAD_ANNOUNCE_MS, the newest
 * head, the session waiting longest first (the schedule: head_announce.h). An agent reading in
 * a loop thus costs its buyers one announcement per interval, not one per read; a head is never
 * more than about an interval late while the thread keeps up, and the newest is always
 * announced. What stops the worker is announced before it exits. */
#include <time.h>

#include "db/events.h"
#include "sandbox/worker/worker.h"

static long long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void heads_init(struct jb_worker *w) {
  pthread_mutex_init(&w->heads.lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w->heads.cond, &ca);
  pthread_condattr_destroy(&ca);
  jb_head_schedule_init(&w->heads.sched, JB_HEAD_ANNOUNCE_MS);
  w->heads.stop = false;
}

void worker_publish(struct jb_worker *w, PGconn *c, const char *job, enum jb_event_kind kind,
                    json_t *payload) {
  jb_error err = {0};
  if (payload && jb_db_notify_event(c, job, kind, payload, &err) != JB_OK)
    slog(w, JB_LOG_WARN, job, err.msg, "step", "publish event", "kind", jb_event_kind_key(kind),
         NULL);
  json_decref(payload);
}

void worker_publish_list(struct jb_worker *w, PGconn *c, const char *job, struct jb_event_list *l) {
  for (size_t i = 0; i < l->n; i++) worker_publish(w, c, job, l->ev[i].kind, l->ev[i].payload);
  l->n = 0;
}

void heads_committed(struct jb_worker *w, const char *job, long long seq) {
  pthread_mutex_lock(&w->heads.lock);
  int rc = jb_head_committed(&w->heads.sched, job, seq, mono_ms());
  if (rc == 0) {
    pthread_cond_signal(&w->heads.cond);
  } else if (
      rc < 0) { /* 1,024 sessions waiting on this thread: it is far behind, or the database away */
    slog(w, JB_LOG_WARN, job, "audit head not announced: too many sessions waiting", NULL);
  }
  pthread_mutex_unlock(&w->heads.lock);
}

/* Announces the newest head of `job` over `after`; *seq receives it. */
static int announce(struct jb_worker *w, const char *job, long long after, long long *seq,
                    jb_error *err) {
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  if (!conn.pg) return JB_ERR_FAIL;
  return jb_db_announce_audit_head(conn.pg, job, after, seq, err);
}

void *heads_main(void *arg) {
  struct jb_worker *w = arg;
  pthread_mutex_lock(&w->heads.lock);
  for (;;) {
    long long now = mono_ms(), wake, after, seq = 0;
    char job[129];
    if (!jb_head_next(&w->heads.sched, now, w->heads.stop, job, &after, &wake)) {
      if (w->heads.stop) break;
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      long long wait = wake - now;
      ts.tv_sec += wait / 1000;
      ts.tv_nsec += (wait % 1000) * 1000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&w->heads.cond, &w->heads.lock, &ts);
      continue;
    }
    pthread_mutex_unlock(&w->heads.lock);
    jb_error err = {0};
    int rc = announce(w, job, after, &seq, &err);
    pthread_mutex_lock(&w->heads.lock);
    if (rc != JB_OK)
      slog(w, JB_LOG_WARN, job,
           w->heads.stop ? "audit head not announced: given up, the worker stops"
                         : "audit head not announced",
           "error", err.msg, NULL);
    /* failed: again after an interval; when stopping, given up with the rest (the heads are
     * in the database) */
    jb_head_done(&w->heads.sched, job, rc == JB_OK, seq, w->heads.stop);
  }
  pthread_mutex_unlock(&w->heads.lock);
  return NULL;
}

void heads_stop(struct jb_worker *w) {
  pthread_mutex_lock(&w->heads.lock);
  w->heads.stop = true;
  pthread_cond_signal(&w->heads.cond);
  pthread_mutex_unlock(&w->heads.lock);
}
