/* landing.c — the landing check over what a writable command leaves (see landing.h): the
 * pre-image of the covered entries, and the undo of what the command left at covered paths. */
#define _GNU_SOURCE
#include "sandbox/worker/landing.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/scan.h"

#define TREE_DEPTH_MAX 256 /* directory levels removed below a flagged directory */

/* One kept entry. */
struct kept {
  char *path;
  char type; /* f d l o */
  bool covered; /* at a covered path (else only a directory above one) */
  bool has_data; /* content (files) or target (links) kept */
  mode_t mode; /* st_mode & 07777 */
  uid_t uid;
  gid_t gid;
  char *data; /* content or link target */
  size_t len;
  char rule[64];
};

struct jb_preimage {
  struct kept *v; /* in path order (a directory before what it holds) */
  size_t n;
  bool whole;
};

bool jb_preimage_whole(const struct jb_preimage *p) { return p && p->whole; }

void jb_preimage_free(struct jb_preimage *p) {
  if (!p) return;
  for (size_t i = 0; i < p->n; i++) {
    free(p->v[i].path);
    free(p->v[i].data);
  }
  free(p->v);
  free(p);
}

/* The directory `dir` (relative; "" the root) opened beneath `rootfd` with no symbolic link
 * anywhere on the way: a new fd, or -1 (errno). */
static int open_dir(int rootfd, const char *dir) {
  if (!dir[0]) return fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
  struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  return (int)syscall(SYS_openat2, rootfd, dir, &how, sizeof how);
}

/* Splits `path` into its directory (into `dir`, `dsize` bytes) and its name (returned,
 * within `path`). NULL when the path is too long. */
static const char *split(const char *path, char *dir, size_t dsize) {
  const char *slash = strrchr(path, '/');
  size_t dl = slash ? (size_t)(slash - path) : 0;
  if (dl >= dsize) return NULL;
  memcpy(dir, path, dl);
  dir[dl] = '\0';
  return slash ? slash + 1 : path;
}

/* The parent directory of `path` opened as open_dir does, its name in *name: a new fd or -1. */
static int open_parent(int rootfd, const char *path, const char **name) {
  char dir[PATH_MAX];
  *name = split(path, dir, sizeof dir);
  if (!*name) return -1;
  return open_dir(rootfd, dir);
}

/* Reads at most `max` bytes of regular file `name` of `dfd` (never through a link) into
 * *data (new). 0; 1 when it has more than `max` bytes; -1 when it cannot be read. */
static int read_file(int dfd, const char *name, size_t max, char **data, size_t *len) {
  int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return -1;
  }
  if ((unsigned long long)st.st_size > max) {
    close(fd);
    return 1;
  }
  char *b = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  int rc = b ? 0 : -1;
  while (rc == 0) {
    ssize_t r = read(fd, b + got, (size_t)st.st_size + 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) rc = -1;
    if (r <= 0) break;
    got += (size_t)r;
    if (got > (size_t)st.st_size) rc = 1; /* grew meanwhile */
  }
  close(fd);
  if (rc != 0) {
    free(b);
    return rc;
  }
  *data = b;
  *len = got;
  return 0;
}

/* Keeps entry `e` (covered or a directory above one) in `p`, reading it through `rootfd`;
 * `*bytes` counts the content kept. 0, or -1 when out of memory. */
