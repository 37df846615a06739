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
  long r = jb_workspace_restore(root, getgid(), 65534, &rec, &err);
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

/* A file made as the jail makes one: owned by 65534:65534, with `mode` (set after the chown). */
static void make_jail_file(const char *dir, const char *name, mode_t mode) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "agent\n", 6), 6);
  assert_int_equal(fchown(fd, 65534, 65534), 0);
  assert_int_equal(fchmod(fd, mode), 0);
  close(fd);
}

static void owner_of(const char *dir, const char *name, uid_t *uid, gid_t *gid) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  struct stat st;
  assert_int_equal(lstat(p, &st), 0);
  *uid = st.st_uid;
  *gid = st.st_gid;
}

#define assert_entry(dir, name, u, g, m)               \
  do {                                                 \
    uid_t u_;                                          \
    gid_t g_;                                          \
    owner_of(dir, name, &u_, &g_);                     \
    assert_int_equal(u_, u);                           \
    assert_int_equal(g_, g);                           \
    assert_int_equal(mode_of(dir, name), (mode_t)(m)); \
  } while (0)

/* What the jail made is given an owner outside it at the end: a rewritten file (new inode,
 * same name) its place's owner, group and mode without the grant's bits (a chmod the agent
 * made kept); a created file or directory that of the directory holding it; set-ID bits never
 * survive; a hard-linked file of the jail is left. Needs root (chown). */
static void jail_made_entries_get_owners(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char root[] = "/tmp/jb-wsaccess-XXXXXX";
  assert_non_null(mkdtemp(root));
  char p[600], q[600];
  assert_int_equal(chmod(root, 0755), 0);
  assert_int_equal(chown(root, 1000, 1000), 0);
  make_file(root, "a.sh", 0755);
  make_file(root, "b.txt", 0640);
  snprintf(p, sizeof p, "%s/a.sh", root);
  assert_int_equal(chown(p, 1000, 1000), 0);
  assert_int_equal(chmod(p, 0755), 0);
  snprintf(p, sizeof p, "%s/b.txt", root);
  assert_int_equal(chown(p, 1000, 1001), 0);
  struct jb_workspace_grant rec = {0};
  jb_error err = {0};
  assert_true(jb_workspace_grant(root, 65534, 100, &rec, &err) >= 3);
  assert_int_equal(mode_of(root, "a.sh"), 0775);
  /* the agent rewrites a.sh (keeping its mode, as the shim does) and b.txt (asking for set-ID
   * bits), creates new.txt, a directory with a set-user-ID file in it, and a hard link */
  make_jail_file(root, ".tmp1", 0775);
  snprintf(p, sizeof p, "%s/.tmp1", root);
  snprintf(q, sizeof q, "%s/a.sh", root);
  assert_int_equal(rename(p, q), 0);
  make_jail_file(root, ".tmp2", 06775);
  snprintf(p, sizeof p, "%s/.tmp2", root);
  snprintf(q, sizeof q, "%s/b.txt", root);
  assert_int_equal(rename(p, q), 0);
  make_jail_file(root, "new.txt", 0666);
  snprintf(p, sizeof p, "%s/made", root);
  assert_int_equal(mkdir(p, 0700), 0);
  assert_int_equal(chown(p, 65534, 65534), 0);
  assert_int_equal(chmod(p, 02777), 0);
  make_jail_file(p, "x", 04775);
  make_jail_file(p, "y", 0644);
  snprintf(q, sizeof q, "%s/made/y", root);
  snprintf(p, sizeof p, "%s/made/y2", root);
  assert_int_equal(link(q, p), 0);
  assert_true(jb_workspace_restore(root, 65534, 65534, &rec, &err) >= 5);
  assert_entry(root, ".", 1000, 1000, 0755);
  assert_entry(root, "a.sh", 1000, 1000, 0755);
  assert_entry(root, "b.txt", 1000, 1001, 0755); /* 06775, less set-ID and the grant's g+w */
  assert_entry(root, "new.txt", 1000, 1000, 0644); /* no o+w; no g+w: the root has none */
  assert_entry(root, "made", 1000, 1000, 0755); /* nor set-group-ID: the root has none */
  assert_entry(root, "made/x", 1000, 1000, 0755);
  assert_entry(root, "made/y", 65534, 65534, 0644); /* two links: left */
  jb_workspace_grant_free(&rec);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
}

/* The record survives the keeper's memfd whole; a file that does not add up loads as nothing */
static void grant_save_load(void **state) {
  (void)state;
  char root[] = "/tmp/jb-wsaccess-XXXXXX";
  assert_non_null(mkdtemp(root));
  make_file(root, "one", 0600);
  make_file(root, "two", 0600);
  struct jb_workspace_grant rec = {0}, back;
  jb_error err = {0};
  assert_true(jb_workspace_grant(root, getgid() == 0 ? 65534 : getgid(), 100, &rec, &err) >= 0);
  assert_int_equal(rec.np, 2);
  FILE *f = tmpfile();
  assert_non_null(f);
  assert_int_equal(jb_workspace_grant_save(fileno(f), &rec), 0);
  jb_workspace_grant_load(fileno(f), &back);
  assert_true(back.valid);
  assert_int_equal(back.n, rec.n);
  assert_int_equal(back.np, 2);
  assert_int_equal(back.names_len, rec.names_len);
  assert_memory_equal(back.names, rec.names, rec.names_len);
  assert_int_equal(back.root_ino, rec.root_ino);
  jb_workspace_grant_free(&back);
  assert_int_equal(ftruncate(fileno(f), 40), 0); /* cut short */
  jb_workspace_grant_load(fileno(f), &back);
  assert_false(back.valid);
  assert_int_equal(back.np, 0);
  fclose(f);
  jb_workspace_grant_free(&rec);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(restore_not_starved_by_new_entries),
      cmocka_unit_test(jail_made_entries_get_owners),
      cmocka_unit_test(grant_save_load),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
