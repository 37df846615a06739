/* op_checks.c — what jailboxd decides on an agent's tool call before anything runs (stages in
 * api/core/op_call.h): the call's arguments (decode); its refusal for the session's state,
 * the path's syntax, exclusions and pre-scan flags, each refusal an audit entry and a path
 * that tries to leave the workspace an escape signal (refuse if); the shim's arguments and a
 * write's content, decoded, hashed and scanned (prepare). */
#define _GNU_SOURCE
#include "api/core/op_call.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/batch.h"
#include "api/core/escape.h"
#include "lib/scan.h"
#include "db/audit_store.h"
#include "db/events.h"
#include "lib/log.h"
#include "server/app.h"

/* ---- decode ---- */

enum arg_kind {
  ARG_PATH, /* a workspace path: a string (its rules are checked in refuse_if) */
  ARG_STRING, /* any string (write's content: its size is checked when it is decoded) */
  ARG_PATTERN, /* a glob or regex: a non-empty string of at most OP_PATTERN_MAX bytes */
  ARG_INT, /* an integer in [min, max] */
  ARG_BOOL,
  ARG_ENCODING, /* "utf-8" or "base64" */
  ARG_PATHS, /* read_many: 1..OP_READ_MANY_MAX paths */
  ARG_EDITS, /* edit: 1..OP_EDITS_MAX {oldText, newText, replaceAll?} */
  ARG_SUMMARY, /* done: a string of at most 4096 bytes */
  ARG_ARGV, /* exec: 1..OP_EXEC_ARGV_MAX strings without NUL, OP_EXEC_ARGS_BYTES together */
  ARG_COMMAND, /* exec: shell text, non-empty, without NUL, at most OP_EXEC_ARGS_BYTES */
  ARG_ENV, /* exec: {NAME: value}, names allowed (op_exec_env_allowed) */
  ARG_STDIN, /* exec: a string of at most OP_EXEC_STDIN_MAX bytes */
  ARG_BATCH, /* a batch's name (op_batch_name_ok) */
};

struct arg_spec {
  const char *name;
  enum arg_kind kind;
  bool required;
  long long min, max; /* ARG_INT */
};

#define INT_ANY 9007199254740991LL /* 2^53 - 1: what every JSON reader holds exactly */
#define END \
  { NULL, 0, false, 0, 0 }

static const struct arg_spec spec_read[] = {{"path", ARG_PATH, true, 0, 0},
                                            {"offset", ARG_INT, false, 0, INT_ANY},
                                            {"limit", ARG_INT, false, 1, INT_ANY},
                                            {"head", ARG_INT, false, 1, INT_ANY},
                                            {"tail", ARG_INT, false, 1, INT_ANY},
                                            {"byteOffset", ARG_INT, false, 0, INT_ANY},
                                            {"byteLength", ARG_INT, false, 0, INT_ANY},
                                            END};
static const struct arg_spec spec_read_many[] = {{"paths", ARG_PATHS, true, 0, 0}, END};
static const struct arg_spec spec_write[] = {
    {"path", ARG_PATH, true, 0, 0},          {"content", ARG_STRING, true, 0, 0},
    {"encoding", ARG_ENCODING, false, 0, 0}, {"createParents", ARG_BOOL, false, 0, 0},
    {"changeset", ARG_BATCH, false, 0, 0},   END};
static const struct arg_spec spec_edit[] = {{"path", ARG_PATH, true, 0, 0},
                                            {"edits", ARG_EDITS, true, 0, 0},
                                            {"dryRun", ARG_BOOL, false, 0, 0},
                                            {"changeset", ARG_BATCH, false, 0, 0},
                                            END};
static const struct arg_spec spec_list[] = {{"path", ARG_PATH, false, 0, 0},
                                            {"recursive", ARG_BOOL, false, 0, 0},
                                            {"depth", ARG_INT, false, 1, 64},
                                            END};
static const struct arg_spec spec_find[] = {
    {"pattern", ARG_PATTERN, true, 0, 0}, {"path", ARG_PATH, false, 0, 0}, END};
static const struct arg_spec spec_search[] = {{"pattern", ARG_PATTERN, true, 0, 0},
                                              {"path", ARG_PATH, false, 0, 0},
                                              {"glob", ARG_PATTERN, false, 0, 0},
                                              {"maxMatches", ARG_INT, false, 1, 5000},
                                              END};
static const struct arg_spec spec_stat[] = {
    {"path", ARG_PATH, true, 0, 0}, {"sha256", ARG_BOOL, false, 0, 0}, END};
static const struct arg_spec spec_mkdir[] = {
    {"path", ARG_PATH, true, 0, 0}, {"changeset", ARG_BATCH, false, 0, 0}, END};
static const struct arg_spec spec_move[] = {
    {"source", ARG_PATH, true, 0, 0},      {"destination", ARG_PATH, true, 0, 0},
    {"overwrite", ARG_BOOL, false, 0, 0},  {"createParents", ARG_BOOL, false, 0, 0},
    {"changeset", ARG_BATCH, false, 0, 0}, END};
static const struct arg_spec spec_delete[] = {{"path", ARG_PATH, true, 0, 0},
                                              {"recursive", ARG_BOOL, false, 0, 0},
                                              {"changeset", ARG_BATCH, false, 0, 0},
                                              END};
static const struct arg_spec spec_done[] = {{"summary", ARG_SUMMARY, false, 0, 0}, END};
/* timeoutSec's ceiling here is the setting's; op_check_args holds it to the setting */
static const struct arg_spec spec_exec[] = {
    {"argv", ARG_ARGV, false, 0, 0},
    {"command", ARG_COMMAND, false, 0, 0},
    {"cwd", ARG_PATH, false, 0, 0},
    {"env", ARG_ENV, false, 0, 0},
    {"stdin", ARG_STDIN, false, 0, 0},
    {"timeoutSec", ARG_INT, false, 1, 86400},
    {"maxOutputBytes", ARG_INT, false, 0, OP_EXEC_OUTPUT_MAX},
    {"writable", ARG_BOOL, false, 0, 0},
    {"memoryMiB", ARG_INT, false, 16, 65536},
    END};

