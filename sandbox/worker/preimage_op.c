/* preimage_op.c — one op's pre-images: taken before the shim runs it, bound to what it
 * replaces, stored with its outcome (see preimage_op.h). */
#define _GNU_SOURCE
#include "sandbox/worker/preimage_op.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/preimages.h"
#include "lib/metrics.h"
#include "lib/pathcheck.h"
#include "sandbox/worker/hostfs.h"
#include "sandbox/worker/preimage_store.h"
#include "sandbox/worker/worker.h"

/* What taking the rows of one op needs. */
struct taking {
  struct jb_worker *w;
  struct jb_op_preimages *pre;
  int rootfd;
  long long room; /* bytes the session may still add */
  long long deadline; /* jb_now_ms past which no more is kept: the op is refused */
  bool pass; /* a path the shim refuses by the same rules: nothing kept, left to the shim */
  jb_error err; /* a failure to keep a pre-image: the op is refused */
};

static bool path_ok(const char *p) { return p && jb_path_check(p, strlen(p), 0) == JB_PATH_OK; }

/* The row of `it` at `path` (its fromPath `from` for a rename), appended to the rows. */
static json_t *row_add(struct taking *t, const char *path, const struct jb_pstore_item *it,
                       const char *kind) {
  json_t *r =
      json_pack("{s:s, s:s, s:I}", "path", path, "kind", kind, "bytes", (json_int_t)it->bytes);
  if (!r || json_array_append_new(t->pre->rows, r) < 0) { /* never a row silently left out */
    jb_fail(&t->err, ENOMEM, "pre-image of %.300s: its row", path);
    return NULL;
  }
  if (it->kind == JB_PSTORE_FILE) json_object_set_new(r, "sha256", json_string(it->sha256));
  if (it->kind == JB_PSTORE_FILE || it->kind == JB_PSTORE_DIR)
    json_object_set_new(r, "mode", json_integer(it->mode));
  if (it->kind == JB_PSTORE_LINK && json_object_set_new(r, "target", json_string(it->target)) < 0)
    jb_fail(&t->err, EILSEQ, "pre-image of %.300s: its link's target", path);
  t->pre->bytes += it->bytes;
  t->room -= it->bytes;
  return r;
}

/* What `path` holds, kept: 0 with *it filled; -1 when nothing is kept (t->pass set when the
 * shim refuses the path by the same rules, t->err when keeping it failed). */
static int take(struct taking *t, const char *path, struct jb_pstore_item *it) {
  if (t->pass || t->err.msg[0]) return -1;
  if (json_array_size(t->pre->rows) >= JB_PREIMAGE_ROWS_MAX) {
    jb_fail(&t->err, E2BIG, "more than %d paths to keep", JB_PREIMAGE_ROWS_MAX);
    return -1;
  }
  /* the session's row is locked meanwhile (its buyer's pause or abort waits): as long as the
   * shim gets to run the op, no more — each new blob is fsynced, a few ms on a disk */
  if (jb_now_ms() > t->deadline) {
    jb_fail(&t->err, ETIMEDOUT,
            "keeping them took over %ld ms (%zu paths kept): change the tree in parts",
            t->w->walls.call_timeout_ms, json_array_size(t->pre->rows));
    return -1;
  }
  if (!path_ok(path)) {
    t->pass = true;
    return -1;
  }
  jb_error e = {0};
  if (jb_pstore_take(t->w->preimage_dir, t->pre->job, t->rootfd, path, t->room < 0 ? 0 : t->room,
                     it, &e) == 0)
    return 0;
  if (e.code == ELOOP || e.code == EXDEV || e.code == ENOTDIR || e.code == EINVAL ||
      e.code == ENAMETOOLONG)
    t->pass = true;
  else
    t->err = e;
  return -1;
}

/* An absent-path row for each folder of `folders` (a createParents array) missing now,
 * parents first. */
