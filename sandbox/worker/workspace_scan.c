/* workspace_scan.c — the pre-scan: counts, flagged entries and a directory hash (see
 * workspace_scan.h). */
#define _GNU_SOURCE
#include "sandbox/worker/workspace_scan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lib/buf.h"
#include "lib/scan.h"
#include "lib/utf8.h"

struct entry {
  char type;
  dev_t dev;
  ino_t ino;
  char *path;
  long long size;
  char *detail; /* content hash (files) or link target (symlinks); NULL: empty */
  unsigned mode; /* st_mode & 07777 */
  const char *kind; /* its flag (a string literal), or NULL */
  long long mtime_ns, ctime_ns;
};

#define WALK_BUF 65536 /* bytes read at a time when hashing */
#define WALK_DEPTH_MAX 256 /* directory levels walked; deeper ones make the walk truncated */
#define WALK_BYTES_MAX (64LL << 20) /* bytes of paths and details kept; then truncated */
#define SPARSE_MIN (1LL << 20) /* bytes: a smaller file is never judged sparse */
#define RACY_NS 2000000000LL /* a file changed this close before a walk is read again */
#define LINKS_MAX 40 /* links followed resolving one path (the kernel's MAXSYMLINKS) */

struct walk {
  struct entry *v;
  size_t n, cap;
  long max;
  long long hash_max;
  struct jb_scan_result *out;
  jb_error *err;
  int depth; /* of the directory being read */
  long long kept; /* bytes of paths and details held */
  unsigned char *buf; /* hash_file's read buffer (heap: the walk recurses) */
  const struct jb_scan_snapshot *prev; /* hashes to reuse, or NULL */
  long long hash_left; /* bytes still to hash; -1: no bound */
  long long deadline_ms; /* monotonic; 0: none */
  char why[48]; /* the first reason the walk is not whole */
  struct secret_look *sec; /* the pre-scan's look for secrets, or NULL */
};

#define SECRET_OVERLAP 4096 /* bytes of a window carried into the next one */

/* The pre-scan's look for files that look like secrets (jb_workspace_prescan). */
struct secret_look {
  const struct jb_scan_rules *rules; /* borrowed; NULL: every file read counts (fail closed) */
  bool exclude; /* flag them "secret" too */
  unsigned char *win; /* WALK_BUF + SECRET_OVERLAP bytes */
  size_t carry; /* bytes of the last window kept at win's start */
  const char *ids[4]; /* the rules that matched the file being read */
  int n;
  long long kept; /* bytes of paths listed */
};

/* Feeds `len` bytes of the file being read to `sec` (its window: the last SECRET_OVERLAP bytes
 * of the bytes before, then these). */
static void secret_feed(struct secret_look *sec, const unsigned char *data, size_t len) {
  if (sec->n > 0) return; /* one match is enough to list the file */
  memcpy(sec->win + sec->carry, data, len);
  size_t wl = sec->carry + len;
  int n = sec->rules ? jb_scan_secrets(sec->rules, sec->win, wl, sec->ids, 4) : -1;
  if (n < 0) {
    sec->ids[0] = "scanner_error";
    n = 1;
  }
  sec->n = n;
  sec->carry = wl < SECRET_OVERLAP ? wl : SECRET_OVERLAP;
  memmove(sec->win, sec->win + wl - sec->carry, sec->carry);
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The walk is not whole, for `why` (the first reason is kept). */
static void cut(struct walk *w, const char *why) {
  w->out->truncated = true;
  if (!w->why[0]) snprintf(w->why, sizeof w->why, "%s", why);
}

static int snap_by_path(const void *key, const void *e) {
  return strcmp((const char *)key, ((const struct jb_scan_entry *)e)->path);
}

/* The hash of `path` kept in w->prev when the file is as it was then (device, inode, size,
 * mtime, ctime): borrowed, or NULL. */
static const char *reusable_hash(const struct walk *w, const char *path, const struct stat *st) {
  if (!w->prev || !w->prev->n) return NULL;
  const struct jb_scan_entry *p =
      bsearch(path, w->prev->v, w->prev->n, sizeof *w->prev->v, snap_by_path);
  long long mt = (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
  long long ct = (long long)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec;
  if (!p || p->type != 'f' || p->dev != st->st_dev || p->ino != st->st_ino ||
      p->size != (long long)st->st_size || p->mtime_ns != mt || p->ctime_ns != ct || !p->detail ||
      strlen(p->detail) != 64 || ct > w->prev->started_ns - RACY_NS)
    return NULL;
  return p->detail;
}

/* Hashes regular file `name` of `dirfd` into `out`, reading at most `max` bytes. Returns 1
 * when it is no longer a single-link regular file (swapped meanwhile: never block on a fifo
 * put in its place), 2 when it grew over `max` bytes meanwhile, 0, or -1 with `err`. */
static int hash_file(int dirfd, const char *name, long long max, unsigned char *buf, size_t bufsize,
                     char out[65], struct secret_look *sec, jb_error *err) {
  int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return errno == ELOOP || errno == ENXIO || errno == ENOENT
               ? 1
               : jb_fail_errno(err, errno, "pre-scan: open %s", name);
  struct stat sb;
  if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_nlink > 1) {
    close(fd);
    return 1;
  }
  long long total = 0;
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  if (sec && sb.st_size > JB_SCAN_SECRET_FILE_MAX) sec = NULL; /* not looked into */
  if (sec) {
    sec->carry = 0;
    sec->n = 0;
  }
  for (;;) {
    ssize_t r = read(fd, buf, bufsize);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return jb_fail_errno(err, e, "pre-scan: read %s", name);
    }
    if (r == 0) break;
    if ((total += r) > max) {
      close(fd);
      return 2;
    }
    crypto_hash_sha256_update(&st, buf, (unsigned long long)r);
    if (sec && (size_t)r <= bufsize) secret_feed(sec, buf, (size_t)r);
  }
  close(fd);
  unsigned char h[32];
  crypto_hash_sha256_final(&st, h);
  sodium_bin2hex(out, 65, h, sizeof h);
  return 0;
}

