/* policy.c — approval rules: grammar, validation, first-match decision and the rule "allow
 * similar" makes (see policy.h). */
#define _GNU_SOURCE
#include "lib/policy.h"

#include <sodium.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lib/pathcheck.h"

static const char *const effect_names[] = {"allow", "ask", "deny"};
static const char *const rule_tools[] = {"write", "edit", "mkdir", "move", "delete", "exec", NULL};
static const char *const rule_fields[] = {
    "id",   "tool",      "path",    "argvPrefix", "argv",   "cwd",
    "env",  "envSha256", "command", "maxBytes",   "effect", "expiresAt",
    "uses", "locked",    "broad",   "writable",   NULL};

const char *jb_rule_effect_name(enum jb_rule_effect e) {
  return e >= JB_RULE_ALLOW && e <= JB_RULE_DENY ? effect_names[e] : "ask";
}

enum jb_rule_effect jb_rule_effect_of(const json_t *rule) {
  const char *e = json_string_value(json_object_get(rule, "effect"));
  for (int i = 0; e && i < 3; i++)
    if (!strcmp(e, effect_names[i])) return (enum jb_rule_effect)i;
  return JB_RULE_ASK;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool in_list(const char *s, const char *const *list) {
  for (size_t i = 0; s && list[i]; i++)
    if (!strcmp(s, list[i])) return true;
  return false;
}

static json_t *fail(char *msg, size_t msize, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static json_t *fail(char *msg, size_t msize, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, msize, fmt, ap);
  va_end(ap);
  return NULL;
}

int jb_rule_parse_time(const char *s, long long *out) {
  struct tm tm = {0};
  int n = 0;
  /* the digits where RFC 3339 puts them (sscanf alone would take "+1" or " 1" for a month) */
  static const char shape[] = "dddd-dd-ddTdd:dd:dd";
  for (size_t i = 0; s && i < sizeof shape - 1; i++)
    if (shape[i] == 'd' ? (s[i] < '0' || s[i] > '9') : s[i] != shape[i]) return -1;
  if (!s ||
      sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
             &tm.tm_min, &tm.tm_sec, &n) != 6 ||
      n != 19)
    return -1;
  const char *p = s + n;
  if (*p == '.') {
    p++;
    size_t d = strspn(p, "0123456789");
    if (d == 0 || d > 9) return -1;
    p += d;
  }
  if (strcmp(p, "Z") && strcmp(p, "+00:00")) return -1;
  if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
      tm.tm_min > 59 || tm.tm_sec > 60 || tm.tm_year < 1970)
    return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  struct tm want = tm;
  time_t t = timegm(&tm);
  if (t == (time_t)-1) return -1;
  /* a day the month does not have ("2026-02-31") is refused, not moved into March */
  if (tm.tm_mday != want.tm_mday || tm.tm_mon != want.tm_mon) return -1;
  *out = (long long)t;
  return 0;
}

static const char *base_name(const char *s) {
  const char *b = strrchr(s, '/');
  return b ? b + 1 : s;
}

bool jb_argv_prefix_is_interpreter(const json_t *prefix) {
  /* programs that run whatever their arguments say */
  static const char *const launchers[] = {
      "env", "xargs", "sudo", "doas", "nice", "nohup", "timeout", "time", "busybox", "exec", "eval",
      "su", "chroot", "setsid", "stdbuf", "ionice", "flock", "watch", "strace", "ltrace", "gdb",
      "command", "builtin", "unshare", "nsenter", "runuser",
      /* run a package or a program their arguments name, or a command per file found */
      "npx", "pnpx", "bunx", "uvx", "pipx", "find", "parallel", "script", NULL};
  /* shells and interpreters: any program given on their command line or in an option */
  static const char *const interpreters[] = {
      "sh",      "bash",       "dash",   "zsh",     "ksh",     "mksh", "csh",   "tcsh",
      "fish",    "ash",        "python", "python2", "python3", "pypy", "pypy3", "perl",
      "ruby",    "node",       "nodejs", "deno",    "bun",     "php",  "lua",   "luajit",
      "Rscript", "R",          "tclsh",  "wish",    "awk",     "gawk", "mawk",  "osascript",
      "pwsh",    "powershell", "java",   "jshell",  "irb",     "ghci", "guile", "racket",
      "sbcl",    "julia",      "expect", NULL};
  const char *p0 = json_string_value(json_array_get(prefix, 0));
  if (!p0) return true;
  const char *b = base_name(p0);
  char name[64];
  snprintf(name, sizeof name, "%s", b);
  /* python3.12, node18: the version suffix is the same interpreter */
  size_t k = strlen(name);
  while (k > 0 && (strchr("0123456789.", name[k - 1]))) k--;
  char stem[64];
  snprintf(stem, sizeof stem, "%.*s", (int)k, name);
  if (in_list(name, launchers) || in_list(stem, launchers)) return true;
  if (!in_list(name, interpreters) && !in_list(stem, interpreters)) return false;
  for (size_t i = 1; i < json_array_size(prefix); i++) {
    const char *a = json_string_value(json_array_get(prefix, i));
    if (a && a[0] != '-') return false; /* a script or program named: that one only */
  }
  return true;
}