static void take_folders(struct taking *t, json_t *folders) {
  size_t n = json_array_size(folders);
  for (size_t len = 1; len <= JB_PATH_MAX && n; len++) /* by length: parents first */
    for (size_t i = 0; i < n; i++) {
      const char *f = json_string_value(json_array_get(folders, i));
      struct jb_pstore_item it;
      if (f && strlen(f) == len && take(t, f, &it) == 0 && it.kind == JB_PSTORE_ABSENT)
        row_add(t, f, &it, "absent");
    }
}

/* mkdir: each missing directory on the way to `path`, parents first. */
static void take_mkdir(struct taking *t, const char *path) {
  char p[JB_PATH_MAX + 1];
  snprintf(p, sizeof p, "%s", path);
  for (char *s = p;; s++) {
    if (*s != '/' && *s) continue;
    char c = *s;
    *s = '\0';
    struct jb_pstore_item it;
    if (take(t, p, &it) < 0) return;
    if (it.kind == JB_PSTORE_ABSENT) row_add(t, p, &it, "absent");
    *s = c;
    if (!c) return;
  }
}

/* delete: every entry of the tree at `path`, what is under a directory before it (a rollback,
 * newest first, makes the directory before what it held). */
static void take_tree(struct taking *t, const char *path, int depth) {
  struct jb_pstore_item it;
  if (take(t, path, &it) < 0) return;
  if (it.kind == JB_PSTORE_DIR && depth < JB_HOSTFS_TREE_DEPTH_MAX) {
    int dfd = jb_hostfs_open_dir(t->rootfd, path);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
      if (dfd >= 0) close(dfd);
      jb_fail_errno(&t->err, errno, "pre-image of %.300s: open folder", path);
      return;
    }
    struct dirent *de;
    while ((de = readdir(d)) && !t->pass && !t->err.msg[0]) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      char *child = NULL;
      if (asprintf(&child, "%s/%s", path, de->d_name) < 0) break;
      take_tree(t, child, depth + 1);
      free(child);
    }
    closedir(d);
  }
  if (!t->pass && !t->err.msg[0] && it.kind != JB_PSTORE_ABSENT)
    row_add(t, path, &it, jb_pstore_kind_name(it.kind));
}

/* Sets `key` to `v` among the members bound on the shim's request, unless the op's `args`
 * name it (the agent's is checked then). */
static void bind_set(struct taking *t, json_t *args, const char *key, const char *v) {
  if (json_object_get(args, key)) return;
  if (!t->pre->bind) t->pre->bind = json_object();
  if (t->pre->bind) json_object_set_new(t->pre->bind, key, json_string(v));
}

/* move: the source (a file's content, or a directory's rename row at the destination) and
 * the destination (absent, or the file it replaces); a file's move bound by its kind and
 * hash, and the destination's (the hash kept, "" when absent). */
static void take_move(struct taking *t, const char *src, json_t *args) {
  const char *dst = json_string_value(json_object_get(args, "destination"));
  take_folders(t, json_object_get(args, "createParents"));
  struct jb_pstore_item s, d;
  if (!dst || take(t, src, &s) < 0) return;
  if (s.kind == JB_PSTORE_DIR) {
    json_t *r = row_add(t, dst, &s, "rename");
    if (r) json_object_set_new(r, "fromPath", json_string(src));
    return;
  }
  if (s.kind != JB_PSTORE_FILE) return; /* the shim moves files and folders only */
  row_add(t, src, &s, "file");
  bind_set(t, args, "expectTree", "file");
  bind_set(t, args, "expectSha256", s.sha256);
  if (take(t, dst, &d) < 0) return;
  row_add(t, dst, &d, jb_pstore_kind_name(d.kind));
  if (d.kind == JB_PSTORE_FILE || d.kind == JB_PSTORE_ABSENT)
    bind_set(t, args, "expectDestSha256", d.kind == JB_PSTORE_FILE ? d.sha256 : "");
}