static int keep_entry(struct jb_preimage *p, int rootfd, const struct jb_scan_entry *e,
                      bool covered, const char *rule, size_t *bytes) {
  struct kept *k = &p->v[p->n];
  *k = (struct kept){.type = e->type, .covered = covered, .mode = e->mode};
  snprintf(k->rule, sizeof k->rule, "%s", rule);
  if (!(k->path = strdup(e->path))) return -1;
  p->n++;
  const char *name;
  int pfd = open_parent(rootfd, e->path, &name);
  struct stat st;
  if (pfd < 0 || fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    if (pfd >= 0) close(pfd);
    p->whole = false; /* gone or unreachable meanwhile: not kept */
    return 0;
  }
  k->uid = st.st_uid;
  k->gid = st.st_gid;
  k->mode = st.st_mode & 07777;
  if (covered && e->type == 'f') {
    int r = read_file(pfd, name, JB_PREIMAGE_BYTES_MAX - *bytes, &k->data, &k->len);
    if (r == 0) *bytes += k->len;
    k->has_data = r == 0;
  } else if (covered && e->type == 'l') {
    char t[PATH_MAX];
    ssize_t n = readlinkat(pfd, name, t, sizeof t - 1);
    if (n >= 0 && (k->data = strndup(t, (size_t)n))) k->len = (size_t)n;
    k->has_data = n >= 0 && k->data;
  } else {
    k->has_data = true; /* a directory: its mode and owner are all there is to keep */
  }
  close(pfd);
  if (!k->has_data && e->type != 'o') p->whole = false;
  return 0;
}

static int by_path(const void *key, const void *e) {
  return strcmp((const char *)key, ((const struct jb_scan_entry *)e)->path);
}

static const struct jb_scan_entry *find(const struct jb_scan_snapshot *s, const char *path) {
  return s->n ? bsearch(path, s->v, s->n, sizeof *s->v, by_path) : NULL;
}

int jb_preimage_take(const char *root, const struct jb_scan_snapshot *before,
                     struct jb_preimage **out, jb_error *err) {
  *out = NULL;
  struct jb_preimage *p = calloc(1, sizeof *p);
  unsigned char *need = calloc(before->n ? before->n : 1, 1); /* 1 above a covered one, 2 covered */
  if (!p || !need) goto oom;
  p->whole = !before->truncated;
  size_t count = 0;
  for (size_t i = 0; i < before->n; i++) {
    char rule[64];
    if (!jb_scan_landing_in_use(before->v[i].path, before->v[i].type == 'd', rule, sizeof rule))
      continue;
    need[i] = 2;
    count++;
    /* the directories above it */
    char up[PATH_MAX];
    snprintf(up, sizeof up, "%s", before->v[i].path);
    for (char *sl = strrchr(up, '/'); sl; sl = strrchr(up, '/')) {
      *sl = '\0';
      const struct jb_scan_entry *d = find(before, up);
      if (d && !need[d - before->v]) {
        need[d - before->v] = 1;
        count++;
      }
    }
  }
  if (count > JB_PREIMAGE_ENTRIES_MAX) count = JB_PREIMAGE_ENTRIES_MAX, p->whole = false;
  if (!(p->v = calloc(count ? count : 1, sizeof *p->v))) goto oom;
  int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (rootfd < 0) {
    int e = errno;
    free(need);
    jb_preimage_free(p);
    return jb_fail_errno(err, e, "open workspace %s", root);
  }
  size_t bytes = 0;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < before->n && p->n < count; i++) {
    if (!need[i]) continue;
    char rule[64] = "";
    if (need[i] == 2)
      jb_scan_landing_in_use(before->v[i].path, before->v[i].type == 'd', rule, sizeof rule);
    rc = keep_entry(p, rootfd, &before->v[i], need[i] == 2, rule, &bytes);
  }
  close(rootfd);
  free(need);
  if (rc < 0) {
    jb_preimage_free(p);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  *out = p;
  return 0;
oom:
  free(need);
  jb_preimage_free(p);
  return jb_fail(err, ENOMEM, "out of memory");
}

/* ---- the undo ---- */

/* Removes entry `name` of `dfd` and, when it is a directory, everything under it — never
 * following a link (each directory opened O_NOFOLLOW from its parent's fd). 0, or -1. */
static int remove_tree(int dfd, const char *name, int depth) {
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(st.st_mode)) return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -1 : 0;
  if (depth > TREE_DEPTH_MAX) return -1;
  int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0) return -1;
  DIR *d = fdopendir(sub);
  if (!d) {
    close(sub);
    return -1;
  }
  int rc = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
        remove_tree(dirfd(d), de->d_name, depth + 1) < 0)
      rc = -1;
  closedir(d);
  if (rc == 0 && unlinkat(dfd, name, AT_REMOVEDIR) < 0) rc = -1;
  return rc;
}

