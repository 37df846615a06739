/* scan.c — the content scanner: the rules-file parser and the matcher of writes (see scan.h);
 * the redactor of command output (redact.c) matches the same compiled rules. */
#define _GNU_SOURCE
#define PCRE2_CODE_UNIT_WIDTH 8
#include "lib/scan.h"
#include "lib/scan_private.h"

#include <errno.h>
#include <fcntl.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const severities[] = {"low", "medium", "high", "critical", NULL};

void jb_scan_rules_free(struct jb_scan_rules *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) pcre2_code_free(r->rules[i].code);
  free(r->rules);
  pcre2_match_context_free(r->mctx);
  free(r);
}

size_t jb_scan_rules_count(const struct jb_scan_rules *r) { return r ? r->n : 0; }
const char *jb_scan_rule_id(const struct jb_scan_rules *r, size_t i) {
  return i < r->n ? r->rules[i].id : NULL;
}
enum jb_scan_check jb_scan_rule_check(const struct jb_scan_rules *r, size_t i) {
  return i < r->n ? r->rules[i].check : JB_SCAN_CONTENT;
}
const char *jb_scan_rule_severity(const struct jb_scan_rules *r, size_t i) {
  return i < r->n ? r->rules[i].severity : NULL;
}

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

/* The next blank-separated word of [*p, end): its start and length; *p moves past it. */
static size_t next_word(const char **p, const char *end, const char **word) {
  while (*p < end && is_blank(**p)) (*p)++;
  *word = *p;
  while (*p < end && !is_blank(**p)) (*p)++;
  return (size_t)(*p - *word);
}

/* One match of `code` against `len` bytes at `s`: 1 matched, 0 not, -1 stopped (limit or
 * error; `why` filled). */
static int match(const struct jb_scan_rules *r, const pcre2_code *code, const unsigned char *s,
                 size_t len, char *why, size_t whylen) {
  pcre2_match_data *md = pcre2_match_data_create(1, NULL);
  if (!md) {
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  int rc =
      pcre2_match(code, (PCRE2_SPTR)(s ? s : (const unsigned char *)""), len, 0, 0, md, r->mctx);
  pcre2_match_data_free(md);
  if (rc >= 0) return 1;
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
      rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    snprintf(why, whylen, "match limit");
  } else {
    PCRE2_UCHAR msg[120];
    if (pcre2_get_error_message(rc, msg, sizeof msg) < 0)
      snprintf((char *)msg, sizeof msg, "error %d", rc);
    snprintf(why, whylen, "%s", (const char *)msg);
  }
  return -1;
}

