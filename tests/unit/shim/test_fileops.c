/* test_fileops.c — the shim's file ops (sandbox/shim/fileops.h) run against a temporary
 * directory as the workspace root, without Docker: each op's results, each class of refusal
 * (symlink in the way, symlink leading out, hard link, fifo, excluded, "..", the root),
 * RENAME_NOREPLACE against overwrite, a refused recursive delete leaving the disk as it was,
 * the search's PCRE2 limits, and the budgets that end in `truncated`. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/shim/fileops.h"

static char root[64];

static void put(const char *rel, const char *content) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(content, f);
  fclose(f);
}

static void dir(const char *rel) {
  char p[4200];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  assert_int_equal(mkdir(p, 0755), 0);
}

static void link_to(const char *target, const char *rel) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  assert_int_equal(symlink(target, p), 0);
}

static bool there(const char *rel) {
  char p[512];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", root, rel);
  return lstat(p, &st) == 0;
}

static char *slurp(const char *rel) {
  static char buf[256];
  char p[512];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  return remove(p);
}

static int setup(void **state) {
  snprintf(root, sizeof root, "/tmp/jb-fileops-XXXXXX");
  assert_non_null(mkdtemp(root));
  assert_int_equal(jb_fileops_init(root), 0);
  return 0;
}

static int teardown(void **state) {
  nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

/* Runs the request `line` (its "op" names the op); the result, or {"error": {code, escape}}.
 * The caller owns the answer. */
static json_t *run(const char *line) {
  json_error_t je;
  json_t *req = json_loads(line, 0, &je);
  if (!req) fail_msg("bad test JSON %s: %s", line, je.text);
  struct jb_fileop_error e = {0};
  const char *op = json_string_value(json_object_get(req, "op"));
  assert_true(jb_fileop_known(op));
  json_t *r = jb_fileop(op, req, &e);
  json_decref(req);
  if (r) return r;
  assert_non_null(e.code);
  return json_pack("{s:{s:s, s:s, s:s?}}", "error", "code", e.code, "message", e.message, "escape",
                   e.escape);
}

static const char *code_of(json_t *r) {
  return json_string_value(json_object_get(json_object_get(r, "error"), "code"));
}

static const char *escape_of(json_t *r) {
  return json_string_value(json_object_get(json_object_get(r, "error"), "escape"));
}

static json_int_t int_of(json_t *r, const char *a, const char *b) {
  json_t *o = json_object_get(r, a);
  if (b) o = json_object_get(o, b);
  assert_true(json_is_integer(o));
  return json_integer_value(o);
}

static const char *str_of(json_t *r, const char *k) {
  const char *s = json_string_value(json_object_get(r, k));
  assert_non_null(s);
  return s;
}

/* Asserts that `line` fails with `code` (and `escape`, NULL for none). */
static void refused(const char *line, const char *code, const char *escape) {
  json_t *r = run(line);
  if (!code_of(r)) fail_msg("%s: expected %s, got %s", line, code, json_dumps(r, 0));
  assert_string_equal(code_of(r), code);
  if (escape)
    assert_string_equal(escape_of(r) ? escape_of(r) : "(none)", escape);
  else
    assert_null(escape_of(r));
  json_decref(r);
}

static void read_lines(void **state) {
  put("f", "l1\nl2\nl3\nl4\nl5"); /* the last line has no newline */
  json_t *r = run("{\"op\":\"read\",\"path\":\"f\",\"head\":2}");
  assert_string_equal(str_of(r, "content"), "l1\nl2\n");
  assert_int_equal(int_of(r, "lines", "first"), 0);
  assert_int_equal(int_of(r, "lines", "count"), 2);
  assert_int_equal(int_of(r, "lines", "total"), 5);
  assert_int_equal(int_of(r, "offset", NULL), 0);
  json_decref(r);
  r = run("{\"op\":\"read\",\"path\":\"f\",\"tail\":2}");
  assert_string_equal(str_of(r, "content"), "l4\nl5");
  assert_int_equal(int_of(r, "lines", "first"), 3);
  assert_int_equal(int_of(r, "lines", "count"), 2);
  assert_true(json_is_true(json_object_get(r, "eof")));
  json_decref(r);
  r = run("{\"op\":\"read\",\"path\":\"f\",\"lineOffset\":1,\"lineLimit\":3}");
  assert_string_equal(str_of(r, "content"), "l2\nl3\nl4\n");
  assert_int_equal(int_of(r, "offset", NULL), 3);
  assert_int_equal(int_of(r, "length", NULL), 9);
  json_decref(r);
  r = run("{\"op\":\"read\",\"path\":\"f\",\"lineOffset\":3}");
  assert_string_equal(str_of(r, "content"), "l4\nl5");
  assert_int_equal(int_of(r, "lines", "count"), 2);
  json_decref(r);
  r = run("{\"op\":\"read\",\"path\":\"f\",\"lineOffset\":9}");
  assert_string_equal(str_of(r, "content"), "");
  assert_int_equal(int_of(r, "lines", "count"), 0);
  json_decref(r);
  put("g", "a\nb\n"); /* a final newline ends the last line, it begins none */
  r = run("{\"op\":\"read\",\"path\":\"g\",\"tail\":1}");
  assert_string_equal(str_of(r, "content"), "b\n");
  assert_int_equal(int_of(r, "lines", "total"), 2);
  assert_int_equal(int_of(r, "lines", "first"), 1);
  json_decref(r);
  r = run("{\"op\":\"read\",\"path\":\"g\",\"tail\":10}");
  assert_string_equal(str_of(r, "content"), "a\nb\n");
  json_decref(r);
  refused("{\"op\":\"read\",\"path\":\"f\",\"head\":1,\"offset\":2}", "bad_request", NULL);
  refused("{\"op\":\"read\",\"path\":\"f\",\"tail\":-1}", "bad_request", NULL);
  /* the lines selected over 1 MiB */
  char *big = malloc(1200001);
  memset(big, 'x', 1200000);
  big[1200000] = '\0';
  put("big", big);
  free(big);
  refused("{\"op\":\"read\",\"path\":\"big\",\"head\":1}", "too_large", NULL);
  refused("{\"op\":\"read\",\"path\":\"big\",\"tail\":1}", "too_large", NULL);
}

