/* test_workspace_scan.c — the worker's walks of a workspace kept for comparison
 * (jb_workspace_snapshot), what changed between two of them (jb_scan_changes), and the removal
 * of an entry that never passes a symbolic link (jb_workspace_remove), and the pre-scan's
 * covered links (landing_link). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka after the headers it needs */
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/worker/workspace_scan.h"

static void put(const char *dir, const char *name, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static json_t *find(json_t *changes, const char *path) {
  size_t i;
  json_t *c;
  json_array_foreach (changes, i, c)
    if (!strcmp(json_string_value(json_object_get(c, "path")), path)) return c;
  return NULL;
}

static void changes_between_walks(void **state) {
  (void)state;
  char dir[] = "/tmp/jbwsXXXXXX";
  assert_non_null(mkdtemp(dir));
  char p[512];
  put(dir, "same.txt", "same\n");
  put(dir, "mod.txt", "before\n");
  put(dir, "del.txt", "gone\n");
  put(dir, "mode.txt", "m\n");
  snprintf(p, sizeof p, "%s/sub", dir);
  assert_int_equal(mkdir(p, 0755), 0);
  jb_error err = {0};
  struct jb_scan_snapshot a, b;
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &a, &err), 0);
  assert_int_equal(a.n, 5);
  put(dir, "mod.txt", "after!\n");
  snprintf(p, sizeof p, "%s/del.txt", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/mode.txt", dir);
  chmod(p, 0600);
  put(dir, "sub/new.txt", "new\n");
  snprintf(p, sizeof p, "%s/out", dir);
  assert_int_equal(symlink("/etc/shadow", p), 0);
  put(dir, "bad\xff.txt", "x\n"); /* a name that is not UTF-8: listed, its byte replaced */
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &b, &err), 0);
  size_t total = 0;
  json_t *ch = jb_scan_changes(&a, &b, 100, &total);
  assert_non_null(ch);
  assert_int_equal(total, 6);
  assert_int_equal(json_array_size(ch), 6);
  assert_non_null(find(ch, "bad\xef\xbf\xbd.txt"));
  assert_null(find(ch, "same.txt"));
  assert_null(find(ch, "sub")); /* a directory whose content changed is not itself changed */
  assert_string_equal(json_string_value(json_object_get(find(ch, "mod.txt"), "change")),
                      "modified");
  assert_string_equal(json_string_value(json_object_get(find(ch, "del.txt"), "change")), "deleted");
  json_t *m = find(ch, "mode.txt");
  assert_string_equal(json_string_value(json_object_get(m, "change")), "mode");
  assert_string_equal(json_string_value(json_object_get(m, "mode")), "0600");
  json_t *n = find(ch, "sub/new.txt");
  assert_string_equal(json_string_value(json_object_get(n, "change")), "added");
  assert_string_equal(json_string_value(json_object_get(n, "sha256")),
                      "7aa7a5359173d05b63cfd682e3c38487f3cb4f7f1d60659fe59fab1505977d4c");
  json_t *o = find(ch, "out");
  assert_string_equal(json_string_value(json_object_get(o, "flagged")), "symlink_outside");
  assert_string_equal(json_string_value(json_object_get(o, "target")), "/etc/shadow");
  json_decref(ch);
  /* the cap: counted, not listed */
  ch = jb_scan_changes(&a, &b, 2, &total);
  assert_int_equal(json_array_size(ch), 2);
  assert_int_equal(total, 6);
  json_decref(ch);
  jb_scan_snapshot_free(&a);
  jb_scan_snapshot_free(&b);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

static void remove_never_through_a_link(void **state) {
  (void)state;
  char dir[] = "/tmp/jbwsXXXXXX", other[] = "/tmp/jbwsoXXXXXX";
  assert_non_null(mkdtemp(dir));
  assert_non_null(mkdtemp(other));
  char p[512], q[512];
  put(other, "victim", "keep me\n");
  snprintf(p, sizeof p, "%s/d", dir);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/link", dir);
  assert_int_equal(symlink(other, p), 0);
  snprintf(p, sizeof p, "%s/d/out", dir);
  assert_int_equal(symlink("/etc/shadow", p), 0);
  jb_error err = {0};
  /* through the link to another directory: refused, the file there stays */
  assert_int_equal(jb_workspace_remove(dir, "link/victim", &err), -1);
  snprintf(q, sizeof q, "%s/victim", other);
  assert_int_equal(access(q, F_OK), 0);
  /* the link itself goes, not what it leads to */
  assert_int_equal(jb_workspace_remove(dir, "d/out", &err), 0);
  snprintf(p, sizeof p, "%s/d/out", dir);
  struct stat st;
  assert_int_equal(lstat(p, &st), -1);
  assert_int_equal(access("/etc/shadow", F_OK), 0);
  /* a directory, "..", an empty name: refused */
  assert_int_equal(jb_workspace_remove(dir, "d", &err), -1);
  assert_int_equal(jb_workspace_remove(dir, "../x", &err), -1);
  assert_int_equal(jb_workspace_remove(dir, "d/", &err), -1);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, other);
  assert_int_equal(system(cmd), 0);
}

