/* test_ws_frame.c — the WebSocket codec (server/ws_frame.c) without a socket: the upgrade
 * request and its refusals, the client frame reader (RFC 6455 rules, chunkings, the size limit
 * before buffering), the server frame encoders. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/ws_frame.h"

/* ---------- helpers ---------- */

static const unsigned char KEY[4] = {0x37, 0xfa, 0x21, 0x3d};

/* A client frame: first byte `b0` (FIN, RSV, opcode), masked with KEY when `mask`; the length
 * in its shortest form unless `wide` forces the 16-bit (2) or 64-bit (8) form. */
static size_t cframe_wide(unsigned char *out, unsigned b0, bool mask, const void *payload,
                          size_t len, int wide) {
  size_t n = 0;
  out[n++] = (unsigned char)b0;
  unsigned char m = mask ? 0x80 : 0;
  if (len < 126 && !wide) {
    out[n++] = (unsigned char)(m | len);
  } else if (len < 65536 && wide != 8) {
    out[n++] = m | 126;
    out[n++] = (unsigned char)(len >> 8);
    out[n++] = (unsigned char)len;
  } else {
    out[n++] = m | 127;
    for (int i = 0; i < 8; i++) out[n++] = (unsigned char)((uint64_t)len >> (56 - 8 * i));
  }
  if (mask) {
    memcpy(out + n, KEY, 4);
    n += 4;
  }
  const unsigned char *p = payload;
  for (size_t i = 0; i < len; i++) out[n + i] = mask ? p[i] ^ KEY[i & 3] : p[i];
  return n + len;
}

static size_t cframe(unsigned char *out, unsigned b0, const void *payload, size_t len) {
  return cframe_wide(out, b0, true, payload, len, 0);
}

static size_t text_frame(unsigned char *out, const char *s) {
  return cframe(out, 0x81, s, strlen(s));
}

/* Reads everything in buf (one call per result); stops at the first result that is not MORE
 * and reports how many bytes were used in total. */
static enum jb_ws_read_result read_one(struct jb_ws_reader *r, const unsigned char *buf, size_t n,
                                       size_t *total, struct jb_ws_read *out) {
  size_t used;
  enum jb_ws_read_result res = jb_ws_reader_next(r, buf, n, &used, out);
  assert_true(used <= n);
  if (total) *total = used;
  return res;
}

/* Feeds `buf` one byte per call, collecting the results that are not MORE (up to `max`). */
static size_t read_bytewise(struct jb_ws_reader *r, const unsigned char *buf, size_t n,
                            enum jb_ws_read_result *res, struct jb_ws_read *outs, size_t max) {
  size_t k = 0;
  for (size_t i = 0; i < n && k < max; i++) {
    size_t used;
    enum jb_ws_read_result x = jb_ws_reader_next(r, buf + i, 1, &used, &outs[k]);
    assert_int_equal(used, 1);
    if (x != JB_WS_READ_MORE) res[k++] = x;
    if (x == JB_WS_READ_ERROR) break;
  }
  return k;
}

static void expect_error(const unsigned char *buf, size_t n, size_t max_payload, unsigned code,
                         const char *reason) {
  struct jb_ws_reader r;
  jb_ws_reader_init(&r, max_payload);
  struct jb_ws_read out;
  size_t used;
  enum jb_ws_read_result res;
  do {
    res = jb_ws_reader_next(&r, buf, n, &used, &out);
    if (res == JB_WS_READ_TEXT) free(out.text);
    buf += used;
    n -= used;
  } while (res != JB_WS_READ_ERROR && res != JB_WS_READ_MORE);
  assert_int_equal(res, JB_WS_READ_ERROR);
  assert_int_equal(out.code, code);
  assert_string_equal(out.reason, reason);
  /* once failed, always failed */
  res = jb_ws_reader_next(&r, "x", 1, &used, &out);
  assert_int_equal(res, JB_WS_READ_ERROR);
  assert_int_equal(out.code, code);
  jb_ws_reader_free(&r);
}

/* ---------- the upgrade request ---------- */

#define GOOD_REQ                                                                            \
  "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n" \
  "Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"      \
  "Sec-WebSocket-Version: 13\r\n\r\n"

