/* rest.c — jailboxctl's verbs that are one or two REST calls (over cli/http.c): open,
 * status, ops, approve, reject, pause, resume, abort, accept, changes, agents, explain, keys;
 * the per-verb help; and the dispatch of every verb that does not live in cli/main.c (watch:
 * cli/watch.c, mcp-bridge: cli/bridge.c, rollback: cli/rollback.c). The contract is
 * api/openapi.yaml. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/policy.h"
#include "sandbox/proto/explain.h"
#include "cli/ctl.h"

/* ---------- output ---------- */

static const char *str(const json_t *o, const char *k) {
  return jb_ctl_text(json_string_value(json_object_get(o, k)));
}

static void print_session(const json_t *s) {
  json_t *head = json_object_get(s, "auditHead");
  printf("session %s\n  state       %s", str(s, "jobId"), str(s, "state"));
  if (json_is_string(json_object_get(s, "stateReason"))) printf(" (%s)", str(s, "stateReason"));
  printf(
      "\n  mode        %s\n  agent       %s\n  workspace   %s\n  pending ops %lld\n"
      "  audit head  %lld:%s\n  created     %s\n",
      str(s, "mode"), str(s, "agentId"), str(s, "workspace"),
      (long long)json_integer_value(json_object_get(s, "pendingOps")),
      (long long)json_integer_value(json_object_get(head, "seq")), str(head, "hash"),
      str(s, "createdAt"));
  if (json_is_string(json_object_get(s, "endedAt")))
    printf("  ended       %s\n", str(s, "endedAt"));
  if (json_is_string(json_object_get(s, "image"))) printf("  image       %s\n", str(s, "image"));
}

/* One op on one line: id, state, tool, path, decision, and the reason when there is one. */
static void print_op(const json_t *op) {
  printf("%6lld  %-9s %-5s %-40s %s", (long long)json_integer_value(json_object_get(op, "opId")),
         str(op, "state"), str(op, "tool"), str(op, "path"), str(op, "decision"));
  if (json_is_string(json_object_get(op, "reason"))) printf("  (%s)", str(op, "reason"));
  putchar('\n');
}

/* ---------- verbs ---------- */

/* GET/POST `path` and hand the parsed object to `show` (human) or print it (--json). */
static int call(struct jb_ctl *o, const char *method, char *path, json_t *body,
                void (*show)(const json_t *)) {
  struct jb_ctl_reply r;
  int rc = path ? jb_ctl_http(o, method, path, body, &r) : JB_CTL_FAILED;
  free(path);
  json_decref(body);
  if (rc != JB_CTL_OK) {
    jb_ctl_reply_free(&r);
    return rc;
  }
  json_t *doc = jb_ctl_reply_json(o, &r);
  jb_ctl_reply_free(&r);
  if (!doc) return JB_CTL_FAILED;
  if (o->json || !show)
    rc = jb_ctl_print_json(doc);
  else
    show(doc);
  json_decref(doc);
  return rc == JB_CTL_OK && fflush(stdout) == 0 ? JB_CTL_OK : JB_CTL_FAILED;
}

static int usage_error(const struct jb_ctl *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int usage_error(const struct jb_ctl *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", o->verb);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (see %s --help)\n", o->verb);
  va_end(ap);
  return JB_CTL_USAGE;
}

static void show_opened(const json_t *s) {
  printf(
      "opened %s (state %s, mode %s, image %s)\n  buyer token: %s\n  agent token: %s\n"
      "(the tokens are shown once; keep them)\n",
      str(s, "jobId"), str(s, "state"), str(s, "mode"), str(s, "image"), str(s, "buyerToken"),
      str(s, "agentToken"));
}

static int parse_ll(const char *s, long long min, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < min) return -1;
  *out = v;
  return 0;
}

/* Asks for a one-time console code with `token` (buyer or service) and prints the console link
 * (the code, not the token, is in it; it is good once, for a few minutes). */
static int print_console_link(struct jb_ctl *o, const char *token) {
  struct jb_ctl o2 = *o;
  o2.token = token;
  struct jb_ctl_reply r;
  int rc = jb_ctl_http(&o2, "POST", "/v1/console/codes", NULL, &r);
  json_t *doc = rc == JB_CTL_OK ? jb_ctl_reply_json(o, &r) : NULL;
  jb_ctl_reply_free(&r);
  if (!doc) return rc == JB_CTL_OK ? JB_CTL_FAILED : rc;
  const char *base = o->url ? o->url : "http://127.0.0.1:8080";
  size_t bl = strlen(base);
  while (bl && base[bl - 1] == '/') bl--;
  if (o->json)
    rc = jb_ctl_print_json(doc);
  else
    printf("console (one-time link, %lld s): %.*s%s\n",
           (long long)json_integer_value(json_object_get(doc, "expiresInS")), (int)bl, base,
           str(doc, "path"));
  json_decref(doc);
  return rc == JB_CTL_OK && fflush(stdout) == 0 ? JB_CTL_OK : JB_CTL_FAILED;
}

static int verb_console(struct jb_ctl *o, int argc, char **argv) {
  (void)argv;
  if (argc != 0) return usage_error(o, "%s", "takes no arguments");
  return print_console_link(o, o->token);
}

