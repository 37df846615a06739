/* mcp.c — the agent's MCP protocol layer (see mcp.h): JSON-RPC 2.0 checks, the revision
 * rules (legacy handshake and the stateless 2026-07-28 core), the methods jailbox serves and
 * the framing of tool results and tool-execution failures. */
#define _GNU_SOURCE
#include "api/core/batch.h"
#include "api/core/mcp.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "api/core/ops.h"
#include "api/core/tools.h"

#define SERVER_NAME "jailbox"
#define SERVER_VERSION "0.1.0"
#define LEGACY_LATEST "2025-11-25"
#define LIST_TTL_MS \
  300000 /* tools/list and server/discover: fresh for 5 min (server/discover changes only with
          * the server's version, a session's tools/list only with its contract) */
#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_SERVER "io.modelcontextprotocol/serverInfo"
#define EXT_TASKS "io.modelcontextprotocol/tasks"

/* Every revision served, newest first; the first is the modern one. */
static const char *const versions[] = {JB_MCP_MODERN, "2025-11-25", "2025-06-18",
                                       "2025-03-26",  "2024-11-05", NULL};

static const char *const instructions =
    "Work on the buyer's workspace with the file tools of tools/list; paths are relative to the "
    "workspace root. A tool that fails answers isError with structuredContent.error.reason.";

static bool supported(const char *v) {
  for (size_t i = 0; v && versions[i]; i++)
    if (!strcmp(v, versions[i])) return true;
  return false;
}

static bool is_modern(const char *v) { return v && !strcmp(v, JB_MCP_MODERN); }

static json_t *supported_array(void) {
  json_t *a = json_array();
  for (size_t i = 0; versions[i]; i++) json_array_append_new(a, json_string(versions[i]));
  return a;
}

json_t *jb_mcp_error_reply(json_t *id, int code, const char *message, json_t *data) {
  json_t *e = json_pack("{s:i,s:s}", "code", code, "message", message);
  if (!e) /* a message that is not UTF-8 */
    e = json_pack("{s:i,s:s}", "code", code, "message", "(unprintable)");
  if (e && data)
    json_object_set_new(e, "data", data);
  else
    json_decref(data);
  return json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error", e);
}

/* A result response (new) of `result` (stolen); a modern one carries resultType and the
 * server's identity in _meta (2026-07-28 basic/index "ResultType", "Per-response fields"). */
