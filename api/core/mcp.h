/* mcp.h — the agent's MCP protocol layer, independent of the transport: one JSON-RPC 2.0
 * message of an agent in, its response out. The transports are the Socket.IO `mcp` event
 * (api/socket/socket.c; the stdio bridge `jailboxctl mcp-bridge` relays to it) and MCP
 * Streamable HTTP on `POST /mcp` (api/mcp/http.c).
 *
 * Revisions served (https://modelcontextprotocol.io/specification/2026-07-28/basic/versioning):
 * - modern 2026-07-28, stateless: no handshake; every request carries `params._meta` with
 *   `io.modelcontextprotocol/protocolVersion` and `io.modelcontextprotocol/clientCapabilities`
 *   (https://modelcontextprotocol.io/specification/2026-07-28/basic/index#meta), results carry
 *   `resultType` and `_meta["io.modelcontextprotocol/serverInfo"]`, `server/discover` answers
 *   (https://modelcontextprotocol.io/specification/2026-07-28/server/discover), `initialize`
 *   and `ping` are unknown methods;
 * - legacy 2025-11-25, 2025-06-18, 2025-03-26 (and 2024-11-05): the `initialize` handshake
 *   negotiates the version (https://modelcontextprotocol.io/specification/2025-11-25/basic/lifecycle).
 * A request is modern when its `_meta` names a protocol version, when the transport's
 * MCP-Protocol-Version header is a modern version, or when its method exists only in the
 * modern revision (`server/discover`). JSON-RPC batches (allowed by 2025-03-26 only, removed in
 * 2025-06-18) are refused with -32600 on every transport.
 *
 * Tool results: a CallToolResult of the tool handler is passed on; a tool-execution failure
 * (codes -32007..-32019 except -32017, api/core/ops.h) becomes a CallToolResult with
 * `isError: true`, `content: [{type:"text", text: message}]` and `structuredContent:
 * {error: {reason, code, …data}}`
 * (https://modelcontextprotocol.io/specification/2025-11-25/server/tools#error-handling); an
 * unknown tool, invalid arguments (-32602) and server faults (-32017 unavailable, -32603)
 * stay JSON-RPC errors. */
#ifndef JB_API_MCP_H
#define JB_API_MCP_H

#include <jansson.h>
#include <stdbool.h>

#include "api/core/progress.h"
#include "api/core/tools.h"
#include "lib/compiler.h"
#include "server/app.h"

/* A JSON-RPC error produced by a tool handler. `data` is stolen (may be NULL). */
struct jb_mcp_error {
  int code; /* JSON-RPC error code */
  char message[256];
  json_t *data;
};

/* The op handler seam: runs an MCP tools/call for session `job_id` on a socket worker
 * thread. `tool` is one of the toolset's names; `arguments` is the borrowed arguments
 * object; `progress` (borrowed, never NULL; off when the request asked for none) takes the
 * call's progress notifications while it waits. Returns the MCP CallToolResult object (new
 * reference), or NULL with *e filled (api/core/ops.h jb_op_tool). */
typedef json_t *(*jb_mcp_tool_fn)(void *ctx, struct jb_app *app, const char *job_id,
                                  const char *tool, json_t *arguments, unsigned flags,
                                  struct jb_progress *progress, struct jb_mcp_error *e);

/* jb_mcp_tool_fn flags. JB_MCP_CALL_TASK: the client takes a task handle in lieu of the result
 * (it declared the Tasks extension, io.modelcontextprotocol/tasks, on this 2026-07-28 request):
 * a call that would wait on the buyer may return a CreateTaskResult {resultType:"task",
 * taskId, status, …} at once instead. */
#define JB_MCP_CALL_TASK 1u

/* A read or list that the socket's service thread hands straight to the worker holding its
 * session (sandbox/proto/direct.h), without a handler thread in between: two hand-overs between
 * threads fewer. The service thread keeps a bounded number of connections to workers; a call
 * that finds them busy waits for one there. Made by a jb_mcp_plan_fn, which must not block. */
struct jb_mcp_direct {
  char sock[108]; /* the worker's ops socket */
  json_t *req; /* the request (sandbox/proto/direct.h; new), its "id" left to the sender */
  void *ctx; /* the planner's, given to the answer and free functions */
};

struct jb_mcp_direct_fns {
  /* Service thread. Fills *out and returns true when tool call `tool` of session `job_id`
   * with `arguments` (borrowed) may go straight to a worker; false when it must take the
   * tool handler's path (anything to refuse, audit or wait for goes that way). */
  bool (*plan)(struct jb_app *app, const char *job_id, const char *tool, json_t *arguments,
               struct jb_mcp_direct *out);
  /* The MCP result (new) of the worker's answer line `answer` (borrowed), or NULL with `e`
   * set; *ran false (NULL returned) when the worker ran nothing and the call must take the
   * tool handler's path after all. Any thread. */
  json_t *(*answer)(void *ctx, json_t *answer, struct jb_mcp_error *e, bool *ran);
  void (*free)(void *ctx);
};