static enum jb_ws_handshake_result hs_all(const char *req, struct jb_ws_verdict *v) {
  struct jb_ws_handshake hs = {0};
  size_t used;
  enum jb_ws_handshake_result r = jb_ws_handshake_feed(&hs, req, strlen(req), &used, v);
  if (r == JB_WS_HS_MORE) assert_int_equal(used, strlen(req));
  jb_ws_handshake_free(&hs);
  return r;
}

static void hs_refused(const char *req, int status, int eio_code, const char *message) {
  struct jb_ws_verdict v;
  assert_int_equal(hs_all(req, &v), JB_WS_HS_REFUSE);
  assert_int_equal(v.status, status);
  assert_int_equal(v.eio_code, eio_code);
  assert_string_equal(v.message, message);
}

static void handshake_accepts(void **state) {
  struct jb_ws_verdict v;
  assert_int_equal(hs_all(GOOD_REQ, &v), JB_WS_HS_UPGRADE);
  /* RFC 6455 §1.3's example key and answer */
  assert_string_equal(v.accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  assert_string_equal(v.console, "");
  /* the console's sign-in cookie among others; one too long for the field is left out */
  assert_int_equal(
      hs_all("GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: x\r\n"
             "Upgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
             "Cookie: a=1; xjb_console=no; jb_console=jbt_abc; b=2\r\n\r\n",
             &v),
      JB_WS_HS_UPGRADE);
  assert_string_equal(v.console, "jbt_abc");
  char longreq[512];
  snprintf(longreq, sizeof longreq,
           "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: x\r\n"
           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
           "Cookie: jb_console=%0100d\r\n\r\n",
           7);
  assert_int_equal(hs_all(longreq, &v), JB_WS_HS_UPGRADE);
  assert_string_equal(v.console, "");
  /* /socket.io without the slash, LF-only header lines, more query parameters */
  assert_int_equal(
      hs_all("GET /socket.io?t=1&EIO=4&transport=websocket HTTP/1.0\r\nupgrade: WebSocket\n"
             "connection: upgrade\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\n"
             "sec-websocket-version: 13\r\n\r\n",
             &v),
      JB_WS_HS_UPGRADE);

  char resp[256];
  size_t n = jb_ws_handshake_response(resp, sizeof resp, v.accept);
  assert_int_equal(n, strlen(resp));
  assert_string_equal(
      resp,
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n");
}

static void handshake_chunked_and_trailing_frames(void **state) {
  /* the head fed one byte at a time, then a frame in the same chunk as the blank line */
  const char *req = GOOD_REQ;
  size_t hl = strlen(req);
  unsigned char buf[512];
  memcpy(buf, req, hl);
  size_t fl = text_frame(buf + hl, "2");
  struct jb_ws_handshake hs = {0};
  struct jb_ws_verdict v;
  size_t used;
  for (size_t i = 0; i + 1 < hl; i++) {
    assert_int_equal(jb_ws_handshake_feed(&hs, buf + i, 1, &used, &v), JB_WS_HS_MORE);
    assert_int_equal(used, 1);
  }
  assert_int_equal(jb_ws_handshake_feed(&hs, buf + hl - 1, 1 + fl, &used, &v), JB_WS_HS_UPGRADE);
  assert_int_equal(used, 1); /* the frame is not part of the head */
  assert_null(hs.buf);

  /* in two chunks split inside the blank line */
  struct jb_ws_handshake hs2 = {0};
  assert_int_equal(jb_ws_handshake_feed(&hs2, buf, hl - 2, &used, &v), JB_WS_HS_MORE);
  assert_int_equal(jb_ws_handshake_feed(&hs2, buf + hl - 2, 2 + fl, &used, &v), JB_WS_HS_UPGRADE);
  assert_int_equal(used, 2);
  jb_ws_handshake_free(&hs2);
}

static void handshake_refusals(void **state) {
  hs_refused("GET /other/?EIO=4&transport=websocket HTTP/1.1\r\n\r\n", 404, 3,
             "not found: Socket.IO is served at /socket.io/");
  hs_refused("GET /socket.io/x?EIO=4 HTTP/1.1\r\n\r\n", 404, 3,
             "not found: Socket.IO is served at /socket.io/");
  hs_refused("GET /socket.io/\r\n\r\n", 400, 3, "bad request line");
  hs_refused("GET /socket.io/ SPDY/3\r\n\r\n", 400, 3, "bad request line");
  hs_refused("\r\n\r\n", 400, 3, "bad request line");
  hs_refused("GET /socket.io/?EIO=4&transport=polling HTTP/1.1\r\n\r\n", 400, 0,
             "Transport unknown: this server speaks only the websocket transport; "
             "connect with transports: ['websocket']");
  hs_refused("POST /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\n\r\n", 400, 0,
             "Transport unknown: this server speaks only the websocket transport; "
             "connect with transports: ['websocket']");
  hs_refused("GET /socket.io/?EIO=3&transport=websocket HTTP/1.1\r\n\r\n", 400, 5,
             "Unsupported protocol version: EIO=4 only");
  hs_refused("GET /socket.io/?EIO=4&transport=websocket&sid=abc HTTP/1.1\r\n\r\n", 400, 1,
             "Session ID unknown: there is no polling session to upgrade");
  hs_refused("GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
             400, 3, "folded header lines are refused");
  hs_refused("GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nno colon\r\n\r\n", 400, 3,
             "bad header line");
  hs_refused("GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\n: empty name\r\n\r\n", 400, 3,
             "bad header line");
  /* no Upgrade; two keys; Connection without upgrade */
  hs_refused(
      "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
      400, 3, "a WebSocket upgrade request is required");
  hs_refused(
      "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nUpgrade: websocket\r\nConnection: "
      "Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Key: "
      "dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Version: 13\r\n\r\n",
      400, 3, "a WebSocket upgrade request is required");
  hs_refused(
      "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nUpgrade: websocket\r\nConnection: "
      "close\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
      400, 3, "a WebSocket upgrade request is required");
  struct jb_ws_verdict v;
  assert_int_equal(
      hs_all("GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nUpgrade: websocket\r\n"
             "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
             "Sec-WebSocket-Version: 8\r\n\r\n",
             &v),
      JB_WS_HS_REFUSE);
  assert_int_equal(v.status, 426);
  assert_string_equal(v.headers, "Sec-WebSocket-Version: 13\r\n");
  /* a key that is not 16 bytes of base64 */
  hs_refused(
      "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nUpgrade: websocket\r\nConnection: "
      "Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ\r\nSec-WebSocket-Version: 13\r\n\r\n",
      400, 3, "bad Sec-WebSocket-Key");
  hs_refused(
      "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nUpgrade: websocket\r\nConnection: "
      "Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ!=\r\nSec-WebSocket-Version: 13\r\n\r\n",
      400, 3, "bad Sec-WebSocket-Key");
}

static void handshake_nul_and_size(void **state) {
  struct jb_ws_handshake hs = {0};
  struct jb_ws_verdict v;
  size_t used;
  static const char nul[] = "GET /socket.io/?EIO=4 HTTP/1.1\r\nX: a\0b\r\n\r\n";
  assert_int_equal(jb_ws_handshake_feed(&hs, nul, sizeof nul - 1, &used, &v), JB_WS_HS_REFUSE);
  assert_int_equal(v.status, 400);
  assert_string_equal(v.message, "NUL in the request head");

  /* no blank line within the limit: 431 once the limit is reached, not before */
  char *big = malloc(JB_WS_HTTP_HEAD_MAX + 100);
  assert_non_null(big);
  memset(big, 'a', JB_WS_HTTP_HEAD_MAX + 100);
  struct jb_ws_handshake hs2 = {0};
  assert_int_equal(jb_ws_handshake_feed(&hs2, big, JB_WS_HTTP_HEAD_MAX - 1, &used, &v),
                   JB_WS_HS_MORE);
  assert_int_equal(jb_ws_handshake_feed(&hs2, big, 100, &used, &v), JB_WS_HS_REFUSE);
  assert_int_equal(v.status, 431);
  assert_string_equal(v.message, "request head too large");
  assert_null(hs2.buf);
  free(big);
}

static void http_error_text(void **state) {
  struct jb_ws_verdict v = {.status = 426,
                            .headers = "Sec-WebSocket-Version: 13\r\n",
                            .eio_code = 3,
                            .message = "WebSocket version 13 is required"};
  size_t len;
  char *t = jb_ws_http_error(&v, &len);
  assert_non_null(t);
  assert_int_equal(len, strlen(t));
  const char *body = "{\"code\":3,\"message\":\"WebSocket version 13 is required\"}";
  char want[512];
  snprintf(
      want, sizeof want,
      "HTTP/1.1 426 Upgrade Required\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
      "Access-Control-Allow-Origin: *\r\nConnection: close\r\nSec-WebSocket-Version: 13\r\n\r\n%s",
      strlen(body), body);
  assert_string_equal(t, want);
  free(t);
  v = (struct jb_ws_verdict){.status = 499, .eio_code = 0, .message = "x"};
  t = jb_ws_http_error(&v, &len);
  assert_non_null(strstr(t, "HTTP/1.1 499 Error\r\n"));
  free(t);
}

/* ---------- client frames ---------- */

static void reads_text(void **state) {
  struct jb_ws_reader r;
  jb_ws_reader_init(&r, 1000);
  unsigned char buf[256];
  size_t n = text_frame(buf, "hello");
  n += text_frame(buf + n, "world!");
  struct jb_ws_read out;
  size_t used;
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_TEXT);
  assert_int_equal(used, 2 + 4 + 5); /* stops after the first message */
  assert_int_equal(out.len, 5);
  assert_string_equal(out.text, "hello");
  free(out.text);
  size_t used2;
  assert_int_equal(read_one(&r, buf + used, n - used, &used2, &out), JB_WS_READ_TEXT);
  assert_int_equal(used + used2, n);
  assert_string_equal(out.text, "world!");
  free(out.text);
  assert_int_equal(read_one(&r, buf, 0, &used, &out), JB_WS_READ_MORE);
  assert_int_equal(used, 0);
  jb_ws_reader_free(&r);
}

static void reads_empty_and_long_lengths(void **state) {
  struct jb_ws_reader r;
  jb_ws_reader_init(&r, 100000);
  unsigned char *buf = malloc(80000);
  char *payload = malloc(70000);
  assert_non_null(buf);
  assert_non_null(payload);
  struct jb_ws_read out;
  size_t used;
  /* an empty message: complete when its header is */
  size_t n = text_frame(buf, "");
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_TEXT);
  assert_int_equal(used, n);
  assert_int_equal(out.len, 0);
  assert_string_equal(out.text, "");
  free(out.text);
  /* 16-bit and 64-bit lengths, even for short payloads */
  memset(payload, 'x', 70000);
  size_t sizes[] = {125, 126, 65535, 65536, 70000};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    n = cframe(buf, 0x81, payload, sizes[i]);
    assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_TEXT);
    assert_int_equal(used, n);
    assert_int_equal(out.len, sizes[i]);
    assert_memory_equal(out.text, payload, sizes[i]);
    free(out.text);
  }
  n = cframe_wide(buf, 0x81, true, "abc", 3, 8);
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_TEXT);
  assert_string_equal(out.text, "abc");
  free(out.text);
  n = cframe_wide(buf, 0x81, true, "abc", 3, 2);
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_TEXT);
  assert_string_equal(out.text, "abc");
  free(out.text);
  free(buf);
  free(payload);
  jb_ws_reader_free(&r);
}

