/* changeset_apply.c — the approved rows of a changeset applied on the host (see changeset.h).
 * Each row is one path made what the command left there, with the primitive a rollback puts a
 * pre-image back with (rollback_restore.h): the path must hold still what it held when the
 * command ran (old_*; else a conflict, left alone), and is written atomically beneath the
 * workspace root, never through a link. An apply killed half-way leaves the op approved; the
 * next claim applies every row again, and a row already applied is found so and counted applied
 * (its pre-image is the row's old state, known from the changeset, not read again). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db/changesets.h"
#include "db/preimages.h"
#include "sandbox/worker/changeset.h"
#include "sandbox/worker/hostfs.h"
#include "sandbox/worker/walls.h"
#include "sandbox/worker/workspace_access.h"
#include "sandbox/worker/preimage_op.h"
#include "sandbox/worker/rollback_restore.h"
#include "sandbox/worker/worker.h"

#define FILES_LISTED 1000 /* files named in the audit entry at most */

static const char *str(json_t *r, const char *k) {
  return json_string_value(json_object_get(r, k));
}

/* The mode an applied row leaves: a file's without its set-ID bits (rollback_restore.c). */
static json_t *applied_mode(json_t *r) {
  json_t *m = json_object_get(r, "newMode");
  if (!json_is_integer(m)) return json_null();
  long long v = json_integer_value(m);
  return json_integer(!strcmp(str(r, "newType") ?: "", "file") ? (v & 01777) : v);
}

/* Changeset row `r` as the restore row that makes its path what the command left. */
static json_t *restore_row(json_t *r) {
  json_t *x = json_pack(
      "{s:O, s:O, s:O*, s:O*, s:O*, s:O*, s:O*, s:O*}", "path", json_object_get(r, "path"), "kind",
      json_object_get(r, "newType"), "sha256", json_object_get(r, "newSha256"), "mode",
      json_object_get(r, "newMode"), "target", json_object_get(r, "newTarget"), "afterKind",
      json_object_get(r, "oldType"), "afterSha256", json_object_get(r, "oldSha256"), "afterMode",
      json_object_get(r, "oldMode"));
  /* an entry the command made (none was there, or one of another kind): the jail's own, as it
   * would be had the command written the workspace itself — so that the session's next
   * commands may change it, and the grant's undo gives it an owner at the session's end */
  const char *otype = str(r, "oldType") ?: "";
  if (x && (!strcmp(otype, "absent") || !strcmp(str(r, "change") ?: "", "type"))) {
    json_object_set_new(x, "uid", json_integer(JB_JAIL_UID));
    json_object_set_new(x, "gid", json_integer(JB_JAIL_GID));
  }
  return x;
}

/* The bytes the pre-image of row `r` counts in the session's budget: its old file's blob as
 * the store counts a new one (jb_pstore_cost of its size; the rows keep no more). */
static long long old_bytes(json_t *r) {
  return !strcmp(str(r, "oldType") ?: "", "file")
             ? jb_pstore_cost(json_integer_value(json_object_get(r, "oldSize")))
             : 0;
}

/* Changeset row `r` as the pre-image row a rollback puts back (its old state). */
static json_t *preimage_row(json_t *r) {
  json_t *x = json_pack(
      "{s:O, s:O, s:O*, s:O*, s:O*, s:o, s:O*, s:O*, s:o}", "path", json_object_get(r, "path"),
      "kind", json_object_get(r, "oldType"), "sha256", json_object_get(r, "oldSha256"), "mode",
      json_object_get(r, "oldMode"), "target", json_object_get(r, "oldTarget"), "bytes",
      json_integer(old_bytes(r)), "afterKind", json_object_get(r, "newType"), "afterSha256",
      json_object_get(r, "newSha256"), "afterMode", applied_mode(r));
  return x;
}

static bool deletion(json_t *r) { return !strcmp(str(r, "newType") ?: "", "absent"); }

/* The order rows are applied in: deletions deepest first, then the rest parents first (rows
 * come in path order, and a folder's path sorts before its entries'). A new array (borrowed
 * members). */
static json_t *apply_order(json_t *rows) {
  json_t *o = json_array();
  for (size_t i = json_array_size(rows); i-- > 0;)
    if (deletion(json_array_get(rows, i))) json_array_append(o, json_array_get(rows, i));
  for (size_t i = 0; i < json_array_size(rows); i++)
    if (!deletion(json_array_get(rows, i))) json_array_append(o, json_array_get(rows, i));
  return o;
}

/* A row that changes what a path is (a folder into a file, a file into a link…): the path
 * is first checked to hold still what it held when the command ran (its kind, content and
 * mode; a folder must be empty by now, its entries' deletions applied before) and removed, so
 * that restore row `x` then makes the new entry where nothing is (its afterKind made absent).
 * A path already cleared (an apply killed after the removal) is found absent and goes on. */
