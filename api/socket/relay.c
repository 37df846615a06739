/* relay.c — the Socket.IO door's direct path of reads and lists: an agent's tools/call the
 * core's planner allows goes from the service thread straight to the worker holding its
 * session, and its answer comes back there (see the comment below and socket_private.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "api/core/auth.h"
#include "api/core/ops.h"
#include "api/socket/socket_private.h"
#include "lib/json.h"
#include "lib/line.h"
#include "lib/log.h"
#include "sandbox/proto/direct.h"

/* ---------- the direct path of reads and lists (service thread) ----------
 *
 * An agent's tools/call of read or list that the planner (api/core/ops.h jb_op_direct_plan)
 * finds it may decide on alone — an active session held by one of this process's workers —
 * is written to the worker's ops socket from the service thread itself, and the worker's
 * answer line is read there too (server/ws.h jb_ws_watch_fd): no handler thread, so two
 * hand-overs between threads fewer per read. This is the one way such a read reaches a
 * worker; every other call (a refusal to audit, a paused session, a worker of another host)
 * goes to the handler threads, which store it as an ops row (api/core/op_call.h).
 *
 * At most RELAY_CONNS connections are open; a call that finds them all busy waits here, in
 * order, for the first to come free (the worker's end queues as well,
 * sandbox/worker/direct_server.c): load never refuses a read. A call the worker did not run,
 * or whose connection failed, goes to the handler threads after all, which store it as an
 * ops row (a read or list changes nothing: running it there again is harmless). */

#define RELAY_CONNS 64 /* connections to workers kept open */
#define RELAY_WAIT_MAX \
  4096 /* calls waiting for a connection; more go to the handler threads (the ops row) */
#define RELAY_TIMEOUT_MS 120000 /* an answer must come within this (ops.c RUN_TIMEOUT_MS) */
#define RELAY_INLINE_MAX 65536 /* longer answers are made into results on a handler thread */

struct relay_call {
  struct jb_socket *s;
  struct jb_ws *ws;
  struct jb_ws_peer peer;
  long long ack;
  json_t *args; /* the event's arguments, for the ordinary path */
  json_t *id; /* the JSON-RPC id */
  bool modern; /* answered by the 2026-07-28 rules (api/core/mcp.h) */
  long long seq; /* the request's "id" on the worker connection, echoed in its answer */
  struct jb_mcp_direct d;
  char *req_line; /* d.req with its "id", '\n'-terminated, req_len bytes */
  size_t req_len;
  char *
      line; /* the answer line (without its newline), when made into a result on a handler thread */
  size_t line_len;
  struct relay_call *next_wait; /* in the socket's wait list */
};

struct relay_conn {
  struct relay_conn *next;
  struct jb_socket *s;
  struct jb_ws_watch *w;
  char sock[108];
  struct relay_call *call; /* the request in flight; NULL: idle */
  bool closing; /* relay_close was called: takes no request */
  struct jb_line_reader answer; /* the worker's answer line */
};

static int relay_send(struct jb_socket *s, struct relay_call *rc);
static void relay_pump(struct jb_socket *s);

/* An answer line: JB_DIRECT_MAX_LINE bytes with its newline; a longer one ends the connection. */
static const struct jb_line_opts relay_lines = {.max_line = JB_DIRECT_MAX_LINE - 1,
                                                .over = JB_LINE_FAIL};

static void relay_call_free(struct relay_call *rc) {
  if (!rc) return;
  if (rc->s->direct.free) rc->s->direct.free(rc->d.ctx);
  json_decref(rc->d.req);
  free(rc->req_line);
  free(rc->line);
  json_decref(rc->args);
  json_decref(rc->id);
  free(rc);
}

/* The call takes the ordinary path after all (service thread). */
static void relay_fallback(struct relay_call *rc) {
  jb_ws_event_requeue(rc->ws, &rc->peer, "mcp", rc->args, rc->ack);
  relay_call_free(rc);
}

enum relay_outcome {
  RELAY_ANSWERED, /* the ACK is made */
  RELAY_NOT_RAN, /* the worker ran nothing: the ordinary path takes the call */
  RELAY_MALFORMED, /* not an answer: the same, and the connection is not to be trusted again */
};

