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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lib/scan.h"
#include "sandbox/worker/hostfs.h"

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

struct alias;

struct jb_preimage {
  struct kept *v; /* in path order (a directory before what it holds) */
  size_t n;
  bool whole;
  struct alias *links; /* the links of the walk it was taken from, by where they resolve */
  size_t nlinks;
};

static void aliases_free(struct alias *v, size_t n);

bool jb_preimage_whole(const struct jb_preimage *p) { return p && p->whole; }

void jb_preimage_free(struct jb_preimage *p) {
  if (!p) return;
  for (size_t i = 0; i < p->n; i++) {
    free(p->v[i].path);
    free(p->v[i].data);
  }
  free(p->v);
  aliases_free(p->links, p->nlinks);
  free(p);
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
  int pfd = jb_hostfs_open_parent(rootfd, e->path, &name);
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
    int r = jb_hostfs_read_file(pfd, name, JB_PREIMAGE_BYTES_MAX - *bytes, &k->data, &k->len);
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

/* ---- links: what a symbolic link makes reachable at its own path ---- */

#define LINKS_MAX 40 /* links followed resolving one path (the kernel's MAXSYMLINKS) */

/* Whether entry `e` is judged as a directory: a directory, or a symbolic link (what it leads
 * to may be one, now or later). */
static bool as_dir(const struct jb_scan_entry *e) { return e->type == 'd' || e->type == 'l'; }

/* Where symbolic link s->v[i] resolves inside the root, as the kernel resolves it against the
 * snapshot (each component looked up, a link's target followed from the link's directory, at
 * most LINKS_MAX links), the components past a missing one taken as they are (what a later
 * command may create there): 0 with the path relative to the root in `out` ("" the root), -1
 * when it leads out, loops or is too long. */
static int resolve_in(const struct jb_scan_snapshot *s, size_t i, char *out, size_t osize) {
  char cur[PATH_MAX], rest[2 * PATH_MAX], nr[2 * PATH_MAX];
  const char *lp = s->v[i].path, *sl = strrchr(lp, '/');
  size_t cl = sl ? (size_t)(sl - lp) : 0;
  const char *t = s->v[i].detail ? s->v[i].detail : "";
  if (cl >= sizeof cur || t[0] == '/' ||
      (size_t)snprintf(rest, sizeof rest, "%s", t) >= sizeof rest)
    return -1;
  memcpy(cur, lp, cl);
  cur[cl] = '\0';
  int links = 1;
  bool missing = false;
  for (size_t at = 0; rest[at];) {
    const char *c = rest + at;
    size_t len = strcspn(c, "/");
    at += len + (c[len] == '/');
    if (len == 0 || (len == 1 && c[0] == '.')) continue;
    if (len == 2 && c[0] == '.' && c[1] == '.') {
      if (cl == 0) return -1; /* above the root */
      char *up = strrchr(cur, '/');
      cl = up ? (size_t)(up - cur) : 0;
      cur[cl] = '\0';
      continue;
    }
    if (cl + 1 + len >= sizeof cur) return -1;
    if (cl) cur[cl++] = '/';
    memcpy(cur + cl, c, len);
    cl += len;
    cur[cl] = '\0';
    const struct jb_scan_entry *e = missing ? NULL : find(s, cur);
    if (!e) missing = true;
    if (!e || e->type != 'l') continue; /* a directory, a file, or nothing yet */
    if (++links > LINKS_MAX) return -1;
    const char *tg = e->detail ? e->detail : "";
    if (tg[0] == '/') return -1;
    char *up = strrchr(cur, '/'); /* the target is followed from the link's directory */
    cl = up ? (size_t)(up - cur) : 0;
    cur[cl] = '\0';
    if ((size_t)snprintf(nr, sizeof nr, "%s/%s", tg, rest + at) >= sizeof nr) return -1;
    memcpy(rest, nr, strlen(nr) + 1);
    at = 0;
  }
  return (size_t)snprintf(out, osize, "%s", cur) >= osize ? -1 : 0;
}

/* One symbolic link of a snapshot, by where it resolves: an entry at `t`, or under it, is
 * reachable at `p` (the link's path) with the rest of its path. */
struct alias {
  char *t, *p;
  size_t link; /* the link's index in its snapshot */
};

static int alias_cmp(const void *a, const void *b) {
  return strcmp(((const struct alias *)a)->t, ((const struct alias *)b)->t);
}

static void aliases_free(struct alias *v, size_t n) {
  for (size_t i = 0; v && i < n; i++) {
    free(v[i].t);
    free(v[i].p);
  }
  free(v);
}

/* The calling thread's places of the buyer's git configuration (jb_landing_places). */
static _Thread_local const struct jb_git_place *places;
static _Thread_local size_t nplaces;

void jb_landing_places(const struct jb_git_place *v, size_t n) {
  places = v;
  nplaces = v ? n : 0;
}

/* The symbolic links of `s` that resolve inside it (only those flagged in `only`, when not
 * NULL), sorted by where they resolve — and, for all of the buyer's (`only` NULL), the places
 * of jb_landing_places as links from their `as` — : a new array (aliases_free) with its length
 * in *n, or NULL with *n 0 when there are none; *oom when memory ran out (then the links are
 * missing). */
static struct alias *aliases_of(const struct jb_scan_snapshot *s, const bool *only, size_t *n,
                                bool *oom) {
  *n = 0;
  struct alias *v = NULL;
  size_t cap = 0;
  for (size_t k = 0; !only && k < nplaces; k++) {
    if (*n == cap) {
      struct alias *nv = realloc(v, (cap ? 2 * cap : 16) * sizeof *v);
      if (!nv) {
        *oom = true;
        return v;
      }
      v = nv;
      cap = cap ? 2 * cap : 16;
    }
    v[*n] = (struct alias){.t = strdup(places[k].t), .p = strdup(places[k].as), .link = SIZE_MAX};
    if (!v[*n].t || !v[*n].p) {
      free(v[*n].t);
      free(v[*n].p);
      *oom = true;
      return v;
    }
    (*n)++;
  }
  for (size_t i = 0; i < s->n; i++) {
    if (s->v[i].type != 'l' || (only && !only[i])) continue;
    char t[PATH_MAX];
    if (resolve_in(s, i, t, sizeof t) < 0) continue; /* leads out: judged as such elsewhere */
    if (*n == cap) {
      struct alias *nv = realloc(v, (cap ? 2 * cap : 16) * sizeof *v);
      if (!nv) {
        *oom = true;
        break;
      }
      v = nv;
      cap = cap ? 2 * cap : 16;
    }
    v[*n].t = strdup(t);
    v[*n].p = strdup(s->v[i].path);
    v[*n].link = i;
    if (!v[*n].t || !v[*n].p) {
      free(v[*n].t);
      free(v[*n].p);
      *oom = true;
      break;
    }
    (*n)++;
  }
  if (*n > 1) qsort(v, *n, sizeof *v, alias_cmp);
  return v;
}

/* Whether the entry at `path` (a directory when `is_dir`) lies at a covered path through one
 * of the links `a` (`n`, sorted): the rule in `rule` and the index of that alias, or -1. */
static long alias_rule(const struct alias *a, size_t n, const char *path, bool is_dir, char *rule,
                       size_t rsize) {
  if (!n) return -1;
  size_t len = strlen(path);
  for (size_t cut = 0; cut <= len; cut++) {
    if (cut != len && !(cut == 0 || path[cut] == '/')) continue;
    char t[PATH_MAX];
    if (cut >= sizeof t) return -1;
    memcpy(t, path, cut);
    t[cut] = '\0';
    const char *rest = path + cut; /* "" or "/…" */
    /* the first alias at t */
    size_t lo = 0, hi = n;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (strcmp(a[mid].t, t) < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (; lo < n && !strcmp(a[lo].t, t); lo++) {
      char as[PATH_MAX];
      int w = cut == 0 ? snprintf(as, sizeof as, "%s%s%s", a[lo].p, len ? "/" : "", path)
                       : snprintf(as, sizeof as, "%s%s", a[lo].p, rest);
      if (w < 0 || (size_t)w >= sizeof as) continue;
      if (jb_scan_landing_in_use(as, is_dir, rule, rsize)) return (long)lo;
    }
  }
  return -1;
}

/* The rule under which entry s->v[i] lies at a covered path, in `rule`: at its own path (a
 * link judged as a directory too), or reachable through one of the links `a` (`n`). */
static bool landing_rule(const struct jb_scan_snapshot *s, size_t i, const struct alias *a,
                         size_t n, char *rule, size_t rsize) {
  const struct jb_scan_entry *e = &s->v[i];
  return jb_scan_landing_in_use(e->path, as_dir(e), rule, rsize) ||
         alias_rule(a, n, e->path, as_dir(e), rule, rsize) >= 0;
}

int jb_preimage_take(const char *root, const struct jb_scan_snapshot *before,
                     struct jb_preimage **out, jb_error *err) {
  *out = NULL;
  struct jb_preimage *p = calloc(1, sizeof *p);
  unsigned char *need = calloc(before->n ? before->n : 1, 1); /* 1 above a covered one, 2 covered */
  char **rules = calloc(before->n ? before->n : 1, sizeof *rules);
  bool oom = false;
  size_t na = 0;
  struct alias *al = aliases_of(before, NULL, &na, &oom); /* the buyer's links */
  if (!p || !need || !rules || oom) goto oom;
  p->whole = !before->truncated;
  size_t count = 0;
  for (size_t i = 0; i < before->n; i++) {
    char rule[64];
    if (!landing_rule(before, i, al, na, rule, sizeof rule)) continue;
    if (!(rules[i] = strdup(rule))) goto oom;
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
    for (size_t i = 0; i < before->n; i++) free(rules[i]);
    free(rules);
    free(need);
    aliases_free(al, na);
    jb_preimage_free(p);
    return jb_fail_errno(err, e, "open workspace %s", root);
  }
  size_t bytes = 0;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < before->n && p->n < count; i++)
    if (need[i])
      rc = keep_entry(p, rootfd, &before->v[i], need[i] == 2, rules[i] ? rules[i] : "", &bytes);
  close(rootfd);
  for (size_t i = 0; i < before->n; i++) free(rules[i]);
  free(rules);
  free(need);
  p->links = al; /* for the sweep after the command */
  p->nlinks = na;
  if (rc < 0) {
    jb_preimage_free(p);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  *out = p;
  return 0;
oom:
  for (size_t i = 0; rules && i < before->n; i++) free(rules[i]);
  free(rules);
  free(need);
  aliases_free(al, na);
  jb_preimage_free(p);
  return jb_fail(err, ENOMEM, "out of memory");
}

/* ---- the undo ---- */

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
    bool same = jb_hostfs_read_file(pfd, name, k->len, &data, &len) == 0 && len == k->len &&
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
    if (exists && !S_ISDIR(st.st_mode) && jb_hostfs_remove_tree(pfd, name, 0) < 0) return -1;
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
  if (rc == 0 && exists && S_ISDIR(st.st_mode) && jb_hostfs_remove_tree(pfd, name, 0) < 0) rc = -1;
  if (rc == 0 && renameat(pfd, tmp, pfd, name) < 0) rc = -1;
  if (rc < 0) unlinkat(pfd, tmp, 0);
  return rc;
}

/* The landings of a command (`before` and `after` its walks): for each entry of `after`, the
 * rule under which it is one (new strings; NULL: none) — an entry it added, changed or
 * re-moded at a covered path, reached as it is or through a link of `before` (the buyer's
 * links: the entry is undone); and a link it made or changed through which any entry of
 * `after` lies at a covered path (the link is undone). A new array of after->n (landings_free),
 * or NULL when out of memory. */
static char **landings(const struct jb_scan_snapshot *before,
                       const struct jb_scan_snapshot *after) {
  char **rules = calloc(after->n ? after->n : 1, sizeof *rules);
  bool *changed = calloc(after->n ? after->n : 1, sizeof *changed);
  bool oom = !rules || !changed;
  for (size_t i = 0; !oom && i < after->n; i++)
    changed[i] = jb_scan_entry_changed(before, after, i);
  size_t nb = 0, na = 0;
  struct alias *ab = oom ? NULL : aliases_of(before, NULL, &nb, &oom);
  struct alias *aa = oom ? NULL : aliases_of(after, changed, &na, &oom);
  for (size_t i = 0; !oom && i < after->n; i++) {
    const struct jb_scan_entry *e = &after->v[i];
    char rule[64];
    if (changed[i] && !rules[i] && landing_rule(after, i, ab, nb, rule, sizeof rule) &&
        !(rules[i] = strdup(rule)))
      oom = true;
    /* (an entry covered where it is is judged there: a link to a directory above it, such as
     * the root, reaches it again at a deeper path but puts nothing new at a covered one) */
    long k = oom || !na || jb_scan_landing_in_use(e->path, as_dir(e), rule, sizeof rule)
                 ? -1
                 : alias_rule(aa, na, e->path, as_dir(e), rule, sizeof rule);
    if (k >= 0 && !rules[aa[k].link] && !(rules[aa[k].link] = strdup(rule))) oom = true;
  }
  aliases_free(ab, nb);
  aliases_free(aa, na);
  free(changed);
  if (oom && rules) {
    for (size_t i = 0; i < after->n; i++) free(rules[i]);
    free(rules);
    rules = NULL;
  }
  return rules;
}

static void landings_free(char **rules, size_t n) {
  for (size_t i = 0; rules && i < n; i++) free(rules[i]);
  free(rules);
}

/* Removes the landings (`rules`, of landings()) that have no pre-image to go back to: in
 * reverse path order, so what a directory holds goes before it. */
static void remove_new(int rootfd, const struct jb_scan_snapshot *after, char **rules,
                       const struct jb_preimage *pre, json_t *changes,
                       struct jb_landing_outcome *out) {
  for (size_t i = after->n; i-- > 0;) {
    const struct jb_scan_entry *e = &after->v[i];
    if (!rules[i]) continue;
    const struct kept *k = kept_find(pre, e->path);
    if (k && k->has_data) continue; /* put back by restore_kept */
    const char *name;
    int pfd = jb_hostfs_open_parent(rootfd, e->path, &name);
    bool ok = pfd >= 0 && jb_hostfs_remove_tree(pfd, name, 0) == 0;
    if (pfd >= 0) close(pfd);
    mark(changes, e->path, rules[i], "removed", ok);
    note(out, rules[i], e->path, "removed", ok);
  }
}

/* Puts back each kept entry that is no longer as it was, in path order. */
static void restore_kept(int rootfd, const struct jb_preimage *pre, json_t *changes,
                         struct jb_landing_outcome *out) {
  for (size_t i = 0; pre && i < pre->n; i++) {
    const struct kept *k = &pre->v[i];
    if (!k->has_data) continue;
    const char *name;
    int pfd = jb_hostfs_open_parent(rootfd, k->path, &name);
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
    int pfd = jb_hostfs_open_parent(rootfd, e->path, &name);
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
  char **rules = landings(before, after);
  if (rules)
    remove_new(rootfd, after, rules, pre, changes, out);
  else
    out->incomplete = true; /* out of memory: the landings were not judged */
  landings_free(rules, after->n);
  restore_kept(rootfd, pre, changes, out);
  close(rootfd);
}

/* ---- the sweep past a cut walk ---- */

struct sweep {
  const char *root;
  char real_root[PATH_MAX]; /* the root's path as /proc/self/fd shows it */
  int rootfd;
  const struct jb_preimage *pre;
  const struct alias *ab, *aa; /* the links of before; those the command made or changed */
  size_t nb, na;
  const struct jb_sweep_limits *lim;
  struct timespec t0;
  long seen;
  json_t *changes;
  struct jb_landing_outcome *out;
  const char *why; /* the first reason the sweep is not whole; NULL while it is */
};

static long long since_ms(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - t0->tv_sec) * 1000LL + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Appends what the sweep did to entry `path` to `changes` (the walk did not list it). */
static void sweep_change(json_t *changes, const char *path, bool existed, const char *rule,
                         const char *done, bool ok) {
  json_t *pj = jb_scan_path_json(path);
  if (pj && changes)
    json_array_append_new(changes, json_pack("{s:o,s:s,s:s,s:b,s:b}", "path", pj, "change",
                                             existed ? "modified" : "added", "flagged", rule, done,
                                             ok, "pastWalk", 1));
  else
    json_decref(pj);
}

/* Whether an entry under directory `dfd` (taken over), reached at `at` (`alen` bytes; the
 * link's path and what follows) and lying in truth at `real` (`rlen` bytes, relative to the
 * root), is at a covered path through the link and not where it is: 1 with the rule in
 * `rule`, 0, or -1 when the walk was cut (sw->why). Links under it are not followed. */
static int reach_dir(struct sweep *sw, int dfd, char *at, size_t alen, char *real, size_t rlen,
                     int depth, char *rule, size_t rsize) {
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    sw->why = sw->why ? sw->why : "unreadable entry";
    return -1;
  }
  int res = 0;
  struct dirent *de;
  while (res == 0 && !sw->why && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (++sw->seen > sw->lim->max_entries) sw->why = "entries";
    size_t nl = strlen(de->d_name);
    if (alen + 1 + nl >= PATH_MAX || rlen + 1 + nl >= PATH_MAX) sw->why = "path length";
    struct stat st;
    if (sw->why) break;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    at[alen] = '/';
    memcpy(at + alen + 1, de->d_name, nl + 1);
    size_t r2 = rlen;
    if (rlen) real[r2++] = '/';
    memcpy(real + r2, de->d_name, nl + 1);
    bool dir = S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode);
    char own[64];
    if (jb_scan_landing_in_use(at, dir, rule, rsize) &&
        !jb_scan_landing_in_use(real, dir, own, sizeof own))
      res = 1;
    else if (S_ISDIR(st.st_mode) && depth < JB_HOSTFS_TREE_DEPTH_MAX) {
      int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      res = sub < 0 ? 0
                    : reach_dir(sw, sub, at, alen + 1 + nl, real, r2 + nl, depth + 1, rule, rsize);
    }
    at[alen] = '\0';
    real[rlen] = '\0';
  }
  closedir(d);
  return sw->why ? -1 : res;
}

