/* ws_frame.c — the WebSocket wire codec (see ws_frame.h): the opening handshake as the
 * /socket.io/ endpoint accepts it, the client frame reader and the server frame encoders
 * (RFC 6455). Pure: bytes in, results out. */
#define _GNU_SOURCE
#include "server/ws_frame.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------- the opening handshake ---------- */

static enum jb_ws_handshake_result refuse(struct jb_ws_verdict *v, int status, const char *headers,
                                          int eio_code, const char *message) {
  v->status = status;
  v->headers = headers;
  v->eio_code = eio_code;
  v->message = message;
  return JB_WS_HS_REFUSE;
}

/* Whether the comma-separated header value `v` holds `token` (case-insensitive). */
static bool has_token(const char *v, const char *token) {
  size_t tl = strlen(token);
  while (*v) {
    while (*v == ' ' || *v == '\t' || *v == ',') v++;
    const char *s = v;
    while (*v && *v != ',') v++;
    const char *e = v;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t')) e--;
    if ((size_t)(e - s) == tl && strncasecmp(s, token, tl) == 0) return true;
  }
  return false;
}

/* Value of query parameter `key` in `q` (no '?'), copied into out; false when absent. */
static bool query_get(const char *q, const char *key, char *out, size_t outlen) {
  size_t kl = strlen(key);
  while (q && *q) {
    const char *amp = strchr(q, '&');
    size_t len = amp ? (size_t)(amp - q) : strlen(q);
    if (len > kl && strncmp(q, key, kl) == 0 && q[kl] == '=') {
      snprintf(out, outlen, "%.*s", (int)(len - kl - 1), q + kl + 1);
      return true;
    }
    q = amp ? amp + 1 : NULL;
  }
  return false;
}

/* Cuts the next line ("\n" or "\r\n" ended, or the rest) off *cur; NULL at the end. */
static char *next_line(char **cur) {
  char *l = *cur;
  if (!l || !*l) return NULL;
  char *nl = strchr(l, '\n');
  if (nl) {
    *nl = '\0';
    *cur = nl + 1;
  } else {
    *cur = NULL;
  }
  size_t n = strlen(l);
  if (n && l[n - 1] == '\r') l[n - 1] = '\0';
  return l;
}

/* The value of cookie `name` in a Cookie header value `h` ("a=b; c=d", RFC 6265 §4.2.1) into
 * `out` (`len` bytes); left as it is when absent or longer. */
static void cookie_get(const char *h, const char *name, char *out, size_t len) {
  size_t nl = strlen(name);
  while (*h) {
    while (*h == ' ' || *h == ';') h++;
    size_t pl = strcspn(h, ";");
    if (pl > nl && strncmp(h, name, nl) == 0 && h[nl] == '=') {
      size_t vl = pl - nl - 1;
      while (vl && h[nl + vl] == ' ') vl--;
      if (vl < len) {
        memcpy(out, h + nl + 1, vl);
        out[vl] = '\0';
      }
      return;
    }
    h += pl;
  }
}

