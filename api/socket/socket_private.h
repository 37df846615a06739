/* socket_private.h — what the Socket.IO door's files share: the endpoint's state (socket.c
 * owns it), the answer of an agent's `mcp` event (mcp_event.c) and the relay of direct reads
 * (relay.c). */
#ifndef JB_API_SOCKET_PRIVATE_H
#define JB_API_SOCKET_PRIVATE_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>

#include "api/core/mcp.h"
#include "api/socket/socket.h"
#include "server/ws.h"

struct relay_conn;

struct jb_socket {
  struct jb_app *app;
  struct jb_ws *ws;
  pthread_rwlock_t lock; /* guards ws against bus publishes during stop */
  jb_mcp_tool_fn tool;
  void *tool_ctx;
  struct jb_mcp_direct_fns direct; /* set before agents connect */
  bool started;
  /* the direct path's connections to workers (service thread only) */
  struct relay_conn *relay;
  int n_relay;
  long long relay_seq; /* the "id" of the last request relayed (sandbox/proto/direct.h) */
  struct relay_call *wait_head, *wait_tail; /* calls waiting for a connection, oldest first */
  int n_wait;
  bool pumping; /* relay_pump is running (a close it causes does not pump again) */
};

/* The ack of one `mcp` event: [response], or an empty ack for a notification (`reply` stolen). */
static inline json_t *jb_socket_ack_of(json_t *reply) {
  return reply ? json_pack("[o]", reply) : NULL;
}

/* The answer of an agent's `mcp` event `args` on a handler thread (mcp_event.c): the ack, a
 * new reference ([response]; NULL, an empty ack, for a notification). */
json_t *jb_socket_mcp(struct jb_socket *s, const struct jb_ws_peer *peer, json_t *args);

/* ws event_direct handler (relay.c): an agent's tools/call of a tool that changes nothing,
 * handed straight to the worker holding its session when the planner allows
 * (api/core/ops.h jb_op_direct_plan). Service thread. True when taken (answered later),
 * false when the event must take the handler threads' path. */
bool jb_socket_relay_event(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer,
                           const char *name, json_t *args, long long ack);

#endif