static const struct arg_spec *const specs[JB_TOOL_COUNT] = {
    [JB_TOOL_READ] = spec_read,           [JB_TOOL_WRITE] = spec_write,
    [JB_TOOL_LIST] = spec_list,           [JB_TOOL_DONE] = spec_done,
    [JB_TOOL_READ_MANY] = spec_read_many, [JB_TOOL_EDIT] = spec_edit,
    [JB_TOOL_FIND] = spec_find,           [JB_TOOL_SEARCH] = spec_search,
    [JB_TOOL_STAT] = spec_stat,           [JB_TOOL_MKDIR] = spec_mkdir,
    [JB_TOOL_MOVE] = spec_move,           [JB_TOOL_DELETE] = spec_delete,
    [JB_TOOL_EXEC] = spec_exec,
};

static _Atomic long exec_max_timeout_s = OP_EXEC_TIMEOUT_MAX_DEFAULT;

void jb_op_set_exec_max_timeout(long seconds) {
  if (seconds >= 1 && seconds <= 86400) exec_max_timeout_s = seconds;
}

/* The environment names an exec may set (whole names, or a prefix ending in '_'), and why
 * each is safe: its value never chooses a program, a library, a module, a configuration file
 * or a directory that code is loaded from. Every other name is refused unless the operator
 * adds it (JAILBOX_EXEC_ENV_ALLOW): GIT_DIR picks the repository whose config runs hooks and
 * pagers, CC, CXX, LD, CONFIG_SHELL, CONFIG_SITE, RUSTC_WRAPPER, GOFLAGS=-toolexec... pick what
 * the build runs, and no deny-list keeps up with them. NODE_ENV is not here: frameworks and
 * config loaders choose files to load by it (config/${NODE_ENV}.js, .env.${NODE_ENV}). The
 * jail's base environment (PATH, HOME, TERM=dumb...) is fixed: LANG, LC_* and TERM here
 * replace its values with the agent's. */
static const struct {
  const char *name;
  bool prefix;
} env_allow[] = {
    {"LANG", false}, /* locale names: data from the system's locale directory (LOCPATH, */
    {"LANGUAGE", false}, /* which would move it, is not allowed); a name with '/' is */
    {"LC_", true}, /* refused below, so no locale file is read from the workspace */
    {"TZ", false}, /* a time zone: a tzfile is data */
    {"TERM", false}, /* a terminfo entry from the system's database (TERMINFO is not allowed) */
    {"COLORTERM", false}, /* colour flags */
    {"NO_COLOR", false},
    {"FORCE_COLOR", false},
    {"CLICOLOR", false},
    {"CLICOLOR_FORCE", false},
    {"CARGO_TERM_COLOR", false},
    {"CI", false}, /* "running under CI": non-interactive, no prompts */
    {"PYTHONUNBUFFERED", false}, /* flags: unbuffered output, no .pyc written, tracebacks */
    {"PYTHONDONTWRITEBYTECODE", false},
    {"PYTHONFAULTHANDLER", false},
    {"RUST_BACKTRACE", false}, /* backtraces on panic */
    {"RUST_LOG", false}, /* a log filter (env_logger, tracing): which messages print */
    {"CTEST_OUTPUT_ON_FAILURE", false}, /* verbosity flags */
    {"VERBOSE", false},
};

/* The names the operator adds (JAILBOX_EXEC_ENV_ALLOW): "NAME" whole, "NAME*" a prefix; set
 * once at start, before any call is decoded; NULL: none. */
static char **env_extra;
static size_t env_extra_n;

static bool env_name_ok(const char *k, size_t n) {
  bool good = n > 0 && n <= 128 && !(k[0] >= '0' && k[0] <= '9');
  for (size_t i = 0; good && i < n; i++)
    good = (k[i] >= 'A' && k[i] <= 'Z') || (k[i] >= 'a' && k[i] <= 'z') ||
           (k[i] >= '0' && k[i] <= '9') || k[i] == '_';
  return good;
}

int jb_op_set_exec_env_allow(const char *list, char *msg, size_t msize) {
  char **v = NULL;
  size_t n = 0;
  for (const char *p = list ? list : ""; *p;) {
    p += strspn(p, " ,");
    size_t l = strcspn(p, " ,");
    if (l == 0) break;
    bool star = p[l - 1] == '*';
    if (!env_name_ok(p, l - star) || (l - star >= 8 && !strncmp(p, "JAILBOX_", 8))) {
      snprintf(msg, msize,
               "JAILBOX_EXEC_ENV_ALLOW: \"%.*s\" is not a variable name (NAME or NAME*; "
               "JAILBOX_* are jailbox's own)",
               (int)(l > 64 ? 64 : l), p);
      goto fail;
    }
    char **w = realloc(v, (n + 1) * sizeof *v);
    if (!w || !(w[n] = strndup(p, l))) {
      if (w) v = w;
      snprintf(msg, msize, "out of memory");
      goto fail;
    }
    v = w;
    n++;
    p += l;
  }
  for (size_t i = 0; i < env_extra_n; i++) free(env_extra[i]);
  free(env_extra);
  env_extra = v;
  env_extra_n = n;
  return 0;
fail:
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
  return -1;
}

