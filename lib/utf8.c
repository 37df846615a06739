/* utf8.c — bytes made into valid UTF-8 text (see utf8.h). */
#include "lib/utf8.h"

int jb_utf8_seq(const unsigned char *s, size_t n) {
  if (n == 0) return 0;
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0; /* no overlong form */
    if (c == 0xED) hi = 0x9F; /* no surrogate */
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F; /* nothing past U+10FFFF */
  } else {
    return 0;
  }
  for (size_t i = 1; i < len; i++) {
    if (i >= n) return -1;
    unsigned char b = s[i];
    if (i == 1 ? b < lo || b > hi : b < 0x80 || b > 0xBF) return 0;
  }
  return (int)len;
}

size_t jb_utf8_sanitize(const unsigned char *in, size_t n, bool final, struct jb_buf *out,
                        size_t *replaced) {
  static const char fffd[] = "\xEF\xBF\xBD";
  if (n == 0) return 0; /* `in` may be NULL then */
  size_t i = 0, run = 0; /* run: valid bytes from `i - run` not yet appended */
  while (i < n) {
    int l = in[i] ? jb_utf8_seq(in + i, n - i) : 0;
    if (l < 0 && !final) break;
    if (l > 0) {
      i += (size_t)l;
      run += (size_t)l;
      continue;
    }
    if (jb_buf_append(out, in + i - run, run) < 0 || jb_buf_append(out, fffd, 3) < 0)
      return (size_t)-1;
    run = 0;
    (*replaced)++;
    i++;
  }
  if (jb_buf_append(out, in + i - run, run) < 0) return (size_t)-1;
  return i;
}

size_t jb_utf8_hidden_mark(const unsigned char *p, size_t n) {
  if (n >= 2 && p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) return 2; /* C1 */
  if (n < 3) return 0;
  if (p[0] == 0xe2 && p[1] == 0x80 &&
      ((p[2] >= 0x8b && p[2] <= 0x8f) || (p[2] >= 0xa8 && p[2] <= 0xae)))
    return 3; /* U+200B..U+200F, U+2028..U+202E */
  if (p[0] == 0xe2 && p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9) return 3; /* U+2066.. */
  if (p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf) return 3; /* U+FEFF */
  return 0;
}