/* Whether symbolic link `path` (new; not at a covered path itself) resolves to a directory
 * inside the root through which an entry lies at a covered path (reach_dir): 1 with the rule
 * in `rule`, 0, or -1 when that cannot be told (sw->why). */
static int link_reach(struct sweep *sw, const char *path, char *rule, size_t rsize) {
  struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
  int fd = (int)syscall(SYS_openat2, sw->rootfd, path, &how, sizeof how);
  if (fd < 0) return 0; /* a file, or nothing: judged as the link itself */
  char proc[64], real[PATH_MAX], at[PATH_MAX];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(proc, real, sizeof real - 1);
  size_t rl = strlen(sw->real_root);
  if (n < 0 || (size_t)n < rl || memcmp(real, sw->real_root, rl) ||
      (n > (ssize_t)rl && real[rl] != '/')) {
    close(fd);
    sw->why = sw->why ? sw->why : "unreadable entry";
    return -1;
  }
  real[n] = '\0';
  memmove(real, real + rl + (n > (ssize_t)rl), strlen(real + rl + (n > (ssize_t)rl)) + 1);
  snprintf(at, sizeof at, "%s", path);
  return reach_dir(sw, fd, at, strlen(at), real, strlen(real), 0, rule, rsize);
}

/* Judges entry `name` of `dfd` (at `path`, `st` its lstat), changed since the command began:
 * a landing (at a covered path, as it is or through a link of before) is undone; a link the
 * command made or changed through which it lies at a covered path is removed; a link leading
 * out, a fifo, socket or device is removed; a link to a directory leaves the sweep not whole
 * (what it makes reachable is not walked). Whether the entry is gone. */
