/* sessions.c — the table of sessions this worker runs (finding, pinning and locking one,
 * reaping the finished), the log lines that name a session, the pooled connection every
 * database step borrows and the LISTEN connection of a loop, and the tests' fault points (see
 * worker.h for the locks and who owns what). The bottom of the worker: it calls no other file
 * of this folder but the memory watch's. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/worker/worker.h"

struct worker_conn worker_conn(struct jb_worker *w, jb_error *err) {
  return (struct worker_conn){.db = w->db, .pg = jb_db_acquire(w->db, err)};
}

void worker_conn_release(struct worker_conn *c) {
  jb_db_release(c->db, c->pg);
  c->pg = NULL;
}

void worker_listen(struct jb_worker *w, PGconn **listen, const char *listen_sql) {
  if (*listen && PQstatus(*listen) == CONNECTION_OK) return;
  if (*listen) PQfinish(*listen);
  *listen = PQconnectdb(w->set.database_url);
  PGresult *r = PQstatus(*listen) == CONNECTION_OK ? PQexec(*listen, listen_sql) : NULL;
  if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) {
    PQfinish(*listen);
    *listen = NULL;
  }
  PQclear(r);
}

/* The fields every line about `job` carries (new). */
static json_t *log_fields(struct jb_worker *w, const char *job) {
  json_t *f = json_object();
  json_object_set_new(f, "worker", json_string(w->walls.worker_id));
  if (job) json_object_set_new(f, "jobId", json_string(job));
  if (w->walls.override) json_object_set_new(f, "devOverride", json_string(w->walls.require_text));
  return f;
}

void slog(struct jb_worker *w, enum jb_log_level lvl, const char *job, const char *msg, ...) {
  json_t *f = log_fields(w, job);
  va_list ap;
  va_start(ap, msg);
  for (;;) {
    const char *k = va_arg(ap, const char *);
    if (!k) break;
    const char *v = va_arg(ap, const char *);
    json_object_set_new(f, k, json_string(v ? v : ""));
  }
  va_end(ap);
  jb_log_json(lvl, msg, f);
}

void slog_json(struct jb_worker *w, enum jb_log_level lvl, const char *job, const char *msg,
               const char *key, json_t *val) {
  json_t *f = log_fields(w, job);
  json_object_set_new(f, key, val ? val : json_null());
  jb_log_json(lvl, msg, f);
}

struct jb_probe worker_probe(struct jb_worker *w) {
  pthread_mutex_lock(&w->lock);
  struct jb_probe p = w->probe;
  pthread_mutex_unlock(&w->lock);
  return p;
}

struct jb_session *session_find(struct jb_worker *w, const char *job) {
  for (size_t i = 0; i < w->n_sessions; i++)
    if (strcmp(w->sessions[i]->job_id, job) == 0) return w->sessions[i];
  return NULL;
}

void session_mark_ending(struct jb_worker *w, const char *job, bool killing, char *cid) {
  if (cid) cid[0] = '\0';
  pthread_mutex_lock(&w->lock);
  struct jb_session *s = session_find(w, job);
  if (s) {
    if (killing) atomic_store(&s->killing, true);
    atomic_store(&s->teardown, true);
    if (cid) snprintf(cid, sizeof s->cid, "%s", s->cid);
  }
  pthread_mutex_unlock(&w->lock);
}

struct jb_session *session_lock(struct jb_worker *w, const char *job) {
  pthread_mutex_lock(&w->lock);
  struct jb_session *s = session_find(w, job);
  if (s) atomic_fetch_add(&s->users, 1);
  pthread_mutex_unlock(&w->lock);
  if (s) pthread_mutex_lock(&s->lock);
  return s;
}

void session_unlock(struct jb_session *s) {
  if (!s) return;
  pthread_mutex_unlock(&s->lock);
  atomic_fetch_sub(&s->users, 1);
}

void session_free(struct jb_session *s) {
  jb_oomwatch_stop(atomic_load(&s->oomwatch));
  struct jb_scan_snapshot *prev = atomic_exchange(&s->effects_prev, NULL);
  jb_scan_snapshot_free(prev);
  free(prev);
  free(s->workspace);
  json_decref(s->limits);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

void sessions_reap(struct jb_worker *w) {
  pthread_mutex_lock(&w->lock);
  for (size_t i = 0; i < w->n_sessions;) {
    struct jb_session *s = w->sessions[i];
    if (atomic_load(&s->finished) && atomic_load(&s->users) == 0) {
      pthread_join(s->thread, NULL);
      session_free(s);
      w->sessions[i] = w->sessions[--w->n_sessions];
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&w->lock);
}

void sessions_in_parallel(void *(*fn)(void *), void *arg, size_t jobs) {
  pthread_t th[SESSIONS_POOL_THREADS];
  size_t nth = 0;
  while (nth + 1 < SESSIONS_POOL_THREADS && nth + 1 < jobs &&
         pthread_create(&th[nth], NULL, fn, arg) == 0)
    nth++;
  fn(arg); /* this thread is one of the pool, and all of it if no other could start */
  for (size_t t = 0; t < nth; t++) pthread_join(th[t], NULL);
}

bool worker_test_fault(struct jb_worker *w, const char *job, const char *point) {
  const char *f = getenv("JB_TEST_FAULT");
  if (!f || !f[0]) return false;
  char want[40] = "";
  FILE *in = fopen(f, "re");
  if (!in) return false;
  if (!fgets(want, sizeof want, in)) want[0] = '\0';
  fclose(in);
  want[strcspn(want, "\r\n")] = '\0';
  if (strcmp(want, point) || unlink(f) < 0) return false;
  slog(w, JB_LOG_WARN, job, "test fault", "point", point, NULL);
  return true;
}