static void read_many_budget(void **state) {
  char *half = malloc(600001);
  memset(half, 'y', 600000);
  half[600000] = '\0';
  put("h1", half);
  put("h2", half);
  free(half);
  put("small", "s\n");
  link_to("/etc/passwd", "out");
  json_t *r = run("{\"op\":\"read_many\",\"paths\":[\"small\",\"h1\",\"h2\",\"out\",\"nope\"]}");
  json_t *f = json_object_get(r, "files");
  assert_int_equal(json_array_size(f), 5);
  assert_true(json_is_true(json_object_get(json_array_get(f, 0), "ok")));
  assert_true(json_is_true(json_object_get(json_array_get(f, 1), "ok")));
  json_t *e2 = json_object_get(json_array_get(f, 2), "error");
  assert_string_equal(json_string_value(json_object_get(e2, "code")), "too_large");
  json_t *e3 = json_object_get(json_array_get(f, 3), "error");
  assert_string_equal(json_string_value(json_object_get(e3, "escape")), "symlink_escape");
  json_t *e4 = json_object_get(json_array_get(f, 4), "error");
  assert_string_equal(json_string_value(json_object_get(e4, "code")), "not_found");
  json_decref(r);
  refused("{\"op\":\"read_many\",\"paths\":[]}", "bad_request", NULL);
}

