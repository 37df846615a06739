/* test_workspace_access.c — the jail's group access to a workspace and its undoing
 * (sandbox/worker/workspace_access.h), on a real directory tree. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/wait.h>
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
  char p[2048];
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
  char p[2048];
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
  /* 06775: no set-ID, not the grant's g+w, and for others nothing, as b.txt (0640) gave them */
  assert_entry(root, "b.txt", 1000, 1001, 0750);
  assert_entry(root, "new.txt", 1000, 1000, 0644); /* no o+w; no g+w: the root has none */
  assert_entry(root, "made", 1000, 1000, 0755); /* nor set-group-ID: the root has none */
  assert_entry(root, "made/x", 1000, 1000, 0755);
  assert_entry(root, "made/y", 65534, 65534, 0644); /* two links: its owner left */
  jb_workspace_grant_free(&rec);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
}

/* A file the worker rewrote in a recorded place during the session (a changeset applied, a
 * rollback: the owner of what it replaced, the jail's group and the grant's bits it had then)
 * gets the place's group back and loses the grant's bits; one of another owner, or outside
 * the jail's group, is left alone. */
static void rewritten_entries_given_back(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char root[] = "/tmp/jb-wsaccess-XXXXXX";
  assert_non_null(mkdtemp(root));
  char p[600], q[600];
  assert_int_equal(chmod(root, 0755), 0);
  assert_int_equal(chown(root, 1000, 1000), 0);
  const char *names[] = {"w.txt", "other.txt", "kept.txt"};
  for (int i = 0; i < 3; i++) {
    make_file(root, names[i], 0644);
    snprintf(p, sizeof p, "%s/%s", root, names[i]);
    assert_int_equal(chown(p, 1000, 1001), 0);
    assert_int_equal(chmod(p, 0644), 0);
  }
  struct jb_workspace_grant rec = {0};
  jb_error err = {0};
  assert_true(jb_workspace_grant(root, 65534, 100, &rec, &err) >= 4);
  assert_int_equal(mode_of(root, "w.txt"), 0664);
  /* the worker writes each anew (temporary file, rename): owner 1000, the jail's group, 0664;
   * all made before any is renamed, so that none takes an inode number a rename freed */
  for (int i = 0; i < 3; i++) {
    char t[16];
    snprintf(t, sizeof t, ".tmp%d", i);
    make_file(root, t, 0664);
    snprintf(p, sizeof p, "%s/%s", root, t);
    assert_int_equal(chown(p, i == 1 ? 1002 : 1000, i == 2 ? 1001 : 65534), 0);
    assert_int_equal(chmod(p, 0664), 0);
  }
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/.tmp%d", root, i);
    snprintf(q, sizeof q, "%s/%s", root, names[i]);
    assert_int_equal(rename(p, q), 0);
  }
  assert_true(jb_workspace_restore(root, 65534, 65534, &rec, &err) >= 2);
  assert_entry(root, "w.txt", 1000, 1001, 0644); /* the place's group, not the grant's g+w */
  assert_entry(root, "other.txt", 1002, 65534, 0664); /* another owner than the place's: left */
  assert_entry(root, "kept.txt", 1000, 1001, 0664); /* not in the jail's group: left */
  jb_workspace_grant_free(&rec);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
}

/* Runs `script` with sh as the jail's uid and gid (65534, no other group). */
static void as_jail(const char *script) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0) _exit(99);
    execl("/bin/sh", "sh", "-ec", script, (char *)NULL);
    _exit(98);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* What a break-it review found, each with what it must give instead:
 *  - a tree moved below the walk's old depth limit (256) was never restored;
 *  - a recorded file the jail owns (here: owned by 65534 before the session) given set-ID bits
 *    kept them once its group was given back;
 *  - a file the agent rewrote kept the write and read for others the agent gave it;
 *  - a jail file with several links kept its set-ID bits and write for group and others. */
