/* ws.c — the Socket.IO transport (see ws.h), the event loop around the two pure codecs: a
 * libwebsockets raw-socket listener serviced by one thread feeds each connection's bytes to
 * the WebSocket codec (ws_frame.h: upgrade request, frames) and its text messages to the
 * Engine.IO/Socket.IO codec (sio_packet.h), and acts on what they decode. It owns the
 * connections' states, heartbeats, the cross-thread queue, the handler worker threads, watched
 * descriptors and the drain; the connections themselves — frames, table, rooms, per-address
 * counts, send queues and closing — are in ws_conn.c (ws_private.h). */
#define _GNU_SOURCE
#include "server/ws.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libwebsockets.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"
#include "server/config.h"
#include "server/ws_private.h"

/* ---------- cross-thread queue ---------- */

static int post(struct jb_ws *ws, struct item *it, bool droppable) {
  pthread_mutex_lock(&ws->qlock);
  if (droppable && ws->qlen >= MAX_ITEMS) {
    long d = ++ws->dropped;
    pthread_mutex_unlock(&ws->qlock);
    if ((d & (d - 1)) == 0) jb_log(JB_LOG_WARN, "socket message queue full: message dropped", NULL);
    jb_wsc_frame_unref(it->f);
    free(it);
    return -1;
  }
  it->next = NULL;
  if (ws->qtail)
    ws->qtail->next = it;
  else
    ws->qhead = it;
  ws->qtail = it;
  ws->qlen++;
  pthread_mutex_unlock(&ws->qlock);
  lws_cancel_service(ws->ctx);
  return 0;
}

static int post_frame(struct jb_ws *ws, enum item_kind kind, uint64_t conn, const char *room,
                      unsigned roles, struct frame *f, long long seq) {
  struct item *it = calloc(1, sizeof *it);
  if (!it) {
    jb_wsc_frame_unref(f);
    return -1;
  }
  it->kind = kind;
  it->conn = conn;
  it->roles = roles;
  it->seq = seq > 0 ? seq : 0;
  it->f = f;
  if (room) snprintf(it->room, sizeof it->room, "%s", room);
  return post(ws, it, kind == IT_SEND || kind == IT_ROOM);
}

int jb_ws_emit(struct jb_ws *ws, uint64_t conn, const char *event, json_t *payload) {
  return jb_ws_emit_seq(ws, conn, event, payload, 0);
}

int jb_ws_emit_seq(struct jb_ws *ws, uint64_t conn, const char *event, json_t *payload,
                   long long seq) {
  struct frame *f = jb_wsc_frame_event(event, payload);
  if (!f) return -1;
  return post_frame(ws, IT_SEND, conn, NULL, 0, f, seq);
}

int jb_ws_broadcast(struct jb_ws *ws, const char *room, unsigned roles, const char *event,
                    json_t *payload) {
  return jb_ws_broadcast_seq(ws, room, roles, event, payload, 0);
}

int jb_ws_broadcast_seq(struct jb_ws *ws, const char *room, unsigned roles, const char *event,
                        json_t *payload, long long seq) {
  struct frame *f = jb_wsc_frame_event(event, payload);
  if (!f) return -1;
  return post_frame(ws, IT_ROOM, 0, room, roles, f, seq);
}

int jb_ws_disconnect_room(struct jb_ws *ws, const char *room, unsigned roles) {
  struct item *it = calloc(1, sizeof *it);
  if (!it) return -1;
  it->kind = IT_ROOM_END;
  it->roles = roles;
  snprintf(it->room, sizeof it->room, "%s", room);
  return post(ws, it, false);
}

/* After a server DISCONNECT: close once the client had time to read it. */
/* ---------- events the event_direct handler took (service thread) ---------- */

static bool on_service_thread(struct jb_ws *ws) {
  return ws->service_started && pthread_equal(pthread_self(), ws->service);
}

static void handle_item(struct jb_ws *ws, struct item *it);
static int submit(struct jb_ws *ws, struct job *j);

int jb_ws_event_done(struct jb_ws *ws, uint64_t conn, long long ack, json_t *reply) {
  if (atomic_load(&ws->stop)) { /* the connections are going or gone */
    json_decref(reply);
    return -1;
  }
  struct frame *f = ack >= 0 ? jb_wsc_frame_ack(ack, reply) : NULL;
  json_decref(reply);
  if (!on_service_thread(ws)) return post_frame(ws, IT_DONE, conn, NULL, 0, f, 0);
  struct item it = {.kind = IT_DONE, .conn = conn, .f = f};
  handle_item(ws, &it);
  jb_wsc_frame_unref(f);
  return 0;
}

void jb_ws_event_requeue(struct jb_ws *ws, const struct jb_ws_peer *peer, const char *name,
                         json_t *args, long long ack) {
  if (atomic_load(&ws->stop)) return;
  struct job *j = calloc(1, sizeof *j);
  if (j) {
    j->kind = J_EVENT;
    j->ack = ack;
    j->peer = *peer;
    snprintf(j->name, sizeof j->name, "%s", name);
    j->data = json_incref(args);
    if (submit(ws, j) == 0) return;
    json_decref(j->data);
    free(j);
  }
  jb_ws_event_done(
      ws, peer->conn, ack,
      json_pack("[{s:{s:s,s:s}}]", "error", "code", "busy", "message", "server busy, try again"));
}

