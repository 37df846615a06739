/* test_tool_args.c — the decoding of every tool's arguments before anything else runs
 * (api/core/op_checks.c op_check_args): unknown arguments, types, required ones, integer
 * ranges, pattern/glob, read_many and edit list limits, read's one-mode rule; the paths each
 * tool names (op_path_passes: the root only for directory tools, never for delete); the
 * shim's argument names (op_shim_args); and the tools/list description (api/core/tools.c)
 * agreeing with the decoder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/op_call.h"
#include "api/core/tools.h"

/* Decodes `json` for `tool`: true when accepted; *code and msg otherwise. */
static bool decode(enum jb_tool tool, const char *json, int *code, char *msg) {
  json_t *a = json_loads(json, JSON_ALLOW_NUL, NULL);
  assert_non_null(a);
  struct op_args_view v;
  *code = 0;
  bool ok = op_check_args(tool, a, &v, code, msg, 300);
  json_decref(a);
  return ok;
}

static void accepts(enum jb_tool tool, const char *json) {
  int code;
  char msg[300] = "";
  if (!decode(tool, json, &code, msg)) fail_msg("%s %s refused: %s", jb_tool_name(tool), json, msg);
}

/* Refused with `code`, and the message mentions `word`. */
static void refuses(enum jb_tool tool, const char *json, int code, const char *word) {
  int got;
  char msg[300] = "";
  if (decode(tool, json, &got, msg)) fail_msg("%s %s accepted", jb_tool_name(tool), json);
  assert_int_equal(got, code);
  if (!strstr(msg, word))
    fail_msg("%s %s: message '%s' lacks '%s'", jb_tool_name(tool), json, msg, word);
}

static void every_tool_valid(void **state) {
  (void)state;
  accepts(JB_TOOL_READ, "{\"path\":\"a\"}");
  accepts(JB_TOOL_READ, "{\"path\":\"a\",\"offset\":0,\"limit\":10}");
  accepts(JB_TOOL_READ, "{\"path\":\"a\",\"head\":5}");
  accepts(JB_TOOL_READ, "{\"path\":\"a\",\"tail\":5}");
  accepts(JB_TOOL_READ, "{\"path\":\"a\",\"byteOffset\":7,\"byteLength\":0}");
  accepts(JB_TOOL_READ_MANY, "{\"paths\":[\"a\",\"b/c\"]}");
  accepts(JB_TOOL_WRITE, "{\"path\":\"a\",\"content\":\"x\",\"encoding\":\"base64\"}");
  accepts(JB_TOOL_EDIT,
          "{\"path\":\"a\",\"edits\":[{\"oldText\":\"x\",\"newText\":\"\"},"
          "{\"oldText\":\"y\",\"newText\":\"z\",\"replaceAll\":true}],\"dryRun\":true}");
  accepts(JB_TOOL_LIST, "{}");
  accepts(JB_TOOL_LIST, "{\"path\":\"src\",\"recursive\":true,\"depth\":64}");
  accepts(JB_TOOL_FIND, "{\"pattern\":\"**/*.c\"}");
  accepts(JB_TOOL_SEARCH,
          "{\"pattern\":\"fo+\",\"path\":\"src\",\"glob\":\"*.h\",\"maxMatches\":5000}");
  accepts(JB_TOOL_STAT, "{\"path\":\"a\",\"sha256\":true}");
  accepts(JB_TOOL_MKDIR, "{\"path\":\"a/b/c\"}");
  accepts(JB_TOOL_MOVE, "{\"source\":\"a\",\"destination\":\"b\",\"overwrite\":false}");
  accepts(JB_TOOL_DELETE, "{\"path\":\"a\",\"recursive\":true}");
  accepts(JB_TOOL_DONE, "{}");
  accepts(JB_TOOL_DONE, "{\"summary\":\"ok\"}");
  accepts(JB_TOOL_EXEC, "{\"argv\":[\"true\"]}");
}

