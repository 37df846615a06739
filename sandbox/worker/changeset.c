/* changeset.c — a command's effects read from its overlay and stored as a changeset for the
 * buyer (see changeset.h). */
#define _GNU_SOURCE
#include "sandbox/worker/changeset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/changesets.h"
#include "db/events.h"
#include "db/preimages.h"
#include "db/sessions.h"
#include "lib/diff.h"
#include "lib/pathcheck.h"
#include "lib/scan.h"
#include "sandbox/worker/hostfs.h"
#include "sandbox/worker/preimage_op.h"
#include "sandbox/worker/preimage_store.h"
#include "sandbox/worker/worker.h"

#define SUBTREE_DEPTH_MAX 64 /* levels below a deleted folder listed at most */

/* One build's working state. */
struct cs_walk {
  struct jb_cs_build *b;
  struct jb_exec_overlay *ov;
  int rootfd;
  json_t *upper; /* the manifest's entries by path */
  long long room; /* bytes the old and new contents kept may still add (the pre-image budget's
                     rest) */
  unsigned char *buf; /* JB_EXEC_OVERLAY_READ_MAX bytes */
};

static void fail(struct jb_cs_build *b, const char *code, const char *why) {
  if (b->code[0]) return;
  snprintf(b->code, sizeof b->code, "%s", code);
  snprintf(b->why, sizeof b->why, "%s", why);
}

/* The type name a row gives pre-image kind `k`. */
static const char *kind_type(enum jb_pstore_kind k) {
  return k == JB_PSTORE_FILE   ? "file"
         : k == JB_PSTORE_DIR  ? "dir"
         : k == JB_PSTORE_LINK ? "link"
                               : "absent";
}

/* A new row for `path` of change `change` from old state `old` (NULL: absent or unreadable,
 * `old_type` names it), approvable unless `why` is set. */
static json_t *row_new(const char *path, const char *change, const struct jb_pstore_item *old,
                       const char *old_type, const char *why) {
  json_t *r = json_pack("{s:s, s:s, s:s, s:b}", "path", path, "change", change, "oldType",
                        old ? kind_type(old->kind) : old_type, "approvable", why == NULL);
  if (!r) return NULL;
  if (why) json_object_set_new(r, "why", json_string(why));
  if (old && old->kind == JB_PSTORE_FILE) {
    json_object_set_new(r, "oldSha256", json_string(old->sha256));
    json_object_set_new(r, "oldSize", json_integer(old->size));
    json_object_set_new(r, "oldBytes", json_integer(old->bytes));
  }
  if (old && old->kind != JB_PSTORE_ABSENT)
    json_object_set_new(r, "oldMode", json_integer((json_int_t)old->mode));
  if (old && old->kind == JB_PSTORE_LINK)
    json_object_set_new(r, "oldTarget", json_string(old->target));
  return r;
}

/* What `path` holds on the host now into *old (its content kept in the store, within x->room:
 * past it b fails, preimage_budget); 0, or -1 with the reason a row gives it in *why (a link
 * on the way, a special file) — or b failed. */
static int old_state(struct cs_walk *x, const char *path, struct jb_pstore_item *old,
                     const char **type, const char **why) {
  jb_error e = {0};
  *why = NULL;
  *type = NULL;
  if (jb_pstore_take(x->b->w->preimage_dir, x->b->job, x->rootfd, path, x->room < 0 ? 0 : x->room,
                     old, &e) == 0) {
    x->room -= old->bytes;
    return 0;
  }
  if (e.code == EFBIG)
    fail(x->b, "preimage_budget",
         "keeping what the command changed would pass the session's pre-image budget "
         "(JAILBOX_PREIMAGE_MAX_BYTES)");
  else if (e.code == EINVAL)
    *type = "special", *why = "the workspace holds a special file there";
  else if (e.code == ELOOP || e.code == EXDEV)
    *type = "special", *why = "a link lies on the way";
  else if (e.code == EILSEQ)
    *type = "special", *why = "a name or link text that is not UTF-8";
  else
    fail(x->b, "internal", e.msg);
  return -1;
}

/* Whether link text `target` of a link at `path` stays inside the workspace when resolved
 * from the link's folder: relative, its ".." all first and never above the root. A ".." after
 * a name is refused: the kernel climbs from where that name leads, not from its folder, and a
 * name may be a link ("y" -> "." makes "y/y/../.." climb two levels above "y"'s folder). */
