/* test_sio_packet.c — the Engine.IO / Socket.IO packet codec (server/sio_packet.c): what each
 * client message decodes to in each phase, the refusals and their order, and the encoders. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/sio_packet.h"
#include "server/ws_frame.h"

/* Decodes the NUL-terminated `text`; expects verdict `v`. The caller clears *rx. */
static void parse(const char *text, enum jb_sio_phase phase, enum jb_sio_verdict v,
                  struct jb_sio_rx *rx) {
  assert_int_equal(jb_sio_parse(text, strlen(text), phase, rx), v);
}

static void refused(const char *text, enum jb_sio_phase phase, unsigned code, const char *reason) {
  struct jb_sio_rx rx;
  parse(text, phase, JB_SIO_RX_CLOSE, &rx);
  assert_int_equal(rx.close_code, code);
  assert_string_equal(rx.reason, reason);
  assert_null(rx.data);
}

static void assert_json(json_t *got, const char *want) {
  json_t *w = json_loads(want, 0, NULL);
  assert_non_null(w);
  if (!json_equal(got, w)) {
    char *s = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);
    fail_msg("got %s, want %s", s ? s : "(null)", want);
  }
  json_decref(w);
}

static const enum jb_sio_phase C = JB_SIO_PHASE_CONNECTED, O = JB_SIO_PHASE_OPEN,
                               P = JB_SIO_PHASE_CONNECTING;

/* ---------- Engine.IO ---------- */

static void engine_packets(void **state) {
  struct jb_sio_rx rx;
  parse("2", O, JB_SIO_RX_OK, &rx);
  assert_int_equal(rx.eio, JB_EIO_PING);
  assert_false(rx.probe);
  assert_int_equal(rx.sio, -1);
  parse("2probe", C, JB_SIO_RX_OK, &rx);
  assert_true(rx.probe);
  parse("3", O, JB_SIO_RX_OK, &rx);
  assert_int_equal(rx.eio, JB_EIO_PONG);
  assert_false(rx.pong_data);
  parse("3probe", O, JB_SIO_RX_OK, &rx);
  assert_true(rx.pong_data);
  parse("6", O, JB_SIO_RX_OK, &rx);
  assert_int_equal(rx.eio, JB_EIO_NOOP);
  parse("6anything", C, JB_SIO_RX_OK, &rx);
  refused("1", O, JB_WS_CLOSE_NORMAL, "client closed");
  refused("2probes", O, JB_WS_CLOSE_POLICY, "bad Engine.IO ping");
  refused("2x", O, JB_WS_CLOSE_POLICY, "bad Engine.IO ping");
  refused("", O, JB_WS_CLOSE_POLICY, "empty Engine.IO packet");
  refused("0", O, JB_WS_CLOSE_POLICY, "bad Engine.IO packet type");
  refused("5", O, JB_WS_CLOSE_POLICY, "bad Engine.IO packet type");
  refused("b4AAA", O, JB_WS_CLOSE_POLICY, "bad Engine.IO packet type");
  refused("{}", O, JB_WS_CLOSE_POLICY, "bad Engine.IO packet type");
  struct jb_sio_rx r2;
  assert_int_equal(jb_sio_parse("42[\"a\0\"]", 8, C, &r2), JB_SIO_RX_CLOSE);
  assert_string_equal(r2.reason, "NUL in a text message");
  assert_int_equal(jb_sio_parse("\0", 1, C, &r2), JB_SIO_RX_CLOSE);
  assert_string_equal(r2.reason, "NUL in a text message");
}

/* ---------- Socket.IO types ---------- */

static void socket_types(void **state) {
  refused("4", C, JB_WS_CLOSE_POLICY, "bad Socket.IO packet type");
  refused("47", C, JB_WS_CLOSE_POLICY, "bad Socket.IO packet type");
  refused("4a", C, JB_WS_CLOSE_POLICY, "bad Socket.IO packet type");
  refused("451-[\"x\",{\"_placeholder\":true,\"num\":0}]", C, JB_WS_CLOSE_UNSUPPORTED,
          "binary Socket.IO packets are not supported");
  refused("461-0[{\"_placeholder\":true,\"num\":0}]", C, JB_WS_CLOSE_UNSUPPORTED,
          "binary Socket.IO packets are not supported");
  /* binary refused even before CONNECT, and CONNECT_ERROR from a client */
  refused("45", O, JB_WS_CLOSE_UNSUPPORTED, "binary Socket.IO packets are not supported");
  refused("44{\"message\":\"x\"}", C, JB_WS_CLOSE_POLICY, "CONNECT_ERROR is a server packet");
  refused("44", O, JB_WS_CLOSE_POLICY, "CONNECT_ERROR is a server packet");
}