static void stat_mode_mtime(void **state) {
  put("f", "abc");
  char p[512];
  snprintf(p, sizeof p, "%s/f", root);
  assert_int_equal(chmod(p, 0640), 0);
  struct timespec ts[2] = {{.tv_sec = 1700000000, .tv_nsec = 123456789},
                           {.tv_sec = 1700000000, .tv_nsec = 123456789}};
  assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
  json_t *r = run("{\"op\":\"stat\",\"path\":\"f\"}");
  assert_string_equal(str_of(r, "mode"), "0640");
  assert_string_equal(str_of(r, "mtime"), "2023-11-14T22:13:20.123456789Z");
  assert_string_equal(str_of(r, "sha256"),
                      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  json_decref(r);
  r = run("{\"op\":\"stat\",\"path\":\"f\",\"hash\":false}");
  assert_null(json_object_get(r, "sha256"));
  json_decref(r);
}

static void list_depth_sorted(void **state) {
  dir("b");
  dir("b/c");
  put("b/c/deep", "");
  put("a.txt", "");
  put("b.txt", "");
  put("b/z", "");
  json_t *r = run("{\"op\":\"list\",\"path\":\".\"}");
  json_t *e = json_object_get(r, "entries");
  assert_int_equal(json_array_size(e), 3);
  assert_string_equal(str_of(json_array_get(e, 0), "name"), "a.txt");
  assert_string_equal(str_of(json_array_get(e, 1), "name"), "b");
  assert_string_equal(str_of(json_array_get(e, 2), "name"), "b.txt");
  json_decref(r);
  r = run("{\"op\":\"list\",\"path\":\".\",\"depth\":2}");
  e = json_object_get(r, "entries");
  const char *want[] = {"a.txt", "b", "b.txt", "b/c", "b/z"};
  assert_int_equal(json_array_size(e), 5);
  for (size_t i = 0; i < 5; i++) assert_string_equal(str_of(json_array_get(e, i), "name"), want[i]);
  json_decref(r);
  r = run("{\"op\":\"list\",\"path\":\".\",\"recursive\":true}");
  assert_int_equal(json_array_size(json_object_get(r, "entries")), 6);
  json_decref(r);
  refused("{\"op\":\"list\",\"path\":\".\",\"depth\":0}", "bad_request", NULL);
}

static void mkdir_ops(void **state) {
  put("file", "");
  dir("in");
  link_to("in", "inlink");
  link_to("/tmp", "outlink");
  json_t *r = run("{\"op\":\"mkdir\",\"path\":\"x/y/z\"}");
  assert_true(json_is_true(json_object_get(r, "created")));
  json_decref(r);
  assert_true(there("x/y/z"));
  r = run("{\"op\":\"mkdir\",\"path\":\"x/y\"}");
  assert_true(json_is_false(json_object_get(r, "created")));
  json_decref(r);
  refused("{\"op\":\"mkdir\",\"path\":\"file\"}", "exists", NULL);
  refused("{\"op\":\"mkdir\",\"path\":\"file/sub\"}", "exists", NULL);
  refused("{\"op\":\"mkdir\",\"path\":\"inlink/sub\"}", "denied", NULL);
  refused("{\"op\":\"mkdir\",\"path\":\"outlink/sub\"}", "denied", "symlink_escape");
  refused("{\"op\":\"mkdir\",\"path\":\"../up\"}", "denied", "path_traversal");
  refused("{\"op\":\"mkdir\",\"path\":\"/abs\"}", "denied", "absolute_path");
  refused("{\"op\":\"mkdir\",\"path\":\"secret/d\",\"exclude\":[\"secret\"]}", "excluded", NULL);
  assert_false(there("in/sub") || there("secret"));
}

static void move_ops(void **state) {
  put("a", "A");
  put("b", "B");
  refused("{\"op\":\"move\",\"path\":\"a\",\"destination\":\"b\"}", "exists", NULL);
  assert_string_equal(slurp("b"), "B");
  assert_string_equal(slurp("a"), "A");
  json_t *r = run("{\"op\":\"move\",\"path\":\"a\",\"destination\":\"b\",\"overwrite\":true}");
  assert_true(json_is_true(json_object_get(r, "moved")));
  assert_true(json_is_true(json_object_get(r, "replaced")));
  /* sha256("A") */
  assert_string_equal(str_of(r, "sha256"),
                      "559aead08264d5795d3909718cdd05abd49572e84fe55590eef31a88a08fdffd");
  json_decref(r);
  assert_false(there("a"));
  assert_string_equal(slurp("b"), "A");
  /* a directory, into a new name; into itself refused */
  dir("d");
  put("d/f", "F");
  r = run("{\"op\":\"move\",\"path\":\"d\",\"destination\":\"e\"}");
  assert_string_equal(str_of(r, "type"), "dir");
  json_decref(r);
  assert_string_equal(slurp("e/f"), "F");
  refused("{\"op\":\"move\",\"path\":\"e\",\"destination\":\"e/inner\"}", "denied", NULL);
  /* a directory never replaces a file, overwrite or not; a file never replaces a dir */
  refused("{\"op\":\"move\",\"path\":\"e\",\"destination\":\"b\",\"overwrite\":true}", "denied",
          NULL);
  dir("dd");
  refused("{\"op\":\"move\",\"path\":\"b\",\"destination\":\"dd\",\"overwrite\":true}", "denied",
          NULL);
  /* hard links, symlinks, fifos; the destination's parent must exist */
  put("h", "H");
  char p1[512], p2[512];
  snprintf(p1, sizeof p1, "%s/h", root);
  snprintf(p2, sizeof p2, "%s/h2", root);
  assert_int_equal(link(p1, p2), 0);
  refused("{\"op\":\"move\",\"path\":\"h\",\"destination\":\"h3\"}", "denied", "hard_link");
  link_to("/etc/passwd", "out");
  refused("{\"op\":\"move\",\"path\":\"out\",\"destination\":\"o2\"}", "denied", "symlink_escape");
  link_to("b", "in");
  refused("{\"op\":\"move\",\"path\":\"in\",\"destination\":\"i2\"}", "denied", NULL);
  refused("{\"op\":\"move\",\"path\":\"b\",\"destination\":\"out\",\"overwrite\":true}", "denied",
          "symlink_escape");
  snprintf(p1, sizeof p1, "%s/fifo", root);
  assert_int_equal(mkfifo(p1, 0600), 0);
  refused("{\"op\":\"move\",\"path\":\"fifo\",\"destination\":\"f2\"}", "denied", NULL);
  refused("{\"op\":\"move\",\"path\":\"b\",\"destination\":\"no/such\"}", "not_found", NULL);
  refused("{\"op\":\"move\",\"path\":\"b\",\"destination\":\"../b\"}", "denied", "path_traversal");
  /* exclusions: of either name, inside a moving directory, or of what a name would become */
  dir("s");
  put("s/key.pem", "K");
  refused("{\"op\":\"move\",\"path\":\"b\",\"destination\":\"x.pem\",\"exclude\":[\"*.pem\"]}",
          "excluded", NULL);
  refused("{\"op\":\"move\",\"path\":\"s\",\"destination\":\"t\",\"exclude\":[\"*.pem\"]}",
          "excluded", NULL);
  refused("{\"op\":\"move\",\"path\":\"e\",\"destination\":\"vault\",\"exclude\":[\"vault/f\"]}",
          "excluded", NULL);
  assert_true(there("s/key.pem") && there("e/f") && !there("t") && !there("vault"));
  /* a relative link that would climb out once its directory moves up */
  dir("m1");
  dir("m1/m2");
  link_to("../../b", "m1/m2/up");
  refused("{\"op\":\"move\",\"path\":\"m1/m2\",\"destination\":\"m3\"}", "denied",
          "symlink_escape");
  assert_true(there("m1/m2/up"));
}

static int counted;
static int count_one(const char *fp, const struct stat *st, int flag, struct FTW *ftw) {
  counted++;
  return 0;
}

/* Entries of the tree at `rel`, itself included. */
static int count_entries(const char *rel) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  counted = 0;
  nftw(p, count_one, 16, FTW_PHYS);
  return counted;
}

