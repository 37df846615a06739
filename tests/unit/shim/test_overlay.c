/* test_overlay.c — the spawner's overlay helpers (sandbox/shim/overlay.h) on a hand-made upper
 * in a temporary directory, without Docker (run as root: mknod of a whiteout, trusted.*
 * xattrs): the manifest's entries (whiteout, opaque directory, mode, symlink target read and
 * not followed, nested paths), its bounds (entries, depth) answered too_large, the id's rules,
 * the request's checks, and discard removing a tree without following a link out of it; a
 * command's process racing the walk or the discard (a directory swapped for a link, under
 * gVisor's O_DIRECTORY semantics), a tree deeper than the discard's depth, a filesystem mounted
 * below, and a failed mount leaving its id free; cs_read: a file read back in chunks, and
 * what it refuses (a link at the end or on the way, a FIFO without blocking, a directory, a
 * device, bad paths and lengths). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "lib/pathcheck.h"
#include "sandbox/shim/overlay.h"

static char root[64];

/* openat as gVisor (2024-07) answers it, and a command's process racing the spawner: the test
 * links with --wrap=openat64 (the build asks for 64-bit offsets). An open with O_DIRECTORY but not O_PATH follows a final symlink
 * whatever O_NOFOLLOW says (sandbox/WALLS.md); an open of `swap_name` first moves that
 * directory aside and puts a symlink to `swap_target` in its place (once). */