/* The worker's answer line of `rc` (without its newline) made into the call's ACK; with
 * another outcome nothing was sent. */
static enum relay_outcome relay_answer(struct relay_call *rc, const char *line, size_t len) {
  jb_error err = {0};
  json_t *ans = jb_json_parse_object(line, len, JB_DIRECT_MAX_DEPTH, &err);
  if (!ans) {
    jb_log(JB_LOG_WARN, "direct op: the worker's answer is not JSON: the op takes the queued path",
           "jobId", rc->peer.room, "detail", err.msg, NULL);
    return RELAY_MALFORMED;
  }
  json_t *aid = json_object_get(ans, "id");
  if (!json_is_integer(aid) || json_integer_value(aid) != rc->seq) {
    jb_log(JB_LOG_WARN,
           "direct op: the worker answered another request: the op takes the queued path", "jobId",
           rc->peer.room, NULL);
    json_decref(ans);
    return RELAY_MALFORMED;
  }
  bool ran = false;
  struct jb_mcp_error e = {0};
  json_t *result = rc->s->direct.answer(rc->d.ctx, ans, &e, &ran);
  json_decref(ans);
  if (!ran) return RELAY_NOT_RAN;
  jb_ws_event_done(rc->ws, rc->peer.conn, rc->ack,
                   jb_socket_ack_of(jb_mcp_tool_reply(rc->id, rc->modern, result, &e)));
  return RELAY_ANSWERED;
}

/* Handler thread: a long answer made into the ACK; or, when the worker ran nothing, the call
 * on the ordinary path right here. */
static void relay_answer_job(void *arg, bool run) {
  struct relay_call *rc = arg;
  if (run && relay_answer(rc, rc->line, rc->line_len) != RELAY_ANSWERED)
    jb_ws_event_done(rc->ws, rc->peer.conn, rc->ack, jb_socket_mcp(rc->s, &rc->peer, rc->args));
  relay_call_free(rc);
}

static void relay_close(struct relay_conn *c) {
  c->closing = true;
  jb_ws_watch_close(c->w); /* CLOSED, then (or at once) relay_watch's cleanup */
}

/* Input on connection `c`: its call's answer (or the end of the connection). */
static void relay_readable(struct relay_conn *c, int fd);

static void relay_watch(void *arg, struct jb_ws_watch *w, int fd, enum jb_ws_watch_event ev) {
  struct relay_conn *c = arg;
  struct jb_socket *s = c->s;
  (void)w;
  if (ev == JB_WS_WATCH_CLOSED) {
    for (struct relay_conn **p = &s->relay; *p; p = &(*p)->next)
      if (*p == c) {
        *p = c->next;
        s->n_relay--;
        break;
      }
    if (c->call) relay_fallback(c->call);
    jb_line_free(&c->answer);
    free(c);
    relay_pump(s); /* a place for a waiting call */
    return;
  }
  if (ev == JB_WS_WATCH_TIMEOUT) {
    /* the worker holds it (it may have run): the call ends here, "try again" — the ordinary
     * path would hand it to the same worker and wait as long again */
    struct relay_call *rc = c->call;
    c->call = NULL;
    if (rc) {
      jb_log(JB_LOG_WARN, "direct op: no answer from the worker in time", "jobId", rc->peer.room,
             NULL);
      jb_ws_event_done(
          rc->ws, rc->peer.conn, rc->ack,
          jb_socket_ack_of(jb_mcp_error_reply(rc->id, JB_MCP_UNAVAILABLE,
                                              "the worker did not answer in time; try again",
                                              json_pack("{s:s}", "reason", "unavailable"))));
      relay_call_free(rc);
    }
    relay_close(c);
    return;
  }
  relay_readable(c, fd);
  relay_pump(s); /* the connection is idle again, or a place comes free */
}

