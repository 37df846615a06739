/* test_workspace_scan.c — the worker's walks of a workspace kept for comparison
 * (jb_workspace_snapshot), what changed between two of them (jb_scan_changes), the removal
 * of an entry that never passes a symbolic link (jb_workspace_remove), links resolved against
 * a walk (jb_scan_link_resolve), and the bounds of a walk (hashes reused, sparse files, bytes
 * to hash), and the pre-scan's covered links (landing_link). */
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
#include <time.h>
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

static void mklink(const char *dir, const char *target, const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  assert_int_equal(symlink(target, p), 0);
}

static long index_of(const struct jb_scan_snapshot *s, const char *path) {
  for (size_t i = 0; i < s->n; i++)
    if (!strcmp(s->v[i].path, path)) return (long)i;
  return -1;
}

/* Two links that each stay inside assemble one that leads out; the pre-scan flags it too. */
static void links_resolved_against_the_tree(void **state) {
  (void)state;
  char dir[] = "/tmp/jbwsXXXXXX", p[512];
  assert_non_null(mkdtemp(dir));
  snprintf(p, sizeof p, "%s/p", dir);
  assert_int_equal(mkdir(p, 0755), 0);
  mklink(dir, ".", "p/q"); /* p/q is p */
  mklink(dir, "p/q/../..", "up"); /* p/q/.. is the root, one more .. is above it */
  mklink(dir, "p/q/q/q", "in"); /* p itself */
  mklink(dir, "loop", "loop");
  mklink(dir, "nowhere/../..", "dangling"); /* dangles: nowhere is missing */
  put(dir, "p/f", "f\n");
  mklink(dir, "../p/f", "p/ok"); /* lexically inside */
  jb_error err = {0};
  struct jb_scan_snapshot a;
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &a, &err), 0);
  long up = index_of(&a, "up"), in = index_of(&a, "in"), q = index_of(&a, "p/q");
  bool changed[16] = {0};
  assert_true(a.n < 16);
  changed[q] = true;
  bool touched = false;
  size_t via[8], nvia = 0;
  assert_int_equal(jb_scan_link_resolve(&a, (size_t)up, changed, &touched, via, 8, &nvia), 1);
  assert_true(touched);
  assert_int_equal(nvia, 2);
  assert_int_equal(via[0], up);
  assert_int_equal(via[1], q);
  assert_int_equal(jb_scan_link_resolve(&a, (size_t)in, NULL, NULL, NULL, 0, NULL), 0);
  assert_int_equal(
      jb_scan_link_resolve(&a, (size_t)index_of(&a, "loop"), NULL, NULL, NULL, 0, NULL), 2);
  assert_int_equal(
      jb_scan_link_resolve(&a, (size_t)index_of(&a, "dangling"), NULL, NULL, NULL, 0, NULL), 0);
  assert_int_equal(
      jb_scan_link_resolve(&a, (size_t)index_of(&a, "p/ok"), NULL, NULL, NULL, 0, NULL), 0);
  /* the pre-scan: `up` is flagged though it is lexically inside */
  assert_string_equal(a.v[up].kind, "symlink_outside");
  assert_null(a.v[in].kind);
  jb_scan_snapshot_free(&a);
  struct jb_scan_result r;
  assert_int_equal(jb_workspace_scan(dir, 1000, 1 << 20, &r, &err), 0);
  char *flags = json_dumps(r.flagged, JSON_COMPACT);
  assert_non_null(strstr(flags, "\"up\""));
  assert_null(strstr(flags, "\"in\""));
  free(flags);
  jb_scan_result_free(&r);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* An unchanged file keeps the hash of the walk before (not read); a sparse file is judged by
 * its metadata; past the bytes to hash a file is left unhashed and the walk is not whole. */
