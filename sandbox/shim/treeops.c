/* treeops.c — the shim's ops that change the tree rather than a file's bytes: mkdir, move,
 * delete (sandbox/proto/PROTOCOL.md). They resolve paths as write does (walk.h, walk.c:
 * from the root's descriptor, one component at a time, no symlink passed), and change names
 * only relative to the descriptors of the directories reached (mkdirat, renameat2, unlinkat
 * with a single name), so a path string is never resolved twice and a directory swapped for a
 * symlink meanwhile is never followed.
 *
 * What is refused, and how: a symlink on the way (escape symlink_escape when it leads out); a
 * regular file with several links (hard_link) or a fifo, socket or device as the thing moved
 * or deleted; a directory on another file system than the workspace's (a mount point); an
 * excluded path, before or after a move, and anything excluded inside a directory moved or
 * deleted. A refusal changes nothing: mkdir creates its missing parents only after the
 * existing ones were walked, and removes what it made when a later step fails; a recursive
 * delete and a directory's move look at the whole tree first. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/shim/walk.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

#define TREE_MAX 100000 /* entries one recursive delete or directory move may look at */

/* Refuses when the directory `fd` (the walk's current one) is not on the workspace's file
 * system: below a mount point nothing is changed. */
static int check_same_fs(int fd, const char *path, struct jb_fileop_error *e) {
  struct stat st;
  if (fstat(fd, &st) < 0) return fo_fail_errno(e, errno, path);
  if (st.st_dev != fo_root_dev)
    return fo_fail(e, "denied", EXDEV, "%s is below a mount point: not changed", path);
  return 0;
}

json_t *fo_op_mkdir(json_t *req, struct jb_fileop_error *e) {
  const char *path = fo_arg_path(req, NULL, e);
  if (!path) return NULL;
  /* no symlink is passed, so the symlink-free path is the path itself */
  if (fo_canon_excluded(path)) {
    fo_fail(e, "excluded", EPERM, "%s is excluded from this session", path);
    return NULL;
  }
  struct walk w = {.fds = {fo_root_fd}, .depth = 0};
  char names[JB_PATH_MAX + 1];
  snprintf(names, sizeof names, "%s", path);
  char *comp[MAX_DEPTH + 1];
  int n = 0;
  for (char *c = names, *save = NULL; (c = strtok_r(c, "/", &save)); c = NULL) {
    if (n == MAX_DEPTH) {
      fo_fail(e, "denied", ELOOP, "the path is over %d directories deep", MAX_DEPTH);
      return NULL;
    }
    comp[n++] = c;
  }
  /* walk what exists */
  int i = 0;
  for (; i < n; i++) {
    int fd = openat(fo_walk_dir(&w), comp[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) < 0 || st.st_dev != fo_root_dev) {
        close(fd);
        fo_walk_close(&w);
        fo_fail(e, "denied", EXDEV, "%s: '%s' is a mount point: nothing is made below it", path,
                comp[i]);
        return NULL;
      }
      w.fds[++w.depth] = fd;
      size_t cl = strlen(w.canon);
      snprintf(w.canon + cl, sizeof w.canon - cl, "%s%s", cl ? "/" : "", comp[i]);
      continue;
    }
    int en = errno;
    if (en == ENOENT) break;
    struct stat st;
    if ((en == ENOTDIR || en == ELOOP) &&
        fstatat(fo_walk_dir(&w), comp[i], &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(st.st_mode)) {
        bool out = fo_link_leads_out(&w, comp[i]);
        fo_walk_close(&w);
        fo_fail(e, "denied", ELOOP, "'%s' is a symlink%s: mkdir never passes a symlink", comp[i],
                out ? " that leads out of the workspace" : "");
        if (out) e->escape = "symlink_escape";
        return NULL;
      }
      fo_walk_close(&w);
      fo_fail(e, "exists", EEXIST, "%s: '%s' exists and is not a directory", path, comp[i]);
      return NULL;
    }
    fo_walk_close(&w);
    fo_fail_errno(e, en, path);
    return NULL;
  }
  if (i == n) {
    fo_walk_close(&w);
    return json_pack("{s:b, s:s}", "created", 0, "type", "dir");
  }
  /* make the rest; on a failure remove what this call made (deepest first) */
  int made = 0, en = 0;
  for (int k = i; k < n; k++) {
    if (mkdirat(fo_walk_dir(&w), comp[k], 0755) < 0) {
      en = errno;
      break;
    }
    made++;
    int fd = openat(fo_walk_dir(&w), comp[k], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      en = errno;
      break;
    }
    w.fds[++w.depth] = fd;
  }
  if (en) {
    /* comp[k]'s parent is fds[k] (fds[0] the root), open for every k made */
    for (int k = i + made - 1; k >= i; k--)
      if (k <= w.depth) unlinkat(w.fds[k], comp[k], AT_REMOVEDIR);
    fo_walk_close(&w);
    if (en == EEXIST) {
      fo_fail(e, "changed", EEXIST, "%s: the tree changed during mkdir; nothing was made", path);
      return NULL;
    }
    fo_fail_errno(e, en, path);
    return NULL;
  }
  fo_walk_close(&w);
  return json_pack("{s:b, s:s}", "created", 1, "type", "dir");
}