/* Marks the change of `path` in `changes`: flagged `rule`, and `key` (removed, restored)
 * `ok`. */
static void mark(json_t *changes, const char *path, const char *rule, const char *key, bool ok) {
  json_t *pj = jb_scan_path_json(path), *c;
  size_t i;
  json_array_foreach (changes, i, c)
    if (pj && json_equal(json_object_get(c, "path"), pj)) {
      json_object_set_new(c, "flagged", json_string(rule));
      json_object_set_new(c, key, json_boolean(ok));
    }
  json_decref(pj);
}

static void note(struct jb_landing_outcome *out, const char *rule, const char *path,
                 const char *done, bool ok) {
  out->flagged++;
  if (!ok) out->failed++;
  if (!out->first[0]) {
    json_t *pj = jb_scan_path_json(path);
    snprintf(out->first, sizeof out->first, "landing %s %.200s %s%s", rule,
             pj ? json_string_value(pj) : "?", done, ok ? "" : " (failed)");
    json_decref(pj);
  }
}

static const struct kept *kept_find(const struct jb_preimage *p, const char *path) {
  for (size_t i = 0; p && i < p->n; i++)
    if (!strcmp(p->v[i].path, path)) return &p->v[i];
  return NULL;
}

/* Whether the entry at `name` of `pfd` is as `k` keeps it. */
static bool as_kept(int pfd, const char *name, const struct kept *k) {
  struct stat st;
  if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return false;
  char t = S_ISREG(st.st_mode) ? 'f' : S_ISDIR(st.st_mode) ? 'd' : S_ISLNK(st.st_mode) ? 'l' : 'o';
  if (t != k->type) return false;
  if (!k->covered) return true; /* a directory above: being one is enough */
  if (t != 'l' && ((st.st_mode & 07777) != k->mode || st.st_uid != k->uid || st.st_gid != k->gid))
    return false;
  if (t == 'f') {
    char *data = NULL;
    size_t len = 0;
    bool same = read_file(pfd, name, k->len, &data, &len) == 0 && len == k->len &&
                (!len || !memcmp(data, k->data, len));
    free(data);
    return same;
  }
  if (t == 'l') {
    char b[PATH_MAX];
    ssize_t n = readlinkat(pfd, name, b, sizeof b - 1);
    return n >= 0 && (size_t)n == k->len && !memcmp(b, k->data, k->len);
  }
  return true;
}

/* Puts entry `name` of `pfd` back as `k` keeps it: a file or link written beside it under a
 * temporary name and renamed over it (never written through what is there), a directory made
 * or given back its mode and owner. 0, or -1. */
