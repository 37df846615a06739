/* overlay.c — a writable command's copy-on-write view of the workspace, its manifest, the
 * content of its regular files and its removal (see overlay.h). Runs as root in the container:
 * it follows no link (every open is openat-relative with O_NOFOLLOW), opens no file but a
 * regular one to read it, and stops at its bounds. */
#define _GNU_SOURCE
#include "sandbox/shim/overlay.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <sodium.h>

#include "lib/pathcheck.h"
#include "sandbox/proto/shim.h"

_Static_assert(2 * JB_CS_MAX_BYTES <= JB_SPAWNER_MAX_LINE, "a manifest fits a spawner line");
_Static_assert(sodium_base64_ENCODED_LEN(JB_CS_READ_MAX, sodium_base64_VARIANT_ORIGINAL) +
                       JB_PATH_MAX * 6 + 4096 <=
                   JB_SPAWNER_MAX_LINE,
               "a chunk's base64 fits a spawner line");

#define OPAQUE_XATTR "trusted.overlay.opaque"

bool jb_cs_id_valid(const char *id) {
  size_t n = id ? strlen(id) : 0;
  if (n < 1 || n > JB_CS_ID_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
          (id[i] >= '0' && id[i] <= '9') || id[i] == '_' || id[i] == '-'))
      return false;
  return true;
}

static int fail(char *why, size_t wlen, const char *what) {
  int e = errno;
  snprintf(why, wlen, "%s: %s", what, strerror(e));
  errno = e;
  return -1;
}

static void close_keep_errno(int fd) {
  int e = errno;
  if (fd >= 0) close(fd);
  errno = e;
}

/* Directory `name` under `dfd` opened for reading without following a symlink: pinned with
 * O_PATH|O_DIRECTORY|O_NOFOLLOW (ENOTDIR for a symlink), then "." of the pin. Never
 * openat(O_RDONLY|O_DIRECTORY|O_NOFOLLOW): gVisor follows a final symlink there (sandbox/WALLS.md),
 * so a directory of the upper that a command's process swapped for a link to "/" between an
 * lstat and the open would be entered as root. -1 with errno. */
