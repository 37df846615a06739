/* ws.h — the Socket.IO endpoint's transport: a libwebsockets listener (raw-socket role) that
 * speaks the WebSocket handshake and framing (RFC 6455), Engine.IO v4 over the websocket
 * transport only, and Socket.IO v5 packets on the main namespace. It owns connections,
 * rooms (one per session), heartbeats, per-connection bounded send queues, the locked
 * queue other threads hand messages through, and the pool of threads (server/pool.h) that
 * run the application's CONNECT and EVENT handlers (which may block on the database, and may
 * wait long after jb_pool_block_begin: another thread then stands in).
 *
 * Threads: libwebsockets runs on one service thread that alone touches connections. Every
 * jb_ws_* function below except start/stop is thread-safe: it serialises on the caller's
 * thread, appends to a locked queue and wakes the service thread with lws_cancel_service();
 * the queue is drained in LWS_CALLBACK_EVENT_WAIT_CANCELLED.
 *
 * Why the framing is ours and not lws's ws role: Debian's libwebsockets 4.1.6 accepts
 * unmasked client frames (RFC 6455 §5.1 says a server MUST close on them; upstream only added
 * the check much later) and offers no API that reveals the mask bit, and it drops
 * oversize control frames without a close frame. So lws carries the bytes (listen, accept,
 * poll, timers, writeable callbacks) and server/ws_frame.c parses frames, closing with the exact
 * RFC 6455 §7.4.1 codes. */
#ifndef JB_WS_H
#define JB_WS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/err.h"

struct jb_ws;

struct jb_ws_settings {
  const char *listen; /* "host:port"; port 0 picks a free port (jb_ws_port) */
  size_t max_payload; /* largest WebSocket message, bytes; larger: close 1009 */
  long ping_interval_ms; /* Engine.IO pingInterval, ms */
  long ping_timeout_ms; /* Engine.IO pingTimeout: pong must arrive within, ms */
  long handshake_timeout_ms; /* upgrade + Socket.IO CONNECT must finish within, ms */
  long max_per_ip; /* open connections from one address; more: HTTP 429 */
  size_t send_queue_bytes; /* queued outgoing bytes per connection; more: close 1008 */
  long workers; /* threads kept free to run the CONNECT/EVENT handlers (server/pool.h) */
};

/* Who is on the other end of a connection, as the handlers see it. */
struct jb_ws_peer {
  uint64_t conn; /* connection id, unique for the process lifetime */
  unsigned role; /* set by the connect handler (0 before) */
  char room[129]; /* session the connection belongs to ("" before) */
  unsigned char cred[32]; /* set by the connect handler: what the socket authenticated with
                             (opaque; zeros before) */
  char addr[64]; /* peer IP address */
};

/* The connect handler's decision. */
struct jb_ws_connect_result {
  bool ok;
  unsigned role; /* ok: a bit mask the application chooses */
  char room[129]; /* ok: the room (session) to join */
  unsigned char cred[32]; /* ok: kept with the connection, given back in every jb_ws_peer */
  char message[256]; /* !ok: CONNECT_ERROR {message} shown to the client */
};

struct jb_ws_handlers {
  void *ctx;
  /* Worker thread. Decides a Socket.IO CONNECT; `auth` is the borrowed auth payload object,
   * or NULL when the client sent none. Fills *res (zeroed on entry). */
  void (*connect)(void *ctx, const struct jb_ws_peer *peer, json_t *auth,
                  struct jb_ws_connect_result *res);
  /* Worker thread, optional. Runs after an accepted CONNECT was queued: messages sent from
   * here (jb_ws_emit) reach the client after the CONNECT answer. */
  void (*connected)(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer);
  /* Worker thread. An EVENT `name` with its arguments `args` (borrowed array, the name
   * removed). Returns the acknowledgement's arguments as a new array reference, sent as the
   * ACK when the client asked for one (`wants_ack`); NULL means an empty ACK. */
  json_t *(*event)(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer, const char *name,
                   json_t *args, bool wants_ack);
  /* Worker thread, optional. Called for every connected socket after jb_ws_resync: sends
   * (jb_ws_emit) what a socket may have missed. */
  void (*resync)(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer);
  /* Service thread, optional. Offered every EVENT of a connected socket before it is queued
   * for the handler threads (`args` borrowed, as for `event`; `ack` -1 when the client asked
   * for none). Returns true when it took the event: it then ends it exactly once, with
   * jb_ws_event_done or jb_ws_event_requeue, and counts as a call in flight until then (the
   * drain waits for it). It must not block: it runs on the thread that serves every socket. */
  bool (*event_direct)(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer, const char *name,
                       json_t *args, long long ack);
};

