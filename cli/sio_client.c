/* sio_client.c — the Socket.IO v5 / Engine.IO v4 websocket client of jailboxctl (see
 * sio_client.h): libwebsockets' client role for the WebSocket, our own Engine.IO and
 * Socket.IO packet handling on top, the cross-thread send queue, size limits and strict JSON.
 * Protocols: https://socket.io/docs/v4/engine-io-protocol/ (v4),
 * https://socket.io/docs/v4/socket-io-protocol/ (v5), RFC 6455. */
#define _GNU_SOURCE
#include "cli/sio_client.h"

#include <errno.h>
#include <libwebsockets.h>
#include <time.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"

#define JSON_DEPTH 32
#define ACK_ID_MAX 9007199254740991ULL /* 2^53 - 1 (what a JS peer can hold) */

struct msg {
  struct msg *next;
  size_t len;
  unsigned char buf[]; /* LWS_PRE bytes, then the text */
};

enum st { ST_CONNECTING, ST_EIO, ST_SIO, ST_LOST, ST_CLOSED };

#define BACKOFF_FIRST_MS 250
#define BACKOFF_MAX_MS 5000

struct jb_sio {
  struct jb_sio_handlers h;
  struct lws_context *ctx;
  struct lws *wsi;
  char *host, *path, *token;
  int port;
  bool tls;
  size_t max_message;
  long connect_timeout_ms;
  long ping_window_ms; /* pingInterval + pingTimeout from the open packet */
  enum st st;
  bool ended; /* `closed` handler called: the loop stops */
  uintptr_t gen; /* connection attempt number; a wsi of an older one is stale */
  bool ever_connected;
  int reconnect_max, reconnects_left;
  long backoff_ms;
  char *rx; /* the message being reassembled */
  size_t rx_len, rx_cap;
  struct msg *out, **out_tail; /* service thread: ready for the wire */

  pthread_mutex_t lock; /* guards everything below */
  struct msg *q, **q_tail;
  uint64_t next_ack;
  bool stopping;
  bool held; /* jb_sio_hold */
  size_t peer_max; /* the server's maxPayload (0: not known yet) */
};

/* ---------- queue ---------- */

static struct msg *msg_new(const char *a, size_t alen, const char *b, size_t blen) {
  struct msg *m = malloc(sizeof *m + LWS_PRE + alen + blen);
  if (!m) return NULL;
  m->next = NULL;
  m->len = alen + blen;
  memcpy(m->buf + LWS_PRE, a, alen);
  if (blen) memcpy(m->buf + LWS_PRE + alen, b, blen);
  return m;
}

static void msgs_free(struct msg *m) {
  while (m) {
    struct msg *n = m->next;
    free(m);
    m = n;
  }
}

/* Service thread: a message straight to the wire queue. */
static void send_now(struct jb_sio *s, const char *text) {
  struct msg *m = msg_new(text, strlen(text), NULL, 0);
  if (!m || !s->wsi) {
    free(m);
    return;
  }
  *s->out_tail = m;
  s->out_tail = &m->next;
  lws_callback_on_writable(s->wsi);
}

static void end(struct jb_sio *s, bool refused, const char *why) {
  if (s->ended) return;
  s->ended = true;
  s->st = ST_CLOSED;
  if (s->h.closed) s->h.closed(s->h.ctx, s, refused, why);
}

/* The connection broke (not refused): reconnect when allowed, else end. The old wsi is left
 * to libwebsockets to close; its later callbacks are ignored (stale generation). */
static void lost(struct jb_sio *s, const char *why) {
  if (s->ended || s->st == ST_LOST) return;
  pthread_mutex_lock(&s->lock);
  bool stopping = s->stopping;
  pthread_mutex_unlock(&s->lock);
  if (stopping || !s->ever_connected || s->reconnects_left <= 0) {
    end(s, false, why);
    return;
  }
  s->reconnects_left--;
  s->st = ST_LOST;
  s->wsi = NULL;
  msgs_free(s->out); /* written for the old connection */
  s->out = NULL;
  s->out_tail = &s->out;
  s->rx_len = 0;
  if (s->h.lost) s->h.lost(s->h.ctx, s, why);
}