static int verb_open(struct jb_ctl *o, int argc, char **argv) {
  json_t *body = json_object(), *exclude = json_array(), *limits = json_object();
  bool console = false;
  static const char *const lim_flags[] = {"--memory-mib",  "memoryMiB",  "--cpus",
                                          "cpus",          "--pids",     "pids",
                                          "--timeout-sec", "timeoutSec", NULL};
  int rc = JB_CTL_USAGE;
  if (!body || !exclude || !limits) goto fail;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    const char *key = NULL;
    if (strcmp(a, "--workspace") == 0)
      key = "workspace";
    else if (strcmp(a, "--agent") == 0)
      key = "agentId";
    else if (strcmp(a, "--mode") == 0)
      key = "mode";
    else if (strcmp(a, "--job") == 0)
      key = "jobId";
    else if (strcmp(a, "--image") == 0)
      key = "image";
    if (key && v) {
      json_object_set_new(body, key, json_string(v));
      i++;
      continue;
    }
    if (strcmp(a, "--console") == 0) {
      console = true;
      continue;
    }
    if (strcmp(a, "--exclude") == 0 && v) {
      json_array_append_new(exclude, json_string(v));
      i++;
      continue;
    }
    bool lim = false;
    for (int k = 0; lim_flags[k]; k += 2)
      if (strcmp(a, lim_flags[k]) == 0 && v) {
        long long n;
        if (parse_ll(v, 1, &n) < 0) {
          rc = usage_error(o, "%s needs a positive integer", a);
          goto fail;
        }
        json_object_set_new(limits, lim_flags[k + 1], json_integer(n));
        lim = true;
        i++;
      }
    if (!lim) {
      rc = usage_error(o, "unexpected or incomplete argument '%s'", a);
      goto fail;
    }
  }
  if (!json_object_get(body, "workspace") || !json_object_get(body, "agentId")) {
    rc = usage_error(o, "%s", "--workspace and --agent are required");
    goto fail;
  }
  if (json_array_size(exclude)) json_object_set(body, "exclude", exclude);
  if (json_object_size(limits)) json_object_set(body, "limits", limits);
  json_decref(exclude);
  json_decref(limits);
  if (!console) return call(o, "POST", strdup("/v1/jailbox"), body, show_opened);
  {
    struct jb_ctl_reply r;
    rc = jb_ctl_http(o, "POST", "/v1/jailbox", body, &r);
    json_decref(body);
    json_t *doc = rc == JB_CTL_OK ? jb_ctl_reply_json(o, &r) : NULL;
    jb_ctl_reply_free(&r);
    if (!doc) return rc == JB_CTL_OK ? JB_CTL_FAILED : rc;
    if (o->json)
      jb_ctl_print_json(doc);
    else
      show_opened(doc);
    rc = print_console_link(o, str(doc, "buyerToken"));
    json_decref(doc);
    return rc;
  }
fail:
  json_decref(body);
  json_decref(exclude);
  json_decref(limits);
  return rc;
}

static int verb_status(struct jb_ctl *o, int argc, char **argv) {
  if (argc != 1) return usage_error(o, "%s", "takes exactly one JOB");
  return call(o, "GET", jb_ctl_job_path(argv[0], ""), NULL, print_session);
}

static void show_ops(const json_t *page) {
  size_t i;
  json_t *op;
  printf("%6s  %-9s %-5s %-40s %s\n", "op", "state", "tool", "path", "decision");
  json_array_foreach (json_object_get(page, "ops"), i, op) print_op(op);
  if (json_is_integer(json_object_get(page, "next")))
    printf("(more: --after %lld)\n", (long long)json_integer_value(json_object_get(page, "next")));
}

static int verb_ops(struct jb_ctl *o, int argc, char **argv) {
  const char *job = NULL, *state = NULL;
  long long limit = 50, after = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--state") == 0 && i + 1 < argc)
      state = argv[++i];
    else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
      if (parse_ll(argv[++i], 1, &limit) < 0 || limit > 500)
        return usage_error(o, "%s", "--limit takes 1 to 500");
    } else if (strcmp(argv[i], "--after") == 0 && i + 1 < argc) {
      if (parse_ll(argv[++i], 0, &after) < 0) return usage_error(o, "%s", "--after takes an op id");
    } else if (argv[i][0] != '-' && !job)
      job = argv[i];
    else
      return usage_error(o, "unexpected or incomplete argument '%s'", argv[i]);
  }
  if (!job) return usage_error(o, "%s", "JOB is required");
  char q[160];
  char *st = state ? jb_ctl_escape(state) : NULL;
  if (state && !st) return JB_CTL_FAILED;
  snprintf(q, sizeof q, "/ops?limit=%lld&after=%lld%s%s", limit, after, st ? "&state=" : "",
           st ? st : "");
  free(st);
  return call(o, "GET", jb_ctl_job_path(job, q), NULL, show_ops);
}

/* Optional [--reason R] after the positional arguments; the body is {reason} or NULL. */
static int reason_body(struct jb_ctl *o, int argc, char **argv, int npos, json_t **body) {
  *body = NULL;
  int seen = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--reason") == 0 && i + 1 < argc) {
      json_decref(*body);
      *body = json_pack("{s:s}", "reason", argv[++i]);
    } else if (argv[i][0] != '-' && seen < npos) {
      argv[seen++] = argv[i];
    } else {
      json_decref(*body);
      return usage_error(o, "unexpected or incomplete argument '%s'", argv[i]);
    }
  }
  if (seen != npos) {
    json_decref(*body);
    return usage_error(o, "%s", npos == 1 ? "JOB is required" : "JOB and OP are required");
  }
  return 0;
}

