/* ws_private.h — what the two files of the Socket.IO transport share (server/ws.c: the event
 * loop, the cross-thread queue, the handler jobs, Engine.IO/Socket.IO and the lws callback;
 * server/ws_conn.c: outgoing frames, the connection table, rooms, per-address counts and the
 * send queue with its close paths). Everything here runs on the service thread unless its
 * comment says otherwise. Not for other folders or files: server/ws.h is the transport's API. */
#ifndef JB_SERVER_WS_PRIVATE_H
#define JB_SERVER_WS_PRIVATE_H

#include <jansson.h>
#include <libwebsockets.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/pool.h"
#include "server/sio_packet.h"
#include "server/ws.h"
#include "server/ws_frame.h"

/* ---------- limits that are not settings ---------- */

#define MAX_INFLIGHT 64 /* handler calls outstanding per connection */
#define MAX_JOBS 8192 /* handler calls queued in all */
#define MAX_ITEMS 200000 /* cross-thread messages waiting for the service thread */
#define LINGER_MS 2000 /* after our close frame: wait for the peer to close */

#define SCRATCH 65536 /* queued frames gathered into one write, bytes */
#define ID_BUCKETS 4096
#define ROOM_BUCKETS 1024
#define IP_BUCKETS 256

/* ---------- outgoing frames: built once, shared by reference (service thread only) ---------- */

struct frame {
  int refs;
  size_t len; /* bytes at data */
  unsigned char *data; /* mem + LWS_PRE */
  unsigned char mem[];
};

/* ---------- cross-thread messages (any thread → service thread) ---------- */

enum item_kind {
  IT_SEND, /* frame to one connected socket */
  IT_ROOM, /* frame to the room's sockets whose role matches */
  IT_ACCEPT, /* CONNECT accepted: join room, answer 40{sid} */
  IT_REFUSE, /* CONNECT refused: send the CONNECT_ERROR frame */
  IT_DONE, /* a handler call finished; optional ACK frame */
  IT_ROOM_END, /* the room's matching sockets: DISCONNECT, then close */
  IT_RESYNC, /* run the resync handler for every connected socket */
};

struct item {
  struct item *next;
  enum item_kind kind;
  uint64_t conn;
  unsigned roles;
  long long
      seq; /* IT_SEND, IT_ROOM: the number of a numbered event (jb_ws_broadcast_seq); 0: none */
  struct frame *f;
  char room[129];
  unsigned char cred[32]; /* IT_ACCEPT: jb_ws_connect_result.cred */
};

/* ---------- handler jobs (service thread → workers) ---------- */

enum job_kind { J_CONNECT, J_EVENT, J_RESYNC, J_CALL };

struct job {
  struct jb_ws *ws;
  enum job_kind kind;
  void (*fn)(void *arg, bool run); /* J_CALL (jb_ws_run) */
  void *arg;
  struct jb_ws_peer peer;
  json_t *data; /* auth object or NULL / event args array */
  long long ack; /* -1: none */
  char name[JB_SIO_MAX_EVENT_NAME + 1];
};

/* ---------- connections (service thread only) ---------- */

enum cstate {
  CS_HTTP, /* reading the upgrade request */
  CS_EIO, /* Engine.IO open; waiting for Socket.IO CONNECT */
  CS_SIO, /* Socket.IO connected */
  CS_CLOSING, /* close frame / refusal queued; no more input is read */
  CS_LINGER, /* our side shut down; discard input until the peer closes */
};

struct qnode {
  struct qnode *next;
  struct frame *f;
};

struct room;

struct conn {
  struct jb_ws *ws;
  struct lws *wsi;
  uint64_t id;
  struct conn *id_next;
  struct room *room;
  struct conn *r_prev, *r_next;
  struct ipcount *ip;
  enum cstate st;
  unsigned role;
  unsigned char cred[32]; /* the connect handler's jb_ws_connect_result.cred */
  bool connect_pending, awaiting_pong, counted_connected;
  bool drain_close; /* draining: close once the handler calls in flight have answered */
  int inflight;
  bool end_pending; /* jb_ws_disconnect_room: DISCONNECT once no handler call is in flight */
  long long seq; /* the highest number of the numbered events handed to it (jb_ws_broadcast_seq) */
  char sid[24];
  char addr[64];
  char console[64]; /* the upgrade request's console sign-in cookie, "" when none */
  char origin[256]; /* the upgrade request's Origin, "" when none */
  char host[256]; /* the upgrade request's Host, "" when none (or repeated) */
  struct jb_ws_handshake hs; /* CS_HTTP: the upgrade request read so far */
  struct jb_ws_reader rd; /* CS_EIO, CS_SIO: the client's frames */
  /* send queue */
  struct qnode *qhead, *qtail;
  size_t qbytes;
  /* timers */
  lws_sorted_usec_list_t sul_hs; /* handshake timeout, then linger/kill */
  lws_sorted_usec_list_t sul_ping; /* ping interval / pong timeout */
};

struct room {
  struct room *next;
  struct conn *head;
  char name[129];
};

struct ipcount {
  struct ipcount *next;
  long n;
  char addr[64];
};