static bool link_inside(const char *path, const char *target) {
  if (!target[0] || target[0] == '/') return false;
  int depth = 0;
  bool named = false; /* a name came before */
  for (const char *p = path; *p; p++) depth += *p == '/';
  for (const char *p = target; *p;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 2 && !strncmp(p, "..", 2)) {
      if (named || --depth < 0) return false;
    } else if (n > 0 && !(n == 1 && *p == '.')) {
      named = true;
    }
    p += n + (e != NULL);
  }
  return true;
}

/* Appends the deletion of everything under folder `dir` of the workspace that the upper does
 * not hold (`keep_upper`: an opaque folder keeps what the upper holds, and looks below a
 * folder of the upper that is not opaque itself), deepest first. */
static void subtree_deletes(struct cs_walk *x, const char *dir, bool keep_upper, int depth) {
  if (x->b->code[0]) return;
  if (depth > SUBTREE_DEPTH_MAX) return fail(x->b, "too_large", "a deleted folder nests too deep");
  int dfd = jb_hostfs_open_dir(x->rootfd, dir);
  if (dfd < 0) return; /* gone meanwhile, or a link: nothing to list beneath */
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return fail(x->b, "internal", "a folder of the workspace cannot be listed");
  }
  struct dirent *de;
  while ((de = readdir(d)) && !x->b->code[0]) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) {
      fail(x->b, "too_large", "a path under a deleted folder is too long");
      break;
    }
    json_t *up = keep_upper ? json_object_get(x->upper, path) : NULL;
    if (up) { /* below an opaque folder nothing of the workspace shows, nor below a folder of
                 the upper inside it (one made there is not opaque itself: it lists none) */
      if (!strcmp(json_string_value(json_object_get(up, "type")) ?: "", "dir") &&
          !json_is_true(json_object_get(up, "whiteout")) &&
          !json_is_true(json_object_get(up, "opaque")))
        subtree_deletes(x, path, true, depth + 1);
      continue;
    }
    if (json_array_size(x->b->rows) >= JB_CS_FILES_MAX) {
      fail(x->b, "too_large", "the command changed more paths than a changeset holds");
      break;
    }
    struct jb_pstore_item old;
    const char *type, *why;
    if (old_state(x, path, &old, &type, &why) < 0 && x->b->code[0]) break;
    if (!type && old.kind == JB_PSTORE_DIR) subtree_deletes(x, path, false, depth + 1);
    json_t *r = row_new(path, "deleted", type ? NULL : &old, type, why);
    if (r) json_object_set_new(r, "newType", json_string("absent"));
    json_array_append_new(x->b->rows, r);
  }
  closedir(d);
}

/* Reads upper file `path` (`size` bytes) into the store as a new blob: its name into `sha`,
 * its content mapped into *map (*maplen bytes; NULL when over JB_CS_SCAN_MAX) for the scan and
 * the diff. 0, or -1 (b failed). */
static int new_content(struct cs_walk *x, const char *path, long long listed, char sha[65],
                       unsigned char **map, size_t *maplen, long long *size) {
  *map = NULL;
  *maplen = 0;
  /* the contents count against the session's pre-image budget: a command cannot fill the
   * worker's disk with changesets it keeps making */
  if (jb_pstore_cost(listed) > x->room)
    return fail(x->b, "preimage_budget",
                "the command's changes are larger than what the session may still keep "
                "(JAILBOX_PREIMAGE_MAX_BYTES)"),
           -1;
  int fd = memfd_create("jailbox-cs", MFD_CLOEXEC);
  if (fd < 0) return fail(x->b, "internal", "memfd_create failed"), -1;
  jb_error e = {0};
  long long off = 0, whole = 0;
  for (bool eof = false; !eof;) {
    size_t n = 0;
    if (jb_exec_overlay_read(x->ov, path, off, JB_EXEC_OVERLAY_READ_MAX, x->buf, &n, &whole, &eof,
                             &e) < 0) {
      close(fd);
      return fail(x->b, strstr(e.msg, "not_file") ? "changed" : "internal", e.msg), -1;
    }
    if (n > 0 && write(fd, x->buf, n) != (ssize_t)n) {
      close(fd);
      return fail(x->b, "internal", "the content could not be held"), -1;
    }
    off += (long long)n;
    if (jb_pstore_cost(off) > x->room) { /* grew past what was listed */
      close(fd);
      return fail(x->b, "preimage_budget", "the command's changes grew past the session's budget"),
             -1;
    }
    if (n == 0) break;
  }
  long long added = 0;
  if (lseek(fd, 0, SEEK_SET) != 0 ||
      jb_pstore_put_fd(x->b->w->preimage_dir, x->b->job, fd, sha, &added, size, &e) < 0) {
    close(fd);
    return fail(x->b, "internal", e.msg[0] ? e.msg : "the content could not be stored"), -1;
  }
  x->b->bytes += added;
  x->room -= added;
  if (*size > 0 && *size <= JB_CS_SCAN_MAX) {
    void *m = mmap(NULL, (size_t)*size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) *map = m, *maplen = (size_t)*size;
  }
  close(fd);
  return 0;
}