static void show_rule(const json_t *r) {
  printf("%-16s %-6s %-5s", str(r, "id"), str(r, "tool"), str(r, "effect"));
  if (json_is_string(json_object_get(r, "path"))) printf(" path %s", str(r, "path"));
  json_t *argv = json_object_get(r, "argvPrefix");
  if (json_is_array(argv)) {
    printf(" argv");
    size_t i;
    json_t *a;
    json_array_foreach (argv, i, a) printf(" %s", jb_ctl_text(json_string_value(a)));
    printf(" ...");
  }
  json_t *exact = json_object_get(r, "argv"); /* an exact command: argv, cwd, env names */
  if (json_is_array(exact)) {
    printf(" exactly");
    size_t i;
    json_t *a;
    json_array_foreach (exact, i, a) printf(" %s", jb_ctl_text(json_string_value(a)));
    if (json_is_string(json_object_get(r, "cwd"))) printf(" in %s", str(r, "cwd"));
    json_array_foreach (json_object_get(r, "env"), i, a)
      printf("%s%s", i ? "," : " env ", jb_ctl_text(json_string_value(a)));
  }
  if (json_is_true(json_object_get(r, "writable"))) printf(" writable");
  if (json_is_string(json_object_get(r, "command"))) printf(" command %s", str(r, "command"));
  if (json_is_integer(json_object_get(r, "maxBytes")))
    printf(" max %lld bytes", (long long)json_integer_value(json_object_get(r, "maxBytes")));
  if (json_is_integer(json_object_get(r, "usesLeft")))
    printf(" (%lld uses left)", (long long)json_integer_value(json_object_get(r, "usesLeft")));
  if (json_is_string(json_object_get(r, "expiresAt"))) printf(" until %s", str(r, "expiresAt"));
  if (json_is_string(json_object_get(r, "source")))
    printf(" [%s%s]", str(r, "source"),
           json_is_true(json_object_get(r, "locked")) ? ", locked" : "");
  if (json_is_string(json_object_get(r, "state")) && strcmp(str(r, "state"), "live"))
    printf(" [%s]", str(r, "state"));
  putchar('\n');
}

static void show_rules(const json_t *d) {
  size_t i;
  json_t *r;
  json_array_foreach (json_object_get(d, "rules"), i, r) show_rule(r);
  if (json_array_size(json_object_get(d, "rules")) == 0) puts("no rules");
}

static void show_revoked(const json_t *d) { printf("rule %s: revoked\n", str(d, "ruleId")); }

/* jailboxctl rules JOB [--all] | rules JOB add RULE_JSON... | rules JOB rm RULE_ID: the
 * session's approval rules (api/events.md "Approval rules"); a rule is checked here first
 * (lib/policy.h), as the server checks it. */
static int verb_rules(struct jb_ctl *o, int argc, char **argv) {
  if (argc < 1 || argv[0][0] == '-') return usage_error(o, "%s", "JOB is required");
  if (argc == 1 || (argc == 2 && !strcmp(argv[1], "--all")))
    return call(o, "GET", jb_ctl_job_path(argv[0], argc == 2 ? "/rules?all=true" : "/rules"), NULL,
                show_rules);
  if (!strcmp(argv[1], "rm")) {
    if (argc != 3) return usage_error(o, "%s", "rules JOB rm RULE_ID");
    char *e = jb_ctl_escape(argv[2]), *suffix = NULL;
    if (!e || asprintf(&suffix, "/rules/%s", e) < 0) suffix = NULL;
    free(e);
    char *path = suffix ? jb_ctl_job_path(argv[0], suffix) : NULL;
    free(suffix);
    return call(o, "DELETE", path, NULL, show_revoked);
  }
  if (strcmp(argv[1], "add") || argc < 3)
    return usage_error(o, "%s", "rules JOB [--all] | rules JOB add RULE_JSON... | rules JOB rm ID");
  json_t *rules = json_array();
  for (int i = 2; i < argc; i++) {
    json_error_t je;
    json_t *r = json_loads(argv[i], JSON_REJECT_DUPLICATES, &je);
    char msg[400];
    json_t *ok = r ? jb_rule_check(r, false, (long long)time(NULL), msg, sizeof msg) : NULL;
    if (!r) snprintf(msg, sizeof msg, "not a JSON object: %s", je.text);
    json_decref(r);
    if (!ok) {
      json_decref(rules);
      return usage_error(o, "rule %d: %s", i - 1, msg);
    }
    json_array_append_new(rules, ok);
  }
  return call(o, "POST", jb_ctl_job_path(argv[0], "/rules"), json_pack("{s:o}", "rules", rules),
              show_rules);
}

static void show_decided(const json_t *op) {
  printf("op %lld: %s (%s)\n", (long long)json_integer_value(json_object_get(op, "opId")),
         str(op, "state"), str(op, "decision"));
  json_t *r = json_object_get(op, "rule");
  if (json_is_object(r)) {
    printf("allowed from now on: ");
    show_rule(r);
  }
}

static int verb_decide(struct jb_ctl *o, int argc, char **argv, const char *what) {
  json_t *body;
  const char *similar = NULL;
  for (int i = 0; !strcmp(what, "approve") && i < argc; i++) /* a changeset's files */
    if (!strcmp(argv[i], "--files") || !strcmp(argv[i], "--file") || !strcmp(argv[i], "--except"))
      return jb_ctl_changeset_approve(o, argc, argv);
  if (!strcmp(what, "approve")) { /* --allow-similar KEY: taken out before the common args */
    int k = 0;
    for (int i = 0; i < argc; i++) {
      if (!strcmp(argv[i], "--allow-similar") && i + 1 < argc)
        similar = argv[++i];
      else
        argv[k++] = argv[i];
    }
    argc = k;
  }
  int rc = reason_body(o, argc, argv, 2, &body);
  if (rc) return rc;
  if (similar) {
    if (!body) body = json_object();
    json_object_set_new(body, "allowSimilar", json_string(similar));
  }
  long long op;
  if (parse_ll(argv[1], 1, &op) < 0) {
    json_decref(body);
    return usage_error(o, "OP must be a positive integer, not '%s'", argv[1]);
  }
  char suffix[64];
  snprintf(suffix, sizeof suffix, "/%s/%lld", what, op);
  return call(o, "POST", jb_ctl_job_path(argv[0], suffix), body, show_decided);
}