/* Sec-WebSocket-Accept of `key` (RFC 6455 §4.2.2): base64(SHA-1(key ‖ the GUID)). */
static bool accept_of(const char *key, char out[29]) {
  char src[128];
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned dl = 0;
  int sl = snprintf(src, sizeof src, "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
  if (!EVP_Digest(src, (size_t)sl, digest, &dl, EVP_sha1(), NULL) || dl != 20) return false;
  sodium_bin2base64(out, 29, digest, 20, sodium_base64_VARIANT_ORIGINAL);
  return true;
}

/* Checks the complete request head `h` (`hl` bytes up to and including the blank line; cut
 * in place). */
static enum jb_ws_handshake_result check_request(char *h, size_t hl, struct jb_ws_verdict *v) {
  h[hl - 2] = '\0'; /* cut the final CRLF: lines end in "\r\n" */
  char *save = h;
  char *line = next_line(&save);
  if (!line) return refuse(v, 400, NULL, 3, "bad request line");
  char *sp1 = strchr(line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
  if (!sp1 || !sp2 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0)
    return refuse(v, 400, NULL, 3, "bad request line");
  *sp1 = *sp2 = '\0';
  const char *method = line, *target = sp1 + 1;
  const char *q = strchr(target, '?');
  size_t pl = q ? (size_t)(q - target) : strlen(target);
  if (!((pl == 11 && strncmp(target, "/socket.io/", 11) == 0) ||
        (pl == 10 && strncmp(target, "/socket.io", 10) == 0)))
    return refuse(v, 404, NULL, 3, "not found: Socket.IO is served at /socket.io/");
  const char *upg = NULL, *connection = NULL, *version = NULL, *key = NULL;
  int n_key = 0, n_upg = 0, n_ver = 0, n_host = 0;
  for (char *l; (l = next_line(&save));) {
    if (l[0] == ' ' || l[0] == '\t')
      return refuse(v, 400, NULL, 3, "folded header lines are refused");
    char *colon = strchr(l, ':');
    if (!colon || colon == l) return refuse(v, 400, NULL, 3, "bad header line");
    *colon = '\0';
    char *val = colon + 1;
    while (*val == ' ' || *val == '\t') val++;
    for (size_t e = strlen(val); e && (val[e - 1] == ' ' || val[e - 1] == '\t'); e--)
      val[e - 1] = '\0';
    if (strcasecmp(l, "Upgrade") == 0)
      upg = val, n_upg++;
    else if (strcasecmp(l, "Connection") == 0)
      connection = val;
    else if (strcasecmp(l, "Sec-WebSocket-Version") == 0)
      version = val, n_ver++;
    else if (strcasecmp(l, "Sec-WebSocket-Key") == 0)
      key = val, n_key++;
    else if (strcasecmp(l, "Cookie") == 0)
      cookie_get(val, JB_WS_CONSOLE_COOKIE, v->console, sizeof v->console);
    else if (strcasecmp(l, "Origin") == 0 && strlen(val) < sizeof v->origin)
      snprintf(v->origin, sizeof v->origin, "%s", val);
    else if (strcasecmp(l, "Host") == 0)
      snprintf(v->host, sizeof v->host, "%s",
               n_host++ == 0 && strlen(val) < sizeof v->host ? val : "");
  }
  char eio[8] = "", transport[16] = "", sid[8];
  const char *query = q ? q + 1 : "";
  query_get(query, "EIO", eio, sizeof eio);
  query_get(query, "transport", transport, sizeof transport);
  if (strcmp(transport, "websocket") != 0 || strcmp(method, "GET") != 0)
    return refuse(v, 400, NULL, 0,
                  "Transport unknown: this server speaks only the websocket transport; "
                  "connect with transports: ['websocket']");
  if (strcmp(eio, "4") != 0)
    return refuse(v, 400, NULL, 5, "Unsupported protocol version: EIO=4 only");
  if (query_get(query, "sid", sid, sizeof sid))
    return refuse(v, 400, NULL, 1, "Session ID unknown: there is no polling session to upgrade");
  if (n_upg != 1 || n_key != 1 || n_ver > 1 || !has_token(upg, "websocket") || !connection ||
      !has_token(connection, "upgrade"))
    return refuse(v, 400, NULL, 3, "a WebSocket upgrade request is required");
  if (!version || strcmp(version, "13") != 0)
    return refuse(v, 426, "Sec-WebSocket-Version: 13\r\n", 3, "WebSocket version 13 is required");
  unsigned char raw[20];
  size_t got = 0;
  const char *end = NULL;
  if (strlen(key) != 24 ||
      sodium_base642bin(raw, sizeof raw, key, 24, NULL, &got, &end,
                        sodium_base64_VARIANT_ORIGINAL) != 0 ||
      got != 16)
    return refuse(v, 400, NULL, 3, "bad Sec-WebSocket-Key");
  if (!accept_of(key, v->accept)) return refuse(v, 503, NULL, 3, "handshake failed");
  return JB_WS_HS_UPGRADE;
}

enum jb_ws_handshake_result jb_ws_handshake_feed(struct jb_ws_handshake *hs, const void *p,
                                                 size_t n, size_t *used, struct jb_ws_verdict *v) {
  memset(v, 0, sizeof *v);
  *used = 0;
  if (!hs->buf) {
    hs->buf = malloc(JB_WS_HTTP_HEAD_MAX + 1);
    if (!hs->buf) return JB_WS_HS_NOMEM;
    hs->len = 0;
  }
  size_t room = JB_WS_HTTP_HEAD_MAX - hs->len, take = n < room ? n : room;
  size_t old = hs->len;
  if (take) memcpy(hs->buf + hs->len, p, take);
  hs->len += take;
  hs->buf[hs->len] = '\0';
  size_t from = old >= 3 ? old - 3 : 0;
  char *end = memmem(hs->buf + from, hs->len - from, "\r\n\r\n", 4);
  if (!end) {
    *used = take;
    if (hs->len < JB_WS_HTTP_HEAD_MAX) return JB_WS_HS_MORE;
    jb_ws_handshake_free(hs);
    return refuse(v, 431, NULL, 3, "request head too large");
  }
  size_t hl = (size_t)(end - hs->buf) + 4;
  *used = hl - old;
  enum jb_ws_handshake_result r;
  if (memchr(hs->buf, '\0', hl))
    r = refuse(v, 400, NULL, 3, "NUL in the request head");
  else
    r = check_request(hs->buf, hl, v);
  jb_ws_handshake_free(hs);
  return r;
}

void jb_ws_handshake_free(struct jb_ws_handshake *hs) {
  free(hs->buf);
  hs->buf = NULL;
  hs->len = 0;
}

size_t jb_ws_handshake_response(char *out, size_t cap, const char *accept) {
  int n =
      snprintf(out, cap,
               "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Accept: %s\r\n\r\n",
               accept);
  if (n < 0 || !cap) return 0;
  return (size_t)n < cap ? (size_t)n : cap - 1; /* cut short: what is in out */
}

char *jb_ws_http_error(const struct jb_ws_verdict *v, size_t *len) {
  static const struct {
    int s;
    const char *t;
  } texts[] = {{400, "Bad Request"},
               {404, "Not Found"},
               {426, "Upgrade Required"},
               {429, "Too Many Requests"},
               {431, "Request Header Fields Too Large"},
               {503, "Service Unavailable"}};
  const char *text = "Error";
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
    if (texts[i].s == v->status) text = texts[i].t;
  json_t *o = json_pack("{s:i,s:s}", "code", v->eio_code, "message", v->message);
  char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  char *out = NULL;
  int n = asprintf(&out,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                   "Access-Control-Allow-Origin: *\r\nConnection: close\r\n%s\r\n%s",
                   v->status, text, body ? strlen(body) : 0, v->headers ? v->headers : "",
                   body ? body : "");
  free(body);
  if (n < 0) return NULL;
  *len = (size_t)n;
  return out;
}

/* ---------- client frames ---------- */

/* UTF-8 (RFC 3629: no overlongs, no surrogates, at most U+10FFFF), checked byte by byte
 * across calls: `need` continuation bytes are due, the next in [lo, hi]. */
struct u8state {
  unsigned char need, lo, hi;
};

/* Returns false at the first byte that cannot continue valid UTF-8. */
static bool utf8_feed(struct u8state *s, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char b = p[i];
    if (s->need) {
      if (b < s->lo || b > s->hi) return false;
      s->need--;
      s->lo = 0x80;
      s->hi = 0xBF;
      continue;
    }
    if (b < 0x80) continue;
    s->lo = 0x80;
    s->hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
      s->need = 1;
    else if (b == 0xE0)
      s->need = 2, s->lo = 0xA0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF)
      s->need = 2;
    else if (b == 0xED)
      s->need = 2, s->hi = 0x9F;
    else if (b == 0xF0)
      s->need = 3, s->lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
      s->need = 3;
    else if (b == 0xF4)
      s->need = 3, s->hi = 0x8F;
    else
      return false;
  }
  return true;
}

