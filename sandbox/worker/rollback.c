/* rollback.c — a rollback job (launch_jobs kind 'rollback', payload {to?, force?, by,
 * reason?}; queued by jailboxd, ROLLBACK.md): the session's pre-image rows newer than `to`
 * restored newest first (rollback_restore.h), each marked rolled_back_by as soon as it is
 * restored, so that a rollback killed half-way and claimed again finishes the rest; then one
 * audit entry `rollback`, the job's result and the event jailbox:rollback. Also the end of a
 * session's blobs: when it is accepted, and JAILBOX_PREIMAGE_RETENTION_S after it ended. A
 * rollback on escape (JAILBOX_ROLLBACK_ON_ESCAPE, db/escape_rollback.h) restores no row past
 * its time and seals the chain once its entry is in it, whether it restored or failed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/escape.h"
#include "db/escape_rollback.h"
#include "db/launch_jobs.h"
#include "db/preimages.h"
#include "lib/metrics.h"
#include "lib/treehash.h"
#include "sandbox/worker/grant_mask.h"
#include "sandbox/worker/preimage_op.h"
#include "sandbox/worker/rollback_restore.h"
#include "sandbox/worker/worker.h"

#define FILES_LISTED 1000 /* files listed in the audit entry at most */

json_t *worker_tree_hash(struct jb_worker *w, const char *job, int rootfd) {
  char hex[65] = "";
  const char *why = NULL;
  jb_error err = {0};
  /* a live session's workspace holds its grant's bits: hashed without them (grant_mask.h) */
  struct jb_grant_mask m;
  pthread_mutex_lock(&w->lock);
  struct jb_session *s = session_find(w, job);
  int mrc = jb_grant_mask_init(&m, s ? &s->grant : NULL);
  pthread_mutex_unlock(&w->lock);
  if (mrc < 0) {
    slog(w, JB_LOG_WARN, job, "no tree hash", "why", "out of memory", NULL);
    return json_null();
  }
  struct jb_tree_hash_limits lim = w->tree_hash;
  lim.mode_of = jb_grant_mask_mode;
  lim.mode_ctx = &m;
  int rc = jb_tree_hash_at(rootfd, &lim, hex, &why, &err);
  jb_grant_mask_free(&m);
  if (rc == 0) return json_string(hex);
  slog(w, JB_LOG_WARN, job, "no tree hash", "why", rc < 0 ? err.msg : why, NULL);
  return json_null();
}

/* What a run of a rollback keeps. */
struct run {
  struct jb_worker *w;
  const struct jb_launch_job *j;
  bool force;
  long long room; /* bytes a forced restore may still keep */
  json_t *files; /* [{path, restored:{kind, sha256?}, outcome, detail?}] */
  long long restored, conflicts, failed;
  bool cut; /* the worker stops: the job is left claimed, to be run again */
  long long deadline; /* jb_now_ms() past which no row is restored; 0: none */
  bool timed_out; /* stopped at the deadline: the job fails "timeout" */
};

/* The entry of row `row`'s file in the entry's list (new). */
static json_t *file_entry(json_t *row, enum jb_restore_outcome o, const char *detail) {
  json_t *r = json_pack("{s:O}", "kind", json_object_get(row, "kind"));
  if (json_is_string(json_object_get(row, "sha256")))
    json_object_set(r, "sha256", json_object_get(row, "sha256"));
  json_t *f = json_pack("{s:O, s:o, s:s}", "path", json_object_get(row, "path"), "restored", r,
                        "outcome", jb_restore_outcome_name(o));
  if (f && detail[0]) json_object_set_new(f, "detail", json_string(detail));
  return f;
}

/* What a run's forced restore passes to keep_row. */
struct keep_ctx {
  struct run *r;
  PGconn *c;
};

/* A forced restore's keep (rollback_restore.h): what it is about to overwrite at row `row`'s
 * path, stored at once as a row of this rollback (rollback_id; committed before the path is
 * overwritten: a rollback killed right after has it recorded, and its blob's bytes counted). */
