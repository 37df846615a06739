/* test_line.c — the newline-delimited reader and writer (lib/line.c): the same lines whatever
 * the chunking, the per-line cap exactly at the limit and one over under each policy (fail,
 * skip at once, skip whole), never more than max_line + 1 bytes held, empty lines, CR, NUL
 * bytes, a last line without '\n', JSON objects with duplicate keys and deep nesting, reads
 * from a non-blocking pipe, hand-over of a line, and the writer. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/line.h"

/* Runs a reader over `in` fed `chunk` bytes at a time and returns its transcript: "[line]" for
 * a line (a NUL byte shown as "\0"), "T" too long, "M" out of memory, "E" the end ("…" when
 * the input ran out without an end). Checks the memory bound at every step. */
static char *run(const struct jb_line_opts *o, const char *in, size_t n, size_t chunk, bool end) {
  struct jb_line_reader r;
  jb_line_init(&r, o);
  struct jb_buf out;
  jb_buf_init(&out, 1 << 20);
  size_t i = 0;
  for (;;) {
    char *line;
    size_t len;
    int rc = jb_line_next(&r, &line, &len);
    assert_true(r.buf.len <= o->max_line + 1);
    assert_true(r.buf.alloc <= o->max_line + 2);
    if (rc == JB_LINE_AGAIN) {
      if (i < n) {
        size_t k = n - i < chunk ? n - i : chunk;
        size_t used = jb_line_feed(&r, in + i, k);
        assert_true(used <= k);
        i += used;
        continue;
      }
      if (end && !r.ended) {
        jb_line_end(&r);
        continue;
      }
      assert_int_equal(jb_buf_append(&out, "…", strlen("…")), 0);
      break;
    }
    if (rc == JB_LINE_OK) {
      assert_int_equal(line[len], '\0');
      assert_int_equal(jb_buf_append(&out, "[", 1), 0);
      for (size_t j = 0; j < len; j++) {
        if (line[j])
          assert_int_equal(jb_buf_append(&out, &line[j], 1), 0);
        else
          assert_int_equal(jb_buf_append(&out, "\\0", 2), 0);
      }
      assert_int_equal(jb_buf_append(&out, "]", 1), 0);
      continue;
    }
    assert_int_equal(jb_buf_append(&out,
                                   rc == JB_LINE_TOO_LONG ? "T"
                                   : rc == JB_LINE_NOMEM  ? "M"
                                                          : "E",
                                   1),
                     0);
    if (rc == JB_LINE_END) break;
    if (o->over == JB_LINE_FAIL) {
      /* ended: the same answer again, and every later byte dropped */
      assert_int_equal(jb_line_next(&r, &line, &len), rc);
      assert_int_equal(jb_line_feed(&r, "x\n", 2), 2);
      assert_int_equal(jb_line_next(&r, &line, &len), rc);
      break;
    }
  }
  jb_line_free(&r);
  char *t = jb_buf_take(&out, NULL);
  assert_non_null(t);
  return t;
}

/* run() with every chunk size from 1 to n + 1: all give `want`. */
static void expect(const struct jb_line_opts *o, const char *in, size_t n, bool end,
                   const char *want) {
  for (size_t c = 1; c <= n + 1; c++) {
    char *t = run(o, in, n, c, end);
    if (strcmp(t, want) != 0) fail_msg("chunks of %zu: got %s, want %s", c, t, want);
    free(t);
  }
}
#define EXPECT(o, lit, end, want) expect(o, lit, sizeof lit - 1, end, want)

static void lines_whatever_the_chunking(void **state) {
  (void)state;
  struct jb_line_opts o = {.max_line = 64, .over = JB_LINE_FAIL};
  EXPECT(&o, "one\ntwo\nthree\n", true, "[one][two][three]E");
  EXPECT(&o, "one\ntwo\nthree\n", false, "[one][two][three]…");
  EXPECT(&o, "", true, "E");
  EXPECT(&o, "part", true, "E"); /* a part-line at the end is dropped */
  EXPECT(&o, "part", false, "…");
}

static void empty_lines(void **state) {
  (void)state;
  struct jb_line_opts o = {.max_line = 8, .over = JB_LINE_FAIL};
  EXPECT(&o, "\n\na\n\n", true, "[][][a][]E");
  o.skip_empty = true;
  EXPECT(&o, "\n\na\n\n", true, "[a]E");
}