/* Records flagged entry `path` of `kind` (jb_scan_flag_json). */
static int flag(struct walk *w, const char *path, const char *kind) {
  if (w->n > 0 && !strcmp(w->v[w->n - 1].path, path)) w->v[w->n - 1].kind = kind;
  w->out->n_flagged++;
  if (json_array_size(w->out->flagged) >= JB_SCAN_FLAGGED_MAX) return 0;
  if (json_array_append_new(w->out->flagged, jb_scan_flag_json(path, kind)) < 0)
    return jb_fail(w->err, ENOMEM, "out of memory");
  return 0;
}

json_t *jb_scan_flag_json(const char *path, const char *kind) {
  json_t *f = json_pack("{s:o, s:s}", "path", jb_scan_path_json(path), "kind", kind);
  if (!f || !strcmp(json_string_value(json_object_get(f, "path")) ?: "", path)) return f;
  /* not UTF-8 (U+FFFD stood in for some bytes): the name's bytes as well, escaped and base64 */
  size_t n = strlen(path);
  char *esc = malloc(n * 4 + 1);
  size_t blen = sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL);
  char *b64 = malloc(blen);
  if (esc && b64) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
      int k = jb_utf8_seq((const unsigned char *)path + i, n - i);
      if (k > 0) {
        memcpy(esc + o, path + i, (size_t)k);
        o += (size_t)k;
        i += (size_t)k;
      } else {
        o += (size_t)snprintf(esc + o, 5, "\\x%02x", (unsigned char)path[i]);
        i++;
      }
    }
    esc[o] = '\0';
    sodium_bin2base64(b64, blen, (const unsigned char *)path, n, sodium_base64_VARIANT_ORIGINAL);
    json_object_set_new(f, "pathEscaped", json_string(esc));
    json_object_set_new(f, "pathBase64", json_string(b64));
  }
  free(esc);
  free(b64);
  if (!esc || !b64) {
    json_decref(f);
    return NULL;
  }
  return f;
}

/* Whether symbolic link `path` (relative to the root) with `target` leaves the root, judged
 * lexically: an absolute target does; a relative one does when its ".." climb above the root
 * from the link's directory. (A target that is inside lexically but passes another link is
 * judged by that link's own flag; the shim refuses any path through a link at open time.) */
static bool link_leaves(const char *path, const char *target) {
  if (target[0] == '/' || target[0] == '\0') return true;
  long depth = 0;
  for (const char *p = path; *p; p++)
    if (*p == '/') depth++; /* the link's directory is `depth` levels below the root */
  const char *c = target;
  while (*c) {
    const char *e = strchr(c, '/');
    size_t len = e ? (size_t)(e - c) : strlen(c);
    if (len == 2 && c[0] == '.' && c[1] == '.') {
      if (--depth < 0) return true;
    } else if (len > 0 && !(len == 1 && c[0] == '.')) {
      depth++;
    }
    c += len;
    if (*c == '/') c++;
  }
  return false;
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
  e->mode = 0;
  e->kind = NULL;
  e->path = strdup(path);
  if (!e->path) return jb_fail(w->err, ENOMEM, "out of memory");
  w->n++;
  return 0;
}

/* A regular file's detail without reading it, when it has one: the hash kept in w->prev for
 * a file unchanged since; "sparse:…" for a sparse file (judged by its metadata); "unhashed"
 * when reading it would take the walk past its bytes to hash (the walk is then not whole).
 * 1 with e->detail set (NULL: out of memory), or 0: the file is to be read. */
static int file_detail(struct walk *w, const char *path, const struct stat *st, struct entry *e) {
  const char *h = reusable_hash(w, path, st);
  if (h) {
    e->detail = strdup(h);
    return 1;
  }
  if (st->st_size > SPARSE_MIN && (long long)st->st_blocks * 512 < st->st_size / 8) {
    char d[80];
    snprintf(d, sizeof d, "sparse:%lld:%lld:%lld", (long long)st->st_size, e->mtime_ns,
             e->ctime_ns);
    e->detail = strdup(d);
    return 1;
  }
  if (w->hash_left >= 0 && st->st_size > w->hash_left) {
    cut(w, "bytes to hash");
    e->detail = strdup("unhashed");
    return 1;
  }
  return 0;
}