/* Whether `glob` names every path: only "*" and "**" components. */
static bool glob_is_everything(const char *glob) {
  for (const char *c = glob; *c;) {
    size_t n = strcspn(c, "/");
    if (n > 0 && !((n == 1 && c[0] == '*') || (n == 2 && c[0] == '*' && c[1] == '*'))) return false;
    c += n;
    if (*c == '/') c++;
  }
  return true;
}

static bool valid_id(const char *id) {
  size_t n = strlen(id);
  return n >= 1 && n <= JB_RULE_ID_MAX &&
         strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

static json_t *new_id(void) {
  unsigned char r[6];
  char hex[13];
  randombytes_buf(r, sizeof r);
  sodium_bin2hex(hex, sizeof hex, r, sizeof r);
  char id[16];
  snprintf(id, sizeof id, "r-%s", hex);
  return json_string(id);
}

/* Whether `name` is an environment variable name: [A-Za-z_][A-Za-z0-9_]*, 1..128 bytes. */
static bool env_name_ok(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > 128 || (name[0] >= '0' && name[0] <= '9')) return false;
  return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

/* Checks the fields of an exact exec rule (argv, cwd, env, envSha256) of rule `in`: NULL when
 * they are right (or absent), else the message written to `msg`. */
static const char *check_exact(const json_t *in, bool is_exec, char *msg, size_t msize) {
  json_t *argv = json_object_get(in, "argv"), *cwd = json_object_get(in, "cwd");
  json_t *env = json_object_get(in, "env"), *sha = json_object_get(in, "envSha256");
  if (!argv && !cwd && !env && !sha) return NULL;
#define NO(...) return (fail(msg, msize, __VA_ARGS__), msg)
  if (!is_exec) NO("argv, cwd, env and envSha256 are for exec rules only");
  if (!argv) NO("cwd, env and envSha256 go with argv (an exact command)");
  if (json_object_get(in, "argvPrefix") || json_object_get(in, "command"))
    NO("give one of argv, argvPrefix or command");
  size_t n = json_array_size(argv), total = 0;
  if (!json_is_array(argv) || n == 0 || n > JB_RULE_EXACT_ARGV_MAX)
    NO("argv must be 1..%d strings", JB_RULE_EXACT_ARGV_MAX);
  for (size_t i = 0; i < n; i++) {
    json_t *a = json_array_get(argv, i);
    if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a))
      NO("argv[%zu] must be a string without NUL", i);
    total += json_string_length(a) + 1;
  }
  if (total > JB_RULE_EXACT_ARGV_BYTES)
    NO("argv takes %zu bytes; at most %d", total, JB_RULE_EXACT_ARGV_BYTES);
  if (cwd && (!json_is_string(cwd) || json_string_length(cwd) == 0 ||
              json_string_length(cwd) > JB_PATH_MAX ||
              strlen(json_string_value(cwd)) != json_string_length(cwd)))
    NO("cwd must be the working directory, 1..%d bytes", JB_PATH_MAX);
  size_t ne = json_array_size(env);
  if (env && (!json_is_array(env) || ne > JB_RULE_ENV_MAX))
    NO("env must be an array of at most %d variable names", JB_RULE_ENV_MAX);
  for (size_t i = 0; i < ne; i++) {
    const char *k = json_string_value(json_array_get(env, i));
    if (!k || !env_name_ok(k)) NO("env[%zu] must be a variable name", i);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(k, json_string_value(json_array_get(env, j)))) NO("env names \"%.64s\" twice", k);
  }
  const char *h = json_string_value(sha);
  if (sha && (!h || strlen(h) != 64 || strspn(h, "0123456789abcdef") != 64))
    NO("envSha256 must be 64 lowercase hex digits (jb_rule_env_sha256)");
  if (sha && ne == 0) NO("envSha256 goes with env (the names it covers)");
#undef NO
  return NULL;
}