/* ---------- CONNECT ---------- */

static void connect_packets(void **state) {
  struct jb_sio_rx rx;
  parse("40", O, JB_SIO_RX_OK, &rx);
  assert_int_equal(rx.eio, JB_EIO_MESSAGE);
  assert_int_equal(rx.sio, JB_SIO_CONNECT);
  assert_string_equal(rx.nsp, "/");
  assert_null(rx.data);
  parse("40{\"token\":\"jbt_x\"}", O, JB_SIO_RX_OK, &rx);
  assert_json(rx.data, "{\"token\":\"jbt_x\"}");
  jb_sio_rx_clear(&rx);
  jb_sio_rx_clear(&rx);
  parse("40/,{}", O, JB_SIO_RX_OK, &rx); /* the main namespace spelt out */
  assert_json(rx.data, "{}");
  jb_sio_rx_clear(&rx);

  /* refusals answered with CONNECT_ERROR, the connection staying */
  parse("40/admin,{\"token\":1}", O, JB_SIO_RX_CONNECT_ERROR, &rx);
  assert_string_equal(rx.nsp, "/admin");
  assert_string_equal(rx.reason, "Invalid namespace");
  assert_null(rx.data);
  parse("40/admin", O, JB_SIO_RX_CONNECT_ERROR, &rx);
  assert_string_equal(rx.nsp, "/admin");
  const char *bad_auth[] = {"40[1]", "40\"s\"", "40{\"a\":1,\"a\":2}", "40{bad", "40{}x", "401"};
  for (size_t i = 0; i < sizeof bad_auth / sizeof bad_auth[0]; i++) {
    parse(bad_auth[i], O, JB_SIO_RX_CONNECT_ERROR, &rx);
    assert_string_equal(rx.reason, "the auth payload must be a JSON object");
    assert_string_equal(rx.nsp, "/");
    assert_null(rx.data);
  }
  /* depth: 32 levels pass, 33 do not */
  char deep[128] = "40";
  for (int i = 0; i < 32; i++) strcat(deep, i ? "[" : "{\"a\":");
  for (int i = 0; i < 31; i++) strcat(deep, "]");
  strcat(deep, "}");
  parse(deep, O, JB_SIO_RX_OK, &rx);
  jb_sio_rx_clear(&rx);
  char deeper[128] = "40";
  for (int i = 0; i < 33; i++) strcat(deeper, i ? "[" : "{\"a\":");
  for (int i = 0; i < 32; i++) strcat(deeper, "]");
  strcat(deeper, "}");
  parse(deeper, O, JB_SIO_RX_CONNECT_ERROR, &rx);

  /* twice: while the first is pending, and once accepted */
  refused("40", P, JB_WS_CLOSE_POLICY, "CONNECT sent twice");
  refused("40{\"token\":\"x\"}", C, JB_WS_CLOSE_POLICY, "CONNECT sent twice");
  refused("40/admin,", C, JB_WS_CLOSE_POLICY, "CONNECT sent twice");
  /* a malformed namespace is decided before "twice" */
  refused("40/a\"b,", C, JB_WS_CLOSE_POLICY, "bad namespace");
}

/* ---------- namespaces ---------- */

static void namespaces(void **state) {
  char nsp[80] = "40/";
  memset(nsp + 3, 'n', 63);
  nsp[66] = '\0';
  struct jb_sio_rx rx;
  parse(nsp, O, JB_SIO_RX_CONNECT_ERROR, &rx); /* 64 bytes with the slash: allowed, echoed */
  assert_int_equal(strlen(rx.nsp), 64);
  strcat(nsp, "n,");
  refused(nsp, O, JB_WS_CLOSE_POLICY, "namespace too long");
  refused("40/a b,", O, JB_WS_CLOSE_POLICY, "bad namespace");
  refused("40/a\\b,", O, JB_WS_CLOSE_POLICY, "bad namespace");
  refused("40/\xc3\xa9,", O, JB_WS_CLOSE_POLICY, "bad namespace");
  refused("40/\x7f,", O, JB_WS_CLOSE_POLICY, "bad namespace");
  refused("42/admin,[\"x\"]", C, JB_WS_CLOSE_POLICY, "unknown namespace");
  refused("41/admin,", C, JB_WS_CLOSE_POLICY, "unknown namespace");
  refused("43/admin,1[]", C, JB_WS_CLOSE_POLICY, "unknown namespace");
  parse("42/,[\"x\"]", C, JB_SIO_RX_OK, &rx);
  assert_string_equal(rx.name, "x");
  jb_sio_rx_clear(&rx);
}

/* ---------- EVENT, ACK, DISCONNECT ---------- */