static int open_dir_at(int dfd, const char *name) {
  int p = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (p < 0) return -1;
  int fd = openat(p, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  close_keep_errno(p);
  return fd;
}

static int rm_top(int rfd, const char *id);

int jb_cs_mount(const char *root, const char *id, const char *lower, char *merged, size_t mlen,
                char *why, size_t wlen) {
  if (!jb_cs_id_valid(id)) {
    errno = EINVAL;
    return fail(why, wlen, "overlay id");
  }
  char opts[3 * PATH_MAX];
  int n = snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s/%s/upper,workdir=%s/%s/work", lower,
                   root, id, root, id);
  int m = snprintf(merged, mlen, "%s/%s/merged", root, id);
  if (n < 0 || (size_t)n >= sizeof opts || m < 0 || (size_t)m >= mlen) {
    errno = ENAMETOOLONG;
    return fail(why, wlen, "the overlay's paths");
  }
  struct stat lst;
  if (stat(lower, &lst) < 0) return fail(why, wlen, "the workspace");
  int rfd = open(root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (rfd < 0) return fail(why, wlen, "the changeset tmpfs " JB_CS_ROOT);
  if (mkdirat(rfd, id, 0700) < 0) {
    close_keep_errno(rfd);
    return fail(why, wlen, "the overlay's directory");
  }
  int ifd = openat(rfd, id, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int rc = 0;
  /* the merged view's root takes the upper's owner and mode: the workspace's, given by a
   * chown (gVisor's overlay also chowns each new file to its creator, with the credentials of
   * whoever mounted it: without CAP_CHOWN, CAP_FOWNER and CAP_DAC_OVERRIDE in them a command
   * of uid 65534 gets EPERM or EACCES — sandbox/WALLS.md, "Changesets") */
  if (ifd < 0 || mkdirat(ifd, "merged", 0755) < 0 || mkdirat(ifd, "work", 0700) < 0 ||
      mkdirat(ifd, "upper", 0700) < 0)
    rc = fail(why, wlen, "the overlay's upper, work or merged directory");
  else if (fchownat(ifd, "upper", lst.st_uid, lst.st_gid, AT_SYMLINK_NOFOLLOW) < 0 ||
           fchmodat(ifd, "upper", lst.st_mode & 07777, 0) < 0)
    rc = fail(why, wlen, "the upper's owner and mode (the container lacks CAP_CHOWN?)");
  else if (mount("overlay", merged, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
    rc = fail(why, wlen, "mount overlay");
  close_keep_errno(ifd);
  if (rc < 0) (void)rm_top(rfd, id); /* nothing is mounted: the id is free again */
  close_keep_errno(rfd);
  return rc;
}

/* ---- the manifest ---------------------------------------------------------------------- */

struct walk {
  json_t *entries;
  size_t max_entries, bytes;
  const char *code;
  char *why;
  size_t wlen;
  char path[JB_PATH_MAX + JB_PATH_NAME_MAX + 2];
};

static int too_large(struct walk *w, const char *what) {
  w->code = "too_large";
  snprintf(w->why, w->wlen, "%s (at '%.200s')", what, w->path);
  return -1;
}

static int internal(struct walk *w, const char *what) {
  w->code = "internal";
  snprintf(w->why, w->wlen, "%s '%.200s': %s", what, w->path, strerror(errno));
  return -1;
}

static const char *type_of(mode_t m) {
  return S_ISREG(m)    ? "file"
         : S_ISDIR(m)  ? "dir"
         : S_ISLNK(m)  ? "symlink"
         : S_ISCHR(m)  ? "char"
         : S_ISBLK(m)  ? "block"
         : S_ISFIFO(m) ? "fifo"
                       : "socket";
}

static int walk_dir(struct walk *w, int dfd, size_t plen, int depth);

/* One entry `name` of the directory open at `dfd`, whose path is w->path (plen bytes). */
static int walk_entry(struct walk *w, int dfd, size_t plen, const char *name, int depth) {
  size_t nlen = strlen(name);
  if (plen + (plen ? 1 : 0) + nlen > JB_PATH_MAX)
    return too_large(w, "a path in the upper is over 4096 bytes");
  size_t len = plen;
  if (plen) w->path[len++] = '/';
  memcpy(w->path + len, name, nlen + 1);
  len += nlen;
  if (json_array_size(w->entries) >= w->max_entries)
    return too_large(w, "the upper holds more entries than the limit");
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return internal(w, "lstat");
  bool whiteout = S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0;
  bool opaque = false;
  char target[PATH_MAX];
  ssize_t tlen = -1;
  int sub = -1;
  if (S_ISLNK(st.st_mode)) {
    tlen = readlinkat(dfd, name, target, sizeof target - 1);
    if (tlen < 0) return internal(w, "readlink");
    target[tlen] = '\0';
  } else if (S_ISDIR(st.st_mode)) {
    if (depth + 1 > JB_CS_MAX_DEPTH) return too_large(w, "the upper is deeper than 64 directories");
    sub = open_dir_at(dfd, name);
    if (sub < 0) return internal(w, "open (changed during the walk?)");
    char v[2];
    ssize_t n = fgetxattr(sub, OPAQUE_XATTR, v, sizeof v);
    opaque = n == 1 && v[0] == 'y';
  }
  bool sized = S_ISREG(st.st_mode) || S_ISLNK(st.st_mode);
  json_t *pj = json_string(w->path), *tj = tlen >= 0 ? json_stringn(target, (size_t)tlen) : NULL;
  if (!pj || (tlen >= 0 && !tj)) { /* jansson takes UTF-8 only */
    json_decref(pj);
    json_decref(tj);
    close_keep_errno(sub);
    w->path[plen] = '\0';
    w->code = "bad_name";
    snprintf(w->why, w->wlen, "a name or link text in the upper is not UTF-8 (in '%.200s')",
             plen ? w->path : ".");
    return -1;
  }
  json_t *e =
      json_pack("{s:o, s:s, s:i, s:I, s:b, s:b}", "path", pj, "type", type_of(st.st_mode), "mode",
                (int)(st.st_mode & 07777), "size", (json_int_t)(sized ? st.st_size : 0), "whiteout",
                whiteout, "opaque", opaque);
  if (e && tj) json_object_set_new(e, "target", tj);
  /* the entry's exact share of the answer: compact JSON, as the answer is sent, plus a comma */
  if (e) w->bytes += json_dumpb(e, NULL, 0, JSON_COMPACT) + 1;
  if (!e || json_array_append_new(w->entries, e) < 0) {
    close_keep_errno(sub);
    errno = ENOMEM;
    return internal(w, "out of memory at");
  }
  if (w->bytes > JB_CS_MAX_BYTES) {
    close_keep_errno(sub);
    return too_large(w, "the manifest is over 1 MiB");
  }
  int rc = sub >= 0 ? walk_dir(w, sub, len, depth + 1) : 0; /* takes sub */
  w->path[plen] = '\0';
  return rc;
}

/* The entries under the directory open at `dfd` (taken over), whose path is w->path. */
static int walk_dir(struct walk *w, int dfd, size_t plen, int depth) {
  DIR *d = fdopendir(dfd);
  if (!d) {
    close_keep_errno(dfd);
    return internal(w, "opendir");
  }
  int rc = 0;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (!de) {
      if (errno) rc = internal(w, "readdir");
      break;
    }
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if ((rc = walk_entry(w, dirfd(d), plen, de->d_name, depth)) < 0) break;
    w->path[plen] = '\0';
  }
  closedir(d);
  return rc;
}

json_t *jb_cs_manifest_at(int upper_fd, size_t max_entries, const char **code, char *why,
                          size_t wlen) {
  struct walk w = {.entries = json_array(),
                   .max_entries = max_entries,
                   .code = "internal",
                   .why = why,
                   .wlen = wlen};
  int fd = fcntl(upper_fd, F_DUPFD_CLOEXEC, 3);
  if (!w.entries || fd < 0) {
    if (fd >= 0) close(fd);
    json_decref(w.entries);
    *code = "internal";
    snprintf(why, wlen, "the manifest cannot start: %s", strerror(errno));
    return NULL;
  }
  if (walk_dir(&w, fd, 0, 0) < 0) {
    json_decref(w.entries);
    *code = w.code;
    return NULL;
  }
  return w.entries;
}

/* ---- a file's content ------------------------------------------------------------------ */

/* Sets `*code` and a message in `why`; NULL (for a return). */
static json_t *refuse(const char **code, const char *c, char *why, size_t wlen, const char *fmt,
                      ...) __attribute__((format(printf, 5, 6)));
static json_t *refuse(const char **code, const char *c, char *why, size_t wlen, const char *fmt,
                      ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, wlen, fmt, ap);
  va_end(ap);
  *code = c;
  return NULL;
}

/* The code for an open of `what` in the upper that failed with errno: not_found (ENOENT),
 * not_file (a link, or something on the way that is not a directory), internal. */
static const char *open_code(void) {
  return errno == ENOENT                      ? "not_found"
         : errno == ENOTDIR || errno == ELOOP ? "not_file"
                                              : "internal";
}

/* The regular file `rel` (checked; cut in place) under the upper `upper_fd`, opened for
 * reading: every directory on the way pinned (open_dir_at), the last name lstat'ed — nothing
 * but a regular file is opened, so a FIFO or a device is never touched — then opened
 * O_NOFOLLOW|O_NONBLOCK and fstat'ed again into `st`. The fd, or -1 with *code and `why`. */
static int open_upper_file(int upper_fd, char *rel, struct stat *st, const char **code, char *why,
                           size_t wlen) {
  int dfd = fcntl(upper_fd, F_DUPFD_CLOEXEC, 3);
  char *name = rel, *slash;
  while (dfd >= 0 && (slash = strchr(name, '/'))) {
    *slash = '\0';
    int sub = open_dir_at(dfd, name);
    close_keep_errno(dfd);
    dfd = sub;
    if (sub < 0) *slash = '/';
    if (sub >= 0) name = slash + 1;
  }
  int fd = -1;
  if (dfd >= 0 && fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st->st_mode)) {
      close(dfd);
      (void)refuse(code, "not_file", why, wlen, "'%.200s' is a %s, not a regular file", rel,
                   type_of(st->st_mode));
      return -1;
    }
    fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  }
  if (fd < 0) {
    (void)refuse(code, open_code(), why, wlen, "'%.200s' in the upper: %s", rel, strerror(errno));
    close_keep_errno(dfd);
    return -1;
  }
  close(dfd);
  if (fstat(fd, st) < 0) {
    (void)refuse(code, "internal", why, wlen, "fstat '%.200s': %s", rel, strerror(errno));
    close(fd);
    return -1;
  }
  if (!S_ISREG(st->st_mode)) { /* swapped since the lstat */
    close(fd);
    (void)refuse(code, "not_file", why, wlen, "'%.200s' stopped being a regular file", rel);
    return -1;
  }
  return fd;
}