void jb_ws_reader_init(struct jb_ws_reader *r, size_t max_payload) {
  memset(r, 0, sizeof *r);
  r->max_payload = max_payload;
}

static void msg_reset(struct jb_ws_reader *r) {
  free(r->msg);
  r->msg = NULL;
  r->msg_len = 0;
  r->in_msg = false;
  r->frags = 0;
  r->u8need = 0;
}

void jb_ws_reader_free(struct jb_ws_reader *r) { msg_reset(r); }

static enum jb_ws_read_result fail(struct jb_ws_reader *r, struct jb_ws_read *out, unsigned code,
                                   const char *reason) {
  r->failed = true;
  r->fail_code = code;
  r->fail_reason = reason;
  msg_reset(r);
  out->code = code;
  out->reason = reason;
  return JB_WS_READ_ERROR;
}

/* The 2-byte base header is in: what can be checked before the length. 0, or 1 on error
 * (*out filled). */
static int head_check(struct jb_ws_reader *r, struct jb_ws_read *out) {
  unsigned b0 = r->hdr[0], b1 = r->hdr[1];
  unsigned op = b0 & 0x0f;
  r->fin = b0 & 0x80;
  r->opcode = op;
  if (b0 & 0x70) return fail(r, out, JB_WS_CLOSE_PROTOCOL, "reserved bits set"), 1;
  if (!(b1 & 0x80)) return fail(r, out, JB_WS_CLOSE_PROTOCOL, "client frames must be masked"), 1;
  if (op >= 0x8) {
    if (op > JB_WS_OP_PONG) return fail(r, out, JB_WS_CLOSE_PROTOCOL, "unknown opcode"), 1;
    if (!r->fin) return fail(r, out, JB_WS_CLOSE_PROTOCOL, "fragmented control frame"), 1;
    if ((b1 & 0x7f) > JB_WS_CONTROL_MAX)
      return fail(r, out, JB_WS_CLOSE_PROTOCOL, "control frame over 125 bytes"), 1;
    return 0;
  }
  if (op == JB_WS_OP_BINARY)
    return fail(r, out, JB_WS_CLOSE_UNSUPPORTED, "binary frames are not supported"), 1;
  if (op != JB_WS_OP_CONTINUATION && op != JB_WS_OP_TEXT)
    return fail(r, out, JB_WS_CLOSE_PROTOCOL, "unknown opcode"), 1;
  if (op == JB_WS_OP_CONTINUATION && !r->in_msg)
    return fail(r, out, JB_WS_CLOSE_PROTOCOL, "continuation without a message"), 1;
  if (op == JB_WS_OP_TEXT && r->in_msg)
    return fail(r, out, JB_WS_CLOSE_PROTOCOL, "new message inside a fragmented one"), 1;
  if (++r->frags > JB_WS_MAX_FRAGMENTS)
    return fail(r, out, JB_WS_CLOSE_POLICY, "too many fragments"), 1;
  return 0;
}

