/* socket.h — the Socket.IO half of the session contract (api/events.md): who may connect
 * (buyer and agent tokens), which room a socket joins, the buyer's session controls, the
 * agent's MCP channel, and the fan-out of bus events to the sockets of their session.
 * The transport is server/ws.h. */
#ifndef JB_API_SOCKET_H
#define JB_API_SOCKET_H

#include <jansson.h>
#include <stdbool.h>

#include "server/app.h"
#include "lib/err.h"

struct jb_socket;

/* A JSON-RPC error produced by a tool handler. `data` is stolen (may be NULL). */
struct jb_mcp_error {
  int code; /* JSON-RPC error code */
  char message[256];
  json_t *data;
};

/* The op handler seam: runs an MCP tools/call for session `job_id` on a socket worker
 * thread. `tool` is one of the toolset's names; `arguments` is the borrowed arguments
 * object. Returns the MCP CallToolResult object (new reference), or NULL with *e filled
 * (api/agent/ops.h jb_op_tool). */
typedef json_t *(*jb_mcp_tool_fn)(void *ctx, struct jb_app *app, const char *job_id,
                                  const char *tool, json_t *arguments, unsigned flags,
                                  struct jb_mcp_error *e);

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

/* Starts the Socket.IO listener on app->cfg->ws_listen (logging a "ws listening" line with
 * "addr"), and subscribes to app->bus so that every published event reaches the sockets of
 * its session. `tool` (required) runs every agent tools/call with `tool_ctx`; `direct`
 * (copied; NULL: none) lets the service thread hand reads and lists straight to a worker.
 * One per process. Returns 0 with *out set, or -1 with `err` (EINVAL without `tool`). */
int jb_socket_start(struct jb_app *app, jb_mcp_tool_fn tool, void *tool_ctx,
                    const struct jb_mcp_direct_fns *direct, struct jb_socket **out, jb_error *err);

/* The bound port. */
int jb_socket_port(const struct jb_socket *s);

/* Runs fn(arg, true) once on one of the socket's handler threads (the threads that run the
 * agents' tool calls; server/ws.h jb_ws_run), for work of another transport that may block
 * for long. Any thread. Returns 0, or -1 when it cannot be queued (full, stopping, or no
 * endpoint): fn is not called. A call still queued when the endpoint stops gets
 * fn(arg, false): free `arg`, do nothing else. */
int jb_socket_run(struct jb_socket *s, void (*fn)(void *arg, bool run), void *arg);

/* The tool handler and its context given to jb_socket_start. */
void jb_socket_tool(const struct jb_socket *s, jb_mcp_tool_fn *fn, void **ctx);

/* Starts closing every socket (Engine.IO close + WebSocket close 1001: socket.io-client
 * reconnects elsewhere) once its calls in flight have answered, and refuses new sockets and
 * new events; does not wait (server/ws.h jb_ws_drain). */
void jb_socket_drain(struct jb_socket *s);

/* Waits at most `grace_ms` ms for the drain, then closes the sockets still open
 * (server/ws.h jb_ws_drain_wait). */
void jb_socket_drain_wait(struct jb_socket *s, long grace_ms);

/* Sends every connected socket the current state (and a buyer its pending approvals)
 * again, as on connect; for when events may have been missed (a Redis outage). */
void jb_socket_resync(struct jb_socket *s);

/* Connected sockets of this instance by role (buyers, agents). NULL `s` counts none. */
void jb_socket_counts(struct jb_socket *s, long *buyers, long *agents);

/* Closes every socket (close 1001), waits for the handler threads and stops the listener.
 * Events published afterwards are dropped. Call it before the database pool closes.
 * NULL is allowed. */
void jb_socket_stop(struct jb_socket *s);

#endif