static enum jb_restore_outcome clear_for_type(const char *job, int rootfd, json_t *r, json_t *x,
                                              char *detail, size_t dsize) {
  struct jb_pstore_item now;
  jb_error e = {0};
  const char *path = str(r, "path"), *otype = str(r, "oldType") ?: "";
  if (jb_pstore_take(NULL, job, rootfd, path, -1, &now, &e) < 0)
    return snprintf(detail, dsize, "%s", e.msg), JB_RESTORE_FAILED;
  json_t *om = json_object_get(r, "oldMode");
  bool same = jb_restore_holds(&now, otype, str(r, "oldSha256") ?: "",
                               json_is_integer(om) ? (long long)json_integer_value(om) : -1,
                               str(r, "oldTarget") ?: "");
  if (!same && now.kind != JB_PSTORE_ABSENT) {
    snprintf(detail, dsize, "changed since the command (now %s)", jb_pstore_kind_name(now.kind));
    return JB_CONFLICT;
  }
  if (same) {
    const char *name;
    int pfd = jb_hostfs_open_parent(rootfd, path, &name);
    int rc = pfd < 0 ? -1 : unlinkat(pfd, name, now.kind == JB_PSTORE_DIR ? AT_REMOVEDIR : 0);
    if (rc < 0) snprintf(detail, dsize, "removing what was there: %s", strerror(errno));
    if (pfd >= 0) close(pfd);
    if (rc < 0) return JB_RESTORE_FAILED;
  }
  json_object_set_new(x, "afterKind", json_string("absent"));
  json_object_del(x, "afterSha256");
  json_object_del(x, "afterMode");
  return JB_RESTORED;
}