json_t *jb_rule_check(const json_t *in, bool operator_rule, long long now, char *msg,
                      size_t msize) {
  if (!json_is_object(in)) return fail(msg, msize, "a rule is a JSON object");
  const char *k;
  json_t *v;
  json_object_foreach ((json_t *)in, k, v) {
    if (!in_list(k, rule_fields))
      return fail(msg, msize,
                  "unknown field \"%.64s\" (a rule has id, tool, path, argvPrefix, argv, cwd, env, "
                  "envSha256, command, maxBytes, effect, expiresAt, uses, locked, broad, "
                  "writable)",
                  k);
  }
  json_t *id = json_object_get(in, "id");
  if (id && (!json_is_string(id) || !valid_id(json_string_value(id))))
    return fail(msg, msize, "id must be 1..%d characters of A-Z a-z 0-9 _ . -", JB_RULE_ID_MAX);
  const char *tool = json_string_value(json_object_get(in, "tool"));
  if (!in_list(tool, rule_tools))
    return fail(msg, msize, "tool must be one of write, edit, mkdir, move, delete, exec");
  const char *effect = json_string_value(json_object_get(in, "effect"));
  if (!effect || (strcmp(effect, "allow") && strcmp(effect, "ask") && strcmp(effect, "deny")))
    return fail(msg, msize, "effect must be allow, ask or deny");
  bool is_exec = !strcmp(tool, "exec");
  json_t *path = json_object_get(in, "path");
  if (path) {
    if (!json_is_string(path)) return fail(msg, msize, "path must be a glob (a string)");
    size_t n = json_string_length(path);
    if (n == 0) return fail(msg, msize, "path must not be empty (leave it out to match any path)");
    if (n > JB_RULE_GLOB_MAX)
      return fail(msg, msize, "path is %zu bytes; a glob is at most %d", n, JB_RULE_GLOB_MAX);
    if (strlen(json_string_value(path)) != n) return fail(msg, msize, "path contains a NUL byte");
    if (strspn(json_string_value(path), "/") == n)
      return fail(msg, msize, "path \"/\" names nothing; leave it out to match any path");
    char why[JB_RULE_GLOB_MAX + 160];
    if (jb_glob_check(json_string_value(path), why, sizeof why) < 0)
      return fail(msg, msize, "path: %s", why);
  }
  json_t *argv = json_object_get(in, "argvPrefix");
  if (argv) {
    if (!is_exec) return fail(msg, msize, "argvPrefix is for exec rules only");
    size_t n = json_array_size(argv);
    if (!json_is_array(argv) || n == 0 || n > JB_RULE_ARGV_MAX)
      return fail(msg, msize, "argvPrefix must be 1..%d strings", JB_RULE_ARGV_MAX);
    for (size_t i = 0; i < n; i++) {
      json_t *a = json_array_get(argv, i);
      if (!json_is_string(a) || json_string_length(a) > 4096 ||
          strlen(json_string_value(a)) != json_string_length(a))
        return fail(msg, msize, "argvPrefix[%zu] must be a string of at most 4096 bytes", i);
    }
  }
  json_t *command = json_object_get(in, "command");
  if (command) {
    if (!is_exec) return fail(msg, msize, "command is for exec rules only");
    if (!json_is_string(command) || json_string_length(command) == 0 ||
        json_string_length(command) > 128 * 1024)
      return fail(msg, msize, "command must be the exact shell command text (1..131072 bytes)");
    if (argv) return fail(msg, msize, "give argvPrefix or command, not both");
  }
  if (check_exact(in, is_exec, msg, msize)) return NULL;
  json_t *exact = json_object_get(in, "argv");
  json_t *max = json_object_get(in, "maxBytes");
  if (max) {
    if (strcmp(tool, "write") && strcmp(tool, "edit"))
      return fail(msg, msize, "maxBytes is for write and edit rules only");
    if (!json_is_integer(max) || json_integer_value(max) < 0)
      return fail(msg, msize, "maxBytes must be an integer >= 0");
  }
  json_t *exp = json_object_get(in, "expiresAt");
  long long t = 0;
  if (exp && (!json_is_string(exp) || jb_rule_parse_time(json_string_value(exp), &t) < 0))
    return fail(msg, msize, "expiresAt must be an RFC 3339 UTC time (2026-12-03T10:00:00Z)");
  if (exp && t <= now) return fail(msg, msize, "expiresAt is in the past");
  json_t *uses = json_object_get(in, "uses");
  if (uses && (!json_is_integer(uses) || json_integer_value(uses) < 1 ||
               json_integer_value(uses) > 1000000))
    return fail(msg, msize, "uses must be an integer 1..1000000");
  json_t *locked = json_object_get(in, "locked"), *broad = json_object_get(in, "broad");
  if (locked && !json_is_boolean(locked)) return fail(msg, msize, "locked must be true or false");
  if (broad && !json_is_boolean(broad)) return fail(msg, msize, "broad must be true or false");
  json_t *writable = json_object_get(in, "writable");
  if (writable && !is_exec) return fail(msg, msize, "writable is for exec rules only");
  if (writable && !json_is_boolean(writable))
    return fail(msg, msize, "writable must be true or false");
  if (json_is_true(locked) && !operator_rule)
    return fail(msg, msize, "locked rules come from the operator's policy file only");
  bool everything = (!path || glob_is_everything(json_string_value(path))) &&
                    (!is_exec || (!argv && !command && !exact));
  if (!strcmp(effect, "allow") && everything && (is_exec || !strcmp(tool, "delete")) &&
      !json_is_true(broad))
    return fail(msg, msize,
                "an allow rule for %s that matches every %s op needs \"broad\": true "
                "(or narrow it with path%s)",
                tool, tool, is_exec ? ", argv, argvPrefix or command" : "");
  if (argv && !strcmp(effect, "allow") && jb_argv_prefix_is_interpreter(argv))
    return fail(msg, msize,
                "argvPrefix [\"%.40s\"…] starts a shell, an interpreter or a launcher: it would "
                "allow every command; name the script or program",
                json_string_value(json_array_get(argv, 0)));
  if (exact && !strcmp(effect, "allow") && jb_argv_prefix_is_interpreter(exact))
    return fail(msg, msize,
                "argv [\"%.40s\"…] starts a shell, an interpreter or a launcher with options "
                "only: name the script or program",
                json_string_value(json_array_get(exact, 0)));
  json_t *out = json_deep_copy(in);
  if (!out) return fail(msg, msize, "out of memory");
  if (!id) json_object_set_new(out, "id", new_id());
  if (exp) {
    char buf[32];
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_set_new(out, "expiresAt", json_string(buf));
  }
  return out;
}

