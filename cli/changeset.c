/* changeset.c — jailboxctl's changesets (what a supervised writable command changed, held
 * for the buyer as one op of tool "changeset"; api/events.md "Changesets"):
 *   changes JOB --op OP [--diff]   its files (GET …/ops/OP/changeset, every page), each with
 *                                  its change, path, whether it may be approved (or why not)
 *                                  and its sizes; --diff prints each file's diff text;
 *   approve JOB OP --files a,b | --file PATH … | --except c   approves those files (or every
 *                                  approvable one but those), fetching the changeset first
 *                                  and sending its changesetSha256 with the list. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/ctl.h"

static const char *str(const json_t *o, const char *k) {
  return jb_ctl_text(json_string_value(json_object_get(o, k)));
}

static long long num(const json_t *o, const char *k) {
  return (long long)json_integer_value(json_object_get(o, k));
}

static int usage(const struct jb_ctl *o, const char *what, const char *arg) {
  fprintf(stderr, "%s: %s '%s' (see %s --help)\n", o->verb, what, arg ? arg : "", o->verb);
  return JB_CTL_USAGE;
}

static int parse_op(const char *s, long long *op) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || v < 1) return -1;
  *op = v;
  return 0;
}

/* Every page of changeset `op` of `job` into *doc (new): the first page's fields with `files`
 * holding every file. JB_CTL_OK or the error code (printed). */
static int fetch(struct jb_ctl *o, const char *job, long long op, json_t **doc) {
  *doc = NULL;
  long long after = -1;
  for (int pages = 0; pages < 10000; pages++) {
    char suffix[96];
    snprintf(suffix, sizeof suffix, "/ops/%lld/changeset?after=%lld&limit=1000", op, after);
    char *path = jb_ctl_job_path(job, suffix);
    struct jb_ctl_reply r;
    int rc = path ? jb_ctl_http(o, "GET", path, NULL, &r) : JB_CTL_FAILED;
    free(path);
    json_t *page = rc == JB_CTL_OK ? jb_ctl_reply_json(o, &r) : NULL;
    jb_ctl_reply_free(&r);
    if (!page) {
      json_decref(*doc);
      *doc = NULL;
      return rc == JB_CTL_OK ? JB_CTL_FAILED : rc;
    }
    if (!*doc)
      *doc = json_incref(page);
    else
      json_array_extend(json_object_get(*doc, "files"), json_object_get(page, "files"));
    json_t *next = json_object_get(page, "next");
    after = json_is_integer(next) ? json_integer_value(next) : -2;
    json_decref(page);
    if (after < -1) return JB_CTL_OK;
  }
  return JB_CTL_OK;
}

/* One file: change, path, approvable or why not, sizes, decision and outcome when known. */
static void show_file(const json_t *f) {
  const char *dec = json_string_value(json_object_get(f, "decision"));
  const char *out = json_string_value(json_object_get(f, "outcome"));
  printf("  %-8s %-40s", str(f, "change"), str(f, "path"));
  if (json_is_true(json_object_get(f, "approvable")))
    printf(" approvable");
  else
    printf(" not approvable: %s", str(f, "why"));
  printf("  %lld -> %lld bytes", num(f, "oldSize"), num(f, "size"));
  if (json_is_true(json_object_get(f, "binary"))) printf(" (binary)");
  if (dec) printf("  %s", dec);
  if (out) printf(", %s%s%s", out, json_object_get(f, "detail") ? ": " : "", str(f, "detail"));
  putchar('\n');
}

static void show(const json_t *doc, bool diffs) {
  printf("changeset %lld of exec %lld: %s, %lld file%s (%lld approvable), sha256 %s\n",
         num(doc, "opId"), num(doc, "execOpId"), str(doc, "state"), num(doc, "total"),
         num(doc, "total") == 1 ? "" : "s", num(doc, "approvable"), str(doc, "changesetSha256"));
  size_t i;
  json_t *f;
  json_array_foreach (json_object_get(doc, "files"), i, f) {
    show_file(f);
    json_t *text = json_object_get(json_object_get(f, "diff"), "text");
    if (!diffs || !json_is_string(text)) continue;
    jb_ctl_write_diff_text(json_string_value(text), json_string_length(text));
    if (json_is_true(json_object_get(json_object_get(f, "diff"), "truncated")))
      printf("  (the diff is cut)\n");
  }
}

int jb_ctl_changeset_show(struct jb_ctl *o, int argc, char **argv) {
  const char *job = NULL, *ops = NULL;
  bool diffs = false;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--op") && i + 1 < argc)
      ops = argv[++i];
    else if (!strcmp(argv[i], "--diff"))
      diffs = true;
    else if (argv[i][0] != '-' && !job)
      job = argv[i];
    else
      return usage(o, "unexpected or incomplete argument", argv[i]);
  }
  long long op;
  if (!job || !ops) return usage(o, "takes JOB and --op OP", "");
  if (parse_op(ops, &op) < 0) return usage(o, "OP must be a positive integer, not", ops);
  json_t *doc;
  int rc = fetch(o, job, op, &doc);
  if (rc != JB_CTL_OK) return rc;
  if (o->json)
    rc = jb_ctl_print_json(doc);
  else
    show(doc, diffs);
  json_decref(doc);
  return rc == JB_CTL_OK && fflush(stdout) == 0 ? JB_CTL_OK : JB_CTL_FAILED;
}

