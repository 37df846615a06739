/* test_ctl.c — jailboxctl's decoders and helpers: Socket.IO server messages (jb_sio_decode),
 * MCP stdio lines (jb_mcp_stdio_check), terminal-safe text, path escaping, the Socket.IO
 * address derived from the REST one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cli/ctl.h"
#include "cli/sio_client.h"

static int decode(const char *text, struct jb_sio_packet *pk) {
  return jb_sio_decode(text, strlen(text), pk);
}

static void test_decode_accepts(void **state) {
  struct jb_sio_packet pk;
  assert_int_equal(decode("0{\"sid\":\"a\",\"upgrades\":[],\"pingInterval\":25000,\"pingTimeout\":"
                          "20000,\"maxPayload\":1048576}",
                          &pk),
                   0);
  assert_int_equal(pk.eio, '0');
  assert_int_equal(json_integer_value(json_object_get(pk.data, "pingInterval")), 25000);
  json_decref(pk.data);
  assert_int_equal(decode("2", &pk), 0);
  assert_int_equal(pk.eio, '2');
  assert_null(pk.data);
  assert_int_equal(decode("40{\"sid\":\"s1\"}", &pk), 0);
  assert_int_equal(pk.sio, '0');
  assert_string_equal(json_string_value(json_object_get(pk.data, "sid")), "s1");
  json_decref(pk.data);
  assert_int_equal(decode("44{\"message\":\"unknown or revoked token\"}", &pk), 0);
  assert_int_equal(pk.sio, '4');
  json_decref(pk.data);
  assert_int_equal(decode("42[\"jailbox:state\",{\"state\":\"active\"}]", &pk), 0);
  assert_int_equal(pk.sio, '2');
  assert_int_equal(pk.id, 0);
  assert_string_equal(json_string_value(json_array_get(pk.data, 0)), "jailbox:state");
  json_decref(pk.data);
  assert_int_equal(decode("439007199254740991[{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}]", &pk),
                   0);
  assert_int_equal(pk.sio, '3');
  assert_true(pk.id == 9007199254740991ULL);
  json_decref(pk.data);
  assert_int_equal(decode("41", &pk), 0);
  assert_int_equal(pk.sio, '1');
}

static void test_decode_refuses(void **state) {
  static const char *const bad[] = {
      "", /* empty */
      "0", /* open without its object */
      "0[1]", /* open that is not an object */
      "2probe", /* polling-upgrade probe: websocket only */
      "b4AAAA", /* Engine.IO binary */
      "4", /* message without a Socket.IO packet */
      "42/admin,[\"x\"]", /* another namespace */
      "43[1]", /* ACK without an id */
      "4390071992547409920[1]", /* ACK id over 2^53 - 1 */
      "42[1,2]", /* EVENT without a name */
      "42{\"a\":1}", /* EVENT that is not an array */
      "42[\"x\",{\"a\":1,\"a\":2}]", /* duplicate keys */
      "45-[\"x\",{\"_placeholder\":true,\"num\":0}]", /* binary EVENT */
      "46-0[]", /* binary ACK */
      "44", /* CONNECT_ERROR without its object */
      "41x", /* DISCONNECT with a payload */
      "9", /* unknown type */
      "42[\"x\"] trailing", /* bytes after the JSON */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct jb_sio_packet pk;
    if (decode(bad[i], &pk) == 0) fail_msg("decoded %s", bad[i]);
  }
  char deep[200] = "42[\"x\",";
  for (int i = 0; i < 40; i++) strcat(deep, "[");
  for (int i = 0; i < 40; i++) strcat(deep, "]");
  strcat(deep, "]");
  struct jb_sio_packet pk;
  assert_int_equal(decode(deep, &pk), -1);
}

static int check(const char *line, json_t **msg, json_t **id, int *code, char *why) {
  return jb_mcp_stdio_check(line, strlen(line), msg, id, code, why, 300);
}