json_t *jb_rules_check(const json_t *list, size_t existing, bool operator_rule, long long now,
                       char *msg, size_t msize) {
  if (!json_is_array(list)) return fail(msg, msize, "rules must be an array");
  size_t n = json_array_size(list);
  if (existing + n > JB_RULES_MAX)
    return fail(msg, msize, "%zu rules; a session has at most %d", existing + n, JB_RULES_MAX);
  json_t *out = json_array();
  if (!out) return fail(msg, msize, "out of memory");
  for (size_t i = 0; i < n; i++) {
    char m[400];
    json_t *r = jb_rule_check(json_array_get(list, i), operator_rule, now, m, sizeof m);
    if (!r) {
      json_decref(out);
      return fail(msg, msize, "rules[%zu]: %s", i, m);
    }
    const char *id = json_string_value(json_object_get(r, "id"));
    for (size_t j = 0; j < i; j++)
      if (!strcmp(id, json_string_value(json_object_get(json_array_get(out, j), "id")))) {
        fail(msg, msize, "rules[%zu]: id \"%s\" is given twice", i, id);
        json_decref(r);
        json_decref(out);
        return NULL;
      }
    json_array_append_new(out, r);
  }
  return out;
}

/* One rule as the matcher reads it: every field looked up and parsed once, the glob split into
 * its components (jb_glob_split), so that matching an op allocates nothing. */
struct crule {
  char *id, *tool, *glob_text, *command;
  enum jb_rule_effect effect;
  long long expires; /* seconds since the epoch; LLONG_MAX: no expiresAt */
  long long max_bytes; /* -1: no maxBytes */
  const char **glob; /* components into glob_text; NULL: no path */
  size_t nglob;
  bool casefold; /* a deny or an ask rule: case ignored */
  char **argv; /* argvPrefix, nargv items; NULL: none */
  size_t nargv;
  char **exact; /* argv (the whole command), nexact items; NULL: none */
  size_t nexact;
  char *cwd; /* with exact: the working directory, NULL: any */
  char **env; /* with exact: the variable names, nenv items */
  size_t nenv;
  char env_sha[65]; /* with exact: jb_rule_env_sha256 of the variables, "": not looked at */
  bool writable, has_uses;
};

struct jb_rules {
  size_t n;
  long long next_expiry;
  struct crule r[];
};

/* Fills `c` from normalized rule `rule`: 0, or -1 out of memory (c then holds what it got,
 * for crule_free). A path glob of an allow rule keeps case and names what is below a match
 * only when its last component is a plain name or "**" ("src" allows "src/a/b"; "*.c" allows
 * "a/b.c" but not "x.c/evil.sh"; "src/" "*" the files and directories right in src); a deny
 * or an ask rule matches as an exclusion glob does (case ignored, everything below named): it
 * errs towards asking. */
/* A new NULL-terminated copy of the strings of JSON array `a` (*n set to their number), or NULL
 * out of memory (*n then counts what was copied, for strv_free). */
static char **strv_copy(const json_t *a, size_t *n) {
  size_t m = json_array_size(a);
  char **v = calloc(m + 1, sizeof *v);
  *n = 0;
  if (!v) return NULL;
  for (size_t i = 0; i < m; i++, (*n)++) {
    const char *x = json_string_value(json_array_get(a, i));
    if (!(v[i] = strdup(x ? x : ""))) return v; /* caller sees v[i] NULL below n+1 */
  }
  return v;
}

static void strv_free(char **v, size_t n) {
  for (size_t i = 0; v && i < n; i++) free(v[i]);
  free(v);
}

/* Fills the exact-command fields of `c` from `rule`: 0, or -1 out of memory. */
static int crule_fill_exact(struct crule *c, const json_t *rule) {
  json_t *exact = json_object_get(rule, "argv");
  if (!exact) return 0;
  if (!(c->exact = strv_copy(exact, &c->nexact)) || c->nexact != json_array_size(exact)) return -1;
  json_t *env = json_object_get(rule, "env");
  if (!(c->env = strv_copy(env, &c->nenv)) || c->nenv != json_array_size(env)) return -1;
  const char *cwd = json_string_value(json_object_get(rule, "cwd"));
  if (cwd && !(c->cwd = strdup(cwd))) return -1;
  const char *sha = json_string_value(json_object_get(rule, "envSha256"));
  snprintf(c->env_sha, sizeof c->env_sha, "%s", sha ? sha : "");
  return 0;
}

