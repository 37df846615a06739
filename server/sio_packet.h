/* sio_packet.h — the Engine.IO / Socket.IO packet codec of the Socket.IO endpoint, pure: one
 * WebSocket text message in, one decoded packet (or the refusal it earns) out; and the
 * encoders of the packets the server sends. Engine.IO v4 over the websocket transport
 * (https://socket.io/docs/v4/engine-io-protocol/: one packet per message, a type character
 * then its data) carrying Socket.IO v5 packets on the main namespace
 * (https://socket.io/docs/v4/socket-io-protocol/: `<type>[<namespace>,][<ack id>][<JSON>]`).
 * Binary attachments are not spoken: this endpoint carries text only.
 *
 * Not the client side: cli/sio_client.h decodes what a Socket.IO server sends. */
#ifndef JB_SIO_PACKET_H
#define JB_SIO_PACKET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define JB_SIO_MAX_NSP 64 /* namespace bytes (echoed in a CONNECT_ERROR) */
#define JB_SIO_MAX_EVENT_NAME 64 /* event name bytes */
#define JB_SIO_JSON_DEPTH 32 /* nesting of a packet's JSON data */
#define JB_SIO_ACK_ID_MAX 9007199254740991LL /* 2^53 - 1: the largest id a JS client can hold */
#define JB_SIO_HEAD_MAX 96 /* bytes of a packet head from jb_sio_head, NUL included */

/* Engine.IO v4 packet types: the first character of each message. */
enum jb_eio_type {
  JB_EIO_OPEN = '0',
  JB_EIO_CLOSE = '1',
  JB_EIO_PING = '2',
  JB_EIO_PONG = '3',
  JB_EIO_MESSAGE = '4',
  JB_EIO_UPGRADE = '5',
  JB_EIO_NOOP = '6',
};

/* Engine.IO packets the server sends that have no data. */
#define JB_EIO_TEXT_CLOSE "1"
#define JB_EIO_TEXT_PING "2"
#define JB_EIO_TEXT_PONG "3"
#define JB_EIO_TEXT_PROBE_PONG "3probe"

/* The Socket.IO DISCONNECT of the main namespace, as the server sends it. */
#define JB_SIO_TEXT_DISCONNECT "41"

/* Socket.IO v5 packet types: the character after the Engine.IO MESSAGE type. */
enum jb_sio_type {
  JB_SIO_CONNECT = 0,
  JB_SIO_DISCONNECT = 1,
  JB_SIO_EVENT = 2,
  JB_SIO_ACK = 3,
  JB_SIO_CONNECT_ERROR = 4,
  JB_SIO_BINARY_EVENT = 5,
  JB_SIO_BINARY_ACK = 6,
};

/* Where a connection is with its Socket.IO CONNECT (what a client may send depends on it). */
enum jb_sio_phase {
  JB_SIO_PHASE_OPEN, /* Engine.IO is open; no CONNECT yet */
  JB_SIO_PHASE_CONNECTING, /* CONNECT sent, its answer pending */
  JB_SIO_PHASE_CONNECTED, /* CONNECT accepted */
};

/* What to do with a message. */
enum jb_sio_verdict {
  JB_SIO_RX_OK, /* act on the packet */
  JB_SIO_RX_CLOSE, /* close the WebSocket with close_code and reason: the client closed
                              (Engine.IO close, Socket.IO DISCONNECT) or broke a rule */
  JB_SIO_RX_CONNECT_ERROR, /* answer a CONNECT_ERROR with `reason` on `nsp`; the connection stays */
};

/* One message from a client, decoded. */
struct jb_sio_rx {
  char eio; /* Engine.IO type (enum jb_eio_type) */
  bool probe; /* PING: it was "2probe" (answer "3probe") */
  bool pong_data; /* PONG: data followed the type (not a heartbeat answer) */
  int sio; /* MESSAGE: Socket.IO type (enum jb_sio_type); else -1 */
  char nsp[JB_SIO_MAX_NSP + 1]; /* MESSAGE: the namespace, "/" when none was given */
  long long ack; /* EVENT, ACK: the ack id; -1 when none */
  char name[JB_SIO_MAX_EVENT_NAME + 1]; /* EVENT: the event name */
  json_t *data; /* OK: CONNECT's auth object (NULL when none was sent), EVENT's arguments
                           (an array, the name removed); new reference, else NULL */
  unsigned close_code; /* CLOSE: the WebSocket close code (RFC 6455 §7.4.1) */
  const char *reason; /* CLOSE: why, for the close frame and the log; CONNECT_ERROR: the
                           message for the client. Static text. */
};