static void show_killed(const json_t *k) {
  const char *how = str(k, "outcome");
  printf("op #%lld: %s\n", (long long)json_integer_value(json_object_get(k, "opId")),
         !strcmp(how, "killing")    ? "killing the running command"
         : !strcmp(how, "rejected") ? "rejected before it ran"
                                    : "failed before it started");
}

/* jailboxctl kill JOB OP [--reason TEXT]: the buyer's kill of an exec. */
static int verb_kill(struct jb_ctl *o, int argc, char **argv) {
  json_t *body;
  int rc = reason_body(o, argc, argv, 2, &body);
  if (rc) return rc;
  long long op;
  if (parse_ll(argv[1], 1, &op) < 0) {
    json_decref(body);
    return usage_error(o, "OP must be a positive integer, not '%s'", argv[1]);
  }
  char suffix[64];
  snprintf(suffix, sizeof suffix, "/ops/%lld/kill", op);
  return call(o, "POST", jb_ctl_job_path(argv[0], suffix), body, show_killed);
}

/* GET …/ops/OP/diff: the whole unified diff of a pending write or edit on stdout (--json: the
 * answer); what is not a diff (binary content, a file changed since the request, a diff cut at
 * the server's cap) is said on stderr. */
static int verb_diff(struct jb_ctl *o, int argc, char **argv) {
  if (argc != 2) return usage_error(o, "%s", "takes JOB and OP");
  long long op;
  if (parse_ll(argv[1], 1, &op) < 0)
    return usage_error(o, "OP must be a positive integer, not '%s'", argv[1]);
  char suffix[64];
  snprintf(suffix, sizeof suffix, "/ops/%lld/diff", op);
  char *path = jb_ctl_job_path(argv[0], suffix);
  struct jb_ctl_reply r;
  int rc = path ? jb_ctl_http(o, "GET", path, NULL, &r) : JB_CTL_FAILED;
  free(path);
  json_t *doc = rc == JB_CTL_OK ? jb_ctl_reply_json(o, &r) : NULL;
  jb_ctl_reply_free(&r);
  if (!doc) return rc == JB_CTL_OK ? JB_CTL_FAILED : rc;
  json_t *diff = json_object_get(doc, "diff"), *text = json_object_get(diff, "text");
  if (o->json) {
    rc = jb_ctl_print_json(doc);
  } else if (!json_is_string(text)) {
    fprintf(stderr, "%s: op %lld has no diff: %s\n", o->verb, op, str(doc, "reason"));
    rc = JB_CTL_REFUSED;
  } else {
    rc = jb_ctl_write_diff_text(json_string_value(text), json_string_length(text)) ? JB_CTL_OK
                                                                                   : JB_CTL_FAILED;
    if (json_is_true(json_object_get(diff, "truncated")))
      fprintf(stderr, "%s: the diff is cut at %zu of its %lld bytes\n", o->verb,
              json_string_length(text),
              (long long)json_integer_value(json_object_get(diff, "bytes")));
  }
  if (!o->json && json_is_true(json_object_get(doc, "changed")))
    fprintf(stderr, "%s: %s changed since the op was requested: approved, it would fail\n", o->verb,
            str(doc, "path"));
  json_decref(doc);
  return rc == JB_CTL_OK && fflush(stdout) == 0 ? JB_CTL_OK : rc ? rc : JB_CTL_FAILED;
}

static void show_transition(const json_t *t) {
  printf("%s: %s -> %s", str(t, "jobId"), str(t, "previous"), str(t, "state"));
  long long rej = json_integer_value(json_object_get(t, "rejectedOps"));
  if (rej) printf(" (%lld pending op%s rejected)", rej, rej == 1 ? "" : "s");
  putchar('\n');
}

static void show_changes(const json_t *c);

/* GET …/changes into *doc (new reference; NULL unless JB_CTL_OK). A 404 (a server without
 * the route) is reported as one line when `quiet_404`, not as a refusal. */
static int fetch_changes(struct jb_ctl *o, const char *job, bool quiet_404, json_t **doc) {
  *doc = NULL;
  char *path = jb_ctl_job_path(job, "/changes");
  struct jb_ctl_reply r;
  if (quiet_404) o->quiet_status = 404;
  int rc = path ? jb_ctl_http(o, "GET", path, NULL, &r) : JB_CTL_FAILED;
  o->quiet_status = 0;
  free(path);
  if (rc == JB_CTL_REFUSED && r.status == 404 && quiet_404)
    fprintf(stderr, "%s: no change summary from this server (GET …/changes: 404)\n", o->verb);
  if (rc == JB_CTL_OK) {
    *doc = jb_ctl_reply_json(o, &r);
    if (!*doc) rc = JB_CTL_FAILED;
  }
  jb_ctl_reply_free(&r);
  return rc;
}