static int crule_fill(struct crule *c, const json_t *rule) {
  memset(c, 0, sizeof *c);
  c->effect = jb_rule_effect_of(rule);
  c->expires = LLONG_MAX;
  c->max_bytes = -1;
  const char *id = json_string_value(json_object_get(rule, "id"));
  const char *tool = json_string_value(json_object_get(rule, "tool"));
  if (!(c->id = strdup(id ? id : "")) || !(c->tool = strdup(tool ? tool : ""))) return -1;
  const char *exp = json_string_value(json_object_get(rule, "expiresAt"));
  if (exp && jb_rule_parse_time(exp, &c->expires) < 0) c->expires = LLONG_MIN; /* unreadable */
  json_t *max = json_object_get(rule, "maxBytes");
  if (json_is_integer(max)) c->max_bytes = (long long)json_integer_value(max);
  c->writable = json_is_true(json_object_get(rule, "writable"));
  c->has_uses = json_object_get(rule, "uses") != NULL;
  const char *command = json_string_value(json_object_get(rule, "command"));
  if (command && !(c->command = strdup(command))) return -1;
  const char *glob = json_string_value(json_object_get(rule, "path"));
  if (glob) {
    bool below = true;
    c->casefold = c->effect != JB_RULE_ALLOW;
    if (!c->casefold) {
      const char *last = strrchr(glob, '/');
      last = last ? last + 1 : glob;
      below = !last[0] || !strcmp(last, "**") || !last[strcspn(last, "*?[\\")];
    }
    size_t gl = strlen(glob);
    if (!(c->glob_text = strdup(glob)) || !(c->glob = malloc((gl / 2 + 4) * sizeof *c->glob)))
      return -1;
    c->nglob = jb_glob_split(c->glob_text, c->glob, strchr(glob, '/') == NULL, below);
  }
  json_t *prefix = json_object_get(rule, "argvPrefix");
  if (prefix) {
    c->nargv = json_array_size(prefix);
    if (!(c->argv = calloc(c->nargv + 1, sizeof *c->argv))) return -1;
    for (size_t i = 0; i < c->nargv; i++) {
      const char *a = json_string_value(json_array_get(prefix, i));
      if (!(c->argv[i] = strdup(a ? a : ""))) return -1;
    }
  }
  return crule_fill_exact(c, rule);
}

static void crule_free(struct crule *c) {
  free(c->id);
  free(c->tool);
  free(c->glob_text);
  free(c->glob);
  free(c->command);
  for (size_t i = 0; c->argv && i < c->nargv; i++) free(c->argv[i]);
  free(c->argv);
  strv_free(c->exact, c->nexact);
  strv_free(c->env, c->nenv);
  free(c->cwd);
}

struct jb_rules *jb_rules_compile(const json_t *rules) {
  size_t n = json_array_size(rules);
  struct jb_rules *rs = calloc(1, sizeof *rs + n * sizeof rs->r[0]);
  if (!rs) return NULL;
  rs->next_expiry = LLONG_MAX;
  for (size_t i = 0; i < n; i++) {
    rs->n = i + 1;
    if (crule_fill(&rs->r[i], json_array_get(rules, i)) < 0) {
      jb_rules_free(rs);
      return NULL;
    }
    if (rs->r[i].expires < rs->next_expiry) rs->next_expiry = rs->r[i].expires;
  }
  return rs;
}

void jb_rules_free(struct jb_rules *rs) {
  if (!rs) return;
  for (size_t i = 0; i < rs->n; i++) crule_free(&rs->r[i]);
  free(rs);
}

size_t jb_rules_count(const struct jb_rules *rs) { return rs ? rs->n : 0; }

const char *jb_rules_id(const struct jb_rules *rs, size_t i) { return rs->r[i].id; }

enum jb_rule_effect jb_rules_effect(const struct jb_rules *rs, size_t i) { return rs->r[i].effect; }

bool jb_rules_counts_uses(const struct jb_rules *rs, size_t i) { return rs->r[i].has_uses; }

long long jb_rules_next_expiry(const struct jb_rules *rs) {
  return rs ? rs->next_expiry : LLONG_MAX;
}

/* A workspace path split into its components on the stack (paths are at most JB_PATH_MAX
 * bytes): `ok` false when there is none or it is longer. */
struct split_path {
  bool ok;
  size_t n;
  char buf[JB_PATH_MAX + 1];
  const char *v[JB_PATH_MAX / 2 + 3];
};

static void split_path(struct split_path *sp, const char *path) {
  sp->ok = false;
  sp->n = 0;
  if (!path) return;
  size_t len = strlen(path);
  if (len > JB_PATH_MAX) return;
  memcpy(sp->buf, path, len + 1);
  sp->n = jb_glob_split(sp->buf, sp->v, false, false);
  sp->ok = true;
}