static double ms_between(const struct timespec *a, const struct timespec *b) {
  return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

/* What one apply keeps. */
struct apply {
  json_t *outcomes; /* [{idx, outcome, detail?}] */
  json_t *files; /* the audit entry's list */
  json_t *pre; /* pre-image rows of the applied rows */
  json_t *conflicts, *failed; /* [{path, detail}] */
  long long applied;
};

/* Records row `r`'s outcome `o` (with `detail`) in `a`: its outcome row, its line in the
 * audit entry, its pre-image rows when applied, or its conflict or failure. */
static void record(struct apply *a, json_t *r, enum jb_restore_outcome o, const char *detail) {
  const char *name = o == JB_RESTORED ? "applied" : o == JB_CONFLICT ? "conflict" : "failed";
  json_t *oc = json_pack("{s:O, s:s}", "idx", json_object_get(r, "idx"), "outcome", name);
  if (oc && detail[0]) json_object_set_new(oc, "detail", json_string(detail));
  json_array_append_new(a->outcomes, oc);
  json_array_append_new(
      a->files,
      json_pack("{s:O, s:O, s:O*, s:O*, s:s}", "path", json_object_get(r, "path"), "change",
                json_object_get(r, "change"), "oldSha256", json_object_get(r, "oldSha256"),
                "newSha256", json_object_get(r, "newSha256"), "outcome", name));
  if (o != JB_RESTORED) {
    json_array_append_new(o == JB_CONFLICT ? a->conflicts : a->failed,
                          json_pack("{s:O, s:s}", "path", json_object_get(r, "path"), "detail",
                                    detail[0] ? detail : "not applied"));
    return;
  }
  a->applied++;
  json_t *pr = preimage_row(r);
  if (pr && !strcmp(str(r, "change"), "type")) { /* two steps back: the new entry removed, then
                                                    the old one made where nothing is */
    json_t *second = json_pack(
        "{s:O, s:s, s:i, s:O, s:O*, s:O*}", "path", json_object_get(r, "path"), "kind", "absent",
        "bytes", 0, "afterKind", json_object_get(pr, "afterKind"), "afterSha256",
        json_object_get(pr, "afterSha256"), "afterMode", json_object_get(pr, "afterMode"));
    json_object_set_new(pr, "afterKind", json_string("absent"));
    json_object_del(pr, "afterSha256");
    json_object_del(pr, "afterMode");
    json_array_append_new(a->pre, pr);
    pr = second;
  }
  json_array_append_new(a->pre, pr);
}

#define STAGED_MAX 256 /* files written beside their paths before one sync, at most */

/* One row's place in an apply: its restore row, what was staged for it, its outcome. */
struct slot {
  json_t *x; /* restore_row */
  struct jb_restore_staged st;
  enum jb_restore_outcome o;
  char detail[400];
  bool staged;
};

/* The staged files of slots [from, to) made durable together and put in place, then synced
 * again. */
static void flush(struct jb_worker *w, const char *job, int rootfd, struct slot *sl, size_t from,
                  size_t to, bool *fired) {
  if (syncfs(rootfd) < 0)
    for (size_t k = from; k < to; k++)
      if (sl[k].staged) jb_restore_staged_drop(&sl[k].st);
  for (size_t k = from; k < to; k++) {
    if (!sl[k].staged) continue;
    sl[k].staged = false;
    if (sl[k].st.pfd < 0 && sl[k].o == JB_RESTORED) { /* dropped: the sync failed */
      sl[k].o = JB_RESTORE_FAILED;
      snprintf(sl[k].detail, sizeof sl[k].detail, "syncfs: %s", strerror(EIO));
      continue;
    }
    sl[k].o = jb_restore_finish(job, rootfd, sl[k].x, &sl[k].st, sl[k].detail, sizeof sl[k].detail);
    if (!*fired && sl[k].o == JB_RESTORED) {
      *fired = true;
      if (worker_test_fault(w, job, "cs_after_first_file"))
        _exit(86); /* tests/node/changeset.test.mjs: the op is claimed again and finishes */
    }
  }
  (void)syncfs(rootfd);
}

/* Applies each row of `order` in the workspace open on `rootfd`: a file's new content staged
 * beside its path and put in place in groups of STAGED_MAX with a sync before and after each
 * group (rollback_restore.h), any other row at once, in order (a folder before what goes in
 * it, deletions first). The outcomes are recorded in `order`'s order. */
static void apply_rows(struct jb_worker *w, const char *job, int rootfd, json_t *order,
                       struct apply *a) {
  size_t n = json_array_size(order), pending_from = 0, held = 0;
  struct slot *sl = calloc(n ? n : 1, sizeof *sl);
  if (!sl) return;
  bool fired = false;
  for (size_t i = 0; i < n; i++) {
    json_t *r = json_array_get(order, i);
    sl[i].x = restore_row(r);
    sl[i].st.pfd = -1;
    bool file = !strcmp(str(r, "newType") ?: "", "file") && strcmp(str(r, "change"), "type");
    if (!sl[i].x) {
      sl[i].o = JB_RESTORE_FAILED;
    } else if (file) {
      sl[i].o = jb_restore_stage(w->preimage_dir, job, rootfd, sl[i].x, &sl[i].st, sl[i].detail,
                                 sizeof sl[i].detail);
      sl[i].staged = sl[i].o == JB_RESTORED && sl[i].st.pfd >= 0;
    } else {
      sl[i].o = !strcmp(str(r, "change"), "type")
                    ? clear_for_type(job, rootfd, r, sl[i].x, sl[i].detail, sizeof sl[i].detail)
                    : JB_RESTORED;
      struct jb_pstore_item kept;
      if (sl[i].o == JB_RESTORED)
        sl[i].o = jb_rollback_restore(w->preimage_dir, job, rootfd, sl[i].x, false, 0, NULL, NULL,
                                      &kept, sl[i].detail, sizeof sl[i].detail);
    }
    held += sl[i].staged;
    if (held >= STAGED_MAX) {
      flush(w, job, rootfd, sl, pending_from, i + 1, &fired);
      pending_from = i + 1;
      held = 0;
    }
  }
  flush(w, job, rootfd, sl, pending_from, n, &fired);
  for (size_t i = 0; i < n; i++) {
    record(a, json_array_get(order, i), sl[i].o, sl[i].detail);
    json_decref(sl[i].x);
  }
  free(sl);
}

/* The audit entry's list of files: the first FILES_LISTED, and past them filesCount and
 * filesSha256 (preimage_lines_sha256 of all of them). */
static void list_files(json_t *details, json_t *files) {
  size_t n = json_array_size(files);
  if (n <= FILES_LISTED) {
    json_object_set(details, "files", files);
    return;
  }
  char hex[65];
  preimage_lines_sha256(files, hex);
  json_t *first = json_array();
  for (size_t i = 0; i < FILES_LISTED; i++) json_array_append(first, json_array_get(files, i));
  json_object_set_new(details, "files", first);
  json_object_set_new(details, "filesCount", json_integer((json_int_t)n));
  json_object_set_new(details, "filesSha256", json_string(hex));
}

/* Whether the pre-images of `rows` fit in what is left of the session's budget; *need their
 * bytes. */
static bool within_budget(struct jb_worker *w, PGconn *c, const char *job, json_t *rows,
                          long long *need, jb_error *err) {
  long long used = 0;
  *need = 0;
  size_t i;
  json_t *r;
  json_array_foreach (rows, i, r) *need += old_bytes(r);
  if (jb_db_preimage_bytes(c, job, &used, err) != JB_OK) return false;
  return used + *need <= w->set.preimage_max_bytes;
}

int changeset_apply_run(struct jb_worker *w, PGconn *c, const char *job, struct jb_op_claim *op,
                        jb_error *err) {
  json_t *args = json_loads(op->args_json, 0, NULL);
  long long rejected = 0, need = 0;
  json_t *rows = jb_db_changeset_approved(c, job, op->op_id, &rejected, err);
  if (!rows) {
    json_decref(args);
    jb_db_rollback(c);
    return JB_ERR_FAIL;
  }
  struct apply a = {.outcomes = json_array(),
                    .files = json_array(),
                    .pre = json_array(),
                    .conflicts = json_array(),
                    .failed = json_array()};
  char ws[4096] = "";
  pthread_mutex_lock(&w->lock);
  struct jb_session *s = session_find(w, job);
  if (s) snprintf(ws, sizeof ws, "%s", s->workspace);
  pthread_mutex_unlock(&w->lock);
  int rootfd = ws[0] && jb_pstore_job_ok(job) ? open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  json_t *ans = NULL, *before = json_null(), *after = json_null();
  jb_error be = {0};
  if (rootfd < 0) {
    ans = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "internal", "message",
                    "the workspace cannot be opened");
  } else if (!within_budget(w, c, job, rows, &need, &be)) {
    char msg[300];
    snprintf(msg, sizeof msg,
             "keeping what the changeset replaces (%lld bytes) would pass the session's "
             "pre-image budget (JAILBOX_PREIMAGE_MAX_BYTES %ld)%s%s: nothing was applied",
             need, w->set.preimage_max_bytes, be.msg[0] ? ": " : "", be.msg);
    ans = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "preimage_budget", "message",
                    msg);
  } else {
    struct timespec t0, t1, t2, t3;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    json_decref(before);
    before = worker_tree_hash(w, job, rootfd);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    json_t *order = apply_order(rows);
    apply_rows(w, job, rootfd, order, &a);
    json_decref(order);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    json_decref(after);
    after = worker_tree_hash(w, job, rootfd);
    clock_gettime(CLOCK_MONOTONIC, &t3);
    /* where the time went (bench/changeset) */
    slog_json(w, JB_LOG_INFO, job, "changeset apply timings", "timingsMs",
              json_pack("{s:I, s:f, s:f, s:f}", "files", (json_int_t)json_array_size(rows),
                        "treeBefore", ms_between(&t0, &t1), "apply", ms_between(&t1, &t2),
                        "treeAfter", ms_between(&t2, &t3)));
    ans = json_pack("{s:b, s:{s:I, s:O, s:O, s:I, s:O, s:O}}", "ok", 1, "result", "applied",
                    (json_int_t)a.applied, "conflicts", a.conflicts, "failed", a.failed, "rejected",
                    (json_int_t)rejected, "treeBefore", before, "treeAfter", after);
  }
  if (rootfd >= 0) close(rootfd);
  json_t *details = json_pack("{s:O*, s:O*, s:I, s:I, s:I, s:I, s:O, s:O}", "changesetSha256",
                              json_object_get(args, "changesetSha256"), "execOpId",
                              json_object_get(args, "execOpId"), "applied", (json_int_t)a.applied,
                              "conflicts", (json_int_t)json_array_size(a.conflicts), "failed",
                              (json_int_t)json_array_size(a.failed), "rejected",
                              (json_int_t)rejected, "treeBefore", before, "treeAfter", after);
  bool ok = json_is_true(json_object_get(ans, "ok"));
  if (details && !ok)
    json_object_set(details, "error", json_object_get(json_object_get(ans, "error"), "code"));
  if (details) list_files(details, a.files);
  char *text = ans ? json_dumps(ans, JSON_COMPACT) : NULL;
  struct jb_audit_head head;
  int rc = text && details ? JB_OK : (jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL);
  /* the outcomes and the pre-images in the op's own transaction, before its entry */
  if (rc == JB_OK) rc = jb_db_changeset_outcomes(c, op->op_id, a.outcomes, err);
  if (rc == JB_OK) rc = jb_db_preimages_insert(c, job, op->op_id, 0, a.pre, err);
  if (rc == JB_OK)
    rc = jb_db_op_complete(c, jb_signer_key(w->signer), job, op, ok, text, details, &head, err);
  else
    jb_db_rollback(c);
  if (rc == JB_OK) worker_publish(w, c, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
  free(text);
  json_decref(details);
  json_decref(ans);
  json_decref(before);
  json_decref(after);
  json_decref(rows);
  json_decref(args);
  json_decref(a.outcomes);
  json_decref(a.files);
  json_decref(a.pre);
  json_decref(a.conflicts);
  json_decref(a.failed);
  return rc;
}