static void reads_fragments_with_control_between(void **state) {
  struct jb_ws_reader r;
  jb_ws_reader_init(&r, 1000);
  unsigned char buf[256];
  size_t n = cframe(buf, 0x01, "he", 2); /* text, not final */
  n += cframe(buf + n, 0x89, "pp", 2); /* ping in the middle */
  n += cframe(buf + n, 0x00, "l", 1); /* continuation */
  n += cframe(buf + n, 0x8A, "", 0); /* pong */
  n += cframe(buf + n, 0x80, "lo", 2); /* final continuation */
  enum jb_ws_read_result res[8];
  struct jb_ws_read outs[8];
  /* byte by byte */
  size_t k = read_bytewise(&r, buf, n, res, outs, 8);
  assert_int_equal(k, 3);
  assert_int_equal(res[0], JB_WS_READ_PING);
  assert_int_equal(outs[0].payload_len, 2);
  assert_memory_equal(outs[0].payload, "pp", 2);
  assert_int_equal(res[1], JB_WS_READ_PONG);
  assert_int_equal(outs[1].payload_len, 0);
  assert_int_equal(res[2], JB_WS_READ_TEXT);
  assert_string_equal(outs[2].text, "hello");
  free(outs[2].text);
  /* all at once */
  size_t off = 0, used;
  struct jb_ws_read out;
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_PING);
  off += used;
  assert_int_equal(read_one(&r, buf + off, n - off, &used, &out), JB_WS_READ_PONG);
  off += used;
  assert_int_equal(read_one(&r, buf + off, n - off, &used, &out), JB_WS_READ_TEXT);
  off += used;
  assert_int_equal(off, n);
  assert_string_equal(out.text, "hello");
  free(out.text);
  jb_ws_reader_free(&r);
}