/* Appends the comma-separated paths of `list` to `arr`. */
static void add_paths(json_t *arr, const char *list) {
  const char *p = list;
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (n) json_array_append_new(arr, json_stringn(p, n));
    p += n + (comma ? 1 : 0);
  }
}

/* The paths approved: `named` as given, or (except) every approvable file of `doc` but those
 * in `named` — each of which must be a file of it. NULL (printed) when one is not. */
static json_t *chosen(const struct jb_ctl *o, const json_t *doc, json_t *named, bool except) {
  if (!except) return json_incref(named);
  json_t *files = json_object_get(doc, "files"), *out = json_array(), *x, *f;
  size_t i, k;
  json_array_foreach (named, k, x) {
    bool found = false;
    json_array_foreach (files, i, f) found = found || json_equal(json_object_get(f, "path"), x);
    if (!found) {
      fprintf(stderr, "%s: --except %s: no such file in the changeset\n", o->verb,
              jb_ctl_text(json_string_value(x)));
      json_decref(out);
      return NULL;
    }
  }
  json_array_foreach (files, i, f) {
    bool skip = !json_is_true(json_object_get(f, "approvable"));
    json_array_foreach (named, k, x) skip = skip || json_equal(json_object_get(f, "path"), x);
    if (!skip) json_array_append(out, json_object_get(f, "path"));
  }
  return out;
}

static void show_decided(const json_t *op) {
  printf("op %lld: %s (%s)\n", num(op, "opId"), str(op, "state"), str(op, "decision"));
}

int jb_ctl_changeset_approve(struct jb_ctl *o, int argc, char **argv) {
  const char *pos[2] = {NULL, NULL}, *reason = NULL;
  int npos = 0, files_given = 0, except_given = 0;
  json_t *named = json_array();
  for (int i = 0; i < argc; i++) {
    if ((!strcmp(argv[i], "--files") || !strcmp(argv[i], "--except")) && i + 1 < argc) {
      *(argv[i][2] == 'f' ? &files_given : &except_given) += 1;
      add_paths(named, argv[++i]);
    } else if (!strcmp(argv[i], "--file") && i + 1 < argc) {
      files_given++;
      json_array_append_new(named, json_string(argv[++i]));
    } else if (!strcmp(argv[i], "--reason") && i + 1 < argc) {
      reason = argv[++i];
    } else if (argv[i][0] != '-' && npos < 2) {
      pos[npos++] = argv[i];
    } else {
      json_decref(named);
      return usage(o, "unexpected or incomplete argument", argv[i]);
    }
  }
  long long op;
  int rc = JB_CTL_USAGE;
  if (npos != 2)
    usage(o, "takes JOB and OP", "");
  else if (parse_op(pos[1], &op) < 0)
    usage(o, "OP must be a positive integer, not", pos[1]);
  else if (files_given && except_given)
    usage(o, "give --files (or --file) or --except, not both", "");
  else
    rc = JB_CTL_OK;
  json_t *doc = NULL, *files = NULL;
  if (rc == JB_CTL_OK) rc = fetch(o, pos[0], op, &doc);
  if (rc == JB_CTL_OK && !(files = chosen(o, doc, named, except_given > 0))) rc = JB_CTL_REFUSED;
  if (rc == JB_CTL_OK) {
    json_t *body =
        json_pack("{s:s,s:O}", "changesetSha256",
                  json_string_value(json_object_get(doc, "changesetSha256")) ?: "", "files", files);
    if (body && reason) json_object_set_new(body, "reason", json_string(reason));
    char suffix[64];
    snprintf(suffix, sizeof suffix, "/approve/%lld", op);
    char *path = jb_ctl_job_path(pos[0], suffix);
    struct jb_ctl_reply r;
    rc = path && body ? jb_ctl_http(o, "POST", path, body, &r) : JB_CTL_FAILED;
    free(path);
    json_decref(body);
    json_t *ans = rc == JB_CTL_OK ? jb_ctl_reply_json(o, &r) : NULL;
    jb_ctl_reply_free(&r);
    if (rc == JB_CTL_OK && !ans) rc = JB_CTL_FAILED;
    if (ans && o->json) rc = jb_ctl_print_json(ans);
    if (ans && !o->json) {
      show_decided(ans);
      printf("  %zu of %lld files approved, the rest rejected\n", json_array_size(files),
             num(doc, "total"));
    }
    json_decref(ans);
  }
  json_decref(files);
  json_decref(doc);
  json_decref(named);
  return rc == JB_CTL_OK && fflush(stdout) == 0 ? JB_CTL_OK : rc ? rc : JB_CTL_FAILED;
}