/* The full header is in: length and mask. Takes memory only after the size check. 0, or 1
 * on error. */
static int length_check(struct jb_ws_reader *r, struct jb_ws_read *out) {
  unsigned l7 = r->hdr[1] & 0x7f;
  uint64_t len = l7;
  unsigned off = 2;
  if (l7 == 126) {
    len = ((uint64_t)r->hdr[2] << 8) | r->hdr[3];
    off = 4;
  } else if (l7 == 127) {
    if (r->hdr[2] & 0x80)
      return fail(r, out, JB_WS_CLOSE_PROTOCOL, "64-bit length with the top bit set"), 1;
    len = 0;
    for (int i = 0; i < 8; i++) len = (len << 8) | r->hdr[2 + i];
    off = 10;
  }
  memcpy(r->mask, r->hdr + off, 4);
  r->flen = r->left = len;
  if (r->opcode >= 0x8) {
    r->ctl_len = 0;
    return 0;
  }
  if (len > r->max_payload || r->msg_len + len > r->max_payload)
    return fail(r, out, JB_WS_CLOSE_TOO_BIG, "message over maxPayload"), 1;
  if (len) {
    unsigned char *m = realloc(r->msg, r->msg_len + (size_t)len + 1);
    if (!m) return fail(r, out, JB_WS_CLOSE_POLICY, "out of memory"), 1;
    r->msg = m;
  }
  r->in_msg = true;
  return 0;
}

static bool close_code_ok(unsigned code) {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1011) ||
         (code >= 3000 && code <= 4999);
}

/* A control frame is complete. */
static enum jb_ws_read_result control_done(struct jb_ws_reader *r, struct jb_ws_read *out) {
  if (r->opcode == JB_WS_OP_PING || r->opcode == JB_WS_OP_PONG) {
    out->payload = r->ctl;
    out->payload_len = r->ctl_len;
    return r->opcode == JB_WS_OP_PING ? JB_WS_READ_PING : JB_WS_READ_PONG;
  }
  if (r->ctl_len == 1) return fail(r, out, JB_WS_CLOSE_PROTOCOL, "close frame of one byte");
  if (r->ctl_len >= 2) {
    unsigned code = ((unsigned)r->ctl[0] << 8) | r->ctl[1];
    struct u8state s = {0, 0x80, 0xBF};
    bool ok = utf8_feed(&s, r->ctl + 2, r->ctl_len - 2) && s.need == 0;
    if (!close_code_ok(code)) return fail(r, out, JB_WS_CLOSE_PROTOCOL, "bad close code");
    if (!ok) return fail(r, out, JB_WS_CLOSE_BAD_DATA, "close reason is not UTF-8");
    out->code = code;
  }
  return JB_WS_READ_CLOSE;
}