static void utf8_across_fragments(void **state) {
  struct jb_ws_reader r;
  jb_ws_reader_init(&r, 1000);
  unsigned char buf[64];
  /* U+20AC (E2 82 AC) split over two frames */
  size_t n = cframe(buf, 0x01, "\xe2\x82", 2);
  n += cframe(buf + n, 0x80, "\xac", 1);
  struct jb_ws_read out;
  size_t used;
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_TEXT);
  assert_string_equal(out.text, "\xe2\x82\xac");
  free(out.text);
  jb_ws_reader_free(&r);
}

static void refuses_bad_text(void **state) {
  unsigned char buf[64];
  size_t n = text_frame(buf, "ok\xff");
  expect_error(buf, n, 100, JB_WS_CLOSE_BAD_DATA, "text is not valid UTF-8");
  n = text_frame(buf, "\xc0\xaf"); /* overlong */
  expect_error(buf, n, 100, JB_WS_CLOSE_BAD_DATA, "text is not valid UTF-8");
  n = text_frame(buf, "\xed\xa0\x80"); /* surrogate */
  expect_error(buf, n, 100, JB_WS_CLOSE_BAD_DATA, "text is not valid UTF-8");
  n = text_frame(buf, "\xf4\x90\x80\x80"); /* over U+10FFFF */
  expect_error(buf, n, 100, JB_WS_CLOSE_BAD_DATA, "text is not valid UTF-8");
  n = text_frame(buf, "ab\xe2\x82"); /* cut at the end of the message */
  expect_error(buf, n, 100, JB_WS_CLOSE_BAD_DATA, "text is not valid UTF-8");
}

