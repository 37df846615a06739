/* test_buf.c — the bounded byte buffer (lib/buf.c): appends up to the cap and not one byte
 * past it, a refused append leaves the contents as they were, formatted appends, hand-over of
 * the storage, in-place filling and dropping from the front. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"

static void append_up_to_the_cap(void **state) {
  (void)state;
  struct jb_buf b;
  jb_buf_init(&b, 10);
  assert_int_equal(jb_buf_append(&b, "hello", 5), 0);
  assert_int_equal(jb_buf_append(&b, "world", 5), 0); /* exactly the cap */
  assert_int_equal(b.len, 10);
  assert_string_equal(b.data, "helloworld");
  assert_int_equal(jb_buf_append(&b, "!", 1), -EMSGSIZE); /* one over */
  assert_int_equal(b.len, 10);
  assert_string_equal(b.data, "helloworld");
  assert_true(b.alloc <= 11);
  assert_int_equal(jb_buf_append(&b, "", 0), 0); /* nothing is always fine */
  jb_buf_free(&b);
  assert_null(b.data);
  assert_int_equal(b.len, 0);
}

static void refused_append_keeps_the_contents(void **state) {
  (void)state;
  struct jb_buf b;
  jb_buf_init(&b, 8);
  assert_int_equal(jb_buf_append(&b, "abc", 3), 0);
  assert_int_equal(jb_buf_append(&b, "123456", 6), -EMSGSIZE); /* 9 > 8: none of it */
  assert_int_equal(b.len, 3);
  assert_string_equal(b.data, "abc");
  assert_int_equal(jb_buf_append(&b, "12345", 5), 0);
  assert_string_equal(b.data, "abc12345");
  jb_buf_free(&b);
}

static void cap_zero_holds_nothing(void **state) {
  (void)state;
  struct jb_buf b;
  jb_buf_init(&b, 0);
  assert_int_equal(jb_buf_append(&b, "x", 1), -EMSGSIZE);
  assert_int_equal(jb_buf_appendf(&b, "%s", ""), 0);
  assert_int_equal(jb_buf_appendf(&b, "%d", 1), -EMSGSIZE);
  assert_int_equal(b.len, 0);
  jb_buf_free(&b);
}

static void nul_bytes_are_bytes(void **state) {
  (void)state;
  struct jb_buf b;
  jb_buf_init(&b, 100);
  assert_int_equal(jb_buf_append(&b, "a\0b", 3), 0);
  assert_int_equal(b.len, 3);
  assert_memory_equal(b.data, "a\0b", 4); /* and the terminating NUL */
  jb_buf_free(&b);
}

static void appendf_formats_and_checks(void **state) {
  (void)state;
  struct jb_buf b;
  jb_buf_init(&b, 16);
  assert_int_equal(jb_buf_appendf(&b, "%s=%d", "n", 42), 0);
  assert_string_equal(b.data, "n=42");
  assert_int_equal(jb_buf_appendf(&b, "%012d", 7), 0); /* 4 + 12 = 16: at the cap */
  assert_int_equal(b.len, 16);
  assert_int_equal(jb_buf_appendf(&b, "%c", 'x'), -EMSGSIZE);
  assert_string_equal(b.data, "n=42000000000007");
  jb_buf_reset(&b);
  assert_int_equal(b.len, 0);
  assert_string_equal(b.data, "");
  assert_int_equal(jb_buf_appendf(&b, "again"), 0);
  assert_string_equal(b.data, "again");
  jb_buf_free(&b);
}

static void grows_by_doubling_never_past_the_cap(void **state) {
  (void)state;
  struct jb_buf b;
  jb_buf_init(&b, 5000);
  char chunk[100];
  memset(chunk, 'z', sizeof chunk);
  for (int i = 0; i < 50; i++) assert_int_equal(jb_buf_append(&b, chunk, sizeof chunk), 0);
  assert_int_equal(b.len, 5000);
  assert_int_equal(b.alloc, 5001); /* clamped: the cap and the NUL */
  assert_int_equal(jb_buf_append(&b, chunk, 1), -EMSGSIZE);
  for (size_t i = 0; i < b.len; i++) assert_int_equal(b.data[i], 'z');
  assert_int_equal(b.data[5000], '\0');
  jb_buf_free(&b);
}

static void take_hands_over(void **state) {
  (void)state;
  struct jb_buf b;
  jb_buf_init(&b, 64);
  size_t n = 99;
  char *p = jb_buf_take(&b, &n); /* empty: still a string */
  assert_non_null(p);
  assert_int_equal(n, 0);
  assert_string_equal(p, "");
  free(p);
  assert_int_equal(jb_buf_append(&b, "kept", 4), 0);
  p = jb_buf_take(&b, &n);
  assert_int_equal(n, 4);
  assert_string_equal(p, "kept");
  free(p);
  assert_null(b.data);
  assert_int_equal(b.len, 0);
  assert_int_equal(b.cap, 64); /* usable again */
  assert_int_equal(jb_buf_append(&b, "more", 4), 0);
  assert_string_equal(b.data, "more");
  jb_buf_free(&b);
}

static void reserve_fill_and_drop(void **state) {
  (void)state;
  struct jb_buf b;
  jb_buf_init(&b, 1000);
  char *tail;
  assert_int_equal(jb_buf_space(&b), 0);
  assert_int_equal(jb_buf_reserve(&b, 10, &tail), 0);
  size_t space = jb_buf_space(&b);
  assert_true(space >= 10 && space <= 1000);
  memcpy(tail, "0123456789", 10);
  jb_buf_added(&b, 10);
  assert_string_equal(b.data, "0123456789");
  jb_buf_drop_front(&b, 4);
  assert_int_equal(b.len, 6);
  assert_string_equal(b.data, "456789");
  assert_int_equal(jb_buf_reserve(&b, 994, &tail), 0); /* 6 + 994 = the cap */
  assert_int_equal(jb_buf_space(&b), 994);
  assert_int_equal(jb_buf_reserve(&b, 995, &tail), -EMSGSIZE);
  jb_buf_drop_front(&b, 6);
  assert_int_equal(b.len, 0);
  assert_string_equal(b.data, "");
  jb_buf_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(append_up_to_the_cap),
      cmocka_unit_test(refused_append_keeps_the_contents),
      cmocka_unit_test(cap_zero_holds_nothing),
      cmocka_unit_test(nul_bytes_are_bytes),
      cmocka_unit_test(appendf_formats_and_checks),
      cmocka_unit_test(grows_by_doubling_never_past_the_cap),
      cmocka_unit_test(take_hands_over),
      cmocka_unit_test(reserve_fill_and_drop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
