/* walk.c — what the shim's op files share (walk.h): the workspace root and its descriptor, the
 * resolver that walks a path one component at a time from it (never handing a symlink to the
 * kernel to follow; openat2 per component where the kernel has it), the exclusion check on the
 * symlink-free path reached, the closes deferred past an answer, the error constructors, the
 * argument and content helpers, the hash of an open file and a directory's sorted names.
 * Below fileops.c, treeops.c and searchops.c, which call it and nothing of each other but
 * the dispatch's calls down into the tree and search ops. The rules it keeps are written at the
 * top of fileops.c. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/pathcheck.h"
#include "sandbox/proto/shim.h"
#include "sandbox/shim/walk.h"

#define MAX_LINKS 40 /* symlinks one walk may pass (as the kernel's ELOOP limit) */

int fo_root_fd = -1;
dev_t fo_root_dev;
static bool have_openat2;

int fo_fail(struct jb_fileop_error *e, const char *code, int errnum, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  e->code = code;
  e->escape = NULL;
  e->errnum = errnum;
  return -1;
}

/* An errno from an open or stat, as a protocol error. */
int fo_fail_errno(struct jb_fileop_error *e, int errnum, const char *what) {
  switch (errnum) {
    case ENOENT:
    case ENOTDIR:
      return fo_fail(e, "not_found", errnum, "%s: no such file or directory", what);
    case ELOOP:
    case EXDEV:
      return fo_fail(e, "denied", errnum, "%s: a symlink is in the way", what);
    case EACCES:
    case EPERM:
    case EROFS:
      return fo_fail(e, "denied", errnum, "%s: permission denied", what);
    case ENAMETOOLONG:
      return fo_fail(e, "bad_request", errnum, "%s: name too long", what);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return fo_fail(e, "too_large", errnum, "%s: no space left", what);
    default:
      return fo_fail(e, "internal", errnum, "%s: %s", what, strerror(errnum));
  }
}

int jb_fileops_init(const char *root) {
  if (fo_root_fd >= 0) close(fo_root_fd);
  fo_root_fd = open(root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fo_root_fd < 0) return -1;
  struct stat rst;
  if (fstat(fo_root_fd, &rst) < 0) {
    int en = errno;
    close(fo_root_fd);
    fo_root_fd = -1;
    errno = en;
    return -1;
  }
  fo_root_dev = rst.st_dev;
  struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  long fd = syscall(SYS_openat2, fo_root_fd, ".", &how, sizeof how);
  /* ENOSYS (gVisor), or EPERM from a seccomp profile naming it: missing, not a denial */
  have_openat2 = fd >= 0;
  if (fd >= 0) close((int)fd);
  return 0;
}

int jb_fileops_have_openat2(void) { return have_openat2; }

/* Opens the single component `name` under `dir` as a directory (O_PATH), never following a
 * symlink. */
