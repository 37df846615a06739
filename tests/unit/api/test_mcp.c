/* test_mcp.c — the MCP protocol layer (api/core/mcp.h) without a transport: JSON-RPC checks,
 * the revision rules of 2026-07-28 and the legacy revisions, the HTTP header rules, and the
 * framing of tool results and failures (isError against JSON-RPC errors). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "api/core/mcp.h"
#include "api/core/ops.h"
#include "api/core/progress.h"

static const struct jb_mcp_transport none = {0};

static json_t *msg(const char *text) {
  json_error_t e;
  json_t *m = json_loads(text, 0, &e);
  assert_non_null(m);
  return m;
}

/* jb_mcp_check of `text` with `t`: the error code (0 when it passed), its HTTP status */
static int check(const char *text, const struct jb_mcp_transport *t, int *status,
                 struct jb_mcp_req *r) {
  json_t *m = msg(text);
  json_t *reply = NULL;
  struct jb_mcp_req rr;
  bool ok = jb_mcp_check(m, t, r ? r : &rr, &reply, status);
  int code =
      ok ? 0 : (int)json_integer_value(json_object_get(json_object_get(reply, "error"), "code"));
  if (!ok && reply) assert_int_equal(json_integer_value(json_object_get(reply, "id")), 7);
  json_decref(reply);
  json_decref(m);
  return code;
}

#define MODERN_META                                                        \
  "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
  "\"io.modelcontextprotocol/clientCapabilities\":{}}"

#define TASKS_META                                                         \
  "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
  "\"io.modelcontextprotocol/clientCapabilities\":{\"extensions\":{"       \
  "\"io.modelcontextprotocol/tasks\":{}}}}"

