/* test_edit.c — the edit tool's replacements (api/core/edit.c): exactly-once matching,
 * replaceAll, edits applied in order on what the ones before left, all or nothing, the
 * failing edit named with its reason, the size limit checked before anything is allocated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/edit.h"

#define E(o, n) \
  { (o), sizeof(o) - 1, (n), sizeof(n) - 1, false }
#define EALL(o, n) \
  { (o), sizeof(o) - 1, (n), sizeof(n) - 1, true }

/* Applies `edits` to `src` and checks the result is `want` with `nrep` replacements. */
static void applies(const char *src, const struct jb_edit *edits, size_t n, const char *want,
                    size_t nrep) {
  unsigned char *out = (unsigned char *)"sentinel";
  size_t olen = 99, rep = 99;
  struct jb_edit_failure f;
  assert_int_equal(jb_edit_apply((const unsigned char *)src, strlen(src), edits, n, 1 << 20, &out,
                                 &olen, &rep, &f),
                   0);
  assert_int_equal(olen, strlen(want));
  assert_memory_equal(out, want, olen);
  assert_int_equal(rep, nrep);
  free(out);
}

/* Applies `edits` to `src` and checks that it fails with `fault` at edit `index`. */
static struct jb_edit_failure fails(const char *src, const struct jb_edit *edits, size_t n,
                                    size_t max, enum jb_edit_fault fault, size_t index) {
  unsigned char *out = (unsigned char *)"sentinel";
  size_t olen = 0, rep = 0;
  struct jb_edit_failure f;
  assert_int_equal(
      jb_edit_apply((const unsigned char *)src, strlen(src), edits, n, max, &out, &olen, &rep, &f),
      -1);
  assert_null(out);
  assert_int_equal(f.fault, fault);
  assert_int_equal(f.index, index);
  return f;
}

static void once(void **state) {
  (void)state;
  const struct jb_edit e[] = {E("beta", "BETA")};
  applies("alpha\nbeta\ngamma\n", e, 1, "alpha\nBETA\ngamma\n", 1);
  const struct jb_edit del[] = {E("beta\n", "")};
  applies("alpha\nbeta\ngamma\n", del, 1, "alpha\ngamma\n", 1);
  const struct jb_edit grow[] = {E("a", "aaaa")};
  applies("xay", grow, 1, "xaaaay", 1);
}

static void in_order(void **state) {
  (void)state;
  /* the second edit sees the first's result: "two" exists only after edit 1 */
  const struct jb_edit e[] = {E("one", "two"), E("two", "three"), E("end", "END")};
  applies("one end", e, 3, "three END", 3);
}

static void replace_all(void **state) {
  (void)state;
  const struct jb_edit e[] = {EALL("ab", "X")};
  applies("ab ab aab abab", e, 1, "X X aX XX", 5);
  /* non-overlapping, left to right */
  const struct jb_edit o[] = {EALL("aa", "b")};
  applies("aaaaa", o, 1, "bba", 2);
  /* replaceAll with a single occurrence is fine */
  const struct jb_edit one[] = {EALL("q", "Q")};
  applies("xqx", one, 1, "xQx", 1);
}

static void not_found_and_ambiguous(void **state) {
  (void)state;
  const struct jb_edit nf[] = {E("alpha", "A"), E("delta", "D")};
  fails("alpha beta", nf, 2, 1 << 20, JB_EDIT_NOT_FOUND, 1);
  const struct jb_edit amb[] = {E("x", "y"), E("ab", "cd")};
  struct jb_edit_failure f = fails("x ab ab ab ab", amb, 2, 1 << 20, JB_EDIT_AMBIGUOUS, 1);
  assert_int_equal(f.count, 4);
  char msg[300];
  jb_edit_failure_text(&f, 2, 1 << 20, msg, sizeof msg);
  assert_non_null(strstr(msg, "edit 2 of 2"));
  assert_non_null(strstr(msg, "found 4 times"));
  assert_non_null(strstr(msg, "replaceAll"));
  struct jb_edit_failure g = fails("alpha", nf + 1, 1, 1 << 20, JB_EDIT_NOT_FOUND, 0);
  jb_edit_failure_text(&g, 1, 1 << 20, msg, sizeof msg);
  assert_non_null(strstr(msg, "edit 1 of 1"));
  assert_non_null(strstr(msg, "not found"));
  /* an edit whose text an earlier edit removed is not found: all or nothing */
  const struct jb_edit gone[] = {E("beta", "B"), E("beta", "C")};
  fails("alpha beta", gone, 2, 1 << 20, JB_EDIT_NOT_FOUND, 1);
  const struct jb_edit empty[] = {{"", 0, "x", 1, false}};
  fails("abc", empty, 1, 1 << 20, JB_EDIT_EMPTY, 0);
}

static void too_large(void **state) {
  (void)state;
  /* 1000 occurrences × (1000 - 1) more bytes each would be ~1 MB over a 64 KiB limit: refused
   * before anything that size is allocated */
  char *src = malloc(1001);
  memset(src, 'a', 1000);
  src[1000] = '\0';
  char *big = malloc(1000);
  memset(big, 'b', 1000);
  const struct jb_edit e[] = {{"a", 1, big, 1000, true}};
  fails(src, e, 1, 64 * 1024, JB_EDIT_TOO_LARGE, 0);
  /* exactly at the limit is allowed */
  const struct jb_edit fit[] = {{"a", 1, big, 2, true}};
  unsigned char *out;
  size_t olen, rep;
  struct jb_edit_failure f;
  assert_int_equal(jb_edit_apply((unsigned char *)src, 1000, fit, 1, 2000, &out, &olen, &rep, &f),
                   0);
  assert_int_equal(olen, 2000);
  free(out);
  fails(src, fit, 1, 1999, JB_EDIT_TOO_LARGE, 0);
  free(big);
  free(src);
}

static void binary_safe(void **state) {
  (void)state;
  const unsigned char src[] = {'x', 0, 'y', 0, 'z'};
  const struct jb_edit e[] = {{"y", 1, "\0Y", 2, false}};
  unsigned char *out;
  size_t olen, rep;
  struct jb_edit_failure f;
  assert_int_equal(jb_edit_apply(src, sizeof src, e, 1, 100, &out, &olen, &rep, &f), 0);
  const unsigned char want[] = {'x', 0, 0, 'Y', 0, 'z'};
  assert_int_equal(olen, sizeof want);
  assert_memory_equal(out, want, sizeof want);
  free(out);
  /* an empty file: nothing to find */
  const struct jb_edit any[] = {E("a", "b")};
  fails("", any, 1, 100, JB_EDIT_NOT_FOUND, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(once),        cmocka_unit_test(in_order),
      cmocka_unit_test(replace_all), cmocka_unit_test(not_found_and_ambiguous),
      cmocka_unit_test(too_large),   cmocka_unit_test(binary_safe),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
