/* test_policy.c — approval rules (lib/policy.c): validation with its errors, first-match
 * decisions with the exclusion matcher's glob semantics, and the rules "allow similar" makes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/policy.h"

#define NOW 1796000000LL /* 2026-11-30 */

static char msg[512];

/* The checked rule of JSON text `text` (new), or NULL with msg. */
static json_t *chk(const char *text) {
  json_t *in = json_loads(text, 0, NULL);
  assert_non_null(in);
  json_t *r = jb_rule_check(in, false, NOW, msg, sizeof msg);
  json_decref(in);
  return r;
}

static void refused(const char *text, const char *words) {
  json_t *r = chk(text);
  if (r) fail_msg("accepted: %s", text);
  if (!strstr(msg, words)) fail_msg("%s: message \"%s\" lacks \"%s\"", text, msg, words);
}

static void validation(void **state) {
  (void)state;
  json_t *r = chk("{\"tool\":\"write\",\"path\":\"src/**\",\"effect\":\"allow\"}");
  assert_non_null(r);
  const char *id = json_string_value(json_object_get(r, "id"));
  assert_non_null(id);
  assert_int_equal(strlen(id), 14);
  assert_memory_equal(id, "r-", 2);
  json_decref(r);
  r =
      chk("{\"id\":\"mine\",\"tool\":\"exec\",\"argvPrefix\":[\"make\"],\"effect\":\"allow\","
          "\"expiresAt\":\"2027-01-02T03:04:05.5+00:00\",\"uses\":3}");
  assert_non_null(r);
  assert_string_equal(json_string_value(json_object_get(r, "expiresAt")), "2027-01-02T03:04:05Z");
  assert_string_equal(json_string_value(json_object_get(r, "id")), "mine");
  json_decref(r);

  refused("{\"tool\":\"write\",\"path\":\"\",\"effect\":\"allow\"}", "must not be empty");
  refused("{\"tool\":\"write\",\"path\":\"src/[abc\",\"effect\":\"deny\"}", "not closed");
  refused("{\"tool\":\"delete\",\"path\":\"../**\",\"effect\":\"deny\"}", "\"..\" component");
  char big[1200 + 64];
  snprintf(big, sizeof big, "{\"tool\":\"write\",\"path\":\"%01100d\",\"effect\":\"allow\"}", 0);
  refused(big, "at most 1024");
  refused("{\"tool\":\"write\",\"effect\":\"allow\",\"colour\":1}", "unknown field \"colour\"");
  refused("{\"tool\":\"chmod\",\"effect\":\"allow\"}", "tool must be");
  refused("{\"tool\":\"write\",\"effect\":\"maybe\"}", "effect must be");
  refused("{\"tool\":\"delete\",\"effect\":\"allow\"}", "\"broad\": true");
  refused("{\"tool\":\"delete\",\"path\":\"**\",\"effect\":\"allow\"}", "\"broad\": true");
  refused("{\"tool\":\"delete\",\"path\":\"**/*\",\"effect\":\"allow\"}", "\"broad\": true");
  refused("{\"tool\":\"exec\",\"effect\":\"allow\"}", "\"broad\": true");
  r = chk("{\"tool\":\"delete\",\"path\":\"**\",\"effect\":\"allow\",\"broad\":true}");
  assert_non_null(r);
  json_decref(r);
  r = chk("{\"tool\":\"delete\",\"effect\":\"deny\"}"); /* denying everything needs no consent */
  assert_non_null(r);
  json_decref(r);
  r = chk("{\"tool\":\"write\",\"effect\":\"allow\"}"); /* writes: the buyer's choice */
  assert_non_null(r);
  json_decref(r);
  refused("{\"tool\":\"exec\",\"argvPrefix\":[\"sh\"],\"effect\":\"allow\"}", "interpreter");
  refused("{\"tool\":\"exec\",\"argvPrefix\":[\"bash\",\"-c\"],\"effect\":\"allow\"}",
          "interpreter");
  refused("{\"tool\":\"exec\",\"argvPrefix\":[\"python3\",\"-c\"],\"effect\":\"allow\"}",
          "interpreter");
  refused("{\"tool\":\"exec\",\"argvPrefix\":[\"/usr/bin/env\",\"make\"],\"effect\":\"allow\"}",
          "interpreter");
  refused("{\"tool\":\"exec\",\"argvPrefix\":[\"python3.12\"],\"effect\":\"allow\"}",
          "interpreter");
  r = chk(
      "{\"tool\":\"exec\",\"argvPrefix\":[\"python3\",\"-m\",\"pytest\"],\"effect\":\"allow\"}");
  assert_non_null(r);
  json_decref(r);
  r = chk("{\"tool\":\"exec\",\"argvPrefix\":[\"sh\"],\"effect\":\"deny\"}");
  assert_non_null(r);
  json_decref(r);
  refused("{\"tool\":\"write\",\"argvPrefix\":[\"make\"],\"effect\":\"allow\"}", "exec rules only");
  refused("{\"tool\":\"exec\",\"maxBytes\":3,\"argvPrefix\":[\"make\"],\"effect\":\"allow\"}",
          "write and edit");
  refused("{\"tool\":\"write\",\"effect\":\"allow\",\"expiresAt\":\"tomorrow\"}", "RFC 3339");
  refused("{\"tool\":\"write\",\"effect\":\"allow\",\"expiresAt\":\"2020-01-01T00:00:00Z\"}",
          "in the past");
  refused("{\"tool\":\"write\",\"effect\":\"allow\",\"uses\":0}", "uses must be");
  refused("{\"tool\":\"write\",\"effect\":\"allow\",\"locked\":true}", "operator");
  refused("{\"id\":\"a b\",\"tool\":\"write\",\"effect\":\"allow\"}", "id must be");
  refused("[1]", "JSON object");
}