static void refuses_unmasked(void **state) {
  unsigned char buf[64];
  size_t n = cframe_wide(buf, 0x81, false, "2", 1, 0);
  struct jb_ws_reader r;
  jb_ws_reader_init(&r, 100);
  struct jb_ws_read out;
  size_t used;
  /* decided on the second byte, before the payload */
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_ERROR);
  assert_int_equal(used, 2);
  assert_int_equal(out.code, JB_WS_CLOSE_PROTOCOL);
  assert_string_equal(out.reason, "client frames must be masked");
  jb_ws_reader_free(&r);
  n = cframe_wide(buf, 0x89, false, "", 0, 0);
  expect_error(buf, n, 100, JB_WS_CLOSE_PROTOCOL, "client frames must be masked");
}

static void refuses_oversize_before_buffering(void **state) {
  unsigned char buf[64];
  /* a header announcing 1000 bytes: refused with nothing of its payload sent */
  size_t n = cframe_wide(buf, 0x81, true, "", 0, 2);
  buf[2] = 1000 >> 8;
  buf[3] = 1000 & 0xff;
  struct jb_ws_reader r;
  jb_ws_reader_init(&r, 999);
  struct jb_ws_read out;
  size_t used;
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_ERROR);
  assert_int_equal(used, n);
  assert_int_equal(out.code, JB_WS_CLOSE_TOO_BIG);
  assert_string_equal(out.reason, "message over maxPayload");
  assert_null(r.msg);
  jb_ws_reader_free(&r);
  /* exactly at the limit is fine */
  char *p = malloc(999);
  assert_non_null(p);
  memset(p, 'a', 999);
  unsigned char *big = malloc(1100);
  assert_non_null(big);
  n = cframe(big, 0x81, p, 999);
  jb_ws_reader_init(&r, 999);
  assert_int_equal(read_one(&r, big, n, &used, &out), JB_WS_READ_TEXT);
  free(out.text);
  jb_ws_reader_free(&r);
  /* a 64-bit length of 2^62: too big (1009); with the top bit set: a protocol error */
  unsigned char h[14] = {0x81, 0xff, 0x40, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
  expect_error(h, sizeof h, 999, JB_WS_CLOSE_TOO_BIG, "message over maxPayload");
  h[2] = 0x80;
  expect_error(h, sizeof h, 999, JB_WS_CLOSE_PROTOCOL, "64-bit length with the top bit set");
  /* fragments that together cross the limit: refused at the header of the one that crosses */
  n = cframe(big, 0x01, p, 600);
  size_t second = n;
  n += cframe(big + n, 0x80, p, 400);
  jb_ws_reader_init(&r, 999);
  assert_int_equal(read_one(&r, big, n, &used, &out), JB_WS_READ_ERROR);
  assert_int_equal(out.code, JB_WS_CLOSE_TOO_BIG);
  assert_int_equal(used, second + 4 + 4); /* its header, nothing of its payload */
  jb_ws_reader_free(&r);
  free(big);
  free(p);
}

