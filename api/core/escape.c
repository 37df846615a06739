/* escape.c — jailboxd's side of escape detection, aborts and expiry (see escape.h). */
#define _GNU_SOURCE
#include "api/core/escape.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/core/auth.h"
#include "api/core/ops.h"
#include "db/audit_store.h"
#include "db/escape.h"
#include "db/metrics.h"
#include "db/ops.h"
#include "db/sessions.h"
#include "server/cache.h"
#include "lib/log.h"
#include "lib/metrics.h"

#define TEARDOWN_WAIT_MS 1500 /* an escape waits this long for the worker to remove the container */

static struct jb_escape_policy policy;

int jb_escape_init(struct jb_app *app, jb_error *err) {
  return jb_escape_policy_parse(&policy, app->cfg->escape_abort, app->cfg->alert_after,
                                app->cfg->trust_penalty, err);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int jb_escape_signal(struct jb_app *app, const char *job, enum jb_signal kind, const char *detail) {
  const char *name = jb_signal_name(kind);
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    jb_log(JB_LOG_ERROR, "security signal not recorded: database unavailable", "jobId", job, "kind",
           name, "detail", err.msg, NULL);
    return 0;
  }
  int aborted = 0;
  if (policy.abort[kind]) {
    struct jb_escape_out eo;
    int rc = jb_db_escape_abort(c, jb_signer_key(app->signer), job, name, detail,
                                policy.trust_penalty, &eo, &err);
    if (rc == JB_OK) {
      aborted = 1;
      if (app->cache) jb_cache_invalidate(app->cache, job);
      jb_log(JB_LOG_WARN, "escape detected: session aborted", "jobId", job, "kind", name, "detail",
             detail, "from", eo.previous, NULL);
      /* the container goes before the chain is sealed: the worker kills it on the notice at
       * once (the teardown job queued with the abort may wait behind others), then the
       * teardown job confirms it is gone */
      jb_error kerr = {0};
      if (jb_db_kill_notice(c, job, &kerr) != JB_OK)
        jb_log(JB_LOG_WARN, "escape: kill notice not sent", "jobId", job, "detail", kerr.msg, NULL);
      long long until = jb_now_ms() + TEARDOWN_WAIT_MS;
      int pending;
      while ((pending = jb_db_teardown_pending(c, job, &err)) == 1 && jb_now_ms() < until)
        sleep_ms(10);
      if (pending != 0)
        jb_log(JB_LOG_WARN, "escape: sealing before the teardown finished", "jobId", job, NULL);
      struct jb_finish_out fo;
      if (jb_db_session_finish(c, jb_signer_key(app->signer), job, eo.previous, &fo, &err) == JB_OK)
        jb_bus_publish_list(app->bus, job, &fo.events);
      else
        jb_log(JB_LOG_ERROR, "escape: seal failed (the sweeper retries)", "jobId", job, "detail",
               err.msg, NULL);
    } else if (rc == JB_ERR_FAIL) {
      jb_log(JB_LOG_ERROR, "escape abort failed", "jobId", job, "kind", name, "detail", err.msg,
             NULL);
    }
  } else if (policy.alert_after[kind] > 0) {
    struct jb_count_out co;
    int rc = jb_db_signal_count(c, jb_signer_key(app->signer), job, name, detail,
                                policy.alert_after[kind], &co, &err);
    if (rc == JB_OK) jb_bus_publish_list(app->bus, job, &co.events);
    if (rc == JB_OK && co.alerted)
      jb_log(JB_LOG_WARN, "security alert", "jobId", job, "kind", name, "detail", detail, NULL);
    else if (rc == JB_ERR_FAIL)
      jb_log(JB_LOG_ERROR, "security signal not recorded", "jobId", job, "kind", name, "detail",
             err.msg, NULL);
  }
  jb_db_release(app->db, c);
  return aborted;
}

void jb_escape_release_session(struct jb_app *app, PGconn *c, const char *job) {
  (void)app;
  /* always, not only when the session row is held now: an op claimed between a check and
   * the abort's transaction would hold it for its whole run */
  jb_error err = {0};
  if (jb_db_kill_notice(c, job, &err) != JB_OK)
    jb_log(JB_LOG_WARN, "abort: kill notice not sent", "jobId", job, "detail", err.msg, NULL);
}

/* ---------- the sweeper ---------- */

struct jb_sweeper {
  struct jb_app *app;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool stop;
  long long folded_ms; /* when the op counters were last folded (jb_now_ms) */
};

#define FOLD_EVERY_MS 60000 /* the op counters' changes are folded at least this often */
/* An op's diff preview is kept for as long as the buyer may read its ended session
 * (JAILBOX_BUYER_READ_RETENTION_S); diffs of older sessions are cleared by the sweeper,
 * FORGET_BATCH ops at a time every FOLD_EVERY_MS. */
#define FORGET_BATCH 10000

/* Aborts `job` for `reason` (lifetime_exceeded, idle_timeout) as the buyer's abort does; fails
 * it for worker_unavailable (its worker's lease ran out: nobody drives its sandbox). */