/* A tree deeper than the walk goes: no crash (the walk's frames are small: its read buffer is
 * on the heap), the walk marked not whole; a path past PATH_MAX likewise. */
static void deep_trees(void **state) {
  (void)state;
  char dir[] = "/tmp/jbwsXXXXXX";
  assert_non_null(mkdtemp(dir));
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  assert_true(fd >= 0);
  for (int i = 0; i < 300; i++) {
    assert_int_equal(mkdirat(fd, "a", 0755), 0);
    int next = openat(fd, "a", O_RDONLY | O_DIRECTORY);
    close(fd);
    assert_true(next >= 0);
    fd = next;
  }
  assert_int_equal(symlinkat("/etc/shadow", fd, "deep"), 0);
  close(fd);
  jb_error err = {0};
  struct jb_scan_snapshot a;
  assert_int_equal(jb_workspace_snapshot(dir, 100000, 1 << 20, &a, &err), 0);
  assert_true(a.truncated);
  assert_int_equal(a.n, 257); /* 256 levels entered, the next listed but not entered */
  jb_scan_snapshot_free(&a);
  /* long names: past PATH_MAX before the depth limit */
  char name[250];
  memset(name, 'b', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  char top[600];
  snprintf(top, sizeof top, "%s/long", dir);
  assert_int_equal(mkdir(top, 0755), 0);
  fd = open(top, O_RDONLY | O_DIRECTORY);
  for (int i = 0; i < 20; i++) {
    assert_int_equal(mkdirat(fd, name, 0755), 0);
    int next = openat(fd, name, O_RDONLY | O_DIRECTORY);
    close(fd);
    fd = next;
  }
  close(fd);
  assert_int_equal(jb_workspace_snapshot(top, 100000, 1 << 20, &a, &err), 0);
  assert_true(a.truncated);
  jb_scan_snapshot_free(&a);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* The pre-scan's covered links: a link at a place the landing rules cover is flagged at the
 * path its target names (landing_link, with the link), a link elsewhere is not. */
static void covered_links(void **state) {
  (void)state;
  char dir[] = "/tmp/jbwsXXXXXX", p[600];
  assert_non_null(mkdtemp(dir));
  snprintf(p, sizeof p, "%s/.git/hooks", dir);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "mkdir -p %s %s/scripts %s/docs", p, dir, dir);
  assert_int_equal(system(cmd), 0);
  put(dir, "scripts/hook.sh", "exit 0\n");
  snprintf(p, sizeof p, "%s/.git/hooks/pre-commit", dir);
  assert_int_equal(symlink("../../scripts/./hook.sh", p), 0);
  snprintf(p, sizeof p, "%s/.husky", dir); /* a directory link: its target holds the hooks */
  assert_int_equal(symlink("scripts", p), 0);
  snprintf(p, sizeof p, "%s/s", dir); /* a link on the way: resolved as the kernel does */
  assert_int_equal(symlink("scripts", p), 0);
  snprintf(p, sizeof p, "%s/.git/hooks/post-merge", dir); /* dangling, through s */
  assert_int_equal(symlink("../../s/merge.sh", p), 0);
  snprintf(p, sizeof p, "%s/docs/readme", dir); /* not covered */
  assert_int_equal(symlink("../scripts/hook.sh", p), 0);
  struct jb_scan_result r;
  jb_error err = {0};
  assert_int_equal(jb_workspace_scan(dir, 100000, 1 << 20, &r, &err), 0);
  size_t i, n = 0;
  json_t *f;
  json_array_foreach (r.flagged, i, f) {
    if (strcmp(json_string_value(json_object_get(f, "kind")), "landing_link")) continue;
    const char *path = json_string_value(json_object_get(f, "path"));
    const char *link = json_string_value(json_object_get(f, "link"));
    if (!strcmp(link, ".git/hooks/pre-commit"))
      assert_string_equal(path, "scripts/hook.sh");
    else if (!strcmp(link, ".husky"))
      assert_string_equal(path, "scripts");
    else if (!strcmp(link, ".git/hooks/post-merge"))
      assert_true(!strcmp(path, "s/merge.sh") || !strcmp(path, "scripts/merge.sh"));
    else
      fail_msg("unexpected landing_link %s -> %s", link, path);
    n++;
  }
  assert_int_equal(n, 4); /* post-merge twice: by its text and as the kernel resolves it */
  jb_scan_result_free(&r);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(changes_between_walks),
      cmocka_unit_test(remove_never_through_a_link),
      cmocka_unit_test(deep_trees),
      cmocka_unit_test(covered_links),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
