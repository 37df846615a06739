/* ws_conn.c — the connections of the Socket.IO transport (see ws_private.h): outgoing frames
 * built once and shared by reference, the connection table, rooms and per-address counts, and
 * each connection's bounded send queue with the ways a connection is closed. Service thread
 * only. */
#define _GNU_SOURCE
#include "server/ws_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/log.h"

struct frame *jb_wsc_frame_build(unsigned opcode, const void *a, size_t alen, const void *b,
                                 size_t blen) {
  size_t plen = alen + blen;
  unsigned char head[JB_WS_HEAD_MAX];
  size_t hl = opcode == 0xff ? 0 : jb_ws_frame_head(head, opcode, plen);
  struct frame *f = malloc(sizeof *f + LWS_PRE + hl + plen);
  if (!f) return NULL;
  f->refs = 1;
  f->data = f->mem + LWS_PRE;
  f->len = hl + plen;
  unsigned char *d = f->data;
  if (hl) memcpy(d, head, hl);
  if (alen) memcpy(d + hl, a, alen);
  if (blen) memcpy(d + hl + alen, b, blen);
  return f;
}

struct frame *jb_wsc_frame_text(const char *a, const char *b) {
  return jb_wsc_frame_build(0x1, a, strlen(a), b, b ? strlen(b) : 0);
}

void jb_wsc_frame_unref(struct frame *f) {
  if (f && --f->refs == 0) free(f);
}

struct frame *jb_wsc_frame_sio(enum jb_sio_type type, long long ack, char *data) {
  if (!data) return NULL;
  char head[JB_SIO_HEAD_MAX];
  jb_sio_head(head, type, NULL, ack);
  struct frame *f = jb_wsc_frame_text(head, data);
  free(data);
  return f;
}

struct frame *jb_wsc_frame_event(const char *event, json_t *payload) {
  return jb_wsc_frame_sio(JB_SIO_EVENT, -1, jb_sio_event_data(event, payload));
}

struct frame *jb_wsc_frame_ack(long long ack, const json_t *reply) {
  return jb_wsc_frame_sio(JB_SIO_ACK, ack, jb_sio_ack_data(reply));
}