static void unknown_and_types(void **state) {
  (void)state;
  refuses(JB_TOOL_READ, "{\"path\":\"a\",\"length\":3}", JB_MCP_INVALID,
          "unknown argument 'length'");
  refuses(JB_TOOL_MOVE, "{\"path\":\"a\",\"destination\":\"b\"}", JB_MCP_INVALID, "'path'");
  refuses(JB_TOOL_MOVE, "{\"source\":\"a\"}", JB_MCP_INVALID, "'destination' is required");
  refuses(JB_TOOL_DELETE, "{\"path\":\"a\",\"force\":true}", JB_MCP_INVALID, "unknown argument");
  refuses(JB_TOOL_DONE, "{\"summary\":\"x\",\"extra\":1}", JB_MCP_INVALID, "unknown argument");
  refuses(JB_TOOL_READ, "{\"path\":7}", JB_MCP_INVALID, "'path' must be a string");
  refuses(JB_TOOL_READ, "{}", JB_MCP_INVALID, "'path' is required");
  refuses(JB_TOOL_STAT, "{\"path\":\"a\",\"sha256\":\"yes\"}", JB_MCP_INVALID, "boolean");
  refuses(JB_TOOL_DELETE, "{\"path\":\"a\",\"recursive\":1}", JB_MCP_INVALID, "boolean");
  refuses(JB_TOOL_WRITE, "{\"path\":\"a\",\"content\":\"x\",\"encoding\":\"latin1\"}",
          JB_MCP_INVALID, "utf-8");
  refuses(JB_TOOL_WRITE, "{\"path\":\"a\"}", JB_MCP_INVALID, "'content' is required");
  refuses(JB_TOOL_FIND, "{}", JB_MCP_INVALID, "'pattern' is required");
}

static void integer_ranges(void **state) {
  (void)state;
  refuses(JB_TOOL_READ, "{\"path\":\"a\",\"offset\":-1}", JB_MCP_INVALID, "'offset'");
  refuses(JB_TOOL_READ, "{\"path\":\"a\",\"offset\":1.5}", JB_MCP_INVALID, "integer");
  refuses(JB_TOOL_READ, "{\"path\":\"a\",\"limit\":0}", JB_MCP_INVALID, "'limit'");
  refuses(JB_TOOL_READ, "{\"path\":\"a\",\"head\":0}", JB_MCP_INVALID, "'head'");
  refuses(JB_TOOL_READ, "{\"path\":\"a\",\"tail\":\"3\"}", JB_MCP_INVALID, "'tail'");
  refuses(JB_TOOL_READ, "{\"path\":\"a\",\"byteOffset\":9007199254740992}", JB_MCP_INVALID,
          "byteOffset");
  refuses(JB_TOOL_LIST, "{\"depth\":0}", JB_MCP_INVALID, "from 1 to 64");
  refuses(JB_TOOL_LIST, "{\"depth\":65}", JB_MCP_INVALID, "from 1 to 64");
  refuses(JB_TOOL_SEARCH, "{\"pattern\":\"x\",\"maxMatches\":5001}", JB_MCP_INVALID, "maxMatches");
  refuses(JB_TOOL_SEARCH, "{\"pattern\":\"x\",\"maxMatches\":0}", JB_MCP_INVALID, "maxMatches");
  /* one way of choosing what to read */
  refuses(JB_TOOL_READ, "{\"path\":\"a\",\"head\":1,\"tail\":1}", JB_MCP_INVALID, "at most one");
  refuses(JB_TOOL_READ, "{\"path\":\"a\",\"offset\":1,\"byteLength\":1}", JB_MCP_INVALID,
          "at most one");
  refuses(JB_TOOL_READ, "{\"path\":\"a\",\"limit\":1,\"head\":1}", JB_MCP_INVALID, "at most one");
}

/* a JSON object text with one string argument `key` of `n` bytes 'x' after `prefix` */
static char *with_long(const char *prefix, const char *key, size_t n, const char *suffix) {
  size_t len = strlen(prefix) + strlen(key) + n + strlen(suffix) + 16;
  char *s = malloc(len);
  char *xs = malloc(n + 1);
  memset(xs, 'x', n);
  xs[n] = '\0';
  snprintf(s, len, "%s\"%s\":\"%s\"%s", prefix, key, xs, suffix);
  free(xs);
  return s;
}