void jb_sio_hold(struct jb_sio *s, bool hold) {
  pthread_mutex_lock(&s->lock);
  s->held = hold;
  pthread_mutex_unlock(&s->lock);
  if (!hold) lws_cancel_service(s->ctx); /* drain what waited */
}

void jb_sio_discard_queued(struct jb_sio *s) {
  pthread_mutex_lock(&s->lock);
  msgs_free(s->q);
  s->q = NULL;
  s->q_tail = &s->q;
  pthread_mutex_unlock(&s->lock);
}

int jb_sio_emit(struct jb_sio *s, const char *name, json_t *arg, bool want_ack, uint64_t *ack_id) {
  json_t *pkt = json_pack("[s]", name);
  if (pkt && arg) json_array_append(pkt, arg);
  json_decref(arg);
  char *body = pkt ? json_dumps(pkt, JSON_COMPACT) : NULL;
  json_decref(pkt);
  if (!body) return -1;
  int rc = -1;
  pthread_mutex_lock(&s->lock);
  if (s->peer_max && strlen(body) + 24 > s->peer_max) {
    rc = -2; /* the server would close the connection (1009) on it */
  } else if (!s->stopping) {
    char head[32];
    uint64_t id = want_ack ? ++s->next_ack : 0;
    if (want_ack)
      snprintf(head, sizeof head, "42%llu", (unsigned long long)id);
    else
      snprintf(head, sizeof head, "42");
    struct msg *m = msg_new(head, strlen(head), body, strlen(body));
    if (m) {
      *s->q_tail = m;
      s->q_tail = &m->next;
      if (ack_id) *ack_id = id;
      rc = 0;
    }
  }
  pthread_mutex_unlock(&s->lock);
  free(body);
  if (rc == 0) lws_cancel_service(s->ctx);
  return rc;
}

void jb_sio_stop(struct jb_sio *s) {
  pthread_mutex_lock(&s->lock);
  s->stopping = true;
  pthread_mutex_unlock(&s->lock);
  lws_cancel_service(s->ctx);
}

/* ---------- incoming ---------- */

/* The JSON after a packet type: an object (or nothing, when `optional`). */
static int decode_object(const char *p, const char *e, bool optional, json_t **out) {
  *out = NULL;
  if (p == e) return optional ? 0 : -1;
  jb_error err = {0};
  *out = jb_json_parse_object(p, (size_t)(e - p), JSON_DEPTH, &err);
  return *out ? 0 : -1;
}

int jb_sio_decode(const char *p, size_t n, struct jb_sio_packet *out) {
  memset(out, 0, sizeof *out);
  const char *e = p + n;
  if (n == 0) return -1;
  out->eio = *p++;
  switch (out->eio) {
    case '0': /* open {sid, upgrades, pingInterval, pingTimeout, maxPayload} */
      return decode_object(p, e, false, &out->data);
    case '1':
    case '2':
    case '3':
    case '6':
      return p == e ? 0 : -1; /* no payload: a probe ("2probe") is for the polling upgrade */
    case '4':
      break;
    default:
      return -1;
  }
  if (p == e) return -1;
  out->sio = *p++;
  if (p < e && *p == '/') return -1; /* only the main namespace exists */
  switch (out->sio) {
    case '0': /* CONNECT {sid} */
    case '4': /* CONNECT_ERROR {message} */
      return decode_object(p, e, out->sio == '0', &out->data);
    case '1': /* DISCONNECT */
      return p == e ? 0 : -1;
    case '2': /* EVENT [id][name, …] */
    case '3': { /* ACK id[…] */
      while (p < e && *p >= '0' && *p <= '9') {
        out->id = out->id * 10 + (uint64_t)(*p++ - '0');
        if (out->id > ACK_ID_MAX) return -1;
      }
      if (out->sio == '3' && out->id == 0) return -1;
      size_t len = (size_t)(e - p);
      if (jb_json_depth(p, len, JSON_DEPTH) > JSON_DEPTH) return -1;
      json_t *a = json_loadb(p, len, JSON_REJECT_DUPLICATES, NULL);
      if (!json_is_array(a) || (out->sio == '2' && !json_is_string(json_array_get(a, 0)))) {
        json_decref(a);
        return -1;
      }
      out->data = a;
      return 0;
    }
    default: /* binary EVENT/ACK (5, 6) and anything else */
      return -1;
  }
}

