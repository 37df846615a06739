/* fuzz_ws_frame.c — libFuzzer harness for the WebSocket codec (server/ws_frame.c) and, on every
 * text message it yields, the Engine.IO/Socket.IO decoder (server/sio_packet.c). Input: one
 * byte of settings (bit 0: the bytes start with the upgrade request; bits 1-2: the message size
 * limit), one byte seeding the chunking, then the bytes a client sends. The bytes are read
 * twice, whole and cut into pseudo-random chunks: both readings must give the same results.
 * Any crash, leak, sanitizer report or broken promise of the codecs' contracts is a bug. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/sio_packet.h"
#include "server/ws_frame.h"

static const size_t LIMITS[4] = {0, 16, 200, 8192};

/* What a reading gave: a running hash of every result, their count, and the upgrade. */
struct trace {
  uint64_t h;
  size_t n;
  int hs; /* the handshake's result, -1: none */
  int status; /* its HTTP status on REFUSE */
};

static void mix(struct trace *t, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) t->h = (t->h ^ b[i]) * 1099511628211ull;
}

/* A plain UTF-8 check written apart from the codec's (RFC 3629). */
static bool utf8_ok(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t k;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      k = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      k = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      k = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + k >= n) return false;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + j] & 0x3F);
    }
    if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000)) return false;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += k + 1;
  }
  return true;
}

/* The packet decoder's promises on one text message, in every phase. */
static void check_packet(const char *text, size_t len) {
  for (int ph = JB_SIO_PHASE_OPEN; ph <= JB_SIO_PHASE_CONNECTED; ph++) {
    struct jb_sio_rx rx;
    enum jb_sio_verdict v = jb_sio_parse(text, len, (enum jb_sio_phase)ph, &rx);
    if (v == JB_SIO_RX_CLOSE) {
      if (!rx.reason || rx.data) abort();
      if (rx.close_code != JB_WS_CLOSE_NORMAL && rx.close_code != JB_WS_CLOSE_POLICY &&
          rx.close_code != JB_WS_CLOSE_UNSUPPORTED)
        abort();
    } else if (v == JB_SIO_RX_CONNECT_ERROR) {
      if (rx.sio != JB_SIO_CONNECT || !rx.reason || rx.data || ph != JB_SIO_PHASE_OPEN) abort();
    } else if (rx.eio == JB_EIO_MESSAGE) {
      if (rx.sio < JB_SIO_CONNECT || rx.sio > JB_SIO_ACK || rx.sio == JB_SIO_DISCONNECT) abort();
      if (rx.sio == JB_SIO_CONNECT &&
          (ph != JB_SIO_PHASE_OPEN || (rx.data && !json_is_object(rx.data))))
        abort();
      if (rx.sio != JB_SIO_CONNECT && (ph != JB_SIO_PHASE_CONNECTED || strcmp(rx.nsp, "/") != 0))
        abort();
      if (rx.sio == JB_SIO_EVENT && (!json_is_array(rx.data) || !rx.name[0])) abort();
      if (rx.ack > JB_SIO_ACK_ID_MAX || rx.ack < -1) abort();
    } else if (rx.eio != JB_EIO_PING && rx.eio != JB_EIO_PONG && rx.eio != JB_EIO_NOOP) {
      abort();
    }
    jb_sio_rx_clear(&rx);
  }
}

/* Reads `n` bytes with `r` (a call per result), adding each result to `t`; returns false
 * after an error. */
