/* searchops.c — the shim's ops that walk a tree and report paths: find (names by glob) and
 * search (contents by PCRE2 regular expression), sandbox/proto/PROTOCOL.md. The start is
 * resolved as a read resolves it (walk.h); below it the walk opens every directory from its
 * parent's descriptor without following a symlink, follows no symlink at all, leaves out what
 * list leaves out (excluded paths, not descended into; files with several links; fifos,
 * sockets, devices; symlinks that lead out) and does not descend into another file system.
 * Both answer within budgets (entries, matches, bytes, time) and say `truncated` when one ran
 * out. PCRE2 runs with match, depth and heap limits, JIT-compiled where the jail allows it. */
#define _GNU_SOURCE
#define PCRE2_CODE_UNIT_WIDTH 8
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/shim/walk.h"

#define PATTERN_MAX 1024 /* bytes of a glob or regular expression */
#define WALK_LEVELS 64 /* directories below the start one walk descends */
#define FIND_MATCHES 10000
#define FIND_ENTRIES 100000
#define FIND_SECONDS 5
#define SEARCH_DEFAULT 200
#define SEARCH_MAX 5000
#define SEARCH_SECONDS 10
#define SEARCH_FILE_MAX (16 * 1024 * 1024) /* bigger files are skipped */
#define SEARCH_BINARY_PROBE 8192 /* a NUL in these first bytes: a binary file, skipped */
#define SEARCH_TEXT_MAX 512 /* bytes of a matching line in the answer */
#define MATCH_LIMIT 10000000 /* PCRE2 match() calls (backtracking) per line */
#define DEPTH_LIMIT 10000 /* PCRE2 backtracking depth (interpreter only) */
#define HEAP_LIMIT_KIB (64 * 1024) /* PCRE2 heap for backtracking (interpreter only) */

/* ---- glob ------------------------------------------------------------------------------- */

/* A glob split into components ("**" any number of directories, none included); without '/'
 * it is matched against the last component only (a name, as find -name). */
struct glob {
  char *buf;
  const char **v;
  size_t n;
  bool names_only;
};

static int glob_init(struct glob *g, const char *pattern) {
  g->names_only = strchr(pattern, '/') == NULL;
  g->buf = strdup(pattern);
  g->v = malloc((strlen(pattern) / 2 + 2) * sizeof *g->v);
  g->n = 0;
  if (!g->buf || !g->v) return -1;
  for (char *c = g->buf, *save = NULL; (c = strtok_r(c, "/", &save)); c = NULL) g->v[g->n++] = c;
  return 0;
}

static void glob_free(struct glob *g) {
  free(g->buf);
  free(g->v);
}

/* Whether glob components g[0..ng) match the path components p[0..np) entirely. A component
 * other than "**" takes exactly one path component (fnmatch, case-sensitive, a leading dot not
 * special); on a mismatch the last "**" seen takes one more component and the match goes on
 * from there (exact, since no other component spans several): at most ng * np fnmatch calls. */
static bool comps_match(const char *const *g, size_t ng, const char *const *p, size_t np) {
  size_t gi = 0, pi = 0, star_g = (size_t)-1, star_p = 0;
  while (pi < np) {
    if (gi < ng && strcmp(g[gi], "**") == 0) {
      star_g = gi++;
      star_p = pi;
    } else if (gi < ng && fnmatch(g[gi], p[pi], 0) == 0) {
      gi++;
      pi++;
    } else if (star_g != (size_t)-1) {
      gi = star_g + 1;
      pi = ++star_p;
    } else {
      return false;
    }
  }
  while (gi < ng && strcmp(g[gi], "**") == 0) gi++;
  return gi == ng;
}

/* Whether `rel` (a path relative to the walk's start, "/"-separated, no empty component)
 * matches the glob. */
static bool glob_match(const struct glob *g, const char *rel) {
  if (g->names_only) {
    const char *slash = strrchr(rel, '/');
    return fnmatch(g->buf, slash ? slash + 1 : rel, 0) == 0;
  }
  char buf[JB_PATH_MAX + 1];
  const char *v[JB_PATH_MAX / 2 + 2];
  size_t n = 0;
  snprintf(buf, sizeof buf, "%s", rel);
  for (char *c = buf, *save = NULL; (c = strtok_r(c, "/", &save)); c = NULL) v[n++] = c;
  return comps_match(g->v, g->n, v, n);
}

/* ---- the walk both ops share ------------------------------------------------------------- */

/* Called per entry the walk shows: `canon` its workspace path, `rel` its path below the start,
 * `st` what fstatat said, `dir`/`name` where it is. Returns 0 to go on, 1 to stop (a budget
 * ran out), -1 to fail the op (*e set). */
