/* socket.h — the Socket.IO door (api/events.md): who may connect (buyer and agent tokens),
 * which room a socket joins, the buyer's controls (run by the core, api/core/controls.h), the
 * agent's MCP channel (api/core/mcp.h), and the fan-out of bus events to the sockets of their
 * session. The transport is server/ws.h. */
#ifndef JB_API_SOCKET_H
#define JB_API_SOCKET_H

#include <jansson.h>
#include <stdbool.h>

#include "api/core/mcp.h"
#include "server/app.h"
#include "lib/err.h"

struct jb_socket;

/* Starts the Socket.IO listener on app->cfg->ws_listen (logging a "ws listening" line with
 * "addr"), and subscribes to app->bus so that every published event reaches the sockets of
 * its session. `tool` (required) runs every agent tools/call with `tool_ctx`; `direct`
 * (copied; NULL: none) lets the service thread hand reads and lists straight to a worker.
 * One per process. Returns 0 with *out set, or -1 with `err` (EINVAL without `tool`). */
int jb_socket_start(struct jb_app *app, jb_mcp_tool_fn tool, void *tool_ctx,
                    const struct jb_mcp_direct_fns *direct, struct jb_socket **out, jb_error *err);

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

/* Closes every socket (close 1001), waits for the handler threads and stops the listener.
 * Events published afterwards are dropped. Call it before the database pool closes.
 * NULL is allowed. */
void jb_socket_stop(struct jb_socket *s);

#endif