static void relay_readable(struct relay_conn *c, int fd) {
  for (;;) {
    jb_error rerr = {0};
    ssize_t r = jb_line_read(&c->answer, fd, &rerr);
    if (r < 0 && (rerr.code == EAGAIN || rerr.code == EWOULDBLOCK)) return;
    if (r < 0 && rerr.code == ENOMEM) {
      jb_log(JB_LOG_WARN,
             "direct op: the worker's answer is too long: the op takes the queued path", NULL);
      relay_close(c);
      return;
    }
    if (r <= 0 || !c->call) { /* closed, failed, or talking out of turn */
      relay_close(c);
      return;
    }
    char *line;
    size_t n;
    int lr = jb_line_next(&c->answer, &line, &n);
    if (lr == JB_LINE_AGAIN) continue;
    if (lr != JB_LINE_OK) { /* over the limit, or out of memory */
      jb_log(JB_LOG_WARN,
             "direct op: the worker's answer is too long: the op takes the queued path", NULL);
      relay_close(c);
      return;
    }
    if (jb_line_held(&c->answer) > 0) { /* one request in flight: nothing may follow its answer */
      relay_close(c);
      return;
    }
    struct relay_call *rc = c->call;
    c->call = NULL;
    jb_ws_watch_timeout(c->w, -1);
    if (n > RELAY_INLINE_MAX) {
      /* the service thread serves every socket: parsed on a handler thread. The connection is
       * not used again: whether the line was an answer is known only there */
      rc->line = jb_line_take(&c->answer, &rc->line_len); /* the reader's storage, not a copy */
      relay_close(c);
      if (!rc->line) {
        relay_fallback(rc);
        return;
      }
      if (jb_ws_run(rc->ws, relay_answer_job, rc) == 0) return;
      line = rc->line; /* cannot be queued: here after all */
    }
    enum relay_outcome o = relay_answer(rc, line, n);
    if (o == RELAY_MALFORMED && n <= RELAY_INLINE_MAX)
      relay_close(c); /* a line too many may follow: not again */
    if (o == RELAY_ANSWERED)
      relay_call_free(rc);
    else
      relay_fallback(rc);
    return;
  }
}

/* Sends `rc`'s request on an idle connection to its worker, or a new one. 0 when it was sent;
 * 1 when all RELAY_CONNS connections are busy (nothing was sent: the call waits for one,
 * relay_pump); -1 when it could not be sent (nothing of it went out on a connection kept
 * open: the caller takes the ordinary path). */
static int relay_send(struct jb_socket *s, struct relay_call *rc) {
  for (int attempt = 0; attempt < 2; attempt++) {
    struct relay_conn *c = NULL;
    for (struct relay_conn *x = s->relay; x && attempt == 0; x = x->next)
      if (!x->call && !x->closing && !strcmp(x->sock, rc->d.sock)) {
        c = x;
        break;
      }
    bool fresh = !c;
    if (!c) {
      if (s->n_relay >= RELAY_CONNS) { /* full: an idle one (another worker's) makes room */
        struct relay_conn *idle = NULL;
        for (struct relay_conn *x = s->relay; x; x = x->next)
          if (!x->call && !x->closing) idle = x;
        if (!idle) return 1;
        relay_close(idle); /* not in its own callback: closed, and unlinked, at once */
      }
      struct sockaddr_un a = {.sun_family = AF_UNIX};
      if (strlen(rc->d.sock) >= sizeof a.sun_path) return -1;
      memcpy(a.sun_path, rc->d.sock, strlen(rc->d.sock) + 1);
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return -1;
      if (connect(fd, (struct sockaddr *)&a, sizeof a) <
          0) { /* a Unix socket connects at once, or not */
        close(fd);
        return -1;
      }
      c = calloc(1, sizeof *c);
      if (!c) {
        close(fd);
        return -1;
      }
      jb_line_init(&c->answer, &relay_lines);
      c->s = s;
      snprintf(c->sock, sizeof c->sock, "%s", rc->d.sock);
      c->w = jb_ws_watch_fd(rc->ws, fd, relay_watch, c); /* closes fd when it fails */
      if (!c->w) {
        free(c);
        return -1;
      }
      c->next = s->relay;
      s->relay = c;
      s->n_relay++;
    }
    ssize_t w =
        send(jb_ws_watch_fd_of(c->w), rc->req_line, rc->req_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w == (ssize_t)rc->req_len) {
      c->call = rc;
      jb_ws_watch_timeout(c->w, RELAY_TIMEOUT_MS);
      return 0;
    }
    relay_close(c); /* idle: no call to fall back; a part of a line dies with it */
    /* a kept connection the worker closed meanwhile (it restarted): once more, new */
    if (fresh || w > 0) return -1;
  }
  return -1;
}

