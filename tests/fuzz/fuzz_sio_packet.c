/* fuzz_sio_packet.c — libFuzzer harness for the Engine.IO/Socket.IO decoder of the server
 * (server/sio_packet.c): the input is one text message, decoded in each phase of a
 * connection. Every EVENT it accepts is encoded again (server/sio_packet.c's encoders) and must
 * decode to the same name, ack id and arguments. Any crash, leak, sanitizer report or broken
 * promise of the codec's contract is a bug. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/sio_packet.h"
#include "server/ws_frame.h"

/* EVENT `rx` encoded by the server's encoders, decoded again. */
static void round_trip(const struct jb_sio_rx *rx) {
  json_t *all = json_array();
  if (!all || json_array_append_new(all, json_string(rx->name)) < 0 ||
      json_array_extend(all, rx->data) < 0)
    abort();
  char *body = json_dumps(all, JSON_COMPACT);
  json_decref(all);
  if (!body) abort();
  char head[JB_SIO_HEAD_MAX];
  size_t hl = jb_sio_head(head, JB_SIO_EVENT, NULL, rx->ack);
  if (hl != strlen(head)) abort();
  size_t bl = strlen(body);
  char *text = malloc(hl + bl + 1);
  if (!text) abort();
  memcpy(text, head, hl);
  memcpy(text + hl, body, bl + 1);
  free(body);
  struct jb_sio_rx again;
  if (jb_sio_parse(text, hl + bl, JB_SIO_PHASE_CONNECTED, &again) != JB_SIO_RX_OK) abort();
  if (again.sio != JB_SIO_EVENT || again.ack != rx->ack || strcmp(again.name, rx->name) != 0 ||
      !json_equal(again.data, rx->data))
    abort();
  jb_sio_rx_clear(&again);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  for (int ph = JB_SIO_PHASE_OPEN; ph <= JB_SIO_PHASE_CONNECTED; ph++) {
    struct jb_sio_rx rx;
    enum jb_sio_verdict v = jb_sio_parse(text, size, (enum jb_sio_phase)ph, &rx);
    switch (v) {
      case JB_SIO_RX_CLOSE:
        if (!rx.reason || rx.data) abort();
        if (rx.close_code != JB_WS_CLOSE_NORMAL && rx.close_code != JB_WS_CLOSE_POLICY &&
            rx.close_code != JB_WS_CLOSE_UNSUPPORTED)
          abort();
        /* a NUL anywhere is refused first */
        if (memchr(text, '\0', size) && strcmp(rx.reason, "NUL in a text message") != 0) abort();
        break;
      case JB_SIO_RX_CONNECT_ERROR: {
        if (rx.sio != JB_SIO_CONNECT || !rx.reason || rx.data || ph != JB_SIO_PHASE_OPEN) abort();
        /* the echoed namespace fits the head and is printable ASCII without quote or backslash */
        char head[JB_SIO_HEAD_MAX];
        size_t hl = jb_sio_head(head, JB_SIO_CONNECT_ERROR, rx.nsp, -1);
        if (hl != strlen(head) || strlen(rx.nsp) > JB_SIO_MAX_NSP) abort();
        for (const char *c = rx.nsp; *c; c++)
          if (*c < 0x21 || *c > 0x7e || *c == '"' || *c == '\\') abort();
        break;
      }
      case JB_SIO_RX_OK:
        if (rx.eio == JB_EIO_MESSAGE) {
          if (size < 2 || rx.sio != text[1] - '0') abort();
          if (rx.sio == JB_SIO_CONNECT) {
            if (ph != JB_SIO_PHASE_OPEN || strcmp(rx.nsp, "/") != 0 ||
                (rx.data && !json_is_object(rx.data)))
              abort();
          } else if (rx.sio == JB_SIO_EVENT) {
            size_t nl = strlen(rx.name);
            if (ph != JB_SIO_PHASE_CONNECTED || !json_is_array(rx.data) || nl == 0 ||
                nl > JB_SIO_MAX_EVENT_NAME)
              abort();
            if (rx.ack < -1 || rx.ack > JB_SIO_ACK_ID_MAX) abort();
            round_trip(&rx);
          } else if (rx.sio == JB_SIO_ACK) {
            if (ph != JB_SIO_PHASE_CONNECTED || rx.data || rx.ack < -1 ||
                rx.ack > JB_SIO_ACK_ID_MAX)
              abort();
          } else {
            abort();
          }
        } else if (rx.eio == JB_EIO_PING) {
          if (size != (rx.probe ? 6u : 1u)) abort();
        } else if (rx.eio == JB_EIO_PONG) {
          if (rx.pong_data != (size > 1)) abort();
        } else if (rx.eio != JB_EIO_NOOP || rx.data) {
          abort();
        }
        break;
      default:
        abort();
    }
    jb_sio_rx_clear(&rx);
  }
  return 0;
}
