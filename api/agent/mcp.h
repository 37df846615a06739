/* mcp.h — the agent's MCP protocol layer, independent of the transport: one JSON-RPC 2.0
 * message of an agent in, its response out. The transports are the Socket.IO `mcp` event
 * (api/agent/socket.c; the stdio bridge `jailboxctl mcp-bridge` relays to it) and MCP
 * Streamable HTTP on `POST /mcp` (api/agent/mcp_http.c).
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
 * (codes -32007..-32019 except -32017, api/agent/ops.h) becomes a CallToolResult with
 * `isError: true`, `content: [{type:"text", text: message}]` and `structuredContent:
 * {error: {reason, code, …data}}`
 * (https://modelcontextprotocol.io/specification/2025-11-25/server/tools#error-handling); an
 * unknown tool, invalid arguments (-32602) and server faults (-32017 unavailable, -32603)
 * stay JSON-RPC errors. */
#ifndef JB_API_MCP_H
#define JB_API_MCP_H

#include <jansson.h>
#include <stdbool.h>

#include "api/agent/socket.h"
#include "server/app.h"

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
bool jb_mcp_check(json_t *msg, const struct jb_mcp_transport *t, struct jb_mcp_req *r,
                  json_t **reply, int *status);

/* Whether request `r` may block for long (a tools/call: a supervised write waits for the
 * buyer): such a request is run on a worker thread, never on an event thread. */
bool jb_mcp_may_block(const struct jb_mcp_req *r);

/* Answers request `r` (checked by jb_mcp_check) of the agent of session `job`: `tool` runs a
 * tools/call with `tool_ctx` on the calling thread, which it may block for minutes. Returns the
 * response (new), or NULL for a notification; *status is the HTTP status (200; 202 for a
 * notification; 404 for an unknown method of a modern request; 400 for a modern request whose
 * required client capability is missing). */
json_t *jb_mcp_answer(const struct jb_mcp_req *r, struct jb_app *app, const char *job,
                      jb_mcp_tool_fn tool, void *tool_ctx, int *status);

/* The response to tools/call request `id` (borrowed) of a modern (`modern`) or legacy
 * request, from the tool handler's `result` (stolen; NULL: it failed with *e, whose data is
 * taken): see the top of this file for the framing. New reference. */
json_t *jb_mcp_tool_reply(json_t *id, bool modern, json_t *result, struct jb_mcp_error *e);

/* A JSON-RPC error response (new) for request `id` (borrowed; NULL: null), with `data`
 * (stolen; may be NULL). */
json_t *jb_mcp_error_reply(json_t *id, int code, const char *message, json_t *data);

#endif