struct walker;
typedef int (*visit_fn)(struct walker *wk, int dir, const char *name, const char *canon,
                        const char *rel, const struct stat *st);

struct walker {
  visit_fn visit;
  struct timespec deadline;
  size_t entries, max_entries;
  bool truncated;
  struct jb_fileop_error *e;
  void *ctx;
};

static bool past(const struct timespec *deadline) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > deadline->tv_sec ||
         (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

/* Whether the symlink `name` in `dir` (whose workspace path is `dircanon`) leads out of the
 * workspace, judged as list judges it. */
static bool symlink_out(int dir, const char *name, const char *dircanon) {
  char target[JB_PATH_MAX + 1];
  ssize_t tl = readlinkat(dir, name, target, sizeof target - 1);
  if (tl <= 0) return true;
  target[tl] = '\0';
  if (target[0] == '/') return true;
  char tp[2 * JB_PATH_MAX + 2];
  int n = snprintf(tp, sizeof tp, "%s%s%s", dircanon, dircanon[0] ? "/" : "", target);
  bool out = false;
  if (n < 0 || n > JB_PATH_MAX) return true;
  fo_resolves_inside(tp, &out);
  return out;
}

/* Walks directory `fd` (owned) whose workspace path is `canon` and path below the start `rel`
 * ("" at the start), in name order, depth first. 0, 1 (stopped by a budget) or -1. */
static int walk_tree(struct walker *wk, int fd, const char *canon, const char *rel, int depth) {
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return 0; /* unreadable: as if empty */
  }
  struct fo_names names;
  if (fo_read_names(d, &names) < 0) wk->truncated = true;
  int rc = 0;
  for (size_t k = 0; k < names.n && rc == 0; k++) {
    const char *name = names.v[k];
    if (++wk->entries > wk->max_entries || ((wk->entries & 255) == 0 && past(&wk->deadline))) {
      wk->truncated = true;
      rc = 1;
      break;
    }
    char ccanon[JB_PATH_MAX + 1], crel[JB_PATH_MAX + 1];
    int a = snprintf(ccanon, sizeof ccanon, "%s%s%s", canon, canon[0] ? "/" : "", name);
    int b = snprintf(crel, sizeof crel, "%s%s%s", rel, rel[0] ? "/" : "", name);
    if (a < 0 || a > JB_PATH_MAX || b < 0 || b > JB_PATH_MAX) continue;
    if (fo_canon_excluded(ccanon)) continue; /* invisible, and not descended into */
    struct stat st;
    if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    if (S_ISLNK(st.st_mode)) {
      if (symlink_out(dirfd(d), name, canon)) continue;
    } else if (S_ISREG(st.st_mode)) {
      if (st.st_nlink > 1) continue;
    } else if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != fo_root_dev) continue; /* a mount point */
    } else {
      continue; /* fifo, socket, device */
    }
    rc = wk->visit(wk, dirfd(d), name, ccanon, crel, &st);
    if (rc == 0 && S_ISDIR(st.st_mode)) {
      if (depth + 1 >= WALK_LEVELS) {
        wk->truncated = true; /* not descended: the answer does not cover what is below */
        continue;
      }
      int sub = fo_open_dir_readable(dirfd(d), name);
      if (sub >= 0) rc = walk_tree(wk, sub, ccanon, crel, depth + 1);
    }
  }
  fo_names_free(&names);
  closedir(d);
  return rc;
}

/* Resolves the start `path` as read does (symlinks that stay inside followed) and opens it
 * O_RDONLY: a directory, or (search) a file. The descriptor with *st and `canon`, or -1 *e. */