static bool sweep_entry(struct sweep *sw, int dfd, const char *name, const char *path,
                        const struct stat *st) {
  char rule[64];
  bool dir = S_ISDIR(st->st_mode) || S_ISLNK(st->st_mode);
  long k = -1;
  bool hit = jb_scan_landing_in_use(path, dir, rule, sizeof rule) ||
             alias_rule(sw->ab, sw->nb, path, dir, rule, sizeof rule) >= 0;
  if (!hit && (k = alias_rule(sw->aa, sw->na, path, dir, rule, sizeof rule)) >= 0) {
    const char *lname; /* the link that puts it there goes */
    int pfd = jb_hostfs_open_parent(sw->rootfd, sw->aa[k].p, &lname);
    bool ok = pfd >= 0 && jb_hostfs_remove_tree(pfd, lname, 0) == 0;
    if (pfd >= 0) close(pfd);
    mark(sw->changes, sw->aa[k].p, rule, "removed", ok);
    note(sw->out, rule, sw->aa[k].p, "removed", ok);
    return false;
  }
  if (!hit && S_ISLNK(st->st_mode)) {
    if (jb_workspace_link_leaves(sw->root, path) != 0)
      snprintf(rule, sizeof rule, "symlink_outside");
    else if (link_reach(sw, path, rule, sizeof rule) != 1)
      return false;
  } else if (!hit && !S_ISDIR(st->st_mode) && !S_ISREG(st->st_mode)) {
    snprintf(rule, sizeof rule, "%s",
             S_ISFIFO(st->st_mode)   ? "fifo"
             : S_ISSOCK(st->st_mode) ? "socket"
                                     : "device");
  } else if (!hit) {
    return false;
  }
  const struct kept *kp = kept_find(sw->pre, path);
  bool ok, gone = false;
  if (kp && kp->has_data) {
    if (as_kept(dfd, name, kp)) return false;
    ok = put_back(dfd, name, kp) == 0;
  } else {
    ok = jb_hostfs_remove_tree(dfd, name, 0) == 0;
    gone = true;
  }
  sweep_change(sw->changes, path, kp != NULL, rule, gone ? "removed" : "restored", ok);
  note(sw->out, rule, path, gone ? "removed" : "restored", ok);
  return gone;
}

