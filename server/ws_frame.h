/* ws_frame.h — the WebSocket wire codec of the Socket.IO endpoint (RFC 6455), pure: no socket,
 * no clock, no global state. It owns the opening handshake as this server accepts it (the
 * request head read up to a size limit, checked against RFC 6455 §4.2.1 and the Engine.IO v4
 * query of the /socket.io/ endpoint, the Sec-WebSocket-Accept answer and the HTTP refusals),
 * the reader of client frames (§5: masking, opcodes, control frame limits, fragmentation,
 * close codes §7.4, UTF-8 of text §8.1, the message size limit checked before anything is
 * buffered) and the encoders of server frames. server/ws.c feeds it the bytes libwebsockets
 * reads and acts on what comes out.
 *
 * Reading follows a pull model: the caller hands a chunk of input and gets back how many of
 * its bytes were used and at most one result (a complete message, a control frame, a
 * refusal); it calls again with the rest of the chunk for the next one. Input is never
 * copied whole: header bytes are kept until a header is complete, payload bytes are unmasked
 * straight into the message, whose memory is allocated only once its frame's length has
 * passed the limit. */
#ifndef JB_WS_FRAME_H
#define JB_WS_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* RFC 6455 §7.4.1 close codes this server sends */
#define JB_WS_CLOSE_NORMAL 1000
#define JB_WS_CLOSE_GOING_AWAY 1001
#define JB_WS_CLOSE_PROTOCOL 1002
#define JB_WS_CLOSE_UNSUPPORTED 1003
#define JB_WS_CLOSE_BAD_DATA 1007
#define JB_WS_CLOSE_POLICY 1008
#define JB_WS_CLOSE_TOO_BIG 1009

/* RFC 6455 §5.2 opcodes */
#define JB_WS_OP_CONTINUATION 0x0
#define JB_WS_OP_TEXT 0x1
#define JB_WS_OP_BINARY 0x2
#define JB_WS_OP_CLOSE 0x8
#define JB_WS_OP_PING 0x9
#define JB_WS_OP_PONG 0xA

#define JB_WS_CONTROL_MAX 125 /* payload bytes of a control frame (§5.5) */
#define JB_WS_MAX_FRAGMENTS 128 /* data frames in one message; more: close 1008 */
#define JB_WS_HEAD_MAX 10 /* bytes of a server frame header (unmasked) */
#define JB_WS_HTTP_HEAD_MAX 8192 /* bytes of the upgrade request head; more: HTTP 431 */

/* ---------- the opening handshake (RFC 6455 §4.2; Engine.IO v4 query) ---------- */

/* The upgrade request head read so far. Zero it (or = {0}) before the first feed; release
 * with jb_ws_handshake_free. */
struct jb_ws_handshake {
  char *buf; /* JB_WS_HTTP_HEAD_MAX + 1 bytes, allocated on the first feed */
  size_t len; /* bytes in buf */
};

enum jb_ws_handshake_result {
  JB_WS_HS_MORE, /* the head is not complete: every byte given was taken */
  JB_WS_HS_UPGRADE, /* a valid upgrade request: answer with jb_ws_handshake_response */
  JB_WS_HS_REFUSE, /* answer with the HTTP error in the verdict (jb_ws_http_error), close */
  JB_WS_HS_NOMEM, /* out of memory: drop the connection */
};

#define JB_WS_CONSOLE_COOKIE "jb_console" /* the same name as server/http.h JB_CONSOLE_COOKIE */

/* What jb_ws_handshake_feed decided. The strings are static. */
struct jb_ws_verdict {
  int status; /* REFUSE: HTTP status (400, 404, 426, 431, 503) */
  const char *headers; /* REFUSE: extra header lines ("Name: value\r\n"…) or NULL */
  int eio_code; /* REFUSE: Engine.IO error code of the JSON body (0 transport unknown,
                          1 session id unknown, 3 bad request, 5 unsupported protocol version) */
  const char *message; /* REFUSE: the JSON body's message */
  char accept[29]; /* UPGRADE: the Sec-WebSocket-Accept value (§4.2.2 step 5.4) */
  char console[64]; /* UPGRADE: the value of the request's JB_WS_CONSOLE_COOKIE cookie (a
                     * browser's console sign-in, RFC 6265 §5.4), "" when none or too long */
  char origin[256]; /* UPGRADE: the Origin header (RFC 6454), "" when none or too long */
  char host[256]; /* UPGRADE: the Host header (RFC 9110 §7.2), "" when none, repeated or too
                   * long */
};

/* Feeds `n` bytes of a connection's first input. Once the head (up to and including the blank
 * line) is complete it is checked, in this order: no NUL (400); request line "METHOD target
 * HTTP/1.x" (400); path /socket.io or /socket.io/ (404); no folded header lines, every header
 * line "name: value" (400); query transport=websocket and method GET (400, Engine.IO code 0);
 * EIO=4 (400, code 5); no sid (400, code 1: there is no polling session); exactly one Upgrade
 * holding the token "websocket", a Connection holding "upgrade", one Sec-WebSocket-Key, at
 * most one Sec-WebSocket-Version (400); version 13 (426 with Sec-WebSocket-Version: 13); the
 * key 24 base64 characters of 16 bytes (400). A head not complete within JB_WS_HTTP_HEAD_MAX
 * bytes is refused with 431. *used is set to the bytes of `p` that belong to the head (the
 * rest, on UPGRADE, are the first frames, sent before the client read the answer). After any
 * result but MORE the head buffer is released and `hs` must not be fed again. */