int jb_ws_run(struct jb_ws *ws, void (*fn)(void *arg, bool run), void *arg) {
  struct job *j = calloc(1, sizeof *j);
  if (!j) return -1;
  j->kind = J_CALL;
  j->fn = fn;
  j->arg = arg;
  if (submit(ws, j) == 0) return 0;
  free(j);
  return -1;
}

/* ---------- watched descriptors (service thread) ---------- */

struct jb_ws_watch {
  struct jb_ws *ws;
  struct lws *wsi;
  jb_ws_watch_fn fn;
  void *arg;
  int fd;
  bool in_rx; /* fn runs for READABLE: a close waits for it to return */
  bool closing; /* jb_ws_watch_close was called in fn */
  lws_sorted_usec_list_t sul;
};

static void watch_timeout_cb(lws_sorted_usec_list_t *sul) {
  struct jb_ws_watch *w = lws_container_of(sul, struct jb_ws_watch, sul);
  w->fn(w->arg, w, w->fd, JB_WS_WATCH_TIMEOUT);
}

static int watch_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                          size_t len) {
  (void)user;
  (void)in;
  (void)len;
  struct jb_ws_watch *w = lws_get_opaque_user_data(wsi);
  if (!w) return 0;
  switch (reason) {
    case LWS_CALLBACK_RAW_RX_FILE:
      w->in_rx = true;
      w->fn(w->arg, w, w->fd, JB_WS_WATCH_READABLE);
      w->in_rx = false;
      return w->closing ? -1 : 0; /* -1: lws closes it, then RAW_CLOSE_FILE */
    case LWS_CALLBACK_RAW_CLOSE_FILE:
      lws_set_opaque_user_data(wsi, NULL);
      lws_sul_cancel(&w->sul);
      w->fn(w->arg, w, w->fd, JB_WS_WATCH_CLOSED);
      free(w);
      return 0;
    default:
      return 0;
  }
}

struct jb_ws_watch *jb_ws_watch_fd(struct jb_ws *ws, int fd, jb_ws_watch_fn fn, void *arg) {
  struct jb_ws_watch *w = calloc(1, sizeof *w);
  if (!w) {
    close(fd);
    return NULL;
  }
  *w = (struct jb_ws_watch){.ws = ws, .fn = fn, .arg = arg, .fd = fd};
  lws_adopt_desc_t info = {.vh = ws->vh_watch,
                           .type = LWS_ADOPT_RAW_FILE_DESC,
                           .fd = {.filefd = fd},
                           .vh_prot_name = "jailbox-watch",
                           .opaque = w};
  w->wsi = lws_adopt_descriptor_vhost_via_info(&info);
  if (!w->wsi) { /* lws closes only sockets it failed to adopt (core-net/adopt.c), not files */
    close(fd);
    free(w);
    return NULL;
  }
  return w;
}

int jb_ws_watch_fd_of(const struct jb_ws_watch *w) { return w->fd; }

void jb_ws_watch_timeout(struct jb_ws_watch *w, long ms) {
  if (ms < 0) {
    lws_sul_cancel(&w->sul);
    return;
  }
  lws_sul_schedule(lws_get_context(w->wsi), 0, &w->sul, watch_timeout_cb, (lws_usec_t)ms * 1000);
}

void jb_ws_watch_close(struct jb_ws_watch *w) {
  if (w->in_rx) { /* inside its own READABLE: lws closes it when the callback returns */
    w->closing = true;
    lws_sul_cancel(&w->sul);
    return;
  }
  lws_set_timeout(w->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_SYNC);
}

static void end_cb(lws_sorted_usec_list_t *sul) {
  struct conn *c = lws_container_of(sul, struct conn, sul_hs);
  if (c->end_pending) { /* a handler call did not finish in time: end anyway */
    c->end_pending = false;
    jb_wsc_send_text(c, JB_SIO_TEXT_DISCONNECT, NULL);
    lws_sul_schedule(lws_get_context(c->wsi), 0, &c->sul_hs, end_cb, (lws_usec_t)500 * 1000);
    return;
  }
  jb_wsc_fail(c, JB_WS_CLOSE_NORMAL, NULL);
}

/* Sends the DISCONNECT and closes soon, or waits for the answers of calls in flight (an op that
 * ran must be answered) for at most 5 s. */
static void conn_end(struct conn *c) {
  c->role = 0; /* no more events of the room */
  c->end_pending = c->inflight > 0;
  if (!c->end_pending) jb_wsc_send_text(c, JB_SIO_TEXT_DISCONNECT, NULL);
  lws_sul_schedule(lws_get_context(c->wsi), 0, &c->sul_hs, end_cb,
                   (lws_usec_t)(c->end_pending ? 5000 : 500) * 1000);
}

void jb_ws_counts(struct jb_ws *ws, long *open, long *connected) {
  *open = atomic_load(&ws->n_open);
  *connected = atomic_load(&ws->n_connected);
}

long jb_ws_count_role(struct jb_ws *ws, unsigned role_bit) {
  long n = 0;
  for (int b = 0; b < JB_WS_ROLE_BITS; b++)
    if (role_bit & (1u << b)) n += atomic_load(&ws->n_by_role[b]);
  return n;
}

static void ping_cb(lws_sorted_usec_list_t *sul);

static int submit(struct jb_ws *ws, struct job *j);
static void close_draining(struct conn *c);

