/* test_hooks_path.c — core.hooksPath as git reads it from a repository's configuration
 * (sections and keys case-insensitive, the last one set wins, quotes, escapes and comments),
 * and the pre-scan's landing_link flag for a hooks directory inside the workspace. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/worker/hooks_path.h"

static int hp(const char *text, char *out) {
  return jb_git_hooks_path(text, strlen(text), out, 256);
}

static void parse(void **state) {
  (void)state;
  char v[256];
  assert_int_equal(hp("[core]\n\trepositoryformatversion = 0\n\thooksPath = tools/hooks\n", v), 1);
  assert_string_equal(v, "tools/hooks");
  assert_int_equal(hp("[Core]\n  HOOKSPATH=\"a b\" ; a comment\n", v), 1);
  assert_string_equal(v, "a b");
  assert_int_equal(hp("[core] hooksPath = x\n[core]\nhookspath = y # last wins\n", v), 1);
  assert_string_equal(v, "y");
  assert_int_equal(hp("[core \"sub\"]\nhooksPath = no\n[user]\nhooksPath = no\n", v), 0);
  assert_int_equal(hp("[core]\nhooksPathX = no\nbare = false\n", v), 0);
  assert_int_equal(hp("[core]\nhooksPath = \"q\\\"uote\"\n", v), 1);
  assert_string_equal(v, "q\"uote");
  /* as git reads them: a continued line, CR LF */
  assert_int_equal(hp("[core]\n\thooksPath = hoo\\\nks\n", v), 1);
  assert_string_equal(v, "hooks");
  assert_int_equal(hp("[core]\n\thooksPath = a\t\\\n b\n", v), 1);
  assert_string_equal(v, "a  b"); /* blanks inside a value are spaces, as git keeps them */
  assert_int_equal(hp("[core]\r\n\thooksPath = hooks\r\n[user]\r\n", v), 1);
  assert_string_equal(v, "hooks");
  assert_int_equal(hp("; comment\n# another\n[core]\n\tbare\n\thooksPath = h \n", v), 1);
  assert_string_equal(v, "h");
  char small[4];
  assert_int_equal(jb_git_hooks_path("[core]\nhooksPath = longer\n", 25, small, sizeof small), -1);
}

static void prescan_flag(void **state) {
  (void)state;
  char dir[] = "/tmp/jb-hookspath-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char p[300];
  snprintf(p, sizeof p, "%s/.git", dir);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/.git/config", dir);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fprintf(f, "[core]\n\thooksPath = ./tools//hooks\n");
  fclose(f);
  json_t *scan = json_pack("{s:[],s:i}", "flagged", "flaggedCount", 0);
  jb_prescan_hooks_path(dir, NULL, scan);
  json_t *e = json_array_get(json_object_get(scan, "flagged"), 0);
  assert_non_null(e);
  assert_string_equal(json_string_value(json_object_get(e, "path")), "tools/hooks");
  assert_string_equal(json_string_value(json_object_get(e, "kind")), "landing_link");
  assert_string_equal(json_string_value(json_object_get(e, "link")), ".git/hooks");
  assert_int_equal(json_integer_value(json_object_get(scan, "flaggedCount")), 1);
  json_decref(scan);
  /* the files it includes, relative to .git/: flagged too */
  f = fopen(p, "w");
  fprintf(f,
          "[include]\n\tpath = ../.shared/gitconfig\n[includeIf \"gitdir:~/x/\"]\n\tpath = "
          "local.cfg\n[include]\n\tpath = ../../outside\n");
  fclose(f);
  scan = json_pack("{s:[],s:i}", "flagged", "flaggedCount", 0);
  jb_prescan_hooks_path(dir, NULL, scan);
  assert_int_equal(json_array_size(json_object_get(scan, "flagged")), 2);
  assert_string_equal(json_string_value(json_object_get(
                          json_array_get(json_object_get(scan, "flagged"), 0), "path")),
                      ".shared/gitconfig");
  assert_string_equal(json_string_value(json_object_get(
                          json_array_get(json_object_get(scan, "flagged"), 1), "path")),
                      ".git/local.cfg");
  json_decref(scan);
  /* outside the workspace (.., another absolute path, ~): nothing */
  const char *const outside[] = {"../hooks", "/etc/hooks", "~/hooks", "a/../../b"};
  for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
    f = fopen(p, "w");
    fprintf(f, "[core]\nhooksPath = %s\n", outside[i]);
    fclose(f);
    scan = json_pack("{s:[],s:i}", "flagged", "flaggedCount", 0);
    jb_prescan_hooks_path(dir, NULL, scan);
    assert_int_equal(json_array_size(json_object_get(scan, "flagged")), 0);
    json_decref(scan);
  }
  /* absolute under the workspace */
  f = fopen(p, "w");
  fprintf(f, "[core]\nhooksPath = %s/h\n", dir);
  fclose(f);
  scan = json_pack("{s:[],s:i}", "flagged", "flaggedCount", 0);
  jb_prescan_hooks_path(dir, NULL, scan);
  e = json_array_get(json_object_get(scan, "flagged"), 0);
  assert_string_equal(json_string_value(json_object_get(e, "path")), "h");
  json_decref(scan);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(parse), cmocka_unit_test(prescan_flag)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