static void walk_bounds(void **state) {
  (void)state;
  char dir[] = "/tmp/jbwsXXXXXX", p[512];
  assert_non_null(mkdtemp(dir));
  put(dir, "a.txt", "aaaa\n");
  put(dir, "b.txt", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n");
  snprintf(p, sizeof p, "%s/sparse", dir);
  int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 1LL << 30), 0);
  close(fd);
  jb_error err = {0};
  struct jb_walk_limits lim = {.max_entries = 1000, .hash_max = 2LL << 30};
  struct jb_scan_snapshot a, b;
  assert_int_equal(jb_workspace_snapshot_since(dir, &lim, NULL, &a, &err), 0);
  assert_false(a.truncated);
  long s = index_of(&a, "sparse"), x = index_of(&a, "a.txt");
  assert_int_equal(strncmp(a.v[s].detail, "sparse:1073741824:", 18), 0);
  assert_int_equal(strlen(a.v[x].detail), 64);
  /* a hash kept from a walk long enough after the file's change is reused as it is */
  a.started_ns += 10LL * 1000000000LL;
  free(a.v[x].detail);
  a.v[x].detail = strdup("0000000000000000000000000000000000000000000000000000000000000000");
  assert_int_equal(jb_workspace_snapshot_since(dir, &lim, &a, &b, &err), 0);
  assert_string_equal(b.v[index_of(&b, "a.txt")].detail, a.v[x].detail);
  jb_scan_snapshot_free(&b);
  /* not when the file changed in the walk's own clock tick (racy) */
  a.started_ns -= 10LL * 1000000000LL;
  assert_int_equal(jb_workspace_snapshot_since(dir, &lim, &a, &b, &err), 0);
  assert_string_not_equal(b.v[index_of(&b, "a.txt")].detail, a.v[x].detail);
  jb_scan_snapshot_free(&b);
  /* 10 bytes to hash: a.txt (5) is read, b.txt (43) is not */
  lim.hash_budget = 10;
  assert_int_equal(jb_workspace_snapshot_since(dir, &lim, NULL, &b, &err), 0);
  assert_true(b.truncated);
  assert_string_equal(b.why, "bytes to hash");
  assert_string_equal(b.v[index_of(&b, "b.txt")].detail, "unhashed");
  jb_scan_snapshot_free(&b);
  jb_scan_snapshot_free(&a);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* A walk before that was not whole: what it did not see counts as unchanged only when neither
 * it nor a directory above it was touched since (a rename touches what it moves). */
static void unseen_entries_judged_by_ctime(void **state) {
  (void)state;
  char dir[] = "/tmp/jbwsXXXXXX", p[512];
  assert_non_null(mkdtemp(dir));
  snprintf(p, sizeof p, "%s/d", dir);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/t", dir);
  assert_int_equal(mkdir(p, 0755), 0);
  put(dir, "d/one", "1\n");
  put(dir, "d/two", "2\n");
  put(dir, "t/hook", "h\n");
  struct timespec ts = {2, 300 * 1000 * 1000};
  nanosleep(&ts, NULL); /* older than the 2 s a walk trusts */
  jb_error err = {0};
  struct jb_scan_snapshot before, after;
  assert_int_equal(jb_workspace_snapshot(dir, 1, 1 << 20, &before, &err), 0);
  assert_true(before.truncated);
  char from[600], to[600];
  snprintf(from, sizeof from, "%s/t", dir);
  snprintf(to, sizeof to, "%s/d/moved", dir);
  assert_int_equal(rename(from, to), 0);
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &after, &err), 0);
  /* d itself gained an entry (its ctime is new): what is below it counts as changed */
  assert_true(jb_scan_entry_changed(&before, &after, (size_t)index_of(&after, "d/moved/hook")));
  assert_true(jb_scan_entry_changed(&before, &after, (size_t)index_of(&after, "d/moved")));
  jb_scan_snapshot_free(&after);
  jb_scan_snapshot_free(&before);
  /* nothing touched: an entry the walk before did not see is as it was */
  nanosleep(&ts, NULL);
  assert_int_equal(jb_workspace_snapshot(dir, 1, 1 << 20, &before, &err), 0);
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &after, &err), 0);
  for (size_t i = 0; i < after.n; i++) assert_false(jb_scan_entry_changed(&before, &after, i));
  jb_scan_snapshot_free(&after);
  jb_scan_snapshot_free(&before);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(unseen_entries_judged_by_ctime),
      cmocka_unit_test(links_resolved_against_the_tree),
      cmocka_unit_test(walk_bounds),
      cmocka_unit_test(changes_between_walks),
      cmocka_unit_test(remove_never_through_a_link),
      cmocka_unit_test(deep_trees),
      cmocka_unit_test(covered_links),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