/* Service thread: one J_RESYNC job per Socket.IO-connected socket (as many as the job queue
 * takes; the rest are counted and logged). */
static void resync_all(struct jb_ws *ws) {
  long queued = 0, dropped = 0;
  for (size_t b = 0; b < ID_BUCKETS; b++)
    for (struct conn *c = ws->ids[b]; c; c = c->id_next) {
      if (c->st != CS_SIO) continue;
      struct job *j = calloc(1, sizeof *j);
      if (j) {
        j->kind = J_RESYNC;
        j->ack = -1;
        jb_wsc_peer_of(c, &j->peer);
      }
      if (!j || submit(ws, j) < 0) {
        free(j);
        dropped++;
      } else {
        queued++;
      }
    }
  if (queued || dropped) {
    char q[24], d[24];
    snprintf(q, sizeof q, "%ld", queued);
    snprintf(d, sizeof d, "%ld", dropped);
    jb_log(dropped ? JB_LOG_WARN : JB_LOG_INFO, "sockets resynchronised", "queued", q, "dropped", d,
           NULL);
  }
}

static void handle_item(struct jb_ws *ws, struct item *it) {
  if (it->kind == IT_ROOM_END) {
    struct room *r = jb_wsc_room_find(ws, it->room);
    for (struct conn *c = r ? r->head : NULL, *next; c; c = next) {
      next = c->r_next;
      if (c->st != CS_SIO || !(c->role & it->roles)) continue;
      conn_end(c);
    }
    return;
  }
  if (it->kind == IT_RESYNC) {
    resync_all(ws);
    return;
  }
  if (it->kind == IT_ROOM) {
    struct room *r = jb_wsc_room_find(ws, it->room);
    for (struct conn *c = r ? r->head : NULL, *next; c; c = next) {
      next = c->r_next; /* jb_wsc_send may close c and unlink it */
      if (c->st != CS_SIO || !(c->role & it->roles)) continue;
      if (it->seq) { /* numbered: none at or below what the socket has */
        if (it->seq <= c->seq) continue;
        c->seq = it->seq;
      }
      jb_wsc_send(c, it->f, false);
    }
    return;
  }
  struct conn *c = jb_wsc_find(ws, it->conn);
  if (!c) return;
  switch (it->kind) {
    case IT_SEND:
      if (c->st != CS_SIO) break;
      if (it->seq - 1 > c->seq) c->seq = it->seq - 1; /* it tells seq: none below it after it */
      jb_wsc_send(c, it->f, false);
      break;
    case IT_ACCEPT: {
      c->connect_pending = false;
      if (c->st != CS_EIO) break;
      if (jb_wsc_room_join(c, it->room) < 0) {
        jb_wsc_fail(c, JB_WS_CLOSE_POLICY, "out of memory");
        break;
      }
      c->role = it->roles;
      memcpy(c->cred, it->cred, sizeof c->cred);
      c->st = CS_SIO;
      c->counted_connected = true;
      atomic_fetch_add(&ws->n_connected, 1);
      for (int b = 0; b < JB_WS_ROLE_BITS; b++)
        if (c->role & (1u << b)) atomic_fetch_add(&ws->n_by_role[b], 1);
      lws_sul_cancel(&c->sul_hs);
      char ans[48];
      jb_sio_connect_ok(ans, sizeof ans, c->sid);
      jb_wsc_send_text(c, ans, NULL);
      break;
    }
    case IT_REFUSE:
      c->connect_pending = false;
      if (c->st == CS_EIO) jb_wsc_send(c, it->f, false);
      break;
    case IT_DONE:
      if (c->inflight > 0) c->inflight--;
      if (it->f && c->st == CS_SIO) jb_wsc_send(c, it->f, false);
      if (c->end_pending && c->inflight == 0 && c->st == CS_SIO) {
        c->end_pending = false;
        jb_wsc_send_text(c, JB_SIO_TEXT_DISCONNECT, NULL);
        lws_sul_schedule(lws_get_context(c->wsi), 0, &c->sul_hs, end_cb, (lws_usec_t)500 * 1000);
      }
      if (c->drain_close && c->inflight == 0 && c->st < CS_CLOSING)
        close_draining(c); /* after its ACK */
      break;
    default:
      break;
  }
}

static void drain_items(struct jb_ws *ws) {
  pthread_mutex_lock(&ws->qlock);
  struct item *it = ws->qhead;
  ws->qhead = ws->qtail = NULL;
  ws->qlen = 0;
  pthread_mutex_unlock(&ws->qlock);
  while (it) {
    struct item *next = it->next;
    handle_item(ws, it);
    jb_wsc_frame_unref(it->f);
    free(it);
    it = next;
  }
}

/* ---------- workers ---------- */

static void job_cb(void *arg, bool run);

/* Queues `j` for the handler threads (j->ws set here). 0, or -1 (queue full, stopping). */
static int submit(struct jb_ws *ws, struct job *j) {
  j->ws = ws;
  return jb_pool_submit(ws->pool, job_cb, j);
}

