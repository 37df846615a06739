/* test_progress.c — MCP progress notifications of a waiting call (api/core/progress.c): which
 * tokens turn them on, the notification's shape, `progress` growing, the message cut on a
 * character boundary, and the last output line watched per op (another op's or another
 * session's output never reaches a watch). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/progress.h"

/* What the sink got: the notifications, in order. */
static json_t *sent;
static int refuse; /* the sink answers -1 */

static int sink_send(void *ctx, json_t *msg) {
  (void)ctx;
  json_array_append_new(sent, msg);
  return refuse ? -1 : 0;
}

static const struct jb_progress_sink sink = {.send = sink_send};

static int setup(void **st) {
  (void)st;
  sent = json_array();
  refuse = 0;
  return 0;
}

static int teardown(void **st) {
  (void)st;
  json_decref(sent);
  return 0;
}

/* Whether params text `params` turns progress on. */
static bool on_for(const char *params) {
  json_t *p = json_loads(params, 0, NULL);
  struct jb_progress pr;
  jb_progress_init(&pr, p, &sink, 1);
  bool on = jb_progress_on(&pr);
  jb_progress_clear(&pr);
  json_decref(p);
  return on;
}

static void test_tokens(void **st) {
  (void)st;
  assert_true(on_for("{\"_meta\":{\"progressToken\":7}}"));
  assert_true(on_for("{\"_meta\":{\"progressToken\":\"abc\"}}"));
  assert_false(on_for("{}"));
  assert_false(on_for("{\"_meta\":{}}"));
  assert_false(on_for("{\"_meta\":{\"progressToken\":1.5}}"));
  assert_false(on_for("{\"_meta\":{\"progressToken\":null}}"));
  assert_false(on_for("{\"_meta\":{\"progressToken\":{\"a\":1}}}"));
  assert_false(on_for("{\"progressToken\":7}")); /* only under _meta */
  char big[400];
  snprintf(big, sizeof big, "{\"_meta\":{\"progressToken\":\"%0300d\"}}", 0);
  assert_false(on_for(big)); /* over 256 bytes */
  /* no sink: nothing to send to */
  json_t *p = json_loads("{\"_meta\":{\"progressToken\":7}}", 0, NULL);
  struct jb_progress pr;
  jb_progress_init(&pr, p, NULL, 1);
  assert_false(jb_progress_on(&pr));
  jb_progress_tick(&pr, "x", true); /* a no-op */
  json_decref(p);
}

static void test_notifications(void **st) {
  (void)st;
  json_t *p = json_loads("{\"_meta\":{\"progressToken\":\"t-1\"}}", 0, NULL);
  struct jb_progress pr;
  jb_progress_init(&pr, p, &sink, 10);
  json_decref(p); /* the progress keeps its own reference to the token */
  assert_true(jb_progress_due_in(&pr) > 9000);
  jb_progress_tick(&pr, "not due", false);
  assert_int_equal(json_array_size(sent), 0);
  jb_progress_tick(&pr, "first", true);
  jb_progress_tick(&pr, NULL, true);
  assert_int_equal(json_array_size(sent), 2);
  json_t *a = json_array_get(sent, 0), *b = json_array_get(sent, 1);
  assert_string_equal(json_string_value(json_object_get(a, "jsonrpc")), "2.0");
  assert_string_equal(json_string_value(json_object_get(a, "method")), "notifications/progress");
  assert_null(json_object_get(a, "id"));
  json_t *pa = json_object_get(a, "params"), *pb = json_object_get(b, "params");
  assert_string_equal(json_string_value(json_object_get(pa, "progressToken")), "t-1");
  assert_string_equal(json_string_value(json_object_get(pa, "message")), "first");
  assert_null(json_object_get(pb, "message"));
  assert_true(json_number_value(json_object_get(pb, "progress")) >
              json_number_value(json_object_get(pa, "progress")));
  /* a sink that refuses ends the notifications */
  refuse = 1;
  jb_progress_tick(&pr, "x", true);
  jb_progress_tick(&pr, "y", true);
  assert_int_equal(json_array_size(sent), 3);
  assert_false(jb_progress_on(&pr));
  jb_progress_clear(&pr);
}

