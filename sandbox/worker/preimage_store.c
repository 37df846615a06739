/* preimage_store.c — the pre-image store's blobs and what a workspace path holds (see
 * preimage_store.h). */
#define _GNU_SOURCE
#include "sandbox/worker/preimage_store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/utf8.h"
#include "sandbox/worker/hostfs.h"

const char *jb_pstore_kind_name(enum jb_pstore_kind k) {
  switch (k) {
    case JB_PSTORE_FILE:
      return "file";
    case JB_PSTORE_DIR:
      return "dir";
    case JB_PSTORE_LINK:
      return "link";
    default:
      return "absent";
  }
}

bool jb_pstore_job_ok(const char *job) {
  size_t n = strlen(job);
  if (n == 0 || n > 128 || !strcmp(job, ".") || !strcmp(job, "..")) return false;
  return strspn(job, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

static bool sha_ok(const char *sha) {
  return sha && strlen(sha) == 64 && strspn(sha, "0123456789abcdef") == 64;
}

int jb_pstore_open_base(const char *dir, bool make, jb_error *err) {
  if (make && mkdir(dir, 0700) < 0 && errno != EEXIST)
    return jb_fail_errno(err, errno, "pre-image store %s", dir);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return jb_fail_errno(err, errno, "pre-image store %s", dir);
  struct stat st;
  if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 022)) {
    close(fd);
    return jb_fail(err, EPERM,
                   "pre-image store %s: not owned by this user (uid %u), or writable by others",
                   dir, (unsigned)geteuid());
  }
  return fd;
}

/* `sub` ("" or a relative path of plain names) under the store of `job`, each level made when
 * missing (0700) and opened O_DIRECTORY | O_NOFOLLOW from the one above it, from the checked
 * base (jb_pstore_open_base): a new fd, or -1 with `err`. */
static int open_store_dir(const char *dir, const char *job, const char *sub, bool make,
                          jb_error *err) {
  if (!jb_pstore_job_ok(job)) return jb_fail(err, EINVAL, "pre-image store: bad job id");
  char p[PATH_MAX];
  int n = snprintf(p, sizeof p, "%s%s%s", job, sub[0] ? "/" : "", sub);
  if (n < 0 || (size_t)n >= sizeof p) return jb_fail(err, ENAMETOOLONG, "pre-image store path");
  int fd = jb_pstore_open_base(dir, make, err);
  char *save = NULL;
  for (char *c = strtok_r(p, "/", &save); fd >= 0 && c; c = strtok_r(NULL, "/", &save)) {
    if (make && mkdirat(fd, c, 0700) < 0 && errno != EEXIST) {
      jb_fail_errno(err, errno, "pre-image store %s: %s", dir, c);
      close(fd);
      return -1;
    }
    int next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) jb_fail_errno(err, errno, "pre-image store %s: %s", dir, c);
    close(fd);
    fd = next;
  }
  return fd;
}

/* Copies `in` to `out` (both from their offsets) hashing into `st`; the bytes to *n. 0 or -1
 * (errno). */