static void checks(void **state) {
  (void)state;
  int st;
  struct jb_mcp_req r;
  json_t *reply = NULL;
  /* a batch and a non-object: -32600, 400 */
  json_t *b = msg("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]");
  assert_false(jb_mcp_check(b, &none, &r, &reply, &st));
  assert_int_equal(json_integer_value(json_object_get(json_object_get(reply, "error"), "code")),
                   -32600);
  assert_int_equal(st, 400);
  json_decref(reply);
  json_decref(b);
  /* legacy: no _meta, no header */
  assert_int_equal(check("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}", &none, &st, &r), 0);
  assert_false(r.modern);
  /* modern by its _meta */
  assert_int_equal(
      check("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}",
            &none, &st, &r),
      0);
  assert_true(r.modern);
  /* server/discover needs _meta */
  assert_int_equal(
      check("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"server/discover\"}", &none, &st, NULL),
      -32602);
  assert_int_equal(st, 400);
  /* clientCapabilities is required */
  assert_int_equal(check("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\",\"params\":{"
                         "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}",
                         &none, &st, NULL),
                   -32602);
  /* an unknown version: -32022 */
  assert_int_equal(check("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\",\"params\":{"
                         "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"1999-01-01\","
                         "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
                         &none, &st, NULL),
                   JB_MCP_UNSUPPORTED_VERSION);
  assert_int_equal(st, 400);
  /* HTTP: the headers must match the body */
  struct jb_mcp_transport h = {
      .http = true, .version = "2026-07-28", .method = "tools/call", .name = "read"};
  const char *call =
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{"
      "\"name\":\"read\"," MODERN_META "}}";
  assert_int_equal(check(call, &h, &st, NULL), 0);
  h.name = "=?base64?cmVhZA==?="; /* "read" */
  assert_int_equal(check(call, &h, &st, NULL), 0);
  h.name = "write";
  assert_int_equal(check(call, &h, &st, NULL), JB_MCP_HEADER_MISMATCH);
  h.name = NULL;
  assert_int_equal(check(call, &h, &st, NULL), JB_MCP_HEADER_MISMATCH);
  h.name = "read";
  h.method = "tools/list";
  assert_int_equal(check(call, &h, &st, NULL), JB_MCP_HEADER_MISMATCH);
  h.method = "tools/call";
  h.version = "2025-11-25";
  assert_int_equal(check(call, &h, &st, NULL), JB_MCP_HEADER_MISMATCH);
  assert_int_equal(st, 400);
  /* HTTP legacy: an unknown header version is -32022 */
  struct jb_mcp_transport old = {.http = true, .version = "2099-01-01"};
  assert_int_equal(check("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}", &old, &st, NULL),
                   JB_MCP_UNSUPPORTED_VERSION);
}

static int tool_code; /* what the stub tool fails with; 0: it succeeds */
static unsigned tool_flags; /* the flags of the stub tool's last call */
static bool tool_task; /* the stub tool answers with a task handle when it may */

static json_t *stub_tool(void *ctx, struct jb_app *app, const char *job, const char *tool,
                         json_t *arguments, unsigned flags, struct jb_progress *progress,
                         struct jb_mcp_error *e) {
  (void)ctx, (void)app, (void)job, (void)tool, (void)arguments, (void)progress;
  tool_flags = flags;
  if (tool_task && (flags & JB_MCP_CALL_TASK))
    return json_pack("{s:s,s:s,s:s}", "resultType", "task", "taskId", "jbt-1", "status", "working");
  if (!tool_code)
    return json_pack("{s:[{s:s,s:s}],s:{s:b},s:b}", "content", "type", "text", "text", "hi",
                     "structuredContent", "ok", 1, "isError", 0);
  e->code = tool_code;
  snprintf(e->message, sizeof e->message, "no such file: nope.txt");
  e->data = json_pack("{s:s}", "reason", tool_code == -32602 ? "invalid" : "not_found");
  return NULL;
}

static json_t *answer(const char *text, int *status) {
  json_t *m = msg(text);
  struct jb_mcp_req r;
  json_t *reply = NULL;
  assert_true(jb_mcp_check(m, &none, &r, &reply, status));
  json_t *out = jb_mcp_answer(&r, NULL, "job-1", stub_tool, NULL, NULL, status);
  json_decref(m);
  return out;
}

static void tool_answers(void **state) {
  (void)state;
  int st;
  const char *legacy =
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{"
      "\"name\":\"read\",\"arguments\":{\"path\":\"nope.txt\"}}}";
  const char *modern =
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{"
      "\"name\":\"read\",\"arguments\":{}," MODERN_META "}}";
  /* success: the result as it is; modern adds resultType and the server's identity */
  tool_code = 0;
  json_t *a = answer(legacy, &st);
  json_t *res = json_object_get(a, "result");
  assert_false(json_is_true(json_object_get(res, "isError")));
  assert_null(json_object_get(res, "resultType"));
  json_decref(a);
  a = answer(modern, &st);
  res = json_object_get(a, "result");
  assert_string_equal(json_string_value(json_object_get(res, "resultType")), "complete");
  assert_string_equal(
      json_string_value(json_object_get(
          json_object_get(json_object_get(res, "_meta"), "io.modelcontextprotocol/serverInfo"),
          "name")),
      "jailbox");
  json_decref(a);
  /* a tool-execution failure: an isError result with structuredContent.error {reason, code} */
  tool_code = JB_MCP_NOT_FOUND;
  a = answer(legacy, &st);
  res = json_object_get(a, "result");
  assert_non_null(res);
  assert_null(json_object_get(a, "error"));
  assert_true(json_is_true(json_object_get(res, "isError")));
  json_t *err = json_object_get(json_object_get(res, "structuredContent"), "error");
  assert_string_equal(json_string_value(json_object_get(err, "reason")), "not_found");
  assert_int_equal(json_integer_value(json_object_get(err, "code")), JB_MCP_NOT_FOUND);
  assert_string_equal(json_string_value(json_object_get(
                          json_array_get(json_object_get(res, "content"), 0), "text")),
                      "no such file: nope.txt");
  json_decref(a);
  /* unavailable and invalid params stay JSON-RPC errors */
  int codes[] = {JB_MCP_UNAVAILABLE, -32602};
  for (size_t i = 0; i < 2; i++) {
    tool_code = codes[i];
    a = answer(legacy, &st);
    assert_null(json_object_get(a, "result"));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "error"), "code")),
                     codes[i]);
    json_decref(a);
  }
  /* an unknown tool: -32602 */
  a = answer(
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"rm\"}}", &st);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "error"), "code")),
                   -32602);
  json_decref(a);
}