int __real_openat64(int dfd, const char *name, int flags, ...);
static const char *swap_name;
static char swap_target[512];
int __wrap_openat64(int dfd, const char *name, int flags, ...) {
  int mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, int);
    va_end(ap);
  }
  if (swap_name && strcmp(name, swap_name) == 0) {
    char moved[300];
    snprintf(moved, sizeof moved, "%s.moved", name);
    swap_name = NULL;
    assert_int_equal(renameat(dfd, name, dfd, moved), 0);
    assert_int_equal(symlinkat(swap_target, dfd, name), 0);
  }
  if ((flags & O_DIRECTORY) && !(flags & O_PATH)) flags &= ~O_NOFOLLOW;
  return __real_openat64(dfd, name, flags, mode);
}

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
  /* 10,000 short names fit: the bound counts each entry's compact JSON, not a guess */
  dir("s");
  for (int i = 0; i < 10000; i++) {
    char rel[32];
    snprintf(rel, sizeof rel, "s/f%05d", i);
    put(rel, "", 0644);
  }
  m = manifest("s", 100000, &code, why);
  assert_non_null(m);
  assert_int_equal(json_array_size(m), 10000);
  char *text = json_dumps(m, JSON_COMPACT);
  assert_true(strlen(text) <= JB_CS_MAX_BYTES);
  free(text);
  json_decref(m);
  /* long names: the JSON bound comes before any line limit */
  dir("w");
  for (int i = 0; i < 4500; i++) {
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

/* A FIFO, a socket and a device in the upper are listed from lstat alone: the walk opens no
 * entry but a directory, so a FIFO with no writer does not block it. */
static void test_manifest_special_files(void **state) {
  (void)state;
  dir("u");
  char p[512];
  pathof(p, sizeof p, "u/fifo");
  assert_int_equal(mkfifo(p, 0600), 0);
  pathof(p, sizeof p, "u/null");
  assert_int_equal(mknod(p, S_IFCHR | 0666, makedev(1, 3)), 0);
  pathof(p, sizeof p, "u/blk");
  assert_int_equal(mknod(p, S_IFBLK | 0600, makedev(7, 0)), 0);
  const char *code = NULL;
  char why[300];
  json_t *m = manifest("u", 100, &code, why);
  assert_non_null(m);
  assert_string_equal(json_string_value(json_object_get(entry(m, "fifo"), "type")), "fifo");
  assert_string_equal(json_string_value(json_object_get(entry(m, "null"), "type")), "char");
  assert_false(json_is_true(json_object_get(entry(m, "null"), "whiteout")));
  assert_string_equal(json_string_value(json_object_get(entry(m, "blk"), "type")), "block");
  json_decref(m);
}

/* keep/precious, outside every overlay, and `swap_target` naming keep. */
static void keep(void) {
  dir("keep");
  put("keep/precious", "p", 0644);
  pathof(swap_target, sizeof swap_target, "keep");
}

static bool kept(void) {
  char p[512];
  struct stat st;
  pathof(p, sizeof p, "keep/precious");
  return lstat(p, &st) == 0;
}

/* A directory of the upper swapped for a link out between the walk's lstat and its open (a
 * process of the command still running) is not entered: its target's names are not listed. */
static void test_manifest_swap_race(void **state) {
  (void)state;
  keep();
  dir("s");
  dir("s/victim");
  put("s/victim/inner", "i", 0644);
  swap_name = "victim";
  const char *code = NULL;
  char why[300];
  json_t *m = manifest("s", 100, &code, why);
  swap_name = NULL;
  assert_null(entry(m, "victim/precious"));
  json_decref(m);
}

/* The same swap during a discard: nothing outside the overlay is removed, and the overlay goes
 * (in a second discard at most). */
static void test_discard_swap_race(void **state) {
  (void)state;
  keep();
  dir("a");
  dir("a/upper");
  dir("a/upper/victim");
  put("a/upper/victim/inner", "i", 0644);
  swap_name = "victim";
  char why[300];
  (void)jb_cs_discard(root, "a", why, sizeof why);
  swap_name = NULL;
  assert_true(kept());
  assert_int_equal(jb_cs_discard(root, "a", why, sizeof why), 0);
  char p[512];
  struct stat st;
  pathof(p, sizeof p, "a");
  assert_int_equal(lstat(p, &st), -1);
}

/* A tree deeper than JB_CS_RM_DEPTH (a command can make one through the merged view) is
 * removed whole: none of it outlives the discard in the tmpfs. */
static void test_discard_deep(void **state) {
  (void)state;
  dir("d");
  char p[512];
  pathof(p, sizeof p, "d");
  int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  for (int i = 0; i < JB_CS_RM_DEPTH + 300; i++) {
    assert_int_equal(mkdirat(fd, "x", 0755), 0);
    int sub = openat(fd, "x", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(sub >= 0);
    close(fd);
    fd = sub;
  }
  close(fd);
  char why[300];
  assert_int_equal(jb_cs_discard(root, "d", why, sizeof why), 0);
  struct stat st;
  assert_int_equal(lstat(p, &st), -1);
}

/* Another filesystem mounted below an overlay's directory (the overlay itself, were its
 * detach to fail) is never entered by a discard (EXDEV): nothing is removed through it. */
static void test_discard_no_mount_crossing(void **state) {
  (void)state;
  dir("b");
  dir("b/upper");
  dir("b/upper/m");
  char p[512], f[512], why[300];
  pathof(p, sizeof p, "b/upper/m");
  assert_int_equal(mount("tmpfs", p, "tmpfs", 0, "size=64k"), 0);
  pathof(f, sizeof f, "b/upper/m/precious");
  put("b/upper/m/precious", "p", 0644);
  int rc = jb_cs_discard(root, "b", why, sizeof why);
  struct stat st;
  bool still = lstat(f, &st) == 0;
  assert_int_equal(umount2(p, MNT_DETACH), 0);
  assert_int_equal(rc, -1);
  assert_true(still);
  assert_int_equal(jb_cs_discard(root, "b", why, sizeof why), 0);
}

/* A mount that fails leaves nothing: the id can be used again. */
static void test_mount_failure_frees_id(void **state) {
  (void)state;
  put("lowerfile", "", 0644);
  char lower[512], merged[512], why[300], p[512];
  pathof(lower, sizeof lower, "lowerfile");
  assert_int_equal(jb_cs_mount(root, "m1", lower, merged, sizeof merged, why, sizeof why), -1);
  struct stat st;
  pathof(p, sizeof p, "m1");
  assert_int_equal(lstat(p, &st), -1);
}

/* The upper u with `big` (200,001 bytes of a pattern) in u/d/, read back through a request. */
static json_t *read_req(const char *path, json_int_t offset, json_int_t length, const char **code,
                        char *why) {
  json_t *rq = json_pack("{s:s, s:s, s:I, s:I}", "overlay", "o1", "path", path, "offset", offset,
                         "length", length);
  json_t *r = jb_cs_request(root, "cs_read", rq, code, why, 300);
  json_decref(rq);
  return r;
}

static int upper_fd(void) {
  char p[512];
  pathof(p, sizeof p, "o1/upper");
  int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  assert_true(fd >= 0);
  return fd;
}

/* A file read in chunks of every size class (one byte, odd, the most) equals its content;
 * size and eof say where the chunks are; an offset at or past the end gives "" and eof. */
static void test_read_chunks(void **state) {
  (void)state;
  dir("o1");
  dir("o1/upper");
  dir("o1/upper/d");
  size_t n = 2 * JB_CS_READ_MAX + 12345;
  unsigned char *content = malloc(n), *back = malloc(n);
  for (size_t i = 0; i < n; i++) content[i] = (unsigned char)(i * 7 + i / 251);
  char p[512];
  pathof(p, sizeof p, "o1/upper/d/big");
  FILE *f = fopen(p, "w");
  assert_int_equal(fwrite(content, 1, n, f), n);
  fclose(f);
  const size_t sizes[] = {JB_CS_READ_MAX, 99991, 1};
  for (size_t k = 0; k < 3; k++) {
    size_t off = 0;
    bool eof = false;
    int calls = 0;
    while (!eof && calls++ < 1000) {
      const char *code = NULL;
      char why[300];
      size_t len = k == 2 && off > 10 ? JB_CS_READ_MAX : sizes[k]; /* a few 1-byte reads */
      json_t *r = read_req("d/big", (json_int_t)off, (json_int_t)len, &code, why);
      assert_non_null(r);
      assert_int_equal(json_integer_value(json_object_get(r, "size")), n);
      const char *b64 = json_string_value(json_object_get(r, "data"));
      size_t got = 0;
      assert_int_equal(sodium_base642bin(back + off, n - off, b64, strlen(b64), NULL, &got, NULL,
                                         sodium_base64_VARIANT_ORIGINAL),
                       0);
      assert_true(got <= len);
      off += got;
      eof = json_is_true(json_object_get(r, "eof"));
      assert_int_equal(eof, off == n);
      json_decref(r);
    }
    assert_int_equal(off, n);
    assert_memory_equal(back, content, n);
  }
  const char *code = NULL;
  char why[300];
  for (json_int_t at = (json_int_t)n; at <= (json_int_t)n + 5; at += 5) {
    json_t *r = read_req("d/big", at, 10, &code, why);
    assert_string_equal(json_string_value(json_object_get(r, "data")), "");
    assert_true(json_is_true(json_object_get(r, "eof")));
    json_decref(r);
  }
  put("o1/upper/empty", "", 0644);
  json_t *r = read_req("empty", 0, 1, &code, why);
  assert_string_equal(json_string_value(json_object_get(r, "data")), "");
  assert_true(json_is_true(json_object_get(r, "eof")));
  assert_int_equal(json_integer_value(json_object_get(r, "size")), 0);
  json_decref(r);
  /* mode 0000 (a command's chmod): root reads it all the same */
  put("o1/upper/locked", "abc", 0000);
  r = read_req("locked", 1, 100, &code, why);
  assert_string_equal(json_string_value(json_object_get(r, "data")), "YmM="); /* "bc" */
  assert_true(json_is_true(json_object_get(r, "eof")));
  json_decref(r);
  free(content);
  free(back);
}

/* `path` read from the upper o1 is refused with `code` (request and direct call agree). */
static void refused(const char *path, json_int_t offset, json_int_t length, const char *want) {
  const char *code = NULL;
  char why[300] = "";
  json_t *r = read_req(path, offset, length, &code, why);
  if (r) fail_msg("'%s' read: %s", path, json_dumps(r, 0));
  assert_string_equal(code, want);
  for (const char *c = why; *c; c++) assert_true(*c >= 0x20 && *c <= 0x7e);
  if (offset < 0 || length < 1 || length > JB_CS_READ_MAX) return;
  int fd = upper_fd();
  code = NULL;
  assert_null(jb_cs_read_at(fd, path, offset, (size_t)length, &code, why, sizeof why));
  close(fd);
  assert_string_equal(code, want);
}

/* Nothing but a regular file reached through directories is read: a symlink at the end or on
 * the way (to a file of `keep`, outside the upper) is not followed, a FIFO with no writer
 * answers at once, a directory, a device or a whiteout is not a file. */
static void test_read_refusals(void **state) {
  (void)state;
  keep();
  dir("o1");
  dir("o1/upper");
  dir("o1/upper/d");
  put("o1/upper/d/f", "f", 0644);
  char p[512], t[512];
  pathof(t, sizeof t, "keep/precious");
  pathof(p, sizeof p, "o1/upper/lnk");
  assert_int_equal(symlink(t, p), 0);
  pathof(t, sizeof t, "keep");
  pathof(p, sizeof p, "o1/upper/dlnk");
  assert_int_equal(symlink(t, p), 0);
  pathof(p, sizeof p, "o1/upper/rel");
  assert_int_equal(symlink("d", p), 0); /* a link inside the upper is not followed either */
  pathof(p, sizeof p, "o1/upper/fifo");
  assert_int_equal(mkfifo(p, 0666), 0);
  pathof(p, sizeof p, "o1/upper/gone");
  assert_int_equal(mknod(p, S_IFCHR, makedev(0, 0)), 0);
  pathof(p, sizeof p, "o1/upper/null");
  assert_int_equal(mknod(p, S_IFCHR | 0666, makedev(1, 3)), 0);
  refused("lnk", 0, 10, "not_file");
  refused("dlnk/precious", 0, 10, "not_file");
  refused("rel/f", 0, 10, "not_file");
  refused("d/f/x", 0, 10, "not_file"); /* a file on the way */
  refused("fifo", 0, 10, "not_file");
  refused("d", 0, 10, "not_file");
  refused("gone", 0, 10, "not_file");
  refused("null", 0, 10, "not_file");
  refused("missing", 0, 10, "not_found");
  refused("nodir/f", 0, 10, "not_found");
  const char *bad[] = {"..", "../o1/upper/d/f", "d/../d/f", "/abs", "a//b", "d/",
                       ".",  "./d/f",           "",         NULL};
  for (const char **b = bad; *b; b++) refused(*b, 0, 10, "bad_request");
  char long_path[JB_PATH_MAX + 10];
  memset(long_path, 'a', sizeof long_path - 1);
  long_path[sizeof long_path - 1] = '\0';
  for (size_t i = 100; i < sizeof long_path - 1; i += 100) long_path[i] = '/';
  refused(long_path, 0, 10, "bad_request");
  refused("d/f", 0, 0, "bad_request");
  refused("d/f", 0, JB_CS_READ_MAX + 1, "bad_request");
  refused("d/f", -1, 10, "bad_request");
  /* the direct call checks its bounds too */
  const char *code = NULL;
  char why[300];
  int fd = upper_fd();
  assert_null(jb_cs_read_at(fd, "d/f", 0, 0, &code, why, sizeof why));
  assert_string_equal(code, "bad_request");
  assert_null(jb_cs_read_at(fd, "d/f", 0, JB_CS_READ_MAX + 1, &code, why, sizeof why));
  assert_string_equal(code, "bad_request");
  assert_null(jb_cs_read_at(fd, "d/f", -5, 1, &code, why, sizeof why));
  assert_string_equal(code, "bad_request");
  assert_null(jb_cs_read_at(fd, NULL, 0, 1, &code, why, sizeof why));
  assert_string_equal(code, "bad_request");
  json_t *r = jb_cs_read_at(fd, "d/f", 0, JB_CS_READ_MAX, &code, why, sizeof why);
  assert_string_equal(json_string_value(json_object_get(r, "data")), "Zg=="); /* "f" */
  json_decref(r);
  close(fd);
  /* a request's fields: a string path, integer offset and length */
  json_t *rq = json_pack("{s:s, s:i, s:i}", "overlay", "o1", "offset", 0, "length", 1);
  assert_null(jb_cs_request(root, "cs_read", rq, &code, why, sizeof why));
  assert_string_equal(code, "bad_request");
  json_object_set_new(rq, "path", json_string("d/f"));
  json_object_set_new(rq, "length", json_string("1"));
  assert_null(jb_cs_request(root, "cs_read", rq, &code, why, sizeof why));
  assert_string_equal(code, "bad_request");
  json_object_set_new(rq, "length", json_integer(1));
  json_object_set_new(rq, "overlay", json_string("o2"));
  assert_null(jb_cs_request(root, "cs_read", rq, &code, why, sizeof why));
  assert_string_equal(code, "not_found");
  json_decref(rq);
}

/* A directory on the way swapped for a link out between the checks and its open (gVisor's
 * O_DIRECTORY semantics, as the other swap tests) is not entered: keep's file is not read. */
static void test_read_swap_race(void **state) {
  (void)state;
  keep();
  dir("o1");
  dir("o1/upper");
  dir("o1/upper/victim");
  put("o1/upper/victim/precious", "i", 0644);
  swap_name = "victim";
  const char *code = NULL;
  char why[300];
  json_t *r = read_req("victim/precious", 0, 10, &code, why);
  swap_name = NULL;
  assert_null(r);
  assert_string_equal(code, "not_file");
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
      cmocka_unit_test_setup_teardown(test_manifest_special_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_manifest_swap_race, setup, teardown),
      cmocka_unit_test_setup_teardown(test_discard_swap_race, setup, teardown),
      cmocka_unit_test_setup_teardown(test_discard_deep, setup, teardown),
      cmocka_unit_test_setup_teardown(test_discard_no_mount_crossing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mount_failure_frees_id, setup, teardown),
      cmocka_unit_test_setup_teardown(test_read_chunks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_read_refusals, setup, teardown),
      cmocka_unit_test_setup_teardown(test_read_swap_race, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
