/* test_attach_demux.c — the Docker attach stream demultiplexer (sandbox/worker/attach.c):
 * frames whole and cut at every byte, headers cut, empty frames, stdout and stderr
 * interleaved, a payload taken in part, bad headers; and the shim's lines carried across
 * frames into lib/line as the worker reads them (sandbox/worker/shimconn.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/line.h"
#include "sandbox/worker/attach.h"

/* Appends a frame of `stream` with `n` payload bytes to `b`. */
static void frame(struct jb_buf *b, int stream, const char *payload, size_t n) {
  unsigned char h[8] = {(unsigned char)stream,
                        0,
                        0,
                        0,
                        (unsigned char)(n >> 24),
                        (unsigned char)(n >> 16),
                        (unsigned char)(n >> 8),
                        (unsigned char)n};
  assert_int_equal(jb_buf_append(b, h, sizeof h), 0);
  assert_int_equal(jb_buf_append(b, payload, n), 0);
}
#define FRAME(b, s, lit) frame(b, s, lit, sizeof lit - 1)

/* Runs the demux over `in` in chunks of `chunk` bytes, taking at most `take` bytes of each
 * piece; stdout payload goes to out[0], stderr to out[1]. Returns the last result (0, or -1). */
static int demux(const char *in, size_t n, size_t chunk, size_t take, struct jb_buf out[2]) {
  struct jb_attach_demux d;
  jb_attach_demux_init(&d);
  for (size_t i = 0; i < n;) {
    size_t k = n - i < chunk ? n - i : chunk, used;
    struct jb_attach_chunk c;
    int r = jb_attach_demux_next(&d, in + i, k, &used, &c);
    assert_true(used <= k);
    i += used;
    if (r < 0) return -1;
    if (r == 0) {
      assert_int_equal(used, k);
      continue;
    }
    assert_true(c.len > 0 && c.len <= k - used);
    assert_ptr_equal(c.data, (const unsigned char *)in + i);
    size_t t = c.len < take ? c.len : take;
    assert_int_equal(jb_buf_append(&out[c.stream == JB_ATTACH_STDOUT ? 0 : 1], c.data, t), 0);
    jb_attach_demux_consume(&d, t);
    i += t;
  }
  return 0;
}

static void frames_whatever_the_chunking(void **state) {
  (void)state;
  struct jb_buf in;
  jb_buf_init(&in, 4096);
  FRAME(&in, 1, "hello ");
  FRAME(&in, 2, "warn: x\n");
  FRAME(&in, 1, ""); /* empty frames are allowed */
  FRAME(&in, 1, "world\n");
  FRAME(&in, 2, "");
  FRAME(&in, 2, "more");
  for (size_t chunk = 1; chunk <= in.len + 1; chunk++)
    for (size_t take = 1; take <= 8; take++) {
      struct jb_buf out[2];
      jb_buf_init(&out[0], 4096);
      jb_buf_init(&out[1], 4096);
      assert_int_equal(demux(in.data, in.len, chunk, take, out), 0);
      assert_int_equal(out[0].len, 12);
      assert_memory_equal(out[0].data, "hello world\n", 12);
      assert_int_equal(out[1].len, 12);
      assert_memory_equal(out[1].data, "warn: x\nmore", 12);
      jb_buf_free(&out[0]);
      jb_buf_free(&out[1]);
    }
  jb_buf_free(&in);
}

static void a_header_cut_anywhere(void **state) {
  (void)state;
  static const unsigned char h[8] = {1, 0, 0, 0, 0, 0, 0, 3};
  for (size_t cut = 0; cut <= 8; cut++) {
    struct jb_attach_demux d;
    jb_attach_demux_init(&d);
    size_t used;
    struct jb_attach_chunk c;
    assert_int_equal(jb_attach_demux_next(&d, h, cut, &used, &c), 0);
    assert_int_equal(used, cut);
    assert_int_equal(jb_attach_demux_next(&d, h + cut, 8 - cut, &used, &c), 0);
    assert_int_equal(used, 8 - cut);
    assert_int_equal(d.left, 3);
    assert_int_equal(jb_attach_demux_next(&d, "abcd", 4, &used, &c), 1);
    assert_int_equal(used, 0);
    assert_int_equal(c.stream, JB_ATTACH_STDOUT);
    assert_int_equal(c.len, 3); /* the frame's end, not the offer's */
    jb_attach_demux_consume(&d, c.len);
    assert_int_equal(d.left, 0);
  }
}