static void run_job(struct jb_ws *ws, struct job *j) {
  if (j->kind == J_CALL) {
    j->fn(j->arg, true);
    return;
  }
  if (j->kind == J_RESYNC) { /* no ACK and no IT_DONE: the socket has no call in flight for it */
    if (ws->h.resync) ws->h.resync(ws->h.ctx, ws, &j->peer);
    return;
  }
  if (j->kind == J_CONNECT) {
    struct jb_ws_connect_result res;
    memset(&res, 0, sizeof res);
    ws->h.connect(ws->h.ctx, &j->peer, j->data, &res);
    if (res.ok) {
      struct item *it = calloc(1, sizeof *it);
      if (it) {
        it->kind = IT_ACCEPT;
        it->conn = j->peer.conn;
        it->roles = res.role;
        snprintf(it->room, sizeof it->room, "%s", res.room);
        memcpy(it->cred, res.cred, sizeof it->cred);
        post(ws, it, false);
        j->peer.role = res.role;
        memcpy(j->peer.cred, res.cred, sizeof j->peer.cred);
        snprintf(j->peer.room, sizeof j->peer.room, "%s", res.room);
        if (ws->h.connected) ws->h.connected(ws->h.ctx, ws, &j->peer);
      }
    } else {
      char *s = jb_sio_error_data(res.message[0] ? res.message : "refused");
      if (s)
        post_frame(ws, IT_REFUSE, j->peer.conn, NULL, 0,
                   jb_wsc_frame_sio(JB_SIO_CONNECT_ERROR, -1, s), 0);
    }
    post_frame(ws, IT_DONE, j->peer.conn, NULL, 0, NULL, 0);
    return;
  }
  json_t *reply = ws->h.event(ws->h.ctx, ws, &j->peer, j->name, j->data, j->ack >= 0);
  struct frame *f = j->ack >= 0 ? jb_wsc_frame_ack(j->ack, reply) : NULL;
  json_decref(reply);
  post_frame(ws, IT_DONE, j->peer.conn, NULL, 0, f, 0);
}

static void job_cb(void *arg, bool run) {
  struct job *j = arg;
  if (run)
    run_job(j->ws, j);
  else if (j->kind == J_CALL)
    j->fn(j->arg, false); /* not run: only its memory let go */
  json_decref(j->data);
  free(j);
}

/* ---------- Socket.IO v5 packets (https://socket.io/docs/v4/socket-io-protocol/) ---------- */

/* Sends CONNECT_ERROR {message} on `nsp` ("/": the main namespace). */
static void sio_connect_error(struct conn *c, const char *nsp, const char *message) {
  char head[JB_SIO_HEAD_MAX];
  jb_sio_head(head, JB_SIO_CONNECT_ERROR, nsp, -1);
  char *data = jb_sio_error_data(message);
  if (!data) {
    jb_wsc_fail(c, JB_WS_CLOSE_POLICY, "out of memory");
    return;
  }
  jb_wsc_send_text(c, head, data);
  free(data);
}

/* Answers ACK `ack` (none when < 0) with the error array `body` (an event that was not run). */
static void sio_ack_error(struct conn *c, long long ack, const char *body) {
  if (ack < 0) return;
  char head[JB_SIO_HEAD_MAX];
  jb_sio_head(head, JB_SIO_ACK, NULL, ack);
  jb_wsc_send_text(c, head, body);
}

/* A decoded CONNECT on the main namespace: `auth` (stolen, NULL: none) goes to the connect
 * handler on a worker thread. */
static void sio_connect(struct conn *c, json_t *auth) {
  /* a browser signed in to the console connects with its cookie: it stands for auth {token},
   * and the page's Origin goes with it as "consoleOrigin", the Host it connected to as
   * "consoleHost", for the connect handler to check */
  if (c->console[0] && !json_object_get(auth, "token")) {
    if (!json_is_object(auth)) {
      json_decref(auth);
      auth = json_object();
    }
    json_object_set_new(auth, "token", json_string(c->console));
    json_object_set_new(auth, "consoleOrigin", json_string(c->origin));
    json_object_set_new(auth, "consoleHost", json_string(c->host));
  }
  struct job *j = calloc(1, sizeof *j);
  if (!j) {
    json_decref(auth);
    jb_wsc_fail(c, JB_WS_CLOSE_POLICY, "out of memory");
    return;
  }
  j->kind = J_CONNECT;
  j->data = auth;
  j->ack = -1;
  jb_wsc_peer_of(c, &j->peer);
  if (submit(c->ws, j) < 0) {
    json_decref(auth);
    free(j);
    sio_connect_error(c, "/", "server busy, try again");
    return;
  }
  c->connect_pending = true;
  c->inflight++;
}

/* A decoded EVENT `ename` with `args` (stolen; the name removed): offered to event_direct,
 * else queued for the handler threads. */