bool op_exec_env_allowed(const char *name) {
  if (!strncmp(name, "JAILBOX_", 8)) return false; /* ours, whatever the operator says */
  for (size_t i = 0; i < sizeof env_allow / sizeof env_allow[0]; i++) {
    size_t n = strlen(env_allow[i].name);
    if (env_allow[i].prefix ? !strncmp(name, env_allow[i].name, n)
                            : !strcmp(name, env_allow[i].name))
      return true;
  }
  for (size_t i = 0; i < env_extra_n; i++) {
    size_t n = strlen(env_extra[i]);
    if (env_extra[i][n - 1] == '*' ? !strncmp(name, env_extra[i], n - 1)
                                   : !strcmp(name, env_extra[i]))
      return true;
  }
  return false;
}

/* The bytes a variable's value may hold: letters, digits and . , : + = @ % / _ - and space.
 * Nothing a shell, make or a config reader expands or splits on ($, `, (, ), ;, |, &, <, >,
 * quotes, backslash, newline …): an allowed name is read by tools that expand what it holds —
 * make turns every variable of the environment into a make variable, so VERBOSE='$(shell …)'
 * runs wherever a Makefile says $(VERBOSE) — and the buyer must see in the value all that it
 * does. */
static bool env_value_chars_ok(const char *v) {
  for (; *v; v++) {
    unsigned char c = (unsigned char)*v;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          strchr(".,:+=@%/_- ", c)))
      return false;
  }
  return true;
}

/* Whether `value` of variable `name` may be set: plain characters only (env_value_chars_ok),
 * and a locale name without '/' (glibc reads a locale named by a path from that path). */
static bool env_value_ok(const char *name, const char *value) {
  bool locale = !strcmp(name, "LANG") || !strcmp(name, "LANGUAGE") || !strncmp(name, "LC_", 3);
  return env_value_chars_ok(value) && (!locale || !strchr(value, '/'));
}

#define BAD(c, ...)                    \
  do {                                 \
    *code = (c);                       \
    snprintf(msg, msize, __VA_ARGS__); \
    return false;                      \
  } while (0)

/* edit's list: each {oldText, newText, replaceAll?}, texts of at most OP_FILE_MAX bytes. */
static bool check_edits(json_t *v, int *code, char *msg, size_t msize) {
  if (!json_is_array(v) || json_array_size(v) == 0)
    BAD(JB_MCP_INVALID, "'edits' must be a non-empty array of {oldText, newText, replaceAll?}");
  if (json_array_size(v) > OP_EDITS_MAX)
    BAD(JB_MCP_INVALID, "'edits' has %zu entries; at most %d per call", json_array_size(v),
        OP_EDITS_MAX);
  size_t i;
  json_t *e;
  json_array_foreach (v, i, e) {
    if (!json_is_object(e)) BAD(JB_MCP_INVALID, "edits[%zu] must be an object", i);
    const char *key;
    json_t *x;
    json_object_foreach (e, key, x) {
      if (!strcmp(key, "oldText") || !strcmp(key, "newText")) {
        if (!json_is_string(x)) BAD(JB_MCP_INVALID, "edits[%zu].%s must be a string", i, key);
        if (json_string_length(x) > OP_FILE_MAX)
          BAD(JB_MCP_TOO_LARGE, "edits[%zu].%s is over %d bytes", i, key, OP_FILE_MAX);
      } else if (!strcmp(key, "replaceAll")) {
        if (!json_is_boolean(x)) BAD(JB_MCP_INVALID, "edits[%zu].replaceAll must be a boolean", i);
      } else {
        BAD(JB_MCP_INVALID, "unknown key '%.64s' in edits[%zu]", key, i);
      }
    }
    if (!json_is_string(json_object_get(e, "oldText")) ||
        !json_is_string(json_object_get(e, "newText")))
      BAD(JB_MCP_INVALID, "edits[%zu] needs oldText and newText", i);
    if (json_string_length(json_object_get(e, "oldText")) == 0)
      BAD(JB_MCP_INVALID, "edits[%zu].oldText is empty; give the exact text to replace", i);
  }
  return true;
}

/* A string a command gets: no NUL inside (execve cannot pass one). */
static bool nul_free(json_t *v) { return strlen(json_string_value(v)) == json_string_length(v); }

/* exec's argv: 1..OP_EXEC_ARGV_MAX strings, the first non-empty, none with a NUL, together at
 * most OP_EXEC_ARGS_BYTES. */
static bool check_argv(json_t *v, int *code, char *msg, size_t msize) {
  if (!json_is_array(v) || json_array_size(v) == 0)
    BAD(JB_MCP_INVALID, "'argv' must be a non-empty array of strings (the program first)");
  if (json_array_size(v) > OP_EXEC_ARGV_MAX)
    BAD(JB_MCP_INVALID, "'argv' has %zu items; at most %d", json_array_size(v), OP_EXEC_ARGV_MAX);
  size_t i, total = 0;
  json_t *a;
  json_array_foreach (v, i, a) {
    if (!json_is_string(a)) BAD(JB_MCP_INVALID, "argv[%zu] must be a string", i);
    if (!nul_free(a)) BAD(JB_MCP_INVALID, "argv[%zu] contains a NUL character", i);
    total += json_string_length(a) + 1;
  }
  if (json_string_length(json_array_get(v, 0)) == 0)
    BAD(JB_MCP_INVALID, "argv[0] is empty; give the program to run");
  if (total > OP_EXEC_ARGS_BYTES)
    BAD(JB_MCP_TOO_LARGE, "'argv' takes %zu bytes; at most %d", total, OP_EXEC_ARGS_BYTES);
  return true;
}

/* exec's env: at most OP_EXEC_ENV_MAX names of [A-Za-z_][A-Za-z0-9_]* (128 bytes at most),
 * each allowed (op_exec_env_allowed; else JB_MCP_DENIED), values strings without NUL (a
 * locale's without '/': JB_MCP_DENIED), names and values together at most
 * OP_EXEC_ARGS_BYTES. */