static void delete_ops(void **state) {
  refused("{\"op\":\"delete\",\"path\":\".\"}", "denied", NULL);
  refused("{\"op\":\"delete\",\"path\":\"..\"}", "denied", "path_traversal");
  put("f", "F");
  json_t *r = run("{\"op\":\"delete\",\"path\":\"f\"}");
  assert_int_equal(int_of(r, "deleted", NULL), 1);
  assert_string_equal(str_of(r, "type"), "file");
  json_decref(r);
  assert_false(there("f"));
  refused("{\"op\":\"delete\",\"path\":\"f\"}", "not_found", NULL);
  /* a symlink inside is removed itself, its target stays; one that leads out is refused */
  put("t", "T");
  link_to("t", "l");
  r = run("{\"op\":\"delete\",\"path\":\"l\"}");
  assert_string_equal(str_of(r, "type"), "symlink");
  json_decref(r);
  assert_true(there("t") && !there("l"));
  link_to("/etc", "out");
  refused("{\"op\":\"delete\",\"path\":\"out\"}", "denied", "symlink_escape");
  refused("{\"op\":\"delete\",\"path\":\"out/passwd\"}", "denied", "symlink_escape");
  /* hard links and fifos */
  char p1[512], p2[512];
  snprintf(p1, sizeof p1, "%s/t", root);
  snprintf(p2, sizeof p2, "%s/t2", root);
  assert_int_equal(link(p1, p2), 0);
  refused("{\"op\":\"delete\",\"path\":\"t\"}", "denied", "hard_link");
  snprintf(p1, sizeof p1, "%s/fifo", root);
  assert_int_equal(mkfifo(p1, 0600), 0);
  refused("{\"op\":\"delete\",\"path\":\"fifo\"}", "denied", NULL);
  refused("{\"op\":\"delete\",\"path\":\"t2\",\"exclude\":[\"t2\"]}", "excluded", NULL);
  /* a tree: not without recursive; refused whole for anything refusable deep inside */
  dir("tree");
  dir("tree/a");
  dir("tree/a/b");
  put("tree/0", "");
  put("tree/a/1", "");
  put("tree/a/b/2", "");
  put("tree/z", "");
  link_to("../0", "tree/a/inlink");
  refused("{\"op\":\"delete\",\"path\":\"tree\"}", "denied", NULL);
  int before = count_entries("tree");
  assert_int_equal(before, 8);
  snprintf(p1, sizeof p1, "%s/tree/a/b/fifo", root);
  assert_int_equal(mkfifo(p1, 0600), 0);
  refused("{\"op\":\"delete\",\"path\":\"tree\",\"recursive\":true}", "denied", NULL);
  assert_int_equal(count_entries("tree"), before + 1);
  unlink(p1);
  link_to("/etc/passwd", "tree/a/b/esc");
  refused("{\"op\":\"delete\",\"path\":\"tree\",\"recursive\":true}", "denied", "symlink_escape");
  assert_int_equal(count_entries("tree"), before + 1);
  snprintf(p1, sizeof p1, "%s/tree/a/b/esc", root);
  unlink(p1);
  refused("{\"op\":\"delete\",\"path\":\"tree\",\"recursive\":true,\"exclude\":[\"tree/z\"]}",
          "excluded", NULL);
  assert_int_equal(count_entries("tree"), before);
  snprintf(p1, sizeof p1, "%s/tree/a/1", root);
  snprintf(p2, sizeof p2, "%s/hl", root);
  assert_int_equal(link(p1, p2), 0);
  refused("{\"op\":\"delete\",\"path\":\"tree\",\"recursive\":true}", "denied", "hard_link");
  assert_int_equal(count_entries("tree"), before);
  unlink(p2);
  r = run("{\"op\":\"delete\",\"path\":\"tree\",\"recursive\":true}");
  assert_int_equal(int_of(r, "deleted", NULL), before);
  assert_string_equal(str_of(r, "type"), "dir");
  json_decref(r);
  assert_false(there("tree"));
}

