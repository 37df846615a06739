/* test_workspace_access.c — the jail's group access to a workspace and its undoing
 * (sandbox/worker/workspace_access.h), on a real directory tree. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/worker/workspace_access.h"

static void make_file(const char *dir, const char *name, mode_t mode) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "x\n", 2), 2);
  close(fd);
  assert_int_equal(chmod(p, mode), 0);
}

static mode_t mode_of(const char *dir, const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  struct stat st;
  assert_int_equal(lstat(p, &st), 0);
  return st.st_mode & 07777;
}

/* A review found the restore walk sharing the grant's budget of entries: an agent that wrote
 * enough new files (one a write) used it up before the walk met the buyer's files, which kept
 * the jail's group and its read/write bits after the session. */
static void restore_not_starved_by_new_entries(void **state) {
  (void)state;
  char root[] = "/tmp/jb-wsaccess-XXXXXX";
  assert_non_null(mkdtemp(root));
  assert_int_equal(chmod(root, 0700), 0);
  char name[32];
  for (int i = 0; i < 8; i++) {
    snprintf(name, sizeof name, "buyer-%d", i);
    make_file(root, name, 0600);
  }
  struct jb_workspace_grant rec = {0};
  jb_error err = {0};
  long n = jb_workspace_grant(root, getgid(), 100, &rec, &err);
  assert_true(n >= 8);
  assert_int_equal(mode_of(root, "buyer-0") & 0060, 0060);
  /* the session adds far more entries than the grant walked */
  for (int i = 0; i < 2000; i++) {
    snprintf(name, sizeof name, "agent-%04d", i);
    make_file(root, name, 0644);
  }
  long r = jb_workspace_restore(root, getgid(), &rec, &err);
  assert_true(r >= 8);
  for (int i = 0; i < 8; i++) {
    snprintf(name, sizeof name, "buyer-%d", i);
    assert_int_equal(mode_of(root, name), 0600);
  }
  assert_int_equal(mode_of(root, ".") & 0070, 0); /* the root's own bits too */
  assert_int_equal(mode_of(root, "agent-0000"), 0644); /* not the grant's: left alone */
  jb_workspace_grant_free(&rec);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(restore_not_starved_by_new_entries),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
