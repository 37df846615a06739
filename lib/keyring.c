/* keyring.c — the audit signing key file: generation, loading, rotation, watching, signing
 * (see keyring.h). Publication in PostgreSQL is db/audit_store.c's. */
#define _GNU_SOURCE
#include "lib/keyring.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/audit.h"

#define SEED_LEN crypto_sign_SEEDBYTES

static struct jb_keyring *from_seed(const unsigned char seed[SEED_LEN], const char *path) {
  if (sodium_init() < 0) return NULL;
  struct jb_keyring *k = calloc(1, sizeof *k);
  if (!k) return NULL;
  crypto_sign_seed_keypair(k->pk, k->sk, seed);
  jb_audit_key_id(k->pk, k->key_id);
  snprintf(k->path, sizeof k->path, "%s", path ? path : "");
  return k;
}

struct jb_keyring *jb_keyring_from_seed(const unsigned char seed[32]) {
  return from_seed(seed, NULL);
}

void jb_keyring_free(struct jb_keyring *k) {
  if (!k) return;
  sodium_memzero(k, sizeof *k);
  free(k);
}

void jb_keyring_sign(const struct jb_keyring *k, const unsigned char hash[JB_AUDIT_HASH_LEN],
                     unsigned char sig[JB_AUDIT_SIG_LEN]) {
  crypto_sign_detached(sig, NULL, hash, JB_AUDIT_HASH_LEN, k->sk);
}

/* Reads the seed of the key file `path` into `seed`. */
static int read_seed(const char *path, unsigned char seed[SEED_LEN], jb_error *err) {
  /* O_NONBLOCK: a FIFO planted at the path must not hang the start */
  cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return jb_fail_errno(err, errno, "signing key %s", path);
  struct stat st;
  if (fstat(fd, &st) < 0) return jb_fail_errno(err, errno, "signing key %s", path);
  if (!S_ISREG(st.st_mode))
    return jb_fail(err, EINVAL, "signing key %s is not a regular file", path);
  if (st.st_uid != geteuid())
    return jb_fail(err, EPERM, "signing key %s is owned by uid %u, not by this process's user",
                   path, (unsigned)st.st_uid);
  if (st.st_mode & 077)
    return jb_fail(err, EPERM,
                   "signing key %s is accessible to group or others (mode %04o); "
                   "chmod 600 it",
                   path, (unsigned)(st.st_mode & 07777));
  unsigned char buf[130];
  size_t n = 0;
  while (n < sizeof buf) {
    ssize_t r = read(fd, buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return jb_fail_errno(err, errno, "signing key %s", path);
    if (r == 0) break;
    n += (size_t)r;
  }
  int rc = 0;
  size_t got = 0;
  const char *end = NULL;
  size_t hexish = 0;
  for (size_t i = 0; i < n && i < SEED_LEN; i++) hexish += isxdigit(buf[i]) != 0;
  if (n == SEED_LEN && hexish == SEED_LEN) {
    /* 32 hex digits are half a hex seed, not 32 random bytes (chance of a real seed: ~2^-113) */
    rc = jb_fail(err, EINVAL,
                 "signing key %s: 32 hex characters; expected 64 hex characters "
                 "(an Ed25519 seed) or 32 raw bytes",
                 path);
  } else if (n == SEED_LEN) {
    memcpy(seed, buf, SEED_LEN);
  } else if ((n == 2 * SEED_LEN || (n == 2 * SEED_LEN + 1 && buf[n - 1] == '\n')) &&
             sodium_hex2bin(seed, SEED_LEN, (const char *)buf, 2 * SEED_LEN, NULL, &got, &end) ==
                 0 &&
             got == SEED_LEN) {
  } else {
    rc = jb_fail(err, EINVAL,
                 "signing key %s: expected 64 hex characters (an Ed25519 seed) "
                 "or 32 raw bytes",
                 path);
  }
  sodium_memzero(buf, sizeof buf);
  return rc;
}

/* Writes `seed` as hex to a new temporary file next to `path`; its name goes to `tmp`. */
static int write_tmp(const char *path, const unsigned char seed[SEED_LEN], char *tmp, size_t tmplen,
                     jb_error *err) {
  snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid());
  unlink(tmp);
  cleanup_close int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return jb_fail_errno(err, errno, "cannot create %s", tmp);
  char hex[2 * SEED_LEN + 2];
  sodium_bin2hex(hex, sizeof hex, seed, SEED_LEN);
  hex[2 * SEED_LEN] = '\n';
  size_t off = 0, len = 2 * SEED_LEN + 1;
  while (off < len) {
    ssize_t w = write(fd, hex + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      sodium_memzero(hex, sizeof hex);
      unlink(tmp);
      return jb_fail_errno(err, e, "cannot write %s", tmp);
    }
    off += (size_t)w;
  }
  sodium_memzero(hex, sizeof hex);
  if (fsync(fd) < 0) {
    int e = errno;
    unlink(tmp);
    return jb_fail_errno(err, e, "cannot fsync %s", tmp);
  }
  return 0;
}

/* fsync of the directory holding `path`, so that a new name survives a crash. */
static void sync_dir_of(const char *path) {
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", path);
  cleanup_close int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) fsync(fd);
}