static void lists(void **state) {
  (void)state;
  json_t *many = json_array();
  for (int i = 0; i < 257; i++)
    json_array_append_new(many, json_pack("{s:s,s:s}", "tool", "write", "effect", "ask"));
  assert_null(jb_rules_check(many, 0, false, NOW, msg, sizeof msg));
  assert_non_null(strstr(msg, "at most 256"));
  json_array_remove(many, 0);
  json_t *ok = jb_rules_check(many, 0, false, NOW, msg, sizeof msg);
  assert_non_null(ok);
  json_decref(ok);
  assert_null(jb_rules_check(many, 1, false, NOW, msg, sizeof msg)); /* 1 stored already */
  json_decref(many);
  json_t *twice = json_loads(
      "[{\"id\":\"a\",\"tool\":\"write\",\"effect\":\"ask\"},"
      "{\"id\":\"a\",\"tool\":\"edit\",\"effect\":\"ask\"}]",
      0, NULL);
  assert_null(jb_rules_check(twice, 0, false, NOW, msg, sizeof msg));
  if (!strstr(msg, "rules[1]: id \"a\" is given twice")) fail_msg("%s", msg);
  json_decref(twice);
}

static const char *decide(const json_t *rules, const struct jb_rule_op *op) {
  const json_t *r = jb_rules_first_match(rules, op, NOW);
  return r ? json_string_value(json_object_get(r, "id")) : "default";
}

static void matching(void **state) {
  (void)state;
  json_t *rules = json_loads(
      "[{\"id\":\"no-secrets\",\"tool\":\"write\",\"path\":\"*.pem\",\"effect\":\"deny\"},"
      " {\"id\":\"src\",\"tool\":\"write\",\"path\":\"src/**\",\"effect\":\"allow\"},"
      " {\"id\":\"small\",\"tool\":\"edit\",\"path\":\"docs\",\"maxBytes\":10,\"effect\":\"allow\"}"
      ","
      " {\"id\":\"make\",\"tool\":\"exec\",\"argvPrefix\":[\"make\",\"test\"],\"effect\":\"allow\"}"
      ","
      " {\"id\":\"ls\",\"tool\":\"exec\",\"command\":\"ls -l\",\"effect\":\"allow\"},"
      " {\"id\":\"old\",\"tool\":\"mkdir\",\"effect\":\"allow\","
      "  \"expiresAt\":\"2026-11-30T00:00:00Z\"},"
      " {\"id\":\"mv\",\"tool\":\"move\",\"path\":\"src/**\",\"effect\":\"allow\"}]",
      0, NULL);
  assert_non_null(rules);
  struct jb_rule_op op = {.tool = "write", .path = "src/a/b.c", .size = 5};
  assert_string_equal(decide(rules, &op), "src");
  op.path = "SRC/x.c"; /* an allow rule's case counts: another directory */
  assert_string_equal(decide(rules, &op), "default");
  op.path = "src/keys/k.pem"; /* the deny before it wins */
  assert_string_equal(decide(rules, &op), "no-secrets");
  op.path = "tests/a.c";
  assert_string_equal(decide(rules, &op), "default");
  op.path = "srcx/a.c";
  assert_string_equal(decide(rules, &op), "default");
  op.tool = "edit"; /* a rule's tool only */
  op.path = "src/a.c";
  assert_string_equal(decide(rules, &op), "default");
  op.path = "docs/a/b.md"; /* a glob names everything below it */
  assert_string_equal(decide(rules, &op), "small");
  op.size = 11;
  assert_string_equal(decide(rules, &op), "default");
  op.size = -1;
  assert_string_equal(decide(rules, &op), "default");
  json_t *argv = json_pack("[s,s,s]", "make", "test", "-j2");
  op = (struct jb_rule_op){.tool = "exec", .path = ".", .argv = argv, .size = -1};
  assert_string_equal(decide(rules, &op), "make");
  json_array_set_new(argv, 1, json_string("install"));
  assert_string_equal(decide(rules, &op), "default");
  json_decref(argv);
  op.argv = NULL;
  op.command = "ls -l";
  assert_string_equal(decide(rules, &op), "ls");
  op.command = "ls -l; rm -rf x";
  assert_string_equal(decide(rules, &op), "default");
  op = (struct jb_rule_op){.tool = "mkdir", .path = "d", .size = -1}; /* expired */
  assert_string_equal(decide(rules, &op), "default");
  op = (struct jb_rule_op){.tool = "move", .path = "src/a", .dest = "src/b", .size = -1};
  assert_string_equal(decide(rules, &op), "mv");
  op.dest = "out/b"; /* both ends must match */
  assert_string_equal(decide(rules, &op), "default");
  json_decref(rules);
}