static json_t *result_reply(json_t *id, bool modern, json_t *result) {
  if (modern && result) {
    if (!json_is_string(json_object_get(result, "resultType"))) /* "task": a CreateTaskResult */
      json_object_set_new(result, "resultType", json_string("complete"));
    json_t *meta = json_object_get(result, "_meta");
    if (!json_is_object(meta)) {
      meta = json_object();
      json_object_set_new(result, "_meta", meta);
    }
    json_object_set_new(meta, META_SERVER,
                        json_pack("{s:s,s:s}", "name", SERVER_NAME, "version", SERVER_VERSION));
  }
  return json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

/* ---------- checks ---------- */

static bool fail(json_t *id, int code, const char *msg, json_t *data, int status, json_t **reply,
                 int *st) {
  *st = status;
  *reply = id ? jb_mcp_error_reply(id, code, msg, data) : NULL;
  if (!id) json_decref(data);
  return false;
}

static json_t *unsupported_data(const char *requested) {
  return json_pack("{s:o,s:s}", "supported", supported_array(), "requested", requested);
}

/* The value of an Mcp-Name header: as sent, or decoded from "=?base64?…?=" (2026-07-28
 * transports/streamable-http "Value Encoding"). Returns 0 with *out (free it), or -1. */
/* tasks/get, tasks/update, tasks/cancel: the methods of the Tasks extension. */
static bool is_task_method(const char *m) {
  return !strcmp(m, "tasks/get") || !strcmp(m, "tasks/update") || !strcmp(m, "tasks/cancel");
}

static int header_value(const char *h, char **out) {
  size_t n = strlen(h);
  if (n >= 11 && !strncmp(h, "=?base64?", 9) && !strcmp(h + n - 2, "?=")) {
    size_t blen = n - 11, cap = blen / 4 * 3 + 3, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) return -1;
    if (sodium_base642bin((unsigned char *)buf, cap, h + 9, blen, NULL, &len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0) {
      free(buf);
      return -1;
    }
    buf[len] = '\0';
    if (strlen(buf) != len) { /* NUL inside */
      free(buf);
      return -1;
    }
    *out = buf;
    return 0;
  }
  for (const char *p = h; *p; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) return -1;
  *out = strdup(h);
  return *out ? 0 : -1;
}

/* 2026-07-28 Streamable HTTP "Server Validation": Mcp-Method and Mcp-Name against the body. */
static bool check_headers(json_t *id, const char *method, json_t *params,
                          const struct jb_mcp_transport *t, json_t **reply, int *status) {
  char msg[256];
  if (!t->version)
    return fail(id, JB_MCP_HEADER_MISMATCH,
                "Header mismatch: the MCP-Protocol-Version header is missing", NULL, 400, reply,
                status);
  if (!t->method || strcmp(t->method, method)) {
    snprintf(msg, sizeof msg, "Header mismatch: Mcp-Method %s the body's method",
             t->method ? "does not match" : "is missing; it must equal");
    return fail(id, JB_MCP_HEADER_MISMATCH, msg, NULL, 400, reply, status);
  }
  /* Tasks extension, "Streamable HTTP: Routing Headers": Mcp-Name carries params.taskId */
  const char *field = !strcmp(method, "resources/read")                                   ? "uri"
                      : (!strcmp(method, "tools/call") || !strcmp(method, "prompts/get")) ? "name"
                      : is_task_method(method)                                            ? "taskId"
                                                                                          : NULL;
  if (!field) return true;
  const char *body = json_string_value(json_object_get(params, field));
  char *h = NULL;
  if (!t->name || header_value(t->name, &h) < 0 || !body || strcmp(h, body)) {
    free(h);
    snprintf(msg, sizeof msg, "Header mismatch: Mcp-Name %s params.%s",
             t->name ? "does not match" : "is missing; it must carry", field);
    return fail(id, JB_MCP_HEADER_MISMATCH, msg, NULL, 400, reply, status);
  }
  free(h);
  return true;
}

bool jb_mcp_check(json_t *msg, const struct jb_mcp_transport *t, struct jb_mcp_req *r,
                  json_t **reply, int *status) {
  memset(r, 0, sizeof *r);
  *reply = NULL;
  *status = 200;
  if (json_is_array(msg))
    return fail(json_null(), -32600,
                "Invalid Request: JSON-RPC batches are not supported (MCP 2025-06-18 removed "
                "them); send one message",
                NULL, 400, reply, status);
  if (!json_is_object(msg))
    return fail(json_null(), -32600, "Invalid Request: send one JSON-RPC 2.0 object", NULL, 400,
                reply, status);
  json_t *id = json_object_get(msg, "id");
  const char *method = json_string_value(json_object_get(msg, "method"));
  json_t *params = json_object_get(msg, "params");
  const char *jsonrpc = json_string_value(json_object_get(msg, "jsonrpc"));
  if (id && !json_is_string(id) && !json_is_integer(id))
    return fail(json_null(), -32600, "Invalid Request: id must be a string or an integer", NULL,
                400, reply, status);
  if (!jsonrpc || strcmp(jsonrpc, "2.0") || !method || (params && !json_is_object(params)))
    return fail(id ? id : json_null(), -32600,
                "Invalid Request: jsonrpc '2.0', a method and object params are required", NULL,
                400, reply, status);
  r->id = id;
  r->method = method;
  r->params = params;
  json_t *meta = json_object_get(params, "_meta");
  if (meta && !json_is_object(meta))
    return fail(id, -32602, "Invalid params: _meta must be an object", NULL, 400, reply, status);
  json_t *mv = json_object_get(meta, META_VERSION);
  if (mv && !json_is_string(mv))
    return fail(id, -32602, "Invalid params: _meta." META_VERSION " must be a string", NULL, 400,
                reply, status);
  const char *declared = json_string_value(mv);
  const char *hv = t->http ? t->version : NULL;
  if (declared && hv && strcmp(declared, hv))
    return fail(id, JB_MCP_HEADER_MISMATCH,
                "Header mismatch: MCP-Protocol-Version does not match _meta." META_VERSION, NULL,
                400, reply, status);
  const char *v = declared ? declared : hv;
  if (v && !supported(v))
    return fail(id, JB_MCP_UNSUPPORTED_VERSION, "Unsupported protocol version", unsupported_data(v),
                400, reply, status);
  r->modern = is_modern(v) || !strcmp(method, "server/discover");
  r->version = v;
  if (!r->modern) return true;
  /* 2026-07-28 basic/index "Per-request protocol fields": both are required */
  if (!declared || !is_modern(declared))
    return fail(id, -32602,
                declared ? "Invalid params: server/discover needs _meta." META_VERSION
                           " " JB_MCP_MODERN
                         : "Invalid params: _meta." META_VERSION " is required",
                json_pack("{s:o}", "supported", supported_array()), 400, reply, status);
  if (!json_is_object(json_object_get(meta, META_CAPS)))
    return fail(id, -32602, "Invalid params: _meta." META_CAPS " (an object) is required", NULL,
                400, reply, status);
  if (t->http && !check_headers(id, method, params, t, reply, status)) return false;
  return true;
}

bool jb_mcp_may_block(const struct jb_mcp_req *r) {
  return r->id && (!strcmp(r->method, "tools/call") || (r->modern && is_task_method(r->method)));
}

/* Whether modern request `r` declared the Tasks extension in its per-request capabilities
 * (_meta.io.modelcontextprotocol/clientCapabilities.extensions["io.modelcontextprotocol/tasks"]). */
static bool declares_tasks(const struct jb_mcp_req *r) {
  json_t *caps = json_object_get(json_object_get(r->params, "_meta"), META_CAPS);
  return r->modern &&
         json_is_object(json_object_get(json_object_get(caps, "extensions"), EXT_TASKS));
}

/* ---------- methods ---------- */

/* The tools/list array: jb_tools_describe's, each outputSchema also admitting the failure
 * shape {error:{reason, code}} of an isError result (the SDK clients validate
 * structuredContent against outputSchema whatever isError says). New; NULL when out of
 * memory. */
static json_t *tools_array(bool exec) {
  json_t *described = jb_tools_describe(exec);
  json_t *tools = json_array();
  size_t i;
  json_t *t;
  json_array_foreach (described, i, t) {
    json_t *tool = json_copy(t); /* shallow: the described objects are left as they are */
    json_array_append_new(tools, tool);
    json_t *out = json_object_get(tool, "outputSchema");
    if (!json_is_object(out)) continue;
    json_t *failure = json_pack("{s:s,s:[s],s:{s:{s:s,s:[s,s],s:{s:{s:s},s:{s:s}}}}}", "type",
                                "object", "required", "error", "properties", "error", "type",
                                "object", "required", "reason", "code", "properties", "reason",
                                "type", "string", "code", "type", "integer");
    json_object_set_new(tool, "outputSchema",
                        json_pack("{s:s,s:[O,o]}", "type", "object", "anyOf", out, failure));
  }
  json_decref(described);
  return tools;
}

/* The server's capabilities; a modern client also learns of the Tasks extension. */
static json_t *capabilities(bool modern) {
  json_t *caps = json_pack("{s:{s:b}}", "tools", "listChanged", 0);
  if (modern && caps) json_object_set_new(caps, "extensions", json_pack("{s:{}}", EXT_TASKS));
  return caps;
}

static json_t *initialize(const struct jb_mcp_req *r) {
  const char *want = json_string_value(json_object_get(r->params, "protocolVersion"));
  const char *v = LEGACY_LATEST; /* the client decides whether it speaks it */
  if (want && supported(want) && !is_modern(want)) v = want;
  return result_reply(r->id, false,
                      json_pack("{s:s,s:o,s:{s:s,s:s},s:s}", "protocolVersion", v, "capabilities",
                                capabilities(false), "serverInfo", "name", SERVER_NAME, "version",
                                SERVER_VERSION, "instructions", instructions));
}

static json_t *discover(const struct jb_mcp_req *r) {
  return result_reply(r->id, true,
                      json_pack("{s:o,s:o,s:s,s:i,s:s}", "supportedVersions", supported_array(),
                                "capabilities", capabilities(true), "instructions", instructions,
                                "ttlMs", LIST_TTL_MS, "cacheScope", "public"));
}

json_t *jb_mcp_tools_list(const struct jb_mcp_req *r, enum jb_exec_offer exec) {
  json_t *res = json_pack("{s:o}", "tools", tools_array(exec != JB_EXEC_NOT_OFFERED));
  if (res && r->modern) {
    json_object_set_new(res, "ttlMs",
                        json_integer(exec == JB_EXEC_OFFER_UNKNOWN ? 0 : LIST_TTL_MS));
    json_object_set_new(res, "cacheScope", json_string("private"));
  }
  return result_reply(r->id, r->modern, res);
}

/* Whether JSON-RPC `code` of a tool handler's error is a tool-execution failure. */
static bool execution_failure(int code) {
  return code <= JB_MCP_EXISTS && code >= JB_MCP_TIMEOUT && code != JB_MCP_UNAVAILABLE;
}

/* The CallToolResult of tool-execution failure *e (new; its data is taken). */
static json_t *failure_result(struct jb_mcp_error *e) {
  int code = e->code;
  const char *msg = e->message[0] ? e->message : "tool failed";
  json_t *err = json_is_object(e->data) ? json_deep_copy(e->data) : json_object();
  json_decref(e->data);
  e->data = NULL;
  if (!json_is_string(json_object_get(err, "reason")))
    json_object_set_new(err, "reason", json_string("failed"));
  json_object_set_new(err, "code", json_integer(code));
  json_t *text = json_string(msg);
  if (!text) text = json_string("the tool failed"); /* a message that is not UTF-8 */
  return json_pack("{s:[{s:s,s:o}],s:{s:o},s:b}", "content", "type", "text", "text", text,
                   "structuredContent", "error", err, "isError", 1);
}

json_t *jb_mcp_tool_reply(json_t *id, bool modern, json_t *result, struct jb_mcp_error *e) {
  if (result) return result_reply(id, modern, result);
  int code = e->code ? e->code : -32603;
  if (!execution_failure(code)) {
    json_t *data = e->data;
    e->data = NULL;
    return jb_mcp_error_reply(id, code, e->message[0] ? e->message : "tool failed", data);
  }
  return result_reply(id, modern, failure_result(e));
}

static json_t *tools_call(const struct jb_mcp_req *r, struct jb_app *app, const char *job,
                          jb_mcp_tool_fn tool, void *tool_ctx,
                          const struct jb_progress_sink *sink) {
  const char *name = json_string_value(json_object_get(r->params, "name"));
  json_t *arguments = json_object_get(r->params, "arguments");
  if (!name || (jb_tool_from_name(name) == JB_TOOL_UNKNOWN && strcmp(name, JB_BATCH_TOOL))) {
    char msg[200];
    snprintf(msg, sizeof msg, "Invalid params: unknown tool '%.64s'; tools/list names them",
             name ? name : "");
    return jb_mcp_error_reply(r->id, -32602, msg, json_pack("{s:s}", "reason", "invalid"));
  }
  if (arguments && !json_is_object(arguments))
    return jb_mcp_error_reply(r->id, -32602, "Invalid params: 'arguments' must be an object",
                              json_pack("{s:s}", "reason", "invalid"));
  json_t *empty = arguments ? NULL : json_object();
  struct jb_mcp_error e = {0};
  struct jb_progress progress;
  jb_progress_init(&progress, r->params, sink,
                   app && app->cfg ? app->cfg->progress_interval_s : 10);
  json_t *result = tool(tool_ctx, app, job, name, arguments ? arguments : empty,
                        declares_tasks(r) ? JB_MCP_CALL_TASK : 0, &progress, &e);
  jb_progress_clear(&progress);
  json_decref(empty);
  return jb_mcp_tool_reply(r->id, r->modern, result, &e);
}

/* tasks/get, tasks/update, tasks/cancel of the Tasks extension (2026-07-28 requests only).
 * A task is one of this agent's ops (api/core/ops.h jb_op_task_get). tasks/update has
 * nothing to deliver (jailbox's tasks never need input) and tasks/cancel is acknowledged but
 * not carried out — only the buyer decides on an op the agent asked for; both check the task
 * exists, as the extension's "Protocol Errors" recommend. */
static json_t *task_method(const struct jb_mcp_req *r, struct jb_app *app, const char *job,
                           int *status) {
  if (!declares_tasks(r)) {
    *status = 400;
    return jb_mcp_error_reply(
        r->id, JB_MCP_MISSING_CLIENT_CAPABILITY, "Missing required client capability",
        json_pack("{s:{s:{s:{}}}}", "requiredCapabilities", "extensions", EXT_TASKS));
  }
  json_t *jid = json_object_get(r->params, "taskId");
  const char *id = json_string_value(jid);
  if (!id || json_string_length(jid) > JB_OP_TASK_ID_MAX || strlen(id) != json_string_length(jid))
    return jb_mcp_error_reply(r->id, -32602, "Invalid params: taskId (a string) is required", NULL);
  struct jb_op_task t;
  struct jb_mcp_error e = {0};
  int rc = jb_op_task_get(app, job, id, &t, &e);
  if (rc < 0) return jb_mcp_tool_reply(r->id, true, NULL, &e);
  if (rc > 0) {
    json_decref(e.data);
    return jb_mcp_error_reply(r->id, -32602, "Invalid params: no such task",
                              json_pack("{s:s}", "taskId", id));
  }
  if (strcmp(r->method, "tasks/get")) { /* update, cancel: an empty acknowledgement */
    json_decref(t.result);
    json_decref(e.data);
    return result_reply(r->id, true, json_object());
  }
  const char *st = !t.finished ? "working" : "completed";
  json_t *task = json_pack("{s:s,s:s,s:s?,s:s,s:s,s:n,s:i}", "taskId", id, "status", st,
                           "statusMessage", t.finished ? NULL : t.status_message, "createdAt",
                           t.created, "lastUpdatedAt", t.updated, "ttlMs", "pollIntervalMs", 2000);
  if (t.finished && t.result) {
    json_object_set_new(task, "result", t.result);
  } else if (t.finished && execution_failure(e.code)) { /* isError: still "completed" */
    json_object_set_new(task, "result", failure_result(&e));
  } else if (t.finished) { /* a JSON-RPC error of the call: "failed" with it */
    json_object_set_new(task, "status", json_string("failed"));
    json_t *err = json_pack("{s:i,s:s}", "code", e.code ? e.code : -32603, "message",
                            e.message[0] ? e.message : "failed");
    if (err && e.data)
      json_object_set_new(err, "data", e.data);
    else
      json_decref(e.data);
    e.data = NULL;
    json_object_set_new(task, "error", err);
    json_object_set_new(task, "statusMessage", json_string(e.message));
  }
  json_decref(e.data);
  return result_reply(r->id, true, task);
}

json_t *jb_mcp_answer(const struct jb_mcp_req *r, struct jb_app *app, const char *job,
                      jb_mcp_tool_fn tool, void *tool_ctx, const struct jb_progress_sink *sink,
                      int *status) {
  *status = 200;
  if (!r->id) { /* a notification (notifications/initialized, notifications/cancelled, …) */
    *status = 202;
    return NULL;
  }
  const char *m = r->method;
  if (!strcmp(m, "tools/list")) return jb_mcp_tools_list(r, jb_op_exec_offer(app, job));
  if (!strcmp(m, "tools/call")) return tools_call(r, app, job, tool, tool_ctx, sink);
  if (r->modern && !strcmp(m, "server/discover")) return discover(r);
  if (r->modern && is_task_method(m)) return task_method(r, app, job, status);
  if (!r->modern && !strcmp(m, "initialize")) return initialize(r);
  if (!r->modern && !strcmp(m, "ping")) return result_reply(r->id, false, json_object());
  /* 2026-07-28 streamable-http "Protocol Version Header": an unknown method is 404 on HTTP
   * (initialize and ping no longer exist there) */
  if (r->modern) *status = 404;
  return jb_mcp_error_reply(r->id, -32601, "Method not found", json_pack("{s:s}", "method", m));
}