static void test_message_cut(void **st) {
  (void)st;
  json_t *p = json_loads("{\"_meta\":{\"progressToken\":1}}", 0, NULL);
  struct jb_progress pr;
  jb_progress_init(&pr, p, &sink, 1);
  json_decref(p);
  char m[400];
  memset(m, 'a', 199);
  strcpy(m + 199, "\xc3\xa9tail"); /* é across the 200-byte cut */
  jb_progress_tick(&pr, m, true);
  jb_progress_tick(&pr, "bad \xff byte", true);
  const char *got = json_string_value(
      json_object_get(json_object_get(json_array_get(sent, 0), "params"), "message"));
  assert_int_equal(strlen(got), 199); /* the split character left out, not mangled */
  const char *bad = json_string_value(
      json_object_get(json_object_get(json_array_get(sent, 1), "params"), "message"));
  assert_string_equal(bad, "bad \xef\xbf\xbd byte"); /* U+FFFD */
  jb_progress_clear(&pr);
}

static void feed(const char *job, long long op, const char *data) {
  json_t *ev = json_pack("{s:s,s:I,s:s,s:s}", "jobId", job, "opId", (json_int_t)op, "stream",
                         "stdout", "data", data);
  jb_exec_line_on_bus(NULL, job, JB_EVENT_EXEC_OUTPUT, ev);
  json_decref(ev);
}

static void test_exec_lines(void **st) {
  (void)st;
  struct jb_exec_line w, other;
  char out[256];
  jb_exec_line_watch(&w, "job-a", 5);
  jb_exec_line_watch(&other, "job-b", 6);
  assert_false(jb_exec_line_last(&w, out, sizeof out));
  feed("job-a", 5, "compiling a.c\ncompiling b.c\n\n  \n");
  assert_true(jb_exec_line_last(&w, out, sizeof out));
  assert_string_equal(out, "compiling b.c");
  feed("job-a", 5, "   \r\n"); /* blanks only: the last line stays */
  assert_true(jb_exec_line_last(&w, out, sizeof out));
  assert_string_equal(out, "compiling b.c");
  feed("job-a", 5, "progress 10%\rprogress 20%\r");
  jb_exec_line_last(&w, out, sizeof out);
  assert_string_equal(out, "progress 20%");
  /* another op of the session, the same op id of another session, another kind: not seen */
  feed("job-a", 6, "secret of op 6\n");
  feed("job-b", 5, "secret of job-b\n");
  json_t *ev = json_pack("{s:I,s:s}", "opId", (json_int_t)5, "data", "state\n");
  jb_exec_line_on_bus(NULL, "job-a", JB_EVENT_OP, ev);
  json_decref(ev);
  jb_exec_line_last(&w, out, sizeof out);
  assert_string_equal(out, "progress 20%");
  assert_false(jb_exec_line_last(&other, out, sizeof out));
  /* a long line is cut to the watch's size */
  char longl[600];
  memset(longl, 'x', sizeof longl - 1);
  longl[sizeof longl - 1] = '\0';
  feed("job-a", 5, longl);
  jb_exec_line_last(&w, out, sizeof out);
  assert_int_equal(strlen(out), sizeof w.line - 1);
  jb_exec_line_unwatch(&w);
  jb_exec_line_unwatch(&other);
  feed("job-a", 5, "after\n"); /* nobody watches: nothing happens */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_tokens, setup, teardown),
      cmocka_unit_test_setup_teardown(test_notifications, setup, teardown),
      cmocka_unit_test_setup_teardown(test_message_cut, setup, teardown),
      cmocka_unit_test(test_exec_lines),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