/* Whether the symlink target `target`, read in the directory whose symlink-free path is
 * `dir` ("" the root), leads above the root when judged by its text (absolute targets
 * always do). Used for links inside a directory that moves: the text stays, its meaning
 * moves with the directory. */
static bool lexically_out(const char *dir, const char *target) {
  if (target[0] == '/' || target[0] == '\0') return true;
  long depth = 0;
  for (const char *p = dir; *p;) {
    depth++;
    p = strchr(p, '/');
    if (!p) break;
    p++;
  }
  for (const char *p = target; *p;) {
    size_t len = strcspn(p, "/");
    if (len == 2 && p[0] == '.' && p[1] == '.') {
      if (--depth < 0) return true;
    } else if (len > 0 && !(len == 1 && p[0] == '.')) {
      depth++;
    }
    p += len;
    while (*p == '/') p++;
  }
  return false;
}

/* The names of a tree as they would land (stat's `tree`, a bound move's `expectTree`): each
 * entry's path below the tree's root, a directory's with "/" after it, in walk order, and
 * the SHA-256 over them (each name followed by a NUL byte). */
struct tree_names {
  json_t *list; /* the names (owned), or NULL: the digest alone */
  size_t n, bytes;
  crypto_hash_sha256_state h;
};

/* What a walk over a tree checks, and whether it removes what it checked. */
struct tree {
  const char *op; /* "delete", "move" or "stat", for the messages */
  bool look_only; /* stat: hard-linked and special files are named, not refused */
  size_t base_len; /* bytes of an entry's path before its name below the tree's root */
  struct tree_names *names; /* collects the names, or NULL */
  const char *dst; /* move: the destination's symlink-free path; NULL for delete */
  size_t src_len; /* move: bytes of the source's path that `dst` replaces */
  bool remove; /* delete's second pass */
  size_t entries; /* looked at */
  long long removed; /* removed (delete's second pass) */
  struct jb_fileop_error *e;
};

/* The path `rel` would have after the move (into `out`, JB_PATH_MAX + 1). 0 or -1. */
static int moved_path(const struct tree *t, const char *rel, char *out) {
  int n = snprintf(out, JB_PATH_MAX + 1, "%s%s", t->dst, rel + t->src_len);
  return n < 0 || n > JB_PATH_MAX ? -1 : 0;
}

/* Walks the directory `fd` (owned, closed here) whose symlink-free path is `rel`, in name
 * order: every entry is checked, and with t->remove removed after its check (a directory
 * after its contents). 0, or -1 with *t->e at the first entry refused. */
/* Adds entry `child` (a directory when `dir`) to t->names. 0, or -1 with *t->e (`too_large`)
 * past JB_TREE_NAMES_MAX names or JB_TREE_NAMES_BYTES bytes of them. */