/* The diff of a file's old content (blob `old_sha`, or none) against `data`; JSON null when a
 * side is not text or over JB_CS_DIFF_SIDE_MAX. */
static json_t *file_diff(struct cs_walk *x, const char *path, const struct jb_pstore_item *old,
                         const unsigned char *data, size_t len, bool *binary) {
  *binary = false;
  if (len > JB_CS_DIFF_SIDE_MAX ||
      (old && old->kind == JB_PSTORE_FILE && old->size > JB_CS_DIFF_SIDE_MAX))
    return json_null();
  unsigned char *o = NULL;
  size_t olen = 0;
  bool exists = old && old->kind == JB_PSTORE_FILE;
  if (exists) {
    jb_error e = {0};
    int fd = memfd_create("jailbox-cs-old", MFD_CLOEXEC);
    struct stat st;
    if (fd < 0 || jb_pstore_copy_out(x->b->w->preimage_dir, x->b->job, old->sha256, fd, &e) < 0 ||
        fstat(fd, &st) < 0 || !(o = malloc((size_t)st.st_size + 1)) ||
        pread(fd, o, (size_t)st.st_size, 0) != st.st_size) {
      if (fd >= 0) close(fd);
      free(o);
      return json_null();
    }
    olen = (size_t)st.st_size;
    close(fd);
  }
  json_t *d = NULL;
  jb_error e = {0};
  if (jb_diff_preview(path, o, olen, exists, data ? data : (const unsigned char *)"", len,
                      JB_CS_DIFF_TEXT_MAX, &d, &e) < 0)
    d = json_null();
  free(o);
  *binary = json_is_null(d);
  return d;
}

/* Whether scanner `findings` (jb_scan_content's) refuse a command's file: any finding of
 * severity high or critical, or one that failed (a pattern past its limits: fail closed). A
 * medium or low one (binary content: a compiler's objects are binary by nature, unlike what
 * an agent writes with `write`) is shown to the buyer in `flags` and left to the buyer. */
static bool refusing(json_t *findings) {
  size_t i;
  json_t *f;
  json_array_foreach (findings, i, f) {
    const char *sev = json_string_value(json_object_get(f, "severity"));
    if (!sev || json_object_get(f, "error") || !strcmp(sev, "high") || !strcmp(sev, "critical"))
      return true;
  }
  return false;
}

