/* test_pathcheck.c — jailboxd's checks of a file op before it is stored: path syntax
 * (lib/pathcheck.c, also compiled into the shim) and exclusion globs. The content
 * scanner has its own test (test_scan.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/pathcheck.h"

static enum jb_path_verdict chk(const char *p) { return jb_path_check(p, strlen(p), 0); }

static void path_ok(void **state) {
  (void)state;
  assert_int_equal(chk("a"), JB_PATH_OK);
  assert_int_equal(chk("a/b/c.txt"), JB_PATH_OK);
  assert_int_equal(chk(".hidden/x"), JB_PATH_OK);
  assert_int_equal(chk("..."), JB_PATH_OK); /* not "..": an ordinary name */
  assert_int_equal(chk("a..b/..c"), JB_PATH_OK);
  /* decoded exactly once: these are ordinary bytes */
  assert_int_equal(chk("%2e%2e/etc/passwd"), JB_PATH_OK);
  assert_int_equal(chk("..\\..\\etc"), JB_PATH_OK);
  assert_int_equal(chk("\xe2\x80\xa4\xe2\x80\xa4/x"), JB_PATH_OK); /* U+2024 ONE DOT LEADER */
  assert_int_equal(chk("\xef\xbc\x8f"
                       "etc"),
                   JB_PATH_OK); /* U+FF0F FULLWIDTH SOLIDUS */
  assert_int_equal(jb_path_check(".", 1, 1), JB_PATH_OK);
}

static void path_refused(void **state) {
  (void)state;
  assert_int_equal(chk(""), JB_PATH_EMPTY);
  assert_int_equal(jb_path_check(NULL, 0, 0), JB_PATH_EMPTY);
  assert_int_equal(jb_path_check("a\0b", 3, 0), JB_PATH_NUL);
  assert_int_equal(chk("/etc/passwd"), JB_PATH_ABSOLUTE);
  assert_int_equal(chk("//x"), JB_PATH_ABSOLUTE);
  assert_int_equal(chk(".."), JB_PATH_DOTDOT);
  assert_int_equal(chk("../x"), JB_PATH_DOTDOT);
  assert_int_equal(chk("a/../../x"), JB_PATH_DOTDOT);
  assert_int_equal(chk("a/.."), JB_PATH_DOTDOT);
  assert_int_equal(chk("."), JB_PATH_DOT);
  assert_int_equal(chk("./a"), JB_PATH_DOT);
  assert_int_equal(chk("a/./b"), JB_PATH_DOT);
  assert_int_equal(chk("a//b"), JB_PATH_EMPTY_NAME);
  assert_int_equal(chk("a/"), JB_PATH_EMPTY_NAME);
  char name[300];
  memset(name, 'n', 256);
  name[256] = '\0';
  assert_int_equal(chk(name), JB_PATH_NAME_TOO_LONG);
  name[255] = '\0';
  assert_int_equal(chk(name), JB_PATH_OK);
  char *longp = malloc(JB_PATH_MAX + 2);
  for (int i = 0; i < JB_PATH_MAX + 1; i++) longp[i] = (i % 2) ? '/' : 'a';
  longp[JB_PATH_MAX + 1] = '\0';
  assert_int_equal(chk(longp), JB_PATH_TOO_LONG);
  longp[JB_PATH_MAX - 1] = '\0'; /* 4095 bytes ending in 'a' */
  assert_int_equal(chk(longp), JB_PATH_OK);
  free(longp);
  assert_string_not_equal(jb_path_verdict_text(JB_PATH_DOTDOT), "ok");
}