static void sio_event(struct conn *c, const char *ename, long long ack, json_t *args) {
  if (atomic_load(&c->ws->draining)) { /* no new work while the calls in flight finish */
    json_decref(args);
    sio_ack_error(c, ack,
                  "[{\"error\":{\"code\":\"draining\",\"message\":\"server shutting down; "
                  "reconnect and retry\"}}]");
    return;
  }
  if (c->inflight >= MAX_INFLIGHT) {
    json_decref(args);
    sio_ack_error(c, ack,
                  "[{\"error\":{\"code\":\"busy\",\"message\":\"too many requests in flight\"}}]");
    return;
  }
  if (c->ws->h.event_direct) {
    struct jb_ws_peer peer;
    jb_wsc_peer_of(c, &peer);
    if (c->ws->h.event_direct(c->ws->h.ctx, c->ws, &peer, ename, args, ack)) {
      json_decref(args);
      c->inflight++;
      return;
    }
  }
  struct job *j = calloc(1, sizeof *j);
  if (!j) {
    json_decref(args);
    jb_wsc_fail(c, JB_WS_CLOSE_POLICY, "out of memory");
    return;
  }
  j->kind = J_EVENT;
  j->ack = ack;
  snprintf(j->name, sizeof j->name, "%s", ename);
  j->data = args;
  jb_wsc_peer_of(c, &j->peer);
  if (submit(c->ws, j) < 0) {
    json_decref(args);
    free(j);
    sio_ack_error(c, ack,
                  "[{\"error\":{\"code\":\"busy\",\"message\":\"server busy, try again\"}}]");
    return;
  }
  c->inflight++;
}

/* ---------- Engine.IO v4 (https://socket.io/docs/v4/engine-io-protocol/) ---------- */

static void schedule_ping(struct conn *c, long ms) {
  lws_sul_schedule(lws_get_context(c->wsi), 0, &c->sul_ping, ping_cb, (lws_usec_t)ms * 1000);
}

static void ping_cb(lws_sorted_usec_list_t *sul) {
  struct conn *c = lws_container_of(sul, struct conn, sul_ping);
  if (c->st != CS_EIO && c->st != CS_SIO) return;
  if (c->awaiting_pong) {
    jb_wsc_fail(c, JB_WS_CLOSE_POLICY, "ping timeout");
    return;
  }
  c->awaiting_pong = true;
  jb_wsc_send_text(c, JB_EIO_TEXT_PING, NULL);
  if (c->st == CS_EIO || c->st == CS_SIO) schedule_ping(c, c->ws->s.ping_timeout_ms);
}

/* Where the connection is with its Socket.IO CONNECT. */
static enum jb_sio_phase phase_of(const struct conn *c) {
  if (c->st == CS_SIO) return JB_SIO_PHASE_CONNECTED;
  return c->connect_pending ? JB_SIO_PHASE_CONNECTING : JB_SIO_PHASE_OPEN;
}

/* One text message from the client: decoded (sio_packet.h), then acted on. */
static void message_rx(struct conn *c, const char *m, size_t n) {
  struct jb_sio_rx rx;
  switch (jb_sio_parse(m, n, phase_of(c), &rx)) {
    case JB_SIO_RX_CLOSE:
      jb_wsc_fail(c, rx.close_code, rx.reason);
      return;
    case JB_SIO_RX_CONNECT_ERROR:
      sio_connect_error(c, rx.nsp, rx.reason);
      return;
    case JB_SIO_RX_OK:
      break;
  }
  switch (rx.eio) {
    case JB_EIO_PING:
      jb_wsc_send_text(c, rx.probe ? JB_EIO_TEXT_PROBE_PONG : JB_EIO_TEXT_PONG, NULL);
      return;
    case JB_EIO_PONG:
      if (!rx.pong_data && c->awaiting_pong) {
        c->awaiting_pong = false;
        schedule_ping(c, c->ws->s.ping_interval_ms);
      }
      return;
    case JB_EIO_MESSAGE:
      if (rx.sio == JB_SIO_CONNECT)
        sio_connect(c, rx.data);
      else if (rx.sio == JB_SIO_EVENT)
        sio_event(c, rx.name, rx.ack, rx.data);
      else /* ACK: the server asks for none */
        jb_sio_rx_clear(&rx);
      return;
    default: /* noop */
      jb_sio_rx_clear(&rx);
      return;
  }
}

/* ---------- RFC 6455 frames (ws_frame.h) ---------- */

/* Feeds received bytes to the connection's frame reader and acts on each result, until the
 * bytes are used up or the connection stops reading. */
static void frames_rx(struct conn *c, const unsigned char *p, size_t n) {
  while (c->st == CS_EIO || c->st == CS_SIO) {
    struct jb_ws_read rd;
    size_t used;
    enum jb_ws_read_result r = jb_ws_reader_next(&c->rd, p, n, &used, &rd);
    p += used;
    n -= used;
    switch (r) {
      case JB_WS_READ_MORE:
        return;
      case JB_WS_READ_TEXT:
        message_rx(c, rd.text, rd.len);
        free(rd.text);
        break;
      case JB_WS_READ_PING: { /* pong with the same payload */
        struct frame *f = jb_wsc_frame_build(JB_WS_OP_PONG, rd.payload, rd.payload_len, NULL, 0);
        if (f) jb_wsc_send(c, f, false);
        jb_wsc_frame_unref(f);
        break;
      }
      case JB_WS_READ_PONG: /* Engine.IO has its own heartbeat */
        break;
      case JB_WS_READ_CLOSE:
        if (rd.code)
          jb_wsc_fail(c, rd.code, NULL); /* echo the code (RFC 6455 §5.5.1) */
        else
          jb_wsc_finish(c, jb_wsc_frame_build(JB_WS_OP_CLOSE, NULL, 0, NULL, 0));
        break;
      case JB_WS_READ_ERROR:
        jb_wsc_fail(c, rd.code, rd.reason);
        break;
    }
  }
}

/* ---------- the upgrade request (ws_frame.h) ---------- */

