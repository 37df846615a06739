/* test_preimage_store.c — the pre-image store (sandbox/worker/preimage_store.h) on temporary
 * directories: a file's content kept and copied out byte for byte (round trip), the blob 0400
 * under objects/<2>/<sha256>; the same content twice adds 0 bytes; a blob changed on disk is
 * refused on read (EBADMSG); what a path holds (absent, a folder, a link, a file) taken
 * beneath the root, a link on the way refused; a job's store dropped. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka after the headers it needs */
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/worker/preimage_store.h"

static char ws[64], store[64];

static void put(const char *dir, const char *name, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static int setup(void **state) {
  (void)state;
  snprintf(ws, sizeof ws, "/tmp/jb-pstore-ws-XXXXXX");
  snprintf(store, sizeof store, "/tmp/jb-pstore-st-XXXXXX");
  assert_non_null(mkdtemp(ws));
  assert_non_null(mkdtemp(store));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s %s", ws, store);
  return system(cmd) == 0 ? 0 : -1;
}

/* blob `sha` of job j1 copied out into a string (static) */
static const char *copy_out(const char *sha, int *rc, int *code) {
  static char b[8192];
  FILE *f = tmpfile();
  assert_non_null(f);
  jb_error err = {0};
  *rc = jb_pstore_copy_out(store, "j1", sha, fileno(f), &err);
  *code = err.code;
  rewind(f);
  size_t n = fread(b, 1, sizeof b - 1, f);
  b[n] = '\0';
  fclose(f);
  return b;
}

static void test_round_trip_and_dedup(void **state) {
  (void)state;
  put(ws, "a.txt", "hello pre-image\n");
  put(ws, "b.txt", "hello pre-image\n");
  int root = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct jb_pstore_item it, again;
  jb_error err = {0};
  assert_int_equal(jb_pstore_take(store, "j1", root, "a.txt", -1, &it, &err), 0);
  assert_int_equal(it.kind, JB_PSTORE_FILE);
  assert_int_equal(it.bytes, 4096); /* a block on disk: what it counts against the budget */
  assert_int_equal(it.size, 16);
  assert_int_equal(strlen(it.sha256), 64);
  char p[512];
  snprintf(p, sizeof p, "%s/j1/objects/%.2s/%s", store, it.sha256, it.sha256);
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0400);
  int rc, code;
  assert_string_equal(copy_out(it.sha256, &rc, &code), "hello pre-image\n");
  assert_int_equal(rc, 0);
  /* the same content again (another path, and the same path): 0 bytes added */
  assert_int_equal(jb_pstore_take(store, "j1", root, "b.txt", -1, &again, &err), 0);
  assert_string_equal(again.sha256, it.sha256);
  assert_int_equal(again.bytes, 0);
  assert_int_equal(jb_pstore_take(store, "j1", root, "a.txt", -1, &again, &err), 0);
  assert_int_equal(again.bytes, 0);
  /* over the room left: not copied (EFBIG) */
  jb_error big = {0};
  assert_int_equal(jb_pstore_take(store, "j1", root, "a.txt", 15, &again, &big), -1);
  assert_int_equal(big.code, EFBIG);
  /* no temporary file left behind */
  char cmd[300];
  snprintf(cmd, sizeof cmd, "test -z \"$(find %s -name '.tmp-*')\"", store);
  assert_int_equal(system(cmd), 0);
  close(root);
}

static void test_changed_blob_refused(void **state) {
  (void)state;
  put(ws, "c.txt", "original\n");
  int root = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct jb_pstore_item it;
  jb_error err = {0};
  assert_int_equal(jb_pstore_take(store, "j1", root, "c.txt", -1, &it, &err), 0);
  char p[512];
  snprintf(p, sizeof p, "%s/j1/objects/%.2s/%s", store, it.sha256, it.sha256);
  assert_int_equal(chmod(p, 0600), 0);
  FILE *f = fopen(p, "w");
  fputs("tampered\n", f);
  fclose(f);
  int rc, code;
  copy_out(it.sha256, &rc, &code);
  assert_int_equal(rc, -1);
  assert_int_equal(code, EBADMSG);
  close(root);
}

