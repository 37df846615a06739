/* sio_packet.c — the Engine.IO v4 / Socket.IO v5 packet codec (see sio_packet.h): decoding a
 * client's text messages, with the endpoint's limits and refusals, and encoding the server's
 * packets. Pure: text in, packets out. */
#include "server/sio_packet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"
#include "server/ws_frame.h"

/* Parses a packet's JSON data: depth-limited, duplicate keys refused. New reference or NULL. */
static json_t *parse_data(const char *p, size_t n) {
  if (jb_json_depth(p, n, JB_SIO_JSON_DEPTH) > JB_SIO_JSON_DEPTH) return NULL;
  return json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL);
}

static enum jb_sio_verdict refuse(struct jb_sio_rx *out, unsigned code, const char *reason) {
  json_decref(out->data);
  out->data = NULL;
  out->close_code = code;
  out->reason = reason;
  return JB_SIO_RX_CLOSE;
}

static enum jb_sio_verdict connect_error(struct jb_sio_rx *out, const char *message) {
  out->reason = message;
  return JB_SIO_RX_CONNECT_ERROR;
}

/* CONNECT: the auth data `p` (`n` bytes, may be empty). */
static enum jb_sio_verdict decode_connect(const char *p, size_t n, enum jb_sio_phase phase,
                                          struct jb_sio_rx *out) {
  if (phase != JB_SIO_PHASE_OPEN) return refuse(out, JB_WS_CLOSE_POLICY, "CONNECT sent twice");
  if (strcmp(out->nsp, "/") != 0) return connect_error(out, "Invalid namespace");
  if (n) {
    json_t *auth = parse_data(p, n);
    if (!json_is_object(auth)) {
      json_decref(auth);
      return connect_error(out, "the auth payload must be a JSON object");
    }
    out->data = auth;
  }
  return JB_SIO_RX_OK;
}

/* EVENT: the data `p` (`n` bytes), [name, args…]. */
static enum jb_sio_verdict decode_event(const char *p, size_t n, struct jb_sio_rx *out) {
  json_t *arr = n ? parse_data(p, n) : NULL;
  json_t *name = json_array_get(arr, 0);
  if (!json_is_array(arr) || !json_is_string(name) || json_string_length(name) == 0 ||
      json_string_length(name) > JB_SIO_MAX_EVENT_NAME ||
      strlen(json_string_value(name)) != json_string_length(name)) {
    json_decref(arr);
    return refuse(out, JB_WS_CLOSE_POLICY,
                  "EVENT payload must be a non-empty array starting with the event name");
  }
  snprintf(out->name, sizeof out->name, "%s", json_string_value(name));
  json_array_remove(arr, 0);
  out->data = arr;
  return JB_SIO_RX_OK;
}

/* One Socket.IO packet: the message without its Engine.IO type, `n` bytes. */
static enum jb_sio_verdict decode_sio(const char *p, size_t n, enum jb_sio_phase phase,
                                      struct jb_sio_rx *out) {
  if (n == 0 || p[0] < '0' || p[0] > '6')
    return refuse(out, JB_WS_CLOSE_POLICY, "bad Socket.IO packet type");
  int type = p[0] - '0';
  out->sio = type;
  if (type == JB_SIO_BINARY_EVENT || type == JB_SIO_BINARY_ACK)
    return refuse(out, JB_WS_CLOSE_UNSUPPORTED, "binary Socket.IO packets are not supported");
  if (type == JB_SIO_CONNECT_ERROR)
    return refuse(out, JB_WS_CLOSE_POLICY, "CONNECT_ERROR is a server packet");
  if (phase != JB_SIO_PHASE_CONNECTED && type != JB_SIO_CONNECT)
    return refuse(out, JB_WS_CLOSE_POLICY, "packet before CONNECT");
  size_t i = 1;
  if (i < n && p[i] == '/') {
    size_t start = i;
    while (i < n && p[i] != ',') i++;
    size_t len = i - start;
    if (len > JB_SIO_MAX_NSP) return refuse(out, JB_WS_CLOSE_POLICY, "namespace too long");
    for (size_t k = start; k < i; k++)
      if ((unsigned char)p[k] < 0x21 || p[k] == '"' || p[k] == '\\' || (unsigned char)p[k] > 0x7e)
        return refuse(out, JB_WS_CLOSE_POLICY, "bad namespace");
    memcpy(out->nsp, p + start, len);
    out->nsp[len] = '\0';
    if (i < n) i++; /* the ',' */
  }
  if (type == JB_SIO_EVENT || type == JB_SIO_ACK) {
    size_t digits = 0;
    long long v = 0;
    while (i < n && p[i] >= '0' && p[i] <= '9') {
      if (++digits > 16) break;
      v = v * 10 + (p[i] - '0');
      i++;
    }
    if (digits > 16 || v > JB_SIO_ACK_ID_MAX)
      return refuse(out, JB_WS_CLOSE_POLICY, "ack id too large");
    if (digits) out->ack = v;
  }
  if (type != JB_SIO_CONNECT && strcmp(out->nsp, "/") != 0)
    return refuse(out, JB_WS_CLOSE_POLICY, "unknown namespace");
  switch (type) {
    case JB_SIO_CONNECT:
      return decode_connect(p + i, n - i, phase, out);
    case JB_SIO_DISCONNECT:
      return refuse(out, JB_WS_CLOSE_NORMAL, "client disconnected");
    case JB_SIO_EVENT:
      return decode_event(p + i, n - i, out);
    default: /* ACK: the server asks for none; its data is not looked at */
      return JB_SIO_RX_OK;
  }
}

