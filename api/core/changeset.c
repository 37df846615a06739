/* changeset.c — the buyer's decision on a changeset and its view (see changeset.h): the one
 * check of an approval's subset, shared by every door through jb_control_run, the decision
 * stored per row (db/changeset_decide.h), and a page of the files. */
#define _GNU_SOURCE
#include "api/core/changeset.h"

#include <ctype.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/signer.h"
#include "lib/err.h"
#include "lib/json.h"
#include "server/app.h"

/* ---- the subset ---- */

/* A row by its path, for the binary searches. */
struct by_path {
  const char *path;
  size_t i; /* the row's index in rows */
};

static int cmp_path(const void *a, const void *b) {
  return strcmp(((const struct by_path *)a)->path, ((const struct by_path *)b)->path);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first of `s` (`n`, sorted) whose path is not below `key` in byte order. */
static size_t lower_bound(const struct by_path *s, size_t n, const char *key) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(s[mid].path, key) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The row of `path`, or -1. */
static long find(const struct by_path *s, size_t n, const char *path) {
  size_t k = lower_bound(s, n, path);
  return k < n && strcmp(s[k].path, path) == 0 ? (long)s[k].i : -1;
}

/* The paths a refusal names: the first JB_CHANGESET_LISTED_MAX, and how many in all. */
struct listed {
  json_t *paths;
  size_t count;
};

static void list_add(struct listed *l, const char *path) {
  if (l->count++ < JB_CHANGESET_LISTED_MAX) json_array_append_new(l->paths, json_string(path));
}

/* The refusal `status` `code` naming l's paths: "<what>: a, b, …". Returns -1. */
static int refuse(struct jb_reply *out, int status, const char *code, const char *what,
                  struct listed *l) {
  char names[300] = "";
  size_t used = 0, i;
  json_t *p;
  json_array_foreach (l->paths, i, p) {
    int k =
        snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", json_string_value(p));
    if (k < 0 || (size_t)k >= sizeof names - used) break;
    used += (size_t)k;
  }
  jb_reply_fail(out, status, code, "%s (%zu): %s%s", what, l->count, names,
                l->count > json_array_size(l->paths) || used >= sizeof names - 1 ? ", …" : "");
  out->extra = json_pack("{s:O}", "paths", l->paths);
  if (out->extra && l->count > JB_CHANGESET_LISTED_MAX)
    json_object_set_new(out->extra, "pathsTruncated", json_true());
  return -1;
}

/* Whether the type names a folder. */
static bool is_dir(const char *type) { return strcmp(type, "dir") == 0; }

/* The closure rules over approved[]: 0, or the incomplete_subset refusal. */
static int check_closure(const struct jb_cs_row *rows, size_t n, const struct by_path *s,
                         const bool *approved, struct jb_reply *out) {
  struct listed bad = {json_array(), 0};
  if (!bad.paths) return jb_reply_fail(out, 500, "internal", "out of memory");
  for (size_t i = 0; i < n; i++) {
    if (!approved[i]) continue;
    const struct jb_cs_row *r = &rows[i];
    bool incomplete = false;
    const char *slash = strrchr(r->path, '/');
    if (slash) { /* a folder the changeset makes must land with what lands in it */
      char *parent = strndup(r->path, (size_t)(slash - r->path));
      long p = parent ? find(s, n, parent) : -1;
      free(parent);
      incomplete = p >= 0 && is_dir(rows[p].new_type) && !is_dir(rows[p].old_type) && !approved[p];
    }
    if (!incomplete && is_dir(r->old_type) && !is_dir(r->new_type)) {
      /* a folder removed: only with everything under it */
      char *prefix = NULL;
      if (asprintf(&prefix, "%s/", r->path) < 0) prefix = NULL;
      size_t plen = prefix ? strlen(prefix) : 0;
      for (size_t k = prefix ? lower_bound(s, n, prefix) : n;
           k < n && strncmp(s[k].path, prefix, plen) == 0 && !incomplete; k++)
        incomplete = !approved[s[k].i];
      free(prefix);
    }
    /* a batch's member lands whole or not at all (a move's source and destination) */
    for (size_t k = 0; r->member && !incomplete && k < n; k++)
      incomplete = rows[k].member == r->member && !approved[k];
    if (incomplete) list_add(&bad, r->path);
  }
  int rc = bad.count ? refuse(out, 422, "incomplete_subset",
                              "approved paths that cannot land without rows left out (a folder "
                              "they are made in, a path under a folder they remove, or the other "
                              "end of a move)",
                              &bad)
                     : 0;
  json_decref(bad.paths);
  return rc;
}

/* The rows `files` names into approved[]: 0, or a refusal (duplicate, not_in_changeset,
 * not_approvable). */
static int named_rows(const struct jb_cs_row *rows, size_t n, const struct by_path *s,
                      const json_t *files, bool *approved, struct jb_reply *out) {
  size_t m = json_array_size(files);
  const char **names = calloc(m, sizeof *names);
  struct listed dup = {json_array(), 0}, missing = {json_array(), 0}, closed = {json_array(), 0};
  int rc = 0;
  if (!names || !dup.paths || !missing.paths || !closed.paths) {
    rc = jb_reply_fail(out, 500, "internal", "out of memory");
    goto out;
  }
  for (size_t k = 0; k < m; k++) names[k] = json_string_value(json_array_get(files, k));
  qsort(names, m, sizeof *names, cmp_str);
  for (size_t k = 1; k < m; k++)
    if (strcmp(names[k], names[k - 1]) == 0 && (k < 2 || strcmp(names[k], names[k - 2])))
      list_add(&dup, names[k]);
  if (dup.count) {
    rc = refuse(out, 422, "duplicate", "paths named more than once", &dup);
    goto out;
  }
  for (size_t k = 0; k < m; k++) {
    long i = find(s, n, names[k]);
    if (i < 0)
      list_add(&missing, names[k]);
    else if (!rows[i].approvable)
      list_add(&closed, names[k]);
    else
      approved[i] = true;
  }
  if (missing.count)
    rc = refuse(out, 422, "not_in_changeset", "paths that are not in the changeset", &missing);
  else if (closed.count)
    rc = refuse(out, 409, "not_approvable",
                "paths the changeset holds but that cannot be approved (see their 'why')", &closed);
out:
  free(names);
  json_decref(dup.paths);
  json_decref(missing.paths);
  json_decref(closed.paths);
  return rc;
}

int jb_changeset_check_subset(const struct jb_cs_row *rows, size_t n, const json_t *files,
                              const char *digest, const char *stored, bool *approved,
                              struct jb_reply *out) {
  *out = (struct jb_reply){0};
  for (size_t i = 0; i < n; i++) approved[i] = false;
  if (digest && strcmp(digest, stored ? stored : ""))
    return jb_reply_fail(out, 409, "changed",
                         "the changeset is %.64s, not %.64s: look at it again (GET "
                         "…/ops/:opId/changeset) before deciding",
                         stored ? stored : "", digest);
  if (files && json_array_size(files) == 0)
    return jb_reply_fail(out, 422, "empty_subset",
                         "'files' is empty: to approve nothing, reject the changeset");
  struct by_path *s = calloc(n ? n : 1, sizeof *s);
  if (!s) return jb_reply_fail(out, 500, "internal", "out of memory");
  for (size_t i = 0; i < n; i++) s[i] = (struct by_path){rows[i].path, i};
  qsort(s, n, sizeof *s, cmp_path);
  int rc = 0;
  if (files) {
    rc = named_rows(rows, n, s, files, approved, out);
  } else {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += approved[i] = rows[i].approvable;
    if (k == 0)
      rc = jb_reply_fail(out, 422, "empty_subset",
                         "no path of the changeset can be approved: reject it");
  }
  if (rc == 0) rc = check_closure(rows, n, s, approved, out);
  free(s);
  if (rc < 0)
    for (size_t i = 0; i < n; i++) approved[i] = false;
  return rc;
}

void jb_changeset_approved_sha(const struct jb_cs_row *rows, size_t n, const bool *approved,
                               char hex[65]) {
  crypto_hash_sha256_state st;
  unsigned char h[32];
  crypto_hash_sha256_init(&st);
  for (size_t i = 0; i < n; i++) {
    if (!approved[i]) continue;
    crypto_hash_sha256_update(&st, (const unsigned char *)rows[i].path, strlen(rows[i].path));
    crypto_hash_sha256_update(&st, (const unsigned char *)"\n", 1);
  }
  crypto_hash_sha256_final(&st, h);
  sodium_bin2hex(hex, 65, h, sizeof h);
}

/* ---- the decision ---- */

/* The facts of a changeset read: 0, or -1 with the refusal in `out`; *not_one when it is
 * another op that takes today's path. */
static int decision_facts(PGconn *c, const char *job, long long op_id, bool named,
                          const char *allow_similar, struct jb_cs_facts *f, bool *not_one,
                          struct jb_reply *out) {
  jb_error err = {0};
  char nf[200];
  *not_one = false;
  snprintf(nf, sizeof nf, "no op %lld in session '%s'", op_id, job);
  int rc = jb_db_changeset_facts(c, job, op_id, f, &err);
  if ((rc == JB_ERR_NOT_FOUND && !named) ||
      (rc == JB_OK && strcmp(f->tool, "changeset") && !named)) {
    *not_one = true;
    return 0;
  }
  if (rc != JB_OK) return jb_reply_db(out, rc, &err, nf, "", NULL);
  if (strcmp(f->tool, "changeset"))
    return jb_reply_fail(out, 400, "bad_request",
                         "fields 'files' and 'changesetSha256' are for an op of tool changeset;"
                         " op %lld is a %s",
                         op_id, f->tool);
  if (allow_similar)
    return jb_reply_fail(out, 400, "bad_request",
                         "'allowSimilar' makes a rule of a command or a file op; a changeset is"
                         " decided file by file ('files')");
  return 0;
}

enum jb_changeset_decided jb_changeset_decide(struct jb_app *app, PGconn *c, const char *job,
                                              long long op_id, bool approve, const char *reason,
                                              const json_t *files, const char *digest,
                                              const char *allow_similar, const char *by,
                                              char **json_out, char state[20],
                                              struct jb_audit_head *head, struct jb_reply *out) {
  *json_out = NULL;
  struct jb_cs_facts f;
  bool not_one;
  if (decision_facts(c, job, op_id, files || digest, allow_similar, &f, &not_one, out) < 0) {
    jb_cs_facts_clear(&f);
    return JB_CHANGESET_REFUSED;
  }
  if (not_one) {
    jb_cs_facts_clear(&f);
    return JB_CHANGESET_NOT_ONE;
  }
  enum jb_changeset_decided res = JB_CHANGESET_REFUSED;
  bool *approved = calloc(f.n ? f.n : 1, sizeof *approved);
  jb_error err = {0};
  char sha[65], nf[200];
  snprintf(nf, sizeof nf, "no op %lld in session '%s'", op_id, job);
  if (!approved) {
    jb_reply_fail(out, 500, "internal", "out of memory");
  } else if (strcmp(f.state, "pending")) {
    snprintf(state, 20, "%s", f.state);
    res = JB_CHANGESET_LOST;
  } else if (!approve ||
             jb_changeset_check_subset(f.rows, f.n, files, digest, f.sha256, approved, out) == 0) {
    jb_changeset_approved_sha(f.rows, f.n, approved, sha);
    int rc =
        jb_db_changeset_decide(c, jb_signer_key(app->signer), job, op_id, approve, f.rows, approved,
                               f.n, f.sha256, sha, reason, by, json_out, state, head, &err);
    if (rc == JB_OK)
      res = JB_CHANGESET_DONE;
    else if (rc == JB_ERR_CONFLICT)
      res = JB_CHANGESET_LOST;
    else
      jb_reply_db(out, rc, &err, nf, "", NULL);
  }
  free(approved);
  jb_cs_facts_clear(&f);
  return res;
}

/* ---- the view ---- */

/* q's field `name` as an integer from `min` to `max` into *v (absent: left). 0, or -1 with
 * the 400 in `out`. */
static int view_int(const json_t *q, const char *name, long long min, long long max, long long *v,
                    struct jb_reply *out) {
  const json_t *x = json_object_get(q, name);
  if (!x) return 0;
  long long val = 0;
  bool ok = json_is_integer(x);
  if (ok) {
    val = json_integer_value(x);
  } else if (json_is_string(x)) {
    const char *t = json_string_value(x);
    char *end;
    errno = 0;
    ok = isdigit((unsigned char)t[0]) || (t[0] == '-' && isdigit((unsigned char)t[1]));
    if (ok) val = strtoll(t, &end, 10);
    ok = ok && !errno && !*end;
  }
  if (!ok || val < min || val > max)
    return jb_reply_fail(out, 400, "bad_request", "'%s' must be an integer from %lld to %lld", name,
                         min, max);
  *v = val;
  return 0;
}

void jb_changeset_view(PGconn *c, const char *job, const json_t *q, struct jb_reply *out) {
  *out = (struct jb_reply){0};
  static const char *const allowed[] = {"opId", "after", "limit", NULL};
  jb_error err = {0};
  long long op = 0, after = -1, limit = JB_CHANGESET_PAGE_DEFAULT;
  if (!json_is_object(q)) {
    jb_reply_fail(out, 400, "bad_request", "the argument must be an object {opId, after?, limit?}");
    return;
  }
  if (jb_json_only_keys(q, allowed, &err) < 0) {
    jb_reply_fail(out, 400, "bad_request", "%s", err.msg);
    return;
  }
  if (!json_object_get(q, "opId")) {
    jb_reply_fail(out, 400, "bad_request", "field 'opId' is required");
    return;
  }
  if (view_int(q, "opId", 1, (1LL << 62), &op, out) < 0 ||
      view_int(q, "after", -1, (1LL << 31) - 1, &after, out) < 0 ||
      view_int(q, "limit", 1, JB_CHANGESET_PAGE_MAX, &limit, out) < 0)
    return;
  char *json = NULL;
  int rc = jb_db_changeset_page(c, job, op, after, (int)limit, &json, &err);
  if (rc == JB_OK) {
    json_t *o = json_loads(json, 0, NULL);
    jb_reply_ok(out, 200, o);
  } else {
    char nf[200];
    snprintf(nf, sizeof nf, "no changeset op %lld in session '%s'", op, job);
    jb_reply_db(out, rc, &err, nf, "", NULL);
  }
  free(json);
}