static bool check_env(json_t *v, int *code, char *msg, size_t msize) {
  if (!json_is_object(v)) BAD(JB_MCP_INVALID, "'env' must be an object of NAME: value strings");
  if (json_object_size(v) > OP_EXEC_ENV_MAX)
    BAD(JB_MCP_INVALID, "'env' has %zu variables; at most %d", json_object_size(v),
        OP_EXEC_ENV_MAX);
  size_t total = 0;
  const char *k;
  json_t *x;
  json_object_foreach (v, k, x) {
    size_t n = strlen(k);
    if (!env_name_ok(k, n))
      BAD(JB_MCP_INVALID,
          "env name '%.64s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*, 128 bytes at most)", k);
    if (!op_exec_env_allowed(k))
      BAD(JB_MCP_DENIED,
          "env variable '%.128s' is not allowed: an exec may set locale, colour, CI and "
          "debug variables (LANG, LC_*, TZ, TERM, NO_COLOR, FORCE_COLOR, CI, "
          "PYTHONUNBUFFERED, RUST_BACKTRACE, …) and the ones the operator allows "
          "(JAILBOX_EXEC_ENV_ALLOW); others may choose what runs",
          k);
    if (!json_is_string(x)) BAD(JB_MCP_INVALID, "env '%.128s' must be a string", k);
    if (!nul_free(x)) BAD(JB_MCP_INVALID, "env '%.128s' contains a NUL character", k);
    if (!env_value_ok(k, json_string_value(x)))
      BAD(JB_MCP_DENIED,
          "env '%.128s': a value holds letters, digits, space and . , : + = @ %% / _ - only%s", k,
          env_value_chars_ok(json_string_value(x)) ? " (a locale name, without '/')" : "");
    total += n + json_string_length(x) + 2;
  }
  if (total > OP_EXEC_ARGS_BYTES)
    BAD(JB_MCP_TOO_LARGE, "'env' takes %zu bytes; at most %d", total, OP_EXEC_ARGS_BYTES);
  return true;
}

static bool check_arg(const struct arg_spec *sp, json_t *v, int *code, char *msg, size_t msize) {
  const char *n = sp->name;
  switch (sp->kind) {
    case ARG_PATH:
      if (!json_is_string(v)) BAD(JB_MCP_INVALID, "'%s' must be a string", n);
      return true;
    case ARG_STRING:
      if (!json_is_string(v)) BAD(JB_MCP_INVALID, "'%s' must be a string", n);
      return true;
    case ARG_PATTERN:
      if (!json_is_string(v) || json_string_length(v) == 0)
        BAD(JB_MCP_INVALID, "'%s' must be a non-empty string", n);
      if (json_string_length(v) > OP_PATTERN_MAX)
        BAD(JB_MCP_INVALID, "'%s' is over %d bytes", n, OP_PATTERN_MAX);
      return true;
    case ARG_INT:
      if (!json_is_integer(v) || json_integer_value(v) < sp->min ||
          json_integer_value(v) > sp->max) {
        if (sp->max == INT_ANY) BAD(JB_MCP_INVALID, "'%s' must be an integer >= %lld", n, sp->min);
        BAD(JB_MCP_INVALID, "'%s' must be an integer from %lld to %lld", n, sp->min, sp->max);
      }
      return true;
    case ARG_BOOL:
      if (!json_is_boolean(v)) BAD(JB_MCP_INVALID, "'%s' must be a boolean", n);
      return true;
    case ARG_ENCODING: {
      const char *s = json_string_value(v);
      if (!s || (strcmp(s, "utf-8") && strcmp(s, "base64")))
        BAD(JB_MCP_INVALID, "'%s' must be \"utf-8\" or \"base64\"", n);
      return true;
    }
    case ARG_PATHS: {
      if (!json_is_array(v) || json_array_size(v) == 0)
        BAD(JB_MCP_INVALID, "'paths' must be a non-empty array of paths");
      if (json_array_size(v) > OP_READ_MANY_MAX)
        BAD(JB_MCP_INVALID, "'paths' has %zu entries; at most %d per call", json_array_size(v),
            OP_READ_MANY_MAX);
      size_t i;
      json_t *p;
      json_array_foreach (v, i, p)
        if (!json_is_string(p)) BAD(JB_MCP_INVALID, "paths[%zu] must be a string", i);
      return true;
    }
    case ARG_EDITS:
      return check_edits(v, code, msg, msize);
    case ARG_BATCH:
      if (!jb_batch_name_ok(v))
        BAD(JB_MCP_INVALID, "'changeset' must be a name of 1 to 64 letters, digits, '.', '_', '-'");
      return true;
    case ARG_SUMMARY:
      if (!json_is_string(v)) BAD(JB_MCP_INVALID, "'summary' must be a string");
      if (json_string_length(v) > 4096) BAD(JB_MCP_TOO_LARGE, "the summary is over 4096 bytes");
      return true;
    case ARG_ARGV:
      return check_argv(v, code, msg, msize);
    case ARG_COMMAND:
      if (!json_is_string(v) || json_string_length(v) == 0)
        BAD(JB_MCP_INVALID, "'command' must be a non-empty string (run by /bin/sh -c)");
      if (!nul_free(v)) BAD(JB_MCP_INVALID, "'command' contains a NUL character");
      if (json_string_length(v) > OP_EXEC_ARGS_BYTES)
        BAD(JB_MCP_TOO_LARGE, "'command' is over %d bytes", OP_EXEC_ARGS_BYTES);
      return true;
    case ARG_ENV:
      return check_env(v, code, msg, msize);
    case ARG_STDIN:
      if (!json_is_string(v)) BAD(JB_MCP_INVALID, "'stdin' must be a string");
      if (json_string_length(v) > OP_EXEC_STDIN_MAX)
        BAD(JB_MCP_TOO_LARGE, "'stdin' is over %d bytes", OP_EXEC_STDIN_MAX);
      return true;
  }
  return true;
}