/* GET …/changes, printed: 0, or the error code. */
static int changes(struct jb_ctl *o, const char *job, bool quiet_404) {
  json_t *doc;
  int rc = fetch_changes(o, job, quiet_404, &doc);
  if (rc == JB_CTL_OK) {
    if (o->json)
      rc = jb_ctl_print_json(doc);
    else
      show_changes(doc);
  }
  json_decref(doc);
  return rc;
}

static int verb_transition(struct jb_ctl *o, int argc, char **argv, const char *what) {
  json_t *body;
  int rc = reason_body(o, argc, argv, 1, &body);
  if (rc) return rc;
  char suffix[32];
  snprintf(suffix, sizeof suffix, "/%s", what);
  /* accept: the change summary is read first, while the buyer's token is still good (the
   * server revokes it when the session ends); in `done` no write can change it any more */
  bool summary = strcmp(what, "accept") == 0 && !o->json;
  json_t *before = NULL;
  int crc = summary ? fetch_changes(o, argv[0], true, &before) : JB_CTL_OK;
  rc = call(o, "POST", jb_ctl_job_path(argv[0], suffix), body, show_transition);
  if (rc == JB_CTL_OK && summary) {
    if (before)
      show_changes(before);
    else if (crc == JB_CTL_FAILED)
      rc = crc;
  }
  json_decref(before);
  return rc;
}

/* One exec of the change summary: what it ran (its argv, each argument as safe text), how
 * many entries it added, modified, deleted or changed the mode of (of the first 1,000 the
 * server lists; the total is effectsTotal), then its first effects. */
static void show_exec_change(const json_t *ch, long long op) {
  printf("  X %-40s exec `", str(ch, "path"));
  size_t i;
  json_t *x;
  json_array_foreach (json_object_get(ch, "argv"), i, x) {
    printf("%s%s", i ? " " : "", jb_ctl_text(json_string_value(x)));
  }
  json_t *eff = json_object_get(ch, "effects");
  long long n[4] = {0, 0, 0, 0};
  static const char *const kinds[4] = {"added", "modified", "deleted", "mode"};
  json_array_foreach (eff, i, x) {
    const char *k = json_string_value(json_object_get(x, "change"));
    for (int j = 0; k && j < 4; j++)
      if (!strcmp(k, kinds[j])) n[j]++;
  }
  long long total = json_is_integer(json_object_get(ch, "effectsTotal"))
                        ? (long long)json_integer_value(json_object_get(ch, "effectsTotal"))
                        : (long long)json_array_size(eff);
  printf("`: %lld added, %lld modified, %lld deleted, %lld mode (%lld entr%s%s)  op %lld  %s\n",
         n[0], n[1], n[2], n[3], total, total == 1 ? "y" : "ies",
         total > (long long)json_array_size(eff) ? ", the first listed" : "", op, str(ch, "at"));
  json_array_foreach (eff, i, x) {
    if (i == 5) {
      printf("      … %lld more\n", total - 5);
      break;
    }
    const char *k = json_string_value(json_object_get(x, "change"));
    char mark = !k ? '?' : !strcmp(k, "added") ? '+' : !strcmp(k, "deleted") ? '-' : '~';
    printf("      %c %s (%s", mark, str(x, "path"), str(x, "type"));
    if (json_is_integer(json_object_get(x, "size")))
      printf(", %lld bytes", (long long)json_integer_value(json_object_get(x, "size")));
    if (json_is_string(json_object_get(x, "flagged")))
      printf(", %s, %s", str(x, "flagged"),
             json_is_true(json_object_get(x, "removed")) ? "removed" : "kept");
    printf(")\n");
  }
}

static void show_changes(const json_t *c) {
  json_t *list = json_object_get(c, "changes");
  size_t i, n = json_array_size(list), cmds = 0;
  json_t *ch;
  json_array_foreach (list, i, ch) {
    const char *tool = json_string_value(json_object_get(ch, "tool"));
    cmds += tool && !strcmp(tool, "exec");
  }
  printf("changes of %s: %zu file%s", str(c, "jobId"), n - cmds, n - cmds == 1 ? "" : "s");
  if (cmds) printf(", %zu command%s", cmds, cmds == 1 ? "" : "s");
  putchar('\n');
  json_array_foreach (list, i, ch) {
    const char *tool = json_string_value(json_object_get(ch, "tool"));
    long long op = (long long)json_integer_value(json_object_get(ch, "opId"));
    if (tool && !strcmp(tool, "exec")) {
      show_exec_change(ch, op);
    } else if (tool && !strcmp(tool, "mkdir")) {
      printf("  A %-40s directory    op %lld  %s\n", str(ch, "path"), op, str(ch, "at"));
    } else if (tool && !strcmp(tool, "move")) {
      printf("  R %s -> %s  (%s)  op %lld  %s\n", str(ch, "from"), str(ch, "to"), str(ch, "type"),
             op, str(ch, "at"));
    } else if (tool && !strcmp(tool, "delete")) {
      printf("  D %-40s %s, %lld entr%s  op %lld  %s\n", str(ch, "path"), str(ch, "type"),
             (long long)json_integer_value(json_object_get(ch, "deleted")),
             json_integer_value(json_object_get(ch, "deleted")) == 1 ? "y" : "ies", op,
             str(ch, "at"));
    } else { /* write, edit */
      const char *before = json_string_value(json_object_get(ch, "sha256Before"));
      const char *after = str(ch, "sha256After");
      printf("  %s %-40s %8lld bytes  op %lld  %.12s -> %.12s  %s\n", before ? "M" : "A",
             str(ch, "path"), (long long)json_integer_value(json_object_get(ch, "size")), op,
             before ? before : "(new)", after, str(ch, "at"));
    }
  }
  json_t *rb = json_object_get(c, "rollback"); /* what a rollback to the state at open undoes */
  long long n_ops = (long long)json_integer_value(json_object_get(rb, "wouldUndo"));
  if (n_ops > 0) {
    printf("a rollback would undo %lld op%s", n_ops, n_ops == 1 ? "" : "s");
    if (json_is_true(json_object_get(rb, "available")))
      printf(" (jailboxctl rollback %s [--dry-run])\n", str(c, "jobId"));
    else
      printf(" (not now: %s)\n", str(rb, "why"));
  }
}