/* Up to `want` bytes at `offset` of `fd` into `buf` with pread (EINTR retried); how many (fewer
 * at the file's end), or -1 with errno. */
static ssize_t read_at(int fd, unsigned char *buf, size_t want, long long offset) {
  size_t got = 0;
  while (got < want) {
    ssize_t n = pread(fd, buf + got, want - got, (off_t)(offset + (long long)got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    got += (size_t)n;
  }
  return (ssize_t)got;
}

json_t *jb_cs_read_at(int upper_fd, const char *path, long long offset, size_t length,
                      const char **code, char *why, size_t wlen) {
  size_t plen = path ? strnlen(path, JB_PATH_MAX + 1) : 0;
  enum jb_path_verdict v = path ? jb_path_check(path, plen, 0) : JB_PATH_EMPTY;
  if (v != JB_PATH_OK)
    return refuse(code, "bad_request", why, wlen, "path: %s", jb_path_verdict_text(v));
  if (offset < 0 || length < 1 || length > JB_CS_READ_MAX)
    return refuse(code, "bad_request", why, wlen, "offset must be 0 or more, length 1..%d",
                  JB_CS_READ_MAX);
  char rel[JB_PATH_MAX + 1];
  memcpy(rel, path, plen + 1);
  struct stat st;
  int fd = open_upper_file(upper_fd, rel, &st, code, why, wlen);
  if (fd < 0) return NULL;
  long long size = (long long)st.st_size;
  size_t want = offset >= size ? 0
                               : (size_t)(size - offset < (long long)length ? size - offset
                                                                            : (long long)length);
  unsigned char *buf = malloc(want ? want : 1);
  ssize_t got = buf ? read_at(fd, buf, want, offset) : -1;
  close_keep_errno(fd);
  size_t blen =
      got >= 0 ? sodium_base64_ENCODED_LEN((size_t)got, sodium_base64_VARIANT_ORIGINAL) : 0;
  char *b64 = got >= 0 ? malloc(blen) : NULL;
  json_t *res = NULL;
  if (b64) {
    sodium_bin2base64(b64, blen, buf, (size_t)got, sodium_base64_VARIANT_ORIGINAL);
    bool eof = (size_t)got < want || offset + got >= size; /* fewer: it shrank since the fstat */
    res = json_pack("{s:s, s:I, s:b}", "data", b64, "size", (json_int_t)size, "eof", eof);
  }
  if (!res)
    (void)refuse(code, "internal", why, wlen, "read '%.200s': %s", rel,
                 got < 0 ? strerror(errno) : "out of memory");
  free(buf);
  free(b64);
  return res;
}

/* ---- removal --------------------------------------------------------------------------- */

/* A removal under one overlay's directory: `top` (its fd), `dev` (its device: no mount below
 * is entered), `moved` (subtrees moved up to `top` from JB_CS_RM_DEPTH down). */
struct rm {
  int top;
  dev_t dev;
  unsigned long moved;
};

/* Removes `name` under the directory `dfd`, a directory's content first; `depth` levels in. A
 * directory JB_CS_RM_DEPTH deep is moved up to r->top whole (removed by the next pass), so
 * that no tree a command made, however deep, outlives its discard. No link is followed (a
 * name that stops being a directory is unlinked), no mount entered (EXDEV). */
static int rm_tree(struct rm *r, int dfd, const char *name, int depth) {
  int fd = -1;
  for (int tries = 0; fd < 0; tries++) {
    if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT) return 0;
    if (errno != EISDIR && errno != EPERM) return -1;
    if (depth >= JB_CS_RM_DEPTH) {
      char to[32];
      snprintf(to, sizeof to, "deep.%lu", r->moved++);
      return renameat(dfd, name, r->top, to);
    }
    fd = open_dir_at(dfd, name);
    if (fd < 0 && errno == ENOENT) return 0; /* moved away since: its new name is found later */
    if (fd < 0 && ((errno != ENOTDIR && errno != ELOOP) || tries >= 3)) return -1;
  }
  struct stat st = {.st_dev = r->dev};
  if (fstat(fd, &st) < 0 || st.st_dev != r->dev) {
    if (st.st_dev != r->dev) errno = EXDEV; /* a mount point: never entered */
    close_keep_errno(fd);
    return -1;
  }
  DIR *d = fdopendir(fd);
  if (!d) {
    close_keep_errno(fd);
    return -1;
  }
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
      rc = rm_tree(r, dirfd(d), de->d_name, depth + 1);
  int e = errno;
  closedir(d);
  errno = e;
  if (rc == 0 && unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT) rc = -1;
  return rc;
}

/* Removes `id` under the root directory `rfd` in passes, while a pass moved a deep subtree
 * up (each pass removes JB_CS_RM_DEPTH levels at least), and up to 3 more that found it not
 * empty for another reason. 0, or -1 with errno. */
static int rm_top(int rfd, const char *id) {
  struct stat st;
  if (fstat(rfd, &st) < 0) return -1;
  struct rm r = {.dev = st.st_dev};
  for (int stuck = 0;;) {
    unsigned long before = r.moved;
    r.top = open_dir_at(rfd, id);
    if (r.top < 0) return errno == ENOENT ? 0 : -1;
    int rc = rm_tree(&r, rfd, id, 0);
    close_keep_errno(r.top);
    /* not empty: a deep subtree was moved up, or (a few times) a racing writer added a name */
    if (rc == 0 || errno != ENOTEMPTY || (r.moved == before && ++stuck > 3)) return rc;
  }
}

int jb_cs_discard(const char *root, const char *id, char *why, size_t wlen) {
  if (!jb_cs_id_valid(id)) {
    errno = EINVAL;
    return fail(why, wlen, "overlay id");
  }
  char merged[PATH_MAX];
  snprintf(merged, sizeof merged, "%s/%s/merged", root, id);
  if (umount2(merged, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
    return fail(why, wlen, "unmount the overlay");
  int rfd = open(root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (rfd < 0) return fail(why, wlen, "the changeset tmpfs");
  int rc = rm_top(rfd, id);
  close_keep_errno(rfd);
  return rc < 0 ? fail(why, wlen, "remove the overlay's upper") : 0;
}

void jb_cs_sweep(const char *root) {
  DIR *d = opendir(root);
  if (!d) return;
  struct dirent *de;
  char why[300];
  while ((de = readdir(d)))
    if (jb_cs_id_valid(de->d_name)) (void)jb_cs_discard(root, de->d_name, why, sizeof why);
  closedir(d);
}

/* ---- requests -------------------------------------------------------------------------- */

int jb_cs_exec_field(const json_t *req, bool writable, char *out, char *why, size_t wlen) {
  out[0] = '\0';
  json_t *v = json_object_get(req, "overlay");
  if (!v || json_is_null(v)) return 0;
  const char *id = json_string_value(v);
  if (!jb_cs_id_valid(id) || !writable) {
    snprintf(why, wlen, "overlay must be an id of 1 to 64 of [A-Za-z0-9_-], on a writable command");
    return -1;
  }
  memcpy(out, id, strlen(id) + 1);
  return 0;
}

/* `s` with every byte outside printable ASCII made '?' (a message may quote a name of the
 * upper, cut anywhere, and must stay valid UTF-8 for the answer's JSON). */
static void printable(char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e) *s = '?';
}

/* The upper of overlay `id` under `root`, opened as a directory (its final name pinned first,
 * as every directory of an upper is); -1 with *code and `why`. */
static int open_upper(const char *root, const char *id, const char **code, char *why, size_t wlen) {
  char upper[PATH_MAX];
  snprintf(upper, sizeof upper, "%s/%s/upper", root, id);
  int fd = open_dir_at(AT_FDCWD, upper);
  if (fd < 0) {
    *code = errno == ENOENT ? "not_found" : "internal";
    snprintf(why, wlen, "the overlay '%s': %s", id, strerror(errno));
  }
  return fd;
}

/* cs_manifest {maxEntries?} on overlay `id` under `root`. */
static json_t *manifest_request(const char *root, const char *id, const json_t *req,
                                const char **code, char *why, size_t wlen) {
  json_t *max = json_object_get(req, "maxEntries");
  json_int_t n = max ? json_integer_value(max) : JB_CS_DEFAULT_ENTRIES;
  if (max && (!json_is_integer(max) || n < 1 || n > JB_CS_MAX_ENTRIES))
    return refuse(code, "bad_request", why, wlen, "maxEntries must be 1..%d", JB_CS_MAX_ENTRIES);
  int fd = open_upper(root, id, code, why, wlen);
  json_t *entries = fd >= 0 ? jb_cs_manifest_at(fd, (size_t)n, code, why, wlen) : NULL;
  if (fd >= 0) close(fd);
  if (!entries) return NULL;
  return json_pack("{s:o, s:I}", "entries", entries, "count", (json_int_t)json_array_size(entries));
}

/* cs_read {path, offset, length} on overlay `id` under `root`. */
static json_t *read_request(const char *root, const char *id, const json_t *req, const char **code,
                            char *why, size_t wlen) {
  json_t *off = json_object_get(req, "offset"), *len = json_object_get(req, "length");
  const char *path = json_string_value(json_object_get(req, "path"));
  if (!path || !json_is_integer(off) || !json_is_integer(len) || json_integer_value(off) < 0 ||
      json_integer_value(len) < 1 || json_integer_value(len) > JB_CS_READ_MAX)
    return refuse(code, "bad_request", why, wlen,
                  "path must be a string, offset an integer of 0 or more, length 1..%d",
                  JB_CS_READ_MAX);
  int fd = open_upper(root, id, code, why, wlen);
  if (fd < 0) return NULL;
  json_t *res = jb_cs_read_at(fd, path, json_integer_value(off), (size_t)json_integer_value(len),
                              code, why, wlen);
  close(fd);
  return res;
}

json_t *jb_cs_request(const char *root, const char *op, const json_t *req, const char **code,
                      char *why, size_t wlen) {
  const char *id = json_string_value(json_object_get(req, "overlay"));
  json_t *res = NULL;
  *code = "internal"; /* what is left: json_pack out of memory */
  snprintf(why, wlen, "out of memory");
  if (!jb_cs_id_valid(id))
    (void)refuse(code, "bad_request", why, wlen,
                 "overlay must be an id of 1 to 64 of [A-Za-z0-9_-]");
  else if (strcmp(op, "cs_discard") == 0) {
    *code = "internal";
    if (jb_cs_discard(root, id, why, wlen) == 0) res = json_pack("{s:b}", "discarded", 1);
  } else if (strcmp(op, "cs_manifest") == 0)
    res = manifest_request(root, id, req, code, why, wlen);
  else if (strcmp(op, "cs_read") == 0)
    res = read_request(root, id, req, code, why, wlen);
  else
    (void)refuse(code, "unknown_op", why, wlen, "unknown op '%.64s'", op);
  if (!res) printable(why);
  return res;
}