static int name_collect(struct tree *t, const char *child, bool dir) {
  struct tree_names *nm = t->names;
  const char *rel = child + t->base_len;
  size_t len = strlen(rel);
  nm->n++;
  nm->bytes += len + 1 + dir;
  if (nm->n > JB_TREE_NAMES_MAX || nm->bytes > JB_TREE_NAMES_BYTES)
    return fo_fail(t->e, "too_large", EFBIG,
                   "the tree has over %d entries or %d bytes of names: too many to check "
                   "where they land; move it in parts",
                   JB_TREE_NAMES_MAX, JB_TREE_NAMES_BYTES);
  crypto_hash_sha256_update(&nm->h, (const unsigned char *)rel, len);
  crypto_hash_sha256_update(&nm->h, (const unsigned char *)"/", dir);
  crypto_hash_sha256_update(&nm->h, (const unsigned char *)"", 1);
  if (!nm->list) return 0;
  char *s = malloc(len + 2);
  if (!s) return fo_fail(t->e, "internal", ENOMEM, "out of memory");
  memcpy(s, rel, len);
  s[len] = '/';
  s[len + dir] = '\0';
  json_t *js = json_string(s);
  free(s);
  if (!js)
    return fo_fail(t->e, "denied", EILSEQ,
                   "%s: the name is not UTF-8, so where it lands cannot be checked", child);
  return json_array_append_new(nm->list, js) < 0
             ? fo_fail(t->e, "internal", ENOMEM, "out of memory")
             : 0;
}

static int tree_walk(int fd, const char *rel, int depth, struct tree *t) {
  DIR *d = fdopendir(fd);
  if (!d) {
    int en = errno;
    close(fd);
    return fo_fail_errno(t->e, en, rel);
  }
  struct fo_names names;
  int rc = 0;
  if (fo_read_names(d, &names) < 0) {
    rc = fo_fail(t->e, "too_large", EFBIG, "%s: too many entries to %s", rel, t->op);
    goto out;
  }
  for (size_t k = 0; k < names.n && rc == 0; k++) {
    const char *name = names.v[k];
    char child[JB_PATH_MAX + 1];
    int cl = snprintf(child, sizeof child, "%s%s%s", rel, rel[0] ? "/" : "", name);
    if (cl < 0 || cl > JB_PATH_MAX) {
      rc = fo_fail(t->e, "denied", ENAMETOOLONG, "a path below %s is over %d bytes", rel,
                   JB_PATH_MAX);
      break;
    }
    if (++t->entries > TREE_MAX) {
      rc = fo_fail(t->e, "too_large", EFBIG, "over %d entries to %s: refused", TREE_MAX, t->op);
      break;
    }
    struct stat st;
    if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT) continue; /* gone meanwhile */
      rc = fo_fail_errno(t->e, errno, child);
      break;
    }
    char after[JB_PATH_MAX + 1];
    if (fo_canon_excluded(child)) {
      rc = fo_fail(t->e, "excluded", EPERM,
                   "%s is excluded from this session: the %s is refused whole", child, t->op);
      break;
    }
    if (t->dst && (moved_path(t, child, after) < 0 || fo_canon_excluded(after))) {
      rc = fo_fail(t->e, "excluded", EPERM,
                   "%s would become %s, excluded from this session: the move is refused", child,
                   after);
      break;
    }
    if (t->names && name_collect(t, child, S_ISDIR(st.st_mode)) < 0) {
      rc = -1;
      break;
    }
    if (S_ISLNK(st.st_mode)) {
      char target[JB_PATH_MAX + 1];
      ssize_t tl = readlinkat(dirfd(d), name, target, sizeof target - 1);
      if (tl < 0) {
        rc = fo_fail_errno(t->e, errno, child);
        break;
      }
      target[tl] = '\0';
      bool out = false;
      if (target[0] == '/' || tl == 0) {
        out = true;
      } else {
        char tp[2 * JB_PATH_MAX + 2];
        int n = snprintf(tp, sizeof tp, "%s%s%s", rel, rel[0] ? "/" : "", target);
        if (n < 0 || n > JB_PATH_MAX || !fo_resolves_inside(tp, &out))
          out = out || lexically_out(rel, target);
      }
      if (!out && t->dst) {
        char after_dir[JB_PATH_MAX + 1];
        if (moved_path(t, rel, after_dir) < 0 || lexically_out(after_dir, target)) out = true;
      }
      if (out) {
        fo_fail(t->e, "denied", ELOOP, "%s is a symlink that leads out of the workspace%s", child,
                t->dst ? " (or would, moved)" : "");
        t->e->escape = "symlink_escape";
        rc = -1;
        break;
      }
    } else if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != fo_root_dev) {
        rc = fo_fail(t->e, "denied", EXDEV, "%s is a mount point: the %s is refused", child, t->op);
        break;
      }
      if (depth + 1 >= MAX_DEPTH) {
        rc = fo_fail(t->e, "denied", ELOOP, "%s is over %d directories deep", child, MAX_DEPTH);
        break;
      }
      int sub = fo_open_dir_readable(dirfd(d), name);
      struct stat sst;
      if (sub < 0 || fstat(sub, &sst) < 0 || sst.st_ino != st.st_ino || sst.st_dev != st.st_dev) {
        int en = sub < 0 ? errno : EAGAIN;
        if (sub >= 0) close(sub);
        rc = en == EAGAIN
                 ? fo_fail(t->e, "changed", EAGAIN, "%s changed during the %s", child, t->op)
                 : fo_fail_errno(t->e, en, child);
        break;
      }
      rc = tree_walk(sub, child, depth + 1, t);
      if (rc == 0 && t->remove) {
        if (unlinkat(dirfd(d), name, AT_REMOVEDIR) < 0) {
          rc = fo_fail_errno(t->e, errno, child);
          break;
        }
        t->removed++;
      }
      continue;
    } else if (!t->dst && !t->look_only) { /* a move takes these along; a delete refuses */
      if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
        fo_fail(t->e, "denied", EMLINK,
                "%s has %lu hard links: the delete is refused (it may be a file outside)", child,
                (unsigned long)st.st_nlink);
        t->e->escape = "hard_link";
        rc = -1;
        break;
      }
      if (!S_ISREG(st.st_mode)) {
        rc = fo_fail(t->e, "denied", EPERM, "%s is a fifo, socket or device: the delete is refused",
                     child);
        break;
      }
    }
    if (t->remove) {
      if (unlinkat(dirfd(d), name, 0) < 0) {
        rc = fo_fail_errno(t->e, errno, child);
        break;
      }
      t->removed++;
    }
  }