/* delete: the tree at `path` (take_tree); a regular file's delete bound by the hash kept. */
static void take_delete(struct taking *t, const char *path, json_t *args) {
  size_t n = json_array_size(t->pre->rows);
  take_tree(t, path, 0);
  json_t *r = json_array_get(t->pre->rows, n); /* a file's one row */
  if (json_array_size(t->pre->rows) == n + 1 &&
      !strcmp(json_string_value(json_object_get(r, "kind")) ?: "", "file"))
    bind_set(t, args, "expectSha256", json_string_value(json_object_get(r, "sha256")) ?: "");
}

/* write, edit: the folders createParents makes, then the target, bound by its hash. */
static void take_write(struct taking *t, const char *path, json_t *args) {
  take_folders(t, json_object_get(args, "createParents"));
  struct jb_pstore_item it;
  if (take(t, path, &it) < 0) return;
  row_add(t, path, &it, jb_pstore_kind_name(it.kind));
  if (json_object_get(args, "expectSha256")) return; /* the agent's (an edit's) is checked */
  if (it.kind == JB_PSTORE_FILE || it.kind == JB_PSTORE_ABSENT)
    t->pre->bind = json_pack("{s:s}", "expectSha256", it.kind == JB_PSTORE_FILE ? it.sha256 : "");
}

/* Removes the blobs the rows of `pre` added (an op that did not run, or failed). */
static void drop_added(struct jb_worker *w, struct jb_op_preimages *pre) {
  size_t i;
  json_t *r;
  json_array_foreach (pre->rows, i, r)
    if (json_integer_value(json_object_get(r, "bytes")) > 0)
      jb_pstore_remove(w->preimage_dir, pre->job, json_string_value(json_object_get(r, "sha256")));
  json_array_clear(pre->rows);
  pre->bytes = 0;
}

static void refuse(struct jb_op_preimages *pre, const char *code, const char *msg) {
  pre->refusal = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", code, "message", msg);
}

void preimage_op_take(struct jb_worker *w, PGconn *c, const char *job, const struct jb_op_claim *op,
                      enum jb_tool tool, json_t *args, struct jb_op_preimages *pre) {
  memset(pre, 0, sizeof *pre);
  snprintf(pre->job, sizeof pre->job, "%s", job);
  if (!jb_tool_changes_files(tool) || tool == JB_TOOL_EXEC) return;
  pre->rows = json_array();
  char ws[4096] = "";
  pthread_mutex_lock(&w->lock);
  struct jb_session *s = session_find(w, job);
  if (s) snprintf(ws, sizeof ws, "%s", s->workspace);
  pthread_mutex_unlock(&w->lock);
  long long used = 0;
  jb_error err = {0};
  if (!pre->rows || !ws[0] || !jb_pstore_job_ok(job) ||
      jb_db_preimage_bytes(c, job, &used, &err) != JB_OK) {
    refuse(pre, "internal", "the op's pre-images cannot be kept: not run");
    return;
  }
  struct taking t = {.w = w,
                     .pre = pre,
                     .room = w->set.preimage_max_bytes - used,
                     .deadline = jb_now_ms() + w->walls.call_timeout_ms};
  if (worker_test_fault(w, job, "preimage_deadline")) t.deadline = 0; /* rollback_worker test */
  t.rootfd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (t.rootfd < 0) {
    refuse(pre, "internal", "the op's pre-images cannot be kept (workspace): not run");
    return;
  }
  const char *path = op->path;
  if (tool == JB_TOOL_WRITE || tool == JB_TOOL_EDIT) take_write(&t, path, args);
  if (tool == JB_TOOL_MKDIR) take_mkdir(&t, path);
  if (tool == JB_TOOL_MOVE) take_move(&t, path, args);
  if (tool == JB_TOOL_DELETE) take_delete(&t, path, args);
  close(t.rootfd);
  char msg[700];
  if (t.err.msg[0] || t.room < 0) {
    bool budget = t.room < 0 || t.err.code == EFBIG || t.err.code == E2BIG;
    if (budget)
      snprintf(msg, sizeof msg,
               "the session's pre-images would pass their budget (JAILBOX_PREIMAGE_MAX_BYTES, "
               "%ld bytes; %lld used): not run (%.300s)",
               w->set.preimage_max_bytes, used, t.err.msg[0] ? t.err.msg : "over it");
    else
      snprintf(msg, sizeof msg, "the op's pre-image could not be kept: not run (%.400s)",
               t.err.msg);
    drop_added(w, pre);
    json_decref(pre->bind);
    pre->bind = NULL;
    /* a name the agent left that a row cannot hold: refused as the shim refuses paths */
    refuse(pre,
           budget                    ? "preimage_budget"
           : t.err.code == EILSEQ    ? "denied"
           : t.err.code == ETIMEDOUT ? "too_large"
                                     : "internal",
           msg);
    return;
  }
  if (t.pass) { /* the shim refuses it by the same rules: nothing kept */
    drop_added(w, pre);
    json_decref(pre->bind);
    pre->bind = NULL;
    return;
  }
  pre->taken = true;
}