static int open_dir_component(int dir, const char *name) {
  if (have_openat2) {
    struct open_how how = {
        .flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    long fd = syscall(SYS_openat2, dir, name, &how, sizeof how);
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return (int)fd;
  }
  return openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Opens the single component `name` under `dir` as a directory to read (O_RDONLY), never
 * following a symlink. Not openat(O_RDONLY|O_DIRECTORY|O_NOFOLLOW): gVisor (2024-07) follows
 * a final symlink when O_DIRECTORY is given to an open that is not O_PATH, whatever
 * O_NOFOLLOW says (checked in runsc: such an open of a link to a directory returns that
 * directory). The name is pinned with O_PATH|O_DIRECTORY|O_NOFOLLOW (ENOTDIR for a symlink,
 * there as in Linux), then "." of it is opened. -1 with errno when it is no directory. */
int fo_open_dir_readable(int dir, const char *name) {
  int p = openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (p < 0) return -1;
  int fd = openat(p, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int en = errno;
  fo_close_later(p);
  errno = en;
  return fd;
}

const json_t *fo_exclude;

/* Whether root-relative, symlink-free `canon` is excluded (the whole path "" never is). */
bool fo_canon_excluded(const char *canon) {
  return canon[0] && fo_exclude && jb_path_excluded(canon, fo_exclude, NULL);
}

/* The symlink-free path of `last` in the walk's directory into `out` (JB_PATH_MAX + 1). */
int fo_final_canon(const struct walk *w, const char *last, char *out) {
  int n = strcmp(last, ".") == 0
              ? snprintf(out, JB_PATH_MAX + 1, "%s", w->canon)
              : snprintf(out, JB_PATH_MAX + 1, "%s%s%s", w->canon, w->canon[0] ? "/" : "", last);
  return n < 0 || n > JB_PATH_MAX ? -1 : 0;
}

/* Descriptors whose close waits until the answer is out (jb_fileops_defer_closes): inside
 * gVisor each system call of the shim is a trap into the Sentry, and a close changes nothing
 * the answer depends on. */
static bool defer_on;
static int deferred[64]; /* more are closed at once: the jail's limit is 1,024 descriptors */
static size_t n_deferred;

void fo_close_later(int fd) {
  if (fd < 0) return;
  if (defer_on && n_deferred < sizeof deferred / sizeof deferred[0])
    deferred[n_deferred++] = fd;
  else
    close(fd);
}

void jb_fileops_defer_closes(bool on) {
  jb_fileops_close_deferred();
  defer_on = on;
}

void jb_fileops_close_deferred(void) {
  while (n_deferred > 0) close(deferred[--n_deferred]);
}

void fo_walk_close(struct walk *w) {
  for (int i = 1; i <= w->depth; i++) fo_close_later(w->fds[i]);
  w->depth = 0;
}

int fo_walk_dir(const struct walk *w) { return w->fds[w->depth]; }

/* Whether the symlink `name` in the walk's current directory leads out of the workspace when
 * followed (its target resolved the way reads resolve it: an absolute target, or ".." above
 * the root). Refusing a write through or onto such a link is an escape signal; one through a
 * link that stays inside is only a denial. */
bool fo_link_leads_out(const struct walk *w, const char *name) {
  char rel[JB_PATH_MAX + 1];
  int n = snprintf(rel, sizeof rel, "%s%s%s", w->canon, w->canon[0] ? "/" : "", name);
  if (n < 0 || n > JB_PATH_MAX) return false;
  struct walk w2;
  char last[JB_PATH_NAME_MAX + 1];
  struct jb_fileop_error e2 = {0};
  if (fo_resolve(rel, true, true, &w2, last, &e2) < 0) return e2.escape != NULL;
  fo_walk_close(&w2);
  return false;
}

/* Resolves `path` (already syntactically checked) down to its last component: on success the
 * walk holds the directory that contains it and `last` (of JB_PATH_NAME_MAX + 1 bytes)
 * receives the name, or "." when the path names a directory reached by ".." or the root.
 * With `follow`, symlinks met on the way — the last component too when `probe_last` — are
 * followed while their targets stay inside the workspace; without it any symlink before the
 * last component is refused (the last is the caller's to inspect). With `follow` and not
 * `probe_last` the last component is not looked at either: the caller opens it with
 * O_NOFOLLOW and, when that fails with ELOOP (a symlink), resolves again with `probe_last`.
 * A directory on the way is opened first (open_dir_component: O_PATH|O_DIRECTORY|O_NOFOLLOW
 * opens no symlink, in gVisor too) and looked at only when that fails: one system call per
 * component where nothing is a link.
 * 0 or -1 with *e. */
int fo_resolve(const char *path, bool follow, bool probe_last, struct walk *w,
               char last[JB_PATH_NAME_MAX + 1], struct jb_fileop_error *e) {
  w->fds[0] = fo_root_fd;
  w->depth = 0;
  w->canon[0] = '\0';
  size_t cap = JB_PATH_MAX * 2 + 2;
  char *rem = malloc(cap);
  if (!rem) return fo_fail(e, "internal", ENOMEM, "out of memory");
  if (strcmp(path, ".") == 0) {
    strcpy(last, ".");
    free(rem);
    return 0;
  }
  snprintf(rem, cap, "%s", path);
  int links = 0;
  size_t pos = 0;
  for (;;) {
    /* next component of rem[pos…]; targets may hold empty and "." components: skip them */
    while (rem[pos] == '/') pos++;
    if (!rem[pos]) { /* the path ended in "/", "." or ".." after a symlink: the directory */
      strcpy(last, ".");
      break;
    }
    size_t n = strcspn(rem + pos, "/");
    if (n > JB_PATH_NAME_MAX) {
      free(rem);
      fo_walk_close(w);
      return fo_fail(e, "bad_request", ENAMETOOLONG, "a path component is over %d bytes",
                     JB_PATH_NAME_MAX);
    }
    char name[JB_PATH_NAME_MAX + 1];
    memcpy(name, rem + pos, n);
    name[n] = '\0';
    pos += n;
    bool is_last = rem[pos] == '\0';
    if (strcmp(name, ".") == 0) {
      if (is_last) {
        strcpy(last, ".");
        break;
      }
      continue;
    }
    if (strcmp(name, "..") == 0) { /* only ever from a symlink target */
      if (w->depth == 0) {
        free(rem);
        fo_walk_close(w);
        fo_fail(e, "denied", EXDEV, "a symlink on the path leads out of the workspace");
        e->escape = "symlink_escape";
        return -1;
      }
      close(w->fds[w->depth--]);
      char *slash = strrchr(w->canon, '/');
      if (slash)
        *slash = '\0';
      else
        w->canon[0] = '\0';
      if (is_last) {
        strcpy(last, ".");
        break;
      }
      continue;
    }
    if (is_last && (!follow || !probe_last)) {
      memcpy(last, name, n + 1);
      break;
    }
    struct stat st;
    bool is_link;
    int fd = -1;
    if (is_last) {
      is_link = fstatat(fo_walk_dir(w), name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
      if (!is_link) {
        memcpy(last, name, n + 1);
        break;
      }
    } else {
      fd = open_dir_component(fo_walk_dir(w), name);
      int en = errno;
      /* not opened: a symlink (ENOTDIR from O_NOFOLLOW|O_DIRECTORY, ELOOP from
       * RESOLVE_NO_SYMLINKS) is followed or refused below; anything else fails here */
      is_link = fd < 0 && (en == ENOTDIR || en == ELOOP) &&
                fstatat(fo_walk_dir(w), name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
      if (fd < 0 && !is_link) {
        free(rem);
        fo_walk_close(w);
        return fo_fail_errno(e, en, path);
      }
    }
    if (!is_link) {
      if (w->depth == MAX_DEPTH) {
        close(fd);
        free(rem);
        fo_walk_close(w);
        return fo_fail(e, "denied", ELOOP, "the path is over %d directories deep", MAX_DEPTH);
      }
      size_t cl = strlen(w->canon);
      if (cl + 1 + n > JB_PATH_MAX) {
        close(fd);
        free(rem);
        fo_walk_close(w);
        return fo_fail(e, "denied", ENAMETOOLONG, "the resolved path is over %d bytes",
                       JB_PATH_MAX);
      }
      snprintf(w->canon + cl, sizeof w->canon - cl, "%s%s", cl ? "/" : "", name);
      w->fds[++w->depth] = fd;
      continue;
    }
    /* a symlink */
    if (!follow) {
      bool out = fo_link_leads_out(w, name);
      free(rem);
      fo_walk_close(w);
      fo_fail(e, "denied", ELOOP, "'%s' is a symlink%s: writes never pass a symlink", name,
              out ? " that leads out of the workspace" : "");
      if (out) e->escape = "symlink_escape";
      return -1;
    }
    if (++links > MAX_LINKS) {
      free(rem);
      fo_walk_close(w);
      return fo_fail(e, "denied", ELOOP, "too many symlinks (a loop?)");
    }
    char target[JB_PATH_MAX + 1];
    ssize_t tl = readlinkat(fo_walk_dir(w), name, target, sizeof target);
    if (tl < 0 || tl > JB_PATH_MAX) {
      int en = tl < 0 ? errno : ENAMETOOLONG;
      free(rem);
      fo_walk_close(w);
      /* EINVAL: no longer a symlink — the tree changed under the walk */
      if (en == EINVAL) return fo_fail(e, "denied", EAGAIN, "%s changed during the walk", path);
      return fo_fail_errno(e, en, path);
    }
    target[tl] = '\0';
    if (tl == 0 || target[0] == '/') {
      free(rem);
      fo_walk_close(w);
      fo_fail(e, "denied", EXDEV, "'%s' is a symlink that leads out of the workspace", name);
      e->escape = "symlink_escape";
      return -1;
    }
    /* rem = target + "/" + the rest */
    size_t rest = strlen(rem + pos);
    if ((size_t)tl + 1 + rest + 1 > cap) {
      free(rem);
      fo_walk_close(w);
      return fo_fail(e, "denied", ENAMETOOLONG, "symlink targets make the path too long");
    }
    if (rest) {
      memmove(rem + tl + 1, rem + pos, rest + 1);
      rem[tl] = '/';
    } else {
      rem[tl] = '\0';
    }
    memcpy(rem, target, (size_t)tl);
    pos = 0;
  }
  free(rem);
  return 0;
}

/* fo_resolve() and then the exclusion check on the path actually reached (a symlink must not
 * lead into an excluded file); that path goes to `canon` (JB_PATH_MAX + 1 bytes). 0 with `w`
 * open, or -1 with `e` filled and nothing open. */
int fo_resolve_allowed(const char *path, bool follow, bool probe_last, struct walk *w,
                       char last[JB_PATH_NAME_MAX + 1], char *canon, struct jb_fileop_error *e) {
  if (fo_resolve(path, follow, probe_last, w, last, e) < 0) return -1;
  if (fo_final_canon(w, last, canon) < 0 || fo_canon_excluded(canon)) {
    fo_walk_close(w);
    fo_fail(e, "excluded", EPERM,
            follow ? "%s leads to a path excluded from this session"
                   : "%s is excluded from this session",
            path);
    return -1;
  }
  return 0;
}

void fo_made_clear(struct fo_made *made) {
  json_decref(made->names);
  made->names = NULL;
}

void fo_unmake(const struct walk *w, struct fo_made *made) {
  for (size_t k = json_array_size(made->names); k-- > 0;) {
    const char *c = json_string_value(json_array_get(made->names, k));
    const char *slash = strrchr(c, '/');
    if (made->at[k] <= w->depth) unlinkat(w->fds[made->at[k]], slash ? slash + 1 : c, AT_REMOVEDIR);
  }
  fo_made_clear(made);
}

/* Whether `canon` is one of the strings of `allowed`. */
static bool in_allowed(const json_t *allowed, const char *canon) {
  size_t i;
  json_t *x;
  json_array_foreach (allowed, i, x)
    if (json_is_string(x) && !strcmp(json_string_value(x), canon)) return true;
  return false;
}

/* Makes the missing folder `name` in the walk's current directory (its symlink-free path
 * `child`) and opens it, as fo_resolve_create says. The descriptor, or -1 with *e. */
static int make_folder(struct walk *w, const char *name, const char *child, const json_t *allowed,
                       struct fo_made *made, const char *path, struct jb_fileop_error *e) {
  int dir = fo_walk_dir(w);
  struct stat st;
  if (!in_allowed(allowed, child))
    return fo_fail(e, "not_found", ENOENT,
                   "%s: folder '%s' does not exist and is not one this call may create", path,
                   child);
  if (fo_canon_excluded(child))
    return fo_fail(e, "excluded", EPERM, "%s: folder '%s' is excluded from this session", path,
                   child);
  if (fstat(dir, &st) < 0) return fo_fail_errno(e, errno, path);
  if (st.st_dev != fo_root_dev)
    return fo_fail(e, "denied", EXDEV, "%s is below a mount point: nothing is made there", path);
  bool mine = mkdirat(dir, name, 0755) == 0;
  if (!mine && errno != EEXIST) return fo_fail_errno(e, errno, path);
  /* O_NOFOLLOW: a symlink put in its place after the mkdirat is not opened */
  int fd = open_dir_component(dir, name);
  if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_dev != fo_root_dev)) { /* one that appeared */
    close(fd);
    return fo_fail(e, "denied", EXDEV, "%s: '%s' is a mount point: nothing is made below it", path,
                   child);
  }
  if (fd < 0) {
    int en = errno;
    if (mine) unlinkat(dir, name, AT_REMOVEDIR);
    if (en == ENOTDIR || en == ELOOP)
      return fo_fail(e, "changed", EAGAIN, "%s: '%s' changed while it was made", path, child);
    return fo_fail_errno(e, en, path);
  }
  if (mine) {
    if (!made->names) made->names = json_array();
    if (!made->names || json_array_append_new(made->names, json_string(child)) < 0) {
      close(fd);
      unlinkat(dir, name, AT_REMOVEDIR);
      return fo_fail(e, "internal", ENOMEM, "out of memory");
    }
    made->at[json_array_size(made->names) - 1] = w->depth;
  }
  return fd;
}

/* The second walk of fo_resolve_create: `path` (checked: no empty, "." or ".." component)
 * component by component from the root, making the missing folders. 0 or -1 as it says. */
static int walk_making(const char *path, const json_t *allowed, struct walk *w,
                       char last[JB_PATH_NAME_MAX + 1], struct fo_made *made,
                       struct jb_fileop_error *e) {
  w->fds[0] = fo_root_fd;
  w->depth = 0;
  w->canon[0] = '\0';
  for (const char *p = path;;) {
    size_t n = strcspn(p, "/");
    if (n > JB_PATH_NAME_MAX || n == 0) {
      fo_unmake(w, made);
      fo_walk_close(w);
      return fo_fail(e, "bad_request", EINVAL, "%s: a component is empty or too long", path);
    }
    char name[JB_PATH_NAME_MAX + 1];
    memcpy(name, p, n);
    name[n] = '\0';
    p += n;
    if (!*p) {
      memcpy(last, name, n + 1);
      return 0;
    }
    p++;
    char child[JB_PATH_MAX + 1];
    int k = snprintf(child, sizeof child, "%s%s%s", w->canon, w->canon[0] ? "/" : "", name);
    if (k < 0 || k > JB_PATH_MAX || w->depth == MAX_DEPTH) {
      fo_unmake(w, made);
      fo_walk_close(w);
      return fo_fail(e, "denied", ENAMETOOLONG, "%s is too long or too deep", path);
    }
    int fd = open_dir_component(fo_walk_dir(w), name);
    int en = errno;
    struct stat st;
    if (fd < 0 && en == ENOENT) {
      fd = make_folder(w, name, child, allowed, made, path, e);
    } else if (fd < 0 && (en == ENOTDIR || en == ELOOP) &&
               fstatat(fo_walk_dir(w), name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               S_ISLNK(st.st_mode)) {
      bool out = fo_link_leads_out(w, name);
      fo_fail(e, "denied", ELOOP, "'%s' is a symlink%s: writes never pass a symlink", name,
              out ? " that leads out of the workspace" : "");
      if (out) e->escape = "symlink_escape";
    } else if (fd < 0) {
      fo_fail_errno(e, en, path);
    }
    if (fd < 0) {
      fo_unmake(w, made);
      fo_walk_close(w);
      return -1;
    }
    snprintf(w->canon, sizeof w->canon, "%s", child);
    w->fds[++w->depth] = fd;
  }
}

int fo_resolve_create(const char *path, const json_t *allowed, struct walk *w,
                      char last[JB_PATH_NAME_MAX + 1], char *canon, struct fo_made *made,
                      struct jb_fileop_error *e) {
  made->names = NULL;
  if (fo_resolve_allowed(path, false, false, w, last, canon, e) == 0) return 0;
  /* ENOENT: a folder on the way is missing (a file there is ENOTDIR: not made) */
  if (!json_is_array(allowed) || e->errnum != ENOENT || strcmp(e->code, "not_found")) return -1;
  if (walk_making(path, allowed, w, last, made, e) < 0) return -1;
  if (fo_final_canon(w, last, canon) < 0 || fo_canon_excluded(canon)) {
    fo_unmake(w, made);
    fo_walk_close(w);
    return fo_fail(e, "excluded", EPERM, "%s is excluded from this session", path);
  }
  return 0;
}

const char *fo_type_name(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "dir";
  if (S_ISLNK(m)) return "symlink";
  return "other";
}

/* Refuses what is not a regular file with a single link. */
int fo_check_regular(const struct stat *st, const char *path, struct jb_fileop_error *e) {
  if (S_ISDIR(st->st_mode)) return fo_fail(e, "denied", EISDIR, "%s is a directory", path);
  if (S_ISLNK(st->st_mode)) return fo_fail(e, "denied", ELOOP, "%s is a symlink", path);
  if (!S_ISREG(st->st_mode))
    return fo_fail(e, "denied", EPERM, "%s is not a regular file (fifo, socket or device)", path);
  if (st->st_nlink > 1) {
    fo_fail(e, "denied", EMLINK, "%s has %lu hard links: files with more than one are refused",
            path, (unsigned long)st->st_nlink);
    e->escape = "hard_link";
    return -1;
  }
  return 0;
}

const char *fo_arg_path_key(json_t *req, const char *key, const char *def,
                            struct jb_fileop_error *e) {
  json_t *p = json_object_get(req, key);
  if (!p && def) return def;
  const char *s = json_string_value(p);
  if (!s) {
    fo_fail(e, "bad_request", EINVAL, "'%s' must be a string", key);
    return NULL;
  }
  enum jb_path_verdict v = jb_path_check(s, json_string_length(p), def != NULL);
  if (v != JB_PATH_OK) {
    fo_fail(e, "denied", EINVAL, "%s", jb_path_verdict_text(v));
    e->escape = v == JB_PATH_ABSOLUTE ? "absolute_path"
                : v == JB_PATH_DOTDOT ? "path_traversal"
                                      : NULL;
    return NULL;
  }
  return s;
}

const char *fo_arg_path(json_t *req, const char *def, struct jb_fileop_error *e) {
  return fo_arg_path_key(req, "path", def, e);
}

/* Bytes `n` bytes of text take as a JSON string (jansson's escapes, without JSON_ENSURE_ASCII). */
size_t fo_json_escaped_len(const unsigned char *buf, size_t n) {
  size_t len = n;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = buf[i];
    if (c == '"' || c == '\\' || c == '\n' || c == '\t' || c == '\r' || c == '\b' || c == '\f')
      len += 1;
    else if (c < 0x20 || c == 0x7f)
      len += 5; /* \u00XX */
  }
  return len;
}

/* Text when valid UTF-8 without NUL (the line protocol refuses NUL in strings) whose JSON
 * escapes take no more room than base64 would, else base64 — so that any answer of up to
 * JB_FILE_MAX bytes fits in one protocol line (control characters take 6 bytes escaped). */
json_t *fo_content_json(const unsigned char *buf, size_t n, json_t *o) {
  bool text =
      !memchr(buf, '\0', n) &&
      fo_json_escaped_len(buf, n) <= sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
  json_t *s = text ? json_stringn((const char *)buf, n) : NULL;
  if (s) {
    json_object_set_new(o, "content", s);
    json_object_set_new(o, "encoding", json_string("utf-8"));
    return o;
  }
  size_t b64len = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
  char *b64 = malloc(b64len);
  if (!b64) {
    json_decref(o);
    return NULL;
  }
  sodium_bin2base64(b64, b64len, buf, n, sodium_base64_VARIANT_ORIGINAL);
  json_object_set_new(o, "content", json_string(b64));
  json_object_set_new(o, "encoding", json_string("base64"));
  free(b64);
  return o;
}

/* SHA-256 (hex, 65 bytes) of the open regular file `fd`. With `keep`, also the bytes hashed
 * (new, *keep_len of them) when there are at most JB_FILE_MAX, else *keep = NULL: the content
 * and its hash come from one read. 0 or -1 (errno; EFBIG over HASH_MAX). */
int fo_hash_fd(int fd, char hex[65], unsigned char **keep, size_t *keep_len) {
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  unsigned char buf[65536];
  long long total = 0;
  unsigned char *kept = keep ? malloc(JB_FILE_MAX) : NULL;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || total + n > HASH_MAX) {
      if (n >= 0) errno = EFBIG;
      free(kept);
      return -1;
    }
    if (n == 0) break;
    if (kept && total + n <= JB_FILE_MAX) {
      memcpy(kept + total, buf, (size_t)n);
    } else {
      free(kept);
      kept = NULL;
    }
    total += n;
    crypto_hash_sha256_update(&st, buf, (unsigned long long)n);
  }
  unsigned char h[32];
  crypto_hash_sha256_final(&st, h);
  sodium_bin2hex(hex, 65, h, sizeof h);
  if (keep) {
    *keep = kept;
    *keep_len = kept ? (size_t)total : 0;
  }
  return 0;
}

/* Whether `rel` (a path relative to the root) resolves, following symlinks, to something
 * inside the workspace that is not excluded. *out (may be NULL) is set when it leads out of
 * the workspace (an escape, as link_leads_out judges it). */
bool fo_resolves_inside(const char *rel, bool *out) {
  struct walk w;
  char last[JB_PATH_NAME_MAX + 1];
  struct jb_fileop_error e = {0};
  if (out) *out = false;
  if (fo_resolve(rel, true, true, &w, last, &e) < 0) {
    if (out) *out = e.escape != NULL;
    return false;
  }
  struct stat st;
  char canon[JB_PATH_MAX + 1];
  bool ok =
      (strcmp(last, ".") == 0 || fstatat(fo_walk_dir(&w), last, &st, AT_SYMLINK_NOFOLLOW) == 0) &&
      fo_final_canon(&w, last, canon) == 0 && !fo_canon_excluded(canon);
  fo_walk_close(&w);
  return ok;
}

/* qsort comparator of C strings (bytewise). */
static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int fo_read_names(DIR *d, struct fo_names *out) {
  out->v = NULL;
  out->n = 0;
  size_t cap = 0;
  int rc = 0;
  struct dirent *de;
  errno = 0;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (out->n == FO_NAMES_MAX) {
      rc = -1;
      break;
    }
    if (out->n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      char **nv = realloc(out->v, nc * sizeof *nv);
      if (!nv) {
        rc = -1;
        break;
      }
      out->v = nv;
      cap = nc;
    }
    if (!(out->v[out->n] = strdup(de->d_name))) {
      rc = -1;
      break;
    }
    out->n++;
  }
  if (out->n) qsort(out->v, out->n, sizeof *out->v, cmp_names);
  return rc;
}

void fo_names_free(struct fo_names *names) {
  for (size_t i = 0; i < names->n; i++) free(names->v[i]);
  free(names->v);
  names->v = NULL;
  names->n = 0;
}
