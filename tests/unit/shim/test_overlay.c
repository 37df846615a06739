/* test_overlay.c — the spawner's overlay helpers (sandbox/shim/overlay.h) on a hand-made upper
 * in a temporary directory, without Docker (run as root: mknod of a whiteout, trusted.*
 * xattrs): the manifest's entries (whiteout, opaque directory, mode, symlink target read and
 * not followed, nested paths), its bounds (entries, depth) answered too_large, the id's rules,
 * the request's checks, and discard removing a tree without following a link out of it. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "sandbox/shim/overlay.h"

static char root[64];

static void pathof(char *p, size_t n, const char *rel) { snprintf(p, n, "%s/%s", root, rel); }

static void put(const char *rel, const char *content, mode_t mode) {
  char p[512];
  pathof(p, sizeof p, rel);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(content, f);
  fclose(f);
  assert_int_equal(chmod(p, mode), 0);
}

static void dir(const char *rel) {
  char p[512];
  pathof(p, sizeof p, rel);
  assert_int_equal(mkdir(p, 0755), 0);
}

static int setup(void **state) {
  (void)state;
  snprintf(root, sizeof root, "/tmp/jb-ovl-XXXXXX");
  assert_non_null(mkdtemp(root));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  return system(cmd) == 0 ? 0 : -1;
}

/* The manifest of `rel` under root (NULL: failed, *code set). */
static json_t *manifest(const char *rel, size_t max, const char **code, char *why) {
  char p[512];
  pathof(p, sizeof p, rel);
  int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  assert_true(fd >= 0);
  json_t *m = jb_cs_manifest_at(fd, max, code, why, 300);
  close(fd);
  return m;
}

static json_t *entry(json_t *m, const char *path) {
  size_t i;
  json_t *e;
  json_array_foreach (m, i, e)
    if (!strcmp(json_string_value(json_object_get(e, "path")), path)) return e;
  return NULL;
}

static void test_manifest_entries(void **state) {
  (void)state;
  dir("u");
  char p[512];
  pathof(p, sizeof p, "u/gone");
  assert_int_equal(mknod(p, S_IFCHR | 0000, makedev(0, 0)), 0); /* a whiteout */
  pathof(p, sizeof p, "u/tty");
  assert_int_equal(mknod(p, S_IFCHR | 0600, makedev(0, 7)), 0); /* a device, not a whiteout */
  dir("u/d");
  pathof(p, sizeof p, "u/d");
  assert_int_equal(setxattr(p, "trusted.overlay.opaque", "y", 1, 0), 0);
  put("u/d/new", "n\n", 0644);
  dir("u/plain");
  pathof(p, sizeof p, "u/plain");
  assert_int_equal(setxattr(p, "trusted.overlay.opaque", "n", 1, 0), 0);
  put("u/plain/x", "xyz", 0600);
  put("u/modme", "m\n", 04755); /* set-ID bits are reported as they are */
  pathof(p, sizeof p, "u/out");
  assert_int_equal(symlink("/etc", p), 0); /* a link out: its text, never followed */
  const char *code = NULL;
  char why[300];
  json_t *m = manifest("u", 100, &code, why);
  assert_non_null(m);
  assert_int_equal(json_array_size(m), 8);
  json_t *e = entry(m, "gone");
  assert_string_equal(json_string_value(json_object_get(e, "type")), "char");
  assert_true(json_is_true(json_object_get(e, "whiteout")));
  e = entry(m, "tty");
  assert_false(json_is_true(json_object_get(e, "whiteout")));
  e = entry(m, "d");
  assert_string_equal(json_string_value(json_object_get(e, "type")), "dir");
  assert_true(json_is_true(json_object_get(e, "opaque")));
  assert_int_equal(json_integer_value(json_object_get(e, "size")), 0);
  e = entry(m, "d/new");
  assert_string_equal(json_string_value(json_object_get(e, "type")), "file");
  assert_int_equal(json_integer_value(json_object_get(e, "size")), 2);
  assert_int_equal(json_integer_value(json_object_get(e, "mode")), 0644);
  assert_false(json_is_true(json_object_get(entry(m, "plain"), "opaque")));
  assert_int_equal(json_integer_value(json_object_get(entry(m, "plain/x"), "size")), 3);
  assert_int_equal(json_integer_value(json_object_get(entry(m, "modme"), "mode")), 04755);
  e = entry(m, "out");
  assert_string_equal(json_string_value(json_object_get(e, "type")), "symlink");
  assert_string_equal(json_string_value(json_object_get(e, "target")), "/etc");
  assert_null(entry(m, "out/passwd"));
  json_decref(m);
}