static uint32_t hash_str(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* ---------- connection table, rooms, address counts ---------- */

struct conn *jb_wsc_find(struct jb_ws *ws, uint64_t id) {
  for (struct conn *c = ws->ids[id & (ID_BUCKETS - 1)]; c; c = c->id_next)
    if (c->id == id) return c;
  return NULL;
}

void jb_wsc_unlink_id(struct conn *c) {
  struct conn **pp = &c->ws->ids[c->id & (ID_BUCKETS - 1)];
  for (; *pp; pp = &(*pp)->id_next)
    if (*pp == c) {
      *pp = c->id_next;
      return;
    }
}

void jb_wsc_peer_of(const struct conn *c, struct jb_ws_peer *p) {
  memset(p, 0, sizeof *p);
  p->conn = c->id;
  p->role = c->role;
  memcpy(p->cred, c->cred, sizeof p->cred);
  snprintf(p->room, sizeof p->room, "%s", c->room ? c->room->name : "");
  snprintf(p->addr, sizeof p->addr, "%s", c->addr);
}

int jb_wsc_room_join(struct conn *c, const char *name) {
  struct jb_ws *ws = c->ws;
  struct room **slot = &ws->rooms[hash_str(name) & (ROOM_BUCKETS - 1)], *r;
  for (r = *slot; r; r = r->next)
    if (strcmp(r->name, name) == 0) break;
  if (!r) {
    r = calloc(1, sizeof *r);
    if (!r) return -1;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->next = *slot;
    *slot = r;
  }
  c->room = r;
  c->r_prev = NULL;
  c->r_next = r->head;
  if (r->head) r->head->r_prev = c;
  r->head = c;
  return 0;
}

void jb_wsc_room_leave(struct conn *c) {
  struct room *r = c->room;
  if (!r) return;
  if (c->r_prev)
    c->r_prev->r_next = c->r_next;
  else
    r->head = c->r_next;
  if (c->r_next) c->r_next->r_prev = c->r_prev;
  c->room = NULL;
  c->r_prev = c->r_next = NULL;
  if (!r->head) {
    struct room **pp = &c->ws->rooms[hash_str(r->name) & (ROOM_BUCKETS - 1)];
    for (; *pp; pp = &(*pp)->next)
      if (*pp == r) {
        *pp = r->next;
        break;
      }
    free(r);
  }
}

struct room *jb_wsc_room_find(struct jb_ws *ws, const char *name) {
  for (struct room *r = ws->rooms[hash_str(name) & (ROOM_BUCKETS - 1)]; r; r = r->next)
    if (strcmp(r->name, name) == 0) return r;
  return NULL;
}

long jb_wsc_ip_add(struct conn *c) {
  struct ipcount **slot = &c->ws->ips[hash_str(c->addr) & (IP_BUCKETS - 1)], *p;
  for (p = *slot; p; p = p->next)
    if (strcmp(p->addr, c->addr) == 0) break;
  if (!p) {
    p = calloc(1, sizeof *p);
    if (!p) return -1;
    snprintf(p->addr, sizeof p->addr, "%s", c->addr);
    p->next = *slot;
    *slot = p;
  }
  c->ip = p;
  return ++p->n;
}

void jb_wsc_ip_remove(struct conn *c) {
  struct ipcount *p = c->ip;
  if (!p) return;
  c->ip = NULL;
  if (--p->n > 0) return;
  struct ipcount **pp = &c->ws->ips[hash_str(p->addr) & (IP_BUCKETS - 1)];
  for (; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  free(p);
}

/* ---------- sending (service thread) ---------- */

void jb_wsc_queue_clear(struct conn *c) {
  while (c->qhead) {
    struct qnode *n = c->qhead;
    c->qhead = n->next;
    jb_wsc_frame_unref(n->f);
    free(n);
  }
  c->qtail = NULL;
  c->qbytes = 0;
}

void jb_wsc_send(struct conn *c, struct frame *f, bool force) {
  if (!f || c->st >= CS_CLOSING) return;
  if (!force && c->qhead && c->qbytes + f->len > c->ws->s.send_queue_bytes) {
    jb_wsc_fail(c, JB_WS_CLOSE_POLICY, "send queue overflow");
    return;
  }
  /* nothing waits before it (ours or lws's): out now, not one poll round later. This runs on
   * the service thread; lws keeps what a partial write leaves and sends it before the
   * writeable callback runs again (lws_send_pipe_choked stays true until then). */
  if (!force && !c->qhead && (c->st == CS_EIO || c->st == CS_SIO) &&
      !lws_send_pipe_choked(c->wsi)) {
    if (lws_write(c->wsi, f->data, f->len, LWS_WRITE_RAW) < 0) { /* the peer is gone */
      jb_wsc_queue_clear(c);
      c->st = CS_CLOSING;
      lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    }
    return;
  }
  struct qnode *n = malloc(sizeof *n);
  if (!n) {
    jb_wsc_fail(c, JB_WS_CLOSE_POLICY, "out of memory");
    return;
  }
  f->refs++;
  n->f = f;
  n->next = NULL;
  if (c->qtail)
    c->qtail->next = n;
  else
    c->qhead = n;
  c->qtail = n;
  c->qbytes += f->len;
  lws_callback_on_writable(c->wsi);
}

void jb_wsc_send_text(struct conn *c, const char *a, const char *b) {
  struct frame *f = jb_wsc_frame_text(a, b);
  if (!f) {
    jb_wsc_fail(c, JB_WS_CLOSE_POLICY, "out of memory");
    return;
  }
  jb_wsc_send(c, f, false);
  jb_wsc_frame_unref(f);
}

static void kill_cb(lws_sorted_usec_list_t *sul) {
  struct conn *c = lws_container_of(sul, struct conn, sul_hs);
  lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

void jb_wsc_finish(struct conn *c, struct frame *f) { jb_wsc_finish_after(c, false, NULL, f); }

void jb_wsc_finish_after(struct conn *c, bool keep, struct frame *last, struct frame *f) {
  if (c->st >= CS_CLOSING) {
    jb_wsc_frame_unref(last);
    jb_wsc_frame_unref(f);
    return;
  }
  if (!keep) jb_wsc_queue_clear(c);
  jb_wsc_room_leave(c);
  lws_sul_cancel(&c->sul_ping);
  if (last) jb_wsc_send(c, last, true);
  jb_wsc_frame_unref(last);
  if (f) jb_wsc_send(c, f, true);
  jb_wsc_frame_unref(f);
  c->st = CS_CLOSING;
  lws_callback_on_writable(c->wsi);
  lws_sul_schedule(lws_get_context(c->wsi), 0, &c->sul_hs, kill_cb, (lws_usec_t)LINGER_MS * 1000);
}

void jb_wsc_fail(struct conn *c, unsigned code, const char *reason) {
  unsigned char p[JB_WS_CONTROL_MAX];
  size_t pl = jb_ws_close_payload(p, code, reason);
  if (c->st == CS_HTTP) { /* no WebSocket yet: just drop */
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    c->st = CS_CLOSING;
    return;
  }
  if (c->st < CS_CLOSING && code != JB_WS_CLOSE_NORMAL && reason) {
    char cs[8];
    snprintf(cs, sizeof cs, "%u", code);
    jb_log(JB_LOG_INFO, "socket closed by server", "addr", c->addr, "code", cs, "reason",
           reason ? reason : "", NULL);
  }
  jb_wsc_finish(c, jb_wsc_frame_build(JB_WS_OP_CLOSE, p, pl, NULL, 0));
}

void jb_wsc_http_refuse_verdict(struct conn *c, const struct jb_ws_verdict *v) {
  size_t len = 0;
  char *text = jb_ws_http_error(v, &len);
  struct frame *f = text ? jb_wsc_frame_build(0xff, text, len, NULL, 0) : NULL;
  free(text);
  if (!f) {
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    c->st = CS_CLOSING;
    return;
  }
  jb_wsc_finish(c, f);
}

void jb_wsc_http_refuse(struct conn *c, int status, const char *extra_headers, int eio_code,
                        const char *message) {
  struct jb_ws_verdict v = {
      .status = status, .headers = extra_headers, .eio_code = eio_code, .message = message};
  jb_wsc_http_refuse_verdict(c, &v);
}