/* Sweeps directory `dfd` (taken over; at `path`, `plen` bytes, within PATH_MAX). */
static void sweep_dir(struct sweep *sw, int dfd, char *path, size_t plen, int depth) {
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    sw->why = sw->why ? sw->why : "unreadable entry";
    return;
  }
  struct dirent *de;
  while (!sw->why && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (++sw->seen > sw->lim->max_entries) {
      sw->why = "entries";
      break;
    }
    if (sw->lim->time_ms > 0 && (sw->seen & 1023) == 0 && since_ms(&sw->t0) > sw->lim->time_ms) {
      sw->why = "time";
      break;
    }
    size_t nl = strlen(de->d_name), l2 = plen;
    if (plen + 1 + nl >= PATH_MAX) {
      sw->why = "path length";
      break;
    }
    if (plen) path[l2++] = '/';
    memcpy(path + l2, de->d_name, nl + 1);
    l2 += nl;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno != ENOENT) sw->why = "unreadable entry";
    } else {
      long long ct = st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec;
      bool gone = ct >= sw->lim->since_ns && sweep_entry(sw, dirfd(d), de->d_name, path, &st);
      if (!gone && S_ISDIR(st.st_mode)) {
        int sub =
            depth < JB_HOSTFS_TREE_DEPTH_MAX
                ? openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                : -1;
        if (sub < 0)
          sw->why = depth < JB_HOSTFS_TREE_DEPTH_MAX ? "unreadable entry" : "depth";
        else
          sweep_dir(sw, sub, path, l2, depth + 1);
      }
    }
    path[plen] = '\0';
  }
  closedir(d);
}