/* The row of a regular file of the upper (manifest entry `m`). */
static json_t *file_row(struct cs_walk *x, const char *path, json_t *m) {
  struct jb_pstore_item old;
  const char *otype, *why;
  bool have_old = old_state(x, path, &old, &otype, &why) == 0;
  if (x->b->code[0]) return NULL;
  char sha[65];
  unsigned char *map;
  size_t maplen;
  long long size = 0;
  if (new_content(x, path, json_integer_value(json_object_get(m, "size")), sha, &map, &maplen,
                  &size) < 0)
    return NULL;
  mode_t mode = (mode_t)json_integer_value(json_object_get(m, "mode"));
  json_t *r = NULL;
  if (have_old && old.kind == JB_PSTORE_FILE && !strcmp(old.sha256, sha) && old.mode == mode) {
    if (map) munmap(map, maplen);
    return json_null(); /* copied up, not changed */
  }
  if (have_old && old.kind == JB_PSTORE_DIR) subtree_deletes(x, path, false, 0);
  const char *change = !have_old                      ? "type"
                       : old.kind == JB_PSTORE_ABSENT ? "added"
                       : old.kind != JB_PSTORE_FILE   ? "type"
                       : strcmp(old.sha256, sha)      ? "modified"
                                                      : "mode";
  json_t *findings = NULL;
  if (!why && size > JB_CS_SCAN_MAX) why = "too large for the content scanner";
  if (!why) {
    findings = jb_scan_content(path, map ? map : (const unsigned char *)"", maplen);
    if (!findings || refusing(findings)) why = "the content scanner refuses it";
  }
  r = row_new(path, change, have_old ? &old : NULL, otype, why);
  bool binary = false;
  json_t *d = file_diff(x, path, have_old ? &old : NULL, map, maplen, &binary);
  if (map) munmap(map, maplen);
  if (!r) return json_decref(findings), json_decref(d), NULL;
  json_object_set_new(r, "newType", json_string("file"));
  json_object_set_new(r, "newSha256", json_string(sha));
  json_object_set_new(r, "newMode", json_integer((json_int_t)mode));
  json_object_set_new(r, "size", json_integer(size));
  json_object_set_new(r, "binary", json_boolean(binary));
  json_object_set_new(r, "diff", d);
  if (findings && json_array_size(findings) > 0) json_object_set(r, "flags", findings);
  json_decref(findings);
  return r;
}

/* The row of a folder, link or special file of the upper (entry `m`, type `type`); JSON null
 * when it changes nothing. */
static json_t *other_row(struct cs_walk *x, const char *path, const char *type, json_t *m) {
  struct jb_pstore_item old;
  const char *otype, *why;
  bool have_old = old_state(x, path, &old, &otype, &why) == 0;
  if (x->b->code[0]) return NULL;
  mode_t mode = (mode_t)json_integer_value(json_object_get(m, "mode"));
  const char *target = json_string_value(json_object_get(m, "target"));
  bool dir = !strcmp(type, "dir"), link = !strcmp(type, "symlink");
  if (dir && have_old && old.kind == JB_PSTORE_DIR) {
    if (json_is_true(json_object_get(m, "opaque"))) subtree_deletes(x, path, true, 0);
    if (old.mode == mode) return json_null();
  }
  if (link && have_old && old.kind == JB_PSTORE_LINK && target && !strcmp(old.target, target))
    return json_null();
  if (have_old && old.kind == JB_PSTORE_DIR && !dir) subtree_deletes(x, path, false, 0);
  const char *ntype = dir ? "dir" : link ? "link" : "special";
  if (!why && !dir && !link) why = "a special file (FIFO, socket or device) is never applied";
  if (!why && link && (!target || !link_inside(path, target)))
    why = "a link that leads outside the workspace";
  const char *change = !have_old                                 ? "type"
                       : old.kind == JB_PSTORE_ABSENT            ? "added"
                       : strcmp(kind_type(old.kind), ntype) != 0 ? "type"
                       : dir                                     ? "mode"
                                                                 : "modified";
  json_t *r = row_new(path, change, have_old ? &old : NULL, otype, why);
  if (!r) return NULL;
  json_object_set_new(r, "newType", json_string(ntype));
  json_object_set_new(r, "newMode", json_integer((json_int_t)mode));
  if (link && target) json_object_set_new(r, "newTarget", json_string(target));
  return r;
}

/* The row of a whiteout at `path` (the command deleted what the workspace holds there). */
static json_t *whiteout_row(struct cs_walk *x, const char *path) {
  struct jb_pstore_item old;
  const char *otype, *why;
  bool have_old = old_state(x, path, &old, &otype, &why) == 0;
  if (x->b->code[0]) return NULL;
  if (have_old && old.kind == JB_PSTORE_ABSENT) return json_null();
  if (have_old && old.kind == JB_PSTORE_DIR) subtree_deletes(x, path, false, 0);
  json_t *r = row_new(path, "deleted", have_old ? &old : NULL, otype, why);
  if (r) json_object_set_new(r, "newType", json_string("absent"));
  return r;
}

static int by_path(const void *a, const void *b) {
  const char *x = json_string_value(json_object_get(*(json_t *const *)a, "path"));
  const char *y = json_string_value(json_object_get(*(json_t *const *)b, "path"));
  return strcmp(x, y);
}