void preimage_op_bind(const struct jb_op_preimages *pre, json_t *req) {
  const char *k;
  json_t *v;
  if (pre && pre->taken && !pre->recalled)
    json_object_foreach (pre->bind, k, v) json_object_set(req, k, v);
}

/* Whether row `r`'s path holds now (`now`) what it held before the op: nothing to undo. */
static bool unchanged(json_t *r, const struct jb_pstore_item *now) {
  const char *kind = json_string_value(json_object_get(r, "kind"));
  if (strcmp(kind, jb_pstore_kind_name(now->kind))) return false;
  if (now->kind == JB_PSTORE_FILE)
    return !strcmp(json_string_value(json_object_get(r, "sha256")), now->sha256) &&
           json_integer_value(json_object_get(r, "mode")) == now->mode;
  if (now->kind == JB_PSTORE_DIR)
    return json_integer_value(json_object_get(r, "mode")) == now->mode;
  if (now->kind == JB_PSTORE_LINK)
    return !strcmp(json_string_value(json_object_get(r, "target")), now->target);
  return true;
}

/* The rows of `pre` with what the op left at each path (afterKind, afterSha256, afterMode),
 * the unchanged ones dropped; a blob only a dropped row named is removed, and its bytes go to
 * the first kept row naming it. A new array, or NULL. */
static json_t *rows_after(struct jb_worker *w, struct jb_op_preimages *pre, int rootfd) {
  json_t *kept = json_array(), *r;
  size_t i;
  json_array_foreach (pre->rows, i, r) {
    const char *path = json_string_value(json_object_get(r, "path"));
    struct jb_pstore_item now;
    jb_error e = {0};
    if (jb_pstore_take(NULL, pre->job, rootfd, path, -1, &now, &e) < 0) now.kind = JB_PSTORE_ABSENT;
    bool rename = !strcmp(json_string_value(json_object_get(r, "kind")), "rename");
    if (!rename && unchanged(r, &now)) continue;
    json_t *k = json_copy(r);
    json_object_set_new(k, "afterKind", json_string(jb_pstore_kind_name(now.kind)));
    if (now.kind == JB_PSTORE_FILE) json_object_set_new(k, "afterSha256", json_string(now.sha256));
    if (now.kind == JB_PSTORE_FILE || now.kind == JB_PSTORE_DIR)
      json_object_set_new(k, "afterMode", json_integer(now.mode));
    json_object_set_new(k, "bytes", json_integer(0));
    json_array_append_new(kept, k);
  }
  json_array_foreach (pre->rows, i, r) { /* each blob added: counted once, or removed */
    json_int_t b = json_integer_value(json_object_get(r, "bytes"));
    const char *sha = json_string_value(json_object_get(r, "sha256"));
    if (b <= 0 || !sha) continue;
    json_t *k = NULL, *x;
    size_t j;
    json_array_foreach (kept, j, x)
      if (!k && !strcmp(json_string_value(json_object_get(x, "sha256")) ?: "", sha)) k = x;
    if (k)
      json_object_set_new(k, "bytes", json_integer(b));
    else
      jb_pstore_remove(w->preimage_dir, pre->job, sha);
  }
  return kept;
}