/* Binds the listener (errors such as a taken port are reported here), starts the service
 * thread and `s->workers` handler threads. `h` is copied. On success *out is the server
 * (stop it with jb_ws_stop). Returns 0, or -1 with `err` set. */
int jb_ws_start(struct jb_ws **out, const struct jb_ws_settings *s, const struct jb_ws_handlers *h,
                jb_error *err);

/* The bound TCP port. */
int jb_ws_port(const struct jb_ws *ws);

/* Asks for the resync handler to run once for every socket connected now (on the handler
 * threads, as far as their queue takes them), e.g. after events may have been missed.
 * Returns 0, or -1 without a resync handler or on OOM. Thread-safe. */
int jb_ws_resync(struct jb_ws *ws);

/* Starts the drain without waiting: new connections are refused with HTTP 503, new events get
 * the ACK error {code:"draining"}, and every socket is closed — the Engine.IO close packet,
 * then WebSocket close 1001 (going away), so that Socket.IO clients reconnect, through the
 * load balancer, to another instance — at once when none of its handler calls is in flight,
 * else as soon as the last one has sent its ACK. Thread-safe; NULL is allowed. */
void jb_ws_drain(struct jb_ws *ws);

/* jb_ws_drain, then waits until every connection is closed or `grace_ms` ms have passed;
 * sockets whose calls are still in flight then are closed anyway (their ACKs are lost; the
 * handlers go on, and jb_ws_stop waits for them). NULL is allowed. */
void jb_ws_drain_wait(struct jb_ws *ws, long grace_ms);

/* Closes every connection (close 1001, so Socket.IO clients reconnect elsewhere), waits at
 * most 1 s for the close frames to go out, stops the threads and frees `ws`. Handlers have
 * returned when this returns. NULL is allowed. */
void jb_ws_stop(struct jb_ws *ws);

/* Sends Socket.IO EVENT [event, payload] to one connection. `payload` is stolen (NULL: the
 * event has no argument). Returns 0, or -1 when it could not be queued (OOM, stopping). */
int jb_ws_emit(struct jb_ws *ws, uint64_t conn, const char *event, json_t *payload);

/* Sends EVENT [event, payload] to every connected socket of `room` whose role has a bit in
 * `roles`. The frame is built once and shared. `payload` is stolen. Returns 0 or -1. */
int jb_ws_broadcast(struct jb_ws *ws, const char *room, unsigned roles, const char *event,
                    json_t *payload);

/* jb_ws_broadcast for one event of a numbered stream — at most one per connection, numbered
 * `seq` (> 0) in the order its events were made, which may be published out of that order
 * (several writers, threads, transports): a socket is handed none numbered at or below the
 * highest it was already handed (jb_ws_emit_seq too), so never an older after a newer, nor
 * one twice. Decided on the service thread in the order the calls queued their frames, per
 * socket. seq <= 0: as jb_ws_broadcast. `payload` is stolen. Returns 0 or -1. */
int jb_ws_broadcast_seq(struct jb_ws *ws, const char *room, unsigned roles, const char *event,
                        json_t *payload, long long seq);