out:
  fo_names_free(&names);
  closedir(d);
  return rc;
}

/* The name `last` in the walk's directory, looked at for move or delete: regular single-link
 * file, directory (not a mount point) or, for delete, a symlink that stays inside. 0 with
 * *st, or -1 with *e. */
static int check_subject(const struct walk *w, const char *last, const char *path, bool is_move,
                         struct stat *st, struct jb_fileop_error *e) {
  if (fstatat(fo_walk_dir(w), last, st, AT_SYMLINK_NOFOLLOW) < 0)
    return fo_fail_errno(e, errno, path);
  if (S_ISLNK(st->st_mode)) {
    bool out = fo_link_leads_out(w, last);
    if (out || is_move) {
      fo_fail(e, "denied", ELOOP, "%s is a symlink%s", path,
              out ? " that leads out of the workspace" : ": a move takes files and directories");
      if (out) e->escape = "symlink_escape";
      return -1;
    }
    return 0;
  }
  if (S_ISDIR(st->st_mode)) {
    if (st->st_dev != fo_root_dev)
      return fo_fail(e, "denied", EXDEV, "%s is a mount point: refused", path);
    return 0;
  }
  return fo_check_regular(st, path, e);
}

/* Walks the directory `last` of `w` (whose path is `canon`) with `t`. 0 or -1 with *t->e. */
static int tree_of(const struct walk *w, const char *last, const char *canon, const struct stat *st,
                   struct tree *t) {
  int fd = fo_open_dir_readable(fo_walk_dir(w), last);
  struct stat sst;
  if (fd < 0 || fstat(fd, &sst) < 0 || sst.st_ino != st->st_ino || sst.st_dev != st->st_dev) {
    int en = fd < 0 ? errno : EAGAIN;
    if (fd >= 0) close(fd);
    if (en == EAGAIN) return fo_fail(t->e, "changed", EAGAIN, "%s changed", canon);
    return fo_fail_errno(t->e, en, canon);
  }
  return tree_walk(fd, canon, 0, t);
}