struct jb_ws {
  struct jb_ws_settings s;
  struct jb_ws_handlers h;
  struct lws_context *ctx;
  struct lws_vhost *vh;
  struct lws_vhost *vh_watch; /* jb_ws_watch_fd's descriptors */
  int port;
  pthread_t service;
  bool service_started;
  bool drained, forced;
  atomic_bool drain_force; /* the drain's grace is over: close every socket now */
  unsigned char scratch[LWS_PRE + SCRATCH]; /* service thread: gathered frames, and the close
                                              * frames sent to all on stop */
  atomic_bool stop, draining;
  atomic_long n_open, n_connected;
  atomic_long n_by_role[JB_WS_ROLE_BITS]; /* connected sockets per role bit */
  uint64_t next_id;
  /* service-thread tables */
  struct conn *ids[ID_BUCKETS];
  struct room *rooms[ROOM_BUCKETS];
  struct ipcount *ips[IP_BUCKETS];
  /* cross-thread queue */
  pthread_mutex_t qlock;
  struct item *qhead, *qtail;
  long qlen;
  long dropped;
  struct jb_pool *pool; /* the handler threads */
};

/* ---------- outgoing frames (ws_conn.c) ---------- */

/* A new frame (1 reference) of `opcode` (RFC 6455 §5.2; 0xff: raw bytes, the HTTP answer to
 * an upgrade request) whose payload is a[0..alen) ‖ b[0..blen), with LWS_PRE bytes of room
 * before it. NULL when out of memory. */
struct frame *jb_wsc_frame_build(unsigned opcode, const void *a, size_t alen, const void *b,
                                 size_t blen);
/* A text frame of the NUL-terminated `a` ‖ `b` (`b` may be NULL); NULL when out of memory. */
struct frame *jb_wsc_frame_text(const char *a, const char *b);
/* Drops one reference to `f` (NULL: nothing), freeing it with the last. */
void jb_wsc_frame_unref(struct frame *f);
/* A Socket.IO packet (Socket.IO v5) of `type` on the main namespace as a text frame: its head
 * (with the ack id unless `ack` < 0) then `data` (stolen; NULL: out of memory, no frame). */
struct frame *jb_wsc_frame_sio(enum jb_sio_type type, long long ack, char *data);
/* The EVENT packet [event, payload] as a text frame; `payload` is stolen. NULL: no memory. */
struct frame *jb_wsc_frame_event(const char *event, json_t *payload);
/* The ACK packet `ack` with `reply` (borrowed; not an array: an empty one) as a text frame. */
struct frame *jb_wsc_frame_ack(long long ack, const json_t *reply);

/* ---------- the connection table, rooms, per-address counts (ws_conn.c) ---------- */

/* The connection of id `id`, or NULL. */
struct conn *jb_wsc_find(struct jb_ws *ws, uint64_t id);
/* Takes `c` out of the id table (it stays allocated). */
void jb_wsc_unlink_id(struct conn *c);
/* Puts `c` in the room `name` (made when it has no member yet). 0, or -1 out of memory. */
int jb_wsc_room_join(struct conn *c, const char *name);
/* What the handlers are told of `c` (its id, role, credential, room and address) into `p`. */
void jb_wsc_peer_of(const struct conn *c, struct jb_ws_peer *p);
/* Takes `c` out of its room (none: nothing); a room left empty is freed. */
void jb_wsc_room_leave(struct conn *c);
/* The room `name`, or NULL when it has no member. */
struct room *jb_wsc_room_find(struct jb_ws *ws, const char *name);
/* Counts `c` against its address (c->addr). The count including it, or -1 out of memory. */
long jb_wsc_ip_add(struct conn *c);
/* Takes `c` off its address's count (not counted: nothing). */
void jb_wsc_ip_remove(struct conn *c);

/* ---------- sending and closing (ws_conn.c) ---------- */

/* Drops every frame queued for `c`. */
void jb_wsc_queue_clear(struct conn *c);
/* Queues a reference to `f` for `c` (the caller keeps its own; NULL or a closing connection:
 * nothing), written at once when nothing waits before it. `force` skips the cap of
 * send_queue_bytes (close frames); past the cap the connection is closed 1008 (RFC 6455
 * §7.4.1, policy violation), but a frame larger than the cap still goes out alone. */
void jb_wsc_send(struct conn *c, struct frame *f, bool force);
/* Queues the text frame `a` ‖ `b` (`b` may be NULL); out of memory closes the connection. */
void jb_wsc_send_text(struct conn *c, const char *a, const char *b);
/* Queues `f` (stolen; raw bytes or a close frame) as the last thing `c` sends, dropping what
 * is queued, and kills the connection LINGER_MS later if the peer has not closed by then. */
void jb_wsc_finish(struct conn *c, struct frame *f);
/* As jb_wsc_finish, with the frame `last` (stolen, may be NULL) sent just before `f`; `keep`
 * lets the frames already queued (an ACK, events) go out first instead of dropping them. */
void jb_wsc_finish_after(struct conn *c, bool keep, struct frame *last, struct frame *f);
/* Closes the WebSocket with `code` and a short `reason` (RFC 6455 §5.5.1); before the
 * upgrade, just drops the connection. A close other than 1000 is logged. */
void jb_wsc_fail(struct conn *c, unsigned code, const char *reason);
/* The HTTP error answer of `v` to the upgrade request (ws_frame.h), then close. */
void jb_wsc_http_refuse_verdict(struct conn *c, const struct jb_ws_verdict *v);
/* An HTTP error answer to the upgrade request (see struct jb_ws_verdict), then close. */
void jb_wsc_http_refuse(struct conn *c, int status, const char *extra_headers, int eio_code,
                        const char *message);

#endif
