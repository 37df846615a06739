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
};

#define WALK_BUF 65536 /* bytes read at a time when hashing */
#define WALK_DEPTH_MAX 256 /* directory levels walked; deeper ones make the walk truncated */
#define WALK_BYTES_MAX (64LL << 20) /* bytes of paths and details kept; then truncated */

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
};

/* Hashes regular file `name` of `dirfd` into `out`, reading at most `max` bytes. Returns 1
 * when it is no longer a single-link regular file (swapped meanwhile: never block on a fifo
 * put in its place), 2 when it grew over `max` bytes meanwhile, 0, or -1 with `err`. */
static int hash_file(int dirfd, const char *name, long long max, unsigned char *buf, size_t bufsize,
                     char out[65], jb_error *err) {
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
    if ((long)w->n >= w->max || w->kept > WALK_BYTES_MAX) {
      w->out->truncated = true;
      break;
    }
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >=
        sizeof path) {
      w->out->truncated = true; /* a path past PATH_MAX: not seen, so the walk is not whole */
      continue;
    }
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno != ENOENT) w->out->truncated = true; /* unseen, not gone */
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
    } else if (type == 'f') {
      w->out->files++;
      w->out->bytes += st.st_size;
      char hex[65];
      int hr = hash_file(dirfd(d), de->d_name, w->hash_max, w->buf, WALK_BUF, hex, w->err);
      if (hr < 0) {
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
      if (w->depth + 1 > WALK_DEPTH_MAX) { /* not entered: the walk is not whole */
        w->out->truncated = true;
        continue;
      }
      int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP) w->out->truncated = true;
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
}

/* The walk of jb_workspace_scan; with `keep` its entries, sorted, are handed to *keep (else
 * freed). */
static int scan(const char *root, long max_entries, long long hash_max, struct jb_scan_result *out,
                struct jb_scan_snapshot *keep, jb_error *err) {
  memset(out, 0, sizeof *out);
  out->hash_max = hash_max;
  if (!(out->flagged = json_array())) return jb_fail(err, ENOMEM, "out of memory");
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    jb_scan_result_free(out);
    return jb_fail_errno(err, errno, "pre-scan: open workspace %s", root);
  }
  struct walk w = {.max = max_entries, .hash_max = hash_max, .out = out, .err = err};
  if (!(w.buf = malloc(WALK_BUF))) {
    close(fd);
    jb_scan_result_free(out);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  int ret = walk_dir(&w, fd, "");
  free(w.buf);
  if (ret == 0 && !keep) ret = flag_landing_links(&w, root);
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
  if (ret == 0 && keep) {
    keep->v = calloc(w.n ? w.n : 1, sizeof *keep->v);
    if (!keep->v) ret = jb_fail(err, ENOMEM, "out of memory");
    for (size_t i = 0; ret == 0 && i < w.n; i++) {
      keep->v[i] = (struct jb_scan_entry){.type = w.v[i].type,
                                          .mode = w.v[i].mode,
                                          .size = w.v[i].size,
                                          .path = w.v[i].path,
                                          .detail = w.v[i].detail,
                                          .kind = w.v[i].kind,
                                          .dev = w.v[i].dev,
                                          .ino = w.v[i].ino};
      w.v[i].path = w.v[i].detail = NULL; /* moved */
    }
    if (ret == 0) {
      keep->n = w.n;
      keep->truncated = out->truncated;
    }
  }
  for (size_t i = 0; i < w.n; i++) {
    free(w.v[i].path);
    free(w.v[i].detail);
  }
  free(w.v);
  if (ret < 0) jb_scan_result_free(out);
  return ret;
}

int jb_workspace_scan(const char *root, long max_entries, long long hash_max,
                      struct jb_scan_result *out, jb_error *err) {
  return scan(root, max_entries, hash_max, out, NULL, err);
}

int jb_workspace_snapshot(const char *root, long max_entries, long long hash_max,
                          struct jb_scan_snapshot *out, jb_error *err) {
  *out = (struct jb_scan_snapshot){0};
  struct jb_scan_result r;
  int rc = scan(root, max_entries, hash_max, &r, out, err);
  if (rc == 0) jb_scan_result_free(&r);
  return rc;
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
  return json_pack("{s:I, s:I, s:I, s:I, s:I, s:b, s:s, s:I, s:o, s:I}", "files",
                   (json_int_t)r->files, "dirs", (json_int_t)r->dirs, "symlinks",
                   (json_int_t)r->symlinks, "other", (json_int_t)r->other, "bytes",
                   (json_int_t)r->bytes, "truncated", r->truncated, "dirHash", r->dir_hash,
                   "hashMaxBytes", (json_int_t)r->hash_max, "flagged",
                   r->flagged ? json_incref(r->flagged) : json_array(), "flaggedCount",
                   (json_int_t)r->n_flagged);
}