bool op_check_args(enum jb_tool tool, json_t *args, struct op_args_view *out, int *code, char *msg,
                   size_t msize) {
  *out = (struct op_args_view){0};
  if (tool < 0 || tool >= JB_TOOL_COUNT || !specs[tool]) BAD(JB_MCP_INVALID, "unknown tool");
  if (!json_is_object(args)) BAD(JB_MCP_INVALID, "the arguments must be an object");
  const struct arg_spec *spec = specs[tool];
  const char *key;
  json_t *v;
  json_object_foreach (args, key, v) {
    const struct arg_spec *sp = NULL;
    for (size_t i = 0; spec[i].name && !sp; i++)
      if (!strcmp(key, spec[i].name)) sp = &spec[i];
    if (!sp) BAD(JB_MCP_INVALID, "unknown argument '%.64s' for %s", key, jb_tool_name(tool));
    if (!check_arg(sp, v, code, msg, msize)) return false;
  }
  for (size_t i = 0; spec[i].name; i++)
    if (spec[i].required && !json_object_get(args, spec[i].name))
      BAD(JB_MCP_INVALID, "'%s' is required", spec[i].name);
  if (tool == JB_TOOL_READ) { /* one way of choosing what to read */
    int modes = !!(json_object_get(args, "offset") || json_object_get(args, "limit")) +
                !!json_object_get(args, "head") + !!json_object_get(args, "tail") +
                !!(json_object_get(args, "byteOffset") || json_object_get(args, "byteLength"));
    if (modes > 1)
      BAD(JB_MCP_INVALID,
          "give at most one of offset/limit (lines), head, tail, or"
          " byteOffset/byteLength (bytes)");
  }
  if (tool == JB_TOOL_EXEC) { /* one of argv or command; the timeout within the setting */
    if (!json_object_get(args, "argv") == !json_object_get(args, "command"))
      BAD(JB_MCP_INVALID, "give exactly one of 'argv' (an array) or 'command' (shell text)");
    json_t *t = json_object_get(args, "timeoutSec");
    long max = exec_max_timeout_s;
    if (t && json_integer_value(t) > max)
      BAD(JB_MCP_INVALID, "'timeoutSec' must be an integer from 1 to %ld", max);
  }
  json_t *jp = json_object_get(args, tool == JB_TOOL_MOVE   ? "source"
                                     : tool == JB_TOOL_EXEC ? "cwd"
                                                            : "path");
  if (jp) {
    out->path = json_string_value(jp);
    out->plen = json_string_length(jp);
  } else if (tool != JB_TOOL_DONE) { /* a directory tool without a path: the root */
    out->path = tool == JB_TOOL_READ_MANY ? "" : ".";
    out->plen = tool == JB_TOOL_READ_MANY ? 0 : 1;
  }
  json_t *jd = json_object_get(args, "destination");
  if (jd) {
    out->dest = json_string_value(jd);
    out->destlen = json_string_length(jd);
  }
  out->paths = json_object_get(args, "paths");
  return true;
}
#undef BAD

enum op_step op_decode(struct op_call *call) {
  struct op_args_view v;
  int code = JB_MCP_INVALID;
  char msg[300];
  if (!op_check_args(call->tool, call->args, &v, &code, msg, sizeof msg)) {
    op_error(call->e, code,
             code == JB_MCP_TOO_LARGE ? "too_large"
             : code == JB_MCP_DENIED  ? "denied"
                                      : "invalid",
             "%s", msg);
    return OP_END;
  }
  call->path = v.path;
  call->plen = v.plen;
  call->dest = v.dest;
  call->destlen = v.destlen;
  call->paths = v.paths;
  return OP_NEXT;
}

/* ---- refuse if ---- */

const char *op_flagged_kind(const char *path, const json_t *flagged) {
  size_t i;
  json_t *f;
  json_array_foreach (flagged, i, f) {
    const char *fp = json_string_value(json_object_get(f, "path"));
    const char *kind = json_string_value(json_object_get(f, "kind"));
    if (!fp || !kind || !strcmp(kind, "too_large") || !strcmp(kind, "landing_link")) continue;
    size_t n = strlen(fp);
    if (n && !strncmp(path, fp, n) && (path[n] == '\0' || path[n] == '/')) return kind;
  }
  return NULL;
}

bool op_path_passes(const char *path, size_t plen, enum jb_tool tool, const json_t *exclude,
                    const json_t *flagged, struct op_path_verdict *v) {
  bool dir_tool = tool == JB_TOOL_LIST || tool == JB_TOOL_FIND || tool == JB_TOOL_SEARCH ||
                  tool == JB_TOOL_EXEC;
  *v = (struct op_path_verdict){.syntax = jb_path_check(path, plen, dir_tool)};
  if (v->syntax != JB_PATH_OK) return false;
  if (!strcmp(path, ".")) return true;
  v->excluded = jb_path_excluded(path, exclude, &v->glob);
  if (v->excluded) return false;
  v->flagged_kind = op_flagged_kind(path, flagged);
  return v->flagged_kind == NULL;
}