static void test_manifest_bounds(void **state) {
  (void)state;
  dir("u");
  for (int i = 0; i < 5; i++) {
    char rel[32];
    snprintf(rel, sizeof rel, "u/f%d", i);
    put(rel, "", 0644);
  }
  const char *code = NULL;
  char why[300];
  json_t *rq;
  assert_null(manifest("u", 4, &code, why));
  assert_string_equal(code, "too_large");
  assert_non_null(strstr(why, "entries"));
  json_t *m = manifest("u", 5, &code, why);
  assert_int_equal(json_array_size(m), 5);
  json_decref(m);
  /* long names: the JSON bound (each byte counted as escaped) comes before any line limit */
  dir("w");
  for (int i = 0; i < 700; i++) {
    char rel[300];
    snprintf(rel, sizeof rel, "w/%03d%0240d", i, 0);
    put(rel, "", 0644);
  }
  assert_null(manifest("w", 100000, &code, why));
  assert_string_equal(code, "too_large");
  assert_non_null(strstr(why, "1 MiB"));
  /* a name that is not UTF-8: bad_name, and a message the answer's JSON can carry */
  dir("n");
  dir("n/sub\xc3");
  put("n/sub\xc3/\xff", "", 0644);
  rq = json_pack("{s:s}", "overlay", "n2");
  dir("n2");
  char from[512], to[512];
  pathof(from, sizeof from, "n");
  pathof(to, sizeof to, "n2/upper");
  assert_int_equal(rename(from, to), 0);
  assert_null(jb_cs_request(root, "cs_manifest", rq, &code, why, sizeof why));
  assert_string_equal(code, "bad_name");
  for (const char *c = why; *c; c++) assert_true(*c >= 0x20 && *c <= 0x7e);
  json_decref(rq);
  /* 65 directories deep: over JB_CS_MAX_DEPTH */
  char rel[512] = "u";
  for (int i = 0; i <= JB_CS_MAX_DEPTH; i++) {
    strcat(rel, "/a");
    dir(rel);
  }
  assert_null(manifest("u", 1000, &code, why));
  assert_string_equal(code, "too_large");
  assert_non_null(strstr(why, "deeper"));
}