static void sizes(void **state) {
  (void)state;
  char *s = with_long("{", "pattern", 1024, "}");
  accepts(JB_TOOL_FIND, s);
  free(s);
  s = with_long("{", "pattern", 1025, "}");
  refuses(JB_TOOL_FIND, s, JB_MCP_INVALID, "over 1024 bytes");
  free(s);
  s = with_long("{\"pattern\":\"x\",", "glob", 1025, "}");
  refuses(JB_TOOL_SEARCH, s, JB_MCP_INVALID, "'glob' is over 1024");
  free(s);
  refuses(JB_TOOL_FIND, "{\"pattern\":\"\"}", JB_MCP_INVALID, "non-empty");
  s = with_long("{\"path\":\"a\",\"edits\":[{\"newText\":\"\",", "oldText", 1024 * 1024 + 1, "}]}");
  refuses(JB_TOOL_EDIT, s, JB_MCP_TOO_LARGE, "edits[0].oldText is over 1048576");
  free(s);
  s = with_long("{\"path\":\"a\",\"edits\":[{\"oldText\":\"a\",", "newText", 1024 * 1024, "}]}");
  accepts(JB_TOOL_EDIT, s);
  free(s);
  s = with_long("{", "summary", 4097, "}");
  refuses(JB_TOOL_DONE, s, JB_MCP_TOO_LARGE, "4096");
  free(s);
  /* read_many: 1..50 paths */
  char buf[4096] = "{\"paths\":[";
  for (int i = 0; i < 51; i++) strcat(buf, i ? ",\"p\"" : "\"p\"");
  strcat(buf, "]}");
  refuses(JB_TOOL_READ_MANY, buf, JB_MCP_INVALID, "at most 50");
  buf[strlen(buf) - 6] = '\0'; /* drop the last ,"p" */
  strcat(buf, "]}");
  accepts(JB_TOOL_READ_MANY, buf);
  refuses(JB_TOOL_READ_MANY, "{\"paths\":[]}", JB_MCP_INVALID, "non-empty");
  refuses(JB_TOOL_READ_MANY, "{\"paths\":[\"a\",3]}", JB_MCP_INVALID, "paths[1]");
  /* edit: 1..100 entries, each {oldText, newText, replaceAll?} */
  char *e = malloc(101 * 40 + 64);
  strcpy(e, "{\"path\":\"a\",\"edits\":[");
  for (int i = 0; i < 101; i++)
    strcat(e,
           i ? ",{\"oldText\":\"a\",\"newText\":\"b\"}" : "{\"oldText\":\"a\",\"newText\":\"b\"}");
  strcat(e, "]}");
  refuses(JB_TOOL_EDIT, e, JB_MCP_INVALID, "at most 100");
  free(e);
  refuses(JB_TOOL_EDIT, "{\"path\":\"a\",\"edits\":[]}", JB_MCP_INVALID, "non-empty");
  refuses(JB_TOOL_EDIT, "{\"path\":\"a\",\"edits\":[{\"oldText\":\"a\"}]}", JB_MCP_INVALID,
          "needs oldText and newText");
  refuses(JB_TOOL_EDIT, "{\"path\":\"a\",\"edits\":[{\"oldText\":\"\",\"newText\":\"b\"}]}",
          JB_MCP_INVALID, "empty");
  refuses(JB_TOOL_EDIT,
          "{\"path\":\"a\",\"edits\":[{\"oldText\":\"a\",\"newText\":\"b\",\"all\":true}]}",
          JB_MCP_INVALID, "unknown key 'all'");
  refuses(JB_TOOL_EDIT, "{\"path\":\"a\",\"edits\":[{\"oldText\":\"a\",\"newText\":2}]}",
          JB_MCP_INVALID, "must be a string");
}