static void refuses_bad_opcodes_and_bits(void **state) {
  unsigned char buf[64];
  size_t n = cframe(buf, 0x83, "x", 1);
  expect_error(buf, n, 100, JB_WS_CLOSE_PROTOCOL, "unknown opcode");
  n = cframe(buf, 0x8B, "x", 1);
  expect_error(buf, n, 100, JB_WS_CLOSE_PROTOCOL, "unknown opcode");
  n = cframe(buf, 0x82, "x", 1);
  expect_error(buf, n, 100, JB_WS_CLOSE_UNSUPPORTED, "binary frames are not supported");
  n = cframe(buf, 0xC1, "x", 1); /* RSV1 */
  expect_error(buf, n, 100, JB_WS_CLOSE_PROTOCOL, "reserved bits set");
  n = cframe(buf, 0x91, "x", 1); /* RSV3 */
  expect_error(buf, n, 100, JB_WS_CLOSE_PROTOCOL, "reserved bits set");
}

static void refuses_bad_control_frames(void **state) {
  unsigned char buf[256];
  char p[126];
  memset(p, 'p', sizeof p);
  size_t n = cframe(buf, 0x89, p, 126);
  expect_error(buf, n, 1000, JB_WS_CLOSE_PROTOCOL, "control frame over 125 bytes");
  n = cframe(buf, 0x89, p, 125); /* the limit itself is fine */
  struct jb_ws_reader r;
  jb_ws_reader_init(&r, 1000);
  struct jb_ws_read out;
  size_t used;
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_PING);
  assert_int_equal(out.payload_len, 125);
  jb_ws_reader_free(&r);
  n = cframe(buf, 0x09, "", 0); /* a ping without FIN */
  expect_error(buf, n, 1000, JB_WS_CLOSE_PROTOCOL, "fragmented control frame");
}