bool jb_landing_sweep(const char *root, const struct jb_scan_snapshot *before,
                      const struct jb_scan_snapshot *after, const struct jb_preimage *pre,
                      const struct jb_sweep_limits *lim, json_t *changes,
                      struct jb_landing_outcome *out, char *why, size_t wsize) {
  struct sweep sw = {.root = root, .pre = pre, .lim = lim, .changes = changes, .out = out};
  clock_gettime(CLOCK_MONOTONIC, &sw.t0);
  bool *changed = calloc(after->n ? after->n : 1, sizeof *changed);
  bool oom = !changed;
  for (size_t i = 0; changed && i < after->n; i++)
    changed[i] = jb_scan_entry_changed(before, after, i);
  struct alias *ab = NULL; /* the links before: those the pre-image was taken with */
  if (pre && pre->links) {
    sw.nb = pre->nlinks;
  } else if (!oom) {
    ab = aliases_of(before, NULL, &sw.nb, &oom);
  }
  struct alias *aa = !oom ? aliases_of(after, changed, &sw.na, &oom) : NULL;
  sw.ab = pre && pre->links ? pre->links : ab;
  sw.aa = aa;
  free(changed);
  sw.rootfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", sw.rootfd);
  ssize_t rn = sw.rootfd >= 0 ? readlink(proc, sw.real_root, sizeof sw.real_root - 1) : -1;
  sw.real_root[rn > 0 ? rn : 0] = '\0';
  if (rn <= 0) sw.why = "unreadable entry";
  if (oom)
    sw.why = "out of memory";
  else if (sw.rootfd < 0)
    sw.why = "unreadable entry";
  else {
    char path[PATH_MAX] = "";
    int fd = fcntl(sw.rootfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
      sw.why = "unreadable entry";
    else
      sweep_dir(&sw, fd, path, 0, 0);
  }
  if (sw.rootfd >= 0) close(sw.rootfd);
  aliases_free(ab, sw.nb);
  aliases_free(aa, sw.na);
  snprintf(why, wsize, "%s", sw.why ? sw.why : "");
  return !sw.why;
}

/* ---- the pre-image past a cut walk ---- */

struct gather {
  struct jb_scan_snapshot g; /* what was found, in walk order */
  size_t cap;
  const struct jb_sweep_limits *lim;
  struct timespec t0;
  long seen;
  const char *why;
};

/* Adds entry `name` of `dfd` at `path` (`st` its lstat) to g->g. */
static void gather_add(struct gather *g, int dfd, const char *name, const char *path,
                       const struct stat *st) {
  if (g->g.n == g->cap) {
    size_t nc = g->cap ? 2 * g->cap : 256;
    struct jb_scan_entry *nv = realloc(g->g.v, nc * sizeof *nv);
    if (!nv) {
      g->why = "out of memory";
      return;
    }
    g->g.v = nv;
    g->cap = nc;
  }
  struct jb_scan_entry *e = &g->g.v[g->g.n];
  *e = (struct jb_scan_entry){.mode = st->st_mode & 07777, .path = strdup(path)};
  e->type = S_ISREG(st->st_mode)   ? 'f'
            : S_ISDIR(st->st_mode) ? 'd'
            : S_ISLNK(st->st_mode) ? 'l'
                                   : 'o';
  if (e->type == 'l') {
    char t[PATH_MAX];
    ssize_t n = readlinkat(dfd, name, t, sizeof t - 1);
    e->detail = n >= 0 ? strndup(t, (size_t)n) : NULL;
    if (!e->detail) g->why = n < 0 ? "unreadable entry" : "out of memory";
  }
  if (!e->path) {
    free(e->detail);
    g->why = "out of memory";
    return;
  }
  g->g.n++;
}

/* Gathers under directory `dfd` (taken over; at `path`, `plen` bytes): every directory, link
 * and entry at a covered path — or, with `all`, every entry. */
static void gather_dir(struct gather *g, int dfd, char *path, size_t plen, int depth, bool all) {
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    g->why = g->why ? g->why : "unreadable entry";
    return;
  }
  struct dirent *de;
  while (!g->why && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (++g->seen > g->lim->max_entries) {
      g->why = "entries";
      break;
    }
    if (g->lim->time_ms > 0 && (g->seen & 1023) == 0 && since_ms(&g->t0) > g->lim->time_ms) {
      g->why = "time";
      break;
    }
    size_t nl = strlen(de->d_name), l2 = plen;
    if (plen + 1 + nl >= PATH_MAX) {
      g->why = "path length";
      break;
    }
    if (plen) path[l2++] = '/';
    memcpy(path + l2, de->d_name, nl + 1);
    l2 += nl;
    struct stat st;
    char rule[64];
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno != ENOENT) g->why = "unreadable entry";
    } else {
      bool dir = S_ISDIR(st.st_mode), lnk = S_ISLNK(st.st_mode);
      if (all || dir || lnk || jb_scan_landing_in_use(path, false, rule, sizeof rule))
        gather_add(g, dirfd(d), de->d_name, path, &st);
      if (dir && !g->why) {
        int sub =
            depth < JB_HOSTFS_TREE_DEPTH_MAX
                ? openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                : -1;
        if (sub < 0)
          g->why = depth < JB_HOSTFS_TREE_DEPTH_MAX ? "unreadable entry" : "depth";
        else
          gather_dir(g, sub, path, l2, depth + 1, all);
      }
    }
    path[plen] = '\0';
  }
  closedir(d);
}