static int verb_changes(struct jb_ctl *o, int argc, char **argv) {
  for (int i = 0; i < argc; i++) /* a changeset's files */
    if (!strcmp(argv[i], "--op")) return jb_ctl_changeset_show(o, argc, argv);
  if (argc != 1) return usage_error(o, "%s", "takes exactly one JOB");
  return changes(o, argv[0], false);
}

static void show_agent(const json_t *a) {
  printf("agent %s\n  trust score %g\n  sessions    %lld\n  since       %s\n", str(a, "agentId"),
         json_number_value(json_object_get(a, "trustScore")),
         (long long)json_integer_value(json_object_get(a, "sessions")), str(a, "createdAt"));
}

static int verb_agents(struct jb_ctl *o, int argc, char **argv) {
  if (argc != 1) return usage_error(o, "%s", "takes exactly one AGENT id");
  char *e = jb_ctl_escape(argv[0]), *p = NULL;
  if (!e || asprintf(&p, "/v1/agents/%s", e) < 0) p = NULL;
  free(e);
  return call(o, "GET", p, NULL, show_agent);
}

static void show_keys(const json_t *k) {
  size_t i;
  json_t *key;
  json_array_foreach (json_object_get(k, "keys"), i, key) {
    printf("%s  %s  %s  since %s", str(key, "keyId"), str(key, "algorithm"), str(key, "publicKey"),
           str(key, "createdAt"));
    if (json_is_string(json_object_get(key, "retiredAt")))
      printf("  retired %s", str(key, "retiredAt"));
    putchar('\n');
  }
}

static int verb_keys(struct jb_ctl *o, int argc, char **argv) {
  if (argc != 0) return usage_error(o, "unexpected argument '%s'", argv[0]);
  /* the body as served: `audit verify --keys` reads exactly this */
  struct jb_ctl_reply r;
  int rc = jb_ctl_http(o, "GET", "/v1/audit/keys", NULL, &r);
  if (rc == JB_CTL_OK) {
    json_t *doc = jb_ctl_reply_json(o, &r);
    if (!doc)
      rc = JB_CTL_FAILED;
    else if (o->json || !isatty(STDOUT_FILENO))
      rc = fwrite(r.body, 1, r.len, stdout) == r.len &&
                   (r.len == 0 || r.body[r.len - 1] == '\n' || putchar('\n') != EOF)
               ? JB_CTL_OK
               : JB_CTL_FAILED;
    else
      show_keys(doc);
    json_decref(doc);
  }
  jb_ctl_reply_free(&r);
  return rc == JB_CTL_OK && fflush(stdout) == 0 ? JB_CTL_OK : rc ? rc : JB_CTL_FAILED;
}

static int verb_audit_export(struct jb_ctl *o, int argc, char **argv) {
  if (argc != 1) return usage_error(o, "%s", "takes exactly one JOB");
  if (!o->token || !o->token[0])
    return usage_error(o, "%s", "a token is needed (JAILBOX_TOKEN or --token)");
  char *path = jb_ctl_job_path(argv[0], "/audit");
  int rc = path ? jb_ctl_http_stream(o, path, stdout) : JB_CTL_FAILED;
  free(path);
  return rc;
}

static int verb_explain(struct jb_ctl *o, int argc, char **argv) {
  if (argc != 1) return usage_error(o, "%s", "takes exactly one JOB");
  char *path = jb_ctl_job_path(argv[0], "");
  struct jb_ctl_reply r;
  int rc = path ? jb_ctl_http(o, "GET", path, NULL, &r) : JB_CTL_FAILED;
  free(path);
  if (rc != JB_CTL_OK) {
    jb_ctl_reply_free(&r);
    return rc;
  }
  json_t *sess = jb_ctl_reply_json(o, &r);
  jb_ctl_reply_free(&r);
  if (!sess) return JB_CTL_FAILED;
  json_t *walls = json_object_get(sess, "walls");
  if (!json_is_object(walls)) {
    fprintf(stderr, "%s: session %s has no contract yet (state %s)\n", o->verb,
            jb_ctl_text(argv[0]), str(sess, "state"));
    rc = JB_CTL_REFUSED;
  } else if (o->json) {
    rc = json_dumpf(walls, stdout, JSON_INDENT(2)) == 0 && puts("") >= 0 ? 0 : JB_CTL_FAILED;
  } else {
    rc = jb_contract_explain(sess, stdout) == 0 ? JB_CTL_OK : JB_CTL_FAILED;
  }
  json_decref(sess);
  return rc == JB_CTL_OK && fflush(stdout) == 0 ? JB_CTL_OK : rc ? rc : JB_CTL_FAILED;
}

/* ---------- help and dispatch ---------- */

struct verb {
  const char *name; /* "audit verify": two words for the nested verbs */
  const char *args;
  const char *help;
  int (*run)(struct jb_ctl *o, int argc, char **argv);
};