/* Whether the split path `sp` is named by rule `c`'s glob. A path that could not be split
 * (longer than any workspace path) is named by a deny or an ask rule and by no allow rule. */
static bool glob_names(const struct crule *c, const struct split_path *sp) {
  if (!sp->ok) return c->effect != JB_RULE_ALLOW;
  return jb_glob_components_match(c->glob, c->nglob, sp->v, sp->n, c->casefold);
}

int jb_rule_env_sha256(const json_t *env, char hex[65]) {
  size_t n = json_object_size(env);
  const char **keys = calloc(n + 1, sizeof *keys);
  if (!keys) return -1;
  size_t k = 0;
  const char *name;
  json_t *v;
  json_object_foreach ((json_t *)env, name, v) keys[k++] = name;
  qsort(keys, k, sizeof *keys, cmp_str);
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  for (size_t i = 0; i < k; i++) {
    json_t *val = json_object_get(env, keys[i]);
    crypto_hash_sha256_update(&st, (const unsigned char *)keys[i], strlen(keys[i]) + 1);
    crypto_hash_sha256_update(&st, (const unsigned char *)(json_string_value(val) ?: ""),
                              json_string_length(val) + 1);
  }
  free(keys);
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&st, h);
  sodium_bin2hex(hex, 65, h, sizeof h);
  return 0;
}

/* Sorts JSON array `a` of strings in place (byte order). */
static void qsort_json_strings(json_t *a) {
  size_t n = json_array_size(a);
  for (size_t i = 1; i < n; i++) /* insertion sort: at most JB_RULE_ENV_MAX names */
    for (size_t j = i; j > 0 && strcmp(json_string_value(json_array_get(a, j - 1)),
                                       json_string_value(json_array_get(a, j))) > 0;
         j--) {
      json_t *x = json_incref(json_array_get(a, j));
      json_array_remove(a, j);
      json_array_insert_new(a, j - 1, x);
    }
}

/* Whether op `op` is the exact command of rule `c` (c->exact set): the same argv, item for
 * item; for an allow rule also the same working directory (when the rule names one), the same
 * variable names and, when the rule has envSha256, the same values. A deny or an ask rule
 * looks at argv alone: it errs towards matching. */
static bool exact_matches(const struct crule *c, const struct jb_rule_op *op) {
  if (!op->argv || op->command || json_array_size(op->argv) != c->nexact) return false;
  for (size_t i = 0; i < c->nexact; i++) {
    json_t *a = json_array_get(op->argv, i);
    if (!json_is_string(a) || json_string_length(a) != strlen(c->exact[i]) ||
        strcmp(json_string_value(a), c->exact[i]))
      return false;
  }
  if (c->effect != JB_RULE_ALLOW) return true;
  if (op->stdin_data) return false;
  if (c->cwd && strcmp(c->cwd, op->path ? op->path : ".")) return false;
  if (json_object_size(op->env_vars) != c->nenv || (op->env && !op->env_vars)) return false;
  for (size_t i = 0; i < c->nenv; i++)
    if (!json_object_get(op->env_vars, c->env[i])) return false;
  if (c->env_sha[0]) {
    char hex[65];
    if (jb_rule_env_sha256(op->env_vars, hex) < 0 || strcmp(hex, c->env_sha)) return false;
  }
  return true;
}

static bool crule_matches(const struct crule *c, const struct jb_rule_op *op,
                          const struct split_path *src, const struct split_path *dst,
                          long long now) {
  if (!op->tool || strcmp(c->tool, op->tool)) return false;
  if (c->expires <= now) return false;
  if (c->glob) {
    bool s = op->path && glob_names(c, src);
    bool d = op->dest && glob_names(c, dst);
    /* a move: an allow needs both ends; a deny or an ask holds either end (moving a file out
     * of a denied directory, or into it, is what the deny is about) */
    if (c->effect == JB_RULE_ALLOW ? !s || (op->dest && !d) : !s && !d) return false;
  }
  if (c->max_bytes >= 0 && (op->size < 0 || op->size > c->max_bytes)) return false;
  if (c->effect == JB_RULE_ALLOW) {
    /* PATH=./bin, LD_PRELOAD, MAKEFLAGS=--eval…: the variables choose what the named program
     * runs; allowing the program is not allowing that */
    if ((c->argv || c->command) && op->env) return false;
    /* an exact rule: the variables it names, and only those (exact_matches) */
    /* allowing a command to read the workspace is not allowing it to change it */
    if (op->writable && !c->writable) return false;
  }
  if (c->argv) {
    if (!op->argv || json_array_size(op->argv) < c->nargv) return false;
    for (size_t i = 0; i < c->nargv; i++) {
      const char *a = json_string_value(json_array_get(op->argv, i));
      if (!a || strcmp(a, c->argv[i])) return false;
    }
  }
  if (c->command && (!op->command || strcmp(c->command, op->command))) return false;
  if (c->exact && !exact_matches(c, op)) return false;
  return true;
}