int jb_keyring_load(struct jb_keyring **out, const char *state_dir, const char *key_file,
                    jb_error *err) {
  if (sodium_init() < 0) return jb_fail(err, EIO, "libsodium cannot initialise");
  char path[4096];
  bool given = key_file && key_file[0];
  if (given) {
    snprintf(path, sizeof path, "%s", key_file);
  } else {
    if (mkdir(state_dir, 0700) < 0 && errno != EEXIST)
      return jb_fail_errno(err, errno, "cannot create state directory %s", state_dir);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", state_dir, JB_KEY_FILE_NAME) >= sizeof path)
      return jb_fail(err, ENAMETOOLONG, "state directory path too long");
  }
  unsigned char seed[SEED_LEN];
  if (!given && access(path, F_OK) < 0 && errno == ENOENT) {
    char tmp[4200];
    randombytes_buf(seed, sizeof seed);
    if (write_tmp(path, seed, tmp, sizeof tmp, err) < 0) {
      sodium_memzero(seed, sizeof seed);
      return -1;
    }
    /* link() refuses to replace: when another process created the key meanwhile, use it */
    int lrc = link(tmp, path), le = errno;
    unlink(tmp);
    if (lrc < 0 && le != EEXIST) {
      sodium_memzero(seed, sizeof seed);
      return jb_fail_errno(err, le, "cannot create signing key %s", path);
    }
    sync_dir_of(path);
  }
  if (read_seed(path, seed, err) < 0) return -1;
  *out = from_seed(seed, path);
  sodium_memzero(seed, sizeof seed);
  if (!*out) return jb_fail(err, ENOMEM, "out of memory");
  return 0;
}

/* A new random key written to a temporary file beside `path` (its name in `tmp`), its id in
 * `new_id`. 0, or -1 with `err` (no temporary file left behind). */
static int new_key_tmp(const char *path, char *tmp, size_t tmp_size,
                       char new_id[JB_AUDIT_KEY_ID_LEN + 1], jb_error *err) {
  unsigned char seed[SEED_LEN];
  randombytes_buf(seed, sizeof seed);
  int rc = write_tmp(path, seed, tmp, tmp_size, err);
  struct jb_keyring *k = rc == 0 ? from_seed(seed, path) : NULL;
  sodium_memzero(seed, sizeof seed);
  if (rc < 0) return -1;
  if (!k) {
    unlink(tmp);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  memcpy(new_id, k->key_id, JB_AUDIT_KEY_ID_LEN + 1);
  jb_keyring_free(k);
  return 0;
}

int jb_keyring_rotate(const char *path, char new_id[JB_AUDIT_KEY_ID_LEN + 1],
                      char old_id[JB_AUDIT_KEY_ID_LEN + 1], jb_error *err) {
  if (sodium_init() < 0) return jb_fail(err, EIO, "libsodium cannot initialise");
  unsigned char seed[SEED_LEN];
  old_id[0] = '\0';
  if (access(path, F_OK) == 0) {
    if (read_seed(path, seed, err) < 0) return jb_error_wrap(err, "current key");
    struct jb_keyring *old = from_seed(seed, path);
    if (!old) return jb_fail(err, ENOMEM, "out of memory");
    memcpy(old_id, old->key_id, JB_AUDIT_KEY_ID_LEN + 1);
    jb_keyring_free(old);
  }
  char tmp[4200];
  if (new_key_tmp(path, tmp, sizeof tmp, new_id, err) < 0) return -1;
  if (rename(tmp, path) < 0) {
    int e = errno;
    unlink(tmp);
    return jb_fail_errno(err, e, "cannot replace %s", path);
  }
  sync_dir_of(path);
  return 0;
}

int jb_keyring_generate(const char *path, char new_id[JB_AUDIT_KEY_ID_LEN + 1], jb_error *err) {
  if (sodium_init() < 0) return jb_fail(err, EIO, "libsodium cannot initialise");
  char tmp[4200];
  if (new_key_tmp(path, tmp, sizeof tmp, new_id, err) < 0) return -1;
  /* link() never replaces: a key file that appeared meanwhile is kept */
  int lrc = link(tmp, path), le = errno;
  unlink(tmp);
  if (lrc < 0) return jb_fail_errno(err, le, "cannot create signing key %s", path);
  sync_dir_of(path);
  return 0;
}

int jb_keyring_watch(const char *path, jb_error *err) {
  char copy[4096];
  if ((size_t)snprintf(copy, sizeof copy, "%s", path) >= sizeof copy)
    return jb_fail(err, ENAMETOOLONG, "key file path too long");
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return jb_fail_errno(err, errno, "cannot watch %s: inotify", path);
  if (inotify_add_watch(fd, dirname(copy),
                        IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_ATTRIB |
                            IN_MOVE_SELF | IN_DELETE_SELF) < 0) {
    int e = errno;
    close(fd);
    return jb_fail_errno(err, e, "cannot watch the directory of %s", path);
  }
  return fd;
}

bool jb_keyring_watch_drain(int fd, const char *path) {
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", path);
  const char *name = basename(copy);
  bool hit = false;
  _Alignas(struct inotify_event) char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (char *p = buf; p < buf + n;) {
      const struct inotify_event *ev = (const struct inotify_event *)p;
      if ((ev->mask & (IN_Q_OVERFLOW | IN_MOVE_SELF | IN_DELETE_SELF)) ||
          (ev->len && strcmp(ev->name, name) == 0))
        hit = true;
      p += sizeof *ev + ev->len;
    }
  }
  return hit;
}