static int run_approve(struct jb_ctl *o, int c, char **v) {
  return verb_decide(o, c, v, "approve");
}
static int run_reject(struct jb_ctl *o, int c, char **v) { return verb_decide(o, c, v, "reject"); }
static int run_pause(struct jb_ctl *o, int c, char **v) {
  return verb_transition(o, c, v, "pause");
}
static int run_resume(struct jb_ctl *o, int c, char **v) {
  return verb_transition(o, c, v, "resume");
}
static int run_abort(struct jb_ctl *o, int c, char **v) {
  return verb_transition(o, c, v, "abort");
}
static int run_accept(struct jb_ctl *o, int c, char **v) {
  return verb_transition(o, c, v, "accept");
}

/* run == NULL: implemented in cli/main.c / cli/token.c; listed here for --help. */
static const struct verb verbs[] = {
    {"open",
     "--workspace DIR --agent ID [--mode supervised|unsupervised] [--job ID] [--image NAME] "
     "[--exclude GLOB]... [--memory-mib N] [--cpus N] [--pids N] [--timeout-sec N] [--console]",
     "open a session (service token); prints the job id and its buyer and agent tokens, shown "
     "once; --console also prints a one-time link that signs a browser in to the buyer's web "
     "console",
     verb_open},
    {"console", "",
     "print a one-time link to the web console for the token (buyer: its session; service: "
     "the session list)",
     verb_console},
    {"status", "JOB", "the session's state, mode, pending ops and audit head (service or buyer)",
     verb_status},
    {"watch", "JOB [--poll] [--interval MS] [--until-end] [--decide]",
     "print the session's events as they happen, over the buyer's Socket.IO connection (buyer "
     "token); --poll, or when the socket cannot be reached or refuses the token (a service "
     "token), polls the REST API instead; "
     "--until-end stops when the session ends (accepted, aborted, failed), and a session that "
     "had ended before the watch began stops it at once; --decide reads "
     "decisions from stdin, one per line: 'a [OP] [directory|extension|command|session]' "
     "approves (with a key: and allows similar ops from now on), 'r [OP] [REASON]' rejects; "
     "OP defaults to the newest request, and each request prints the choices it offers",
     jb_ctl_watch},
    {"ops", "JOB [--state pending|approved|running|done|failed|rejected] [--limit N] [--after OP]",
     "the session's ops, oldest first, one page", verb_ops},
    {"approve",
     "JOB OP [--reason TEXT] [--allow-similar directory|extension|command|session] "
     "[--files A,B | --file PATH... | --except A,B]",
     "approve a pending op (buyer or service); --allow-similar also adds the narrowest rule "
     "that lets ops like it run from now on; for a changeset, --files (or --file, one path "
     "each) approves only those files and --except every approvable one but those, the rest "
     "rejected (the changeset is read first and its changesetSha256 sent: a changed one is "
     "refused); without either every approvable file",
     run_approve},
    {"rules", "JOB [--all] | JOB add RULE_JSON... | JOB rm RULE_ID",
     "the session's approval rules, in the order they decide (--all: revoked and expired too); "
     "add appends rules ({\"tool\":\"exec\",\"argvPrefix\":[\"make\"],\"effect\":\"allow\"}), "
     "rm revokes one (buyer or service)",
     verb_rules},
    {"reject", "JOB OP [--reason TEXT]", "reject a pending write (buyer or service)", run_reject},
    {"kill", "JOB OP [--reason TEXT]",
     "kill an exec: a running command is killed, a pending or queued one never runs (buyer or "
     "service)",
     verb_kill},
    {"diff", "JOB OP [--json]",
     "the whole unified diff of a pending write or edit, the file as it is now against the "
     "proposed content (buyer or service; made again by the server: for a preview that was cut)",
     verb_diff},
    {"pause", "JOB [--reason TEXT]", "active -> paused (service: with --reason)", run_pause},
    {"resume", "JOB [--reason TEXT]", "paused -> active, by whoever paused", run_resume},
    {"abort", "JOB [--reason TEXT]", "end the session now (buyer; service: with --reason)",
     run_abort},
    {"accept", "JOB [--reason TEXT]",
     "done -> accepted (buyer), then print the change summary (GET …/changes)", run_accept},
    {"changes", "JOB [--op OP [--diff]]",
     "the files the session changed (path, op, SHA-256 before and after, size) and the "
     "commands that changed the workspace (argv, counts of added, modified and deleted entries);"
     " with --op, the files of changeset OP (change, path, approvable or why not, sizes,"
     " decision and outcome), and with --diff each file's diff",
     verb_changes},
    {"rollback", "JOB [--to OP] [--force] [--dry-run] [--reason TEXT]",
     "undo the ops after OP (default: all, the state at open) of a paused or ended session; "
     "--dry-run lists what would be undone (service: with --reason)",
     jb_ctl_rollback},
    {"agents", "AGENT", "an agent's trust score and session count", verb_agents},
    {"explain", "JOB [--json]",
     "the session contract: which walls stand with their settings, what was checked from "
     "inside, and the residual risks (--json: the contract object)",
     verb_explain},
    {"keys", "",
     "print the published audit verification keys (GET /v1/audit/keys; no token): a table on a "
     "terminal, else the JSON as served, which audit verify --keys reads",
     verb_keys},
    {"audit keys", "", "the same as keys", verb_keys},
    {"audit export", "JOB",
     "print the session's audit chain as JSON Lines, streamed as the server sends it (service "
     "or buyer token)",
     verb_audit_export},
    {"audit verify", "FILE --keys KEYS.json [--head SEQ:HASH] [--sealed] [--session JOB] [--json]",
     "verify an exported chain offline (no server): exit 0 intact, 1 tampered, 2 usage or "
     "unreadable input",
     NULL},
    {"keys rotate", "--key FILE [--grace S] [--database-url URL | --state-dir DIR]",
     "make FILE's key (generated when FILE does not exist) the active audit signing key and "
     "retire the others S seconds later (default 60); instances take it up from their key files",
     NULL},
    {"tree-hash", "DIR [--json]",
     "print the tree hash v1 of DIR (api/audit.md; offline), to compare with an audit entry's "
     "treeSha256; 'null WHY' and exit 1 past JAILBOX_TREE_HASH_MAX_BYTES or 1,000,000 entries",
     NULL},
    {"token create", "--role service [--label L] [--database-url URL | --state-dir DIR]",
     "mint a service token straight into the database (printed once)", NULL},
    {"mcp-bridge", "--job JOB",
     "serve the session to an MCP client as a standard MCP server on stdin/stdout (JSON-RPC 2.0, "
     "one message per line), relaying to the session's agent Socket.IO channel; the agent token "
     "from JAILBOX_AGENT_TOKEN (or JAILBOX_TOKEN / --token)",
     jb_ctl_bridge},
};
#define NVERBS (sizeof verbs / sizeof verbs[0])