/* jb_ws_emit of an event that tells the connection where its numbered stream is (a snapshot
 * that carries number `seq`): sent as jb_ws_emit, after which jb_ws_broadcast_seq hands the
 * connection none numbered below `seq` (the event numbered `seq` itself still goes: it may
 * carry more than the snapshot). seq <= 0: as jb_ws_emit. `payload` is stolen. 0 or -1. */
int jb_ws_emit_seq(struct jb_ws *ws, uint64_t conn, const char *event, json_t *payload,
                   long long seq);

/* Ends the Socket.IO session of every socket of `room` whose role has a bit in `roles`: a
 * DISCONNECT packet (the client does not reconnect by itself), then close 1000. Queued after
 * what was sent to them before, so they get it first. Returns 0 or -1. */
int jb_ws_disconnect_room(struct jb_ws *ws, const char *room, unsigned roles);

/* Ends an EVENT that the event_direct handler took: sends `reply` (stolen; an array, NULL:
 * empty) as its ACK when `ack` >= 0 — at once on the service thread, else queued to it as the
 * handler threads' answers are. Returns 0, or -1 (OOM, stopping: the ACK is lost, and the
 * call still ends). */
int jb_ws_event_done(struct jb_ws *ws, uint64_t conn, long long ack, json_t *reply);

/* Hands an EVENT that the event_direct handler took to the handler threads after all, as if
 * it had not been offered (`args` borrowed). Service thread only. A full queue answers the
 * client with the busy ACK, as for any event. */
void jb_ws_event_requeue(struct jb_ws *ws, const struct jb_ws_peer *peer, const char *name,
                         json_t *args, long long ack);

/* Runs fn(arg, true) once on a handler thread (work too long for the service thread). Any
 * thread. Returns 0, or -1 when it cannot be queued (OOM, queue full, stopping): fn is not
 * called. A call still queued when the server stops gets fn(arg, false) instead: free `arg`,
 * do nothing else. */
int jb_ws_run(struct jb_ws *ws, void (*fn)(void *arg, bool run), void *arg);

/* A descriptor watched by the service thread (for answers of other processes to the
 * event_direct handler's requests). */
struct jb_ws_watch;
enum jb_ws_watch_event {
  JB_WS_WATCH_READABLE, /* input (or end of input) is waiting */
  JB_WS_WATCH_TIMEOUT, /* the time set with jb_ws_watch_timeout is up */
  JB_WS_WATCH_CLOSED, /* the watch ended: the descriptor is closed, `w` freed after this */
};
typedef void (*jb_ws_watch_fn)(void *arg, struct jb_ws_watch *w, int fd, enum jb_ws_watch_event ev);

/* Service thread only. Watches `fd` (taken: non-blocking, closed when the watch ends):
 * fn(arg, w, fd, ev) runs on the service thread for each event. Returns the watch, or NULL
 * when it cannot be made (the descriptor is then closed). */
struct jb_ws_watch *jb_ws_watch_fd(struct jb_ws *ws, int fd, jb_ws_watch_fn fn, void *arg);

/* The watched descriptor. */
int jb_ws_watch_fd_of(const struct jb_ws_watch *w);

/* Service thread only. One JB_WS_WATCH_TIMEOUT `ms` ms from now, replacing the one set
 * before; ms < 0 cancels. */
void jb_ws_watch_timeout(struct jb_ws_watch *w, long ms);

/* Service thread only. Ends the watch: fn gets JB_WS_WATCH_CLOSED before this returns — or,
 * when called from fn's own JB_WS_WATCH_READABLE, as soon as that returns (no further event
 * comes before it). `w` must not be used after the call. */
void jb_ws_watch_close(struct jb_ws_watch *w);

/* Counters for logs and metrics: open connections and connected Socket.IO clients. */
void jb_ws_counts(struct jb_ws *ws, long *open, long *connected);

#define JB_WS_ROLE_BITS 8 /* role masks use the low 8 bits */

/* Connected Socket.IO clients whose role has any of the bits of `role_bit`. Thread-safe. */
long jb_ws_count_role(struct jb_ws *ws, unsigned role_bit);

#endif