/* The last frame of a text message is complete. */
static enum jb_ws_read_result message_done(struct jb_ws_reader *r, struct jb_ws_read *out) {
  if (r->u8need) return fail(r, out, JB_WS_CLOSE_BAD_DATA, "text is not valid UTF-8");
  char *m = (char *)r->msg;
  size_t n = r->msg_len;
  r->msg = NULL;
  msg_reset(r);
  if (!m) m = strdup("");
  if (!m) return fail(r, out, JB_WS_CLOSE_POLICY, "out of memory");
  m[n] = '\0';
  out->text = m;
  out->len = n;
  return JB_WS_READ_TEXT;
}

enum jb_ws_read_result jb_ws_reader_next(struct jb_ws_reader *r, const void *in, size_t n,
                                         size_t *used, struct jb_ws_read *out) {
  const unsigned char *p = in;
  memset(out, 0, sizeof *out);
  *used = 0;
  if (r->failed) {
    out->code = r->fail_code;
    out->reason = r->fail_reason;
    return JB_WS_READ_ERROR;
  }
  /* a frame whose payload is empty ends as soon as its header does */
  while (n || (r->in_payload && r->left == 0)) {
    if (!r->in_payload) {
      if (r->hhave < 2) {
        r->hdr[r->hhave++] = *p++;
        n--;
        ++*used;
        if (r->hhave == 2) {
          if (head_check(r, out)) return JB_WS_READ_ERROR;
          unsigned l7 = r->hdr[1] & 0x7f;
          r->hneed = 2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0) + 4;
        }
        continue;
      }
      size_t take = r->hneed - r->hhave;
      if (take > n) take = n;
      memcpy(r->hdr + r->hhave, p, take);
      r->hhave += (unsigned)take;
      p += take;
      n -= take;
      *used += take;
      if (r->hhave < r->hneed) return JB_WS_READ_MORE;
      if (length_check(r, out)) return JB_WS_READ_ERROR;
      r->in_payload = true;
      r->hhave = 0;
      continue;
    }
    size_t take = r->left < n ? (size_t)r->left : n;
    size_t done = (size_t)(r->flen - r->left);
    bool control = r->opcode >= 0x8;
    if (take) {
      unsigned char *dst = control ? r->ctl + r->ctl_len : r->msg + r->msg_len;
      for (size_t i = 0; i < take; i++) dst[i] = p[i] ^ r->mask[(done + i) & 3];
      if (!control) {
        struct u8state s = {r->u8need, r->u8lo, r->u8hi};
        bool ok = utf8_feed(&s, dst, take);
        r->u8need = s.need, r->u8lo = s.lo, r->u8hi = s.hi;
        if (!ok) {
          *used += take;
          return fail(r, out, JB_WS_CLOSE_BAD_DATA, "text is not valid UTF-8");
        }
      }
    }
    if (control)
      r->ctl_len += take;
    else
      r->msg_len += take;
    r->left -= take;
    p += take;
    n -= take;
    *used += take;
    if (r->left) return JB_WS_READ_MORE;
    r->in_payload = false;
    if (control) return control_done(r, out);
    if (r->fin) return message_done(r, out);
  }
  return JB_WS_READ_MORE;
}

/* ---------- server frames ---------- */

size_t jb_ws_frame_head(unsigned char out[JB_WS_HEAD_MAX], unsigned opcode, uint64_t len) {
  out[0] = (unsigned char)(0x80 | opcode);
  if (len < 126) {
    out[1] = (unsigned char)len;
    return 2;
  }
  if (len < 65536) {
    out[1] = 126;
    out[2] = (unsigned char)(len >> 8);
    out[3] = (unsigned char)len;
    return 4;
  }
  out[1] = 127;
  for (int i = 0; i < 8; i++) out[2 + i] = (unsigned char)(len >> (56 - 8 * i));
  return 10;
}

size_t jb_ws_close_payload(unsigned char out[JB_WS_CONTROL_MAX], unsigned code,
                           const char *reason) {
  if (!code) return 0;
  size_t rl = reason ? strnlen(reason, 120) : 0;
  out[0] = (unsigned char)(code >> 8);
  out[1] = (unsigned char)code;
  if (rl) memcpy(out + 2, reason, rl);
  return 2 + rl;
}