static void cr_and_nul_are_bytes(void **state) {
  (void)state;
  struct jb_line_opts o = {.max_line = 8, .over = JB_LINE_FAIL};
  EXPECT(&o, "a\r\nb\r\n", true,
         "[a\r][b\r]"
         "E");
  EXPECT(&o, "a\0b\n\0\n", true, "[a\\0b][\\0]E");
}

static void last_line_without_newline(void **state) {
  (void)state;
  struct jb_line_opts o = {.max_line = 8, .over = JB_LINE_SKIP, .last_unterminated = true};
  EXPECT(&o, "a\nlast", true, "[a][last]E");
  EXPECT(&o, "a\nlast", false, "[a]…");
  EXPECT(&o, "a\n", true, "[a]E");
  EXPECT(&o, "a\n123456789", true, "[a]TE"); /* over the limit: reported, not delivered */
}

static void cap_exactly_and_one_over_fail(void **state) {
  (void)state;
  struct jb_line_opts o = {.max_line = 8, .over = JB_LINE_FAIL};
  EXPECT(&o, "12345678\nok\n", true, "[12345678][ok]E");
  EXPECT(&o, "123456789\nok\n", true, "T");
  EXPECT(&o, "a\n123456789", false, "[a]T"); /* found out before its end comes */
  EXPECT(&o, "a\n12345678", false, "[a]…"); /* at the limit: it may still end */
}

static void cap_exactly_and_one_over_skip(void **state) {
  (void)state;
  struct jb_line_opts o = {.max_line = 8, .over = JB_LINE_SKIP};
  EXPECT(&o, "12345678\nok\n", true, "[12345678][ok]E");
  EXPECT(&o, "123456789\nok\n", true, "T[ok]E");
  EXPECT(&o, "123456789", false, "T…"); /* at once, without waiting for the newline */
  EXPECT(&o, "x\n123456789abcdefghijklmnopqrstuvwxyz\ny\n", true, "[x]T[y]E");
  EXPECT(&o, "123456789\n123456789\n\n", true, "TT[]E");
}

static void cap_exactly_and_one_over_skip_whole(void **state) {
  (void)state;
  struct jb_line_opts o = {.max_line = 8, .over = JB_LINE_SKIP_WHOLE, .skip_empty = true};
  EXPECT(&o, "12345678\nok\n", true, "[12345678][ok]E");
  EXPECT(&o, "123456789\nok\n", true, "T[ok]E");
  EXPECT(&o, "123456789", false, "…"); /* only when the newline comes */
  EXPECT(&o, "123456789", true, "E"); /* and never when the input ends first */
  EXPECT(&o, "x\n123456789abcdefghijklmnopqrstuvwxyz\n\ny\n", true, "[x]T[y]E");
}

static void a_long_line_is_never_held_whole(void **state) {
  (void)state;
  struct jb_line_opts o = {.max_line = 1000, .over = JB_LINE_SKIP_WHOLE};
  size_t n = 200000;
  char *big = malloc(n + 4);
  assert_non_null(big);
  memset(big, 'q', n);
  memcpy(big + n, "\nz\n", 3);
  for (size_t c = 1; c <= 100001; c += 9999) { /* run() checks the bound at every step */
    char *t = run(&o, big, n + 3, c, true);
    assert_string_equal(t, "T[z]E");
    free(t);
  }
  free(big);
}

static void json_objects(void **state) {
  (void)state;
  static const char in[] =
      "{\"a\":1}\n"
      "{\"a\":1,\"a\":2}\n"
      "[1]\n"
      "{\"x\":[[[[1]]]]}\n"
      "{\"x\":[[[[[1]]]]]}\n"
      "not json\n"
      "\n"
      "{\"k\":\"v\\u0000\"}\n";
  json_t *o;
  jb_error err = {0};
  int want[] = {JB_LINE_OK,       JB_LINE_BAD_JSON, JB_LINE_BAD_JSON, JB_LINE_OK,
                JB_LINE_BAD_JSON, JB_LINE_BAD_JSON, JB_LINE_BAD_JSON, JB_LINE_BAD_JSON};
  struct jb_line_reader r;
  jb_line_init(&r, &(struct jb_line_opts){.max_line = 200, .over = JB_LINE_SKIP_WHOLE});
  size_t i = 0, k = 0;
  for (;;) {
    err.msg[0] = '\0';
    int rc = jb_line_next_object(&r, 5, &o, &err);
    if (rc == JB_LINE_AGAIN) {
      if (i == sizeof in - 1) break;
      i += jb_line_feed(&r, in + i, sizeof in - 1 - i);
      continue;
    }
    assert_true(k < sizeof want / sizeof want[0]);
    assert_int_equal(rc, want[k]);
    if (rc == JB_LINE_OK) {
      assert_non_null(o);
      assert_true(json_is_object(o));
      json_decref(o);
    } else {
      assert_null(o);
      assert_true(err.msg[0] != '\0');
      if (k == 1) assert_non_null(strstr(err.msg, "duplicate"));
      if (k == 4) assert_non_null(strstr(err.msg, "deeper"));
    }
    k++;
  }
  assert_int_equal(k, sizeof want / sizeof want[0]);
  jb_line_free(&r);
}