static int copy_hash(int in, int out, crypto_hash_sha256_state *st, long long *n) {
  char buf[65536];
  *n = 0;
  for (;;) {
    ssize_t r = read(in, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) return 0;
    crypto_hash_sha256_update(st, (const unsigned char *)buf, (unsigned long long)r);
    for (ssize_t off = 0; out >= 0 && off < r;) {
      ssize_t w = write(out, buf + off, (size_t)(r - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return w == 0 ? (errno = EIO, -1) : -1;
      off += w;
    }
    *n += r;
  }
}

static void hex_of(crypto_hash_sha256_state *st, char out[65]) {
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(st, h);
  sodium_bin2hex(out, 65, h, sizeof h);
}

long long jb_pstore_cost(long long size) {
  return size <= JB_PSTORE_BLOCK ? JB_PSTORE_BLOCK
                                 : (size + JB_PSTORE_BLOCK - 1) / JB_PSTORE_BLOCK * JB_PSTORE_BLOCK;
}

int jb_pstore_put_fd(const char *dir, const char *job, int fd, char sha256[65], long long *added,
                     long long *size, jb_error *err) {
  *added = 0;
  cleanup_close int objs = open_store_dir(dir, job, "objects", true, err);
  if (objs < 0) return -1;
  char tmpname[40];
  unsigned char rnd[8];
  randombytes_buf(rnd, sizeof rnd);
  snprintf(tmpname, sizeof tmpname, ".tmp-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
           rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
  cleanup_close int tmp =
      openat(objs, tmpname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
  if (tmp < 0) return jb_fail_errno(err, errno, "pre-image store: temporary file");
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  int rc = copy_hash(fd, tmp, &st, size) < 0 ? jb_fail_errno(err, errno, "pre-image: copy") : 0;
  if (rc == 0 && fsync(tmp) < 0) rc = jb_fail_errno(err, errno, "pre-image store: fsync");
  hex_of(&st, sha256);
  char fan[3] = {sha256[0], sha256[1], '\0'};
  if (rc == 0 && mkdirat(objs, fan, 0700) < 0 && errno != EEXIST)
    rc = jb_fail_errno(err, errno, "pre-image store: mkdir %s", fan);
  cleanup_close int fdir =
      rc == 0 ? openat(objs, fan, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
  if (rc == 0 && fdir < 0) rc = jb_fail_errno(err, errno, "pre-image store: open %s", fan);
  struct stat there;
  bool kept = rc == 0 && fstatat(fdir, sha256, &there, AT_SYMLINK_NOFOLLOW) == 0;
  if (rc == 0 && !kept && renameat(objs, tmpname, fdir, sha256) < 0)
    rc = jb_fail_errno(err, errno, "pre-image store: rename blob");
  if (rc < 0 || kept) { /* failed, or the same content is kept already: 0 bytes added */
    unlinkat(objs, tmpname, 0);
    return rc;
  }
  if (fsync(fdir) < 0 || fsync(objs) < 0)
    return jb_fail_errno(err, errno, "pre-image store: fsync dir");
  *added = jb_pstore_cost(*size);
  return 0;
}

int jb_pstore_copy_out(const char *dir, const char *job, const char *sha256, int out,
                       jb_error *err) {
  if (!sha_ok(sha256)) return jb_fail(err, EINVAL, "pre-image: bad blob name");
  char sub[80];
  snprintf(sub, sizeof sub, "objects/%.2s", sha256);
  cleanup_close int fdir = open_store_dir(dir, job, sub, false, err);
  if (fdir < 0) return -1;
  cleanup_close int in = openat(fdir, sha256, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return jb_fail_errno(err, errno, "pre-image blob %.12s", sha256);
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  long long n;
  if (copy_hash(in, out, &st, &n) < 0) return jb_fail_errno(err, errno, "pre-image: copy out");
  char got[65];
  hex_of(&st, got);
  if (strcmp(got, sha256))
    return jb_fail(err, EBADMSG, "pre-image blob %.12s no longer matches its hash", sha256);
  return 0;
}

int jb_pstore_remove(const char *dir, const char *job, const char *sha256) {
  if (!sha_ok(sha256)) return -1;
  char sub[80];
  snprintf(sub, sizeof sub, "objects/%.2s", sha256);
  cleanup_close int fdir = open_store_dir(dir, job, sub, false, NULL);
  if (fdir < 0) return -1;
  return unlinkat(fdir, sha256, 0) < 0 && errno != ENOENT ? -1 : 0;
}

int jb_pstore_drop(const char *dir, const char *job, jb_error *err) {
  if (!jb_pstore_job_ok(job)) return jb_fail(err, EINVAL, "pre-image store: bad job id");
  jb_error e = {0};
  cleanup_close int base = jb_pstore_open_base(dir, false, &e);
  if (base < 0 && e.code == ENOENT) return 0;
  if (base < 0) return *err = e, -1;
  if (jb_hostfs_remove_tree(base, job, 0) < 0)
    return jb_fail_errno(err, errno, "pre-image store: remove %s", job);
  return 0;
}

/* Whether `s` is valid UTF-8 (what a text column and a JSON string can hold). */
static bool utf8_ok(const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    int k = jb_utf8_seq((const unsigned char *)s + i, n - i);
    if (k <= 0) return false;
    i += (size_t)k;
  }
  return true;
}

int jb_pstore_take(const char *store_dir, const char *job, int rootfd, const char *path,
                   long long max_size, struct jb_pstore_item *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  if (!utf8_ok(path)) /* a name a row cannot hold: nothing kept of it would be found again */
    return jb_fail(err, EILSEQ, "pre-image of %.300s: the path is not UTF-8", path);
  const char *name;
  cleanup_close int pfd = jb_hostfs_open_parent(rootfd, path, &name);
  if (pfd < 0 && errno == ENOENT) return 0; /* a folder on the way missing: absent */
  if (pfd < 0) return jb_fail_errno(err, errno, "pre-image of %.300s: its folder", path);
  struct stat st;
  if (!name[0]) name = ".";
  if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return errno == ENOENT ? 0 : jb_fail_errno(err, errno, "pre-image of %.300s", path);
  out->mode = st.st_mode & 07777;
  if (S_ISDIR(st.st_mode)) {
    out->kind = JB_PSTORE_DIR;
    return 0;
  }
  if (S_ISLNK(st.st_mode)) {
    ssize_t n = readlinkat(pfd, name, out->target, sizeof out->target - 1);
    if (n < 0 || n >= (ssize_t)sizeof out->target - 1)
      return jb_fail(err, ENAMETOOLONG, "pre-image of %.300s: link target", path);
    out->target[n] = '\0';
    out->kind = JB_PSTORE_LINK;
    if (store_dir && !utf8_ok(out->target))
      return jb_fail(err, EILSEQ, "pre-image of %.300s: the link's target is not UTF-8", path);
    return 0;
  }
  if (!S_ISREG(st.st_mode))
    return jb_fail(err, EINVAL, "pre-image of %.300s: not a file, folder or link", path);
  cleanup_close int fd = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return jb_fail_errno(err, errno, "pre-image of %.300s", path);
  out->kind = JB_PSTORE_FILE;
  out->size = st.st_size;
  if (store_dir && max_size >= 0 && st.st_size > max_size)
    return jb_fail(err, EFBIG, "pre-image of %.300s: %lld bytes, over the room left", path,
                   (long long)st.st_size);
  if (store_dir)
    return jb_pstore_put_fd(store_dir, job, fd, out->sha256, &out->bytes, &out->size, err) < 0
               ? jb_error_wrap(err, "pre-image of %.300s", path)
               : 0;
  crypto_hash_sha256_state hs;
  crypto_hash_sha256_init(&hs);
  if (copy_hash(fd, -1, &hs, &out->size) < 0)
    return jb_fail_errno(err, errno, "hash of %.300s", path);
  hex_of(&hs, out->sha256);
  return 0;
}