static void test_ids_and_requests(void **state) {
  (void)state;
  assert_true(jb_cs_id_valid("x1"));
  assert_true(jb_cs_id_valid("A-b_9"));
  char long_id[JB_CS_ID_MAX + 2];
  memset(long_id, 'a', sizeof long_id - 1);
  long_id[JB_CS_ID_MAX + 1] = '\0';
  assert_false(jb_cs_id_valid(long_id));
  long_id[JB_CS_ID_MAX] = '\0';
  assert_true(jb_cs_id_valid(long_id));
  const char *bad[] = {"", "..", "a/b", "a b", "a.b", "é", NULL};
  for (const char **b = bad; *b; b++) assert_false(jb_cs_id_valid(*b));
  assert_false(jb_cs_id_valid(NULL));

  const char *code = NULL;
  char why[300], out[JB_CS_ID_MAX + 1];
  json_t *rq = json_pack("{s:s}", "overlay", "../x");
  assert_null(jb_cs_request(root, "cs_manifest", rq, &code, why, sizeof why));
  assert_string_equal(code, "bad_request");
  assert_int_equal(jb_cs_exec_field(rq, true, out, why, sizeof why), -1);
  json_decref(rq);
  rq = json_pack("{s:s, s:i}", "overlay", "x1", "maxEntries", 0);
  assert_null(jb_cs_request(root, "cs_manifest", rq, &code, why, sizeof why));
  assert_string_equal(code, "bad_request");
  json_decref(rq);
  rq = json_pack("{s:s}", "overlay", "x1");
  assert_null(jb_cs_request(root, "cs_manifest", rq, &code, why, sizeof why));
  assert_string_equal(code, "not_found");
  assert_int_equal(jb_cs_exec_field(rq, false, out, why, sizeof why), -1); /* not writable */
  assert_int_equal(jb_cs_exec_field(rq, true, out, why, sizeof why), 0);
  assert_string_equal(out, "x1");
  dir("x1");
  dir("x1/upper");
  put("x1/upper/f", "f", 0644);
  json_t *r = jb_cs_request(root, "cs_manifest", rq, &code, why, sizeof why);
  assert_non_null(r);
  assert_int_equal(json_integer_value(json_object_get(r, "count")), 1);
  json_decref(r);
  assert_null(jb_cs_request(root, "cs_nothing", rq, &code, why, sizeof why));
  assert_string_equal(code, "unknown_op");
  r = jb_cs_request(root, "cs_discard", rq, &code, why, sizeof why);
  assert_true(json_is_true(json_object_get(r, "discarded")));
  json_decref(r);
  json_decref(rq);
  char p[512];
  struct stat st;
  pathof(p, sizeof p, "x1");
  assert_int_equal(lstat(p, &st), -1);
  json_t *empty = json_object();
  assert_int_equal(jb_cs_exec_field(empty, false, out, why, sizeof why), 0);
  assert_string_equal(out, "");
  json_decref(empty);
}

static void test_discard_and_sweep(void **state) {
  (void)state;
  /* a tree with a link leading out to a directory whose content must survive */
  dir("keep");
  put("keep/precious", "p", 0644);
  dir("a");
  dir("a/upper");
  dir("a/upper/sub");
  dir("a/upper/sub/deeper");
  put("a/upper/sub/deeper/f", "f", 0000);
  char p[512], t[512];
  pathof(t, sizeof t, "keep");
  pathof(p, sizeof p, "a/upper/link");
  assert_int_equal(symlink(t, p), 0);
  pathof(p, sizeof p, "a/upper/sub/wh");
  assert_int_equal(mknod(p, S_IFCHR, makedev(0, 0)), 0);
  dir("b");
  dir("b/merged");
  char why[300];
  assert_int_equal(jb_cs_discard(root, "a", why, sizeof why), 0);
  struct stat st;
  pathof(p, sizeof p, "a");
  assert_int_equal(lstat(p, &st), -1);
  pathof(p, sizeof p, "keep/precious");
  assert_int_equal(lstat(p, &st), 0);
  assert_int_equal(jb_cs_discard(root, "a", why, sizeof why), 0); /* gone already: fine */
  assert_int_equal(jb_cs_discard(root, "../keep", why, sizeof why), -1);
  /* the sweep discards every overlay (valid id) and leaves other names alone */
  put("not.an.id", "", 0644);
  jb_cs_sweep(root);
  pathof(p, sizeof p, "b");
  assert_int_equal(lstat(p, &st), -1);
  pathof(p, sizeof p, "not.an.id");
  assert_int_equal(lstat(p, &st), 0);
}

int main(void) {
  if (geteuid() != 0) {
    printf("# skipped: needs root (mknod of a whiteout, trusted.* xattrs)\n");
    return 0;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_manifest_entries, setup, teardown),
      cmocka_unit_test_setup_teardown(test_manifest_bounds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ids_and_requests, setup, teardown),
      cmocka_unit_test_setup_teardown(test_discard_and_sweep, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