/* Lists file `path`, whose bytes the `secret` rules in w->sec->ids matched (and flags it
 * "secret" when the pre-scan excludes such files). 0, or -1 with w->err. */
static int secret_found(struct walk *w, const char *path) {
  struct secret_look *sec = w->sec;
  w->out->n_secrets++;
  if (sec->exclude && flag(w, path, "secret") < 0) return -1;
  size_t pl = strlen(path);
  if (json_array_size(w->out->secrets) >= JB_SCAN_SECRETS_MAX ||
      sec->kept + (long long)pl > JB_SCAN_SECRETS_BYTES)
    return 0;
  json_t *rules = json_array();
  for (int i = 0; rules && i < sec->n; i++) json_array_append_new(rules, json_string(sec->ids[i]));
  json_t *e =
      rules ? json_pack("{s:o, s:o}", "path", jb_scan_path_json(path), "rules", rules) : NULL;
  if (!e || json_array_append_new(w->out->secrets, e) < 0)
    return jb_fail(w->err, ENOMEM, "out of memory");
  sec->kept += (long long)pl;
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
    if ((long)w->n >= w->max || w->kept > WALK_BYTES_MAX ||
        (w->deadline_ms && now_ms() > w->deadline_ms)) {
      cut(w, (long)w->n >= w->max ? "entries" : w->kept > WALK_BYTES_MAX ? "names" : "time");
      break;
    }
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >=
        sizeof path) {
      cut(w, "path length"); /* a path past PATH_MAX: not seen, so the walk is not whole */
      continue;
    }
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno != ENOENT) cut(w, "unreadable entry"); /* unseen, not gone */
      continue;
    }
    char type = S_ISREG(st.st_mode)   ? 'f'
                : S_ISDIR(st.st_mode) ? 'd'
                : S_ISLNK(st.st_mode) ? 'l'
                                      : 'o';
    if (push(w, type, path, S_ISREG(st.st_mode) ? (long long)st.st_size : 0) < 0) {
      ret = -1;
      break;
    }
    struct entry *e = &w->v[w->n - 1];
    e->mode = (unsigned)(st.st_mode & 07777);
    e->dev = st.st_dev;
    e->ino = st.st_ino;
    e->mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    e->ctime_ns = (long long)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec;
    w->kept += (long long)strlen(path) + 80;
    if (type == 'f' && st.st_nlink > 1) {
      w->out->files++;
      w->out->bytes += st.st_size;
      if (flag(w, path, "hardlink") < 0 || !(e->detail = strdup("hardlink"))) {
        ret = -1;
        break;
      }
    } else if (type == 'f' && st.st_size > w->hash_max) {
      w->out->files++;
      w->out->bytes += st.st_size;
      if (flag(w, path, "too_large") < 0 || !(e->detail = strdup("too-large"))) {
        ret = -1;
        break;
      }
    } else if (type == 'f' && file_detail(w, path, &st, e) != 0) {
      w->out->files++;
      w->out->bytes += st.st_size;
      if (!e->detail) {
        ret = jb_fail(w->err, ENOMEM, "out of memory");
        break;
      }
    } else if (type == 'f') {
      w->out->files++;
      w->out->bytes += st.st_size;
      char hex[65];
      if (w->hash_left >= 0) w->hash_left -= st.st_size;
      int hr = hash_file(dirfd(d), de->d_name, w->hash_max, w->buf, WALK_BUF, hex, w->sec, w->err);
      if (hr < 0 || (hr == 0 && w->sec && w->sec->n > 0 && secret_found(w, path) < 0)) {
        ret = -1;
        break;
      }
      if (hr == 1) snprintf(hex, sizeof hex, "changed-during-scan");
      if (hr == 2) {
        snprintf(hex, sizeof hex, "too-large");
        if (flag(w, path, "too_large") < 0) {
          ret = -1;
          break;
        }
      }
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
      w->kept += (long long)strlen(target);
      if (link_leaves(path, target) && flag(w, path, "symlink_outside") < 0) {
        ret = -1;
        break;
      }
    } else if (type == 'o') {
      w->out->other++;
      const char *kind = S_ISFIFO(st.st_mode)                         ? "fifo"
                         : S_ISSOCK(st.st_mode)                       ? "socket"
                         : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "device"
                                                                      : NULL;
      if (kind && flag(w, path, kind) < 0) {
        ret = -1;
        break;
      }
    } else {
      w->out->dirs++;
      if (w->sec && !strcmp(de->d_name, ".git") && json_array_size(w->out->repos) < 16)
        json_array_append_new(w->out->repos, json_string(rel)); /* a work tree (pre-scan) */
      if (w->depth + 1 > WALK_DEPTH_MAX) { /* not entered: the walk is not whole */
        cut(w, "depth");
        continue;
      }
      int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP) cut(w, "unreadable entry");
        continue; /* else replaced by something else meanwhile */
      }
      w->depth++;
      int wr = walk_dir(w, sub, path);
      w->depth--;
      if (wr < 0) {
        ret = -1;
        break;
      }
    }
  }
  closedir(d);
  return ret;
}