static bool read_frames(struct jb_ws_reader *r, size_t max, const unsigned char *p, size_t n,
                        struct trace *t, bool packets) {
  for (;;) {
    struct jb_ws_read out;
    size_t used;
    enum jb_ws_read_result res = jb_ws_reader_next(r, p, n, &used, &out);
    if (used > n) abort();
    if (res == JB_WS_READ_MORE && used != n) abort();
    p += used;
    n -= used;
    if (res == JB_WS_READ_MORE) return true;
    unsigned char tag = (unsigned char)res;
    mix(t, &tag, 1);
    t->n++;
    switch (res) {
      case JB_WS_READ_TEXT:
        if (out.len > max || out.text[out.len] != '\0' ||
            !utf8_ok((unsigned char *)out.text, out.len))
          abort();
        mix(t, out.text, out.len);
        if (packets) check_packet(out.text, out.len);
        free(out.text);
        break;
      case JB_WS_READ_PING:
      case JB_WS_READ_PONG:
        if (out.payload_len > JB_WS_CONTROL_MAX) abort();
        mix(t, out.payload, out.payload_len);
        break;
      case JB_WS_READ_CLOSE:
        if (out.code &&
            !((out.code >= 1000 && out.code <= 1003) || (out.code >= 1007 && out.code <= 1011) ||
              (out.code >= 3000 && out.code <= 4999)))
          abort();
        mix(t, &out.code, sizeof out.code);
        break;
      case JB_WS_READ_ERROR: {
        if (!out.reason || out.code < 1002 || out.code > 1009) abort();
        mix(t, &out.code, sizeof out.code);
        mix(t, out.reason, strlen(out.reason));
        size_t u2;
        struct jb_ws_read again;
        if (jb_ws_reader_next(r, p, n, &u2, &again) != JB_WS_READ_ERROR || again.code != out.code)
          abort();
        return false;
      }
      default:
        abort();
    }
  }
}

/* One reading of the input, cut into chunks from `seed` (0: whole). */
static void reading(const unsigned char *p, size_t n, bool handshake, size_t max, unsigned seed,
                    struct trace *t) {
  memset(t, 0, sizeof *t);
  t->h = 14695981039346656037ull;
  t->hs = -1;
  struct jb_ws_handshake hs = {0};
  struct jb_ws_reader r;
  jb_ws_reader_init(&r, max);
  bool in_head = handshake, alive = true;
  uint32_t x = seed * 2654435761u + 1;
  while (n && alive) {
    size_t c = n;
    if (seed) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      c = (x & 3) == 0 ? 1 + (x >> 8) % 300 : 1 + (x >> 8) % 7;
      if (c > n) c = n;
    }
    const unsigned char *chunk = p;
    size_t cn = c;
    p += c;
    n -= c;
    if (in_head) {
      struct jb_ws_verdict v;
      size_t used;
      enum jb_ws_handshake_result res = jb_ws_handshake_feed(&hs, chunk, cn, &used, &v);
      if (used > cn) abort();
      if (res == JB_WS_HS_MORE) {
        if (used != cn) abort();
        continue;
      }
      in_head = false;
      t->hs = res;
      if (hs.buf) abort();
      if (res == JB_WS_HS_REFUSE) {
        t->status = v.status;
        if (!v.message || (v.status != 400 && v.status != 404 && v.status != 426 &&
                           v.status != 431 && v.status != 503))
          abort();
        size_t len;
        char *e = jb_ws_http_error(&v, &len);
        if (e && (len != strlen(e) || strncmp(e, "HTTP/1.1 ", 9) != 0)) abort();
        free(e);
        break;
      }
      if (res != JB_WS_HS_UPGRADE || strlen(v.accept) != 28) abort();
      chunk += used;
      cn -= used;
    }
    alive = read_frames(&r, max, chunk, cn, t, seed == 0);
  }
  jb_ws_handshake_free(&hs);
  jb_ws_reader_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  bool handshake = data[0] & 1;
  size_t max = LIMITS[(data[0] >> 1) & 3];
  unsigned seed = data[1] + 1u;
  struct trace whole, cut;
  reading(data + 2, size - 2, handshake, max, 0, &whole);
  reading(data + 2, size - 2, handshake, max, seed, &cut);
  /* a head not complete at the end is read whole but may be cut the same: compare all */
  if (whole.h != cut.h || whole.n != cut.n || whole.hs != cut.hs || whole.status != cut.status)
    abort();
  return 0;
}