static void similar(void **state) {
  (void)state;
  struct jb_rule_op op = {.tool = "write", .path = "src/a/b.c", .size = 3};
  json_t *r = jb_rule_similar(&op, "directory", msg, sizeof msg);
  assert_non_null(r);
  assert_string_equal(json_string_value(json_object_get(r, "path")), "src/a/**");
  assert_string_equal(json_string_value(json_object_get(r, "effect")), "allow");
  assert_string_equal(json_string_value(json_object_get(r, "tool")), "write");
  struct jb_rule_op other = {.tool = "write", .path = "src/a/c/d.h", .size = 3};
  assert_true(jb_rule_matches(r, &other, NOW));
  other.path = "src/b.c";
  assert_false(jb_rule_matches(r, &other, NOW));
  json_decref(r);
  r = jb_rule_similar(&op, "extension", msg, sizeof msg);
  assert_non_null(r);
  assert_string_equal(json_string_value(json_object_get(r, "path")), "src/a/**/*.c");
  other.path = "src/a/x/y.c";
  assert_true(jb_rule_matches(r, &other, NOW));
  other.path = "src/a/x/y.h";
  assert_false(jb_rule_matches(r, &other, NOW));
  json_decref(r);
  op.path = "top.c";
  assert_null(jb_rule_similar(&op, "directory", msg, sizeof msg));
  assert_non_null(strstr(msg, "workspace root"));
  r = jb_rule_similar(&op, "extension", msg, sizeof msg);
  assert_string_equal(json_string_value(json_object_get(r, "path")), "/*.c");
  other.path = "x.c";
  assert_true(jb_rule_matches(r, &other, NOW));
  other.path = "sub/x.c";
  assert_false(jb_rule_matches(r, &other, NOW));
  json_decref(r);
  op.path = "Makefile";
  assert_null(jb_rule_similar(&op, "extension", msg, sizeof msg));
  r = jb_rule_similar(&op, "session", msg, sizeof msg);
  assert_non_null(r);
  assert_null(json_object_get(r, "path"));
  json_decref(r);
  json_t *argv = json_pack("[s,s,s]", "npm", "test", "--silent");
  op = (struct jb_rule_op){.tool = "exec", .path = ".", .argv = argv, .size = -1};
  r = jb_rule_similar(&op, "command", msg, sizeof msg);
  assert_non_null(r);
  assert_null(json_object_get(r, "argvPrefix"));
  assert_true(json_equal(json_object_get(r, "argv"), argv)); /* the command whole */
  assert_string_equal(json_string_value(json_object_get(r, "cwd")), ".");
  json_decref(r);
  json_decref(argv);
  argv = json_pack("[s,s,s]", "bash", "-c", "make");
  op.argv = argv;
  assert_null(jb_rule_similar(&op, "command", msg, sizeof msg));
  assert_non_null(strstr(msg, "interpreter"));
  json_decref(argv);
  op.argv = NULL;
  op.command = "make";
  assert_null(jb_rule_similar(&op, "command", msg, sizeof msg));
  r = jb_rule_similar(&op, "session", msg, sizeof msg); /* the buyer said every exec */
  assert_non_null(r);
  assert_true(json_is_true(json_object_get(r, "broad")));
  json_decref(r);
  assert_null(jb_rule_similar(&op, "everything", msg, sizeof msg));
}