/* Whether `path` (a directory when `is_dir`) is the target of a covered link the pre-scan
 * found, lies below one or (a directory) holds one — the "landing_link" entries of `flagged`
 * (the session's pre-scan flags: ".git/hooks/pre-commit -> ../../scripts/hook.sh" makes
 * scripts/hook.sh the hook, and core.hooksPath's folder git's hooks). Case is ignored, as the
 * file tools' landing check ignores it. The covered link's path into `link`. */
static bool covered_target(const char *path, bool is_dir, const json_t *flagged, char *link,
                           size_t lsize) {
  size_t i, n = strlen(path);
  json_t *f;
  json_array_foreach (flagged, i, f) {
    if (strcmp(json_string_value(json_object_get(f, "kind")) ?: "", "landing_link")) continue;
    const char *t = json_string_value(json_object_get(f, "path"));
    if (!t) continue;
    size_t tn = strlen(t);
    if (!strcmp(t, ".") || (!strncasecmp(path, t, tn) && (path[tn] == '\0' || path[tn] == '/')) ||
        (is_dir && tn > n && !strncasecmp(t, path, n) && t[n] == '/')) {
      snprintf(link, lsize, "%s", json_string_value(json_object_get(f, "link")) ?: t);
      return true;
    }
  }
  return false;
}

/* Whether `path` lies in a folder named .git (any case): git's own data, which the file tools
 * never write either — an object and a ref made by hand are shown as a binary row and a hash,
 * and make the buyer's git check out or push what the buyer never saw. */
static bool in_git_dir(const char *path) {
  for (const char *c = path; c; c = strchr(c, '/'), c = c ? c + 1 : NULL)
    if (!strncasecmp(c, ".git/", 5)) return true;
  return false;
}

/* Why row `r` lands where a tool on the host runs or reads what to run (into `why`, `wsize`
 * bytes), or false: its path by the landing rules — whatever it adds, changes or deletes, a
 * link judged as a directory (what it leads to may be one), as the command rules judge it —
 * in a .git folder, or a covered link's target (covered_target, the name folded too). */
static bool landing_why(json_t *r, const json_t *flagged, char *why, size_t wsize) {
  const char *path = json_string_value(json_object_get(r, "path"));
  const char *nt = json_string_value(json_object_get(r, "newType")) ?: "";
  const char *ot = json_string_value(json_object_get(r, "oldType")) ?: "";
  bool is_dir =
      !strcmp(nt, "dir") || !strcmp(nt, "link") || !strcmp(ot, "dir") || !strcmp(ot, "link");
  char rule[96], link[256];
  if (jb_scan_landing_in_use(path, is_dir, rule, sizeof rule) != 0) {
    snprintf(why, wsize, "it lands where a tool on the host runs it (rule %s)", rule);
    return true;
  }
  if (in_git_dir(path)) {
    snprintf(why, wsize, "it lies in a .git folder (git's data, as the file tools never write)");
    return true;
  }
  bool oom = false;
  char *folded = jb_scan_path_folded(path, &oom);
  bool hit = covered_target(path, is_dir, flagged, link, sizeof link) ||
             (folded && covered_target(folded, is_dir, flagged, link, sizeof link));
  free(folded);
  if (oom) snprintf(why, wsize, "out of memory checking where it lands");
  if (hit) snprintf(why, wsize, "it is what the covered link %.120s leads to", link);
  return oom || hit;
}

/* Sorts b->rows by path and applies the landing rules to each (`flagged`: the session's
 * pre-scan flags). */
static void rows_finish(struct jb_cs_build *b, const json_t *flagged) {
  size_t n = json_array_size(b->rows);
  json_t **v = calloc(n ? n : 1, sizeof *v);
  if (!v) return fail(b, "internal", "out of memory");
  for (size_t i = 0; i < n; i++) v[i] = json_incref(json_array_get(b->rows, i));
  qsort(v, n, sizeof *v, by_path);
  json_array_clear(b->rows);
  for (size_t i = 0; i < n; i++) {
    char why[200];
    /* the decision's approvedSha256 takes the approved paths one a line: with a line break in
     * a name, approving "a\nb" and "c" would read as approving "a" and "b\nc" */
    if (json_is_true(json_object_get(v[i], "approvable")) &&
        strchr(json_string_value(json_object_get(v[i], "path")), '\n')) {
      json_object_set_new(v[i], "approvable", json_false());
      json_object_set_new(v[i], "why", json_string("a name with a line break"));
    }
    if (json_is_true(json_object_get(v[i], "approvable")) &&
        landing_why(v[i], flagged, why, sizeof why)) {
      json_object_set_new(v[i], "approvable", json_false());
      json_object_set_new(v[i], "why", json_string(why));
    }
    json_array_append_new(b->rows, v[i]);
  }
  free(v);
}

