/* test_utf8.c — bytes made into valid UTF-8 (lib/utf8.h): valid text kept as it is, each bad
 * byte and NUL one U+FFFD and counted, sequences cut short kept for the next call unless it is
 * the last, and the buffer's cap honoured; the characters plain text must not carry as they
 * are (jb_utf8_hidden_mark) found at their edges and nowhere else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "lib/utf8.h"

/* `in` (n bytes) sanitized as one final call: the text into `want`, the replacements. */
static void check(const char *in, size_t n, const char *want, size_t want_replaced) {
  struct jb_buf b;
  jb_buf_init(&b, 1 << 20);
  size_t rep = 0;
  assert_int_equal(jb_utf8_sanitize((const unsigned char *)in, n, true, &b, &rep), n);
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.data ? b.data : "", want, strlen(want));
  assert_int_equal(rep, want_replaced);
  jb_buf_free(&b);
}

#define R "\xEF\xBF\xBD"

static void valid_and_invalid(void **state) {
  (void)state;
  check("hello\n", 6, "hello\n", 0);
  check("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", 14,
        "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", 0);
  check(
      "a\xFF"
      "b",
      3, "a" R "b", 1);
  check(
      "a\x00"
      "b",
      3, "a" R "b", 1); /* NUL */
  check("\xC0\xAF", 2, R R, 2); /* overlong '/' */
  check("\xE0\x80\xAF", 3, R R R, 3); /* overlong, three bytes */
  check("\xED\xA0\x80", 3, R R R, 3); /* a surrogate */
  check("\xF4\x90\x80\x80", 4, R R R R, 4); /* past U+10FFFF */
  check("\x80x", 2, R "x", 1); /* a stray continuation byte */
  check("x\xE2\x82", 3, "x" R R, 2); /* cut short at the end of the last call */
  check(R, 3, R, 0); /* U+FFFD itself is text */
}

static void cut_sequences_wait(void **state) {
  (void)state;
  struct jb_buf b;
  jb_buf_init(&b, 100);
  size_t rep = 0;
  const unsigned char first[] = {'a', 0xE2, 0x82};
  assert_int_equal(jb_utf8_sanitize(first, 3, false, &b, &rep), 1);
  const unsigned char rest[] = {0xE2, 0x82, 0xAC, 'b'};
  assert_int_equal(jb_utf8_sanitize(rest, 4, false, &b, &rep), 4);
  assert_string_equal(b.data,
                      "a\xE2\x82\xAC"
                      "b");
  assert_int_equal(rep, 0);
  assert_int_equal(jb_utf8_seq(rest, 2), -1);
  assert_int_equal(jb_utf8_seq(rest, 3), 3);
  assert_int_equal(jb_utf8_seq((const unsigned char *)"\xF5", 1), 0);
  assert_int_equal(jb_utf8_sanitize(NULL, 0, true, &b, &rep), 0); /* an empty stream */
  jb_buf_free(&b);
  /* the cap: nothing past it */
  jb_buf_init(&b, 4);
  rep = 0;
  assert_int_equal(jb_utf8_sanitize((const unsigned char *)"abcdef", 6, true, &b, &rep),
                   (size_t)-1);
  assert_true(b.len <= 4);
  jb_buf_free(&b);
}

/* The code point `cp` (U+0080..U+FFFF) as UTF-8 into `out`; its length. */
static size_t encode(unsigned cp, unsigned char out[3]) {
  if (cp < 0x800) {
    out[0] = (unsigned char)(0xc0 | cp >> 6);
    out[1] = (unsigned char)(0x80 | (cp & 0x3f));
    return 2;
  }
  out[0] = (unsigned char)(0xe0 | cp >> 12);
  out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
  out[2] = (unsigned char)(0x80 | (cp & 0x3f));
  return 3;
}

static void hidden_marks(void **state) {
  (void)state;
  /* every code point U+0080..U+FFFF outside the surrogates, against the list written out */
  for (unsigned cp = 0x80; cp <= 0xffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    unsigned char u[3];
    size_t len = encode(cp, u);
    bool want = (cp <= 0x9f) || (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
                (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff;
    assert_int_equal(jb_utf8_hidden_mark(u, len), want ? len : 0);
    if (want) assert_int_equal(jb_utf8_hidden_mark(u, len - 1), 0); /* cut short */
  }
  for (unsigned c = 0; c < 0x80; c++) { /* ASCII, C0 included, is the caller's */
    unsigned char a[3] = {(unsigned char)c, 0x80, 0x80};
    assert_int_equal(jb_utf8_hidden_mark(a, 3), 0);
  }
  const unsigned char emoji[] = {0xf0, 0x9f, 0x98, 0x80};
  assert_int_equal(jb_utf8_hidden_mark(emoji, 4), 0);
  assert_int_equal(jb_utf8_hidden_mark(emoji, 0), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(valid_and_invalid),
      cmocka_unit_test(cut_sequences_wait),
      cmocka_unit_test(hidden_marks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