static void find_ops(void **state) {
  dir("src");
  dir("src/sub");
  dir("secret");
  put("src/a.c", "");
  put("src/sub/b.c", "");
  put("src/sub/c.h", "");
  put("secret/k.c", "");
  put("top.c", "");
  link_to("/etc", "src/out");
  link_to("a.c", "src/in.c");
  json_t *r = run("{\"op\":\"find\",\"pattern\":\"*.c\",\"exclude\":[\"secret\"]}");
  json_t *m = json_object_get(r, "matches");
  const char *want[] = {"src/a.c", "src/in.c", "src/sub/b.c", "top.c"};
  assert_int_equal(json_array_size(m), 4);
  for (size_t i = 0; i < 4; i++)
    assert_string_equal(json_string_value(json_array_get(m, i)), want[i]);
  assert_true(json_is_false(json_object_get(r, "truncated")));
  json_decref(r);
  r = run("{\"op\":\"find\",\"pattern\":\"sub/*.h\",\"path\":\"src\"}");
  m = json_object_get(r, "matches");
  assert_int_equal(json_array_size(m), 1);
  assert_string_equal(json_string_value(json_array_get(m, 0)), "src/sub/c.h");
  json_decref(r);
  r = run("{\"op\":\"find\",\"pattern\":\"**/b.c\"}");
  assert_string_equal(json_string_value(json_array_get(json_object_get(r, "matches"), 0)),
                      "src/sub/b.c");
  json_decref(r);
  refused("{\"op\":\"find\",\"pattern\":\"*\",\"path\":\"src/out\"}", "denied", "symlink_escape");
  refused("{\"op\":\"find\"}", "bad_request", NULL);
  /* the match budget */
  dir("many");
  char name[64];
  for (int i = 0; i < 10005; i++) {
    snprintf(name, sizeof name, "%s/many/%05d", root, i);
    int fd = open(name, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    close(fd);
  }
  r = run("{\"op\":\"find\",\"pattern\":\"*\",\"path\":\"many\"}");
  assert_true(json_is_true(json_object_get(r, "truncated")));
  assert_int_equal(json_array_size(json_object_get(r, "matches")), 10000);
  json_decref(r);
  /* the byte budget: 400 paths of about 3.8 KB are over 1 MiB */
  char deep[4096] = "long";
  dir("long");
  for (int i = 0; i < 15; i++) {
    size_t l = strlen(deep);
    deep[l] = '/';
    memset(deep + l + 1, 'a' + i, 250);
    deep[l + 251] = '\0';
    dir(deep);
  }
  for (int i = 0; i < 400; i++) {
    snprintf(name, sizeof name, "/%03d", i);
    char p[4200];
    snprintf(p, sizeof p, "%s/%s%s", root, deep, name);
    int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    close(fd);
  }
  r = run("{\"op\":\"find\",\"pattern\":\"[0-9]*\",\"path\":\"long\"}");
  assert_true(json_is_true(json_object_get(r, "truncated")));
  size_t got = json_array_size(json_object_get(r, "matches"));
  assert_true(got > 200 && got < 300);
  json_decref(r);
}

static void search_ops(void **state) {
  dir("src");
  put("src/a.c", "int x;\nreturn needle;\n// needle again\n");
  put("src/b.txt", "needle in text\n");
  put("notes.md", "no match here\n");
  put("secret.c", "needle\n");
  put("bin", "needle\0binary");
  char p[512];
  snprintf(p, sizeof p, "%s/bin", root);
  FILE *f = fopen(p, "w");
  fwrite("needle\n\0bin", 1, 11, f);
  fclose(f);
  json_t *r = run("{\"op\":\"search\",\"pattern\":\"need(le)\\\\b\",\"exclude\":[\"secret.c\"]}");
  json_t *m = json_object_get(r, "matches");
  assert_int_equal(json_array_size(m), 3);
  assert_string_equal(str_of(json_array_get(m, 0), "path"), "src/a.c");
  assert_int_equal(int_of(json_array_get(m, 0), "line", NULL), 2);
  assert_string_equal(str_of(json_array_get(m, 0), "text"), "return needle;");
  assert_int_equal(int_of(json_array_get(m, 1), "line", NULL), 3);
  assert_string_equal(str_of(json_array_get(m, 2), "path"), "src/b.txt");
  assert_int_equal(int_of(r, "filesSkipped", NULL), 1); /* bin */
  assert_int_equal(int_of(r, "filesScanned", NULL), 3);
  json_decref(r);
  r = run("{\"op\":\"search\",\"pattern\":\"needle\",\"glob\":\"*.c\",\"maxMatches\":1}");
  m = json_object_get(r, "matches");
  assert_int_equal(json_array_size(m), 1);
  assert_true(json_is_true(json_object_get(r, "truncated")));
  json_decref(r);
  r = run("{\"op\":\"search\",\"pattern\":\"needle\",\"path\":\"src/b.txt\"}");
  assert_int_equal(json_array_size(json_object_get(r, "matches")), 1);
  json_decref(r);
  /* a bad pattern: PCRE2's message and offset */
  r = run("{\"op\":\"search\",\"pattern\":\"a(b\"}");
  assert_string_equal(code_of(r), "bad_request");
  assert_non_null(strstr(json_string_value(json_object_get(json_object_get(r, "error"), "message")),
                         "offset 3"));
  json_decref(r);
  refused("{\"op\":\"search\",\"pattern\":\"x\",\"maxMatches\":5001}", "bad_request", NULL);
  /* a long line is cut at 512 bytes, on a character boundary */
  char *line = malloc(2001);
  for (int i = 0; i < 2000; i += 2) memcpy(line + i, "\xc3\xa9", 2);
  line[2000] = '\0';
  put("long", line);
  r = run("{\"op\":\"search\",\"pattern\":\"\xc3\xa9$\",\"path\":\"long\"}");
  assert_int_equal(strlen(str_of(json_array_get(json_object_get(r, "matches"), 0), "text")), 512);
  json_decref(r);
  /* catastrophic backtracking ends quickly with regex_limit */
  memset(line, 'a', 2000);
  line[1999] = 'b';
  put("cat", line);
  free(line);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  refused("{\"op\":\"search\",\"pattern\":\"(a+)+$\",\"path\":\"cat\"}", "regex_limit", NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  assert_true(s < 2.0);
}

/* Every answer fits one protocol line (2 MiB, sandbox/proto/PROTOCOL.md): the worker takes a
 * longer one for a protocol violation. read_many's 50 echoed paths of 4 KiB of control
 * characters (6 bytes each, escaped) and a 1 MiB file that goes out as base64. */
static void read_many_answer_fits_line(void **state) {
  char p[512];
  snprintf(p, sizeof p, "%s/big", root);
  FILE *f = fopen(p, "w");
  for (int i = 0; i < 1024 * 1024; i++) fputc(1, f);
  fclose(f);
  json_t *paths = json_array();
  json_array_append_new(paths, json_string("big"));
  char name[4097];
  for (int k = 0; k < 49; k++) {
    size_t o = 0;
    for (int c = 0; c < 16; c++) {
      if (c) name[o++] = '/';
      memset(name + o, 1, 255);
      name[o] = (char)('A' + k % 26); /* distinct */
      o += 255;
    }
    name[o] = '\0';
    json_array_append_new(paths, json_string(name));
  }
  json_t *req = json_pack("{s:s, s:o}", "op", "read_many", "paths", paths);
  struct jb_fileop_error e = {0};
  json_t *r = jb_fileop("read_many", req, &e);
  json_decref(req);
  assert_non_null(r);
  char *line = json_dumps(r, JSON_COMPACT);
  size_t len = strlen(line);
  free(line);
  if (len > 2 * 1024 * 1024 - 4096) fail_msg("read_many answered %zu bytes", len);
  /* the file goes past the answer's room: too_large for it, the others answered each */
  json_t *files = json_object_get(r, "files");
  assert_int_equal(json_array_size(files), 50);
  json_t *first = json_array_get(files, 0);
  assert_false(json_is_true(json_object_get(first, "ok")));
  assert_string_equal(json_string_value(json_object_get(json_object_get(first, "error"), "code")),
                      "too_large");
  assert_string_equal(json_string_value(json_object_get(
                          json_object_get(json_array_get(files, 1), "error"), "code")),
                      "not_found");
  json_decref(r);
  /* alone it is read whole (base64) */
  r = run("{\"op\":\"read_many\",\"paths\":[\"big\"]}");
  first = json_array_get(json_object_get(r, "files"), 0);
  assert_true(json_is_true(json_object_get(first, "ok")));
  assert_string_equal(str_of(json_object_get(first, "result"), "encoding"), "base64");
  json_decref(r);
}

/* A regex that stays under PCRE2's match limit on each line but is slow on every one still
 * ends at the search's time budget, with `truncated`. */
static void search_slow_lines_deadline(void **state) {
  char p[512];
  snprintf(p, sizeof p, "%s/slow", root);
  FILE *f = fopen(p, "w");
  for (int i = 0; i < 4000; i++) fputs("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaX\n", f);
  fclose(f);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  json_t *r = run("{\"op\":\"search\",\"pattern\":\"^(a|aa)*X\\\\d\",\"path\":\"slow\"}");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  assert_true(json_is_true(json_object_get(r, "truncated")));
  json_decref(r);
  if (s > 12.0) fail_msg("the search took %.1f s; its budget is 10 s", s);
}

/* find and search go 64 directories below their start at most; what lies deeper is not looked
 * at, and the answer says so with `truncated`. */
static void walk_depth_truncated(void **state) {
  char path[1024] = "d";
  for (int i = 1; i < 70; i++) strcat(path, "/d");
  char line[1200];
  snprintf(line, sizeof line, "{\"op\":\"mkdir\",\"path\":\"%s\"}", path);
  json_decref(run(line));
  strcat(path, "/x.c");
  put(path, "needle\n");
  json_t *r = run("{\"op\":\"find\",\"pattern\":\"**/x.c\"}");
  assert_int_equal(json_array_size(json_object_get(r, "matches")), 0);
  assert_true(json_is_true(json_object_get(r, "truncated")));
  json_decref(r);
  r = run("{\"op\":\"search\",\"pattern\":\"needle\"}");
  assert_int_equal(json_array_size(json_object_get(r, "matches")), 0);
  assert_true(json_is_true(json_object_get(r, "truncated")));
  json_decref(r);
  /* a shallow tree is answered whole */
  put("top.c", "needle\n");
  r = run("{\"op\":\"find\",\"pattern\":\"*.c\",\"path\":\"d/d\"}");
  assert_true(json_is_true(json_object_get(r, "truncated"))); /* still 68 below d/d */
  json_decref(r);
  r = run("{\"op\":\"search\",\"pattern\":\"needle\",\"path\":\"top.c\"}");
  assert_false(json_is_true(json_object_get(r, "truncated")));
  json_decref(r);
}

/* stat's tree: a directory's names as they would land, and their SHA-256; a move with
 * expectTree runs only on exactly those names (a file: "file"). */
static void move_bound_to_tree(void **state) {
  dir("t");
  dir("t/workflows");
  put("t/workflows/x.yml", "on: push\n");
  put("t/a", "a\n");
  json_t *r = run("{\"op\":\"stat\",\"path\":\"t\",\"tree\":true}");
  json_t *tree = json_object_get(r, "tree");
  json_t *entries = json_object_get(tree, "entries");
  assert_int_equal(json_array_size(entries), 3);
  assert_string_equal(json_string_value(json_array_get(entries, 0)), "a");
  assert_string_equal(json_string_value(json_array_get(entries, 1)), "workflows/");
  assert_string_equal(json_string_value(json_array_get(entries, 2)), "workflows/x.yml");
  char sha[65];
  snprintf(sha, sizeof sha, "%s", str_of(tree, "sha256"));
  json_decref(r);
  /* a file: no tree; tree must be a boolean */
  r = run("{\"op\":\"stat\",\"path\":\"t/a\",\"tree\":true}");
  assert_null(json_object_get(r, "tree"));
  json_decref(r);
  refused("{\"op\":\"stat\",\"path\":\"t\",\"tree\":1}", "bad_request", NULL);
  /* the tree changed after it was checked: not moved */
  put("t/workflows/y.yml", "on: push\n");
  char line[300];
  snprintf(line, sizeof line,
           "{\"op\":\"move\",\"path\":\"t\",\"destination\":\"u\",\"expectTree\":\"%s\"}", sha);
  refused(line, "changed", NULL);
  refused("{\"op\":\"move\",\"path\":\"t\",\"destination\":\"u\",\"expectTree\":\"file\"}",
          "changed", NULL);
  assert_true(there("t/workflows/y.yml"));
  /* as checked: moved */
  r = run("{\"op\":\"stat\",\"path\":\"t\",\"tree\":true}");
  snprintf(sha, sizeof sha, "%s", str_of(json_object_get(r, "tree"), "sha256"));
  json_decref(r);
  snprintf(line, sizeof line,
           "{\"op\":\"move\",\"path\":\"t\",\"destination\":\"u\",\"expectTree\":\"%s\"}", sha);
  r = run(line);
  assert_true(json_is_true(json_object_get(r, "moved")));
  json_decref(r);
  /* a file moves with "file", not with a digest */
  refused("{\"op\":\"move\",\"path\":\"u/a\",\"destination\":\"b\",\"expectTree\":\"00\"}",
          "changed", NULL);
  r = run("{\"op\":\"move\",\"path\":\"u/a\",\"destination\":\"b\",\"expectTree\":\"file\"}");
  assert_true(json_is_true(json_object_get(r, "moved")));
  json_decref(r);
}

#define SHA_A "559aead08264d5795d3909718cdd05abd49572e84fe55590eef31a88a08fdffd"
#define SHA_B "df7e70e5021544f4834bbee64a9e3789febc4be81470df629cad6ddb03320a5c"

/* delete and move bound to the content the worker kept: expectSha256 (the file deleted, the
 * source moved) and expectDestSha256 (the file a move replaces; "" = none there). Not that
 * content: `changed`, nothing removed or moved. */
static void delete_move_bound_to_content(void **state) {
  put("f", "A");
  refused("{\"op\":\"delete\",\"path\":\"f\",\"expectSha256\":\"" SHA_B "\"}", "changed", NULL);
  refused("{\"op\":\"delete\",\"path\":\"f\",\"expectSha256\":\"\"}", "changed", NULL);
  refused("{\"op\":\"delete\",\"path\":\"f\",\"expectSha256\":1}", "bad_request", NULL);
  assert_string_equal(slurp("f"), "A");
  json_t *r = run("{\"op\":\"delete\",\"path\":\"f\",\"expectSha256\":\"" SHA_A "\"}");
  assert_int_equal(int_of(r, "deleted", NULL), 1);
  json_decref(r);
  assert_false(there("f"));
  /* a directory or a symlink is not the file a hash names */
  dir("d");
  refused("{\"op\":\"delete\",\"path\":\"d\",\"expectSha256\":\"" SHA_A "\"}", "changed", NULL);
  assert_true(there("d"));
  /* move: the source */
  put("a", "A");
  put("b", "B");
  refused("{\"op\":\"move\",\"path\":\"a\",\"destination\":\"c\",\"expectSha256\":\"" SHA_B "\"}",
          "changed", NULL);
  assert_string_equal(slurp("a"), "A");
  assert_false(there("c"));
  /* the destination overwrite replaces: another file, or one where none was expected */
  refused(
      "{\"op\":\"move\",\"path\":\"a\",\"destination\":\"b\",\"overwrite\":true,"
      "\"expectSha256\":\"" SHA_A "\",\"expectDestSha256\":\"" SHA_A "\"}",
      "changed", NULL);
  refused(
      "{\"op\":\"move\",\"path\":\"a\",\"destination\":\"b\",\"overwrite\":true,"
      "\"expectDestSha256\":\"\"}",
      "changed", NULL);
  assert_string_equal(slurp("a"), "A");
  assert_string_equal(slurp("b"), "B");
  /* a destination expected but gone */
  refused(
      "{\"op\":\"move\",\"path\":\"a\",\"destination\":\"c\",\"overwrite\":true,"
      "\"expectDestSha256\":\"" SHA_B "\"}",
      "changed", NULL);
  assert_true(there("a") && !there("c"));
  /* as expected: moved, the destination replaced */
  r =
      run("{\"op\":\"move\",\"path\":\"a\",\"destination\":\"b\",\"overwrite\":true,"
          "\"expectSha256\":\"" SHA_A "\",\"expectDestSha256\":\"" SHA_B "\"}");
  assert_true(json_is_true(json_object_get(r, "replaced")));
  assert_string_equal(str_of(r, "sha256"), SHA_A);
  json_decref(r);
  assert_false(there("a"));
  assert_string_equal(slurp("b"), "A");
  /* a destination bound absent: moved where none is */
  r =
      run("{\"op\":\"move\",\"path\":\"b\",\"destination\":\"c\",\"overwrite\":true,"
          "\"expectDestSha256\":\"\"}");
  assert_false(json_is_true(json_object_get(r, "replaced")));
  json_decref(r);
  assert_string_equal(slurp("c"), "A");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(read_lines, setup, teardown),
      cmocka_unit_test_setup_teardown(read_many_budget, setup, teardown),
      cmocka_unit_test_setup_teardown(stat_mode_mtime, setup, teardown),
      cmocka_unit_test_setup_teardown(list_depth_sorted, setup, teardown),
      cmocka_unit_test_setup_teardown(mkdir_ops, setup, teardown),
      cmocka_unit_test_setup_teardown(move_ops, setup, teardown),
      cmocka_unit_test_setup_teardown(delete_ops, setup, teardown),
      cmocka_unit_test_setup_teardown(find_ops, setup, teardown),
      cmocka_unit_test_setup_teardown(search_ops, setup, teardown),
      cmocka_unit_test_setup_teardown(read_many_answer_fits_line, setup, teardown),
      cmocka_unit_test_setup_teardown(search_slow_lines_deadline, setup, teardown),
      cmocka_unit_test_setup_teardown(walk_depth_truncated, setup, teardown),
      cmocka_unit_test_setup_teardown(move_bound_to_tree, setup, teardown),
      cmocka_unit_test_setup_teardown(delete_move_bound_to_content, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
