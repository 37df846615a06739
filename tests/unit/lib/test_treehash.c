/* test_treehash.c — tree hash v1 (lib/treehash.h) against the reference implementation
 * (tests/node/lib/treehash.py, run on the same tree) and against digests computed here from
 * the definition: the empty tree, every type, a mode change, a link to / not followed, invalid
 * UTF-8 names, the order of paths, and the limits. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "lib/treehash.h"

static char root[64];

static int setup(void **state) {
  (void)state;
  snprintf(root, sizeof root, "/tmp/jb-treehash-XXXXXX");
  return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "chmod -R u+rwx %s; rm -rf %s", root, root);
  return system(cmd) == 0 ? 0 : -1;
}

/* `rel` beneath the test's root, in a static buffer (one at a time). */
static const char *at(const char *rel) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  return p;
}

static void put(const char *rel, const char *content, mode_t mode) {
  int fd = open(at(rel), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
  assert_int_equal(fchmod(fd, mode), 0);
  close(fd);
}

/* The C digest of the root: the return code, the digest in `hex`, *why. */
static int c_hash(const struct jb_tree_hash_limits *lim, char hex[65], const char **why) {
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  assert_true(fd >= 0);
  jb_error err = {0};
  int rc = jb_tree_hash_at(fd, lim, hex, why, &err);
  close(fd);
  if (rc < 0) fail_msg("tree hash: %s", err.msg);
  return rc;
}

/* The reference implementation's digest of the root. */
static void py_hash(char hex[65]) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "python3 %s/tests/node/lib/treehash.py '%s'", JB_SOURCE_DIR, root);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[128] = "";
  size_t n = fread(line, 1, sizeof line - 1, p); /* all of it: the writer must not see EPIPE */
  assert_int_equal(pclose(p), 0);
  assert_int_equal(n, 65);
  assert_int_equal(line[64], '\n');
  memcpy(hex, line, 64);
  hex[64] = '\0';
}

/* The C digest equals the reference's; returns it in `hex`. */
static void same_as_reference(char hex[65]) {
  const char *why = "?";
  assert_int_equal(c_hash(NULL, hex, &why), 0);
  assert_null(why);
  char py[65];
  py_hash(py);
  assert_string_equal(hex, py);
}

/* SHA-256 (hex) of `len` bytes of `s`. */
static void sha(const void *s, size_t len, char hex[65]) {
  unsigned char h[32];
  crypto_hash_sha256(h, s, len);
  sodium_bin2hex(hex, 65, h, sizeof h);
}

static void empty_tree(void **state) {
  (void)state;
  char hex[65];
  same_as_reference(hex);
  assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void one_file_from_the_definition(void **state) {
  (void)state;
  put("a", "hi\n", 0640);
  char content[65], hex[65], want[65], rec[128];
  sha("hi\n", 3, content);
  int n = snprintf(rec, sizeof rec, "f%ca%c0640%c%s\n", 0, 0, 0, content);
  sha(rec, (size_t)n, want);
  same_as_reference(hex);
  assert_string_equal(hex, want);
}

static void every_type_and_mode(void **state) {
  (void)state;
  assert_int_equal(mkdir(at("d"), 0750), 0);
  assert_int_equal(mkdir(at("d/e"), 0700), 0);
  put("d/e/f.txt", "text", 0644);
  put("a.txt", "", 0600); /* "a.txt" < "a/…": '.' is 0x2e, '/' 0x2f */
  assert_int_equal(mkdir(at("a"), 0755), 0);
  put("a/b", "x", 04755);
  assert_int_equal(symlink("d/e/f.txt", at("link")), 0);
  assert_int_equal(symlink("nowhere", at("dangling")), 0);
  assert_int_equal(mkfifo(at("fifo"), 0620), 0); /* would block a read that opened it */
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", at("sock"));
  assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
  close(s);
  char first[65], second[65];
  same_as_reference(first);
  assert_int_equal(chmod(at("d/e/f.txt"), 0600), 0); /* the mode alone */
  same_as_reference(second);
  assert_string_not_equal(first, second);
  assert_int_equal(chmod(at("d/e/f.txt"), 0644), 0);
  same_as_reference(second);
  assert_string_equal(first, second);
  put("d/e/f.txt", "texT", 0644); /* the content alone */
  same_as_reference(second);
  assert_string_not_equal(first, second);
}

static void link_to_root_not_followed(void **state) {
  (void)state;
  assert_int_equal(symlink("/", at("up")), 0);
  assert_int_equal(mkdir(at("d"), 0755), 0);
  assert_int_equal(symlink("/etc", at("d/etc")), 0);
  char hex[65];
  const char *why;
  struct jb_tree_hash_limits lim = {.max_entries = 3, .max_bytes = 1};
  assert_int_equal(c_hash(&lim, hex, &why), 0); /* followed, / would be past both bounds */
  char py[65];
  py_hash(py);
  assert_string_equal(hex, py);
}

static void invalid_utf8_names(void **state) {
  (void)state;
  put("\xff\xfe", "bytes", 0644);
  put("caf\xc3\xa9", "ok", 0644);
  assert_int_equal(mkdir(at("\xc0\xaf"), 0755), 0);
  put("\xc0\xaf/\x80", "", 0644);
  assert_int_equal(symlink("\xff", at("l")), 0);
  char hex[65];
  same_as_reference(hex);
}

static void limits(void **state) {
  (void)state;
  assert_int_equal(mkdir(at("d"), 0755), 0);
  put("d/a", "1234", 0644);
  put("b", "5678", 0644);
  char hex[65];
  const char *why;
  struct jb_tree_hash_limits lim = {.max_entries = 2};
  assert_int_equal(c_hash(&lim, hex, &why), 1);
  assert_string_equal(why, "too_many_entries");
  assert_string_equal(hex, "");
  lim = (struct jb_tree_hash_limits){.max_entries = 3, .max_bytes = 7};
  assert_int_equal(c_hash(&lim, hex, &why), 1);
  assert_string_equal(why, "too_large");
  assert_string_equal(hex, "");
  lim.max_bytes = 8; /* exactly the content */
  assert_int_equal(c_hash(&lim, hex, &why), 0);
  assert_null(why);
  if (geteuid() != 0) { /* root reads anything */
    assert_int_equal(chmod(at("d"), 0), 0);
    assert_int_equal(c_hash(NULL, hex, &why), 1);
    assert_string_equal(why, "unreadable");
    assert_int_equal(chmod(at("d"), 0755), 0);
  }
}

int main(void) {
  if (sodium_init() < 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(empty_tree, setup, teardown),
      cmocka_unit_test_setup_teardown(one_file_from_the_definition, setup, teardown),
      cmocka_unit_test_setup_teardown(every_type_and_mode, setup, teardown),
      cmocka_unit_test_setup_teardown(link_to_root_not_followed, setup, teardown),
      cmocka_unit_test_setup_teardown(invalid_utf8_names, setup, teardown),
      cmocka_unit_test_setup_teardown(limits, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