/* The op's path is text, not a glob: a directory the agent named "*", "**" or "[a-z]" gives a
 * rule for that directory only; an option after the program is no command to allow by. */
static void similar_literal(void **state) {
  (void)state;
  static const struct {
    const char *path, *key, *glob, *same, *other;
  } cases[] = {
      {"*/x.c", "directory", "\\*/**", "*/y.sh", "etc/evil.sh"},
      {"**/x.c", "directory", "\\*\\*/**", "**/y", "a/b/evil.sh"},
      {"[a-z]/x.c", "directory", "\\[a-z\\]/**", "[a-z]/y", "q/evil.sh"},
      {"a?/x.c", "directory", "a\\?/**", "a?/y", "ab/y"},
      {"b\\/x.c", "directory", "b\\\\/**", "b\\/y", "b/y"},
      {"src/x.*", "extension", "src/**/*.\\*", "src/d/y.*", "src/y.sh"},
      {"*.c", "extension", "/*.c", "y.c", "sub/y.c"},
      {"x.[ch]", "extension", "/*.\\[ch\\]", "y.[ch]", "y.c"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct jb_rule_op op = {.tool = "write", .path = cases[i].path, .size = 1};
    json_t *r = jb_rule_similar(&op, cases[i].key, msg, sizeof msg);
    assert_non_null(r);
    assert_string_equal(json_string_value(json_object_get(r, "path")), cases[i].glob);
    struct jb_rule_op o = {.tool = "write", .path = cases[i].same, .size = 1};
    assert_true(jb_rule_matches(r, &o, NOW));
    o.path = cases[i].other;
    assert_false(jb_rule_matches(r, &o, NOW));
    json_decref(r);
  }
  /* an option after the program is part of the exact command, and nothing else is */
  json_t *argv = json_pack("[s,s,s,s]", "git", "-c", "core.pager=less", "log");
  struct jb_rule_op op = {.tool = "exec", .path = ".", .argv = argv, .size = -1};
  json_t *r = jb_rule_similar(&op, "command", msg, sizeof msg);
  assert_non_null(r);
  assert_true(jb_rule_matches(r, &op, NOW));
  json_t *other = json_pack("[s,s,s,s]", "git", "-c", "core.pager=sh -c id", "log");
  op.argv = other;
  assert_false(jb_rule_matches(r, &op, NOW));
  json_decref(other);
  json_decref(r);
  json_decref(argv);
  /* stdin can be the program: no rule from it */
  argv = json_pack("[s,s]", "make", "-f/dev/stdin");
  op.argv = argv;
  op.stdin_data = true;
  assert_null(jb_rule_similar(&op, "command", msg, sizeof msg));
  assert_non_null(strstr(msg, "stdin"));
  op.stdin_data = false;
  json_decref(argv);
  /* programs that run what their arguments name: no prefix of theirs allows */
  static const char *const launch[][2] = {{"npx", "cowsay"}, {"/usr/bin/find", "."},
                                          {"pnpx", "x"},     {"uvx", "ruff"},
                                          {"parallel", "x"}, {"pipx", "run"}};
  for (size_t i = 0; i < sizeof launch / sizeof launch[0]; i++) {
    argv = json_pack("[s,s,s]", launch[i][0], launch[i][1], "x");
    op.argv = argv;
    assert_null(jb_rule_similar(&op, "command", msg, sizeof msg));
    assert_non_null(strstr(msg, "launcher"));
    json_decref(argv);
  }
}

/* An allow rule errs towards asking: case counts and a wildcard last component names no
 * directory's contents; a deny or an ask rule errs towards holding, on either end of a move. */
static void allow_narrow_deny_wide(void **state) {
  (void)state;
  json_t *allow = json_pack("{s:s,s:s,s:s,s:s}", "id", "a", "tool", "write", "path", "src/**",
                            "effect", "allow");
  struct jb_rule_op op = {.tool = "write", .path = "src/a.c", .size = 1};
  assert_true(jb_rule_matches(allow, &op, NOW));
  op.path = "SRC/evil.sh"; /* another directory on a case-sensitive file system */
  assert_false(jb_rule_matches(allow, &op, NOW));
  op.path = "Src/a.c";
  assert_false(jb_rule_matches(allow, &op, NOW));
  json_decref(allow);
  allow =
      json_pack("{s:s,s:s,s:s,s:s}", "id", "a", "tool", "write", "path", "/*.c", "effect", "allow");
  op.path = "x.c";
  assert_true(jb_rule_matches(allow, &op, NOW));
  op.path = "x.c/evil.sh"; /* a directory named like a C file */
  assert_false(jb_rule_matches(allow, &op, NOW));
  json_decref(allow);
  allow =
      json_pack("{s:s,s:s,s:s,s:s}", "id", "a", "tool", "write", "path", "src", "effect", "allow");
  op.path = "src/a/b.c"; /* a plain name still names its directory's contents */
  assert_true(jb_rule_matches(allow, &op, NOW));
  json_decref(allow);
  json_t *deny = json_pack("{s:s,s:s,s:s,s:s}", "id", "d", "tool", "write", "path", "secrets/**",
                           "effect", "deny");
  op.path = "SECRETS/k";
  assert_true(jb_rule_matches(deny, &op, NOW));
  json_decref(deny);
  deny = json_pack("{s:s,s:s,s:s,s:s}", "id", "d", "tool", "move", "path", "keep/**", "effect",
                   "deny");
  op = (struct jb_rule_op){.tool = "move", .path = "keep/a", .dest = "out/a", .size = -1};
  assert_true(jb_rule_matches(deny, &op, NOW)); /* out of the denied directory */
  op = (struct jb_rule_op){.tool = "move", .path = "in/a", .dest = "keep/a", .size = -1};
  assert_true(jb_rule_matches(deny, &op, NOW)); /* into it */
  op = (struct jb_rule_op){.tool = "move", .path = "in/a", .dest = "out/a", .size = -1};
  assert_false(jb_rule_matches(deny, &op, NOW));
  json_decref(deny);
}

/* An exec that sets variables is not the program an allow rule named: PATH=./bin picks
 * another "make", MAKEFLAGS=--eval adds rules; a deny still matches it. */
static void exec_env(void **state) {
  (void)state;
  json_t *allow = json_pack("{s:s,s:s,s:[s,s],s:s}", "id", "a", "tool", "exec", "argvPrefix",
                            "make", "test", "effect", "allow");
  json_t *deny = json_pack("{s:s,s:s,s:[s],s:s}", "id", "d", "tool", "exec", "argvPrefix", "make",
                           "effect", "deny");
  json_t *cmd = json_pack("{s:s,s:s,s:s,s:s}", "id", "c", "tool", "exec", "command", "make test",
                          "effect", "allow");
  json_t *argv = json_pack("[s,s]", "make", "test");
  struct jb_rule_op op = {.tool = "exec", .path = ".", .argv = argv, .size = -1};
  assert_true(jb_rule_matches(allow, &op, NOW));
  op.env = true;
  assert_false(jb_rule_matches(allow, &op, NOW));
  assert_true(jb_rule_matches(deny, &op, NOW));
  op = (struct jb_rule_op){.tool = "exec", .path = ".", .command = "make test", .size = -1};
  assert_true(jb_rule_matches(cmd, &op, NOW));
  op.env = true;
  assert_false(jb_rule_matches(cmd, &op, NOW));
  json_decref(argv);
  json_decref(allow);
  json_decref(deny);
  json_decref(cmd);
}

/* allow-similar "command" allows the approved command exactly: the same argv item for item
 * (an appended option asks), the same cwd, the same variables with the same values, nothing
 * on stdin, and writable only when the approved one was. */
static void exact_command(void **state) {
  (void)state;
  json_t *argv = json_pack("[s,s]", "make", "check");
  struct jb_rule_op op = {
      .tool = "exec", .path = "src", .argv = argv, .size = -1, .writable = true};
  json_t *r = jb_rule_similar(&op, "command", msg, sizeof msg);
  assert_non_null(r);
  assert_true(json_is_true(json_object_get(r, "writable")));
  assert_null(json_object_get(r, "env"));
  assert_true(jb_rule_matches(r, &op, NOW));
  struct jb_rule_op o = op;
  json_t *more = json_pack("[s,s,s]", "make", "check", "--eval=x:;id");
  o.argv = more;
  assert_false(jb_rule_matches(r, &o, NOW)); /* GNU make reads options anywhere */
  json_t *fewer = json_pack("[s]", "make");
  o.argv = fewer;
  assert_false(jb_rule_matches(r, &o, NOW));
  json_t *changed = json_pack("[s,s]", "make", "checK");
  o.argv = changed;
  assert_false(jb_rule_matches(r, &o, NOW));
  o = op;
  o.path = "."; /* another directory, another Makefile */
  assert_false(jb_rule_matches(r, &o, NOW));
  o = op;
  o.command = "make check"; /* a shell's argv is the shell's */
  assert_false(jb_rule_matches(r, &o, NOW));
  o = op;
  o.stdin_data = true;
  assert_false(jb_rule_matches(r, &o, NOW));
  o = op;
  json_t *env = json_pack("{s:s}", "LANG", "C");
  o.env = true;
  o.env_vars = env;
  assert_false(jb_rule_matches(r, &o, NOW)); /* a variable the buyer did not see */
  o.env_vars = NULL; /* a caller that says "some" without saying which: no */
  assert_false(jb_rule_matches(r, &o, NOW));
  json_decref(r);
  /* from an approval with variables: the same names and values only */
  op.env = true;
  op.env_vars = env;
  r = jb_rule_similar(&op, "command", msg, sizeof msg);
  assert_non_null(r);
  json_t *names = json_pack("[s]", "LANG");
  assert_true(json_equal(json_object_get(r, "env"), names));
  assert_int_equal(strlen(json_string_value(json_object_get(r, "envSha256"))), 64);
  assert_true(jb_rule_matches(r, &op, NOW));
  o = op;
  json_t *env2 = json_pack("{s:s}", "LANG", "de_DE.UTF-8");
  o.env_vars = env2;
  assert_false(jb_rule_matches(r, &o, NOW)); /* another value */
  json_t *env3 = json_pack("{s:s,s:s}", "LANG", "C", "TZ", "UTC");
  o.env_vars = env3;
  assert_false(jb_rule_matches(r, &o, NOW)); /* one more variable */
  o.env_vars = NULL;
  o.env = false;
  assert_false(jb_rule_matches(r, &o, NOW)); /* one fewer */
  /* the digest: order-free, value-bound */
  char h1[65], h2[65];
  json_t *ab = json_pack("{s:s,s:s}", "A", "1", "B", "2"),
         *ba = json_pack("{s:s,s:s}", "B", "2", "A", "1");
  json_t *a12 = json_pack("{s:s,s:s}", "A", "1B", "B", "");
  assert_int_equal(jb_rule_env_sha256(ab, h1), 0);
  assert_int_equal(jb_rule_env_sha256(ba, h2), 0);
  assert_string_equal(h1, h2);
  assert_int_equal(jb_rule_env_sha256(a12, h2), 0);
  assert_string_not_equal(h1, h2);
  /* a read-only approval does not allow a writable run */
  json_decref(r);
  op.writable = false;
  r = jb_rule_similar(&op, "command", msg, sizeof msg);
  o = op;
  o.writable = true;
  assert_false(jb_rule_matches(r, &o, NOW));
  json_decref(r);
  /* the grammar: argv whole, with cwd, env and envSha256; not with argvPrefix or command */
  refused("{\"tool\":\"exec\",\"argv\":[\"make\"],\"argvPrefix\":[\"make\"],\"effect\":\"allow\"}",
          "one of argv");
  refused("{\"tool\":\"exec\",\"cwd\":\"src\",\"effect\":\"deny\"}", "go with argv");
  refused("{\"tool\":\"write\",\"argv\":[\"make\"],\"effect\":\"allow\"}", "exec rules only");
  refused("{\"tool\":\"exec\",\"argv\":[],\"effect\":\"allow\"}", "1..256");
  refused("{\"tool\":\"exec\",\"argv\":[\"make\"],\"env\":[\"A-B\"],\"effect\":\"allow\"}",
          "variable name");
  refused("{\"tool\":\"exec\",\"argv\":[\"make\"],\"env\":[\"A\",\"A\"],\"effect\":\"allow\"}",
          "twice");
  refused(
      "{\"tool\":\"exec\",\"argv\":[\"make\"],\"env\":[\"A\"],\"envSha256\":\"00\","
      "\"effect\":\"allow\"}",
      "64 lowercase hex");
  refused("{\"tool\":\"exec\",\"argv\":[\"bash\",\"-x\"],\"effect\":\"allow\"}", "interpreter");
  refused("{\"tool\":\"exec\",\"argv\":[\"env\",\"make\"],\"effect\":\"allow\"}", "launcher");
  json_t *d = chk("{\"tool\":\"exec\",\"argv\":[\"rm\",\"-rf\",\"x\"],\"effect\":\"deny\"}");
  assert_non_null(d);
  json_t *rm = json_pack("[s,s,s]", "rm", "-rf", "x");
  o = (struct jb_rule_op){
      .tool = "exec", .path = "sub", .argv = rm, .size = -1, .env = true, .env_vars = env3};
  assert_true(jb_rule_matches(d, &o, NOW)); /* a deny looks at argv alone */
  json_decref(d);
  json_decref(rm);
  json_decref(ab);
  json_decref(ba);
  json_decref(a12);
  json_decref(names);
  json_decref(env);
  json_decref(env2);
  json_decref(env3);
  json_decref(more);
  json_decref(fewer);
  json_decref(changed);
  json_decref(argv);
}

/* An exec allow rule allows read-only commands unless it says writable: true; a deny or an ask
 * rule holds both kinds; allow-similar "command" from a writable exec says writable. */
static void exec_writable(void **state) {
  (void)state;
  json_t *ro =
      chk("{\"id\":\"ro\",\"tool\":\"exec\",\"argvPrefix\":[\"make\"],\"effect\":\"allow\"}");
  json_t *rw =
      chk("{\"id\":\"rw\",\"tool\":\"exec\",\"argvPrefix\":[\"make\"],"
          "\"effect\":\"allow\",\"writable\":true}");
  json_t *deny =
      chk("{\"id\":\"d\",\"tool\":\"exec\",\"argvPrefix\":[\"make\"],\"effect\":\"deny\"}");
  json_t *ask =
      chk("{\"id\":\"k\",\"tool\":\"exec\",\"command\":\"make\",\"effect\":\"ask\","
          "\"writable\":false}");
  assert_non_null(ro);
  assert_non_null(rw);
  assert_non_null(deny);
  assert_non_null(ask);
  json_t *argv = json_pack("[s,s]", "make", "all");
  struct jb_rule_op op = {.tool = "exec", .path = ".", .argv = argv, .size = -1};
  assert_true(jb_rule_matches(ro, &op, NOW));
  assert_true(jb_rule_matches(rw, &op, NOW));
  op.writable = true;
  assert_false(jb_rule_matches(ro, &op, NOW));
  assert_true(jb_rule_matches(rw, &op, NOW));
  assert_true(jb_rule_matches(deny, &op, NOW));
  struct jb_rule_op sh = {
      .tool = "exec", .path = ".", .command = "make", .size = -1, .writable = true};
  assert_true(jb_rule_matches(ask, &sh, NOW));
  /* first match: the read-only allow is passed over for a writable exec */
  json_t *list = json_pack("[O,O]", ro, deny);
  assert_string_equal(decide(list, &op), "d");
  op.writable = false;
  assert_string_equal(decide(list, &op), "ro");
  json_decref(list);
  refused("{\"tool\":\"write\",\"effect\":\"allow\",\"writable\":true}",
          "writable is for exec rules only");
  refused("{\"tool\":\"exec\",\"argvPrefix\":[\"make\"],\"effect\":\"allow\",\"writable\":1}",
          "writable must be true or false");
  /* allow similar */
  op.writable = true;
  json_t *sim = jb_rule_similar(&op, "command", msg, sizeof msg);
  assert_non_null(sim);
  assert_true(json_is_true(json_object_get(sim, "writable")));
  assert_true(jb_rule_matches(sim, &op, NOW));
  json_decref(sim);
  op.writable = false;
  sim = jb_rule_similar(&op, "command", msg, sizeof msg);
  assert_non_null(sim);
  assert_null(json_object_get(sim, "writable"));
  op.writable = true;
  assert_false(jb_rule_matches(sim, &op, NOW));
  json_decref(sim);
  sim = jb_rule_similar(&op, "session", msg, sizeof msg);
  assert_non_null(sim);
  assert_true(json_is_true(json_object_get(sim, "writable")));
  json_decref(sim);
  json_decref(argv);
  json_decref(ro);
  json_decref(rw);
  json_decref(deny);
  json_decref(ask);
}

/* A compiled list: the index of the first match, the earliest expiresAt, a rule past its
 * expiresAt deciding nothing, an over-long path named by a deny and by no allow. */
static void compiled(void **state) {
  (void)state;
  json_t *in = json_loads(
      "[{\"id\":\"x\",\"tool\":\"write\",\"path\":\"src/**\",\"effect\":\"allow\","
      "\"expiresAt\":\"2026-12-01T00:00:00Z\"},"
      "{\"id\":\"y\",\"tool\":\"write\",\"path\":\"*.c\",\"effect\":\"deny\","
      "\"expiresAt\":\"2026-12-02T00:00:00Z\"},"
      "{\"id\":\"z\",\"tool\":\"write\",\"effect\":\"ask\",\"uses\":3}]",
      0, NULL);
  json_t *rules = jb_rules_check(in, 0, false, NOW, msg, sizeof msg);
  json_decref(in);
  assert_non_null(rules);
  struct jb_rules *rs = jb_rules_compile(rules);
  assert_non_null(rs);
  assert_int_equal(jb_rules_count(rs), 3);
  long long t;
  assert_int_equal(jb_rule_parse_time("2026-12-01T00:00:00Z", &t), 0);
  assert_true(jb_rules_next_expiry(rs) == t);
  struct jb_rule_op op = {.tool = "write", .path = "src/a.c", .size = 1};
  assert_int_equal(jb_rules_match(rs, &op, NOW), 0);
  assert_string_equal(jb_rules_id(rs, 0), "x");
  assert_int_equal(jb_rules_effect(rs, 0), JB_RULE_ALLOW);
  assert_false(jb_rules_counts_uses(rs, 0));
  assert_true(jb_rules_counts_uses(rs, 2));
  assert_int_equal(jb_rules_match(rs, &op, t), 1); /* x expired at t: the deny of *.c */
  assert_int_equal(jb_rules_match(rs, &op, t + 86400), 2); /* both expired */
  op.path = "docs/a.md";
  assert_int_equal(jb_rules_match(rs, &op, NOW), 2);
  op.tool = "edit";
  assert_int_equal(jb_rules_match(rs, &op, NOW), -1);
  /* longer than any workspace path: no allow names it, a deny does */
  char *longp = malloc(5000);
  memset(longp, 'a', 4999);
  memcpy(longp, "src/", 4);
  longp[4999] = '\0';
  op = (struct jb_rule_op){.tool = "write", .path = longp, .size = 1};
  assert_int_equal(jb_rules_match(rs, &op, NOW), 1);
  free(longp);
  jb_rules_free(rs);
  jb_rules_free(NULL);
  json_decref(rules);
}

/* An expiry is a real UTC time: no day a month lacks, no sign or blank in a field. */
static void expiry_times(void **state) {
  (void)state;
  long long t = 0;
  assert_int_equal(jb_rule_parse_time("2028-02-29T00:00:00Z", &t), 0); /* a leap day */
  assert_int_equal(jb_rule_parse_time("2026-12-03T10:00:00.5+00:00", &t), 0);
  const char *bad[] = {"2026-02-31T00:00:00Z", "2027-02-29T00:00:00Z",      "2026-04-31T00:00:00Z",
                       "2026-+1-03T10:00:00Z", "2026-1-03T10:00:00Z",       "2026-12- 3T10:00:00Z",
                       "2026-12-03T10:00:00",  "2026-12-03T10:00:00+01:00", "2026-12-03 10:00:00Z",
                       "+2026-12-03T10:00:00Z"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(jb_rule_parse_time(bad[i], &t), -1);
}

static void policy_file(void **state) {
  (void)state;
  const char *good =
      "# the operator's rules\n"
      "\n"
      "{\"id\":\"no-keys\",\"tool\":\"write\",\"path\":\"*.key\","
      "\"effect\":\"deny\",\"locked\":true}\n"
      "  {\"tool\":\"exec\",\"argvPrefix\":[\"make\"],\"effect\":\"allow\"}\r\n";
  json_t *r = jb_policy_file_parse(good, strlen(good), "p.jsonl", NOW, msg, sizeof msg);
  if (!r) fail_msg("%s", msg);
  assert_int_equal(json_array_size(r), 2);
  assert_true(json_is_true(json_object_get(json_array_get(r, 0), "locked")));
  json_decref(r);
  const char *bad[][2] = {
      {"{\"tool\":\"write\",\"effect\":\"ask\"}\n\n{\"tool\":\"write\"}\n",
       "p.jsonl:3: effect must be"},
      {"# x\n{\"tool\":\"write\",\"effect\":\"ask\",\n", "p.jsonl:2: not a JSON object"},
      {"{\"tool\":\"write\",\"effect\":\"allow\",\"uses\":3}", "p.jsonl:1: uses counts"},
      {"{\"id\":\"a\",\"tool\":\"write\",\"effect\":\"ask\"}\n"
       "{\"id\":\"a\",\"tool\":\"edit\",\"effect\":\"ask\"}",
       "p.jsonl:2: id \"a\" is given twice"},
      {"{\"tool\":\"exec\",\"argvPrefix\":[\"sh\"],\"effect\":\"allow\"}", "p.jsonl:1: argvPrefix"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_null(
        jb_policy_file_parse(bad[i][0], strlen(bad[i][0]), "p.jsonl", NOW, msg, sizeof msg));
    if (strncmp(msg, bad[i][1], strlen(bad[i][1]))) fail_msg("%zu: %s", i, msg);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(validation),      cmocka_unit_test(lists),
      cmocka_unit_test(matching),        cmocka_unit_test(similar),
      cmocka_unit_test(similar_literal), cmocka_unit_test(allow_narrow_deny_wide),
      cmocka_unit_test(expiry_times),    cmocka_unit_test(exec_env),
      cmocka_unit_test(exact_command),   cmocka_unit_test(policy_file),
      cmocka_unit_test(exec_writable),   cmocka_unit_test(compiled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
