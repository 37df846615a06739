/* sio_client.h — a Socket.IO v5 client over Engine.IO v4 on the websocket transport only,
 * the client side of what server/ws.c serves (api/events.md). libwebsockets' client carries
 * the WebSocket (RFC 6455) handshake and frames; this file owns the Engine.IO packets (open,
 * ping/pong, message, close), the Socket.IO packets of the main namespace (CONNECT with auth
 * {token}, CONNECT_ERROR, EVENT with and without an ack id, ACK, DISCONNECT), message size
 * limits and strict JSON.
 *
 * Threads: jb_sio_run runs the libwebsockets service loop on the calling thread, and every
 * handler is called there. jb_sio_emit and jb_sio_stop may be called from any thread: they
 * serialise on the caller's thread, append to a locked queue and wake the loop with
 * lws_cancel_service(); the queue is drained in LWS_CALLBACK_EVENT_WAIT_CANCELLED, and only
 * once the Socket.IO CONNECT has been accepted (messages emitted earlier wait for it). */
#ifndef JB_SIO_CLIENT_H
#define JB_SIO_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/err.h"

struct jb_sio;

struct jb_sio_handlers {
  void *ctx;
  /* The server accepted CONNECT; `sid` is the Socket.IO session id. Optional. */
  void (*connected)(void *ctx, struct jb_sio *s, const char *sid);
  /* An EVENT `name` with `args` (borrowed array without the name). `ack_id` is the id the
   * server wants acknowledged, or 0 (this client never acknowledges: jailboxd sends none). */
  void (*event)(void *ctx, struct jb_sio *s, const char *name, json_t *args, uint64_t ack_id);
  /* The ACK of the emit that got `id` (borrowed array of its arguments). */
  void (*ack)(void *ctx, struct jb_sio *s, uint64_t id, json_t *args);
  /* The connection ended: `refused` when the server answered CONNECT_ERROR (`why` is its
   * message), else `why` says what happened (closed by the server, network, protocol). Called
   * once; jb_sio_run returns after it. */
  void (*closed)(void *ctx, struct jb_sio *s, bool refused, const char *why);
  /* Optional. A working connection broke (network, missed pings, the server going away with
   * close 1001) and the client will connect again, with backoff, as allowed by
   * `reconnect_max`. ACKs of what was sent before will never come. Messages emitted but not
   * yet sent stay queued for the next connection unless this handler calls
   * jb_sio_discard_queued. `connected` is called again once the new CONNECT is accepted. */
  void (*lost)(void *ctx, struct jb_sio *s, const char *why);
};

struct jb_sio_settings {
  const char *base_url; /* "ws://host:port" (or wss://, or with a path prefix) */
  const char *token; /* sent as the CONNECT auth {token} */
  size_t max_message; /* largest message accepted from the server, bytes; larger: close
                            1009 (the server's maxPayload bounds only what it accepts) */
  long connect_timeout_ms; /* the WebSocket upgrade and the Socket.IO CONNECT within, ms */
  int reconnect_max; /* attempts to reconnect after a working connection broke, with
                              backoff 0.25 s doubling to 5 s; a connection that gets as far as
                              CONNECT restores them; 0: never (the first connection's failure
                              and a refusal always end the client) */
};

/* One message from a Socket.IO server, decoded (Engine.IO v4 text packet; for a MESSAGE, the
 * Socket.IO v5 packet it carries on the main namespace). */
struct jb_sio_packet {
  char eio; /* Engine.IO type: '0' open, '1' close, '2' ping, '3' pong, '4' message, '6' noop */
  char sio; /* eio '4': Socket.IO type '0' CONNECT … '3' ACK, '4' CONNECT_ERROR; else 0 */
  uint64_t id; /* EVENT/ACK: the ack id (at most 2^53 - 1), 0 when absent */
  json_t *data; /* new reference, or NULL: the open packet's and CONNECT/CONNECT_ERROR's object
                    (NULL when absent), EVENT's array (a name first), ACK's array */
};

/* Decodes `n` bytes of one WebSocket text message. Strict: JSON nested deeper than 32 or with
 * duplicate keys, other namespaces, binary packets (5, 6 of Socket.IO; 'b' of Engine.IO),
 * an EVENT without a name, an ACK without an id and unknown types are refused. Returns 0
 * with *out filled (release out->data), or -1 (nothing to release). */
int jb_sio_decode(const char *p, size_t n, struct jb_sio_packet *out);

/* Creates the client and starts connecting (nothing runs until jb_sio_run). `set` strings are
 * copied. Returns 0 with *out set, or -1 with `err` (bad URL, out of memory). */
int jb_sio_open(struct jb_sio **out, const struct jb_sio_settings *set,
                const struct jb_sio_handlers *h, jb_error *err);

/* Runs the service loop until the connection has ended (the `closed` handler has been
 * called). Returns 0. */
int jb_sio_run(struct jb_sio *s);

/* Sends EVENT [name, arg] (`arg` stolen; NULL: no argument). With `want_ack`, *ack_id gets
 * the id the ACK will carry (1, 2, …). Thread-safe. Returns 0; -2 when the message is larger
 * than the server's maxPayload (it would close the connection with 1009; known from the
 * Engine.IO open packet on); -1 when the client is closing or out of memory (`arg` released
 * in every case). */
int jb_sio_emit(struct jb_sio *s, const char *name, json_t *arg, bool want_ack, uint64_t *ack_id);

/* Holds (true) or releases (false) what is emitted: held messages stay queued even once
 * CONNECT is accepted, e.g. until the application has checked who it is talking to. A new
 * client is not held. Thread-safe. */
void jb_sio_hold(struct jb_sio *s, bool hold);

/* Drops what was emitted and not yet sent (for a `lost` handler). Thread-safe. */
void jb_sio_discard_queued(struct jb_sio *s);

/* Closes the connection (WebSocket close 1000 after a Socket.IO DISCONNECT) and makes
 * jb_sio_run return. Thread-safe; idempotent. */
void jb_sio_stop(struct jb_sio *s);

/* Frees the client after jb_sio_run returned. NULL is allowed. */
void jb_sio_free(struct jb_sio *s);

#endif