static void reads_from_a_pipe(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
  struct jb_line_reader r;
  jb_line_init(&r, &(struct jb_line_opts){.max_line = 16, .over = JB_LINE_FAIL});
  jb_error err = {0};
  char *line;
  size_t n;
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_AGAIN);
  assert_int_equal(jb_line_read(&r, p[0], &err), -1);
  assert_int_equal(err.code, EAGAIN); /* nothing yet */
  assert_int_equal(write(p[1], "hel", 3), 3);
  assert_int_equal(jb_line_read(&r, p[0], &err), 3);
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_AGAIN);
  assert_int_equal(write(p[1], "lo\nworld\nmore", 13), 13);
  assert_int_equal(jb_line_read(&r, p[0], &err), 13);
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_OK);
  assert_string_equal(line, "hello");
  assert_int_equal(jb_line_held(&r), 10); /* what came with it */
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_OK);
  assert_string_equal(line, "world");
  assert_int_equal(jb_line_held(&r), 4);
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_AGAIN);
  close(p[1]);
  assert_int_equal(jb_line_read(&r, p[0], &err), 0);
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_END);
  close(p[0]);
  jb_line_free(&r);

  /* a read never takes more than fits under the cap */
  assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
  jb_line_init(&r, &(struct jb_line_opts){.max_line = 4, .over = JB_LINE_FAIL});
  assert_int_equal(write(p[1], "abcdefgh\n", 9), 9);
  assert_int_equal(jb_line_read(&r, p[0], &err), 5);
  assert_int_equal(jb_line_read(&r, p[0], &err), -1);
  assert_int_equal(err.code, ENOBUFS); /* full: the line must be looked at first */
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_TOO_LONG);
  close(p[0]);
  close(p[1]);
  jb_line_free(&r);
}

/* A read grows the reader's storage to 64 KiB in all, what it holds included: never to
 * twice that, however high the cap. */
static void a_read_reserves_64_kib_in_all(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
  struct jb_line_reader r;
  jb_line_init(&r, &(struct jb_line_opts){.max_line = 8 * 1024 * 1024, .over = JB_LINE_FAIL});
  jb_error err = {0};
  char *line;
  size_t n;
  assert_int_equal(write(p[1], "x\n", 2), 2);
  assert_int_equal(jb_line_read(&r, p[0], &err), 2);
  assert_int_equal(r.buf.alloc, 65536);
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_OK);
  /* 60,000 bytes of a line held: the next read takes at most the rest of the 64 KiB */
  static char part[60000];
  memset(part, 'a', sizeof part);
  assert_int_equal(jb_line_feed(&r, part, sizeof part), sizeof part);
  static char more[20000];
  memset(more, 'b', sizeof more);
  assert_int_equal(write(p[1], more, sizeof more), (ssize_t)sizeof more);
  assert_int_equal(jb_line_read(&r, p[0], &err), 65536 - 1 - 60000);
  assert_int_equal(r.buf.alloc, 65536);
  /* a line past 64 KiB grows the storage by doubling: at most twice what it holds */
  assert_true(jb_line_read(&r, p[0], &err) > 0);
  assert_true(r.buf.alloc > 65536 && r.buf.alloc <= 2 * 65536);
  close(p[0]);
  close(p[1]);
  jb_line_free(&r);
}