static void methods(void **state) {
  (void)state;
  int st;
  /* modern: initialize and ping are gone (404 on HTTP); server/discover answers */
  json_t *a = answer(
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{" MODERN_META "}}", &st);
  assert_int_equal(st, 404);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "error"), "code")),
                   -32601);
  json_decref(a);
  a = answer("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"server/discover\",\"params\":{" MODERN_META
             "}}",
             &st);
  json_t *res = json_object_get(a, "result");
  assert_string_equal(
      json_string_value(json_array_get(json_object_get(res, "supportedVersions"), 0)),
      "2026-07-28");
  assert_int_equal(json_integer_value(json_object_get(res, "ttlMs")), 300000);
  json_decref(a);
  /* legacy initialize: the client's revision when known, else 2025-11-25 */
  const char *vs[][2] = {{"2025-03-26", "2025-03-26"},
                         {"2025-06-18", "2025-06-18"},
                         {"2025-11-25", "2025-11-25"},
                         {"2099-01-01", "2025-11-25"},
                         {"2026-07-28", "2025-11-25"}};
  for (size_t i = 0; i < 5; i++) {
    char text[200];
    snprintf(text, sizeof text,
             "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"initialize\",\"params\":{"
             "\"protocolVersion\":\"%s\"}}",
             vs[i][0]);
    a = answer(text, &st);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(a, "result"), "protocolVersion")),
        vs[i][1]);
    json_decref(a);
  }
  /* Tasks extension: announced by server/discover to modern clients only */
  a = answer("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"server/discover\",\"params\":{" MODERN_META
             "}}",
             &st);
  assert_true(json_is_object(json_object_get(
      json_object_get(json_object_get(json_object_get(a, "result"), "capabilities"), "extensions"),
      "io.modelcontextprotocol/tasks")));
  json_decref(a);
  a = answer(
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"initialize\",\"params\":{"
      "\"protocolVersion\":\"2025-11-25\"}}",
      &st);
  assert_null(
      json_object_get(json_object_get(json_object_get(a, "result"), "capabilities"), "extensions"));
  json_decref(a);
  /* a tools/call may become a task only when the request declares the extension */
  tool_task = true;
  tool_code = 0;
  a = answer(
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":"
      "\"write\"," MODERN_META "}}",
      &st);
  assert_int_equal(tool_flags, 0);
  json_decref(a);
  a = answer(
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":"
      "\"write\"," TASKS_META "}}",
      &st);
  assert_int_equal(tool_flags, JB_MCP_CALL_TASK);
  assert_string_equal(
      json_string_value(json_object_get(json_object_get(a, "result"), "resultType")), "task");
  json_decref(a);
  a = answer(
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":"
      "\"write\"}}",
      &st); /* legacy: never */
  assert_int_equal(tool_flags, 0);
  json_decref(a);
  tool_task = false;
  /* tasks/get: -32021 without the capability (400), -32602 without a taskId; unknown legacy */
  a = answer(
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tasks/get\",\"params\":{"
      "\"taskId\":\"jbt-1\"," MODERN_META "}}",
      &st);
  assert_int_equal(st, 400);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "error"), "code")),
                   JB_MCP_MISSING_CLIENT_CAPABILITY);
  json_decref(a);
  a = answer("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tasks/get\",\"params\":{" TASKS_META "}}",
             &st);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "error"), "code")),
                   -32602);
  json_decref(a);
  a = answer(
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tasks/get\",\"params\":{"
      "\"taskId\":\"jbt-1\"}}",
      &st);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "error"), "code")),
                   -32601);
  json_decref(a);
  /* a notification: no response, 202 */
  assert_null(answer("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &st));
  assert_int_equal(st, 202);
}

/* The names jb_mcp_tools_list answers `text` with for `exec`, comma-joined into `names`; its
 * result's ttlMs (-1: absent) and cacheScope (NULL: absent) into *ttl and *scope. */
static void listed(const char *text, enum jb_exec_offer exec, char *names, size_t n,
                   json_int_t *ttl, char scope[16]) {
  json_t *m = msg(text);
  struct jb_mcp_req r;
  json_t *reply = NULL;
  int st;
  assert_true(jb_mcp_check(m, &none, &r, &reply, &st));
  json_t *a = jb_mcp_tools_list(&r, exec);
  json_t *res = json_object_get(a, "result");
  names[0] = '\0';
  size_t i;
  json_t *t;
  json_array_foreach (json_object_get(res, "tools"), i, t) {
    if (i) strncat(names, ",", n - strlen(names) - 1);
    strncat(names, json_string_value(json_object_get(t, "name")), n - strlen(names) - 1);
  }
  json_t *jt = json_object_get(res, "ttlMs");
  *ttl = jt ? json_integer_value(jt) : -1;
  const char *sc = json_string_value(json_object_get(res, "cacheScope"));
  snprintf(scope, 16, "%s", sc ? sc : "");
  json_decref(a);
  json_decref(m);
}

/* tools/list depends on the session: exec only where its contract says commands can run (and
 * while that is not known yet); the cache hint private, stale at once while not known; a
 * legacy response without the 2026-07-28 fields. */
static void tools_list_per_session(void **state) {
  (void)state;
  const char *modern =
      "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}";
  const char *legacy = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\"}";
  char names[400], scope[16];
  json_int_t ttl;
  listed(modern, JB_EXEC_NOT_OFFERED, names, sizeof names, &ttl, scope);
  assert_null(strstr(names, "exec"));
  assert_non_null(strstr(names, "read,read_many,write"));
  assert_non_null(strstr(names, ",done"));
  assert_int_equal(ttl, 300000);
  assert_string_equal(scope, "private");
  listed(modern, JB_EXEC_OFFERED, names, sizeof names, &ttl, scope);
  assert_non_null(strstr(names, ",exec,done"));
  assert_int_equal(ttl, 300000);
  assert_string_equal(scope, "private");
  listed(modern, JB_EXEC_OFFER_UNKNOWN, names, sizeof names, &ttl, scope);
  assert_non_null(strstr(names, ",exec,done"));
  assert_int_equal(ttl, 0);
  assert_string_equal(scope, "private");
  listed(legacy, JB_EXEC_NOT_OFFERED, names, sizeof names, &ttl, scope);
  assert_null(strstr(names, "exec"));
  assert_int_equal(ttl, -1);
  assert_string_equal(scope, "");
  /* the builder itself: the 13 tools and commit_changeset, one fewer without exec */
  json_t *all = jb_tools_describe(true), *some = jb_tools_describe(false);
  assert_int_equal(json_array_size(all), JB_TOOL_COUNT + 1);
  assert_int_equal(json_array_size(some), JB_TOOL_COUNT);
  json_decref(all);
  json_decref(some);
}

/* jb_progress_sink that keeps the last notification */
static int keep_last(void *ctx, json_t *m) {
  json_t **last = ctx;
  json_decref(*last);
  *last = m;
  return 0;
}

/* A progress message is one line of plain text: a command's output line that carries terminal
 * escapes (OSC 52 writes the clipboard, CSI moves the cursor, C1 CSI), CR, bidi overrides or
 * zero-width marks reaches the client's screen with each of them as '?'. */
static void progress_message_plain(void **state) {
  (void)state;
  json_t *last = NULL;
  const struct jb_progress_sink sink = {.send = keep_last, .ctx = &last};
  json_t *params = msg("{\"_meta\":{\"progressToken\":\"t1\"}}");
  struct jb_progress p;
  jb_progress_init(&p, params, &sink, 1);
  assert_true(jb_progress_on(&p));
  jb_progress_tick(&p,
                   "running, 3 s: \x1b]52;c;ZXZpbA==\x07ok\x1b[2J\r\tx\x7f"
                   "\xc2\x9b"
                   "1A \xe2\x80\xae"
                   "txt.exe\xe2\x80\x8b|\xe2\x81\xa6|\xef\xbb\xbf|caf\xc3\xa9",
                   true);
  assert_non_null(last);
  json_t *pp = json_object_get(last, "params");
  assert_string_equal(json_string_value(json_object_get(pp, "progressToken")), "t1");
  assert_string_equal(json_string_value(json_object_get(pp, "message")),
                      "running, 3 s: ?]52;c;ZXZpbA==?ok?[2J??x??1A ?txt.exe?|?|?|caf\xc3\xa9");
  jb_progress_clear(&p);
  json_decref(last);
  json_decref(params);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(checks),
      cmocka_unit_test(tool_answers),
      cmocka_unit_test(methods),
      cmocka_unit_test(tools_list_per_session),
      cmocka_unit_test(progress_message_plain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