/* Sends the waiting calls, oldest first, while connections can be had; a call that cannot be
 * sent at all takes the ordinary path. */
static void relay_pump(struct jb_socket *s) {
  if (s->pumping) return; /* a close relay_send makes comes back here */
  s->pumping = true;
  while (s->wait_head) {
    struct relay_call *rc = s->wait_head;
    int r = relay_send(s, rc);
    if (r > 0) break;
    s->wait_head = rc->next_wait;
    if (!s->wait_head) s->wait_tail = NULL;
    s->n_wait--;
    rc->next_wait = NULL;
    if (r < 0) relay_fallback(rc);
  }
  s->pumping = false;
}

bool jb_socket_relay_event(void *ctx, struct jb_ws *ws, const struct jb_ws_peer *peer,
                           const char *name, json_t *args, long long ack) {
  struct jb_socket *s = ctx;
  pthread_rwlock_rdlock(&s->lock);
  bool planner = s->direct.plan != NULL;
  pthread_rwlock_unlock(&s->lock);
  if (peer->role != JB_ROLE_AGENT || strcmp(name, "mcp") || ack < 0 || !planner) return false;
  /* only a well-formed call: every other message takes mcp()'s path, which answers it */
  static const struct jb_mcp_transport none = {0};
  json_t *msg = json_array_get(args, 0);
  if (!json_is_object(msg) || json_array_size(args) != 1) return false;
  struct jb_mcp_req r;
  json_t *reply = NULL;
  int status;
  if (!jb_mcp_check(msg, &none, &r, &reply, &status)) {
    json_decref(reply);
    return false;
  }
  if (!r.id || strcmp(r.method, "tools/call") || !json_is_object(r.params)) return false;
  json_t *id = r.id, *params = r.params;
  const char *tool = json_string_value(json_object_get(params, "name"));
  json_t *arguments = json_object_get(params, "arguments");
  enum jb_tool t = tool ? jb_tool_from_name(tool) : JB_TOOL_UNKNOWN;
  if (t == JB_TOOL_UNKNOWN || (arguments && !json_is_object(arguments))) /* the planner decides */
    return false;
  struct relay_call *rc = calloc(1, sizeof *rc);
  if (!rc) return false;
  json_t *empty = arguments ? NULL : json_object();
  bool planned = s->direct.plan(s->app, peer->room, tool, arguments ? arguments : empty, &rc->d);
  json_decref(empty);
  if (!planned) {
    free(rc);
    return false;
  }
  rc->s = s;
  /* the request numbered: its answer must carry the same id (sandbox/proto/direct.h) */
  rc->seq = ++s->relay_seq;
  if (json_object_set_new(rc->d.req, "id", json_integer(rc->seq)) == 0)
    rc->req_line = json_dumps(rc->d.req, JSON_COMPACT);
  rc->req_len = rc->req_line ? strlen(rc->req_line) + 1 : 0;
  if (!rc->req_line || rc->req_len > JB_DIRECT_MAX_LINE) {
    relay_call_free(rc);
    return false;
  }
  rc->req_line[rc->req_len - 1] =
      '\n'; /* json_dumps leaves room for the NUL: it becomes the newline */
  rc->ws = ws;
  rc->peer = *peer;
  rc->ack = ack;
  rc->args = json_incref(args);
  rc->id = json_incref(id);
  rc->modern = r.modern;
  /* behind the calls that wait already: in order */
  int sent = s->wait_head ? 1 : relay_send(s, rc);
  if (sent < 0 || (sent > 0 && s->n_wait >= RELAY_WAIT_MAX)) {
    relay_call_free(rc);
    return false;
  }
  if (sent > 0) {
    if (s->wait_tail)
      s->wait_tail->next_wait = rc;
    else
      s->wait_head = rc;
    s->wait_tail = rc;
    s->n_wait++;
  }
  return true;
}