/* Answers a valid upgrade request: 101, then the Engine.IO open packet; heartbeats start. */
static void upgrade(struct conn *c, const char *accept) {
  char resp[256];
  size_t rl = jb_ws_handshake_response(resp, sizeof resp, accept);
  c->st = CS_EIO;
  struct frame *f = jb_wsc_frame_build(0xff, resp, rl, NULL, 0);
  if (f) jb_wsc_send(c, f, true);
  jb_wsc_frame_unref(f);
  unsigned char rnd[15];
  randombytes_buf(rnd, sizeof rnd);
  sodium_bin2base64(c->sid, sizeof c->sid, rnd, sizeof rnd,
                    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  char open[256];
  jb_eio_open(open, sizeof open, c->sid, c->ws->s.ping_interval_ms, c->ws->s.ping_timeout_ms,
              c->ws->s.max_payload);
  jb_wsc_send_text(c, open, NULL);
  schedule_ping(c, c->ws->s.ping_interval_ms);
}

static void http_rx(struct conn *c, const unsigned char *p, size_t n) {
  struct jb_ws_verdict v;
  size_t used;
  switch (jb_ws_handshake_feed(&c->hs, p, n, &used, &v)) {
    case JB_WS_HS_MORE:
      return;
    case JB_WS_HS_NOMEM:
      jb_wsc_fail(c, JB_WS_CLOSE_POLICY, "out of memory");
      return;
    case JB_WS_HS_REFUSE:
      jb_wsc_http_refuse_verdict(c, &v);
      return;
    case JB_WS_HS_UPGRADE:
      snprintf(c->console, sizeof c->console, "%s", v.console);
      snprintf(c->origin, sizeof c->origin, "%s", v.origin);
      snprintf(c->host, sizeof c->host, "%s", v.host);
      upgrade(c, v.accept);
      /* bytes after the head (frames sent without waiting for the 101) */
      if (c->st == CS_EIO && used < n) frames_rx(c, p + used, n - used);
      return;
  }
}

/* ---------- the lws callback ---------- */

static void hs_timeout_cb(lws_sorted_usec_list_t *sul) {
  struct conn *c = lws_container_of(sul, struct conn, sul_hs);
  if (c->st == CS_HTTP) {
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    c->st = CS_CLOSING;
  } else if (c->st == CS_EIO) {
    jb_wsc_fail(c, JB_WS_CLOSE_POLICY, "no Socket.IO CONNECT in time");
  }
}

static void conn_adopt(struct jb_ws *ws, struct conn *c, struct lws *wsi) {
  memset(c, 0, sizeof *c);
  c->ws = ws;
  c->wsi = wsi;
  c->id = ++ws->next_id;
  c->st = CS_HTTP;
  jb_ws_reader_init(&c->rd, ws->s.max_payload);
  c->id_next = ws->ids[c->id & (ID_BUCKETS - 1)];
  ws->ids[c->id & (ID_BUCKETS - 1)] = c;
  atomic_fetch_add(&ws->n_open, 1);
  if (!lws_get_peer_simple(wsi, c->addr, sizeof c->addr)) snprintf(c->addr, sizeof c->addr, "?");
  long n = jb_wsc_ip_add(c);
  lws_sul_schedule(lws_get_context(wsi), 0, &c->sul_hs, hs_timeout_cb,
                   (lws_usec_t)ws->s.handshake_timeout_ms * 1000);
  if (atomic_load(&ws->draining))
    jb_wsc_http_refuse(c, 503, NULL, 3, "server shutting down");
  else if (n < 0 || n > ws->s.max_per_ip) {
    jb_log(JB_LOG_WARN, "socket refused: too many connections from one address", "addr", c->addr,
           NULL);
    jb_wsc_http_refuse(c, 429, "Retry-After: 5\r\n", 3, "too many connections from this address");
  }
}

static void conn_closed(struct conn *c) {
  if (!c->ws) return;
  lws_sul_cancel(&c->sul_hs);
  lws_sul_cancel(&c->sul_ping);
  jb_wsc_unlink_id(c);
  jb_wsc_room_leave(c);
  jb_wsc_ip_remove(c);
  jb_wsc_queue_clear(c);
  jb_ws_handshake_free(&c->hs);
  jb_ws_reader_free(&c->rd);
  atomic_fetch_sub(&c->ws->n_open, 1);
  if (c->counted_connected) {
    atomic_fetch_sub(&c->ws->n_connected, 1);
    for (int b = 0; b < JB_WS_ROLE_BITS; b++)
      if (c->role & (1u << b)) atomic_fetch_sub(&c->ws->n_by_role[b], 1);
  }
  c->ws = NULL;
}

/* Engine.IO close packet ("1", Engine.IO v4 protocol), then WebSocket close 1001 (going
 * away). Neither is a Socket.IO DISCONNECT, so socket.io-client reconnects (through the load
 * balancer, to another instance). */
static void close_draining(struct conn *c) {
  static const char reason[] = "server shutting down";
  unsigned char p[JB_WS_CONTROL_MAX];
  size_t pl = jb_ws_close_payload(p, JB_WS_CLOSE_GOING_AWAY, reason);
  jb_log(JB_LOG_INFO, "socket closed by server", "addr", c->addr, "code", "1001", "reason", reason,
         NULL);
  jb_wsc_finish_after(c, true, jb_wsc_frame_text(JB_EIO_TEXT_CLOSE, NULL),
                      jb_wsc_frame_build(JB_WS_OP_CLOSE, p, pl, NULL, 0));
}

/* The drain: an upgrade still in progress gets 503; an open socket is closed (close_draining)
 * at once when no handler call of it is in flight, else when its last one has answered (its
 * ACK goes out first) or, with `force`, now. */
static void drain_all(struct jb_ws *ws, bool force) {
  for (size_t b = 0; b < ID_BUCKETS; b++)
    for (struct conn *c = ws->ids[b], *next; c; c = next) {
      next = c->id_next;
      if (c->st == CS_HTTP) {
        jb_wsc_http_refuse(c, 503, NULL, 3, "server shutting down");
      } else if (c->st == CS_EIO || c->st == CS_SIO) {
        if (force || c->inflight == 0)
          close_draining(c);
        else
          c->drain_close = true;
      }
    }
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len) {
  struct lws_context *lctx = lws_get_context(wsi);
  struct jb_ws *ws = lctx ? lws_context_user(lctx) : NULL;
  struct conn *c = user;
  switch (reason) {
    case LWS_CALLBACK_RAW_ADOPT:
      conn_adopt(ws, c, wsi);
      break;
    case LWS_CALLBACK_RAW_RX:
      if (!c || !c->ws) return -1;
      if (c->st == CS_HTTP)
        http_rx(c, in, len);
      else if (c->st == CS_EIO || c->st == CS_SIO)
        frames_rx(c, in, len);
      /* CLOSING / LINGER: input is discarded */
      break;
    case LWS_CALLBACK_RAW_WRITEABLE: {
      if (!c || !c->ws) return -1;
      if (c->qhead) {
        /* one lws_write per callback: the first frame alone, or the frames at the head of the
       * queue gathered into the scratch buffer (lws copies what a partial write leaves) */
        struct qnode *q = c->qhead;
        int w;
        if (!q->next || q->f->len >= SCRATCH) {
          c->qhead = q->next;
          c->qbytes -= q->f->len;
          w = lws_write(wsi, q->f->data, q->f->len, LWS_WRITE_RAW);
          jb_wsc_frame_unref(q->f);
          free(q);
        } else {
          size_t n = 0;
          while ((q = c->qhead) && n + q->f->len <= SCRATCH) {
            memcpy(ws->scratch + LWS_PRE + n, q->f->data, q->f->len);
            n += q->f->len;
            c->qhead = q->next;
            c->qbytes -= q->f->len;
            jb_wsc_frame_unref(q->f);
            free(q);
          }
          w = lws_write(wsi, ws->scratch + LWS_PRE, n, LWS_WRITE_RAW);
        }
        if (!c->qhead) c->qtail = NULL;
        if (w < 0) return -1;
        if (c->qhead || c->st == CS_CLOSING) lws_callback_on_writable(wsi);
      } else if (c->st == CS_CLOSING) {
        /* all sent: half-close and let the peer read our close frame before we go */
        shutdown(lws_get_socket_fd(wsi), SHUT_WR);
        c->st = CS_LINGER;
      }
      break;
    }
    case LWS_CALLBACK_RAW_CLOSE:
      if (c) conn_closed(c);
      break;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
      if (ws) {
        drain_items(ws);
        if (atomic_load(&ws->draining) && !atomic_load(&ws->stop)) {
          if (!ws->drained) drain_all(ws, false);
          ws->drained = true;
          if (atomic_load(&ws->drain_force) && !ws->forced) drain_all(ws, true);
          ws->forced = atomic_load(&ws->drain_force);
        }
      }
      break;
    default:
      break;
  }
  return 0;
}

static const struct lws_protocols protocols[] = {
    {"jailbox-socketio", callback, sizeof(struct conn), 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* The watched descriptors' vhost: no listener, so no listen-accept role is tried on them. */
static const struct lws_protocols watch_protocols[] = {
    {"jailbox-watch", watch_callback, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void lws_log_emit(int level, const char *line) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", line);
  size_t n = strlen(buf);
  while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = '\0';
  jb_log(level == LLL_ERR ? JB_LOG_ERROR : JB_LOG_WARN, buf, "source", "libwebsockets", NULL);
}

static void *service_main(void *arg) {
  struct jb_ws *ws = arg;
  while (!atomic_load(&ws->stop))
    if (lws_service(ws->ctx, 0) < 0) break;
  return NULL;
}

/* ---------- start / stop ---------- */

static void free_all(struct jb_ws *ws) {
  for (struct item *it = ws->qhead, *n; it; it = n) {
    n = it->next;
    jb_wsc_frame_unref(it->f);
    free(it);
  }
  for (size_t b = 0; b < ROOM_BUCKETS; b++)
    for (struct room *r = ws->rooms[b], *n; r; r = n) {
      n = r->next;
      free(r);
    }
  for (size_t b = 0; b < IP_BUCKETS; b++)
    for (struct ipcount *p = ws->ips[b], *n; p; p = n) {
      n = p->next;
      free(p);
    }
  pthread_mutex_destroy(&ws->qlock);
  free(ws);
}

/* Ends the handler threads once their calls return; calls still queued are let go. */
static void stop_workers(struct jb_ws *ws) {
  jb_pool_stop(ws->pool);
  ws->pool = NULL;
}

int jb_ws_start(struct jb_ws **out, const struct jb_ws_settings *s, const struct jb_ws_handlers *h,
                jb_error *err) {
  char host[256];
  int port;
  if (jb_parse_listen(s->listen, host, sizeof host, &port, err) < 0)
    return jb_error_wrap(err, "websocket listen address");
  struct jb_ws *ws = calloc(1, sizeof *ws);
  if (!ws) return jb_fail(err, ENOMEM, "out of memory");
  ws->s = *s;
  ws->h = *h;
  atomic_init(&ws->stop, false);
  atomic_init(&ws->draining, false);
  atomic_init(&ws->drain_force, false);
  atomic_init(&ws->n_open, 0);
  atomic_init(&ws->n_connected, 0);
  for (int b = 0; b < JB_WS_ROLE_BITS; b++) atomic_init(&ws->n_by_role[b], 0);
  pthread_mutex_init(&ws->qlock, NULL);

  lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_emit);
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
  info.user = ws;
  info.port = CONTEXT_PORT_NO_LISTEN;
  ws->ctx = lws_create_context(&info);
  if (!ws->ctx) {
    free_all(ws);
    return jb_fail(err, EIO, "libwebsockets: cannot create a context");
  }
  /* The host must be an IP literal. lws binds an IPv4 literal on an IPv6 socket to the
   * wildcard address (every interface), so IPv4 listeners get an IPv4-only vhost. */
  unsigned char a[16];
  bool v6 = inet_pton(AF_INET6, host, a) == 1;
  if (!v6 && inet_pton(AF_INET, host, a) != 1) {
    lws_context_destroy(ws->ctx);
    free_all(ws);
    return jb_fail(err, EINVAL, "websocket listen address '%s': the host must be an IP address",
                   s->listen);
  }
  memset(&info, 0, sizeof info);
  info.options = LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG |
                 (v6 ? 0 : LWS_SERVER_OPTION_DISABLE_IPV6);
  info.listen_accept_role = "raw-skt";
  info.listen_accept_protocol = protocols[0].name;
  info.protocols = protocols;
  info.vhost_name = "jailbox-socketio";
  info.iface = host;
  info.port = port;
  ws->vh = lws_create_vhost(ws->ctx, &info);
  if (!ws->vh) {
    lws_context_destroy(ws->ctx);
    free_all(ws);
    return jb_fail(err, EADDRINUSE, "websocket listener: cannot listen on %s", s->listen);
  }
  ws->port = lws_get_vhost_listen_port(ws->vh);
  memset(&info, 0, sizeof info);
  info.port = CONTEXT_PORT_NO_LISTEN_SERVER;
  info.protocols = watch_protocols;
  info.vhost_name = "jailbox-watch";
  ws->vh_watch = lws_create_vhost(ws->ctx, &info);
  if (!ws->vh_watch) {
    lws_context_destroy(ws->ctx);
    free_all(ws);
    return jb_fail(err, EIO, "libwebsockets: cannot create the watch vhost");
  }

  if (jb_pool_start(&ws->pool, s->workers, MAX_JOBS, err) < 0) {
    lws_context_destroy(ws->ctx);
    free_all(ws);
    return jb_error_wrap(err, "socket handlers");
  }
  int rc = pthread_create(&ws->service, NULL, service_main, ws);
  if (rc) {
    stop_workers(ws);
    lws_context_destroy(ws->ctx);
    free_all(ws);
    return jb_fail_errno(err, rc, "start websocket service thread");
  }
  ws->service_started = true;
  *out = ws;
  return 0;
}

int jb_ws_port(const struct jb_ws *ws) { return ws->port; }

int jb_ws_resync(struct jb_ws *ws) {
  if (!ws || !ws->h.resync) return -1;
  struct item *it = calloc(1, sizeof *it);
  if (!it) return -1;
  it->kind = IT_RESYNC;
  return post(ws, it, false);
}

void jb_ws_drain(struct jb_ws *ws) {
  if (!ws) return;
  atomic_store(&ws->draining, true);
  lws_cancel_service(ws->ctx);
}

void jb_ws_drain_wait(struct jb_ws *ws, long grace_ms) {
  if (!ws) return;
  jb_ws_drain(ws);
  struct timespec ts = {0, 10 * 1000 * 1000};
  for (long waited = 0; waited < grace_ms && atomic_load(&ws->n_open) > 0; waited += 10)
    nanosleep(&ts, NULL);
  long left = atomic_load(&ws->n_open);
  if (left > 0) {
    char n[24];
    snprintf(n, sizeof n, "%ld", left);
    jb_log(JB_LOG_WARN, "shutdown grace over; closing sockets with calls in flight", "sockets", n,
           NULL);
  }
  atomic_store(&ws->drain_force, true);
  lws_cancel_service(ws->ctx);
}

void jb_ws_stop(struct jb_ws *ws) {
  if (!ws) return;
  atomic_store(&ws->draining, true);
  atomic_store(&ws->drain_force, true);
  lws_cancel_service(ws->ctx);
  struct timespec ts = {0, 10 * 1000 * 1000};
  for (int i = 0; i < 100 && atomic_load(&ws->n_open) > 0; i++) nanosleep(&ts, NULL);
  atomic_store(&ws->stop, true);
  lws_cancel_service(ws->ctx);
  if (ws->service_started) pthread_join(ws->service, NULL);
  stop_workers(ws);
  lws_context_destroy(ws->ctx);
  free_all(ws);
}