static int keep_row(void *ctx, json_t *row, const struct jb_pstore_item *kept) {
  struct keep_ctx *k = ctx;
  json_t *x = json_pack("{s:O, s:s, s:I}", "path", json_object_get(row, "path"), "kind",
                        jb_pstore_kind_name(kept->kind), "bytes", (json_int_t)kept->bytes);
  if (x && kept->kind == JB_PSTORE_FILE)
    json_object_set_new(x, "sha256", json_string(kept->sha256));
  if (x && kept->kind != JB_PSTORE_LINK) json_object_set_new(x, "mode", json_integer(kept->mode));
  if (x && kept->kind == JB_PSTORE_LINK)
    json_object_set_new(x, "target", json_string(kept->target));
  json_t *one = x ? json_pack("[o]", x) : NULL;
  jb_error err = {0};
  int rc = one && jb_db_preimages_insert(k->c, k->r->j->job_id, 0, k->r->j->id, one, &err) == JB_OK
               ? 0
               : -1;
  if (rc < 0) slog(k->r->w, JB_LOG_WARN, k->r->j->job_id, err.msg, "step", "keep forced", NULL);
  json_decref(one);
  if (rc == 0) k->r->room -= kept->bytes;
  return rc;
}

/* Restores every row of `rows` (newest first) in the workspace open on `rootfd`, marking each
 * restored one on `c`. */
static void restore_all(struct run *r, PGconn *c, int rootfd, json_t *rows) {
  size_t i;
  json_t *row;
  struct keep_ctx kc = {.r = r, .c = c};
  json_array_foreach (rows, i, row) {
    if (atomic_load(&r->w->stopping)) {
      r->cut = true;
      return;
    }
    if (r->deadline > 0 && jb_now_ms() >= r->deadline) {
      r->timed_out = true; /* the rows left are not listed: the entry says how many were */
      return;
    }
    char detail[400] = "";
    enum jb_restore_outcome o = JB_RESTORED;
    struct jb_pstore_item kept = {.kind = JB_PSTORE_ABSENT};
    if (!json_is_true(json_object_get(row, "done")))
      o = jb_rollback_restore(r->w->preimage_dir, r->j->job_id, rootfd, row, r->force, r->room,
                              keep_row, &kc, &kept, detail, sizeof detail);
    jb_error err = {0};
    if (o == JB_RESTORED && !json_is_true(json_object_get(row, "done")) &&
        jb_db_preimage_mark(c, r->j->job_id, json_integer_value(json_object_get(row, "seq")),
                            r->j->id, &err) != JB_OK)
      slog(r->w, JB_LOG_WARN, r->j->job_id, err.msg, "step", "mark restored", NULL);
    if (o == JB_RESTORED && worker_test_fault(r->w, r->j->job_id, "rollback_midway"))
      _exit(86); /* tests/node/rollback_worker.test.mjs: the job is claimed again and finishes */
    r->restored += o == JB_RESTORED;
    r->conflicts += o == JB_CONFLICT;
    r->failed += o == JB_RESTORE_FAILED;
    json_array_append_new(r->files, file_entry(row, o, detail));
  }
}

/* The audit details of the run: {rollbackId, to, force, actor, reason?, files (first
 * FILES_LISTED), filesCount, filesSha256, restored, conflicts, failed, treeBefore, treeAfter}
 * (new). filesSha256: SHA-256 of the JSON lines (JSON_COMPACT | JSON_SORT_KEYS, each ended by
 * "\n") of every file. */
static json_t *details_of(struct run *r, json_t *payload, json_t *before, json_t *after) {
  json_t *listed = json_array(), *f;
  size_t i;
  json_array_foreach (r->files, i, f)
    if (i < FILES_LISTED) json_array_append(listed, f);
  char hex[65];
  preimage_lines_sha256(r->files, hex);
  json_t *to = json_object_get(payload, "to");
  json_t *d =
      json_pack("{s:I, s:O, s:b, s:s, s:o, s:I, s:s, s:I, s:I, s:I, s:O, s:O}", "rollbackId",
                (json_int_t)r->j->id, "to", json_is_integer(to) ? to : json_null(), "force",
                r->force, "actor", json_string_value(json_object_get(payload, "by")) ?: "buyer",
                "files", listed, "filesCount", (json_int_t)json_array_size(r->files), "filesSha256",
                hex, "restored", (json_int_t)r->restored, "conflicts", (json_int_t)r->conflicts,
                "failed", (json_int_t)r->failed, "treeBefore", before, "treeAfter", after);
  const char *reason = json_string_value(json_object_get(payload, "reason"));
  if (d && reason) json_object_set_new(d, "reason", json_string(reason));
  if (d && r->timed_out) json_object_set_new(d, "error", json_string("timeout"));
  return d;
}