/* What refusing `path` for reason `v` tells the agent: code, reason and message into *e. */
static void refusal_error(struct op_call *call, const char *path, const struct op_path_verdict *v,
                          struct jb_mcp_error *e) {
  if (v->syntax == JB_PATH_DOT && call->tool == JB_TOOL_DELETE && !strcmp(path, "."))
    op_error(e, JB_MCP_DENIED, "denied", "the workspace root cannot be deleted");
  else if (v->syntax != JB_PATH_OK)
    op_error(e, JB_MCP_DENIED, "denied", "%s", jb_path_verdict_text(v->syntax));
  else if (v->excluded)
    op_error(e, JB_MCP_EXCLUDED, "excluded", "%.300s is excluded from this session", path);
  else
    op_error(e, JB_MCP_FLAGGED, "flagged", "%.300s was flagged by the pre-scan (%s)", path,
             v->flagged_kind);
}

/* A refused `path` (`role`: "" or "destination " for a move's second path): audited (a path
 * that breaks the syntax rules without the path), and an escape signal where the path tries
 * to leave the workspace (traversal, absolute, through a symlink leading out, a hard link) or
 * names an excluded entry. *e is filled when not NULL. */
static void refuse_path(struct op_call *call, const char *path, const char *role,
                        const struct op_path_verdict *v, struct jb_mcp_error *e) {
  const char *tool = jb_tool_name(call->tool);
  char detail[400];
  if (e) refusal_error(call, path, v, e);
  if (v->syntax != JB_PATH_OK) {
    op_audit_refusal(
        call, NULL,
        json_pack("{s:s,s:s}", "error", "denied", "detail", jb_path_verdict_text(v->syntax)));
    if (v->syntax == JB_PATH_ABSOLUTE || v->syntax == JB_PATH_DOTDOT) {
      snprintf(detail, sizeof detail, "%s %s%s: %.300s", tool, role,
               jb_path_verdict_text(v->syntax), path);
      jb_escape_signal(call->app, call->job,
                       v->syntax == JB_PATH_ABSOLUTE ? JB_SIG_ABSOLUTE_PATH : JB_SIG_PATH_TRAVERSAL,
                       detail);
    }
  } else if (v->excluded) {
    op_audit_refusal(call, path, json_pack("{s:s,s:s?}", "error", "excluded", "glob", v->glob));
    snprintf(detail, sizeof detail, "%s %s%.300s (excluded by %.60s)", tool, role, path,
             v->glob ? v->glob : "?");
    jb_escape_signal(call->app, call->job, JB_SIG_EXCLUDED_PATH, detail);
  } else {
    const char *kind = v->flagged_kind;
    op_audit_refusal(call, path, json_pack("{s:s,s:s}", "error", "flagged", "kind", kind));
    snprintf(detail, sizeof detail, "%s %s%.300s (flagged by the pre-scan: %.40s)", tool, role,
             path, kind);
    jb_escape_signal(call->app, call->job,
                     !strcmp(kind, "symlink_outside") ? JB_SIG_SYMLINK_ESCAPE
                     : !strcmp(kind, "hardlink")      ? JB_SIG_HARD_LINK
                                                      : JB_SIG_DENIED_PATH,
                     detail);
  }
}

/* read_many: each path is judged on its own; the refused ones get their error in call->many
 * (and are not sent to the shim), the others a JSON null there. */
static enum op_step refuse_many(struct op_call *call) {
  call->many = json_array();
  if (!call->many) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
    return OP_END;
  }
  size_t i;
  json_t *jp;
  json_array_foreach (call->paths, i, jp) {
    const char *p = json_string_value(jp);
    struct op_path_verdict v;
    if (op_path_passes(p, json_string_length(jp), call->tool, call->sess.exclude,
                       call->sess.flagged, &v)) {
      json_array_append_new(call->many, json_null());
      continue;
    }
    struct jb_mcp_error e = {0};
    refuse_path(call, p, "", &v, &e);
    json_array_append_new(
        call->many, json_pack("{s:s%,s:b,s:{s:O?,s:s,s:i}}", "path", p, json_string_length(jp),
                              "ok", 0, "error", "reason", json_object_get(e.data, "reason"),
                              "message", e.message, "code", e.code));
    json_decref(e.data);
  }
  return OP_NEXT;
}

/* Whether the pre-scan's flags hide an entry from the file tools (a covered link's target,
 * "landing_link", hides nothing: it marks a landing). */
static bool hides_entries(const json_t *flagged) {
  size_t i;
  json_t *f;
  json_array_foreach (flagged, i, f)
    if (strcmp(json_string_value(json_object_get(f, "kind")) ?: "", "landing_link")) return true;
  return false;
}