static int open_start(const char *path, struct stat *st, char canon[JB_PATH_MAX + 1],
                      struct jb_fileop_error *e) {
  struct walk w;
  char last[JB_PATH_NAME_MAX + 1];
  int fd = -1, en = 0;
  for (int probe = 0; probe < 2; probe++) {
    if (fo_resolve_allowed(path, true, probe, &w, last, canon, e) < 0) return -1;
    /* a directory is pinned first (gVisor follows a final symlink on O_DIRECTORY opens) */
    fd = fo_open_dir_readable(fo_walk_dir(&w), last);
    en = errno;
    if (fd < 0 && en == ENOTDIR)
      fd = openat(fo_walk_dir(&w), last, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) en = errno;
    fo_walk_close(&w);
    if (fd >= 0 || en != ELOOP) break;
  }
  if (fd < 0) return fo_fail_errno(e, en, path);
  if (fstat(fd, st) < 0) {
    en = errno;
    close(fd);
    return fo_fail_errno(e, en, path);
  }
  if (S_ISDIR(st->st_mode)) {
    if (st->st_dev != fo_root_dev) {
      close(fd);
      return fo_fail(e, "denied", EXDEV, "%s is a mount point", path);
    }
    return fd;
  }
  if (fo_check_regular(st, path, e) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* The string argument `key` of at most PATTERN_MAX bytes (NULL and no error when absent and
 * not `required`). */
static const char *arg_pattern(json_t *req, const char *key, bool required, bool *bad,
                               struct jb_fileop_error *e) {
  json_t *j = json_object_get(req, key);
  *bad = false;
  if (!j && !required) return NULL;
  if (!json_is_string(j) || json_string_length(j) == 0) {
    fo_fail(e, "bad_request", EINVAL, "'%s' must be a non-empty string", key);
    *bad = true;
    return NULL;
  }
  if (json_string_length(j) > PATTERN_MAX) {
    fo_fail(e, "too_large", EFBIG, "'%s' is over %d bytes", key, PATTERN_MAX);
    *bad = true;
    return NULL;
  }
  return json_string_value(j);
}

static struct timespec deadline_in(int seconds) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += seconds;
  return t;
}

/* ---- find ------------------------------------------------------------------------------- */

struct finder {
  struct glob g;
  json_t *matches;
  size_t bytes; /* of the matches as JSON */
};

static int find_visit(struct walker *wk, int dir, const char *name, const char *canon,
                      const char *rel, const struct stat *st) {
  struct finder *f = wk->ctx;
  if (!glob_match(&f->g, rel)) return 0;
  size_t cost = fo_json_escaped_len((const unsigned char *)canon, strlen(canon)) + 4;
  if (json_array_size(f->matches) >= FIND_MATCHES || f->bytes + cost > FO_ANSWER_MAX) {
    wk->truncated = true;
    return 1;
  }
  f->bytes += cost;
  json_array_append_new(f->matches, json_string(canon));
  return 0;
}

static int cmp_json_strings(const void *a, const void *b) {
  return strcmp(json_string_value(*(json_t *const *)a), json_string_value(*(json_t *const *)b));
}

json_t *fo_op_find(json_t *req, struct jb_fileop_error *e) {
  bool bad;
  const char *pattern = arg_pattern(req, "pattern", true, &bad, e);
  if (!pattern) return NULL;
  const char *path = fo_arg_path(req, ".", e);
  if (!path) return NULL;
  struct stat st;
  char canon[JB_PATH_MAX + 1];
  int fd = open_start(path, &st, canon, e);
  if (fd < 0) return NULL;
  if (!S_ISDIR(st.st_mode)) {
    close(fd);
    fo_fail(e, "bad_request", ENOTDIR, "%s is not a directory", path);
    return NULL;
  }
  struct finder f = {.matches = json_array()};
  if (glob_init(&f.g, pattern) < 0 || !f.matches) {
    glob_free(&f.g);
    json_decref(f.matches);
    close(fd);
    fo_fail(e, "internal", ENOMEM, "out of memory");
    return NULL;
  }
  struct walker wk = {.visit = find_visit,
                      .deadline = deadline_in(FIND_SECONDS),
                      .max_entries = FIND_ENTRIES,
                      .e = e,
                      .ctx = &f};
  walk_tree(&wk, fd, canon, "", 0);
  glob_free(&f.g);
  /* depth first with each directory's names in order; answered in bytewise order */
  size_t n = json_array_size(f.matches);
  json_t **v = n ? malloc(n * sizeof *v) : NULL;
  if (v) {
    for (size_t i = 0; i < n; i++) v[i] = json_incref(json_array_get(f.matches, i));
    qsort(v, n, sizeof *v, cmp_json_strings);
    json_array_clear(f.matches);
    for (size_t i = 0; i < n; i++) json_array_append_new(f.matches, v[i]);
    free(v);
  }
  return json_pack("{s:o, s:b, s:I}", "matches", f.matches, "truncated", wk.truncated, "scanned",
                   (json_int_t)wk.entries);
}

/* ---- search ----------------------------------------------------------------------------- */

struct searcher {
  pcre2_code *code;
  pcre2_match_data *md;
  pcre2_match_context *mctx;
  bool jit;
  struct glob g;
  bool has_glob;
  size_t max_matches;
  json_t *matches;
  size_t answer_bytes;
  long long files_scanned, files_skipped;
  unsigned char *buf;
  size_t cap;
};

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t len;
  unsigned int min;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (n < len) return 0;
  unsigned int cp = c & (0x7f >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

/* The line `s[0..n)` as a JSON string of at most SEARCH_TEXT_MAX bytes: cut at a character
 * boundary, a final "\r" dropped, NUL and bytes that are not UTF-8 shown as U+FFFD. */
static json_t *line_text(const unsigned char *s, size_t n) {
  if (n > 0 && s[n - 1] == '\r') n--;
  char out[SEARCH_TEXT_MAX + 4];
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t l = s[i] ? utf8_seq(s + i, n - i) : 0;
    const unsigned char *src = s + i;
    size_t take = l;
    if (l == 0) {
      src = (const unsigned char *)"\xef\xbf\xbd";
      take = 3;
      l = 1;
    }
    if (o + take > SEARCH_TEXT_MAX) break;
    memcpy(out + o, src, take);
    o += take;
    i += l;
  }
  return json_stringn(out, o);
}

/* Reads the open regular file `fd` of `size` bytes into s->buf. 0, or -1 (unreadable). */
static int slurp(struct searcher *s, int fd, size_t size, size_t *got) {
  if (size + 1 > s->cap) {
    size_t nc = s->cap ? s->cap : 65536;
    while (nc < size + 1) nc *= 2;
    unsigned char *nb = realloc(s->buf, nc);
    if (!nb) return -1;
    s->buf = nb;
    s->cap = nc;
  }
  size_t n = 0;
  while (n < size) {
    ssize_t r = read(fd, s->buf + n, size - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    n += (size_t)r;
  }
  *got = n;
  return 0;
}

/* Searches one file's bytes line by line. 0, 1 (a budget ran out) or -1 (regex_limit). */
static int search_buffer(struct walker *wk, struct searcher *s, const char *canon, size_t n) {
  const unsigned char *p = s->buf, *end = s->buf + n;
  long long lineno = 0;
  while (p < end) {
    const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
    const unsigned char *le = nl ? nl : end;
    lineno++;
    /* every line: one line may cost up to MATCH_LIMIT backtracking steps (tens of ms) */
    if (past(&wk->deadline)) {
      wk->truncated = true;
      return 1;
    }
    int rc = s->jit ? pcre2_jit_match(s->code, p, (size_t)(le - p), 0, 0, s->md, s->mctx)
                    : pcre2_match(s->code, p, (size_t)(le - p), 0, 0, s->md, s->mctx);
    if (rc >= 0) {
      if (json_array_size(s->matches) >= s->max_matches) {
        wk->truncated = true;
        return 1;
      }
      json_t *text = line_text(p, (size_t)(le - p));
      size_t cost = fo_json_escaped_len((const unsigned char *)canon, strlen(canon)) + 48 +
                    (text ? fo_json_escaped_len((const unsigned char *)json_string_value(text),
                                                json_string_length(text))
                          : 0);
      if (!text || s->answer_bytes + cost > FO_ANSWER_MAX) {
        json_decref(text);
        wk->truncated = true;
        return 1;
      }
      s->answer_bytes += cost;
      json_array_append_new(s->matches, json_pack("{s:s, s:I, s:o}", "path", canon, "line",
                                                  (json_int_t)lineno, "text", text));
    } else if (rc != PCRE2_ERROR_NOMATCH) {
      if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
          rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        fo_fail(wk->e, "regex_limit", E2BIG,
                "the pattern hit PCRE2's match limit on %s line %lld: make it less ambiguous "
                "(nested or adjacent quantifiers backtrack exponentially)",
                canon, lineno);
      } else {
        PCRE2_UCHAR msg[120];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fo_fail(wk->e, "internal", EINVAL, "PCRE2 on %s line %lld: %s", canon, lineno,
                (const char *)msg);
      }
      return -1;
    }
    if (!nl) break;
    p = nl + 1;
  }
  return 0;
}

/* Searches the regular file `name` in `dir` (or, with name NULL, the open `fd`). */
static int search_file(struct walker *wk, struct searcher *s, int dir, const char *name, int fd,
                       const char *canon, const struct stat *st) {
  if (st->st_size > SEARCH_FILE_MAX) {
    s->files_skipped++;
    return 0;
  }
  bool own = fd < 0;
  if (own) fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat ft;
  size_t got = 0;
  if (fd < 0 || fstat(fd, &ft) < 0 || !S_ISREG(ft.st_mode) || ft.st_nlink != 1 ||
      ft.st_ino != st->st_ino || ft.st_size > SEARCH_FILE_MAX ||
      slurp(s, fd, (size_t)ft.st_size, &got) < 0) {
    if (own && fd >= 0) close(fd);
    s->files_skipped++;
    return 0;
  }
  if (own) close(fd);
  if (memchr(s->buf, '\0', got < SEARCH_BINARY_PROBE ? got : SEARCH_BINARY_PROBE)) {
    s->files_skipped++;
    return 0;
  }
  s->files_scanned++;
  return search_buffer(wk, s, canon, got);
}

static int search_visit(struct walker *wk, int dir, const char *name, const char *canon,
                        const char *rel, const struct stat *st) {
  struct searcher *s = wk->ctx;
  if (!S_ISREG(st->st_mode)) return 0;
  if (s->has_glob && !glob_match(&s->g, rel)) return 0;
  if (past(&wk->deadline)) {
    wk->truncated = true;
    return 1;
  }
  return search_file(wk, s, dir, name, -1, canon, st);
}

static void searcher_free(struct searcher *s) {
  pcre2_match_data_free(s->md);
  pcre2_match_context_free(s->mctx);
  pcre2_code_free(s->code);
  if (s->has_glob) glob_free(&s->g);
  free(s->buf);
}

static pcre2_jit_stack *jit_stack; /* kept for the shim's life: made once */

json_t *fo_op_search(json_t *req, struct jb_fileop_error *e) {
  bool bad;
  const char *pattern = arg_pattern(req, "pattern", true, &bad, e);
  if (!pattern) return NULL;
  const char *globs = arg_pattern(req, "glob", false, &bad, e);
  if (bad) return NULL;
  const char *path = fo_arg_path(req, ".", e);
  if (!path) return NULL;
  json_t *jm = json_object_get(req, "maxMatches");
  if (jm &&
      (!json_is_integer(jm) || json_integer_value(jm) < 1 || json_integer_value(jm) > SEARCH_MAX)) {
    fo_fail(e, "bad_request", EINVAL, "'maxMatches' must be an integer from 1 to %d", SEARCH_MAX);
    return NULL;
  }
  struct searcher s = {.max_matches = jm ? (size_t)json_integer_value(jm) : SEARCH_DEFAULT};
  int errcode;
  PCRE2_SIZE erroff;
  /* UTF-8 patterns; subjects may hold invalid UTF-8 (it never matches, the rest does) */
  s.code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &errcode, &erroff, NULL);
  if (!s.code) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(errcode, msg, sizeof msg);
    fo_fail(e, "bad_request", EINVAL,
            "the pattern is not a valid PCRE2 expression: %s (at offset %zu)", (const char *)msg,
            (size_t)erroff);
    return NULL;
  }
  s.jit = pcre2_jit_compile(s.code, PCRE2_JIT_COMPLETE) == 0;
  s.mctx = pcre2_match_context_create(NULL);
  s.md = pcre2_match_data_create_from_pattern(s.code, NULL);
  if (s.jit && !jit_stack) jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
  s.matches = json_array();
  if (!s.mctx || !s.md || !s.matches || (s.jit && !jit_stack) ||
      (globs && glob_init(&s.g, globs) < 0)) {
    s.has_glob = globs != NULL;
    searcher_free(&s);
    json_decref(s.matches);
    fo_fail(e, "internal", ENOMEM, "out of memory");
    return NULL;
  }
  s.has_glob = globs != NULL;
  pcre2_set_match_limit(s.mctx, MATCH_LIMIT);
  pcre2_set_depth_limit(s.mctx, DEPTH_LIMIT);
  pcre2_set_heap_limit(s.mctx, HEAP_LIMIT_KIB);
  if (s.jit) pcre2_jit_stack_assign(s.mctx, NULL, jit_stack);
  struct stat st;
  char canon[JB_PATH_MAX + 1];
  int fd = open_start(path, &st, canon, e);
  if (fd < 0) {
    searcher_free(&s);
    json_decref(s.matches);
    return NULL;
  }
  struct walker wk = {.visit = search_visit,
                      .deadline = deadline_in(SEARCH_SECONDS),
                      .max_entries = FIND_ENTRIES,
                      .e = e,
                      .ctx = &s};
  int rc;
  if (S_ISDIR(st.st_mode)) {
    rc = walk_tree(&wk, fd, canon, "", 0);
  } else {
    rc = search_file(&wk, &s, -1, NULL, fd, canon, &st);
    close(fd);
  }
  bool jit = s.jit;
  searcher_free(&s);
  if (rc < 0) {
    json_decref(s.matches);
    return NULL;
  }
  return json_pack("{s:o, s:b, s:I, s:I, s:b}", "matches", s.matches, "truncated", wk.truncated,
                   "filesScanned", (json_int_t)s.files_scanned, "filesSkipped",
                   (json_int_t)s.files_skipped, "jit", jit);
}