static void exclusions(void **state) {
  (void)state;
  json_t *g = json_pack("[s,s,s]", "secrets", "*.pem", ".git");
  const char *which = NULL;
  assert_true(jb_path_excluded("secrets", g, &which));
  assert_string_equal(which, "secrets");
  assert_true(jb_path_excluded("secrets/a/b.txt", g, NULL));
  assert_true(jb_path_excluded("key.pem", g, NULL));
  assert_true(
      jb_path_excluded("dir/key.pem", g, NULL)); /* a glob without '/' names any component */
  assert_true(jb_path_excluded("dir/.git/hooks/x", g, NULL));
  json_t *g3 = json_pack("[s]", "secrets/*");
  assert_true(jb_path_excluded("secrets/.env", g3, NULL)); /* a leading dot is not special */
  assert_true(jb_path_excluded("secrets/a/.env", g3, NULL));
  assert_false(jb_path_excluded("other/.env", g3, NULL));
  json_decref(g3);
  assert_true(jb_path_excluded(".git/config", g, NULL));
  assert_false(jb_path_excluded("src/main.c", g, NULL));
  assert_false(jb_path_excluded("notsecrets", g, NULL));
  /* "**" is any number of directories, none included (a review found "** /.env" hiding only
   * "x/.env": fnmatch's "**" is one component's "*") */
  json_t *g4 = json_pack("[s,s,s,s]", "**/.env", "secrets/**", "conf/**/*.key", "/top");
  assert_true(jb_path_excluded(".env", g4, &which));
  assert_string_equal(which, "**/.env");
  assert_true(jb_path_excluded("a/.env", g4, NULL));
  assert_true(jb_path_excluded("a/b/c/.env", g4, NULL));
  assert_true(jb_path_excluded("a/b/.env/inside", g4, NULL));
  assert_false(jb_path_excluded("a/b/x.env", g4, NULL));
  assert_true(jb_path_excluded("secrets", g4, NULL));
  assert_true(jb_path_excluded("secrets/.git-credentials", g4, NULL));
  assert_true(jb_path_excluded("secrets/a/b/.env2", g4, NULL));
  assert_true(jb_path_excluded("conf/a.key", g4, NULL));
  assert_true(jb_path_excluded("conf/x/y/.a.key", g4, NULL));
  assert_false(jb_path_excluded("conf/x/y/a.pem", g4, NULL));
  assert_false(jb_path_excluded("x/conf/a.key", g4, NULL));
  assert_true(jb_path_excluded("top/a", g4, NULL)); /* a leading '/' anchors at the root */
  assert_false(jb_path_excluded("x/top", g4, NULL));
  json_decref(g4);
  json_t *g5 = json_pack("[s,s]", "/", "a/**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/z");
  assert_false(jb_path_excluded("a/b", g5, NULL)); /* "/" names nothing */
  char *deep = malloc(4100);
  assert_non_null(deep);
  size_t k = 0;
  deep[k++] = 'a';
  while (k + 2 < 4096) {
    deep[k++] = '/';
    deep[k++] = 'b';
  }
  deep[k] = '\0';
  assert_false(jb_path_excluded(deep, g5, NULL)); /* many "**" on a deep path: no blow-up */
  deep[k - 1] = 'z';
  assert_true(jb_path_excluded(deep, g5, NULL));
  free(deep);
  json_decref(g5);
  /* case is ignored: on a case-insensitive file system (vfat, exFAT, ext4 casefold)
   * "SECRETS/key.txt" opens secrets/key.txt */
  assert_true(jb_path_excluded("SECRETS/key.txt", g, NULL));
  assert_true(jb_path_excluded("Dir/KEY.PEM", g, NULL));
  assert_true(jb_path_excluded(".GIT/config", g, NULL));
  json_t *g2 = json_pack("[s]", "*");
  assert_true(jb_path_excluded(".env", g2, NULL)); /* excluding errs on the side of hiding */
  assert_true(jb_path_excluded("a/b", g2, NULL));
  assert_false(jb_path_excluded("x", NULL, NULL));
  json_decref(g);
  json_decref(g2);
}

/* jb_glob_check refuses a glob that could never match as written, with the reason; what
 * fnmatch reads as a closed bracket expression or an escape passes, and matches */
static void glob_checks(void **state) {
  (void)state;
  char msg[256];
  static const char *const good[] = {"src/**",   "/etc/**",          "src/[abc]/*.c",
                                     "src/\\[x", "[[:digit:]]*.log", "[]]x",
                                     "[!a]b",    "[^a-z]",           "a\\\\"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    msg[0] = '\0';
    if (jb_glob_check(good[i], msg, sizeof msg) != 0) fail_msg("refused %s: %s", good[i], msg);
  }
  static const struct {
    const char *glob, *why;
  } bad[] = {
      {"src/[abc", "not closed"},     {"src/[abc/d]", "not closed"}, {"[]", "not closed"},
      {"[[:digit:]", "not closed"},   {"../**", "\"..\" component"}, {"src/./a", "\".\" component"},
      {"a/b/..", "\"..\" component"}, {"src\\", "backslash ends"},   {"src\\/x", "backslash ends"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    msg[0] = '\0';
    if (jb_glob_check(bad[i].glob, msg, sizeof msg) != -1) fail_msg("accepted %s", bad[i].glob);
    if (!strstr(msg, bad[i].why)) fail_msg("%s: \"%s\" lacks \"%s\"", bad[i].glob, msg, bad[i].why);
  }
  /* what passes means what fnmatch reads it as */
  assert_int_equal(jb_path_glob_match("src/b/x.c", "src/[abc]/*.c", 0), 1);
  assert_int_equal(jb_path_glob_match("src/d/x.c", "src/[abc]/*.c", 0), 0);
  assert_int_equal(jb_path_glob_match("src/[x", "src/\\[x", 0), 1);
  assert_int_equal(jb_path_glob_match("7.log", "[[:digit:]]*.log", 0), 1);
  assert_int_equal(jb_path_glob_match("]x", "[]]x", 0), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(glob_checks),
      cmocka_unit_test(path_ok),
      cmocka_unit_test(path_refused),
      cmocka_unit_test(exclusions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