/* Parses one rule line (blanks around it removed, not empty, not a comment) into *out. */
static int parse_rule(const struct jb_scan_rules *set, const char *line, size_t len,
                      pcre2_compile_context *cctx, struct rule *out, char *msg, size_t msglen) {
  const char *p = line, *end = line + len, *w;
  memset(out, 0, sizeof *out);
  size_t n = next_word(&p, end, &w);
  if (n > JB_SCAN_ID_MAX) {
    snprintf(msg, msglen, "rule id longer than %d bytes", JB_SCAN_ID_MAX);
    return -1;
  }
  bool id_ok = n > 0 && w[0] >= 'a' && w[0] <= 'z';
  for (size_t i = 0; i < n && id_ok; i++)
    id_ok = (w[i] >= 'a' && w[i] <= 'z') || (w[i] >= '0' && w[i] <= '9') || w[i] == '_';
  if (!id_ok) {
    snprintf(msg, msglen, "rule id '%.*s' is not [a-z][a-z0-9_]*", (int)(n > 64 ? 64 : n), w);
    return -1;
  }
  memcpy(out->id, w, n);
  out->id[n] = '\0';
  for (size_t i = 0; i < set->n; i++)
    if (!strcmp(set->rules[i].id, out->id)) {
      snprintf(msg, msglen, "rule id '%s' used twice", out->id);
      return -1;
    }
  n = next_word(&p, end, &w);
  for (size_t i = 0; severities[i] && !out->severity; i++)
    if (strlen(severities[i]) == n && !memcmp(severities[i], w, n)) out->severity = severities[i];
  if (!out->severity) {
    if (n)
      snprintf(msg, msglen, "unknown severity '%.*s' (low, medium, high, critical)",
               (int)(n > 64 ? 64 : n), w);
    else
      snprintf(msg, msglen, "severity missing (low, medium, high, critical)");
    return -1;
  }
  n = next_word(&p, end, &w);
  if (n == 7 && !memcmp(w, "content", 7)) {
    out->check = JB_SCAN_CONTENT;
  } else if (n == 4 && !memcmp(w, "path", 4)) {
    out->check = JB_SCAN_PATH;
  } else if (n == 14 && !memcmp(w, "builtin:binary", 14)) {
    out->check = JB_SCAN_BINARY;
  } else if (n == 6 && !memcmp(w, "secret", 6)) {
    out->check = JB_SCAN_SECRET;
  } else if (n == 6 && !memcmp(w, "redact", 6)) {
    out->check = JB_SCAN_REDACT;
  } else {
    if (n)
      snprintf(msg, msglen, "unknown check '%.*s' (content, secret, redact, path, builtin:binary)",
               (int)(n > 64 ? 64 : n), w);
    else
      snprintf(msg, msglen, "check missing (content, secret, redact, path, builtin:binary)");
    return -1;
  }
  while (p < end && is_blank(*p)) p++;
  size_t alen = (size_t)(end - p);
  if (alen == 0) {
    snprintf(msg, msglen,
             out->check == JB_SCAN_BINARY ? "builtin:binary needs a threshold in bytes"
                                          : "the pattern is missing");
    return -1;
  }
  if (out->check == JB_SCAN_BINARY) {
    const char *a = p;
    n = next_word(&p, end, &w);
    if (p != end) {
      snprintf(msg, msglen, "text after the threshold: '%.*s'", (int)(end - p > 64 ? 64 : end - p),
               p);
      return -1;
    }
    char num[24];
    bool ok = n > 0 && n < sizeof num;
    for (size_t i = 0; ok && i < n; i++) ok = a[i] >= '0' && a[i] <= '9';
    unsigned long long v = 0;
    if (ok) {
      memcpy(num, a, n);
      num[n] = '\0';
      v = strtoull(num, NULL, 10);
      ok = v <= (1ULL << 30);
    }
    if (!ok) {
      snprintf(msg, msglen, "threshold '%.*s' is not a whole number of bytes in 0..1073741824",
               (int)(n > 64 ? 64 : n), a);
      return -1;
    }
    out->threshold = (size_t)v;
    return 0;
  }
  int ec;
  PCRE2_SIZE eo;
  out->code =
      pcre2_compile((PCRE2_SPTR)p, alen, PCRE2_NEVER_UTF | PCRE2_NEVER_BACKSLASH_C, &ec, &eo, cctx);
  if (!out->code) {
    PCRE2_UCHAR em[160];
    if (pcre2_get_error_message(ec, em, sizeof em) < 0)
      snprintf((char *)em, sizeof em, "error %d", ec);
    snprintf(msg, msglen, "bad pattern at offset %zu: %s", (size_t)eo, (const char *)em);
    return -1;
  }
  /* no JIT here: the interpreter runs; the redactor matches partially (lib/redact.c) */
  (void)pcre2_jit_compile(
      out->code, PCRE2_JIT_COMPLETE | (out->check == JB_SCAN_SECRET || out->check == JB_SCAN_REDACT
                                           ? PCRE2_JIT_PARTIAL_HARD
                                           : 0));
  char why[160];
  int m = match(set, out->code, (const unsigned char *)"", 0, why, sizeof why);
  if (m != 0) {
    snprintf(msg, msglen,
             m > 0 ? "the pattern matches the empty string: it would flag every write (or redact "
                     "every output)"
                   : "the pattern fails on the empty string: %s",
             why);
    pcre2_code_free(out->code);
    out->code = NULL;
    return -1;
  }
  return 0;
}