/* The session's pre-scan flags (new; an empty array when it has none) and what is left of
 * its pre-image budget into *room, or NULL (b failed). */
static json_t *session_flags(struct jb_cs_build *b, long long *room) {
  jb_error e = {0};
  cleanup_conn struct worker_conn conn = worker_conn(b->w, &e);
  struct jb_session_facts facts;
  long long used = 0;
  if (!conn.pg || jb_db_preimage_bytes(conn.pg, b->job, &used, &e) != JB_OK ||
      jb_db_session_facts(conn.pg, b->job, &facts, &e) != JB_OK) {
    fail(b, "internal", e.msg[0] ? e.msg : "the session's pre-scan flags cannot be read");
    return NULL;
  }
  *room = b->w->set.preimage_max_bytes - used;
  json_t *f = facts.flagged ? json_incref(facts.flagged) : json_array();
  jb_session_facts_clear(&facts);
  return f;
}

void changeset_on_overlay(void *ctx, struct jb_exec_overlay *ov, const json_t *result) {
  (void)result;
  struct jb_cs_build *b = ctx;
  jb_error e = {0};
  json_t *m = jb_exec_overlay_manifest(ov, JB_CS_FILES_MAX, &e);
  if (!m) {
    const char *code = strstr(e.msg, "too_large")  ? "too_large"
                       : strstr(e.msg, "bad_name") ? "bad_name"
                                                   : "internal";
    return fail(b, code, e.msg);
  }
  struct cs_walk x = {
      .b = b, .ov = ov, .upper = json_object(), .buf = malloc(JB_EXEC_OVERLAY_READ_MAX)};
  x.rootfd = open(b->s->workspace, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  b->rows = json_array();
  json_t *flagged = session_flags(b, &x.room);
  size_t i;
  json_t *en;
  json_array_foreach (m, i, en)
    json_object_set(x.upper, json_string_value(json_object_get(en, "path")) ?: "", en);
  if (x.rootfd < 0 || !x.buf || !x.upper || !b->rows)
    fail(b, "internal", "the workspace cannot be read");
  json_array_foreach (m, i, en) {
    if (b->code[0]) break;
    const char *path = json_string_value(json_object_get(en, "path"));
    const char *type = json_string_value(json_object_get(en, "type"));
    if (!path || !type || !path[0]) {
      fail(b, "internal", "the manifest has an entry with no path or type");
      break;
    }
    /* the path goes into the host's paths: relative, no "..", "." or empty name (the spawner
     * lists names it read, but it runs beside the command, inside the walls) */
    if (jb_path_check(path, strlen(path), 0) != JB_PATH_OK) {
      fail(b, "bad_name", "the manifest names a path that is not a workspace path");
      break;
    }
    json_t *r = json_is_true(json_object_get(en, "whiteout")) ? whiteout_row(&x, path)
                : !strcmp(type, "file")                       ? file_row(&x, path, en)
                                                              : other_row(&x, path, type, en);
    if (r && !json_is_null(r)) json_array_append(b->rows, r);
    json_decref(r);
    if (json_array_size(b->rows) > JB_CS_FILES_MAX)
      fail(b, "too_large", "the command changed more paths than a changeset holds");
  }
  if (!b->code[0]) rows_finish(b, flagged);
  json_decref(flagged);
  b->built = !b->code[0];
  if (x.rootfd >= 0) close(x.rootfd);
  free(x.buf);
  json_decref(x.upper);
  json_decref(m);
}

/* The canonical lines a changeset's digest is made of, in path order: {path, change,
 * oldSha256, newSha256, oldMode, newMode, newTarget} of each row (api/audit.md). */
static void digest(json_t *rows, char hex[65]) {
  json_t *lines = json_array(), *r;
  size_t i;
  json_array_foreach (rows, i, r) {
    json_t *l = json_pack("{s:O, s:O}", "path", json_object_get(r, "path"), "change",
                          json_object_get(r, "change"));
    const char *keys[] = {"oldSha256", "newSha256", "oldMode", "newMode", "newTarget"};
    for (size_t k = 0; l && k < sizeof keys / sizeof *keys; k++)
      json_object_set(l, keys[k], json_object_get(r, keys[k]) ?: json_null());
    json_array_append_new(lines, l);
  }
  preimage_lines_sha256(lines, hex);
  json_decref(lines);
}

/* Announces pending changeset `op_id` to the buyer (jailbox:approval_request). */
static void announce(struct jb_cs_build *b, PGconn *c, long long op_id, const char *path,
                     const json_t *argv, const char *sha, long long approvable) {
  json_t *files = json_array(), *r;
  size_t i, n = json_array_size(b->rows);
  json_array_foreach (b->rows, i, r) {
    if (i >= JB_CS_LISTED) break;
    json_array_append_new(files, json_pack("{s:O, s:O, s:O}", "path", json_object_get(r, "path"),
                                           "change", json_object_get(r, "change"), "approvable",
                                           json_object_get(r, "approvable")));
  }
  json_t *ev = json_pack("{s:s, s:I, s:s, s:s, s:I, s:O*, s:s, s:I, s:I, s:o, s:b, s:s}", "jobId",
                         b->job, "opId", (json_int_t)op_id, "tool", "changeset", "path", path,
                         "execOpId", (json_int_t)b->exec_op_id, "argv", argv, "changesetSha256",
                         sha, "total", (json_int_t)n, "approvableCount", (json_int_t)approvable,
                         "files", files, "filesTruncated", n > JB_CS_LISTED, "askedBy", "mode");
  /* the event's bound: fewer files named until it fits */
  while (ev && jb_db_event_size(b->job, JB_EVENT_APPROVAL_REQUEST, ev) > JB_EVENT_MAX_BYTES &&
         json_array_size(json_object_get(ev, "files")) > 0) {
    json_t *f = json_object_get(ev, "files");
    json_array_remove(f, json_array_size(f) - 1);
    json_object_set_new(ev, "filesTruncated", json_true());
  }
  if (ev) worker_publish(b->w, c, b->job, JB_EVENT_APPROVAL_REQUEST, ev);
}

json_t *changeset_store(struct jb_cs_build *b, const char *path, const json_t *argv) {
  if (!b->built)
    return json_pack("{s:s, s:s, s:s}", "state", "refused", "code",
                     b->code[0] ? b->code : "internal", "error",
                     b->why[0] ? b->why : "the command's changes could not be read");
  size_t n = json_array_size(b->rows);
  if (n == 0) return json_pack("{s:s, s:i}", "state", "empty", "files", 0);
  long long approvable = 0;
  json_t *r;
  size_t i;
  json_array_foreach (b->rows, i, r) approvable += json_is_true(json_object_get(r, "approvable"));
  char sha[65];
  digest(b->rows, sha);
  json_t *args = json_pack("{s:I, s:s, s:I, s:I, s:I}", "execOpId", (json_int_t)b->exec_op_id,
                           "changesetSha256", sha, "files", (json_int_t)n, "approvable",
                           (json_int_t)approvable, "bytes", (json_int_t)b->bytes);
  cleanup_conn struct worker_conn conn = {0};
  jb_error e = {0};
  conn = worker_conn(b->w, &e);
  long long op_id = 0;
  int rc = conn.pg && args ? jb_db_changeset_insert(conn.pg, b->job, b->exec_op_id, path, args,
                                                    b->rows, &op_id, &e)
                           : JB_ERR_FAIL;
  json_decref(args);
  if (rc != JB_OK)
    return json_pack("{s:s, s:s, s:s}", "state", "refused", "code",
                     rc == JB_ERR_CONFLICT ? "ended" : "internal", "error", e.msg);
  announce(b, conn.pg, op_id, path, argv, sha, approvable);
  return json_pack("{s:I, s:s, s:I, s:I, s:s}", "opId", (json_int_t)op_id, "state", "pending",
                   "files", (json_int_t)n, "approvable", (json_int_t)approvable, "changesetSha256",
                   sha);
}

void changeset_build_free(struct jb_cs_build *b) {
  json_decref(b->rows);
  b->rows = NULL;
}