/* Sends the Socket.IO CONNECT with the token, ahead of anything emitted. */
static int send_connect(struct jb_sio *s) {
  json_t *auth = json_pack("{s:s}", "token", s->token);
  char *a = auth ? json_dumps(auth, JSON_COMPACT) : NULL;
  json_decref(auth);
  if (!a) return -1;
  struct msg *m = msg_new("40", 2, a, strlen(a));
  explicit_bzero(a, strlen(a));
  free(a);
  if (!m) return -1;
  *s->out_tail = m;
  s->out_tail = &m->next;
  lws_callback_on_writable(s->wsi);
  return 0;
}

/* One message from the server, through the client's state machine. Returns -1 to close. */
static int on_message(struct jb_sio *s, const char *p, size_t n) {
  struct jb_sio_packet pk;
  if (jb_sio_decode(p, n, &pk) < 0) return -1;
  int rc = 0;
  json_t *d = pk.data;
  if (pk.eio == '0') {
    json_int_t pi = json_integer_value(json_object_get(d, "pingInterval"));
    json_int_t pt = json_integer_value(json_object_get(d, "pingTimeout"));
    json_int_t mp = json_integer_value(json_object_get(d, "maxPayload"));
    if (s->st != ST_CONNECTING || pi <= 0 || pt <= 0 || pi > 3600000 || pt > 3600000) {
      rc = -1;
    } else {
      s->ping_window_ms = (long)(pi + pt);
      if (mp > 0) { /* what the server accepts; what it sends is bounded by max_message */
        pthread_mutex_lock(&s->lock);
        s->peer_max = (size_t)mp;
        pthread_mutex_unlock(&s->lock);
      }
      s->st = ST_EIO;
      rc = send_connect(s);
    }
  } else if (pk.eio == '2') { /* ping → pong; the server is alive */
    send_now(s, "3");
    if (s->ping_window_ms) lws_set_timer_usecs(s->wsi, (lws_usec_t)s->ping_window_ms * 1000);
  } else if (pk.eio == '1') {
    end(s, false, "the server closed the connection");
    rc = -1;
  } else if (pk.eio == '3' || pk.eio == '6') {
    /* pong to a ping we never send, noop: ignored */
  } else if (pk.sio == '0') {
    if (s->st != ST_EIO) {
      rc = -1;
    } else {
      const char *sid = json_string_value(json_object_get(d, "sid"));
      s->st = ST_SIO;
      s->ever_connected = true;
      s->reconnects_left = s->reconnect_max; /* a working connection restores the budget */
      s->backoff_ms = BACKOFF_FIRST_MS;
      lws_set_timer_usecs(s->wsi, (lws_usec_t)s->ping_window_ms * 1000);
      if (s->h.connected) s->h.connected(s->h.ctx, s, sid ? sid : "");
      lws_cancel_service(s->ctx); /* drain what was emitted before CONNECT */
    }
  } else if (pk.sio == '4') {
    const char *m = json_string_value(json_object_get(d, "message"));
    char why[512];
    snprintf(why, sizeof why, "%s", m ? m : "connection refused");
    end(s, true, why);
    rc = -1;
  } else if (pk.sio == '1') {
    end(s, false, "the server disconnected the socket");
    rc = -1;
  } else if (s->st != ST_SIO) {
    rc = -1;
  } else if (pk.sio == '3') {
    if (s->h.ack) s->h.ack(s->h.ctx, s, pk.id, d);
  } else { /* EVENT */
    json_t *args = json_array();
    for (size_t i = 1; args && i < json_array_size(d); i++)
      json_array_append(args, json_array_get(d, i));
    if (!args)
      rc = -1;
    else if (s->h.event)
      s->h.event(s->h.ctx, s, json_string_value(json_array_get(d, 0)), args, pk.id);
    json_decref(args);
  }
  json_decref(d);
  return rc;
}