enum op_step op_refuse_if(struct op_call *call) {
  if (call->sess.state != JB_SESSION_ACTIVE && call->sess.state != JB_SESSION_PAUSED) {
    const char *st = jb_session_state_name(call->sess.state) ?: "unknown";
    const char *why = call->sess.state_reason;
    op_error(call->e, JB_MCP_DENIED, "denied",
             "the session is %s%s%.300s%s: no file operations now", st, why ? " (" : "",
             why ? why : "", why ? ")" : "");
    if (call->e->data) {
      json_object_set_new(call->e->data, "state", json_string(st));
      if (why) json_object_set_new(call->e->data, "stateReason", json_string(why));
    }
    return OP_END;
  }
  /* a tool its tools/list does not name: a protocol error, as an unknown tool is (MCP
   * server/tools "Error Handling"), before anyone is asked or anything launched */
  if (call->tool == JB_TOOL_EXEC && op_exec_offer_of(&call->sess) == JB_EXEC_NOT_OFFERED) {
    const char *why = call->sess.exec_reason ? call->sess.exec_reason : "no spawner";
    op_audit_refusal(call, call->path, json_pack("{s:s,s:s}", "error", "unavailable", "why", why));
    op_error(call->e, JB_MCP_INVALID, "exec_unavailable",
             "Invalid params: this session offers no tool 'exec': its sandbox cannot run "
             "commands (%.300s); tools/list names the tools it offers",
             why);
    return OP_END;
  }
  if (call->tool == JB_TOOL_READ_MANY) return refuse_many(call);
  /* a command's jail binds the whole workspace: what the session hides from the file tools
   * (exclusions, entries the pre-scan flagged) it would see */
  if (call->tool == JB_TOOL_EXEC &&
      (json_array_size(call->sess.exclude) > 0 || hides_entries(call->sess.flagged))) {
    bool ex = json_array_size(call->sess.exclude) > 0;
    op_audit_refusal(
        call, call->path,
        json_pack("{s:s,s:s}", "error", "denied", "why", ex ? "exclusions" : "pre-scan flags"));
    op_error(call->e, JB_MCP_DENIED, "denied",
             "exec is not offered in a session with %s: a command would see the whole "
             "workspace, %s included",
             ex ? "exclusions" : "entries the pre-scan flagged",
             ex ? "the excluded paths" : "the flagged entries");
    return OP_END;
  }
  /* a writable command whose effects were not checked whole holds the next ones until the
   * buyer clears it (effects/clear); the worker checks it again before one runs */
  if (call->tool == JB_TOOL_EXEC && call->sess.effects_incomplete &&
      json_is_true(json_object_get(call->args, "writable"))) {
    op_audit_refusal(call, call->path,
                     json_pack("{s:s,s:s}", "error", "denied", "why", "effects_incomplete"));
    op_error(call->e, JB_MCP_DENIED, "denied",
             "writable commands are held: an earlier one's effects could not be checked whole "
             "(%.200s); the buyer must clear it first (effects/clear)",
             call->sess.effects_incomplete);
    return OP_END;
  }
  struct op_path_verdict v;
  if (!op_path_passes(call->path, call->plen, call->tool, call->sess.exclude, call->sess.flagged,
                      &v)) {
    refuse_path(call, call->path, "", &v, call->e);
    return OP_END;
  }
  if (call->dest && !op_path_passes(call->dest, call->destlen, call->tool, call->sess.exclude,
                                    call->sess.flagged, &v)) {
    refuse_path(call, call->dest, "destination ", &v, call->e);
    return OP_END;
  }
  return OP_NEXT;
}

/* ---- prepare ---- */

bool op_tool_direct(enum jb_tool tool) {
  return tool == JB_TOOL_READ || tool == JB_TOOL_READ_MANY || tool == JB_TOOL_LIST ||
         tool == JB_TOOL_FIND || tool == JB_TOOL_SEARCH || tool == JB_TOOL_STAT;
}

json_t *op_exec_args(json_t *args) {
  json_t *argv = json_object_get(args, "argv");
  const char *cmd = json_string_value(json_object_get(args, "command"));
  json_t *t = json_object_get(args, "timeoutSec"), *m = json_object_get(args, "maxOutputBytes");
  json_t *env = json_object_get(args, "env");
  json_t *in = json_object_get(args, "stdin");
  json_t *out =
      json_pack("{s:o,s:s,s:o,s:I,s:I,s:b}", "argv",
                cmd ? json_pack("[s,s,s]", "/bin/sh", "-c", cmd) : json_deep_copy(argv), "cwd",
                json_string_value(json_object_get(args, "cwd")) ?: ".", "env",
                json_is_object(env) ? json_deep_copy(env) : json_object(), "timeoutMs",
                (json_int_t)(t ? json_integer_value(t) : OP_EXEC_TIMEOUT_DEFAULT) * 1000,
                "maxOutputBytes", (json_int_t)(m ? json_integer_value(m) : OP_EXEC_OUTPUT_DEFAULT),
                "writable", json_is_true(json_object_get(args, "writable")));
  if (out && json_is_string(in)) json_object_set(out, "stdin", in);
  if (out && cmd) json_object_set_new(out, "command", json_string(cmd));
  json_t *mem = json_object_get(args, "memoryMiB"); /* lowers the session's per-command limit */
  if (out && json_is_integer(mem)) json_object_set(out, "memoryMiB", mem);
  return out;
}

json_t *op_shim_args(enum jb_tool tool, json_t *args, json_t *exclude) {
  if (tool == JB_TOOL_EDIT) return NULL;
  if (tool == JB_TOOL_EXEC) return op_exec_args(args);
  /* the MCP argument names that the shim calls otherwise */
  static const struct {
    enum jb_tool tool;
    const char *from, *to;
  } rename[] = {
      {JB_TOOL_READ, "offset", "lineOffset"}, {JB_TOOL_READ, "limit", "lineLimit"},
      {JB_TOOL_READ, "byteOffset", "offset"}, {JB_TOOL_READ, "byteLength", "length"},
      {JB_TOOL_STAT, "sha256", "hash"},
  };
  json_t *sargs = json_object();
  const char *key;
  json_t *v;
  json_object_foreach (args, key, v) {
    if (!strcmp(key, "path") || (tool == JB_TOOL_MOVE && !strcmp(key, "source"))) continue;
    const char *to = key;
    for (size_t i = 0; i < sizeof rename / sizeof rename[0]; i++)
      if (rename[i].tool == tool && !strcmp(rename[i].from, key)) to = rename[i].to;
    json_object_set(sargs, to, v);
  }
  if (tool == JB_TOOL_STAT && !json_object_get(sargs, "hash"))
    json_object_set_new(sargs, "hash", json_false()); /* sha256 only on request */
  if (json_array_size(exclude) > 0) json_object_set(sargs, "exclude", exclude);
  return sargs;
}

/* A write's content into call->data (utf-8 text or base64, at most OP_FILE_MAX bytes once
 * decoded; over it an audited refusal) and its SHA-256 into call->sha_hex. */