int jb_scan_rules_parse(const char *text, size_t len, const char *origin,
                        struct jb_scan_rules **out, jb_error *err) {
  *out = NULL;
  if (len > JB_SCAN_RULES_FILE_MAX)
    return jb_fail(err, EFBIG, "%s: over %d bytes", origin, JB_SCAN_RULES_FILE_MAX);
  struct jb_scan_rules *set = calloc(1, sizeof *set);
  pcre2_compile_context *cctx = pcre2_compile_context_create(NULL);
  if (!set || !cctx || !(set->mctx = pcre2_match_context_create(NULL))) {
    pcre2_compile_context_free(cctx);
    jb_scan_rules_free(set);
    return jb_fail(err, ENOMEM, "%s: out of memory", origin);
  }
  pcre2_set_max_pattern_length(cctx, JB_SCAN_LINE_MAX);
  pcre2_set_match_limit(set->mctx, JB_SCAN_MATCH_LIMIT);
  pcre2_set_depth_limit(set->mctx, JB_SCAN_DEPTH_LIMIT);
  pcre2_set_heap_limit(set->mctx, JB_SCAN_HEAP_LIMIT_KIB);
  size_t cap = 0, lineno = 0;
  const char *p = text, *end = text + len;
  int rc = 0;
  char msg[400];
  while (p < end) {
    lineno++;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *le = nl ? nl : end;
    size_t ll = (size_t)(le - p);
    if (ll > JB_SCAN_LINE_MAX) {
      rc = jb_fail(err, EINVAL, "%s:%zu: line longer than %d bytes", origin, lineno,
                   JB_SCAN_LINE_MAX);
      break;
    }
    if (memchr(p, '\0', ll)) {
      rc = jb_fail(err, EINVAL, "%s:%zu: NUL byte in the line", origin, lineno);
      break;
    }
    const char *a = p, *b = le;
    while (a < b && is_blank(*a)) a++;
    while (b > a && (is_blank(b[-1]) || b[-1] == '\r')) b--;
    p = nl ? nl + 1 : end;
    if (a == b || *a == '#') continue;
    if (set->n == cap) {
      size_t ncap = cap ? cap * 2 : 16;
      struct rule *nr = realloc(set->rules, ncap * sizeof *nr);
      if (!nr) {
        rc = jb_fail(err, ENOMEM, "%s:%zu: out of memory", origin, lineno);
        break;
      }
      set->rules = nr;
      cap = ncap;
    }
    if (parse_rule(set, a, (size_t)(b - a), cctx, &set->rules[set->n], msg, sizeof msg) < 0) {
      rc = jb_fail(err, EINVAL, "%s:%zu: %s", origin, lineno, msg);
      break;
    }
    set->n++;
  }
  pcre2_compile_context_free(cctx);
  if (rc == 0 && set->n == 0)
    rc = jb_fail(err, EINVAL, "%s: no rules (a scanner without rules would pass everything)",
                 origin);
  if (rc < 0) {
    jb_scan_rules_free(set);
    return -1;
  }
  *out = set;
  return 0;
}