enum jb_ws_handshake_result jb_ws_handshake_feed(struct jb_ws_handshake *hs, const void *p,
                                                 size_t n, size_t *used, struct jb_ws_verdict *v);

/* Releases what `hs` holds (safe to call twice). */
void jb_ws_handshake_free(struct jb_ws_handshake *hs);

/* The "101 Switching Protocols" answer with `accept` (RFC 6455 §4.2.2), NUL-terminated in
 * `out` (`cap` bytes; 256 are enough). Returns its length. */
size_t jb_ws_handshake_response(char *out, size_t cap, const char *accept);

/* An HTTP error answer to the upgrade request: status line, JSON content type, length,
 * Access-Control-Allow-Origin: *, Connection: close, the `headers` of the verdict, and the
 * body {"code":eio_code,"message":message} (Engine.IO v4's error shape). Returns a new string
 * (free()) of *len bytes, or NULL when out of memory. */
char *jb_ws_http_error(const struct jb_ws_verdict *v, size_t *len);

/* ---------- client frames (RFC 6455 §5) ---------- */

enum jb_ws_read_result {
  JB_WS_READ_MORE, /* every byte given was used; nothing is complete yet */
  JB_WS_READ_TEXT, /* a complete text message */
  JB_WS_READ_PING, /* a ping: answer with a pong of the same payload */
  JB_WS_READ_PONG, /* a pong */
  JB_WS_READ_CLOSE, /* a valid close frame: answer it and close */
  JB_WS_READ_ERROR, /* the input breaks a rule: close with out->code and out->reason */
};

/* One result of jb_ws_reader_next. */
struct jb_ws_read {
  char *text; /* TEXT: new (free()), NUL-terminated, valid UTF-8 */
  size_t len; /* TEXT: bytes at text, without the NUL */
  const unsigned char *payload; /* PING/PONG: borrowed until the next call on the reader */
  size_t payload_len; /* PING/PONG: at most JB_WS_CONTROL_MAX */
  unsigned code; /* CLOSE: the peer's code, 0 when its frame had no payload;
                                   ERROR: the code to close with (§7.4.1) */
  const char *reason; /* ERROR: what was wrong, static text (for the close frame
                                   and the log) */
};

/* A client frame reader. Initialise with jb_ws_reader_init, release with jb_ws_reader_free;
 * the fields are its own. */
struct jb_ws_reader {
  size_t max_payload; /* bytes of one message, all its fragments together */
  bool failed; /* a rule was broken: every further call returns that error */
  unsigned fail_code;
  const char *fail_reason;
  /* the frame being read */
  bool in_payload;
  unsigned char hdr[14];
  unsigned hhave, hneed;
  unsigned opcode;
  bool fin;
  unsigned char mask[4];
  uint64_t flen, left; /* payload bytes of the frame, still to read */
  /* the message being assembled */
  bool in_msg;
  unsigned frags;
  unsigned char *msg;
  size_t msg_len;
  unsigned char u8need, u8lo, u8hi; /* UTF-8 check carried across frames */
  unsigned char ctl[JB_WS_CONTROL_MAX];
  size_t ctl_len;
};

/* Prepares `r` to read client frames; a message over `max_payload` bytes is refused (1009)
 * as soon as the header of the frame that would cross it is in. */
void jb_ws_reader_init(struct jb_ws_reader *r, size_t max_payload);

/* Releases the message `r` is assembling (safe to call twice). */
void jb_ws_reader_free(struct jb_ws_reader *r);

/* Reads from the `n` bytes at `in` until one result is complete or the bytes are used up;
 * *used is set to the bytes taken. Call again with the rest for the next result. The rules
 * (RFC 6455 §5), each an ERROR with its close code: reserved bits set (1002); an unmasked
 * frame (1002, §5.1); an opcode other than continuation, text, close, ping, pong (1002), binary
 * (1003: this endpoint speaks text only); a control frame fragmented or over 125 bytes (1002,
 * §5.5); a continuation without a message or a new message inside one (1002, §5.4); more than
 * JB_WS_MAX_FRAGMENTS frames in a message (1008); a 64-bit length with the top bit set (1002);
 * a message over max_payload (1009, decided from the frame header, before any payload is read
 * or memory taken); text that is not UTF-8 (1007, §8.1, decided at the first bad byte and at
 * the end of the message); a close frame of one byte or with a code not allowed on the wire
 * (1002, §7.4), or a reason that is not UTF-8 (1007); out of memory (1008). */
enum jb_ws_read_result jb_ws_reader_next(struct jb_ws_reader *r, const void *in, size_t n,
                                         size_t *used, struct jb_ws_read *out);

/* ---------- server frames ---------- */

/* Writes the header of an unfragmented, unmasked server frame (FIN set) of `opcode` with a
 * payload of `len` bytes (RFC 6455 §5.2) to `out`. Returns its length (2, 4 or 10). */
size_t jb_ws_frame_head(unsigned char out[JB_WS_HEAD_MAX], unsigned opcode, uint64_t len);

/* The payload of a close frame (§5.5.1): `code` in network order, then `reason` cut to 120
 * bytes; code 0: empty. Returns its length (at most 122). */
size_t jb_ws_close_payload(unsigned char out[JB_WS_CONTROL_MAX], unsigned code, const char *reason);

#endif