/* ---------- libwebsockets ---------- */

static bool conn_reason(enum lws_callback_reasons r) {
  return r == LWS_CALLBACK_CLIENT_CONNECTION_ERROR || r == LWS_CALLBACK_CLIENT_ESTABLISHED ||
         r == LWS_CALLBACK_CLIENT_RECEIVE || r == LWS_CALLBACK_CLIENT_WRITEABLE ||
         r == LWS_CALLBACK_TIMER || r == LWS_CALLBACK_CLIENT_CLOSED ||
         r == LWS_CALLBACK_WSI_DESTROY;
}

/* Moves what other threads emitted to the wire queue (once CONNECT is accepted), or ends
 * the client when jb_sio_stop was called. */
static void drain(struct jb_sio *s) {
  pthread_mutex_lock(&s->lock);
  bool stop = s->stopping;
  struct msg *q = NULL;
  if ((s->st == ST_SIO && !s->held) || stop) {
    q = s->q;
    s->q = NULL;
    s->q_tail = &s->q;
  }
  pthread_mutex_unlock(&s->lock);
  if (stop) {
    msgs_free(q);
    if (s->wsi && s->st == ST_SIO) send_now(s, "41"); /* Socket.IO DISCONNECT, then close */
    end(s, false, "stopped");
    return;
  }
  if (q && s->wsi) {
    *s->out_tail = q;
    while (q->next) q = q->next;
    s->out_tail = &q->next;
    lws_callback_on_writable(s->wsi);
  } else {
    msgs_free(q);
  }
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len) {
  struct jb_sio *s = lws_context_user(lws_get_context(wsi));
  if (!s) return 0;
  if (reason == LWS_CALLBACK_EVENT_WAIT_CANCELLED) {
    drain(s);
    return 0;
  }
  if (!conn_reason(reason)) return 0;
  bool io = reason == LWS_CALLBACK_CLIENT_RECEIVE || reason == LWS_CALLBACK_CLIENT_WRITEABLE ||
            reason == LWS_CALLBACK_TIMER;
  /* a connection that is no longer ours (replaced by a reconnection): close it */
  if ((uintptr_t)lws_get_opaque_user_data(wsi) != s->gen || s->st == ST_LOST) return io ? -1 : 0;
  if (s->ended) { /* flush what is left (the DISCONNECT after a stop), then close */
    if (reason == LWS_CALLBACK_CLIENT_CLOSED || reason == LWS_CALLBACK_WSI_DESTROY ||
        reason == LWS_CALLBACK_CLIENT_CONNECTION_ERROR)
      s->wsi = NULL;
    if (reason != LWS_CALLBACK_CLIENT_WRITEABLE) return io ? -1 : 0;
    struct msg *m = s->out;
    if (!m) return -1;
    s->out = m->next;
    if (!s->out) s->out_tail = &s->out;
    int w = lws_write(wsi, m->buf + LWS_PRE, m->len, LWS_WRITE_TEXT);
    free(m);
    if (w < 0) return -1;
    lws_callback_on_writable(wsi);
    return 0;
  }
  char why[300];
  switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
      snprintf(why, sizeof why, "cannot connect: %s", in ? (const char *)in : "connection failed");
      lost(s, why);
      return 0;
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
      s->wsi = wsi;
      lws_set_timer_usecs(wsi, (lws_usec_t)s->connect_timeout_ms * 1000);
      return 0;
    case LWS_CALLBACK_CLIENT_RECEIVE: {
      if (lws_frame_is_binary(wsi)) {
        lws_close_reason(wsi, LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE, NULL, 0);
        end(s, false, "protocol error: binary frame");
        return -1;
      }
      if (lws_is_first_fragment(wsi)) s->rx_len = 0;
      if (s->rx_len + len > s->max_message) {
        lws_close_reason(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, NULL, 0);
        snprintf(why, sizeof why, "the server sent a message over %zu bytes", s->max_message);
        end(s, false, why);
        return -1;
      }
      if (s->rx_len + len + 1 > s->rx_cap) {
        size_t cap = s->rx_cap ? s->rx_cap : 4096;
        while (cap < s->rx_len + len + 1) cap *= 2;
        char *nb = realloc(s->rx, cap);
        if (!nb) {
          end(s, false, "out of memory");
          return -1;
        }
        s->rx = nb;
        s->rx_cap = cap;
      }
      memcpy(s->rx + s->rx_len, in, len);
      s->rx_len += len;
      if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi)) return 0;
      if (on_message(s, s->rx, s->rx_len) < 0) {
        if (!s->ended) {
          lws_close_reason(wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION, NULL, 0);
          end(s, false, "protocol error: unexpected or malformed packet from the server");
        }
        return -1;
      }
      return 0;
    }
    case LWS_CALLBACK_CLIENT_WRITEABLE: {
      struct msg *m = s->out;
      if (!m) return 0;
      s->out = m->next;
      if (!s->out) s->out_tail = &s->out;
      int w = lws_write(wsi, m->buf + LWS_PRE, m->len, LWS_WRITE_TEXT);
      free(m);
      if (w < 0) {
        lost(s, "write failed");
        return -1;
      }
      if (s->out) lws_callback_on_writable(wsi);
      return 0;
    }
    case LWS_CALLBACK_TIMER:
      lost(s, s->st == ST_SIO ? "no ping from the server in time" : "connect timed out");
      return -1;
    case LWS_CALLBACK_CLIENT_CLOSED:
    case LWS_CALLBACK_WSI_DESTROY:
      lost(s, "the connection closed");
      return 0;
    default:
      return 0;
  }
}