/* The hex SHA-256 of the names collected (65 bytes). */
static void names_digest(struct tree_names *nm, char hex[65]) {
  unsigned char h[32];
  crypto_hash_sha256_final(&nm->h, h);
  sodium_bin2hex(hex, 65, h, sizeof h);
}

json_t *fo_tree_names(const struct walk *w, const char *last, const char *canon,
                      struct jb_fileop_error *e) {
  struct stat st;
  if (fstatat(fo_walk_dir(w), last, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    fo_fail_errno(e, errno, canon);
    return NULL;
  }
  if (!S_ISDIR(st.st_mode)) return json_null();
  if (st.st_dev != fo_root_dev) {
    fo_fail(e, "denied", EXDEV, "%s is a mount point", canon);
    return NULL;
  }
  struct tree_names nm = {.list = json_array()};
  if (!nm.list) {
    fo_fail(e, "internal", ENOMEM, "out of memory");
    return NULL;
  }
  crypto_hash_sha256_init(&nm.h);
  struct tree t = {.op = "stat",
                   .look_only = true,
                   .base_len = canon[0] ? strlen(canon) + 1 : 0,
                   .names = &nm,
                   .e = e};
  if (tree_of(w, last, canon, &st, &t) < 0) {
    json_decref(nm.list);
    return NULL;
  }
  char hex[65];
  names_digest(&nm, hex);
  json_t *o = json_pack("{s:o, s:s}", "entries", nm.list, "sha256", hex);
  if (!o) fo_fail(e, "internal", ENOMEM, "out of memory");
  return o;
}

/* A bound op's `key` of `req` (a hex SHA-256, "" for nothing there) into *out (NULL when
 * absent): 0, or -1 with *e for one that is not a string. */
static int expect_arg(json_t *req, const char *key, const char **out, struct jb_fileop_error *e) {
  json_t *j = json_object_get(req, key);
  if (j && !json_is_string(j))
    return fo_fail(e, "bad_request", EINVAL, "'%s' must be a string", key);
  *out = json_string_value(j);
  return 0;
}

/* The hex SHA-256 (into hex; "" when not known) of the regular file `name` of `dir`, the one
 * *st describes, read from a descriptor of that very file. Without `expect` best effort: 0.
 * With `expect` (a hex SHA-256; "" = nothing there) the file must hold that: its type, link
 * count and identity checked again on the descriptor and, after the read, the name still
 * leading to it; 0, or -1 with *e (`changed` when it is not so: nothing is done). */
static int file_bound(int dir, const char *name, const struct stat *st, const char *expect,
                      const char *path, const char *op, char hex[65], struct jb_fileop_error *e) {
  hex[0] = '\0';
  if (!S_ISREG(st->st_mode))
    return expect ? fo_fail(e, "changed", EAGAIN,
                            "%s is not the file it was when the %s was"
                            " requested: nothing was done",
                            path, op)
                  : 0;
  int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return expect ? fo_fail_errno(e, errno, path) : 0;
  struct stat ft, nt;
  bool same = fstat(fd, &ft) == 0 && ft.st_ino == st->st_ino && ft.st_dev == st->st_dev;
  int rc = 0;
  if (expect && same && fo_check_regular(&ft, path, e) < 0) {
    rc = -1;
  } else if (!same || fo_hash_fd(fd, hex, NULL, NULL) < 0) {
    int en = same ? errno : EAGAIN;
    hex[0] = '\0';
    if (expect && en == EFBIG)
      rc = fo_fail(e, "too_large", EFBIG, "%s is over %lld bytes: its content cannot be checked",
                   path, HASH_MAX);
    else if (expect && en != EAGAIN)
      rc = fo_fail_errno(e, en, path);
  }
  /* the content expected, and the name still leading to the file read */
  if (expect && rc == 0 &&
      (!hex[0] || strcmp(hex, expect) || fstatat(dir, name, &nt, AT_SYMLINK_NOFOLLOW) < 0 ||
       nt.st_ino != st->st_ino || nt.st_dev != st->st_dev))
    rc = fo_fail(e, "changed", EAGAIN, "%s changed since the %s was requested: nothing was done",
                 path, op);
  close(fd);
  return rc;
}

json_t *fo_op_delete(json_t *req, struct jb_fileop_error *e) {
  json_t *jp = json_object_get(req, "path");
  if (json_is_string(jp) && strcmp(json_string_value(jp), ".") == 0) {
    fo_fail(e, "denied", EPERM, "the workspace root is never deleted");
    return NULL;
  }
  const char *path = fo_arg_path(req, NULL, e);
  if (!path) return NULL;
  json_t *jr = json_object_get(req, "recursive");
  if (jr && !json_is_boolean(jr)) {
    fo_fail(e, "bad_request", EINVAL, "'recursive' must be a boolean");
    return NULL;
  }
  const char *expect = NULL; /* the file's content as the delete was requested */
  if (expect_arg(req, "expectSha256", &expect, e) < 0) return NULL;
  struct walk w;
  char last[JB_PATH_NAME_MAX + 1];
  char canon[JB_PATH_MAX + 1];
  if (fo_resolve_allowed(path, false, false, &w, last, canon, e) < 0) return NULL;
  struct stat st;
  char hex[65];
  if (check_same_fs(fo_walk_dir(&w), path, e) < 0 ||
      check_subject(&w, last, path, false, &st, e) < 0 ||
      (expect && file_bound(fo_walk_dir(&w), last, &st, expect, path, "delete", hex, e) < 0)) {
    fo_walk_close(&w);
    return NULL;
  }
  long long removed = 0;
  int dir = fo_walk_dir(&w);
  if (S_ISDIR(st.st_mode)) {
    if (!json_is_true(jr)) {
      if (unlinkat(dir, last, AT_REMOVEDIR) < 0) {
        int en = errno;
        fo_walk_close(&w);
        if (en == ENOTEMPTY || en == EEXIST)
          fo_fail(e, "denied", en, "%s is a directory that is not empty: delete it recursive",
                  path);
        else
          fo_fail_errno(e, en, path);
        return NULL;
      }
      removed = 1;
    } else {
      /* the whole tree checked first: a refusal anywhere in it removes nothing */
      struct tree t = {.op = "delete", .e = e};
      if (tree_of(&w, last, canon, &st, &t) < 0) {
        fo_walk_close(&w);
        return NULL;
      }
      /* then removed, every entry checked again as it is met (the tree may have changed
       * between the passes: what became refusable stops the delete there) */
      t.remove = true;
      t.entries = 0;
      int rc = tree_of(&w, last, canon, &st, &t);
      removed = t.removed;
      if (rc == 0 && unlinkat(dir, last, AT_REMOVEDIR) < 0) rc = fo_fail_errno(e, errno, path);
      if (rc < 0) {
        fo_walk_close(&w);
        if (removed) {
          /* the message says what happened; the code stays the refusal's */
          size_t ml = strlen(e->message);
          snprintf(e->message + ml, sizeof e->message - ml,
                   " (found during the removal: %lld entries were removed already)", removed);
        }
        return NULL;
      }
      removed++;
    }
  } else {
    if (unlinkat(dir, last, 0) < 0) {
      int en = errno;
      fo_walk_close(&w);
      fo_fail_errno(e, en, path);
      return NULL;
    }
    removed = 1;
  }
  fo_walk_close(&w);
  return json_pack("{s:I, s:s}", "deleted", (json_int_t)removed, "type", fo_type_name(st.st_mode));
}

/* Renames without ever replacing: renameat2(RENAME_NOREPLACE). Where the file system has no
 * such flag (EINVAL — gVisor's gofer-backed mounts, see sandbox/WALLS.md — or ENOSYS): for a
 * regular file link + unlink, which cannot replace either; where that link is not allowed
 * (EPERM with protected hard links: the jail's user neither owns the file nor may write it),
 * and for a directory, a look at the destination right before a plain rename — the one
 * window left, in which a name made meanwhile by someone else would be replaced (for a
 * directory only an empty one: rename fails on a non-empty directory and on a file). */
static int rename_noreplace(int sdir, const char *sname, int ddir, const char *dname, bool is_dir) {
  if (renameat2(sdir, sname, ddir, dname, RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return -1;
  if (!is_dir) {
    if (linkat(sdir, sname, ddir, dname, 0) == 0) {
      if (unlinkat(sdir, sname, 0) == 0) return 0;
      int en = errno;
      unlinkat(ddir, dname, 0);
      errno = en;
      return -1;
    }
    if (errno != EPERM && errno != EACCES) return -1; /* EEXIST among them */
  }
  struct stat st;
  if (fstatat(ddir, dname, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    errno = EEXIST;
    return -1;
  }
  return renameat(sdir, sname, ddir, dname);
}

/* A move's "overwrite" (boolean), "expectTree", "expectSha256" (the source's) and
 * "expectDestSha256" (strings) of `req`, when given: 0, or -1 with *e for one of another
 * type. */
static int move_options(json_t *req, bool *overwrite, json_t **jx, const char **xs, const char **xd,
                        struct jb_fileop_error *e) {
  json_t *jo = json_object_get(req, "overwrite");
  if (jo && !json_is_boolean(jo))
    return fo_fail(e, "bad_request", EINVAL, "'overwrite' must be a boolean");
  *overwrite = json_is_true(jo);
  *jx = json_object_get(req, "expectTree");
  if (*jx && !json_is_string(*jx))
    return fo_fail(e, "bad_request", EINVAL, "'expectTree' must be a string");
  if (expect_arg(req, "expectSha256", xs, e) < 0) return -1;
  return expect_arg(req, "expectDestSha256", xd, e);
}

/* A move's destination, the name `dlast` of `wd` (`dst` in messages): absent, or — with
 * `overwrite` and a file moving — a regular file with one link that may be replaced (*replaces
 * set), bound by `xd` (the content expected there, "" = absent) when given. 0, or -1 with *e
 * (exists, denied, changed). */
static int move_dest(const struct walk *wd, const char *dlast, const char *dst, bool overwrite,
                     bool is_dir, const char *xd, bool *replaces, struct jb_fileop_error *e) {
  int ddir = fo_walk_dir(wd);
  struct stat dt;
  char dhex[65];
  if (fstatat(ddir, dlast, &dt, AT_SYMLINK_NOFOLLOW) < 0) {
    if (errno != ENOENT) return fo_fail_errno(e, errno, dst);
    if (xd && xd[0])
      return fo_fail(e, "changed", EAGAIN, "%s is gone since the move was requested: not moved",
                     dst);
    return 0;
  }
  if (!overwrite)
    return fo_fail(e, "exists", EEXIST, "%s exists: give overwrite to replace a file", dst);
  if (S_ISLNK(dt.st_mode) && fo_link_leads_out(wd, dlast)) {
    fo_fail(e, "denied", ELOOP,
            "%s is a symlink that leads out of the workspace: a move never replaces a symlink",
            dst);
    e->escape = "symlink_escape";
    return -1;
  }
  if (fo_check_regular(&dt, dst, e) < 0) return -1;
  if (is_dir)
    return fo_fail(e, "denied", EISDIR, "%s is a file: a directory never replaces it", dst);
  if (xd && file_bound(ddir, dlast, &dt, xd, dst, "move", dhex, e) < 0) return -1;
  *replaces = true;
  return 0;
}

json_t *fo_op_move(json_t *req, struct jb_fileop_error *e) {
  const char *src = fo_arg_path(req, NULL, e);
  if (!src) return NULL;
  const char *dst = fo_arg_path_key(req, "destination", NULL, e);
  if (!dst) return NULL;
  bool overwrite = false;
  json_t *jx = NULL;
  const char *xs = NULL, *xd = NULL; /* the source's and the destination's content expected */
  if (move_options(req, &overwrite, &jx, &xs, &xd, e) < 0) return NULL;
  struct walk ws, wd;
  char slast[JB_PATH_NAME_MAX + 1], dlast[JB_PATH_NAME_MAX + 1];
  char scanon[JB_PATH_MAX + 1], dcanon[JB_PATH_MAX + 1];
  if (fo_resolve_allowed(src, false, false, &ws, slast, scanon, e) < 0) return NULL;
  struct fo_made made;
  if (fo_resolve_create(dst, json_object_get(req, "createParents"), &wd, dlast, dcanon, &made, e) <
      0) {
    fo_walk_close(&ws);
    return NULL;
  }
  json_t *o = NULL;
  int sdir = fo_walk_dir(&ws), ddir = fo_walk_dir(&wd);
  struct stat st;
  char hex[65] = "";
  if (check_same_fs(sdir, src, e) < 0 || check_same_fs(ddir, dst, e) < 0 ||
      check_subject(&ws, slast, src, true, &st, e) < 0)
    goto out;
  bool is_dir = S_ISDIR(st.st_mode);
  size_t sl = strlen(scanon);
  if (is_dir &&
      (strcmp(dcanon, scanon) == 0 || (strncmp(dcanon, scanon, sl) == 0 && dcanon[sl] == '/'))) {
    fo_fail(e, "denied", EINVAL, "%s cannot move into itself", src);
    goto out;
  }
  bool replaces = false;
  if (move_dest(&wd, dlast, dst, overwrite, is_dir, xd, &replaces, e) < 0) goto out;
  if (jx && !is_dir && strcmp(json_string_value(jx), "file")) {
    fo_fail(e, "changed", EAGAIN, "%s is a file now, not the directory it was: not moved", src);
    goto out;
  }
  if (is_dir) {
    /* nothing excluded may move, nor become excluded, nor may a link come to lead out; with
     * expectTree the names must be those whose landing was checked */
    struct tree_names nm = {0};
    crypto_hash_sha256_init(&nm.h);
    struct tree t = {.op = "move",
                     .dst = dcanon,
                     .src_len = sl,
                     .base_len = sl + 1,
                     .names = jx ? &nm : NULL,
                     .e = e};
    if (tree_of(&ws, slast, scanon, &st, &t) < 0) goto out;
    char nhex[65];
    names_digest(&nm, nhex);
    if (jx && strcmp(json_string_value(jx), nhex)) {
      fo_fail(e, "changed", EAGAIN,
              "%s holds other entries than when its move was checked: not moved", src);
      goto out;
    }
  }
  /* the hash of the file that moves, for the session's change summary, and with expectSha256
   * its check (from the descriptor of the very file checked above) */
  if (file_bound(sdir, slast, &st, xs, src, "move", hex, e) < 0) goto out;
  /* a destination bound to be absent is never replaced, overwrite or not */
  int rc = overwrite && !(xd && !xd[0]) ? renameat(sdir, slast, ddir, dlast)
                                        : rename_noreplace(sdir, slast, ddir, dlast, is_dir);
  if (rc < 0) {
    int en = errno;
    if ((en == EEXIST || en == ENOTEMPTY) && overwrite)
      fo_fail(e, "changed", en, "%s was made since the move was requested: not moved", dst);
    else if (en == EEXIST || en == ENOTEMPTY)
      fo_fail(e, "exists", en, "%s exists: give overwrite to replace a file", dst);
    else if (en == EXDEV)
      fo_fail(e, "denied", en, "%s and %s are on different file systems", src, dst);
    else if (en == EINVAL)
      fo_fail(e, "denied", en, "%s cannot move into itself", src);
    else
      fo_fail_errno(e, en, src);
    goto out;
  }
  o = json_pack("{s:b, s:s, s:b}", "moved", 1, "type", is_dir ? "dir" : "file", "replaced",
                replaces);
  if (o && hex[0]) json_object_set_new(o, "sha256", json_string(hex));
  if (o && made.names) json_object_set(o, "createdFolders", made.names);
  if (!o) fo_fail(e, "internal", ENOMEM, "out of memory");
out:
  if (!o) fo_unmake(&wd, &made); /* a refusal leaves no folder it made */
  fo_made_clear(&made);
  fo_walk_close(&ws);
  fo_walk_close(&wd);
  return o;
}
