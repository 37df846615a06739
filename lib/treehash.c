/* treehash.c — tree hash v1 of a directory tree (see treehash.h and api/audit.md): the walk
 * through directory fds, one record per entry, the records sorted by path and hashed. */
#define _GNU_SOURCE
#include "lib/treehash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEPTH_MAX 256
#define LINK_MAX_BYTES 4096
#define READ_BYTES 65536

/* One record "type NUL path NUL mode NUL value LF"; the path starts at rec + 2. */
struct record {
  char *rec;
  size_t len;
};

struct walk {
  const struct jb_tree_hash_limits *lim; /* NULL: the defaults */
  long max_entries;
  long long max_bytes, bytes; /* content read so far */
  struct record *v;
  size_t n, cap;
  const char *why; /* set when the walk stops without a digest */
  jb_error *err;
  unsigned char *buf; /* READ_BYTES: off the stack, which the recursion uses */
  char link[LINK_MAX_BYTES + 1];
};

/* Stops the walk without a digest: returns 1. */
static int stop(struct walk *w, const char *why) {
  w->why = why;
  return 1;
}

/* An errno of a stat, open or read: 1 (why set) for what makes the hash not computable, else
 * -1 with the error. */
static int failed(struct walk *w, int e, const char *what, const char *path) {
  if (e == EACCES || e == EPERM) return stop(w, "unreadable");
  if (e == ENOENT || e == ENOTDIR || e == ELOOP || e == ENXIO) return stop(w, "changed");
  return jb_fail_errno(w->err, e, "tree hash: %s %s", what, path);
}

static char type_of(mode_t m) {
  switch (m & S_IFMT) {
    case S_IFREG:
      return 'f';
    case S_IFDIR:
      return 'd';
    case S_IFLNK:
      return 'l';
    case S_IFIFO:
      return 'p';
    case S_IFSOCK:
      return 's';
    case S_IFCHR:
      return 'c';
    case S_IFBLK:
      return 'b';
    default:
      return '?';
  }
}

/* Appends the record of `path` (`plen` bytes), type `t`, mode `mode`, value `val` (`vlen`). */
static int add(struct walk *w, char t, const char *path, size_t plen, unsigned mode,
               const char *val, size_t vlen) {
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 256;
    struct record *v = realloc(w->v, cap * sizeof *v);
    if (!v) return jb_fail(w->err, ENOMEM, "out of memory");
    w->v = v;
    w->cap = cap;
  }
  size_t len = 2 + plen + 1 + 4 + 1 + vlen + 1;
  char *r = malloc(len + 1);
  if (!r) return jb_fail(w->err, ENOMEM, "out of memory");
  r[0] = t;
  r[1] = '\0';
  memcpy(r + 2, path, plen);
  r[2 + plen] = '\0';
  snprintf(r + 3 + plen, 5, "%04o", mode & 07777u); /* and the NUL after it */
  memcpy(r + 2 + plen + 6, val, vlen);
  r[len - 1] = '\n';
  r[len] = '\0';
  w->v[w->n++] = (struct record){r, len};
  return 0;
}

/* The content SHA-256 (hex) of regular file `name` of `dfd`, as `st` described it. */
static int hash_file(struct walk *w, int dfd, const char *name, const char *path,
                     const struct stat *st, char hex[65]) {
  if (st->st_size > w->max_bytes - w->bytes) return stop(w, "too_large");
  cleanup_close int fd =
      openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return failed(w, errno, "open", path);
  struct stat now;
  if (fstat(fd, &now) < 0) return jb_fail_errno(w->err, errno, "tree hash: fstat %s", path);
  if (!S_ISREG(now.st_mode) || now.st_ino != st->st_ino || now.st_dev != st->st_dev)
    return stop(w, "changed");
  crypto_hash_sha256_state hs;
  crypto_hash_sha256_init(&hs);
  for (;;) {
    ssize_t r = read(fd, w->buf, READ_BYTES);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return failed(w, errno, "read", path);
    if (r == 0) break;
    if (r > w->max_bytes - w->bytes) return stop(w, "too_large");
    w->bytes += r;
    crypto_hash_sha256_update(&hs, w->buf, (unsigned long long)r);
  }
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&hs, h);
  sodium_bin2hex(hex, 65, h, sizeof h);
  return 0;
}

static int walk_dir(struct walk *w, int dfd, const char *prefix, size_t plen, int depth);