static void refuses_bad_fragmentation(void **state) {
  unsigned char buf[8192];
  size_t n = cframe(buf, 0x80, "x", 1);
  expect_error(buf, n, 100, JB_WS_CLOSE_PROTOCOL, "continuation without a message");
  n = cframe(buf, 0x01, "x", 1);
  n += cframe(buf + n, 0x81, "y", 1);
  expect_error(buf, n, 100, JB_WS_CLOSE_PROTOCOL, "new message inside a fragmented one");
  /* JB_WS_MAX_FRAGMENTS frames are a message; one more is refused */
  n = cframe(buf, 0x01, "a", 1);
  for (int i = 1; i < JB_WS_MAX_FRAGMENTS - 1; i++) n += cframe(buf + n, 0x00, "a", 1);
  size_t last = cframe(buf + n, 0x80, "a", 1);
  struct jb_ws_reader r;
  jb_ws_reader_init(&r, 1000);
  struct jb_ws_read out;
  size_t used;
  assert_int_equal(read_one(&r, buf, n + last, &used, &out), JB_WS_READ_TEXT);
  assert_int_equal(out.len, JB_WS_MAX_FRAGMENTS);
  free(out.text);
  jb_ws_reader_free(&r);
  n += cframe(buf + n, 0x00, "a", 1);
  n += cframe(buf + n, 0x80, "a", 1);
  expect_error(buf, n, 1000, JB_WS_CLOSE_POLICY, "too many fragments");
}

static void close_frames(void **state) {
  struct jb_ws_reader r;
  struct jb_ws_read out;
  size_t used;
  unsigned char buf[256];
  /* empty */
  size_t n = cframe(buf, 0x88, "", 0);
  jb_ws_reader_init(&r, 100);
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_CLOSE);
  assert_int_equal(out.code, 0);
  jb_ws_reader_free(&r);
  /* codes allowed on the wire, with a UTF-8 reason */
  unsigned ok[] = {1000, 1001, 1003, 1007, 1011, 3000, 4999};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    unsigned char p[8] = {(unsigned char)(ok[i] >> 8), (unsigned char)ok[i], 'b', 0xc3, 0xa9};
    n = cframe(buf, 0x88, p, 5);
    jb_ws_reader_init(&r, 100);
    assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_CLOSE);
    assert_int_equal(out.code, ok[i]);
    jb_ws_reader_free(&r);
  }
  unsigned bad[] = {0, 999, 1004, 1005, 1006, 1012, 1015, 2999, 5000};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    unsigned char p[2] = {(unsigned char)(bad[i] >> 8), (unsigned char)bad[i]};
    n = cframe(buf, 0x88, p, 2);
    expect_error(buf, n, 100, JB_WS_CLOSE_PROTOCOL, "bad close code");
  }
  n = cframe(buf, 0x88, "\x03", 1);
  expect_error(buf, n, 100, JB_WS_CLOSE_PROTOCOL, "close frame of one byte");
  n = cframe(buf, 0x88, "\x03\xe8\xff", 3);
  expect_error(buf, n, 100, JB_WS_CLOSE_BAD_DATA, "close reason is not UTF-8");
  n = cframe(buf, 0x88, "\x03\xe8\xe2\x82", 4); /* cut short */
  expect_error(buf, n, 100, JB_WS_CLOSE_BAD_DATA, "close reason is not UTF-8");
  /* a close in the middle of a fragmented message whose text is cut at a character: the
   * reason is checked on its own */
  n = cframe(buf, 0x01, "\xe2", 1);
  n += cframe(buf + n, 0x88, "\x03\xe8ok", 4);
  jb_ws_reader_init(&r, 100);
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_CLOSE);
  assert_int_equal(out.code, 1000);
  jb_ws_reader_free(&r);
}

static void every_chunking_gives_the_same(void **state) {
  /* two messages and a ping, split at every point into two chunks */
  unsigned char buf[256];
  size_t n = cframe(buf, 0x01, "4", 1);
  n += cframe(buf + n, 0x89, "x", 1);
  n += cframe(buf + n, 0x80, "2[\"a\"]", 6);
  n += cframe_wide(buf + n, 0x81, true, "3", 1, 8);
  for (size_t cut = 0; cut <= n; cut++) {
    struct jb_ws_reader r;
    jb_ws_reader_init(&r, 100);
    const char *texts[2] = {0};
    int pings = 0, nt = 0;
    size_t parts[2][2] = {{0, cut}, {cut, n - cut}};
    for (int pi = 0; pi < 2; pi++) {
      const unsigned char *p = buf + parts[pi][0];
      size_t left = parts[pi][1];
      for (;;) {
        struct jb_ws_read out;
        size_t used;
        enum jb_ws_read_result res = jb_ws_reader_next(&r, p, left, &used, &out);
        p += used;
        left -= used;
        if (res == JB_WS_READ_MORE) break;
        if (res == JB_WS_READ_PING)
          pings++;
        else if (res == JB_WS_READ_TEXT) {
          assert_true(nt < 2);
          texts[nt++] = out.text;
        } else
          fail_msg("unexpected result %d at cut %zu", res, cut);
      }
      assert_int_equal(left, 0);
    }
    assert_int_equal(pings, 1);
    assert_int_equal(nt, 2);
    assert_string_equal(texts[0], "42[\"a\"]");
    assert_string_equal(texts[1], "3");
    free((char *)texts[0]);
    free((char *)texts[1]);
    jb_ws_reader_free(&r);
  }
}