static void test_mcp_lines(void **state) {
  json_t *msg, *id;
  int code;
  char why[300];
  assert_int_equal(
      check("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\"}\r", &msg, &id, &code, why),
      1);
  assert_string_equal(json_string_value(json_object_get(msg, "method")), "tools/list");
  assert_null(id);
  json_decref(msg);
  assert_int_equal(check("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &msg,
                         &id, &code, why),
                   1);
  json_decref(msg);
  assert_int_equal(check("   ", &msg, &id, &code, why), 0);
  assert_int_equal(check("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", &msg, &id, &code, why), 0);
  assert_null(msg);

  assert_int_equal(check("{nope", &msg, &id, &code, why), -1);
  assert_int_equal(code, -32700);
  assert_null(id);
  assert_int_equal(
      check("{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"x\"}", &msg, &id, &code, why), -1);
  assert_int_equal(code, -32700);
  assert_int_equal(
      check("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", &msg, &id, &code, why), -1);
  assert_int_equal(code, -32600);
  assert_non_null(strstr(why, "batches"));
  assert_int_equal(
      check("{\"jsonrpc\":\"1.0\",\"id\":\"r1\",\"method\":\"ping\"}", &msg, &id, &code, why), -1);
  assert_int_equal(code, -32600);
  assert_string_equal(json_string_value(id), "r1"); /* answered to its id */
  json_decref(id);
  assert_int_equal(
      check("{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"ping\"}", &msg, &id, &code, why), -1);
  assert_int_equal(code, -32600);
  assert_null(id);
  assert_int_equal(check("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":5}", &msg, &id, &code, why), -1);
  assert_int_equal(code, -32600);
  json_decref(id);
  assert_int_equal(check("\"just a string\"", &msg, &id, &code, why), -1);
  assert_int_equal(code, -32600);
  char deep[100] = "";
  for (int i = 0; i < 40; i++) strcat(deep, "[");
  for (int i = 0; i < 40; i++) strcat(deep, "]");
  assert_int_equal(check(deep, &msg, &id, &code, why), -1);
  assert_int_equal(code, -32700);
  /* a NUL byte inside the line is not JSON */
  assert_int_equal(
      jb_mcp_stdio_check("{\"jsonrpc\":\"2.0\"\0}", 19, &msg, &id, &code, why, sizeof why), -1);
}

static void test_text_and_escape(void **state) {
  assert_string_equal(jb_ctl_text("a\x1b]0;x\x07"
                                  "b\x7f"
                                  "c\xc2\x9b"
                                  "d\tе"),
                      "a?]0;x?b?c?d?е");
  assert_string_equal(jb_ctl_text(NULL), "-");
  /* bidi override, isolate, zero-width space, BOM: each one '?'; other text kept */
  assert_string_equal(
      jb_ctl_text("rm \xe2\x80\xaegpj.exe\xe2\x81\xa6x\xe2\x80\x8by\xef\xbb\xbfz \xc3\xa9"),
      "rm ?gpj.exe?x?y?z \xc3\xa9");
  char big[2000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  const char *t = jb_ctl_text(big);
  assert_int_equal(strlen(t), 512 + 3);
  char *e = jb_ctl_escape("job/../x y%");
  assert_string_equal(e, "job%2F..%2Fx%20y%25");
  free(e);
}

static void test_ws_base(void **state) {
  char buf[256];
  struct jb_ctl o = {.verb = "t", .url = "http://127.0.0.1:8080"};
  assert_int_equal(jb_ctl_ws_base(&o, buf, sizeof buf), 0);
  assert_string_equal(buf, "ws://127.0.0.1:8081");
  o.url = "https://jailbox.example";
  assert_int_equal(jb_ctl_ws_base(&o, buf, sizeof buf), 0);
  assert_string_equal(buf, "wss://jailbox.example:444");
  o.ws_url = "ws://h:9/prefix/";
  assert_int_equal(jb_ctl_ws_base(&o, buf, sizeof buf), 0);
  assert_string_equal(buf, "ws://h:9/prefix");
  o.ws_url = NULL;
  o.url = "not a url";
  assert_int_equal(jb_ctl_ws_base(&o, buf, sizeof buf), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_accepts), cmocka_unit_test(test_decode_refuses),
      cmocka_unit_test(test_mcp_lines),      cmocka_unit_test(test_text_and_escape),
      cmocka_unit_test(test_ws_base),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