#define JB_MCP_MODERN "2026-07-28"

/* MCP error codes of the 2026-07-28 revision
 * (https://modelcontextprotocol.io/specification/2026-07-28/basic/index#error-codes). */
enum {
  JB_MCP_HEADER_MISMATCH = -32020,
  JB_MCP_MISSING_CLIENT_CAPABILITY = -32021,
  JB_MCP_UNSUPPORTED_VERSION = -32022,
};

/* What the transport tells about a message besides its body. */
struct jb_mcp_transport {
  bool http; /* Streamable HTTP: the request headers below are checked against the body */
  const char *version; /* MCP-Protocol-Version header, NULL when absent (or no HTTP) */
  const char *method; /* Mcp-Method header, NULL when absent */
  const char *name; /* Mcp-Name header (maybe "=?base64?…?=" encoded), NULL when absent */
};

/* One request, as jb_mcp_check read it (all borrowed from the message). */
struct jb_mcp_req {
  json_t *id; /* NULL: a notification */
  const char *method;
  json_t *params; /* NULL when absent */
  bool modern; /* served by the 2026-07-28 rules */
  const char *version; /* the revision it declares (modern: _meta's; legacy: the header's or
                        * NULL) */
};

/* Checks message `msg` (borrowed; any JSON value) against JSON-RPC 2.0 and the version rules
 * of `t`, without running anything (it never blocks: the socket's service thread calls it).
 * Returns true with *r filled; or false with *reply the error response to send (new; NULL when
 * `msg` is a notification that gets none) and *status the HTTP status for it (400, 404, or
 * 202 for a notification). */
JB_MUST_USE bool jb_mcp_check(json_t *msg, const struct jb_mcp_transport *t, struct jb_mcp_req *r,
                              json_t **reply, int *status);

/* The tools/list response (new) to request `r` of a session whose exec offer is `exec`
 * (api/core/tools.h): exec listed unless JB_EXEC_NOT_OFFERED. The list depends on the session,
 * so a modern response's cache hint is `cacheScope: "private"` — reused only within the same
 * authorization context, here the session's agent token — with `ttlMs` 300000, or 0 (stale at
 * once: ask again) while the offer is not known yet (MCP 2026-07-28 server/utilities/caching,
 * "Cacheable Model": https://modelcontextprotocol.io/specification/2026-07-28/server/utilities/caching).
 * A legacy response (2025-11-25 and older) carries neither field. */
JB_MUST_USE json_t *jb_mcp_tools_list(const struct jb_mcp_req *r, enum jb_exec_offer exec);

/* Whether request `r` may block for long (a tools/call: a supervised write waits for the
 * buyer): such a request is run on a worker thread, never on an event thread. */
bool jb_mcp_may_block(const struct jb_mcp_req *r);

/* Answers request `r` (checked by jb_mcp_check) of the agent of session `job`: `tool` runs a
 * tools/call with `tool_ctx` on the calling thread, which it may block for minutes; a
 * tools/call whose `_meta.progressToken` is set gets its progress notifications through
 * `sink` (NULL: the transport carries none) while it waits (api/core/progress.h); tools/list
 * reads the session's exec offer (api/core/ops.h jb_op_exec_offer: this process's copy of the
 * session, or one database query) and answers jb_mcp_tools_list. Returns the
 * response (new), or NULL for a notification; *status is the HTTP status (200; 202 for a
 * notification; 404 for an unknown method of a modern request; 400 for a modern request whose
 * required client capability is missing). */
JB_MUST_USE json_t *jb_mcp_answer(const struct jb_mcp_req *r, struct jb_app *app, const char *job,
                                  jb_mcp_tool_fn tool, void *tool_ctx,
                                  const struct jb_progress_sink *sink, int *status);

/* The response to tools/call request `id` (borrowed) of a modern (`modern`) or legacy
 * request, from the tool handler's `result` (stolen; NULL: it failed with *e, whose data is
 * taken): see the top of this file for the framing. New reference. */
JB_MUST_USE json_t *jb_mcp_tool_reply(json_t *id, bool modern, json_t *result,
                                      struct jb_mcp_error *e);

/* A JSON-RPC error response (new) for request `id` (borrowed; NULL: null), with `data`
 * (stolen; may be NULL). */
JB_MUST_USE json_t *jb_mcp_error_reply(json_t *id, int code, const char *message, json_t *data);

#endif