static int put_back(int pfd, const char *name, const struct kept *k) {
  struct stat st;
  bool exists = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (k->type == 'd') {
    if (exists && !S_ISDIR(st.st_mode) && remove_tree(pfd, name, 0) < 0) return -1;
    if ((!exists || !S_ISDIR(st.st_mode)) && mkdirat(pfd, name, 0700) < 0) return -1;
    int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = k->covered || !exists ? (fchown(fd, k->uid, k->gid) | fchmod(fd, k->mode)) : 0;
    close(fd);
    return rc < 0 ? -1 : 0;
  }
  char tmp[64];
  unsigned char rnd[8];
  randombytes_buf(rnd, sizeof rnd);
  snprintf(tmp, sizeof tmp, ".jb-restore-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
           rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
  int rc = 0;
  if (k->type == 'f') {
    int fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    for (size_t off = 0; rc == 0 && off < k->len;) {
      ssize_t w = write(fd, k->data + off, k->len - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        rc = -1;
      else
        off += (size_t)w;
    }
    if (rc == 0 && (fchown(fd, k->uid, k->gid) < 0 || fchmod(fd, k->mode) < 0)) rc = -1;
    close(fd);
  } else {
    char *t = strndup(k->data, k->len);
    rc = t && symlinkat(t, pfd, tmp) == 0 ? 0 : -1;
    free(t);
    if (rc == 0 && fchownat(pfd, tmp, k->uid, k->gid, AT_SYMLINK_NOFOLLOW) < 0) rc = -1;
  }
  if (rc == 0 && exists && S_ISDIR(st.st_mode) && remove_tree(pfd, name, 0) < 0) rc = -1;
  if (rc == 0 && renameat(pfd, tmp, pfd, name) < 0) rc = -1;
  if (rc < 0) unlinkat(pfd, tmp, 0);
  return rc;
}

/* Removes what the command left at covered paths and has no pre-image to go back to: in
 * reverse path order, so what a directory holds goes before it. */
static void remove_new(int rootfd, const struct jb_scan_snapshot *before,
                       const struct jb_scan_snapshot *after, const struct jb_preimage *pre,
                       json_t *changes, struct jb_landing_outcome *out) {
  for (size_t i = after->n; i-- > 0;) {
    const struct jb_scan_entry *e = &after->v[i];
    char rule[64];
    if (!jb_scan_entry_changed(before, after, i) ||
        !jb_scan_landing_in_use(e->path, e->type == 'd', rule, sizeof rule))
      continue;
    const struct kept *k = kept_find(pre, e->path);
    if (k && k->has_data) continue; /* put back by restore_kept */
    const char *name;
    int pfd = open_parent(rootfd, e->path, &name);
    bool ok = pfd >= 0 && remove_tree(pfd, name, 0) == 0;
    if (pfd >= 0) close(pfd);
    mark(changes, e->path, rule, "removed", ok);
    note(out, rule, e->path, "removed", ok);
  }
}

/* Puts back each kept entry that is no longer as it was, in path order. */
static void restore_kept(int rootfd, const struct jb_preimage *pre, json_t *changes,
                         struct jb_landing_outcome *out) {
  for (size_t i = 0; pre && i < pre->n; i++) {
    const struct kept *k = &pre->v[i];
    if (!k->has_data) continue;
    const char *name;
    int pfd = open_parent(rootfd, k->path, &name);
    if (pfd >= 0 && as_kept(pfd, name, k)) {
      close(pfd);
      continue;
    }
    bool ok = pfd >= 0 && put_back(pfd, name, k) == 0;
    if (pfd >= 0) close(pfd);
    if (!k->covered) continue; /* a directory above one: made again for it */
    mark(changes, k->path, k->rule, "restored", ok);
    note(out, k->rule, k->path, "restored", ok);
  }
}

/* Clears the set-ID bits of the regular files the command added or changed. */
static void clear_setid(int rootfd, const struct jb_scan_snapshot *before,
                        const struct jb_scan_snapshot *after) {
  for (size_t i = 0; i < after->n; i++) {
    const struct jb_scan_entry *e = &after->v[i];
    if (e->type != 'f' || !(e->mode & 06000) || !jb_scan_entry_changed(before, after, i)) continue;
    const char *name;
    int pfd = open_parent(rootfd, e->path, &name);
    if (pfd < 0) continue;
    int fd = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
      (void)fchmod(fd, st.st_mode & 01777 & ~(mode_t)06000);
    if (fd >= 0) close(fd);
    close(pfd);
  }
}

void jb_landing_undo(const char *root, const struct jb_scan_snapshot *before,
                     const struct jb_scan_snapshot *after, const struct jb_preimage *pre,
                     json_t *changes, struct jb_landing_outcome *out) {
  *out = (struct jb_landing_outcome){.incomplete = !jb_preimage_whole(pre)};
  int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (rootfd < 0) {
    out->failed++;
    out->incomplete = true;
    return;
  }
  clear_setid(rootfd, before, after);
  remove_new(rootfd, before, after, pre, changes, out);
  restore_kept(rootfd, pre, changes, out);
  close(rootfd);
}