static void free_mid_message(void **state) {
  /* a reader released in the middle of a message frees it (ASan would report the leak) */
  struct jb_ws_reader r;
  jb_ws_reader_init(&r, 100);
  unsigned char buf[64];
  size_t n = cframe(buf, 0x01, "abc", 3);
  struct jb_ws_read out;
  size_t used;
  assert_int_equal(read_one(&r, buf, n, &used, &out), JB_WS_READ_MORE);
  assert_non_null(r.msg);
  jb_ws_reader_free(&r);
  jb_ws_reader_free(&r);
}

/* ---------- server frames ---------- */

static void encodes_server_frames(void **state) {
  unsigned char h[JB_WS_HEAD_MAX];
  assert_int_equal(jb_ws_frame_head(h, JB_WS_OP_TEXT, 0), 2);
  assert_memory_equal(h, "\x81\x00", 2);
  assert_int_equal(jb_ws_frame_head(h, JB_WS_OP_TEXT, 125), 2);
  assert_memory_equal(h, "\x81\x7d", 2);
  assert_int_equal(jb_ws_frame_head(h, JB_WS_OP_PONG, 126), 4);
  assert_memory_equal(h, "\x8a\x7e\x00\x7e", 4);
  assert_int_equal(jb_ws_frame_head(h, JB_WS_OP_TEXT, 65535), 4);
  assert_memory_equal(h, "\x81\x7e\xff\xff", 4);
  assert_int_equal(jb_ws_frame_head(h, JB_WS_OP_CLOSE, 65536), 10);
  assert_memory_equal(h, "\x88\x7f\x00\x00\x00\x00\x00\x01\x00\x00", 10);

  unsigned char p[JB_WS_CONTROL_MAX];
  assert_int_equal(jb_ws_close_payload(p, 0, "ignored"), 0);
  assert_int_equal(jb_ws_close_payload(p, 1000, NULL), 2);
  assert_memory_equal(p, "\x03\xe8", 2);
  assert_int_equal(jb_ws_close_payload(p, 1008, "ping timeout"), 14);
  assert_memory_equal(p, "\x03\xf0ping timeout", 14);
  char longr[200];
  memset(longr, 'r', sizeof longr - 1);
  longr[sizeof longr - 1] = '\0';
  assert_int_equal(jb_ws_close_payload(p, 1008, longr), 122);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(handshake_accepts),
      cmocka_unit_test(handshake_chunked_and_trailing_frames),
      cmocka_unit_test(handshake_refusals),
      cmocka_unit_test(handshake_nul_and_size),
      cmocka_unit_test(http_error_text),
      cmocka_unit_test(reads_text),
      cmocka_unit_test(reads_empty_and_long_lengths),
      cmocka_unit_test(reads_fragments_with_control_between),
      cmocka_unit_test(utf8_across_fragments),
      cmocka_unit_test(refuses_bad_text),
      cmocka_unit_test(refuses_unmasked),
      cmocka_unit_test(refuses_oversize_before_buffering),
      cmocka_unit_test(refuses_bad_opcodes_and_bits),
      cmocka_unit_test(refuses_bad_control_frames),
      cmocka_unit_test(refuses_bad_fragmentation),
      cmocka_unit_test(close_frames),
      cmocka_unit_test(every_chunking_gives_the_same),
      cmocka_unit_test(free_mid_message),
      cmocka_unit_test(encodes_server_frames),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