/* The workspace-relative path symbolic link `path` with `target` (inside, judged lexically)
 * names, into `out` (PATH_MAX bytes; "." for the root). -1 when it does not fit. */
static int link_target_path(const char *path, const char *target, char *out) {
  char buf[2 * PATH_MAX + 2];
  const char *slash = strrchr(path, '/');
  int n = snprintf(buf, sizeof buf, "%.*s%s%s", slash ? (int)(slash - path) : 0, path,
                   slash ? "/" : "", target);
  if (n < 0 || (size_t)n >= sizeof buf) return -1;
  size_t o = 0;
  for (char *c = buf; *c;) {
    size_t len = strcspn(c, "/");
    if (len == 2 && c[0] == '.' && c[1] == '.') {
      while (o > 0 && out[o - 1] != '/') o--; /* back over the last component */
      if (o > 0) o--;
    } else if (len > 0 && !(len == 1 && c[0] == '.')) {
      if (o + (o > 0) + len >= PATH_MAX) return -1;
      if (o > 0) out[o++] = '/';
      memcpy(out + o, c, len);
      o += len;
    }
    c += len;
    while (*c == '/') c++;
  }
  if (o == 0) out[o++] = '.';
  out[o] = '\0';
  return 0;
}

/* Where covered link `link` (under the root `rfd`, whose own path is `rootp`) leads as the
 * kernel resolves it, links followed and never above the root (openat2 RESOLVE_BENEATH), into
 * `out` (PATH_MAX bytes): the entry itself or, when it is missing, the resolved directory of
 * its lexical target `to` and its last name. -1 when neither resolves inside. */
static int resolved_path(int rfd, const char *rootp, const char *link, const char *to, char *out) {
  struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
  char dirpart[PATH_MAX];
  const char *last = "";
  long fd = syscall(SYS_openat2, rfd, link, &how, sizeof how);
  if (fd < 0 && errno == ENOENT) { /* missing: its directory */
    const char *slash = strrchr(to, '/');
    snprintf(dirpart, sizeof dirpart, "%.*s", slash ? (int)(slash - to) : 1, slash ? to : ".");
    last = slash ? slash + 1 : to;
    fd = syscall(SYS_openat2, rfd, dirpart, &how, sizeof how);
  }
  if (fd < 0) return -1;
  char proc[64], abs[PATH_MAX];
  snprintf(proc, sizeof proc, "/proc/self/fd/%ld", fd);
  ssize_t n = readlink(proc, abs, sizeof abs - 1);
  close((int)fd);
  size_t rl = strlen(rootp);
  if (n < 0) return -1;
  abs[n] = '\0';
  if (strncmp(abs, rootp, rl) || (abs[rl] != '/' && abs[rl] != '\0')) return -1;
  const char *r = abs[rl] ? abs + rl + 1 : "";
  int k = snprintf(out, PATH_MAX, "%s%s%s", r[0] ? r : (last[0] ? "" : "."),
                   r[0] && last[0] ? "/" : "", last);
  return k < 0 || k >= PATH_MAX ? -1 : 0;
}

/* Flags `to` as the landing_link of covered link `link`. 0, or -1 with w->err. */
static int flag_landing(struct walk *w, const char *to, const char *link) {
  w->out->n_flagged++;
  if (json_array_size(w->out->flagged) >= JB_SCAN_FLAGGED_MAX) return 0;
  json_t *f = jb_scan_flag_json(to, "landing_link");
  if (f) json_object_set_new(f, "link", jb_scan_path_json(link));
  if (!f || json_array_append_new(w->out->flagged, f) < 0)
    return jb_fail(w->err, ENOMEM, "out of memory");
  return 0;
}

/* The pre-scan's covered links: each symbolic link inside the workspace `root` at a path the
 * landing rules cover (jb_scan_landing, as a directory too: it may lead to one), flagged at
 * the path its target names ("landing_link", with "link"): a write there writes what the
 * covered place's tool runs. Judged lexically from the link's directory, as symlink_outside
 * is, and as the kernel resolves it (through other links) when that is elsewhere. */
static int flag_landing_links(struct walk *w, const char *root) {
  int rfd = -1, rc = 0;
  char rootp[PATH_MAX] = "";
  for (size_t i = 0; i < w->n && rc == 0; i++) {
    const struct entry *e = &w->v[i];
    char rule[JB_SCAN_ID_MAX + 1], to[PATH_MAX], real[PATH_MAX];
    if (e->type != 'l' || e->kind || !e->detail ||
        !jb_scan_landing_in_use(e->path, true, rule, sizeof rule) ||
        link_target_path(e->path, e->detail, to) < 0)
      continue;
    if ((rc = flag_landing(w, to, e->path)) < 0) break;
    if (rfd < 0 && (rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC)) >= 0) {
      char proc[64];
      snprintf(proc, sizeof proc, "/proc/self/fd/%d", rfd);
      ssize_t n = readlink(proc, rootp, sizeof rootp - 1);
      rootp[n > 0 ? n : 0] = '\0';
    }
    if (rfd >= 0 && rootp[0] && resolved_path(rfd, rootp, e->path, to, real) == 0 &&
        strcmp(real, to))
      rc = flag_landing(w, real, e->path);
  }
  if (rfd >= 0) close(rfd);
  return rc;
}