long jb_rules_match(const struct jb_rules *rs, const struct jb_rule_op *op, long long now) {
  if (!rs || rs->n == 0) return -1;
  struct split_path src, dst;
  split_path(&src, op->path);
  split_path(&dst, op->dest);
  for (size_t i = 0; i < rs->n; i++)
    if (crule_matches(&rs->r[i], op, &src, &dst, now)) return (long)i;
  return -1;
}

bool jb_rule_matches(const json_t *rule, const struct jb_rule_op *op, long long now) {
  json_t *one = json_pack("[O]", (json_t *)rule);
  struct jb_rules *rs = one ? jb_rules_compile(one) : NULL;
  json_decref(one);
  /* out of memory: as if an ask rule matched, a deny or an ask rule errs towards asking */
  bool hit = rs ? jb_rules_match(rs, op, now) == 0 : jb_rule_effect_of(rule) != JB_RULE_ALLOW;
  jb_rules_free(rs);
  return hit;
}

const json_t *jb_rules_first_match(const json_t *rules, const struct jb_rule_op *op,
                                   long long now) {
  struct jb_rules *rs = jb_rules_compile(rules);
  if (!rs) { /* out of memory: one rule at a time */
    size_t i;
    json_t *r;
    json_array_foreach (rules, i, r)
      if (jb_rule_matches(r, op, now)) return r;
    return NULL;
  }
  long i = jb_rules_match(rs, op, now);
  jb_rules_free(rs);
  return i < 0 ? NULL : json_array_get(rules, (size_t)i);
}

/* Appends the `n` bytes at `s` to the glob `out` (room `cap`, length *len) as literal text:
 * fnmatch(3)'s special characters * ? [ ] \ each get a backslash, so that a path naming a
 * directory "*" or "[a-z]" stands for that directory alone. false when it does not fit. */
static bool glob_literal(char *out, size_t cap, size_t *len, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    bool special = strchr("*?[]\\", s[i]) != NULL && s[i] != '\0';
    if (*len + (special ? 2 : 1) >= cap) return false;
    if (special) out[(*len)++] = '\\';
    out[(*len)++] = s[i];
  }
  out[*len] = '\0';
  return true;
}

/* Adds to exec rule `r` the exact command of `op`: argv whole, cwd, the names of its variables
 * and their jb_rule_env_sha256. 0, or -1 out of memory. */
static int similar_exact(json_t *r, const struct jb_rule_op *op) {
  json_t *names = json_array();
  if (!names || json_object_set_new(r, "argv", json_deep_copy(op->argv)) < 0 ||
      json_object_set_new(r, "cwd", json_string(op->path ? op->path : ".")) < 0) {
    json_decref(names);
    return -1;
  }
  const char *k;
  json_t *v;
  json_object_foreach ((json_t *)op->env_vars, k, v) json_array_append_new(names, json_string(k));
  if (json_array_size(names) == 0) {
    json_decref(names);
    return 0;
  }
  qsort_json_strings(names);
  char hex[65];
  if (jb_rule_env_sha256(op->env_vars, hex) < 0) {
    json_decref(names);
    return -1;
  }
  if (json_object_set_new(r, "env", names) < 0 ||
      json_object_set_new(r, "envSha256", json_string(hex)) < 0)
    return -1;
  return 0;
}