enum jb_sio_verdict jb_sio_parse(const char *text, size_t n, enum jb_sio_phase phase,
                                 struct jb_sio_rx *out) {
  memset(out, 0, sizeof *out);
  out->sio = -1;
  out->ack = -1;
  out->nsp[0] = '/';
  if (memchr(text, '\0', n)) return refuse(out, JB_WS_CLOSE_POLICY, "NUL in a text message");
  if (n == 0) return refuse(out, JB_WS_CLOSE_POLICY, "empty Engine.IO packet");
  out->eio = text[0];
  switch (text[0]) {
    case JB_EIO_PING:
      if (n == 1) return JB_SIO_RX_OK;
      if (n == 6 && memcmp(text, "2probe", 6) == 0) {
        out->probe = true;
        return JB_SIO_RX_OK;
      }
      return refuse(out, JB_WS_CLOSE_POLICY, "bad Engine.IO ping");
    case JB_EIO_PONG:
      out->pong_data = n > 1;
      return JB_SIO_RX_OK;
    case JB_EIO_MESSAGE:
      return decode_sio(text + 1, n - 1, phase, out);
    case JB_EIO_CLOSE:
      return refuse(out, JB_WS_CLOSE_NORMAL, "client closed");
    case JB_EIO_NOOP:
      return JB_SIO_RX_OK;
    default:
      return refuse(out, JB_WS_CLOSE_POLICY, "bad Engine.IO packet type");
  }
}

void jb_sio_rx_clear(struct jb_sio_rx *rx) {
  json_decref(rx->data);
  rx->data = NULL;
}

size_t jb_sio_head(char out[JB_SIO_HEAD_MAX], enum jb_sio_type type, const char *nsp,
                   long long ack) {
  size_t n = 0;
  out[n++] = JB_EIO_MESSAGE;
  out[n++] = (char)('0' + type);
  if (nsp && strcmp(nsp, "/") != 0) {
    size_t l = strnlen(nsp, JB_SIO_MAX_NSP);
    memcpy(out + n, nsp, l);
    n += l;
    out[n++] = ',';
  }
  if (ack >= 0) n += (size_t)snprintf(out + n, JB_SIO_HEAD_MAX - n, "%lld", ack);
  out[n] = '\0';
  return n;
}

char *jb_sio_event_data(const char *event, json_t *payload) {
  json_t *arr = json_array();
  if (!arr || json_array_append_new(arr, json_string(event)) < 0 ||
      (payload && json_array_append(arr, payload) < 0)) {
    json_decref(arr);
    json_decref(payload);
    return NULL;
  }
  json_decref(payload);
  char *s = json_dumps(arr, JSON_COMPACT);
  json_decref(arr);
  return s;
}

char *jb_sio_ack_data(const json_t *reply) {
  char *s = reply && json_is_array(reply) ? json_dumps(reply, JSON_COMPACT) : NULL;
  return s ? s : strdup("[]");
}

char *jb_sio_error_data(const char *message) {
  json_t *o = json_pack("{s:s}", "message", message);
  char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return s;
}

static size_t printed(int n, size_t cap) {
  if (n < 0 || !cap) return 0;
  return (size_t)n < cap ? (size_t)n : cap - 1; /* cut short: what is in out */
}

size_t jb_sio_connect_ok(char *out, size_t cap, const char *sid) {
  return printed(snprintf(out, cap, "40{\"sid\":\"%s\"}", sid), cap);
}

size_t jb_eio_open(char *out, size_t cap, const char *sid, long ping_interval_ms,
                   long ping_timeout_ms, size_t max_payload) {
  return printed(
      snprintf(out, cap,
               "0{\"sid\":\"%s\",\"upgrades\":[],\"pingInterval\":%ld,\"pingTimeout\":%ld,"
               "\"maxPayload\":%zu}",
               sid, ping_interval_ms, ping_timeout_ms, max_payload),
      cap);
}