static void take_moves_the_line_out(void **state) {
  (void)state;
  struct jb_line_reader r;
  jb_line_init(&r, &(struct jb_line_opts){.max_line = 64, .over = JB_LINE_FAIL});
  char *line;
  size_t n = 0;
  assert_null(jb_line_take(&r, &n)); /* no line returned */
  assert_int_equal(jb_line_feed(&r, "first\n", 6), 6);
  assert_int_equal(jb_line_feed(&r, "second\nx", 8), 7);
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_OK);
  char *t = jb_line_take(&r, &n); /* a copy: "second\n" follows */
  assert_int_equal(n, 5);
  assert_string_equal(t, "first");
  free(t);
  assert_null(jb_line_take(&r, &n)); /* once */
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_OK);
  char *storage = r.buf.data;
  t = jb_line_take(&r, &n); /* not at the front: copied */
  assert_string_equal(t, "second");
  assert_ptr_not_equal(t, storage);
  free(t);
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_AGAIN);
  assert_int_equal(jb_line_feed(&r, "x", 1), 1);
  assert_int_equal(jb_line_feed(&r, "y\n", 2), 2);
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_OK);
  storage = r.buf.data;
  t = jb_line_take(&r, &n); /* alone at the front: the storage itself */
  assert_ptr_equal(t, storage);
  assert_string_equal(t, "xy");
  assert_int_equal(n, 2);
  free(t);
  assert_null(r.buf.data);
  assert_int_equal(jb_line_feed(&r, "z\n", 2), 2); /* and the reader goes on */
  assert_int_equal(jb_line_next(&r, &line, &n), JB_LINE_OK);
  assert_string_equal(line, "z");
  jb_line_free(&r);
}

static void writer(void **state) {
  (void)state;
  json_t *o = json_pack("{s:i, s:s}", "id", 7, "text", "a\nb");
  size_t n;
  jb_error err = {0};
  char *s = jb_line_encode(o, 0, &n, &err);
  assert_non_null(s);
  assert_string_equal(s, "{\"id\":7,\"text\":\"a\\nb\"}\n");
  assert_int_equal(n, strlen(s));
  free(s);
  s = jb_line_encode(o, n - 1, &n, &err); /* exactly at the limit (the newline not counted) */
  assert_non_null(s);
  free(s);
  assert_null(jb_line_encode(o, n - 2, &n, &err));
  assert_int_equal(err.code, EMSGSIZE);

  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  assert_int_equal(jb_line_write_json(p[1], o, 0, -1, &err), 0);
  char got[64] = {0};
  assert_int_equal(read(p[0], got, sizeof got - 1), 23);
  assert_string_equal(got, "{\"id\":7,\"text\":\"a\\nb\"}\n");
  /* round trip through the reader */
  struct jb_line_reader r;
  jb_line_init(&r, &(struct jb_line_opts){.max_line = 64, .over = JB_LINE_FAIL});
  assert_int_equal(jb_line_feed(&r, got, strlen(got)), strlen(got));
  json_t *back;
  assert_int_equal(jb_line_next_object(&r, 4, &back, &err), JB_LINE_OK);
  assert_true(json_equal(o, back));
  json_decref(back);
  jb_line_free(&r);
  close(p[0]);
  assert_int_equal(jb_line_write_json(p[1], o, 0, -1, &err), -1); /* the reader is gone */
  assert_int_equal(err.code, EPIPE);
  close(p[1]);
  json_decref(o);
}

static void writer_waits_on_a_full_pipe(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
  int sz = fcntl(p[1], F_GETPIPE_SZ);
  assert_true(sz > 0);
  char *fill = calloc(1, (size_t)sz);
  assert_non_null(fill);
  jb_error err = {0};
  assert_int_equal(jb_line_write_all(p[1], fill, (size_t)sz, 0, &err), 0); /* fits */
  assert_int_equal(jb_line_write_all(p[1], "x", 1, 50, &err), -1);
  assert_int_equal(err.code, ETIMEDOUT);
  free(fill);
  close(p[0]);
  close(p[1]);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(lines_whatever_the_chunking),
      cmocka_unit_test(empty_lines),
      cmocka_unit_test(cr_and_nul_are_bytes),
      cmocka_unit_test(last_line_without_newline),
      cmocka_unit_test(cap_exactly_and_one_over_fail),
      cmocka_unit_test(cap_exactly_and_one_over_skip),
      cmocka_unit_test(cap_exactly_and_one_over_skip_whole),
      cmocka_unit_test(a_long_line_is_never_held_whole),
      cmocka_unit_test(json_objects),
      cmocka_unit_test(reads_from_a_pipe),
      cmocka_unit_test(a_read_reserves_64_kib_in_all),
      cmocka_unit_test(take_moves_the_line_out),
      cmocka_unit_test(writer),
      cmocka_unit_test(writer_waits_on_a_full_pipe),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