static void events(void **state) {
  struct jb_sio_rx rx;
  parse("42[\"jailbox:pause\",{\"reason\":\"lunch\"},2]", C, JB_SIO_RX_OK, &rx);
  assert_int_equal(rx.sio, JB_SIO_EVENT);
  assert_string_equal(rx.name, "jailbox:pause");
  assert_int_equal(rx.ack, -1);
  assert_json(rx.data, "[{\"reason\":\"lunch\"},2]");
  jb_sio_rx_clear(&rx);
  parse("42[\"e\"]", C, JB_SIO_RX_OK, &rx);
  assert_json(rx.data, "[]");
  jb_sio_rx_clear(&rx);
  /* a name of 64 bytes passes; UTF-8 names are bytes */
  char e65[JB_SIO_MAX_EVENT_NAME + 2], name[128];
  memset(e65, 'e', JB_SIO_MAX_EVENT_NAME + 1);
  e65[JB_SIO_MAX_EVENT_NAME + 1] = '\0';
  snprintf(name, sizeof name, "42[\"%.64s\"]", e65);
  parse(name, C, JB_SIO_RX_OK, &rx);
  assert_int_equal(strlen(rx.name), 64);
  jb_sio_rx_clear(&rx);
  snprintf(name, sizeof name, "42[\"%s\"]", e65);
  refused(name, C, JB_WS_CLOSE_POLICY,
          "EVENT payload must be a non-empty array starting with the event name");

  const char *bad[] = {
      "42", /* no data */
      "42[]", /* no name */
      "42[1,2]", /* name not a string */
      "42[\"\"]", /* empty name */
      "42{\"a\":1}", /* not an array */
      "42[\"x\"", /* malformed */
      "42[\"x\"]]", /* trailing bytes */
      "42[\"x\",{\"a\":1,\"a\":2}]", /* duplicate keys */
      "42[\"a\\u0000b\"]", /* NUL inside the name */
      "42[\"x\",NaN]",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    refused(bad[i], C, JB_WS_CLOSE_POLICY,
            "EVENT payload must be a non-empty array starting with the event name");
  /* depth 32 in all passes, 33 does not */
  char deep[128] = "42[\"x\"";
  for (int i = 0; i < 31; i++) strcat(deep, i ? "[" : ",[");
  for (int i = 0; i < 31; i++) strcat(deep, "]");
  strcat(deep, "]");
  parse(deep, C, JB_SIO_RX_OK, &rx);
  jb_sio_rx_clear(&rx);
  char deeper[128] = "42[\"x\"";
  for (int i = 0; i < 32; i++) strcat(deeper, i ? "[" : ",[");
  for (int i = 0; i < 32; i++) strcat(deeper, "]");
  strcat(deeper, "]");
  refused(deeper, C, JB_WS_CLOSE_POLICY,
          "EVENT payload must be a non-empty array starting with the event name");

  /* before CONNECT (decided before anything else of the packet) */
  refused("42[\"x\"]", O, JB_WS_CLOSE_POLICY, "packet before CONNECT");
  refused("42[\"x\"]", P, JB_WS_CLOSE_POLICY, "packet before CONNECT");
  refused("42/a\"b,[", O, JB_WS_CLOSE_POLICY, "packet before CONNECT");
  refused("41", O, JB_WS_CLOSE_POLICY, "packet before CONNECT");
  refused("43", P, JB_WS_CLOSE_POLICY, "packet before CONNECT");
}

static void ack_ids(void **state) {
  struct jb_sio_rx rx;
  parse("420[\"x\"]", C, JB_SIO_RX_OK, &rx);
  assert_int_equal(rx.ack, 0);
  jb_sio_rx_clear(&rx);
  parse("4212[\"x\",1]", C, JB_SIO_RX_OK, &rx);
  assert_int_equal(rx.ack, 12);
  assert_json(rx.data, "[1]");
  jb_sio_rx_clear(&rx);
  parse("42/,7[\"x\"]", C, JB_SIO_RX_OK, &rx);
  assert_int_equal(rx.ack, 7);
  jb_sio_rx_clear(&rx);
  parse("429007199254740991[\"x\"]", C, JB_SIO_RX_OK, &rx);
  assert_int_equal(rx.ack, JB_SIO_ACK_ID_MAX);
  jb_sio_rx_clear(&rx);
  parse("420000000000000001[\"x\"]", C, JB_SIO_RX_OK, &rx); /* 16 digits */
  assert_int_equal(rx.ack, 1);
  jb_sio_rx_clear(&rx);
  refused("429007199254740992[\"x\"]", C, JB_WS_CLOSE_POLICY, "ack id too large");
  refused("4200000000000000001[\"x\"]", C, JB_WS_CLOSE_POLICY, "ack id too large"); /* 17 digits */
  refused("4299999999999999999999[\"x\"]", C, JB_WS_CLOSE_POLICY, "ack id too large");
  /* ACK: the id is read, the data ignored */
  parse("4312[\"anything\"", C, JB_SIO_RX_OK, &rx);
  assert_int_equal(rx.sio, JB_SIO_ACK);
  assert_int_equal(rx.ack, 12);
  assert_null(rx.data);
  parse("43", C, JB_SIO_RX_OK, &rx);
  assert_int_equal(rx.ack, -1);
  refused("4399999999999999999", C, JB_WS_CLOSE_POLICY, "ack id too large");
  /* DISCONNECT */
  refused("41", C, JB_WS_CLOSE_NORMAL, "client disconnected");
  refused("41/,", C, JB_WS_CLOSE_NORMAL, "client disconnected");
}

/* ---------- encoders ---------- */

static void encoders(void **state) {
  char h[JB_SIO_HEAD_MAX];
  assert_int_equal(jb_sio_head(h, JB_SIO_EVENT, NULL, -1), 2);
  assert_string_equal(h, "42");
  assert_int_equal(jb_sio_head(h, JB_SIO_ACK, "/", 7), 3);
  assert_string_equal(h, "437");
  jb_sio_head(h, JB_SIO_ACK, NULL, JB_SIO_ACK_ID_MAX);
  assert_string_equal(h, "439007199254740991");
  jb_sio_head(h, JB_SIO_CONNECT_ERROR, "/admin", -1);
  assert_string_equal(h, "44/admin,");
  jb_sio_head(h, JB_SIO_CONNECT_ERROR, "/", -1);
  assert_string_equal(h, "44");
  char nsp[JB_SIO_MAX_NSP + 1];
  memset(nsp, 'n', JB_SIO_MAX_NSP);
  nsp[0] = '/';
  nsp[JB_SIO_MAX_NSP] = '\0';
  assert_int_equal(jb_sio_head(h, JB_SIO_EVENT, nsp, JB_SIO_ACK_ID_MAX),
                   2 + JB_SIO_MAX_NSP + 1 + 16);
  assert_string_equal(JB_SIO_TEXT_DISCONNECT, "41");

  char *s = jb_sio_event_data("jailbox:op", json_pack("{s:i,s:s}", "a", 1, "b", "é/\""));
  assert_string_equal(s, "[\"jailbox:op\",{\"a\":1,\"b\":\"é/\\\"\"}]");
  free(s);
  s = jb_sio_event_data("e", NULL);
  assert_string_equal(s, "[\"e\"]");
  free(s);

  json_t *arr = json_pack("[i,{s:b}]", 1, "ok", 1);
  s = jb_sio_ack_data(arr);
  assert_string_equal(s, "[1,{\"ok\":true}]");
  free(s);
  json_decref(arr);
  json_t *obj = json_object();
  s = jb_sio_ack_data(obj);
  assert_string_equal(s, "[]");
  free(s);
  json_decref(obj);
  s = jb_sio_ack_data(NULL);
  assert_string_equal(s, "[]");
  free(s);

  s = jb_sio_error_data("Invalid namespace");
  assert_string_equal(s, "{\"message\":\"Invalid namespace\"}");
  free(s);

  char out[256];
  size_t n = jb_sio_connect_ok(out, 48, "abcdefghijklmnopqrstu");
  assert_int_equal(n, strlen(out));
  assert_string_equal(out, "40{\"sid\":\"abcdefghijklmnopqrstu\"}");
  n = jb_eio_open(out, sizeof out, "sid1", 25000, 20000, 1000000);
  assert_int_equal(n, strlen(out));
  assert_string_equal(
      out,
      "0{\"sid\":\"sid1\",\"upgrades\":[],\"pingInterval\":25000,\"pingTimeout\":20000,"
      "\"maxPayload\":1000000}");
  /* the encoders' packets decode back */
  struct jb_sio_rx rx;
  s = jb_sio_event_data("back", json_integer(5));
  char pk[128];
  snprintf(pk, sizeof pk, "42%s", s);
  free(s);
  parse(pk, C, JB_SIO_RX_OK, &rx);
  assert_string_equal(rx.name, "back");
  assert_json(rx.data, "[5]");
  jb_sio_rx_clear(&rx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(engine_packets),  cmocka_unit_test(socket_types),
      cmocka_unit_test(connect_packets), cmocka_unit_test(namespaces),
      cmocka_unit_test(events),          cmocka_unit_test(ack_ids),
      cmocka_unit_test(encoders),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