void preimage_lines_sha256(json_t *list, char hex[65]) {
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  size_t i;
  json_t *e;
  json_array_foreach (list, i, e) {
    char *line = json_dumps(e, JSON_COMPACT | JSON_SORT_KEYS);
    if (line) {
      crypto_hash_sha256_update(&st, (const unsigned char *)line, strlen(line));
      crypto_hash_sha256_update(&st, (const unsigned char *)"\n", 1);
    }
    free(line);
  }
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&st, h);
  sodium_bin2hex(hex, 65, h, sizeof h);
}

/* The `preimages` field of the op's audit entry: the first JB_PREIMAGE_AUDIT_LISTED rows as
 * {path, kind, sha256?, mode?, target?, fromPath?}, and past them preimagesCount and
 * preimagesSha256 (preimage_lines_sha256 of all of them). */
static void audit_list(json_t *details, json_t *rows) {
  json_t *all = json_array(), *r;
  size_t i, n = json_array_size(rows);
  json_array_foreach (rows, i, r) {
    json_t *e = json_pack("{s:O, s:O}", "path", json_object_get(r, "path"), "kind",
                          json_object_get(r, "kind"));
    static const char *const opt[] = {"sha256", "mode", "target", "fromPath", NULL};
    for (size_t k = 0; e && opt[k]; k++)
      if (json_object_get(r, opt[k])) json_object_set(e, opt[k], json_object_get(r, opt[k]));
    json_array_append_new(all, e);
  }
  if (n <= JB_PREIMAGE_AUDIT_LISTED) {
    json_object_set_new(details, "preimages", all);
    return;
  }
  char hex[65];
  preimage_lines_sha256(all, hex);
  json_t *listed = json_array();
  for (i = 0; i < JB_PREIMAGE_AUDIT_LISTED; i++) json_array_append(listed, json_array_get(all, i));
  json_decref(all);
  json_object_set_new(details, "preimages", listed);
  json_object_set_new(details, "preimagesCount", json_integer((json_int_t)n));
  json_object_set_new(details, "preimagesSha256", json_string(hex));
}

int preimage_op_settle(struct jb_worker *w, PGconn *c, const struct jb_op_claim *op, json_t *ans,
                       struct jb_op_preimages *pre, json_t *details, jb_error *err) {
  if (!pre || !pre->taken) return JB_OK;
  bool ok = json_is_true(json_object_get(ans, "ok"));
  if (pre->recalled) {
    /* an op the shim had run before this worker took its pre-images (recalled after a
     * restart) has none: what was taken is what it left */
    if (details) json_object_set_new(details, "preimagesLost", json_true());
    drop_added(w, pre);
    /* it changed files and nothing of what it replaced is kept: never a silent partial undo */
    return ok ? jb_db_preimages_lost(c, pre->job, op->op_id, err) : JB_OK;
  }
  /* a failed op is read again too: a refusal left every path as it was (no row is kept), but
   * one that failed half-way (a recursive delete stopped by an entry it could not remove)
   * changed some, and their rows are kept */
  char ws[4096] = "";
  pthread_mutex_lock(&w->lock);
  struct jb_session *s = session_find(w, pre->job);
  if (s) snprintf(ws, sizeof ws, "%s", s->workspace);
  pthread_mutex_unlock(&w->lock);
  int rootfd = ws[0] ? open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  json_t *rows = rootfd >= 0 ? rows_after(w, pre, rootfd) : NULL;
  if (rootfd >= 0) close(rootfd);
  if (!rows) return jb_fail(err, ENOMEM, "pre-images: the workspace after the op"), JB_ERR_FAIL;
  int rc = jb_db_preimages_insert(c, pre->job, op->op_id, 0, rows, err);
  if (rc == JB_OK && details && (ok || json_array_size(rows) > 0)) audit_list(details, rows);
  json_decref(rows);
  return rc;
}

void preimage_op_free(struct jb_op_preimages *pre) {
  json_decref(pre->rows);
  json_decref(pre->bind);
  json_decref(pre->refusal);
  memset(pre, 0, sizeof *pre);
}