static void test_kinds_and_links(void **state) {
  (void)state;
  char p[512];
  snprintf(p, sizeof p, "%s/d", ws);
  assert_int_equal(mkdir(p, 0751), 0);
  snprintf(p, sizeof p, "%s/ln", ws);
  assert_int_equal(symlink("/etc", p), 0);
  int root = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct jb_pstore_item it;
  jb_error err = {0};
  assert_int_equal(jb_pstore_take(store, "j1", root, "missing", -1, &it, &err), 0);
  assert_int_equal(it.kind, JB_PSTORE_ABSENT);
  assert_int_equal(jb_pstore_take(store, "j1", root, "no/such/dir/f", -1, &it, &err), 0);
  assert_int_equal(it.kind, JB_PSTORE_ABSENT);
  assert_int_equal(jb_pstore_take(store, "j1", root, "d", -1, &it, &err), 0);
  assert_int_equal(it.kind, JB_PSTORE_DIR);
  assert_int_equal(it.mode, 0751);
  assert_int_equal(jb_pstore_take(store, "j1", root, "ln", -1, &it, &err), 0);
  assert_int_equal(it.kind, JB_PSTORE_LINK);
  assert_string_equal(it.target, "/etc");
  /* a link on the way is never followed: refused, nothing read outside */
  assert_int_equal(jb_pstore_take(store, "j1", root, "ln/passwd", -1, &it, &err), -1);
  assert_true(err.code == ELOOP || err.code == EXDEV);
  /* hashed only, not kept, without a store */
  put(ws, "d/x", "x");
  assert_int_equal(jb_pstore_take(NULL, "j1", root, "d/x", -1, &it, &err), 0);
  assert_int_equal(it.kind, JB_PSTORE_FILE);
  assert_int_equal(it.bytes, 0);
  assert_string_equal(it.sha256,
                      "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881");
  close(root);
}

static void test_drop(void **state) {
  (void)state;
  put(ws, "e.txt", "e");
  int root = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct jb_pstore_item it;
  jb_error err = {0};
  assert_int_equal(jb_pstore_take(store, "j2", root, "e.txt", -1, &it, &err), 0);
  assert_int_equal(jb_pstore_drop(store, "j2", &err), 0);
  char p[512];
  snprintf(p, sizeof p, "%s/j2", store);
  assert_int_equal(access(p, F_OK), -1);
  assert_int_equal(jb_pstore_drop(store, "j2", &err), 0); /* again: nothing to do */
  assert_int_equal(jb_pstore_drop(store, "../x", &err), -1); /* never outside the store */
  close(root);
}

/* A name or a link's target that is not UTF-8 cannot be held by a row (a text column, a JSON
 * string): taking it keeps nothing and says so (EILSEQ), so that the op that would change it
 * is refused — never run with the row silently left out. Looked at only (no store): taken. */
static void test_not_utf8(void **state) {
  (void)state;
  char p[512];
  snprintf(p, sizeof p, "%s/u", ws);
  assert_int_equal(mkdir(p, 0755), 0);
  put(ws, "u/\xff\xfe", "bytes");
  snprintf(p, sizeof p, "%s/u/l", ws);
  assert_int_equal(symlink("t\xc3", p), 0);
  int root = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct jb_pstore_item it;
  jb_error err = {0};
  assert_int_equal(jb_pstore_take(store, "j3", root, "u/\xff\xfe", -1, &it, &err), -1);
  assert_int_equal(err.code, EILSEQ);
  jb_error e2 = {0};
  assert_int_equal(jb_pstore_take(store, "j3", root, "u/l", -1, &it, &e2), -1);
  assert_int_equal(e2.code, EILSEQ);
  jb_error e3 = {0};
  assert_int_equal(jb_pstore_take(NULL, "j3", root, "u/l", -1, &it, &e3), 0);
  assert_int_equal(it.kind, JB_PSTORE_LINK);
  close(root);
}

/* The store's base must be this user's own and writable by no one else: one that another user
 * could rename entries of (a squatted $TMPDIR/jailbox-preimages) is refused, and a job's folder
 * swapped for a link is never followed. */
static void test_base_checked(void **state) {
  (void)state;
  put(ws, "s.txt", "s");
  int root = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct jb_pstore_item it;
  jb_error err = {0};
  assert_int_equal(chmod(store, 0777), 0);
  assert_int_equal(jb_pstore_take(store, "j4", root, "s.txt", -1, &it, &err), -1);
  assert_int_equal(err.code, EPERM);
  char p[512];
  snprintf(p, sizeof p, "%s/j4", store);
  assert_int_equal(access(p, F_OK), -1); /* nothing made in it */
  assert_int_equal(chmod(store, 0700), 0);
  char elsewhere[] = "/tmp/jb-pstore-else-XXXXXX";
  assert_non_null(mkdtemp(elsewhere));
  assert_int_equal(symlink(elsewhere, p), 0); /* j4 -> a folder outside the store */
  jb_error e2 = {0};
  assert_int_equal(jb_pstore_take(store, "j4", root, "s.txt", -1, &it, &e2), -1);
  snprintf(p, sizeof p, "%s/objects", elsewhere);
  assert_int_equal(access(p, F_OK), -1); /* nothing written through the link */
  rmdir(elsewhere);
  close(root);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_and_dedup),
      cmocka_unit_test(test_changed_blob_refused),
      cmocka_unit_test(test_kinds_and_links),
      cmocka_unit_test(test_drop),
      cmocka_unit_test(test_not_utf8),
      cmocka_unit_test(test_base_checked),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