json_t *jb_rule_similar(const struct jb_rule_op *op, const char *key, char *msg, size_t msize) {
  if (!op->tool || !in_list(op->tool, rule_tools))
    return fail(msg, msize, "only a write, edit, mkdir, move, delete or exec can allow similar");
  json_t *r = json_pack("{s:s,s:s}", "tool", op->tool, "effect", "allow");
  if (!r) return fail(msg, msize, "out of memory");
  /* an approved writable exec: the rule allows the same kind of command, writable ones too */
  if (!strcmp(op->tool, "exec") && op->writable) json_object_set_new(r, "writable", json_true());
  char glob[JB_RULE_GLOB_MAX + 1];
  const char *path = op->path ? op->path : "";
  const char *slash = strrchr(path, '/');
  if (key && !strcmp(key, "directory")) {
    if (!strcmp(op->tool, "exec")) {
      json_decref(r);
      return fail(msg, msize, "allowSimilar \"directory\" is for file ops; use \"command\"");
    }
    if (!slash) {
      json_decref(r);
      return fail(msg, msize,
                  "%.200s is at the workspace root: a rule for its directory would allow every "
                  "path; use \"extension\" or \"session\"",
                  path);
    }
    size_t gl = 0;
    if (!glob_literal(glob, JB_RULE_GLOB_MAX - 2, &gl, path, (size_t)(slash - path))) {
      json_decref(r);
      return fail(msg, msize, "the directory is too long for a rule");
    }
    memcpy(glob + gl, "/**", 4);
    json_object_set_new(r, "path", json_string(glob));
  } else if (key && !strcmp(key, "extension")) {
    const char *name = slash ? slash + 1 : path;
    const char *dot = strrchr(name, '.');
    if (!strcmp(op->tool, "exec") || !dot || dot == name || !dot[1]) {
      json_decref(r);
      return fail(msg, msize, "%.200s has no extension to allow similar by", path);
    }
    /* anchored at the root when the file is there: the workspace root's files */
    size_t gl = 0;
    if (!glob_literal(glob, JB_RULE_GLOB_MAX + 1, &gl, path, slash ? (size_t)(slash - path) : 0) ||
        gl + 6 > JB_RULE_GLOB_MAX) {
      json_decref(r);
      return fail(msg, msize, "the path is too long for a rule");
    }
    memcpy(glob + gl, slash ? "/**/*" : "/*", slash ? 6 : 3);
    gl += slash ? 5 : 2;
    if (!glob_literal(glob, JB_RULE_GLOB_MAX + 1, &gl, dot, strlen(dot))) {
      json_decref(r);
      return fail(msg, msize, "the path is too long for a rule");
    }
    json_object_set_new(r, "path", json_string(glob));
  } else if (key && !strcmp(key, "command")) {
    if (strcmp(op->tool, "exec") || !op->argv || op->command) {
      json_decref(r);
      return fail(msg, msize,
                  "allowSimilar \"command\" is for an exec with argv (a shell command runs a "
                  "shell, which would allow every command)");
    }
    if (op->stdin_data) {
      json_decref(r);
      return fail(msg, msize,
                  "allowSimilar \"command\" is for an exec without stdin (its input can be a "
                  "program, as in make -f /dev/stdin): approve it alone");
    }
    /* the refusals of the prefix form stand: a shell or an interpreter with an option first
     * (bash -c, python3 -c) runs code from its arguments, a launcher another program */
    json_t *head = json_array();
    for (size_t i = 0; head && i < 2 && i < json_array_size(op->argv); i++)
      json_array_append(head, json_array_get(op->argv, i));
    bool interp = !head || jb_argv_prefix_is_interpreter(head);
    json_decref(head);
    if (interp) {
      json_decref(r);
      return fail(msg, msize,
                  "allowSimilar \"command\": \"%.40s\" is a shell, an interpreter or a "
                  "launcher given code or a program in its arguments; approve it alone",
                  json_string_value(json_array_get(op->argv, 0)));
    }
    /* the command the buyer saw, whole: GNU tools read options anywhere on the line, so a
     * prefix would allow "make check --eval=…" after an approved "make check" */
    if (similar_exact(r, op) < 0) {
      json_decref(r);
      return fail(msg, msize, "out of memory");
    }
  } else if (key && !strcmp(key, "session")) {
    json_object_set_new(r, "broad", json_true());
  } else {
    json_decref(r);
    return fail(msg, msize, "allowSimilar must be directory, extension, command or session");
  }
  char m[400];
  json_t *out = jb_rule_check(r, false, 0, m, sizeof m);
  json_decref(r);
  if (!out) return fail(msg, msize, "%s", m);
  return out;
}

json_t *jb_policy_file_parse(const char *text, size_t len, const char *name, long long now,
                             char *msg, size_t msize) {
  json_t *out = json_array();
  if (!out) return fail(msg, msize, "%s: out of memory", name);
  size_t lineno = 0;
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
    const char *line = text + at;
    at += n + (nl ? 1 : 0);
    lineno++;
    size_t b = 0;
    while (b < n && (line[b] == ' ' || line[b] == '\t' || line[b] == '\r')) b++;
    if (b == n || line[b] == '#') continue;
    json_error_t je;
    json_t *in = json_loadb(line, n, JSON_REJECT_DUPLICATES, &je);
    char m[400];
    if (!in) {
      fail(msg, msize, "%s:%zu: not a JSON object: %s (column %d)", name, lineno, je.text,
           je.column);
      json_decref(out);
      return NULL;
    }
    json_t *r = json_object_get(in, "uses")
                    ? fail(m, sizeof m, "uses counts ops of one session: not in the policy file")
                    : jb_rule_check(in, true, now, m, sizeof m);
    json_decref(in);
    if (!r) {
      fail(msg, msize, "%s:%zu: %s", name, lineno, m);
      json_decref(out);
      return NULL;
    }
    const char *id = json_string_value(json_object_get(r, "id"));
    size_t i;
    json_t *x;
    json_array_foreach (out, i, x)
      if (!strcmp(id, json_string_value(json_object_get(x, "id")))) {
        fail(msg, msize, "%s:%zu: id \"%s\" is given twice", name, lineno, id);
        json_decref(r);
        json_decref(out);
        return NULL;
      }
    if (json_array_size(out) == JB_RULES_MAX) {
      fail(msg, msize, "%s:%zu: more than %d rules", name, lineno, JB_RULES_MAX);
      json_decref(r);
      json_decref(out);
      return NULL;
    }
    json_array_append_new(out, r);
  }
  return out;
}
