/* workspace_scan.c — the minimal pre-scan: counts and a directory hash (see workspace_scan.h). */
#define _GNU_SOURCE
#include "sandbox/workspace_scan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct entry {
  char type;
  char *path;
  long long size;
  char *detail; /* content hash (files) or link target (symlinks); NULL: empty */
};

struct walk {
  struct entry *v;
  size_t n, cap;
  long max;
  struct jb_scan_result *out;
  jb_error *err;
};

/* Hashes regular file `name` of `dirfd` into `out`. Returns 1 when it is no longer a regular
 * file (swapped meanwhile: never block on a fifo put in its place), 0, or -1 with `err`. */
static int hash_file(int dirfd, const char *name, char out[65], jb_error *err) {
  int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return errno == ELOOP || errno == ENXIO || errno == ENOENT ? 1 : jb_fail_errno(err, errno, "pre-scan: open %s", name);
  struct stat sb;
  if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return 1;
  }
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  unsigned char buf[65536];
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return jb_fail_errno(err, e, "pre-scan: read %s", name);
    }
    if (r == 0) break;
    crypto_hash_sha256_update(&st, buf, (unsigned long long)r);
  }
  close(fd);
  unsigned char h[32];
  crypto_hash_sha256_final(&st, h);
  sodium_bin2hex(out, 65, h, sizeof h);
  return 0;
}

static int push(struct walk *w, char type, const char *path, long long size) {
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 256;
    struct entry *nv = realloc(w->v, cap * sizeof *nv);
    if (!nv) return jb_fail(w->err, ENOMEM, "out of memory");
    w->v = nv;
    w->cap = cap;
  }
  struct entry *e = &w->v[w->n];
  e->type = type;
  e->size = size;
  e->detail = NULL;
  e->path = strdup(path);
  if (!e->path) return jb_fail(w->err, ENOMEM, "out of memory");
  w->n++;
  return 0;
}

static int walk_dir(struct walk *w, int dfd, const char *rel) {
  DIR *d = fdopendir(dfd);
  if (!d) {
    int e = errno;
    close(dfd);
    return jb_fail_errno(w->err, e, "pre-scan: read directory %s", rel[0] ? rel : ".");
  }
  int ret = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if ((long)w->n >= w->max) {
      w->out->truncated = true;
      break;
    }
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >= sizeof path)
      continue; /* deeper than PATH_MAX: counted as other below */
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue; /* vanished */
    char type = S_ISREG(st.st_mode) ? 'f' : S_ISDIR(st.st_mode) ? 'd' : S_ISLNK(st.st_mode) ? 'l' : 'o';
    if (push(w, type, path, S_ISREG(st.st_mode) ? (long long)st.st_size : 0) < 0) {
      ret = -1;
      break;
    }
    struct entry *e = &w->v[w->n - 1];
    if (type == 'f') {
      w->out->files++;
      w->out->bytes += st.st_size;
      char hex[65];
      int hr = hash_file(dirfd(d), de->d_name, hex, w->err);
      if (hr < 0) {
        ret = -1;
        break;
      }
      if (hr == 1) snprintf(hex, sizeof hex, "changed-during-scan");
      if (!(e->detail = strdup(hex))) {
        ret = jb_fail(w->err, ENOMEM, "out of memory");
        break;
      }
    } else if (type == 'l') {
      w->out->symlinks++;
      char target[PATH_MAX];
      ssize_t n = readlinkat(dirfd(d), de->d_name, target, sizeof target - 1);
      target[n > 0 ? n : 0] = '\0';
      e->detail = strdup(target);
    } else if (type == 'o') {
      w->out->other++;
    } else {
      w->out->dirs++;
      int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) continue; /* replaced by something else meanwhile */
      if (walk_dir(w, sub, path) < 0) {
        ret = -1;
        break;
      }
    }
  }
  closedir(d);
  return ret;
}

static int by_path(const void *a, const void *b) {
  return strcmp(((const struct entry *)a)->path, ((const struct entry *)b)->path);
}

int jb_workspace_scan(const char *root, long max_entries, struct jb_scan_result *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return jb_fail_errno(err, errno, "pre-scan: open workspace %s", root);
  struct walk w = {.max = max_entries, .out = out, .err = err};
  int ret = walk_dir(&w, fd, "");
  if (ret == 0) {
    if (w.n > 1) qsort(w.v, w.n, sizeof *w.v, by_path);
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    for (size_t i = 0; i < w.n; i++) {
      char size[32];
      int sl = snprintf(size, sizeof size, "%lld", w.v[i].size);
      crypto_hash_sha256_update(&st, (const unsigned char *)&w.v[i].type, 1);
      crypto_hash_sha256_update(&st, (const unsigned char *)"", 1);
      crypto_hash_sha256_update(&st, (const unsigned char *)w.v[i].path, strlen(w.v[i].path) + 1);
      crypto_hash_sha256_update(&st, (const unsigned char *)size, (unsigned long long)sl + 1);
      if (w.v[i].detail)
        crypto_hash_sha256_update(&st, (const unsigned char *)w.v[i].detail, strlen(w.v[i].detail));
      crypto_hash_sha256_update(&st, (const unsigned char *)"\n", 1);
    }
    unsigned char h[32];
    crypto_hash_sha256_final(&st, h);
    sodium_bin2hex(out->dir_hash, sizeof out->dir_hash, h, sizeof h);
  }
  for (size_t i = 0; i < w.n; i++) {
    free(w.v[i].path);
    free(w.v[i].detail);
  }
  free(w.v);
  return ret;
}

json_t *jb_scan_json(const struct jb_scan_result *r) {
  return json_pack("{s:I, s:I, s:I, s:I, s:I, s:b, s:s}", "files", (json_int_t)r->files, "dirs",
                   (json_int_t)r->dirs, "symlinks", (json_int_t)r->symlinks, "other",
                   (json_int_t)r->other, "bytes", (json_int_t)r->bytes, "truncated", r->truncated,
                   "dirHash", r->dir_hash);
}