static void review_faults(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char root[] = "/tmp/jb-wsaccess-XXXXXX";
  assert_non_null(mkdtemp(root));
  char p[600], cmd[4096];
  assert_int_equal(chmod(root, 0755), 0);
  assert_int_equal(chown(root, 1000, 1000), 0);
  snprintf(p, sizeof p, "%s/src", root);
  assert_int_equal(mkdir(p, 0700), 0);
  assert_int_equal(chown(p, 1000, 1000), 0);
  make_file(p, "a.txt", 0600);
  snprintf(p, sizeof p, "%s/src/a.txt", root);
  assert_int_equal(chown(p, 1000, 1000), 0);
  make_file(root, ".env", 0600);
  snprintf(p, sizeof p, "%s/.env", root);
  assert_int_equal(chown(p, 1000, 1000), 0);
  make_file(root, "nobodys", 0644);
  snprintf(p, sizeof p, "%s/nobodys", root);
  assert_int_equal(chown(p, 65534, 0), 0);
  struct jb_workspace_grant rec = {0};
  jb_error err = {0};
  assert_true(jb_workspace_grant(root, 65534, 1000, &rec, &err) >= 4);
  snprintf(cmd, sizeof cmd,
           "cd %s; d=.; i=0; while [ $i -lt 300 ]; do d=$d/x; i=$((i+1)); done; mkdir -p $d; "
           "mv src $d/; chmod 2755 nobodys; printf 'x' > .t; chmod 0666 .t; mv .t .env; "
           "printf 'y' > l1; ln l1 l2; chmod 4777 l1",
           root);
  as_jail(cmd);
  long n = jb_workspace_restore(root, 65534, 65534, &rec, &err);
  assert_true(n > 0);
  char deep[1400] = "";
  for (int i = 0; i < 300; i++) strcat(deep, "x/");
  char rel[1500];
  snprintf(rel, sizeof rel, "%ssrc", deep);
  assert_entry(root, rel, 1000, 1000, 0700);
  snprintf(rel, sizeof rel, "%ssrc/a.txt", deep);
  assert_entry(root, rel, 1000, 1000, 0600);
  assert_entry(root, "x", 1000, 1000, 0755); /* made by the jail: the root's owner */
  assert_entry(root, "nobodys", 65534, 0, 0755); /* its group back, without set-group-ID */
  assert_entry(root, ".env", 1000, 1000, 0600); /* nothing for others, as before */
  assert_entry(root, "l1", 65534, 65534, 0755); /* several links: no set-ID, g+w or o+w */
  jb_workspace_grant_free(&rec);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
}

/* What a second break-it review found:
 *  - a tree moved 65,537 levels down (the walk's next limit) was still out of reach: the walk
 *    now has no depth limit;
 *  - a directory bind-mounted inside the workspace from the same file system was entered (the
 *    device is the same; the mount id is not);
 *  - a chown took file capabilities from a buyer's file for good;
 *  - a POSIX ACL on a file the jail made survived its new owner. */
