/* mcp_event.c — the agent's MCP channel on the Socket.IO door: the answer of one `mcp` event
 * (api/core/mcp.h), made on a handler thread. Below socket.c (its event handler) and relay.c
 * (a direct call that must take the ordinary path after all): both call here, it calls
 * neither. */
#define _GNU_SOURCE
#include "api/socket/socket_private.h"

#include "api/core/mcp.h"

/* Where a waiting call's progress goes: an `mcp` event to the agent's socket, ahead of the
 * ack that answers the call (one queue keeps them in order). */
struct progress_to {
  struct jb_ws *ws;
  uint64_t conn;
};

static int progress_send(void *ctx, json_t *msg) {
  struct progress_to *to = ctx;
  return jb_ws_emit(to->ws, to->conn, "mcp", msg);
}

json_t *jb_socket_mcp(struct jb_socket *s, const struct jb_ws_peer *peer, json_t *args) {
  static const struct jb_mcp_transport t = {0}; /* no headers: the message alone decides */
  json_t *msg = json_array_get(args, 0);
  if (json_array_size(args) != 1)
    return jb_socket_ack_of(
        jb_mcp_error_reply(NULL, -32600, "Invalid Request: send one JSON-RPC 2.0 object", NULL));
  struct jb_mcp_req r;
  json_t *reply;
  int status;
  if (!jb_mcp_check(msg, &t, &r, &reply, &status)) return jb_socket_ack_of(reply);
  struct progress_to to = {.ws = s->ws, .conn = peer->conn};
  const struct jb_progress_sink sink = {.send = progress_send, .ctx = &to};
  return jb_socket_ack_of(
      jb_mcp_answer(&r, s->app, peer->room, s->tool, s->tool_ctx, &sink, &status));
}