static int by_path(const void *a, const void *b) {
  return strcmp(((const struct entry *)a)->path, ((const struct entry *)b)->path);
}

void jb_scan_result_free(struct jb_scan_result *r) {
  if (!r) return;
  json_decref(r->flagged);
  r->flagged = NULL;
  json_decref(r->secrets);
  r->secrets = NULL;
  json_decref(r->repos);
  r->repos = NULL;
}

/* The SHA-256 of the sorted entries of `w` (jb_workspace_scan) into out->dir_hash. */
static void dir_hash(const struct walk *w, struct jb_scan_result *out) {
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  for (size_t i = 0; i < w->n; i++) {
    char size[32];
    int sl = snprintf(size, sizeof size, "%lld", w->v[i].size);
    crypto_hash_sha256_update(&st, (const unsigned char *)&w->v[i].type, 1);
    crypto_hash_sha256_update(&st, (const unsigned char *)"", 1);
    crypto_hash_sha256_update(&st, (const unsigned char *)w->v[i].path, strlen(w->v[i].path) + 1);
    crypto_hash_sha256_update(&st, (const unsigned char *)size, (unsigned long long)sl + 1);
    if (w->v[i].detail)
      crypto_hash_sha256_update(&st, (const unsigned char *)w->v[i].detail, strlen(w->v[i].detail));
    crypto_hash_sha256_update(&st, (const unsigned char *)"\n", 1);
  }
  unsigned char h[32];
  crypto_hash_sha256_final(&st, h);
  sodium_bin2hex(out->dir_hash, sizeof out->dir_hash, h, sizeof h);
}

/* Moves the entries of `w` (sorted) into snapshot `k`. 0, or -1 when out of memory. */
static int to_snapshot(struct walk *w, struct jb_scan_snapshot *k) {
  k->v = calloc(w->n ? w->n : 1, sizeof *k->v);
  if (!k->v) return -1;
  for (size_t i = 0; i < w->n; i++) {
    k->v[i] = (struct jb_scan_entry){.type = w->v[i].type,
                                     .mode = w->v[i].mode,
                                     .size = w->v[i].size,
                                     .mtime_ns = w->v[i].mtime_ns,
                                     .ctime_ns = w->v[i].ctime_ns,
                                     .path = w->v[i].path,
                                     .detail = w->v[i].detail,
                                     .kind = w->v[i].kind,
                                     .dev = w->v[i].dev,
                                     .ino = w->v[i].ino};
    w->v[i].path = w->v[i].detail = NULL; /* moved */
  }
  k->n = w->n;
  return 0;
}

/* Flags each symbolic link of `k` that leads out resolved against the tree as walked (through
 * the other links on its way), when the lexical judgement did not already. */
static int flag_resolved_links(struct walk *w, struct jb_scan_snapshot *k) {
  for (size_t i = 0; i < k->n; i++) {
    if (k->v[i].type != 'l' || k->v[i].kind) continue;
    if (jb_scan_link_resolve(k, i, NULL, NULL, NULL, 0, NULL) != 1) continue;
    k->v[i].kind = "symlink_outside";
    w->out->n_flagged++;
    if (json_array_size(w->out->flagged) < JB_SCAN_FLAGGED_MAX &&
        json_array_append_new(w->out->flagged, jb_scan_flag_json(k->v[i].path, "symlink_outside")) <
            0)
      return jb_fail(w->err, ENOMEM, "out of memory");
  }
  return 0;
}

/* The walk of jb_workspace_scan within `lim`, reusing the hashes of `prev` (may be NULL); with
 * `keep` its entries, sorted, are handed to *keep (else freed). */