static const struct lws_protocols protocols[] = {
    {"jailbox-sio-client", callback, 0, 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---------- life cycle ---------- */

static int parse_url(struct jb_sio *s, const char *url, jb_error *err) {
  const char *p;
  if (strncmp(url, "ws://", 5) == 0)
    p = url + 5;
  else if (strncmp(url, "wss://", 6) == 0)
    p = url + 6, s->tls = true;
  else if (strncmp(url, "http://", 7) == 0)
    p = url + 7;
  else if (strncmp(url, "https://", 8) == 0)
    p = url + 8, s->tls = true;
  else
    return jb_fail(err, EINVAL, "Socket.IO URL '%s': use ws:// or wss://", url);
  const char *slash = strchr(p, '/');
  size_t hl = slash ? (size_t)(slash - p) : strlen(p);
  char hostport[300];
  if (hl == 0 || hl >= sizeof hostport)
    return jb_fail(err, EINVAL, "Socket.IO URL '%s': bad host", url);
  memcpy(hostport, p, hl);
  hostport[hl] = '\0';
  s->port = s->tls ? 443 : 80;
  char *colon = strrchr(hostport, ':');
  char *rb = strrchr(hostport, ']');
  if (colon && (!rb || colon > rb)) {
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (*end || v <= 0 || v > 65535)
      return jb_fail(err, EINVAL, "Socket.IO URL '%s': bad port", url);
    s->port = (int)v;
    *colon = '\0';
  }
  char *h = hostport;
  if (h[0] == '[') {
    h++;
    char *r = strchr(h, ']');
    if (r) *r = '\0';
  }
  const char *prefix = slash ? slash : "";
  size_t pl = strlen(prefix);
  while (pl > 0 && prefix[pl - 1] == '/') pl--;
  s->host = strdup(h);
  if (!s->host ||
      asprintf(&s->path, "%.*s/socket.io/?EIO=4&transport=websocket", (int)pl, prefix) < 0) {
    s->path = NULL;
    return jb_fail(err, ENOMEM, "out of memory");
  }
  return 0;
}

/* Starts connection attempt number ++gen. Returns 0, or -1 when it failed at once. */
static int connect_now(struct jb_sio *s) {
  struct lws_client_connect_info cc;
  memset(&cc, 0, sizeof cc);
  cc.context = s->ctx;
  cc.address = s->host;
  cc.port = s->port;
  cc.path = s->path;
  cc.host = s->host;
  cc.origin = s->host;
  cc.ssl_connection = s->tls ? LCCSCF_USE_SSL : 0;
  cc.local_protocol_name = protocols[0].name;
  cc.opaque_user_data = (void *)++s->gen;
  s->st = ST_CONNECTING;
  s->wsi = NULL;
  struct lws *w = lws_client_connect_via_info(&cc);
  if (!w) return -1;
  if (s->st == ST_CONNECTING && !s->ended) s->wsi = w;
  return 0;
}

int jb_sio_open(struct jb_sio **out, const struct jb_sio_settings *set,
                const struct jb_sio_handlers *h, jb_error *err) {
  struct jb_sio *s = calloc(1, sizeof *s);
  if (!s) return jb_fail(err, ENOMEM, "out of memory");
  pthread_mutex_init(&s->lock, NULL);
  s->h = *h;
  s->q_tail = &s->q;
  s->out_tail = &s->out;
  s->max_message = set->max_message ? set->max_message : (16u << 20);
  s->connect_timeout_ms = set->connect_timeout_ms > 0 ? set->connect_timeout_ms : 10000;
  s->reconnect_max = s->reconnects_left = set->reconnect_max > 0 ? set->reconnect_max : 0;
  s->backoff_ms = BACKOFF_FIRST_MS;
  s->token = strdup(set->token ? set->token : "");
  if (!s->token || parse_url(s, set->base_url, err) < 0) {
    if (!s->token) jb_fail(err, ENOMEM, "out of memory");
    jb_sio_free(s);
    return -1;
  }
  lws_set_log_level(LLL_ERR, NULL);
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.port = CONTEXT_PORT_NO_LISTEN;
  info.protocols = protocols;
  info.user = s;
  info.options = s->tls ? LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT : 0;
  info.fd_limit_per_thread = 16;
  s->ctx = lws_create_context(&info);
  if (!s->ctx) {
    jb_sio_free(s);
    return jb_fail(err, EIO, "libwebsockets: cannot create a client context");
  }
  if (connect_now(s) < 0 && !s->ended) {
    jb_sio_free(s);
    return jb_fail(err, ECONNREFUSED, "cannot start connecting to %s:%d", s->host, s->port);
  }
  *out = s;
  return 0;
}

/* Sleeps `ms` in slices, returning early (true) when jb_sio_stop was called. */
static bool backoff_sleep(struct jb_sio *s, long ms) {
  for (long left = ms; left > 0; left -= 50) {
    pthread_mutex_lock(&s->lock);
    bool stop = s->stopping;
    pthread_mutex_unlock(&s->lock);
    if (stop) return true;
    struct timespec ts = {0, (left < 50 ? left : 50) * 1000000L};
    nanosleep(&ts, NULL);
  }
  return false;
}

int jb_sio_run(struct jb_sio *s) {
  while (!s->ended) {
    if (s->st == ST_LOST) {
      lws_cancel_service(s->ctx); /* so that this service call does not wait */
      lws_service(s->ctx, 0); /* let libwebsockets close the old connection */
      if (backoff_sleep(s, s->backoff_ms)) {
        end(s, false, "stopped");
        break;
      }
      s->backoff_ms = s->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff_ms * 2;
      if (connect_now(s) < 0 && s->st == ST_CONNECTING) lost(s, "cannot start connecting");
      continue;
    }
    if (lws_service(s->ctx, 0) < 0) end(s, false, "service loop failed");
  }
  /* let the DISCONNECT and the close frame go out: at most 20 rounds, none of them waiting
   * (lws_service would otherwise sleep until the next network event) */
  for (int i = 0; i < 20 && s->wsi && s->out; i++) {
    lws_callback_on_writable(s->wsi);
    lws_cancel_service(s->ctx);
    lws_service(s->ctx, 0);
  }
  return 0;
}

void jb_sio_free(struct jb_sio *s) {
  if (!s) return;
  if (s->ctx) lws_context_destroy(s->ctx);
  msgs_free(s->q);
  msgs_free(s->out);
  free(s->rx);
  free(s->host);
  free(s->path);
  if (s->token) explicit_bzero(s->token, strlen(s->token));
  free(s->token);
  pthread_mutex_destroy(&s->lock);
  free(s);
}
