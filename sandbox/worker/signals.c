/* signals.c — the worker's side of the escape policy (lib/escape_policy.h): a security signal
 * of a session (from the shim's answers, the sandbox's end, or a protocol violation) is either
 * counted, alerting every N-th time, or aborts the session — its container killed and removed,
 * its pending ops rejected and its chain sealed (db/escape.h), with JAILBOX_ROLLBACK_ON_ESCAPE
 * after a rollback of the session's changes (rollback.c) — and jb_kill, the abort's kill of a
 * container for jailboxd. */
#include <stdio.h>

#include "db/escape.h"
#include "db/escape_rollback.h"
#include "sandbox/worker/worker.h"

/* Counts signal `name` of `job`; *count tells whether it alerted. */
static int signal_count(struct jb_worker *w, const char *job, const char *name, const char *detail,
                        long every, struct jb_count_out *count, jb_error *err) {
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  if (!conn.pg) return JB_ERR_FAIL;
  int rc =
      jb_db_signal_count(conn.pg, jb_signer_key(w->signer), job, name, detail, every, count, err);
  if (rc == JB_OK) worker_publish_list(w, conn.pg, job, &count->events);
  return rc;
}

/* Aborts `job` for escape signal `name` (escape_detected; alert, trust score). */
static int escape_abort(struct jb_worker *w, const char *job, const char *name, const char *detail,
                        struct jb_escape_out *out, jb_error *err) {
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  if (!conn.pg) return JB_ERR_FAIL;
  return jb_db_escape_abort(conn.pg, jb_signer_key(w->signer), job, name, detail,
                            w->policy.trust_penalty, out, err);
}

/* Seals the chain of `job`, aborted from `previous`, once its container is gone — unless the
 * seal waits for a rollback on escape (*waits; the rollback's run seals after it). */
static int escape_seal(struct jb_worker *w, const char *job, const char *previous, bool *waits,
                       jb_error *err) {
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  if (!conn.pg) return JB_ERR_FAIL;
  struct jb_finish_out fin = {0};
  int rc = jb_db_session_finish(conn.pg, jb_signer_key(w->signer), job, previous, &fin, err);
  if (rc == JB_OK) worker_publish_list(w, conn.pg, job, &fin.events);
  *waits = rc == JB_OK && fin.rollback_pending;
  return rc;
}

void escape_rollback_queue(struct jb_worker *w, const char *job) {
  if (!w->set.rollback_on_escape) return;
  jb_error err = {0};
  long long id = 0;
  {
    cleanup_conn struct worker_conn conn = worker_conn(w, &err);
    if (!conn.pg || jb_db_escape_rollback_queue(conn.pg, job, w->set.rollback_on_escape_timeout_s,
                                                &id, &err) != JB_OK) {
      slog(w, JB_LOG_ERROR, job, err.msg, "step", "queue rollback on escape (sealed without it)",
           NULL);
      return;
    }
  }
  if (id <= 0) return; /* nothing to undo, or queued already */
  char ids[24];
  snprintf(ids, sizeof ids, "%lld", id);
  slog(w, JB_LOG_WARN, job, "escape: rollback queued, the seal waits for it", "rollbackId", ids,
       NULL);
}

void raise_signal(struct jb_worker *w, const char *job, enum jb_signal kind, const char *detail) {
  const char *name = jb_signal_name(kind);
  jb_error err = {0};
  if (!w->policy.abort[kind]) {
    long every = w->policy.alert_after[kind];
    if (every <= 0) return;
    struct jb_count_out count = {0};
    int rc = signal_count(w, job, name, detail, every, &count, &err);
    if (rc == JB_OK && count.alerted)
      slog(w, JB_LOG_WARN, job, "security alert", "kind", name, "detail", detail, NULL);
    else if (rc == JB_ERR_FAIL)
      slog(w, JB_LOG_ERROR, job, err.msg, "step", "count signal", "kind", name, NULL);
    return;
  }
  /* the container's end is no longer news to the session's watcher */
  char cid[80];
  session_mark_ending(w, job, false, cid);
  struct jb_escape_out out = {0};
  int rc = escape_abort(w, job, name, detail, &out, &err);
  if (rc != JB_OK) {
    if (rc == JB_ERR_FAIL)
      slog(w, JB_LOG_ERROR, job, err.msg, "step", "escape abort", "kind", name, NULL);
    return;
  }
  slog(w, JB_LOG_WARN, job, "escape detected: session aborted", "kind", name, "detail", detail,
       "from", out.previous, NULL);
  escape_rollback_queue(w, job); /* before the seal below can be made */
  if (cid[0] && jb_container_remove(&w->walls, cid, &err) < 0)
    slog(w, JB_LOG_WARN, job, "escape: container remove failed", "error", err.msg, NULL);
  session_remove_containers(w, job);
  if (cid[0] && !container_gone(w, cid, 1500))
    slog(w, JB_LOG_WARN, job, "escape: the container is still there; sealing anyway", "container",
         cid, NULL);
  bool waits = false;
  if (escape_seal(w, job, out.previous, &waits, &err) != JB_OK)
    slog(w, JB_LOG_ERROR, job, err.msg, "step", "escape seal (jailboxd's sweeper retries)", NULL);
  else if (waits)
    slog(w, JB_LOG_INFO, job, "escape: the seal waits for the rollback", NULL);
}

void raise_alert_now(struct jb_worker *w, const char *job, enum jb_signal kind,
                     const char *detail) {
  if (w->policy.abort[kind]) {
    raise_signal(w, job, kind, detail);
    return;
  }
  jb_error err = {0};
  struct jb_count_out count = {0};
  int rc = signal_count(w, job, jb_signal_name(kind), detail, 1, &count, &err);
  if (rc == JB_OK && count.alerted)
    slog(w, JB_LOG_WARN, job, "security alert", "kind", jb_signal_name(kind), "detail", detail,
         NULL);
  else if (rc == JB_ERR_FAIL)
    slog(w, JB_LOG_ERROR, job, err.msg, "step", "count signal", "kind", jb_signal_name(kind), NULL);
}

void kill_for_abort(struct jb_worker *w, const char *job) {
  /* an escape jailboxd caught sends this after its abort: the rollback is queued before the
   * kill, so that the session's thread waits for it before it gives the workspace back */
  escape_rollback_queue(w, job);
  char cid[80];
  session_mark_ending(w, job, true, cid);
  if (!cid[0]) return;
  jb_error err = {0};
  if (jb_container_remove(&w->walls, cid, &err) < 0)
    slog(w, JB_LOG_WARN, job, "abort: container remove failed", "error", err.msg, NULL);
  else
    slog(w, JB_LOG_INFO, job, "abort: container killed", "container", cid, NULL);
}