/* Decodes the WebSocket text message `text` (`n` bytes, valid UTF-8) of a connection in
 * `phase`. Refusals, in the order they are decided (close 1008 unless said otherwise): a NUL
 * byte; an empty message; an Engine.IO type other than close, ping, pong, message, noop; a
 * ping with data other than "probe"; a Socket.IO type other than 0-6; BINARY_EVENT or
 * BINARY_ACK (1003); CONNECT_ERROR (a server packet); any packet but CONNECT before the
 * CONNECT was accepted; a namespace over JB_SIO_MAX_NSP bytes or with bytes outside
 * 0x21-0x7e, '"' or '\\'; an ack id over 16 digits or JB_SIO_ACK_ID_MAX; a namespace other
 * than "/" for any packet but CONNECT; a second CONNECT; an EVENT whose data is not a JSON
 * array (at most JB_SIO_JSON_DEPTH deep, no duplicate keys) starting with a name of 1 to
 * JB_SIO_MAX_EVENT_NAME bytes without NUL. A CONNECT on another namespace, or whose auth data
 * is not such a JSON object, earns a CONNECT_ERROR. Engine.IO close and Socket.IO DISCONNECT
 * are CLOSE 1000. An ACK is decoded (the ack id only) and its data ignored: the server asks
 * for none. Returns the verdict with *out filled; release out->data (jb_sio_rx_clear). */
enum jb_sio_verdict jb_sio_parse(const char *text, size_t n, enum jb_sio_phase phase,
                                 struct jb_sio_rx *out);

/* Releases what a decoded packet holds (safe to call twice). */
void jb_sio_rx_clear(struct jb_sio_rx *rx);

/* Writes the head of a Socket.IO packet inside an Engine.IO message — "4", the type, the
 * namespace and ',' unless `nsp` is NULL or "/", the ack id unless `ack` < 0 — to `out`,
 * NUL-terminated (JB_SIO_HEAD_MAX bytes hold any namespace of JB_SIO_MAX_NSP bytes). The
 * packet is the head followed by its JSON data, if any. Returns the head's length. */
size_t jb_sio_head(char out[JB_SIO_HEAD_MAX], enum jb_sio_type type, const char *nsp,
                   long long ack);

/* The data of an EVENT: the JSON array [event, payload] (just [event] when `payload` is
 * NULL), compact. `payload` is stolen. Returns a new string (free()), NULL when out of memory. */
char *jb_sio_event_data(const char *event, json_t *payload);

/* The data of an ACK: `reply` (borrowed) as compact JSON when it is an array, else "[]".
 * Returns a new string (free()), NULL when out of memory. */
char *jb_sio_ack_data(const json_t *reply);

/* The data of a CONNECT_ERROR: {"message": message}, compact. Returns a new string (free()),
 * NULL when out of memory. */
char *jb_sio_error_data(const char *message);

/* The whole Socket.IO CONNECT answer on the main namespace, 40{"sid":sid}, in `out` (`cap`
 * bytes, NUL-terminated; 48 hold a sid of 23 characters). Returns its length. */
size_t jb_sio_connect_ok(char *out, size_t cap, const char *sid);

/* The Engine.IO open packet of the websocket transport (no upgrades): 0{"sid", "upgrades":[],
 * "pingInterval" and "pingTimeout" in ms, "maxPayload" in bytes}, in `out` (`cap` bytes,
 * NUL-terminated; 256 are enough for a sid of 23 URL-safe characters). Returns its length. */
size_t jb_eio_open(char *out, size_t cap, const char *sid, long ping_interval_ms,
                   long ping_timeout_ms, size_t max_payload);

#endif