static void expire(struct jb_app *app, PGconn *c, const char *job, const char *reason) {
  static const char *const live[] = {JB_LIVE_STATES, NULL};
  jb_escape_release_session(app, c, job);
  struct jb_transition t;
  jb_error err = {0};
  const char *to = reason && !strcmp(reason, "worker_unavailable") ? "failed" : "aborted";
  int rc = jb_db_session_transition(c, jb_signer_key(app->signer), job, live, to, reason, "system",
                                    &t, &err);
  if (rc != JB_OK) {
    if (rc == JB_ERR_FAIL)
      jb_log(JB_LOG_ERROR, "expiry failed", "jobId", job, "detail", err.msg, NULL);
    return;
  }
  if (app->cache) jb_cache_invalidate(app->cache, job);
  jb_op_session_changed(job);
  jb_bus_publish(
      app->bus, job, JB_EVENT_STATE,
      json_pack("{s:s,s:s,s:s,s:s,s:s,s:I}", "jobId", job, "state", t.state, "previous", t.previous,
                "reason", reason, "actor", "system", "rejectedOps", (json_int_t)t.rejected_ops));
  jb_bus_publish(app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&t.head));
  jb_log(JB_LOG_INFO, "session expired", "jobId", job, "reason", reason, "from", t.previous, NULL);
}

static void sweep(struct jb_sweeper *s, bool first) {
  struct jb_app *app = s->app;
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) return; /* the database is away: next time */
  char *text = NULL;
  if (jb_db_sessions_expired(c, app->cfg->session_lifetime_s, app->cfg->idle_timeout_s, &text,
                             &err) == JB_OK) {
    json_t *a = json_loads(text, 0, NULL);
    size_t i;
    json_t *e;
    json_array_foreach (a, i, e)
      expire(app, c, json_string_value(json_object_get(e, "jobId")),
             json_string_value(json_object_get(e, "reason")));
    json_decref(a);
  } else {
    jb_log(JB_LOG_WARN, "sweeper: expiry query failed", "detail", err.msg, NULL);
  }
  free(text);
  text = NULL;
  /* at start every unsealed ended session; then the last hour's */
  if (jb_db_sessions_unsealed(c, 3, first ? 0 : 3600, &text, &err) == JB_OK) {
    json_t *a = json_loads(text, 0, NULL);
    size_t i;
    json_t *e;
    json_array_foreach (a, i, e) {
      const char *job = json_string_value(e);
      struct jb_finish_out fo;
      if (jb_db_session_finish(c, jb_signer_key(app->signer), job, NULL, &fo, &err) == JB_OK &&
          fo.sealed_now) {
        jb_bus_publish_list(app->bus, job, &fo.events);
        if (app->cache) jb_cache_invalidate(app->cache, job);
        jb_log(JB_LOG_WARN, "sweeper: sealed a chain a crash left open", "jobId", job, NULL);
      }
    }
    json_decref(a);
  }
  free(text);
  /* the op counters' changes stay few without a scrape of /metrics too */
  if (jb_now_ms() - s->folded_ms >= FOLD_EVERY_MS) {
    s->folded_ms = jb_now_ms();
    if (jb_db_op_counts_fold(c, NULL, &err) != JB_OK)
      jb_log(JB_LOG_WARN, "sweeper: folding the op counters failed", "detail", err.msg, NULL);
    long long cleared = 0;
    if (jb_db_ops_forget_previews(c, app->cfg->buyer_read_retention_s, FORGET_BATCH, &cleared,
                                  &err) != JB_OK)
      jb_log(JB_LOG_WARN, "sweeper: clearing old diff previews failed", "detail", err.msg, NULL);
    else if (cleared > 0) {
      char n[24];
      snprintf(n, sizeof n, "%lld", cleared);
      jb_log(JB_LOG_INFO, "sweeper: cleared diff previews past their retention", "ops", n, NULL);
    }
  }
  jb_db_release(app->db, c);
}

static void *sweeper_main(void *arg) {
  struct jb_sweeper *s = arg;
  bool first = true;
  pthread_mutex_lock(&s->lock);
  while (!s->stop) {
    pthread_mutex_unlock(&s->lock);
    sweep(s, first);
    first = false;
    pthread_mutex_lock(&s->lock);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 500 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    if (!s->stop) pthread_cond_timedwait(&s->cond, &s->lock, &ts);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

int jb_sweeper_start(struct jb_app *app, struct jb_sweeper **out, jb_error *err) {
  struct jb_sweeper *s = calloc(1, sizeof *s);
  if (!s) return jb_fail(err, ENOMEM, "out of memory");
  s->app = app;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  if (pthread_create(&s->thread, NULL, sweeper_main, s) != 0) {
    free(s);
    return jb_fail(err, EAGAIN, "cannot start the sweeper thread");
  }
  *out = s;
  return 0;
}

void jb_sweeper_stop(struct jb_sweeper *s) {
  if (!s) return;
  pthread_mutex_lock(&s->lock);
  s->stop = true;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
}