/* The record of entry `name` of `dfd` (at `path`, `len` bytes), and below it for a directory. */
static int entry(struct walk *w, int dfd, const struct stat *dir, const char *name,
                 const char *path, size_t len, int depth) {
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return failed(w, errno, "stat", path);
  if ((long)w->n >= w->max_entries) return stop(w, "too_many_entries");
  char t = type_of(st.st_mode), hex[65];
  const char *val = "";
  size_t vlen = 0;
  int rc = 0;
  if (t == '?') return stop(w, "changed"); /* no such type on Linux */
  if (t == 'f') {
    rc = hash_file(w, dfd, name, path, &st, hex);
    val = hex;
    vlen = 64;
  } else if (t == 'l') {
    ssize_t n = readlinkat(dfd, name, w->link, sizeof w->link);
    if (n < 0) return failed(w, errno, "readlink", path);
    if ((size_t)n >= sizeof w->link) return stop(w, "changed"); /* Linux: at most 4095 bytes */
    val = w->link;
    vlen = (size_t)n;
  }
  if (rc) return rc;
  unsigned mode = w->lim && w->lim->mode_of ? w->lim->mode_of(w->lim->mode_ctx, dir, name, &st)
                                            : (unsigned)st.st_mode;
  if ((rc = add(w, t, path, len, mode, val, vlen))) return rc;
  if (t != 'd') return 0;
  if (depth >= DEPTH_MAX) return stop(w, "too_deep");
  cleanup_close int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0) return failed(w, errno, "open", path);
  struct stat now;
  if (fstat(sub, &now) < 0) return jb_fail_errno(w->err, errno, "tree hash: fstat %s", path);
  if (now.st_ino != st.st_ino || now.st_dev != st.st_dev) return stop(w, "changed");
  return walk_dir(w, sub, path, len, depth + 1);
}

static void closedirp(DIR **d) {
  if (*d) closedir(*d);
}

/* Every entry beneath directory `dfd` (borrowed) at `prefix` (`plen` bytes; "" the root). */
static int walk_dir(struct walk *w, int dfd, const char *prefix, size_t plen, int depth) {
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* its own offset */
  if (fd < 0) return failed(w, errno, "open", plen ? prefix : ".");
  struct stat dir;
  if (fstat(fd, &dir) < 0) {
    int e = errno;
    close(fd);
    return jb_fail_errno(w->err, e, "tree hash: fstat %s", plen ? prefix : ".");
  }
  __attribute__((cleanup(closedirp))) DIR *d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    return jb_fail_errno(w->err, e, "tree hash: opendir %s", plen ? prefix : ".");
  }
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (!de) {
      if (errno) return failed(w, errno, "readdir", plen ? prefix : ".");
      return 0;
    }
    const char *name = de->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
    size_t nl = strlen(name), len = plen ? plen + 1 + nl : nl;
    cleanup_free char *path = malloc(len + 1);
    if (!path) return jb_fail(w->err, ENOMEM, "out of memory");
    if (plen) {
      memcpy(path, prefix, plen);
      path[plen] = '/';
    }
    memcpy(path + len - nl, name, nl + 1);
    int rc = entry(w, dirfd(d), &dir, name, path, len, depth);
    if (rc) return rc;
  }
}

/* Paths hold no NUL: strcmp orders them as memcmp does (C11 7.24.4: as unsigned char). */
static int by_path(const void *a, const void *b) {
  return strcmp(((const struct record *)a)->rec + 2, ((const struct record *)b)->rec + 2);
}

int jb_tree_hash_at(int rootfd, const struct jb_tree_hash_limits *lim, char out_hex[65],
                    const char **why, jb_error *err) {
  struct walk *w = calloc(1, sizeof *w);
  unsigned char *buf = malloc(READ_BYTES);
  if (!w || !buf) {
    free(w);
    free(buf);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  *w = (struct walk){
      .lim = lim,
      .max_entries =
          lim && lim->max_entries > 0 ? lim->max_entries : JB_TREE_HASH_MAX_ENTRIES_DEFAULT,
      .max_bytes = lim && lim->max_bytes > 0 ? lim->max_bytes : JB_TREE_HASH_MAX_BYTES_DEFAULT,
      .err = err,
      .buf = buf,
  };
  out_hex[0] = '\0';
  *why = NULL;
  int rc = walk_dir(w, rootfd, "", 0, 0);
  if (rc == 0) {
    if (w->n) qsort(w->v, w->n, sizeof *w->v, by_path); /* w->v is NULL for no entry */
    crypto_hash_sha256_state hs;
    crypto_hash_sha256_init(&hs);
    for (size_t i = 0; i < w->n; i++)
      crypto_hash_sha256_update(&hs, (const unsigned char *)w->v[i].rec, w->v[i].len);
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&hs, h);
    sodium_bin2hex(out_hex, 65, h, sizeof h);
  } else if (rc > 0) {
    *why = w->why;
  }
  for (size_t i = 0; i < w->n; i++) free(w->v[i].rec);
  free(w->v);
  free(w->buf);
  free(w);
  return rc;
}