static int entry_cmp(const void *a, const void *b) {
  return strcmp(((const struct jb_scan_entry *)a)->path, ((const struct jb_scan_entry *)b)->path);
}

/* Sorts g->g by path and drops repeated paths. */
static void gather_sort(struct gather *g) {
  if (g->g.n > 1) qsort(g->g.v, g->g.n, sizeof *g->g.v, entry_cmp);
  size_t k = 0;
  for (size_t i = 0; i < g->g.n; i++) {
    if (k && !strcmp(g->g.v[k - 1].path, g->g.v[i].path)) {
      free(g->g.v[i].path);
      free(g->g.v[i].detail);
      continue;
    }
    g->g.v[k++] = g->g.v[i];
  }
  g->g.n = k;
}

int jb_preimage_take_swept(const char *root, const struct jb_scan_snapshot *before,
                           const struct jb_sweep_limits *lim, struct jb_preimage **out,
                           jb_error *err) {
  if (!before->truncated) return jb_preimage_take(root, before, out, err);
  struct gather g = {.lim = lim};
  clock_gettime(CLOCK_MONOTONIC, &g.t0);
  int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (rootfd < 0) return jb_fail_errno(err, errno, "open workspace %s", root);
  char path[PATH_MAX] = "";
  int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0)
    g.why = "unreadable entry";
  else
    gather_dir(&g, fd, path, 0, 0, false);
  /* what the links lead to: every entry under their targets */
  gather_sort(&g);
  size_t na = 0;
  bool oom = false;
  struct alias *al = g.why ? NULL : aliases_of(&g.g, NULL, &na, &oom);
  if (oom) g.why = "out of memory";
  for (size_t i = 0; !g.why && i < na; i++) {
    const struct jb_scan_entry *t = find(&g.g, al[i].t);
    if (!t || t->type != 'd') continue; /* a file target: gathered when covered, else below */
    snprintf(path, sizeof path, "%s", al[i].t);
    int tfd = jb_hostfs_open_dir(rootfd, path);
    if (tfd >= 0) gather_dir(&g, tfd, path, strlen(path), 0, true);
  }
  for (size_t i = 0; !g.why && i < na; i++) { /* file targets */
    const char *name;
    int pfd = jb_hostfs_open_parent(rootfd, al[i].t, &name);
    struct stat st;
    if (pfd >= 0 && fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
      gather_add(&g, pfd, name, al[i].t, &st);
    if (pfd >= 0) close(pfd);
  }
  aliases_free(al, na);
  close(rootfd);
  gather_sort(&g);
  g.g.truncated = g.why != NULL;
  snprintf(g.g.why, sizeof g.g.why, "%s", g.why ? g.why : "");
  int rc = jb_preimage_take(root, &g.g, out, err);
  jb_scan_snapshot_free(&g.g);
  return rc;
}
