/* rollback.c — jailboxctl rollback JOB [--to OP] [--force] [--dry-run] [--reason R]: POST
 * /v1/jailbox/JOB/rollback (api/openapi.yaml); a dry run prints what would be undone, else the
 * rollback's id (follow it with GET …/rollbacks/ID, or `watch` for jailbox:rollback). */
#define _GNU_SOURCE
#include <errno.h>
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

static void show_plan(const json_t *p) {
  json_t *undo = json_object_get(p, "wouldUndo"), *x;
  size_t i;
  printf("would undo %zu op%s (newest first), %lld path%s:\n", json_array_size(undo),
         json_array_size(undo) == 1 ? "" : "s", num(p, "count"), num(p, "count") == 1 ? "" : "s");
  json_array_foreach (undo, i, x)
    printf("  op %-6lld %-6s %s\n", num(x, "opId"), str(x, "tool"), str(x, "path"));
  json_array_foreach (json_object_get(p, "files"), i, x) {
    const char *sha = json_string_value(json_object_get(x, "sha256"));
    printf("  %-40s back to %s%s%.12s  (op %lld)\n", str(x, "path"), str(x, "kind"), sha ? " " : "",
           sha ? sha : "", num(x, "opId"));
  }
  if (json_is_true(json_object_get(p, "truncated"))) printf("  … (the list is cut)\n");
}

/* Takes the verb's options out of argv: 0, or the usage exit code (printed). */
static int parse(struct jb_ctl *o, int argc, char **argv, const char **job, json_t *body) {
  *job = NULL;
  for (int i = 0; i < argc; i++) {
    char *end;
    if (!strcmp(argv[i], "--to") && i + 1 < argc) {
      errno = 0;
      long long to = strtoll(argv[++i], &end, 10);
      if (errno || end == argv[i] || *end || to < 1) {
        fprintf(stderr, "%s: --to takes an op id (a positive integer), not '%s'\n", o->verb,
                argv[i]);
        return JB_CTL_USAGE;
      }
      json_object_set_new(body, "to", json_integer(to));
    } else if (!strcmp(argv[i], "--reason") && i + 1 < argc) {
      json_object_set_new(body, "reason", json_string(argv[++i]));
    } else if (!strcmp(argv[i], "--force")) {
      json_object_set_new(body, "force", json_true());
    } else if (!strcmp(argv[i], "--dry-run")) {
      json_object_set_new(body, "dryRun", json_true());
    } else if (argv[i][0] != '-' && !*job) {
      *job = argv[i];
    } else {
      fprintf(stderr, "%s: unexpected or incomplete argument '%s' (see %s --help)\n", o->verb,
              argv[i], o->verb);
      return JB_CTL_USAGE;
    }
  }
  if (!*job) {
    fprintf(stderr, "%s: JOB is required (see %s --help)\n", o->verb, o->verb);
    return JB_CTL_USAGE;
  }
  return 0;
}

int jb_ctl_rollback(struct jb_ctl *o, int argc, char **argv) {
  json_t *body = json_object();
  const char *job;
  if (!body) return JB_CTL_FAILED;
  int rc = parse(o, argc, argv, &job, body);
  char *path = rc ? NULL : jb_ctl_job_path(job, "/rollback");
  struct jb_ctl_reply r = {0};
  if (!rc) rc = path ? jb_ctl_http(o, "POST", path, body, &r) : JB_CTL_FAILED;
  free(path);
  bool dry = json_is_true(json_object_get(body, "dryRun"));
  json_decref(body);
  json_t *doc = rc == JB_CTL_OK ? jb_ctl_reply_json(o, &r) : NULL;
  jb_ctl_reply_free(&r);
  if (rc != JB_CTL_OK) return rc;
  if (!doc) return JB_CTL_FAILED;
  if (o->json)
    rc = jb_ctl_print_json(doc);
  else if (dry)
    show_plan(doc);
  else
    printf("rollback %lld of %s: %s (GET /v1/jailbox/%s/rollbacks/%lld)\n", num(doc, "rollbackId"),
           jb_ctl_text(job), str(doc, "state"), jb_ctl_text(job), num(doc, "rollbackId"));
  json_decref(doc);
  return rc == JB_CTL_OK && fflush(stdout) == 0 ? JB_CTL_OK : JB_CTL_FAILED;
}