static void the_largest_frame(void **state) {
  (void)state;
  static const unsigned char h[10] = {2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 'a', 'b'};
  struct jb_attach_demux d;
  jb_attach_demux_init(&d);
  size_t used;
  struct jb_attach_chunk c;
  assert_int_equal(jb_attach_demux_next(&d, h, sizeof h, &used, &c), 1);
  assert_int_equal(used, 8);
  assert_int_equal(c.stream, JB_ATTACH_STDERR);
  assert_int_equal(c.len, 2);
  jb_attach_demux_consume(&d, 2);
  assert_int_equal(d.left, 0xfffffffdu);
}

static void bad_headers(void **state) {
  (void)state;
  static const unsigned char bad[][8] = {
      {0, 0, 0, 0, 0, 0, 0, 1}, /* stdin: never sent to us */
      {3, 0, 0, 0, 0, 0, 0, 1},
      {1, 1, 0, 0, 0, 0, 0, 1},
      {2, 0, 0, 9, 0, 0, 0, 1},
      {'{', '"', 'i', 'd', '"', ':', '1', '}'}, /* a raw line: not a frame */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct jb_attach_demux d;
    jb_attach_demux_init(&d);
    size_t used;
    struct jb_attach_chunk c;
    assert_int_equal(jb_attach_demux_next(&d, bad[i], 8, &used, &c), -1);
    assert_int_equal(jb_attach_demux_next(&d, "\1\0\0\0\0\0\0\0", 8, &used, &c), -1); /* for good */
    assert_int_equal(used, 0);
  }
  /* after good frames: stdout up to the bad header is out */
  struct jb_buf in, out[2];
  jb_buf_init(&in, 256);
  jb_buf_init(&out[0], 256);
  jb_buf_init(&out[1], 256);
  FRAME(&in, 1, "ok");
  assert_int_equal(jb_buf_append(&in, bad[1], 8), 0);
  FRAME(&in, 1, "lost");
  assert_int_equal(demux(in.data, in.len, 3, 100, out), -1);
  assert_int_equal(out[0].len, 2);
  assert_memory_equal(out[0].data, "ok", 2);
  jb_buf_free(&in);
  jb_buf_free(&out[0]);
  jb_buf_free(&out[1]);
}

/* The worker's way (shimconn.c parse_attach): stdout pieces fed to the line reader, which
 * may take a piece in part; the rest is offered again after the lines are pulled. */
static void lines_across_frames(void **state) {
  (void)state;
  struct jb_buf in;
  jb_buf_init(&in, 4096);
  FRAME(&in, 1, "{\"event\":\"re");
  FRAME(&in, 2, "bwrap: note\n");
  FRAME(&in, 1, "ady\"}\n\n{\"id\":1}\n{\"id\"");
  FRAME(&in, 1, ":2}\n0123456789abcdef0123456789abcdef0123456789\n{\"id\":3}\n");
  for (size_t chunk = 1; chunk <= in.len; chunk++) {
    struct jb_attach_demux d;
    jb_attach_demux_init(&d);
    struct jb_line_reader r;
    jb_line_init(
        &r, &(struct jb_line_opts){.max_line = 32, .over = JB_LINE_SKIP_WHOLE, .skip_empty = true});
    struct jb_buf got;
    jb_buf_init(&got, 4096);
    for (size_t i = 0; i < in.len;) {
      size_t k = in.len - i < chunk ? in.len - i : chunk, used;
      struct jb_attach_chunk c;
      int rc = jb_attach_demux_next(&d, in.data + i, k, &used, &c);
      assert_true(rc >= 0);
      i += used;
      if (rc == 0) continue;
      size_t took = c.len;
      if (c.stream == JB_ATTACH_STDOUT) took = jb_line_feed(&r, c.data, c.len);
      jb_attach_demux_consume(&d, took);
      i += took;
      char *line;
      size_t n;
      while ((rc = jb_line_next(&r, &line, &n)) != JB_LINE_AGAIN) {
        if (rc == JB_LINE_OK)
          assert_int_equal(jb_buf_appendf(&got, "[%s]", line), 0);
        else
          assert_int_equal(jb_buf_appendf(&got, "T"), 0);
      }
    }
    assert_string_equal(got.data, "[{\"event\":\"ready\"}][{\"id\":1}][{\"id\":2}]T[{\"id\":3}]");
    jb_buf_free(&got);
    jb_line_free(&r);
  }
  jb_buf_free(&in);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(frames_whatever_the_chunking),
      cmocka_unit_test(a_header_cut_anywhere),
      cmocka_unit_test(the_largest_frame),
      cmocka_unit_test(bad_headers),
      cmocka_unit_test(lines_across_frames),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