/* Ends the job: the entry, the result (ok: done, else failed with `error`), the event. */
static void finish(struct run *r, PGconn *c, json_t *details, bool ok, const char *error) {
  struct jb_audit_head head;
  jb_error err = {0};
  json_t *result = json_deep_copy(details);
  int rc = result ? jb_db_rollback_finish(c, jb_signer_key(r->w->signer), r->j->job_id, r->j->id,
                                          details, result, ok, error, &head, &err)
                  : jb_fail(&err, ENOMEM, "out of memory");
  if (rc != JB_OK) {
    slog(r->w, JB_LOG_ERROR, r->j->job_id, err.msg, "step", "finish rollback", NULL);
  } else {
    if (head.seq > 0)
      worker_publish(r->w, c, r->j->job_id, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
    worker_publish(r->w, c, r->j->job_id, JB_EVENT_ROLLBACK,
                   json_pack("{s:s, s:I, s:s, s:I, s:I}", "jobId", r->j->job_id, "rollbackId",
                             (json_int_t)r->j->id, "state", ok ? "done" : "failed", "restored",
                             (json_int_t)r->restored, "conflicts", (json_int_t)r->conflicts));
  }
  json_decref(result);
}

/* A rollback on escape (db/escape_rollback.h) has ended: seals the chain its entry went into
 * and publishes what the seal made. When it cannot, jailboxd's sweeper seals it. */
static void escape_seal_after(struct jb_worker *w, PGconn *c, const char *job) {
  jb_error err = {0};
  struct jb_finish_out fin = {0};
  if (jb_db_session_finish(c, jb_signer_key(w->signer), job, NULL, &fin, &err) != JB_OK) {
    slog(w, JB_LOG_ERROR, job, err.msg, "step", "seal after the rollback (the sweeper retries)",
         NULL);
    return;
  }
  worker_publish_list(w, c, job, &fin.events);
  slog(w, JB_LOG_INFO, job,
       fin.sealed_now ? "escape: sealed after the rollback" : "seal: nothing to do", NULL);
}

/* Whether job `j` is a rollback on escape; then r->deadline is set (a fifth of its time left
 * in hand, so that the restore in progress ends before jailboxd's sweeper seals). */
static bool escape_deadline(struct run *r, PGconn *c) {
  long long left = 0;
  jb_error err = {0};
  int rc = jb_db_escape_rollback_of(c, r->j->job_id, r->j->id, &left, &err);
  if (rc < 0) slog(r->w, JB_LOG_WARN, r->j->job_id, err.msg, "step", "escape rollback", NULL);
  if (rc != 1) return false;
  r->deadline = jb_now_ms() + left - left / 5;
  if (r->deadline <= jb_now_ms()) r->deadline = 1; /* no time left: restore nothing */
  return true;
}

void escape_rollback_wait(struct jb_worker *w, const char *job) {
  if (!w->set.rollback_on_escape) return;
  bool waited = false;
  for (;;) {
    long long left = 0;
    jb_error err = {0};
    int rc;
    {
      cleanup_conn struct worker_conn conn = worker_conn(w, &err);
      rc = conn.pg ? jb_db_escape_rollback_waiting(conn.pg, job, &left, &err) : -1;
    }
    if (rc < 0) slog(w, JB_LOG_WARN, job, err.msg, "step", "wait for the rollback on escape", NULL);
    if (rc != 1 || left <= 0 || atomic_load(&w->stopping)) break;
    waited = true;
    usleep(50 * 1000);
  }
  if (waited) slog(w, JB_LOG_INFO, job, "the rollback on escape has ended", NULL);
}

static void rollback_run(struct jb_worker *w, const struct jb_launch_job *j) {
  jb_error err = {0};
  cleanup_conn struct worker_conn conn = worker_conn(w, &err);
  if (!conn.pg) {
    slog(w, JB_LOG_ERROR, j->job_id, err.msg, "step", "rollback", NULL);
    return; /* stays claimed: queued again when this worker restarts */
  }
  json_t *payload = json_loads(j->payload_json, 0, NULL);
  json_t *to = json_object_get(payload, "to");
  struct run r = {.w = w, .j = j, .force = json_is_true(json_object_get(payload, "force"))};
  r.files = json_array();
  bool escape = escape_deadline(&r, conn.pg);
  if (escape && worker_test_fault(w, j->job_id, "escape_rollback_stall")) /* past its time */
    usleep((useconds_t)(r.deadline > jb_now_ms() ? r.deadline - jb_now_ms() + 3000 : 3000) * 1000);
  long long used = 0;
  bool gone = false, sealed = false;
  json_t *rows =
      jb_db_rollback_rows(conn.pg, j->job_id, json_is_integer(to) ? json_integer_value(to) : -1,
                          j->id, &gone, &sealed, &err);
  jb_db_preimage_bytes(conn.pg, j->job_id, &used, NULL);
  r.room = w->set.preimage_max_bytes - used;
  int rootfd = open(j->workspace, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (!rows || gone || sealed || rootfd < 0 || !jb_pstore_job_ok(j->job_id)) {
    const char *why = !rows    ? err.msg
                      : gone   ? "preimages_gone"
                      : sealed ? "chain_sealed"
                               : "the workspace cannot be opened";
    slog(w, JB_LOG_WARN, j->job_id, "rollback failed", "error", why, NULL);
    json_t *d =
        json_pack("{s:I, s:O, s:b, s:s, s:s}", "rollbackId", (json_int_t)j->id, "to",
                  json_is_integer(to) ? to : json_null(), "force", r.force, "actor",
                  json_string_value(json_object_get(payload, "by")) ?: "buyer", "error", why);
    finish(&r, conn.pg, d, false, why);
    json_decref(d);
  } else {
    json_t *before = worker_tree_hash(w, j->job_id, rootfd);
    restore_all(&r, conn.pg, rootfd, rows);
    json_t *after = r.cut ? NULL : worker_tree_hash(w, j->job_id, rootfd);
    json_t *details = r.cut ? NULL : details_of(&r, payload, before, after);
    if (details) finish(&r, conn.pg, details, !r.timed_out, r.timed_out ? "timeout" : NULL);
    slog(w, JB_LOG_INFO, j->job_id,
         r.cut         ? "rollback cut short by the stop"
         : r.timed_out ? "rollback stopped: its time before the escape seal is up"
                       : "rollback done",
         NULL);
    json_decref(details);
    json_decref(before);
    json_decref(after);
  }
  if (rootfd >= 0) close(rootfd);
  if (escape && !r.cut) escape_seal_after(w, conn.pg, j->job_id); /* done or failed: sealed */
  json_decref(rows);
  json_decref(r.files);
  json_decref(payload);
}

struct rollback_thread {
  struct jb_worker *w;
  struct jb_launch_job j;
};

static void *rollback_main(void *arg) {
  struct rollback_thread *t = arg;
  rollback_run(t->w, &t->j);
  atomic_fetch_sub(&t->w->rollbacks, 1);
  jb_launch_job_free(&t->j);
  free(t);
  return NULL;
}

void rollback_start(struct jb_worker *w, struct jb_launch_job *j) {
  struct rollback_thread *t = malloc(sizeof *t);
  pthread_attr_t attr;
  bool started = false;
  if (t && pthread_attr_init(&attr) == 0) {
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    *t = (struct rollback_thread){.w = w, .j = *j};
    atomic_fetch_add(&w->rollbacks, 1);
    pthread_t th;
    started = pthread_create(&th, &attr, rollback_main, t) == 0;
    pthread_attr_destroy(&attr);
    if (!started) atomic_fetch_sub(&w->rollbacks, 1);
  }
  if (!started) { /* no thread: run here */
    free(t);
    rollback_run(w, j);
    return;
  }
  memset(j, 0, sizeof *j); /* its allocations are the thread's now */
}

void rollbacks_wait(struct jb_worker *w, long ms) {
  for (long waited = 0; atomic_load(&w->rollbacks) > 0 && waited < ms; waited += 10)
    usleep(10 * 1000);
}

void preimages_drop(struct jb_worker *w, const char *job) {
  jb_error err = {0};
  if (jb_pstore_drop(w->preimage_dir, job, &err) < 0) {
    slog(w, JB_LOG_WARN, job, err.msg, "step", "drop pre-images", NULL);
    return;
  }
  cleanup_conn struct worker_conn conn = worker_conn(w, &err);
  if (!conn.pg || jb_db_preimages_gone(conn.pg, job, &err) != JB_OK)
    slog(w, JB_LOG_WARN, job, err.msg, "step", "pre-images gone", NULL);
  else
    slog(w, JB_LOG_INFO, job, "pre-images dropped", NULL);
}

void preimages_sweep(struct jb_worker *w, long long *last) {
  long long now = jb_now_ms();
  if (now - *last < 60000) return; /* once a minute */
  *last = now;
  jb_error err = {0};
  json_t *due = NULL;
  {
    cleanup_conn struct worker_conn conn = worker_conn(w, &err);
    due = conn.pg ? jb_db_preimages_due(conn.pg, w->set.preimage_retention_s, 100, &err) : NULL;
  }
  if (!due) {
    slog(w, JB_LOG_WARN, NULL, err.msg, "step", "pre-images due", NULL);
    return;
  }
  size_t i;
  json_t *job;
  json_array_foreach (due, i, job) preimages_drop(w, json_string_value(job));
  json_decref(due);
}