static enum op_step decode_content(struct op_call *call) {
  json_t *jc = json_object_get(call->args, "content");
  const char *enc = json_string_value(json_object_get(call->args, "encoding")) ?: "utf-8";
  if (!json_is_string(jc) || (strcmp(enc, "utf-8") && strcmp(enc, "base64"))) {
    op_error(call->e, JB_MCP_INVALID, "invalid",
             "'content' must be a string, 'encoding' utf-8 or base64");
    return OP_END;
  }
  size_t tlen = json_string_length(jc);
  if (tlen > (size_t)OP_FILE_MAX * 2) {
    op_error(call->e, JB_MCP_TOO_LARGE, "too_large", "content over %d bytes", OP_FILE_MAX);
    return OP_END;
  }
  if (!strcmp(enc, "base64")) {
    call->data = malloc(tlen / 4 * 3 + 4);
    if (!call->data ||
        sodium_base642bin(call->data, tlen / 4 * 3 + 4, json_string_value(jc), tlen, NULL,
                          &call->dlen, NULL, sodium_base64_VARIANT_ORIGINAL) != 0) {
      op_error(call->e, JB_MCP_INVALID, "invalid", "'content' is not valid base64");
      return OP_END;
    }
  } else {
    call->dlen = tlen;
    call->data = malloc(tlen ? tlen : 1);
    if (call->data) memcpy(call->data, json_string_value(jc), tlen);
  }
  if (!call->data) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
    return OP_END;
  }
  if (call->dlen > OP_FILE_MAX) {
    op_audit_refusal(call, call->path,
                     json_pack("{s:s,s:I}", "error", "too_large", "size", (json_int_t)call->dlen));
    op_error(call->e, JB_MCP_TOO_LARGE, "too_large", "content of %zu bytes is over %d", call->dlen,
             OP_FILE_MAX);
    return OP_END;
  }
  unsigned char h[32];
  crypto_hash_sha256(h, call->data, call->dlen);
  sodium_bin2hex(call->sha_hex, sizeof call->sha_hex, h, sizeof h);
  return OP_NEXT;
}

/* A write the scanner flagged (rule ids `hits`, `findings`; both stolen; NULL findings: the
 * scanner could not run): refused, audited, and a security alert for the buyer. */
static enum op_step refuse_scanned(struct op_call *call, json_t *hits, json_t *findings) {
  const char *job = call->job, *path = call->path;
  if (!hits) {
    json_decref(findings);
    hits = json_pack("[s]", "scanner_unavailable");
    findings = json_pack("[{s:s,s:s,s:s}]", "rule", "scanner_unavailable", "severity", "critical",
                         "error", "out of memory");
  }
  op_audit_refusal(call, path,
                   json_pack("{s:s,s:I,s:s,s:s,s:s,s:O,s:O?}", "error", "flagged", "size",
                             (json_int_t)call->dlen, "sha256", call->sha_hex, "decision", "flagged",
                             "decidedBy", "scanner", "rules", hits, "findings", findings));
  json_t *ev = json_pack("{s:s,s:s,s:s,s:I,s:s,s:O,s:O?}", "jobId", job, "kind", "flagged_write",
                         "path", path, "size", (json_int_t)call->dlen, "sha256", call->sha_hex,
                         "rules", hits, "findings", findings);
  json_decref(findings);
  op_fit_path(job, JB_EVENT_SECURITY_ALERT, ev);
  jb_bus_publish(call->app->bus, job, JB_EVENT_SECURITY_ALERT, ev);
  char rl[200] = "";
  size_t i;
  json_t *r;
  json_array_foreach (hits, i, r) {
    if (i) strncat(rl, ", ", sizeof rl - strlen(rl) - 1);
    strncat(rl, json_string_value(r), sizeof rl - strlen(rl) - 1);
  }
  json_decref(hits);
  op_error(call->e, JB_MCP_FLAGGED, "flagged", "the content scanner flagged this %s (%s)",
           jb_tool_name(call->tool), rl);
  return OP_END;
}

enum op_step op_scan_content(struct op_call *call) {
  json_t *findings = jb_scan_content(call->path, call->data, call->dlen);
  json_t *hits = findings ? jb_scan_rule_ids(findings) : NULL;
  if (!hits || json_array_size(hits) > 0) return refuse_scanned(call, hits, findings);
  json_decref(hits);
  json_decref(findings);
  /* the content and the path rules passed: where it lands, through a covered link too */
  if (op_check_landing_path(call, call->path, false) != OP_NEXT) return OP_END;
  json_object_set_new(call->sargs, "size", json_integer((json_int_t)call->dlen));
  json_object_set_new(call->sargs, "sha256", json_string(call->sha_hex));
  return OP_NEXT;
}

/* read_many: only the paths not refused go to the shim. */
static enum op_step prepare_many(struct op_call *call) {
  json_t *keep = json_array();
  size_t i;
  json_t *m;
  json_array_foreach (call->many, i, m)
    if (json_is_null(m)) json_array_append(keep, json_array_get(call->paths, i));
  json_object_set_new(call->sargs, "paths", keep);
  if (json_array_size(keep) > 0) return OP_NEXT;
  /* every path was refused here: the answer is made of the refusals alone */
  call->ans = json_pack("{s:b,s:{s:[]}}", "ok", 1, "result", "files");
  return call->ans ? OP_ANSWERED : OP_END;
}

enum op_step op_prepare(struct op_call *call) {
  if (call->tool == JB_TOOL_EDIT) return OP_NEXT; /* its write is made in the supervise stage */
  call->sargs = op_shim_args(call->tool, call->args, call->sess.exclude);
  if (!call->sargs) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
    return OP_END;
  }
  if (call->tool == JB_TOOL_READ_MANY) return prepare_many(call);
  if (call->tool != JB_TOOL_WRITE) return OP_NEXT;
  enum op_step s = decode_content(call);
  if (s == OP_NEXT) s = op_scan_content(call);
  return s;
}