static void paths(void **state) {
  (void)state;
  struct op_path_verdict v;
  /* the root: a path of the directory tools (and exec's cwd) only; never deletable */
  assert_true(op_path_passes(".", 1, JB_TOOL_LIST, NULL, NULL, &v));
  assert_true(op_path_passes(".", 1, JB_TOOL_FIND, NULL, NULL, &v));
  assert_true(op_path_passes(".", 1, JB_TOOL_SEARCH, NULL, NULL, &v));
  for (int t = 0; t < JB_TOOL_COUNT; t++) {
    if (t == JB_TOOL_LIST || t == JB_TOOL_FIND || t == JB_TOOL_SEARCH || t == JB_TOOL_EXEC)
      continue;
    assert_false(op_path_passes(".", 1, (enum jb_tool)t, NULL, NULL, &v));
    assert_int_equal(v.syntax, JB_PATH_DOT);
  }
  json_t *ex = json_pack("[s]", "secrets");
  json_t *fl = json_pack("[{s:s,s:s}]", "path", "out", "kind", "symlink_outside");
  assert_false(op_path_passes("secrets/k", 9, JB_TOOL_MOVE, ex, fl, &v));
  assert_true(v.excluded);
  assert_false(op_path_passes("out/x", 5, JB_TOOL_MKDIR, ex, fl, &v));
  assert_string_equal(v.flagged_kind, "symlink_outside");
  assert_false(op_path_passes("../x", 4, JB_TOOL_DELETE, ex, fl, &v));
  assert_int_equal(v.syntax, JB_PATH_DOTDOT);
  assert_false(op_path_passes("/etc", 4, JB_TOOL_SEARCH, ex, fl, &v));
  assert_int_equal(v.syntax, JB_PATH_ABSOLUTE);
  assert_true(op_path_passes("src/a.c", 7, JB_TOOL_MOVE, ex, fl, &v));
  /* a covered link's target is a notice (a landing), not hidden: read and list pass */
  json_t *ll = json_pack("[{s:s,s:s,s:s}]", "path", "scripts/hook.sh", "kind", "landing_link",
                         "link", ".git/hooks/pre-commit");
  assert_true(op_path_passes("scripts/hook.sh", 15, JB_TOOL_READ, ex, ll, &v));
  assert_null(op_flagged_kind("scripts/hook.sh", ll));
  json_decref(ll);
  json_decref(ex);
  json_decref(fl);
  /* the views decode names the paths */
  json_t *a = json_pack("{s:s,s:s}", "source", "a/b", "destination", "c");
  struct op_args_view av;
  int code;
  char msg[300];
  assert_true(op_check_args(JB_TOOL_MOVE, a, &av, &code, msg, sizeof msg));
  assert_string_equal(av.path, "a/b");
  assert_int_equal(av.plen, 3);
  assert_string_equal(av.dest, "c");
  json_decref(a);
  a = json_pack("{s:s}", "pattern", "*.c");
  assert_true(op_check_args(JB_TOOL_SEARCH, a, &av, &code, msg, sizeof msg));
  assert_string_equal(av.path, ".");
  assert_null(av.dest);
  json_decref(a);
}

static void shim_names(void **state) {
  (void)state;
  json_t *ex = json_pack("[s]", "secrets");
  json_t *a = json_pack("{s:s,s:i,s:i}", "path", "a", "offset", 3, "limit", 4);
  json_t *s = op_shim_args(JB_TOOL_READ, a, ex);
  assert_int_equal(json_integer_value(json_object_get(s, "lineOffset")), 3);
  assert_int_equal(json_integer_value(json_object_get(s, "lineLimit")), 4);
  assert_null(json_object_get(s, "offset"));
  assert_null(json_object_get(s, "path"));
  assert_true(json_equal(json_object_get(s, "exclude"), ex));
  json_decref(s);
  json_decref(a);
  a = json_pack("{s:s,s:i,s:i}", "path", "a", "byteOffset", 3, "byteLength", 4);
  s = op_shim_args(JB_TOOL_READ, a, NULL);
  assert_int_equal(json_integer_value(json_object_get(s, "offset")), 3);
  assert_int_equal(json_integer_value(json_object_get(s, "length")), 4);
  assert_null(json_object_get(s, "exclude"));
  json_decref(s);
  json_decref(a);
  a = json_pack("{s:s}", "path", "a");
  s = op_shim_args(JB_TOOL_STAT, a, NULL);
  assert_true(json_is_false(json_object_get(s, "hash"))); /* sha256 only on request */
  json_decref(s);
  json_decref(a);
  a = json_pack("{s:s,s:s,s:b}", "source", "a", "destination", "b", "overwrite", 1);
  s = op_shim_args(JB_TOOL_MOVE, a, NULL);
  assert_null(json_object_get(s, "source"));
  assert_string_equal(json_string_value(json_object_get(s, "destination")), "b");
  assert_true(json_is_true(json_object_get(s, "overwrite")));
  json_decref(s);
  assert_null(op_shim_args(JB_TOOL_EDIT, a, NULL));
  json_decref(a);
  json_decref(ex);
}