static void second_review(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char root[] = "/tmp/jb-wsaccess-XXXXXX";
  assert_non_null(mkdtemp(root));
  char p[600], cmd[1400];
  assert_int_equal(chown(root, 1000, 1000), 0);
  assert_int_equal(chmod(root, 0755), 0);
  snprintf(p, sizeof p, "%s/src", root);
  assert_int_equal(mkdir(p, 0700), 0);
  make_file(p, "a.txt", 0600);
  make_file(root, "tool", 0755);
  snprintf(p, sizeof p, "%s/tool", root);
  /* VFS_CAP_REVISION_2 with the effective flag, permitted CAP_NET_RAW (capabilities(7)) */
  uint32_t cap[5] = {0x02000001u, 1u << 13, 0, 0, 0};
  bool caps = setxattr(p, "security.capability", cap, sizeof cap, 0) == 0;
  snprintf(p, sizeof p, "%s/outside", root);
  char outside[700], mnt[700];
  snprintf(outside, sizeof outside, "%s.outside", root);
  assert_int_equal(mkdir(outside, 0700), 0);
  make_file(outside, "o.txt", 0600);
  snprintf(mnt, sizeof mnt, "%s/m", root);
  assert_int_equal(mkdir(mnt, 0755), 0);
  snprintf(cmd, sizeof cmd, "mount --bind '%s' '%s' 2>/dev/null", outside, mnt);
  bool bound = system(cmd) == 0;
  struct jb_workspace_grant rec = {0};
  jb_error err = {0};
  assert_true(jb_workspace_grant(root, 65534, 1000, &rec, &err) >= 3);
  if (bound) { /* the bind mount was neither entered nor changed */
    assert_int_equal(mode_of(outside, "."), 0700);
    assert_int_equal(mode_of(outside, "o.txt"), 0600);
  }
  if (caps) { /* the file with capabilities keeps them, and is not opened to the jail */
    snprintf(p, sizeof p, "%s/tool", root);
    assert_true(getxattr(p, "security.capability", NULL, 0) > 0);
    assert_int_equal(mode_of(root, "tool"), 0755);
  }
  /* the agent moves src 70,000 levels down, and leaves a file with an ACL for uid 1001 */
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  assert_true(fd >= 0);
  int rootfd = dup(fd);
  for (int i = 0; i < 70000; i++) {
    assert_int_equal(mkdirat(fd, "d", 0755), 0);
    int nfd = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(nfd >= 0);
    close(fd);
    fd = nfd;
  }
  assert_int_equal(renameat(rootfd, "src", fd, "src"), 0);
  close(fd);
  close(rootfd);
  make_jail_file(root, "shared", 0644);
  /* acl(5) xattr: version 2; USER_OBJ rw, USER 1001 rw, GROUP_OBJ r, MASK rw, OTHER r */
  struct __attribute__((packed)) {
    uint32_t version;
    struct __attribute__((packed)) {
      uint16_t tag, perm;
      uint32_t id;
    } e[5];
  } acl = {2,
           {{0x01, 6, UINT32_MAX},
            {0x02, 6, 1001},
            {0x04, 4, UINT32_MAX},
            {0x10, 6, UINT32_MAX},
            {0x20, 4, UINT32_MAX}}};
  snprintf(p, sizeof p, "%s/shared", root);
  bool acls = setxattr(p, "system.posix_acl_access", &acl, sizeof acl, 0) == 0;
  long n = jb_workspace_restore(root, 65534, 65534, &rec, &err);
  if (n < 0) fail_msg("restore: %s", err.msg);
  /* the moved tree, found at the bottom, has its group and mode back */
  fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  for (int i = 0; i < 70000; i++) {
    int nfd = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(nfd >= 0);
    close(fd);
    fd = nfd;
  }
  struct stat st;
  assert_int_equal(fstatat(fd, "src", &st, AT_SYMLINK_NOFOLLOW), 0);
  assert_int_equal(st.st_mode & 07777, 0700);
  assert_int_not_equal(st.st_gid, 65534);
  assert_int_equal(fstatat(fd, "src/a.txt", &st, AT_SYMLINK_NOFOLLOW), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_int_not_equal(st.st_gid, 65534);
  close(fd);
  if (acls) {
    assert_int_equal(getxattr(p, "system.posix_acl_access", NULL, 0), -1);
    assert_int_equal(errno, ENODATA);
  }
  if (caps) {
    snprintf(p, sizeof p, "%s/tool", root);
    assert_true(getxattr(p, "security.capability", NULL, 0) > 0);
  }
  if (bound) {
    snprintf(cmd, sizeof cmd, "umount '%s'", mnt);
    assert_int_equal(system(cmd), 0);
  }
  jb_workspace_grant_free(&rec);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", root, outside);
  assert_int_equal(system(cmd), 0);
}

/* A restore that could not reach everything says so (an error naming the first fault),
 * after giving back what it could. */
static void restore_reports_faults(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char root[] = "/tmp/jb-wsaccess-XXXXXX";
  assert_non_null(mkdtemp(root));
  make_file(root, "f", 0600);
  struct jb_workspace_grant rec = {0};
  jb_error err = {0};
  assert_true(jb_workspace_grant(root, 65534, 100, &rec, &err) >= 1);
  /* the root is moved away and another put in its place between two levels: not reachable
   * through "..": here, simply a record of a root that is gone */
  char cmd[700];
  snprintf(cmd, sizeof cmd, "mv '%s' '%s.old' && mkdir '%s'", root, root, root);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(jb_workspace_restore(root, 65534, 65534, &rec, &err), -1);
  assert_non_null(strstr(err.msg, "no longer the directory"));
  jb_workspace_grant_free(&rec);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s.old'", root, root);
  assert_int_equal(system(cmd), 0);

  /* a directory the walk cannot open (here: no descriptor left) is a fault, not a success */
  assert_non_null(mkdtemp(strcpy(root, "/tmp/jb-wsaccess-XXXXXX")));
  snprintf(cmd, sizeof cmd, "%s/sub", root);
  assert_int_equal(mkdir(cmd, 0700), 0);
  make_file(cmd, "g", 0600);
  rec = (struct jb_workspace_grant){0};
  assert_true(jb_workspace_grant(root, 65534, 100, &rec, &err) >= 3);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int lowest = dup(0);
    close(lowest);
    struct rlimit rl = {.rlim_cur = (rlim_t)lowest + 2, .rlim_max = (rlim_t)lowest + 2};
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) _exit(97);
    jb_error e2 = {0};
    long r = jb_workspace_restore(root, 65534, 65534, &rec, &e2);
    _exit(r == -1 && strstr(e2.msg, "could not be") ? 0 : 1);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  jb_workspace_grant_free(&rec);
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
  /* any one byte set to 0xff (a flag byte among them) loads as a record or as nothing, and
   * never reads a bool that is neither 0 nor 1 (the sanitizer build checks) */
  long size = lseek(fileno(f), 0, SEEK_END);
  assert_true(size > 0);
  unsigned char *orig = malloc((size_t)size);
  assert_non_null(orig);
  assert_int_equal(pread(fileno(f), orig, (size_t)size, 0), size);
  for (long i = 0; i < size; i++) {
    unsigned char ff = 0xff;
    assert_int_equal(pwrite(fileno(f), &ff, 1, i), 1);
    jb_workspace_grant_load(fileno(f), &back);
    if (back.valid) assert_true(back.n + back.np <= rec.n + rec.np + 4);
    jb_workspace_grant_free(&back);
    assert_int_equal(pwrite(fileno(f), orig + i, 1, i), 1);
  }
  free(orig);
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
      cmocka_unit_test(rewritten_entries_given_back),
      cmocka_unit_test(grant_save_load),
      cmocka_unit_test(review_faults),
      cmocka_unit_test(second_review),
      cmocka_unit_test(restore_reports_faults),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