int jb_scan_rules_load(const char *path, struct jb_scan_rules **out, jb_error *err) {
  if (!path || !path[0])
    return jb_scan_rules_parse((const char *)jb_scan_rules_default, jb_scan_rules_default_len,
                               "embedded deploy/scan-rules", out, err);
  *out = NULL;
  /* O_NONBLOCK: a FIFO without a writer would block the open; it is refused below */
  cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return jb_fail_errno(err, errno, "%s", path);
  struct stat st;
  if (fstat(fd, &st) < 0) return jb_fail_errno(err, errno, "%s", path);
  if (!S_ISREG(st.st_mode)) return jb_fail(err, EINVAL, "%s: not a regular file", path);
  if (st.st_size > JB_SCAN_RULES_FILE_MAX)
    return jb_fail(err, EFBIG, "%s: over %d bytes", path, JB_SCAN_RULES_FILE_MAX);
  cleanup_free char *buf = malloc((size_t)st.st_size + 1);
  if (!buf) return jb_fail(err, ENOMEM, "%s: out of memory", path);
  size_t got = 0;
  for (;;) { /* one byte past the size: a file that grew is caught below */
    ssize_t n = read(fd, buf + got, (size_t)st.st_size + 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return jb_fail_errno(err, errno, "%s", path);
    if (n == 0) break;
    got += (size_t)n;
    if (got > (size_t)st.st_size) return jb_fail(err, EAGAIN, "%s: changed while read", path);
  }
  return jb_scan_rules_parse(buf, got, path, out, err);
}

json_t *jb_scan_run(const struct jb_scan_rules *r, const char *path, const unsigned char *data,
                    size_t len) {
  json_t *found = json_array();
  if (!found) return NULL;
  bool has_nul = len > 0 && memchr(data, '\0', len) != NULL;
  /* the content with NUL bytes dropped, so that UTF-16 text of ASCII characters is read too */
  unsigned char *squeezed = NULL;
  size_t slen = 0;
  if (has_nul) {
    squeezed = malloc(len);
    if (!squeezed) {
      json_decref(found);
      return NULL;
    }
    for (size_t i = 0; i < len; i++)
      if (data[i]) squeezed[slen++] = data[i];
  }
  for (size_t i = 0; i < r->n; i++) {
    const struct rule *ru = &r->rules[i];
    char why[160] = "";
    int m = 0;
    switch (ru->check) {
      case JB_SCAN_BINARY:
        m = has_nul && len > ru->threshold;
        break;
      case JB_SCAN_PATH:
        m = match(r, ru->code, (const unsigned char *)path, strlen(path), why, sizeof why);
        break;
      case JB_SCAN_REDACT: /* output only (redact.c) */
        break;
      case JB_SCAN_CONTENT:
      case JB_SCAN_SECRET:
        m = match(r, ru->code, data, len, why, sizeof why);
        if (m == 0 && squeezed) m = match(r, ru->code, squeezed, slen, why, sizeof why);
        break;
    }
    if (m == 0) continue;
    json_t *f = json_pack("{s:s, s:s}", "rule", ru->id, "severity", ru->severity);
    if (f && m < 0) json_object_set_new(f, "error", json_string(why));
    if (!f || json_array_append_new(found, f) < 0) {
      free(squeezed);
      json_decref(found);
      return NULL;
    }
  }
  free(squeezed);
  return found;
}

static struct jb_scan_rules *in_use;
static struct jb_scan_rules *embedded;
static pthread_once_t embedded_once = PTHREAD_ONCE_INIT;

static void load_embedded(void) {
  jb_error err = {0};
  if (jb_scan_rules_load(NULL, &embedded, &err) < 0) embedded = NULL;
}

void jb_scan_use(struct jb_scan_rules *r) {
  jb_scan_rules_free(in_use);
  in_use = r;
}

const struct jb_scan_rules *jb_scan_rules_in_use(void) {
  if (in_use) return in_use;
  pthread_once(&embedded_once, load_embedded);
  return embedded;
}

json_t *jb_scan_content(const char *path, const unsigned char *data, size_t len) {
  const struct jb_scan_rules *r = jb_scan_rules_in_use();
  if (!r)
    return json_pack("[{s:s, s:s, s:s}]", "rule", "scanner_unavailable", "severity", "critical",
                     "error", "the embedded rules do not parse");
  return jb_scan_run(r, path, data, len);
}

json_t *jb_scan_rule_ids(const json_t *findings) {
  json_t *ids = json_array();
  size_t i;
  json_t *f;
  json_array_foreach (findings, i, f) {
    if (!ids || json_array_append(ids, json_object_get(f, "rule")) < 0) {
      json_decref(ids);
      return NULL;
    }
  }
  return ids;
}

/* One path rule against one spelling of the path: 1 matched (or failed: fail closed), 0 not. */
static int landing_one(const struct jb_scan_rules *r, const struct rule *ru, const char *s,
                       size_t len) {
  char why[160] = "";
  return match(r, ru->code, (const unsigned char *)s, len, why, sizeof why) != 0;
}

/* Characters a case-insensitive file system with Unicode case folding (APFS, ext4 casefold:
 * full case folding, Unicode CaseFolding.txt "F" and "C") takes for ASCII letters, and the
 * code points HFS+ ignores in names (Apple TN1150): each UTF-8 sequence and what it stands
 * for ("" dropped). */
static const struct {
  const char *utf8, *ascii;
} unicode_folds[] = {
    {"\xc5\xbf", "s"},       {"\xe2\x84\xaa", "k"},  {"\xef\xac\x80", "ff"}, /* ſ K ﬀ */
    {"\xef\xac\x81", "fi"},  {"\xef\xac\x82", "fl"}, {"\xef\xac\x83", "ffi"}, /* ﬁ ﬂ ﬃ */
    {"\xef\xac\x84", "ffl"}, {"\xef\xac\x85", "st"}, {"\xef\xac\x86", "st"}, /* ﬄ ﬅ ﬆ */
    {"\xe2\x80\x8b", ""},    {"\xe2\x80\x8c", ""},   {"\xe2\x80\x8d", ""}, /* ZWSP ZWNJ ZWJ */
    {"\xe2\x80\x8e", ""},    {"\xe2\x80\x8f", ""},   {"\xe2\x80\xaa", ""}, /* LRM RLM LRE */
    {"\xe2\x80\xab", ""},    {"\xe2\x80\xac", ""},   {"\xe2\x80\xad", ""}, /* RLE PDF LRO */
    {"\xe2\x80\xae", ""},    {"\xe2\x81\xaa", ""},   {"\xe2\x81\xab", ""}, /* RLO ISS ASS */
    {"\xe2\x81\xac", ""},    {"\xe2\x81\xad", ""},   {"\xe2\x81\xae", ""}, /* IAFS AAFS NADS */
    {"\xe2\x81\xaf", ""},    {"\xef\xbb\xbf", ""}, /* NODS BOM */
};

/* `path` with unicode_folds applied, as such a file system may take it. New string, or NULL
 * when none of them is in it (or out of memory: *oom). */
static char *unicode_folded(const char *path, bool *oom) {
  bool any = false;
  for (size_t i = 0; i < sizeof unicode_folds / sizeof unicode_folds[0] && !any; i++)
    any = strstr(path, unicode_folds[i].utf8) != NULL;
  if (!any) return NULL;
  char *f = malloc(strlen(path) + 1), *o = f; /* no fold makes a name longer */
  if (!f) {
    *oom = true;
    return NULL;
  }
  for (const char *p = path; *p;) {
    size_t k = 0;
    for (; k < sizeof unicode_folds / sizeof unicode_folds[0]; k++)
      if (!strncmp(p, unicode_folds[k].utf8, strlen(unicode_folds[k].utf8))) break;
    if (k == sizeof unicode_folds / sizeof unicode_folds[0]) {
      *o++ = *p++;
      continue;
    }
    size_t al = strlen(unicode_folds[k].ascii);
    memcpy(o, unicode_folds[k].ascii, al);
    o += al;
    p += strlen(unicode_folds[k].utf8);
  }
  *o = '\0';
  return f;
}

char *jb_scan_path_folded(const char *path, bool *oom) {
  *oom = false;
  return unicode_folded(path, oom);
}

int jb_scan_landing(const struct jb_scan_rules *r, const char *path, bool is_dir, char *rule,
                    size_t rsize) {
  if (!r) {
    snprintf(rule, rsize, "scanner_unavailable");
    return 1;
  }
  bool oom = false;
  char *folded = unicode_folded(path, &oom);
  if (oom) {
    snprintf(rule, rsize, "scanner_unavailable");
    return 1;
  }
  if (folded) { /* judged as the file system may take it, and as it is */
    int hit = jb_scan_landing(r, folded, is_dir, rule, rsize);
    free(folded);
    if (hit) return hit;
  }
  size_t len = strlen(path);
  char *slashed = NULL;
  if (is_dir && (len == 0 || path[len - 1] != '/')) {
    slashed = malloc(len + 2);
    if (!slashed) {
      snprintf(rule, rsize, "scanner_unavailable");
      return 1;
    }
    memcpy(slashed, path, len);
    slashed[len] = '/';
    slashed[len + 1] = '\0';
  }
  int hit = 0;
  for (size_t i = 0; i < r->n && !hit; i++) {
    const struct rule *ru = &r->rules[i];
    if (ru->check != JB_SCAN_PATH) continue;
    hit = landing_one(r, ru, path, len) || (slashed && landing_one(r, ru, slashed, len + 1));
    if (hit) snprintf(rule, rsize, "%s", ru->id);
  }
  free(slashed);
  return hit;
}

int jb_scan_landing_in_use(const char *path, bool is_dir, char *rule, size_t rsize) {
  return jb_scan_landing(jb_scan_rules_in_use(), path, is_dir, rule, rsize);
}

int jb_scan_secrets(const struct jb_scan_rules *r, const unsigned char *data, size_t len,
                    const char **ids, int max) {
  if (!r) return -1;
  unsigned char *squeezed = NULL;
  size_t slen = 0;
  if (len > 0 && memchr(data, '\0', len)) {
    if (!(squeezed = malloc(len))) return -1;
    for (size_t i = 0; i < len; i++)
      if (data[i]) squeezed[slen++] = data[i];
  }
  int n = 0, failed = 0;
  for (size_t i = 0; i < r->n && n < max; i++) {
    const struct rule *ru = &r->rules[i];
    if (ru->check != JB_SCAN_SECRET) continue;
    char why[160];
    int m = match(r, ru->code, data, len, why, sizeof why);
    if (m == 0 && squeezed) m = match(r, ru->code, squeezed, slen, why, sizeof why);
    if (m < 0) failed = 1;
    if (m != 0) ids[n++] = ru->id;
  }
  free(squeezed);
  return failed ? -1 : n;
}