static int scan(const char *root, const struct jb_walk_limits *lim,
                const struct jb_scan_snapshot *prev, struct jb_scan_result *out,
                struct jb_scan_snapshot *keep, jb_error *err) {
  memset(out, 0, sizeof *out);
  out->hash_max = lim->hash_max;
  if (!(out->flagged = json_array())) return jb_fail(err, ENOMEM, "out of memory");
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    jb_scan_result_free(out);
    return jb_fail_errno(err, errno, "pre-scan: open workspace %s", root);
  }
  struct walk w = {.max = lim->max_entries,
                   .hash_max = lim->hash_max,
                   .out = out,
                   .err = err,
                   .prev = prev,
                   .hash_left = lim->hash_budget > 0 ? lim->hash_budget : -1,
                   .deadline_ms = lim->time_ms > 0 ? now_ms() + lim->time_ms : 0};
  struct secret_look sec = {.rules = jb_scan_rules_in_use(), .exclude = lim->exclude_secrets};
  if (lim->secrets) {
    w.sec = &sec;
    out->secrets = json_array();
    out->repos = json_array();
    sec.win = malloc(WALK_BUF + SECRET_OVERLAP);
  }
  if (!(w.buf = malloc(WALK_BUF)) || (lim->secrets && (!sec.win || !out->secrets))) {
    free(w.buf);
    free(sec.win);
    close(fd);
    jb_scan_result_free(out);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  struct timespec began;
  clock_gettime(CLOCK_REALTIME, &began);
  int ret = walk_dir(&w, fd, "");
  free(w.buf);
  free(sec.win);
  struct jb_scan_snapshot k = {0};
  if (ret == 0 && !keep) ret = flag_landing_links(&w, root);
  if (ret == 0) {
    if (w.n > 1) qsort(w.v, w.n, sizeof *w.v, by_path);
    dir_hash(&w, out);
    if (to_snapshot(&w, &k) < 0) ret = jb_fail(err, ENOMEM, "out of memory");
  }
  if (ret == 0) ret = flag_resolved_links(&w, &k);
  for (size_t i = 0; i < w.n; i++) {
    free(w.v[i].path);
    free(w.v[i].detail);
  }
  free(w.v);
  if (ret == 0 && keep) {
    *keep = k;
    keep->truncated = out->truncated;
    keep->started_ns = (long long)began.tv_sec * 1000000000LL + began.tv_nsec;
    snprintf(keep->why, sizeof keep->why, "%s", w.why);
  } else {
    jb_scan_snapshot_free(&k);
  }
  if (ret < 0) jb_scan_result_free(out);
  return ret;
}

int jb_workspace_scan(const char *root, long max_entries, long long hash_max,
                      struct jb_scan_result *out, jb_error *err) {
  struct jb_walk_limits lim = {.max_entries = max_entries, .hash_max = hash_max};
  return scan(root, &lim, NULL, out, NULL, err);
}

int jb_workspace_prescan(const char *root, long max_entries, long long hash_max,
                         bool exclude_secrets, struct jb_scan_result *out, jb_error *err) {
  struct jb_walk_limits lim = {.max_entries = max_entries,
                               .hash_max = hash_max,
                               .secrets = true,
                               .exclude_secrets = exclude_secrets};
  return scan(root, &lim, NULL, out, NULL, err);
}

int jb_workspace_snapshot(const char *root, long max_entries, long long hash_max,
                          struct jb_scan_snapshot *out, jb_error *err) {
  struct jb_walk_limits lim = {.max_entries = max_entries, .hash_max = hash_max};
  return jb_workspace_snapshot_since(root, &lim, NULL, out, err);
}

int jb_workspace_snapshot_since(const char *root, const struct jb_walk_limits *lim,
                                const struct jb_scan_snapshot *prev, struct jb_scan_snapshot *out,
                                jb_error *err) {
  *out = (struct jb_scan_snapshot){0};
  struct jb_scan_result r;
  int rc = scan(root, lim, prev, &r, out, err);
  if (rc == 0) jb_scan_result_free(&r);
  return rc;
}

int jb_scan_snapshot_copy(const struct jb_scan_snapshot *s, struct jb_scan_snapshot *out) {
  *out = (struct jb_scan_snapshot){.truncated = s->truncated, .started_ns = s->started_ns};
  memcpy(out->why, s->why, sizeof out->why);
  if (!(out->v = calloc(s->n ? s->n : 1, sizeof *out->v))) return -1;
  for (size_t i = 0; i < s->n; i++) {
    out->v[i] = s->v[i];
    out->v[i].path = strdup(s->v[i].path);
    out->v[i].detail = s->v[i].detail ? strdup(s->v[i].detail) : NULL;
    out->n = i + 1;
    if (!out->v[i].path || (s->v[i].detail && !out->v[i].detail)) {
      jb_scan_snapshot_free(out);
      return -1;
    }
  }
  return 0;
}

/* The index of `path` in `s`, or -1. */
static long snap_find(const struct jb_scan_snapshot *s, const char *path) {
  if (!s->n) return -1;
  const struct jb_scan_entry *e = bsearch(path, s->v, s->n, sizeof *s->v, snap_by_path);
  return e ? (long)(e - s->v) : -1;
}

/* Whether after->v[i] and the directories above it in `after` were changed last more than
 * RACY_NS before `before` began. */
static bool untouched_since(const struct jb_scan_snapshot *before,
                            const struct jb_scan_snapshot *after, size_t i) {
  if (after->v[i].ctime_ns > before->started_ns - RACY_NS) return false;
  char up[PATH_MAX];
  snprintf(up, sizeof up, "%s", after->v[i].path);
  for (char *sl = strrchr(up, '/'); sl; sl = strrchr(up, '/')) {
    *sl = '\0';
    long k = snap_find(after, up);
    if (k < 0 || after->v[k].ctime_ns > before->started_ns - RACY_NS) return false;
  }
  return true;
}