/* exec: argv or command (exactly one), the limits, the env allow-list, the timeout within the
 * setting, cwd as the path, and the worker's arguments. */
static void exec_args(void **state) {
  (void)state;
  accepts(JB_TOOL_EXEC, "{\"argv\":[\"echo\",\"hi\"]}");
  accepts(JB_TOOL_EXEC,
          "{\"command\":\"make -j2 && make test\",\"cwd\":\"src\",\"env\":{\"LC_ALL\":\"C\","
          "\"CI\":\"\"},\"stdin\":\"abc\",\"timeoutSec\":600,\"maxOutputBytes\":0,"
          "\"writable\":true}");
  refuses(JB_TOOL_EXEC, "{}", JB_MCP_INVALID, "exactly one of 'argv'");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"a\"],\"command\":\"b\"}", JB_MCP_INVALID, "exactly one");
  refuses(JB_TOOL_EXEC, "{\"argv\":[]}", JB_MCP_INVALID, "non-empty array");
  refuses(JB_TOOL_EXEC, "{\"argv\":\"ls\"}", JB_MCP_INVALID, "non-empty array");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"\"]}", JB_MCP_INVALID, "argv[0] is empty");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\",3]}", JB_MCP_INVALID, "argv[1] must be a string");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\",\"a\\u0000b\"]}", JB_MCP_INVALID, "NUL");
  refuses(JB_TOOL_EXEC, "{\"command\":\"\"}", JB_MCP_INVALID, "non-empty string");
  refuses(JB_TOOL_EXEC, "{\"command\":\"ls\\u0000\"}", JB_MCP_INVALID, "NUL");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"shell\":true}", JB_MCP_INVALID,
          "unknown argument 'shell'");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"timeoutSec\":0}", JB_MCP_INVALID, "from 1");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"timeoutSec\":601}", JB_MCP_INVALID, "to 600");
  jb_op_set_exec_max_timeout(3600);
  accepts(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"timeoutSec\":3600}");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"timeoutSec\":3601}", JB_MCP_INVALID, "to 3600");
  jb_op_set_exec_max_timeout(600);
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"maxOutputBytes\":8388609}", JB_MCP_INVALID,
          "to 8388608");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"writable\":1}", JB_MCP_INVALID, "boolean");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"cwd\":5}", JB_MCP_INVALID, "'cwd' must be");
  /* env: names, the allow-list (a refusal by policy), values */
  static const char *const denied[] = {
      "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PATH", "HOME", "BASH_ENV", "ENV", "PS4",
      "BASH_FUNC_ls%%", "GLIBC_TUNABLES", "PYTHONPATH", "NODE_OPTIONS", "PERL5OPT", "MAKEFLAGS",
      "GIT_CONFIG_COUNT", "GIT_SSH_COMMAND", "JAILBOX_X", "MALLOC_CHECK_",
      /* more variables whose values add code or pick a
                                        * program (the exec review) */
      "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "LUA_INIT",
      "LUA_PATH_5_4", "PERL5DB", "PYTHONWARNINGS", "PHPRC", "PHP_INI_SCAN_DIR", "GOFLAGS",
      "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "GCC_EXEC_PREFIX", "COMPILER_PATH",
      "OPENSSL_CONF", "OPENSSL_MODULES", "OPENSSL_ENGINES", "TAR_OPTIONS", "EDITOR", "VISUAL",
      "PAGER", "GIT_SEQUENCE_EDITOR", "LESSOPEN", "LESSCLOSE", "ZDOTDIR", "DOTNET_STARTUP_HOOKS",
      "npm_config_node_options", "NPM_CONFIG_SCRIPT_SHELL",
      /* what a deny-list missed: the repository, the compilers, the configure scripts */
      "GIT_DIR", "GIT_WORK_TREE", "CC", "CXX", "LD", "CONFIG_SITE", "CONFIG_SHELL", "CCACHE_PREFIX",
      "CARGO_BUILD_RUSTC_WRAPPER", "GOTOOLCHAIN", "NODE_ENV", "_X1", "TERMINFO"};
  for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
    char j[200];
    snprintf(j, sizeof j, "{\"argv\":[\"ls\"],\"env\":{\"%s\":\"x\"}}", denied[i]);
    bool name_ok = !strchr(denied[i], '%');
    refuses(JB_TOOL_EXEC, j, name_ok ? JB_MCP_DENIED : JB_MCP_INVALID,
            name_ok ? "is not allowed" : "not a variable name");
  }
  static const char *const allowed[] = {
      "LANG",           "LC_ALL",   "LC_CTYPE",      "LANGUAGE", "TZ",
      "TERM",           "NO_COLOR", "FORCE_COLOR",   "CI",       "PYTHONUNBUFFERED",
      "RUST_BACKTRACE", "RUST_LOG", "CLICOLOR_FORCE"};
  for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
    assert_true(op_exec_env_allowed(allowed[i]));
  assert_false(op_exec_env_allowed("LANGX")); /* whole names are whole */
  assert_false(op_exec_env_allowed("CC"));
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"env\":{\"LC_ALL\":\"/workspace/loc\"}}",
          JB_MCP_DENIED, "locale name");
  accepts(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"env\":{\"TZ\":\"Europe/Paris\"}}");
  /* an allowed name's value holds nothing a shell or make expands: the buyer sees what runs */
  static const char *const bad_values[] = {
      "$(shell touch x)", "`id`", "a;b", "a\\nb", "${X}", "a'b", "a|b", "a>b", "a\\\\b"};
  for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++) {
    char j[200];
    snprintf(j, sizeof j, "{\"argv\":[\"make\"],\"env\":{\"VERBOSE\":\"%s\"}}", bad_values[i]);
    refuses(JB_TOOL_EXEC, j, JB_MCP_DENIED, "letters, digits");
  }
  accepts(JB_TOOL_EXEC,
          "{\"argv\":[\"make\"],\"env\":{\"VERBOSE\":\"1\",\"RUST_LOG\":\"info,x=debug\"}}");
  /* the operator's additions: whole names and prefixes; never JAILBOX_* */
  char m[200];
  assert_int_equal(jb_op_set_exec_env_allow("GIT_DIR, CC ,MY_*", m, sizeof m), 0);
  assert_true(op_exec_env_allowed("GIT_DIR") && op_exec_env_allowed("CC"));
  assert_true(op_exec_env_allowed("MY_FLAG"));
  assert_false(op_exec_env_allowed("CXX"));
  accepts(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"env\":{\"CC\":\"gcc\"}}");
  assert_int_equal(jb_op_set_exec_env_allow("JAILBOX_X", m, sizeof m), -1);
  assert_non_null(strstr(m, "JAILBOX_"));
  assert_int_equal(jb_op_set_exec_env_allow("A-B", m, sizeof m), -1);
  assert_true(op_exec_env_allowed("CC")); /* a refused list changes nothing */
  assert_int_equal(jb_op_set_exec_env_allow("", m, sizeof m), 0);
  assert_false(op_exec_env_allowed("CC"));
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"env\":{\"1A\":\"x\"}}", JB_MCP_INVALID,
          "not a variable name");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"env\":{\"A-B\":\"x\"}}", JB_MCP_INVALID,
          "not a variable name");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"env\":{\"CI\":1}}", JB_MCP_INVALID,
          "must be a string");
  refuses(JB_TOOL_EXEC, "{\"argv\":[\"ls\"],\"env\":[\"A=1\"]}", JB_MCP_INVALID, "object");
  /* sizes: argv items and bytes, stdin, env bytes */
  json_t *a = json_pack("{s:[]}", "argv");
  for (int i = 0; i < 257; i++) json_array_append_new(json_object_get(a, "argv"), json_string("x"));
  struct op_args_view v;
  int code;
  char msg[300];
  assert_false(op_check_args(JB_TOOL_EXEC, a, &v, &code, msg, sizeof msg));
  assert_int_equal(code, JB_MCP_INVALID);
  assert_non_null(strstr(msg, "at most 256"));
  json_array_remove(json_object_get(a, "argv"), 0);
  assert_true(op_check_args(JB_TOOL_EXEC, a, &v, &code, msg, sizeof msg));
  assert_string_equal(v.path, "."); /* no cwd: the root */
  json_decref(a);
  char *big = malloc(OP_EXEC_STDIN_MAX + 2);
  assert_non_null(big);
  memset(big, 'a', OP_EXEC_STDIN_MAX + 1);
  big[OP_EXEC_STDIN_MAX + 1] = '\0';
  a = json_pack("{s:[s],s:s%}", "argv", "cat", "stdin", big, (size_t)OP_EXEC_STDIN_MAX);
  assert_true(op_check_args(JB_TOOL_EXEC, a, &v, &code, msg, sizeof msg));
  json_object_set_new(a, "stdin", json_string(big));
  assert_false(op_check_args(JB_TOOL_EXEC, a, &v, &code, msg, sizeof msg));
  assert_int_equal(code, JB_MCP_TOO_LARGE);
  json_object_del(a, "stdin");
  json_object_set_new(a, "argv", json_pack("[s,s%]", "echo", big, (size_t)OP_EXEC_ARGS_BYTES));
  assert_false(op_check_args(JB_TOOL_EXEC, a, &v, &code, msg, sizeof msg));
  assert_int_equal(code, JB_MCP_TOO_LARGE);
  json_object_set_new(a, "argv", json_pack("[s]", "env"));
  json_object_set_new(a, "env", json_pack("{s:s%}", "RUST_LOG", big, (size_t)OP_EXEC_ARGS_BYTES));
  assert_false(op_check_args(JB_TOOL_EXEC, a, &v, &code, msg, sizeof msg));
  assert_int_equal(code, JB_MCP_TOO_LARGE);
  json_decref(a);
  free(big);
  /* cwd is the path the path rules judge; the root is allowed */
  a = json_pack("{s:[s],s:s}", "argv", "ls", "cwd", "src/lib");
  assert_true(op_check_args(JB_TOOL_EXEC, a, &v, &code, msg, sizeof msg));
  assert_string_equal(v.path, "src/lib");
  json_decref(a);
  struct op_path_verdict pv;
  assert_true(op_path_passes(".", 1, JB_TOOL_EXEC, NULL, NULL, &pv));
  assert_false(op_path_passes("../x", 4, JB_TOOL_EXEC, NULL, NULL, &pv));
  assert_int_equal(pv.syntax, JB_PATH_DOTDOT);
  /* the worker's arguments: command through /bin/sh -c, the defaults filled in */
  a = json_pack("{s:s,s:{s:s}}", "command", "echo $X", "env", "X", "1"); /* not decoded here */
  json_t *w = op_shim_args(JB_TOOL_EXEC, a, NULL);
  json_t *want = json_pack("[s,s,s]", "/bin/sh", "-c", "echo $X");
  assert_true(json_equal(json_object_get(w, "argv"), want));
  assert_string_equal(json_string_value(json_object_get(w, "cwd")), ".");
  assert_int_equal(json_integer_value(json_object_get(w, "timeoutMs")), 120000);
  assert_int_equal(json_integer_value(json_object_get(w, "maxOutputBytes")), 1048576);
  assert_true(json_is_false(json_object_get(w, "writable")));
  assert_string_equal(json_string_value(json_object_get(json_object_get(w, "env"), "X")), "1");
  assert_null(json_object_get(w, "stdin"));
  json_decref(want);
  json_decref(w);
  json_decref(a);
  a = json_pack("{s:[s,s],s:s,s:i,s:i,s:b,s:s}", "argv", "ls", "-l", "cwd", "src", "timeoutSec", 5,
                "maxOutputBytes", 10, "writable", 1, "stdin", "in");
  w = op_shim_args(JB_TOOL_EXEC, a, NULL);
  assert_true(json_equal(json_object_get(w, "argv"), json_object_get(a, "argv")));
  assert_int_equal(json_integer_value(json_object_get(w, "timeoutMs")), 5000);
  assert_int_equal(json_integer_value(json_object_get(w, "maxOutputBytes")), 10);
  assert_true(json_is_true(json_object_get(w, "writable")));
  assert_string_equal(json_string_value(json_object_get(w, "stdin")), "in");
  assert_null(json_object_get(w, "command"));
  json_decref(w);
  json_decref(a);
}