/* "  jailboxctl VERB ARGS", then the help text word-wrapped at 96 columns, indented by 6. */
static void print_verb(FILE *out, const struct verb *v) {
  fprintf(out, "  jailboxctl %s%s%s\n", v->name, v->args[0] ? " " : "", v->args);
  const char *p = v->help;
  while (*p) {
    size_t n = strlen(p);
    if (n > 90) {
      n = 90;
      while (n > 0 && p[n] != ' ') n--;
      if (n == 0) n = strcspn(p, " ");
    }
    fprintf(out, "      %.*s\n", (int)n, p);
    p += n;
    while (*p == ' ') p++;
  }
}

static void help_all(FILE *out) {
  fputs("usage: jailboxctl VERB [ARGS] [--url URL] [--token TOKEN] [--ws-url URL] [--json]\n\n",
        out);
  for (size_t i = 0; i < NVERBS; i++) print_verb(out, &verbs[i]);
  fputs(
      "\nThe server and the token come from JAILBOX_URL (default http://127.0.0.1:8080),\n"
      "JAILBOX_TOKEN and JAILBOX_WS_URL (default: the host of JAILBOX_URL, port + 1), or the\n"
      "flags. Output is for people unless --json (one JSON value per line).\n"
      "Exit status: 0 done; 1 refused by the server (HTTP 4xx) or a failed check; 2 usage\n"
      "error; 3 failure (server unreachable, HTTP 5xx, malformed answer).\n",
      out);
}

/* Takes --url/--token/--ws-url/--json (anywhere after the verb) out of argv into *o. */
static void take_globals(struct jb_ctl *o, int *argc, char **argv, int from) {
  int w = from;
  for (int i = from; i < *argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--url") == 0 && i + 1 < *argc)
      o->url = argv[++i];
    else if (strcmp(a, "--token") == 0 && i + 1 < *argc)
      o->token = argv[++i];
    else if (strcmp(a, "--ws-url") == 0 && i + 1 < *argc)
      o->ws_url = argv[++i];
    else if (strcmp(a, "--json") == 0)
      o->json = true;
    else
      argv[w++] = argv[i];
  }
  *argc = w;
  argv[w] = NULL;
}

bool jb_ctl_dispatch(int *argc, char **argv, int *rc) {
  if (*argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    help_all(*argc < 2 ? stderr : stdout);
    *rc = *argc < 2 ? JB_CTL_USAGE : JB_CTL_OK;
    return true;
  }
  const struct verb *v = NULL;
  int words = 0;
  for (size_t i = 0; i < NVERBS && !v; i++) {
    const char *sp = strchr(verbs[i].name, ' ');
    if (sp && *argc >= 3 && strncmp(argv[1], verbs[i].name, (size_t)(sp - verbs[i].name)) == 0 &&
        argv[1][sp - verbs[i].name] == '\0' && strcmp(argv[2], sp + 1) == 0) {
      v = &verbs[i];
      words = 2;
    }
  }
  for (size_t i = 0; i < NVERBS && !v; i++)
    if (!strchr(verbs[i].name, ' ') && strcmp(argv[1], verbs[i].name) == 0) {
      v = &verbs[i];
      words = 1;
    }
  if (!v) {
    fprintf(stderr, "jailboxctl: unknown verb '%s'\n\n", argv[1]);
    help_all(stderr);
    *rc = JB_CTL_USAGE;
    return true;
  }
  for (int i = 1 + words; i < *argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage:\n");
      print_verb(stdout, v);
      if (v->run) printf("  common: [--url URL] [--token TOKEN] [--ws-url URL] [--json]\n");
      *rc = fflush(stdout) == 0 ? JB_CTL_OK : JB_CTL_FAILED;
      return true;
    }
  static char verb_name[64];
  snprintf(verb_name, sizeof verb_name, "jailboxctl %s", v->name);
  const char *u = getenv("JAILBOX_URL");
  struct jb_ctl o = {.verb = verb_name,
                     .url = u && u[0] ? u : "http://127.0.0.1:8080",
                     .token = getenv("JAILBOX_TOKEN"),
                     .ws_url = getenv("JAILBOX_WS_URL")};
  if (!v->run) return false; /* cli/main.c's offline verbs */
  take_globals(&o, argc, argv, 1 + words);
  *rc = v->run(&o, *argc - 1 - words, argv + 1 + words);
  return true;
}