bool jb_scan_entry_changed(const struct jb_scan_snapshot *before,
                           const struct jb_scan_snapshot *after, size_t i) {
  const struct jb_scan_entry *e = &after->v[i];
  long bi = snap_find(before, e->path);
  const struct jb_scan_entry *b = bi >= 0 ? &before->v[bi] : NULL;
  if (!b) return !(before->truncated && untouched_since(before, after, i));
  if (b->type != e->type || b->mode != e->mode) return true;
  if (e->type == 'd') return false;
  if (b->size != e->size) return true;
  if ((!b->detail && !e->detail) || (b->detail && e->detail && !strcmp(b->detail, e->detail)))
    return false;
  bool unknown = (b->detail && !strcmp(b->detail, "unhashed")) ||
                 (e->detail && !strcmp(e->detail, "unhashed"));
  return !(unknown && b->dev == e->dev && b->ino == e->ino && b->ctime_ns == e->ctime_ns &&
           untouched_since(before, after, i));
}

int jb_scan_link_resolve(const struct jb_scan_snapshot *s, size_t i, const bool *changed,
                         bool *touched, size_t *via, size_t via_max, size_t *nvia) {
  bool t = changed && changed[i];
  size_t nv = 0;
  if (via && via_max) via[nv++] = i;
  const char *target = s->v[i].detail ? s->v[i].detail : "";
  char cur[PATH_MAX]; /* the directory reached, relative to the root ("" is the root) */
  const char *slash = strrchr(s->v[i].path, '/');
  size_t cl = slash ? (size_t)(slash - s->v[i].path) : 0;
  memcpy(cur, s->v[i].path, cl);
  cur[cl] = '\0';
  struct jb_buf rest; /* what is left to resolve */
  jb_buf_init(&rest, 64 * 1024);
  int links = 1, res = 0;
  if (target[0] == '/')
    res = 1;
  else if (jb_buf_append(&rest, target, strlen(target) + 1) < 0)
    res = 1; /* fail closed */
  size_t at = 0;
  while (res == 0 && rest.data && at < rest.len && rest.data[at]) {
    const char *c = rest.data + at;
    size_t len = strcspn(c, "/");
    at += len + (c[len] == '/');
    if (len == 0 || (len == 1 && c[0] == '.')) continue;
    if (len == 2 && c[0] == '.' && c[1] == '.') {
      if (cl == 0) {
        res = 1; /* above the root */
        break;
      }
      char *up = strrchr(cur, '/');
      cl = up ? (size_t)(up - cur) : 0;
      cur[cl] = '\0';
      continue;
    }
    char cand[PATH_MAX];
    if ((size_t)snprintf(cand, sizeof cand, "%s%s%.*s", cur, cl ? "/" : "", (int)len, c) >=
        sizeof cand)
      break; /* ENAMETOOLONG: leads nowhere */
    long k = snap_find(s, cand);
    if (k < 0) break; /* dangling inside */
    const struct jb_scan_entry *e = &s->v[k];
    if (changed && changed[k]) t = true;
    if (e->type == 'd') {
      cl = strlen(cand);
      memcpy(cur, cand, cl + 1);
    } else if (e->type == 'l') {
      if (++links > LINKS_MAX) {
        res = 2; /* ELOOP */
        break;
      }
      if (via && nv < via_max) via[nv++] = (size_t)k;
      const char *tg = e->detail ? e->detail : "";
      if (tg[0] == '/') {
        res = 1;
        break;
      }
      /* the target, then what was left */
      struct jb_buf nr;
      jb_buf_init(&nr, 64 * 1024);
      if (jb_buf_append(&nr, tg, strlen(tg)) < 0 || jb_buf_append(&nr, "/", 1) < 0 ||
          jb_buf_append(&nr, rest.data + at, rest.len - at) < 0) {
        jb_buf_free(&nr);
        res = 1;
        break;
      }
      jb_buf_free(&rest);
      rest = nr;
      at = 0;
    } else {
      break; /* a file: the end, or ENOTDIR */
    }
  }
  jb_buf_free(&rest);
  if (touched) *touched = t;
  if (nvia) *nvia = nv;
  return res;
}

void jb_scan_snapshot_free(struct jb_scan_snapshot *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n && s->v; i++) {
    free(s->v[i].path);
    free(s->v[i].detail);
  }
  free(s->v);
  *s = (struct jb_scan_snapshot){0};
}

static const char *type_name(char t) {
  return t == 'f' ? "file" : t == 'd' ? "directory" : t == 'l' ? "symlink" : "other";
}

/* `s` as a JSON string (new): as it is when it is UTF-8, else with each invalid byte replaced
 * by U+FFFD (file names and link targets are bytes; JSON text is UTF-8). */
static json_t *text_json(const char *s) {
  json_t *j = json_string(s);
  if (j) return j;
  struct jb_buf b;
  size_t n = strlen(s), replaced = 0;
  jb_buf_init(&b, n * 3 + 16);
  if (jb_utf8_sanitize((const unsigned char *)s, n, true, &b, &replaced) != (size_t)-1)
    j = json_stringn(b.data ? b.data : "", b.len);
  jb_buf_free(&b);
  return j;
}