static void described(void **state) {
  (void)state;
  json_t *tools = jb_tools_describe(true);
  assert_non_null(tools);
  assert_int_equal(json_array_size(tools), JB_TOOL_COUNT + 1); /* and commit_changeset */
  size_t i;
  json_t *t;
  json_array_foreach (tools, i, t) {
    const char *name = json_string_value(json_object_get(t, "name"));
    if (!strcmp(name, "commit_changeset")) { /* not an op: api/core/batch.c decodes it */
      json_t *p = json_object_get(json_object_get(t, "inputSchema"), "properties");
      assert_non_null(json_object_get(p, "changeset"));
      continue;
    }
    enum jb_tool id = jb_tool_from_name(name);
    assert_int_not_equal(id, JB_TOOL_UNKNOWN);
    json_t *in = json_object_get(t, "inputSchema");
    assert_string_equal(json_string_value(json_object_get(in, "type")), "object");
    assert_true(json_is_false(json_object_get(in, "additionalProperties")));
    assert_true(json_is_object(json_object_get(t, "outputSchema")));
    json_t *ann = json_object_get(t, "annotations");
    assert_int_equal(json_is_true(json_object_get(ann, "readOnlyHint")),
                     !jb_tool_mutates(id) && id != JB_TOOL_DONE);
    assert_true(json_is_false(json_object_get(ann, "openWorldHint")));
    assert_true(strlen(json_string_value(json_object_get(t, "description"))) > 40);
    /* every argument the schema names is one the decoder knows */
    const char *key;
    json_t *p;
    json_object_foreach (json_object_get(in, "properties"), key, p) {
      json_t *one = json_object();
      json_object_set_new(one, key, json_string(""));
      struct op_args_view av;
      int code;
      char msg[300];
      if (!op_check_args(id, one, &av, &code, msg, sizeof msg))
        assert_null(strstr(msg, "unknown argument"));
      json_decref(one);
    }
  }
  json_t *edit = json_array_get(tools, 0);
  for (i = 0; i < json_array_size(tools); i++)
    if (!strcmp(json_string_value(json_object_get(json_array_get(tools, i), "name")), "edit"))
      edit = json_array_get(tools, i);
  json_t *edits =
      json_object_get(json_object_get(json_object_get(edit, "inputSchema"), "properties"), "edits");
  assert_int_equal(json_integer_value(json_object_get(edits, "maxItems")), OP_EDITS_MAX);
  json_decref(tools);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_tool_valid),
      cmocka_unit_test(unknown_and_types),
      cmocka_unit_test(integer_ranges),
      cmocka_unit_test(sizes),
      cmocka_unit_test(paths),
      cmocka_unit_test(shim_names),
      cmocka_unit_test(exec_args),
      cmocka_unit_test(described),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