json_t *jb_scan_path_json(const char *path) { return text_json(path); }

/* One change entry (new): {path, change, type, size?, sha256?, target?, mode, flagged?}. */
static json_t *change_json(const struct jb_scan_entry *e, const char *change) {
  char mode[8];
  snprintf(mode, sizeof mode, "%04o", e->mode);
  json_t *c = json_pack("{s:o,s:s,s:s,s:s}", "path", text_json(e->path), "change", change, "type",
                        type_name(e->type), "mode", mode);
  if (!c) return NULL;
  if (e->type == 'f') {
    json_object_set_new(c, "size", json_integer(e->size));
    if (e->detail && strlen(e->detail) == 64)
      json_object_set_new(c, "sha256", json_string(e->detail));
  }
  if (e->type == 'l' && e->detail) json_object_set_new(c, "target", text_json(e->detail));
  if (e->kind) json_object_set_new(c, "flagged", json_string(e->kind));
  return c;
}

json_t *jb_scan_changes(const struct jb_scan_snapshot *before, const struct jb_scan_snapshot *after,
                        size_t max, size_t *total) {
  json_t *a = json_array();
  *total = 0;
  size_t i = 0, j = 0;
  while (a && (i < before->n || j < after->n)) {
    int cmp = i >= before->n ? 1 : j >= after->n ? -1 : strcmp(before->v[i].path, after->v[j].path);
    const struct jb_scan_entry *e = NULL;
    const char *change = NULL;
    if (cmp < 0) {
      e = &before->v[i++];
      change = "deleted";
    } else if (cmp > 0) {
      e = &after->v[j++];
      change = "added";
    } else {
      const struct jb_scan_entry *b = &before->v[i++], *n = &after->v[j++];
      bool same_detail =
          (!b->detail && !n->detail) || (b->detail && n->detail && !strcmp(b->detail, n->detail));
      e = n;
      if (b->type != n->type || b->size != n->size || !same_detail)
        change = n->type == 'd' && b->type == 'd' ? NULL : "modified";
      else if (b->mode != n->mode)
        change = "mode";
    }
    if (!change) continue;
    (*total)++;
    if (json_array_size(a) >= max) continue;
    json_t *c = change_json(e, change);
    if (!c || json_array_append_new(a, c) < 0) {
      json_decref(a);
      a = NULL;
    }
  }
  return a;
}

int jb_workspace_link_leaves(const char *root, const char *path) {
  int rfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (rfd < 0) return -1;
  struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
  long fd = syscall(SYS_openat2, rfd, path, &how, sizeof how);
  int e = errno;
  close(rfd);
  if (fd >= 0) {
    close((int)fd);
    return 0; /* resolves to an entry inside */
  }
  if (e == ENOENT || e == ENOTDIR) return 0; /* dangling inside the root */
  return e == EXDEV || e == ELOOP ? 1 : -1;
}

int jb_workspace_remove(const char *root, const char *path, jb_error *err) {
  int dfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return jb_fail_errno(err, errno, "open workspace %s", root);
  char buf[PATH_MAX];
  if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf) {
    close(dfd);
    return jb_fail(err, ENAMETOOLONG, "path too long");
  }
  char *name = buf, *slash;
  while ((slash = strchr(name, '/'))) { /* each directory on the way, never through a link */
    *slash = '\0';
    if (!*name || !strcmp(name, "..") || !strcmp(name, ".")) {
      close(dfd);
      return jb_fail(err, EINVAL, "bad path component");
    }
    int next = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    close(dfd);
    if (next < 0) return jb_fail_errno(err, e, "open %s", name);
    dfd = next;
    name = slash + 1;
  }
  struct stat st;
  int rc = 0;
  if (!*name || !strcmp(name, "..") || !strcmp(name, "."))
    rc = jb_fail(err, EINVAL, "bad path component");
  else if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    rc = jb_fail_errno(err, errno, "stat %s", path);
  else if (S_ISDIR(st.st_mode))
    rc = jb_fail(err, EISDIR, "%s is a directory", path);
  else if (unlinkat(dfd, name, 0) < 0)
    rc = jb_fail_errno(err, errno, "remove %s", path);
  close(dfd);
  return rc;
}

json_t *jb_scan_json(const struct jb_scan_result *r) {
  json_t *j =
      json_pack("{s:I, s:I, s:I, s:I, s:I, s:b, s:s, s:I, s:o, s:I}", "files", (json_int_t)r->files,
                "dirs", (json_int_t)r->dirs, "symlinks", (json_int_t)r->symlinks, "other",
                (json_int_t)r->other, "bytes", (json_int_t)r->bytes, "truncated", r->truncated,
                "dirHash", r->dir_hash, "hashMaxBytes", (json_int_t)r->hash_max, "flagged",
                r->flagged ? json_incref(r->flagged) : json_array(), "flaggedCount",
                (json_int_t)r->n_flagged);
  if (j && r->secrets) {
    json_object_set(j, "secrets", r->secrets);
    json_object_set_new(j, "secretsCount", json_integer((json_int_t)r->n_secrets));
  }
  return j;
}
