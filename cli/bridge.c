/* bridge.c — `jailboxctl mcp-bridge --job JOB`: a standard MCP server on stdio (MCP
 * stdio transport, the same in every revision jailboxd speaks — 2025-03-26 to 2026-07-28,
 * https://modelcontextprotocol.io/specification/2026-07-28/basic/transports/stdio: JSON-RPC 2.0
 * messages, one per line, UTF-8, on stdin/stdout; logs on stderr) that relays every message to the session's agent Socket.IO channel (the
 * `mcp` event, answered through the ack; api/events.md) and writes the answers back, and
 * the server's notifications (`mcp` events it sends: the progress of a call that waits)
 * as they come. Any
 * MCP client that can spawn a stdio server can so work inside a jailbox.
 *
 * Checks on the client's side of the bridge: a line over --max-message bytes is answered
 * with a JSON-RPC error and skipped (never buffered whole); each line must be one strict JSON
 * object (duplicate keys and nesting deeper than 32 refused) with jsonrpc "2.0"; batches are
 * refused (MCP 2025-06-18 removed them). On the server's side: messages are size-limited by
 * the Socket.IO client, and an ack that is not one JSON-RPC response to the request it
 * answers becomes an internal error for that request. The bridge reads no revision rules:
 * initialize, server/discover and the per-request _meta of 2026-07-28 pass through as they are
 * and jailboxd answers them (api/core/mcp.h). When the session's socket ends, every
 * request still open gets an error and the bridge exits: status 1 and error -32020 (reason
 * "refused", not worth a retry) when the server refused the token or it is another session's,
 * 3 and the retryable -32017 otherwise; at the end of stdin it waits for the open requests, then exits 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/line.h"
#include "cli/ctl.h"
#include "cli/sio_client.h"

#define JSON_DEPTH 32
#define MAX_OPEN 256 /* requests awaiting their answer */
#define DRAIN_MS 500 /* the socket ended: how long requests already sent may take to be answered */

/* JSON-RPC 2.0 error codes (https://www.jsonrpc.org/specification §5.1) */
#define RPC_PARSE (-32700)
#define RPC_INVALID (-32600)
#define RPC_INTERNAL (-32603)
#define RPC_UNAVAILABLE (-32017) /* api/events.md: unavailable, try again */
#define RPC_TOO_LARGE (-32016) /* api/events.md: too_large */
#define RPC_REFUSED (-32020) /* api/events.md: refused, the token will not do (no retry) */

struct open_req {
  uint64_t ack;
  json_t *id;
};

struct bridge {
  struct jb_ctl *o;
  const char *job;
  size_t max_message;
  struct jb_sio *sio;
  pthread_mutex_t lock; /* guards the fields below and stdout */
  struct open_req open[MAX_OPEN];
  size_t nopen;
  bool eof; /* stdin ended */
  bool reading; /* the stdin thread waits for input, every line before it answered */
  bool gone; /* the socket ended */
  bool refused; /* … because the server refused the token */
  bool failed; /* … for any other reason than our stop */
  bool stop_requested;
  bool out_failed; /* stdout took no more lines: nothing more is written there */
};

/* Ends the connection once nothing is left to relay; caller holds b->lock. */
static void stop_locked(struct bridge *b) {
  b->stop_requested = true;
  jb_sio_stop(b->sio);
}

/* Writes one message line to stdout; caller holds b->lock. `msg` borrowed. When stdout takes
 * no more (the client is gone), no answer can reach the client: the bridge ends, as failed. */
static void write_line(struct bridge *b, const json_t *msg) {
  if (b->out_failed) return;
  jb_error err = {0};
  /* JSON_COMPACT escapes control characters: the line holds no raw newline */
  if (jb_line_write_json(STDOUT_FILENO, msg, 0, -1, &err) == 0) return;
  fprintf(stderr, "jailboxctl mcp-bridge: cannot write to stdout: %s; ending\n", err.msg);
  b->out_failed = b->failed = true;
  stop_locked(b);
}

static void write_error(struct bridge *b, json_t *id, int code, const char *msg,
                        const char *reason) {
  json_t *e = json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                        "error", "code", code, "message", msg);
  if (e && reason)
    json_object_set_new(json_object_get(e, "error"), "data", json_pack("{s:s}", "reason", reason));
  if (e) write_line(b, e);
  json_decref(e);
}

/* ---------- socket side (service thread) ---------- */

static void on_ack(void *ctx, struct jb_sio *s, uint64_t ack, json_t *args) {
  struct bridge *b = ctx;
  pthread_mutex_lock(&b->lock);
  size_t i;
  for (i = 0; i < b->nopen && b->open[i].ack != ack; i++) {}
  if (i == b->nopen) { /* not ours (a notification's, or a duplicate): dropped */
    pthread_mutex_unlock(&b->lock);
    return;
  }
  json_t *id = b->open[i].id;
  b->open[i] = b->open[--b->nopen];
  json_t *resp = json_array_get(args, 0);
  json_t *rid = json_object_get(resp, "id");
  if (json_array_size(args) == 1 && json_is_object(resp) && rid && json_equal(rid, id) &&
      (json_object_get(resp, "result") != NULL) != (json_object_get(resp, "error") != NULL))
    write_line(b, resp);
  else
    write_error(b, id, RPC_INTERNAL,
                "jailbox answered with something that is not a JSON-RPC response", NULL);
  json_decref(id);
  if (b->eof && b->nopen == 0) stop_locked(b);
  pthread_mutex_unlock(&b->lock);
}

static void on_event(void *ctx, struct jb_sio *s, const char *name, json_t *args, uint64_t ack) {
  struct bridge *b = ctx;
  json_t *d = json_array_get(args, 0);
  const char *job = json_string_value(json_object_get(d, "jobId"));
  if (job && strcmp(job, b->job) != 0) {
    pthread_mutex_lock(&b->lock);
    bool said = b->refused;
    pthread_mutex_unlock(&b->lock);
    if (said) return;
    fprintf(stderr, "jailboxctl mcp-bridge: the agent token belongs to session %s, not %s\n",
            jb_ctl_text(job), jb_ctl_text(b->job));
    pthread_mutex_lock(&b->lock);
    b->refused = true;
    stop_locked(b);
    pthread_mutex_unlock(&b->lock);
    return;
  }
  /* the state snapshot right after CONNECT (or any later event) names the token's session:
   * relaying starts once it is the one asked for (--job) */
  if (job) jb_sio_hold(s, false);
  /* a notification of the server for the client (the progress of a call that waits, MCP
   * basic/utilities/progress): relayed as it is, one line */
  const char *method = json_string_value(json_object_get(d, "method"));
  if (strcmp(name, "mcp") == 0 && json_array_size(args) == 1 && method &&
      !json_object_get(d, "id") && strncmp(method, "notifications/", 14) == 0) {
    pthread_mutex_lock(&b->lock);
    write_line(b, d);
    pthread_mutex_unlock(&b->lock);
    return;
  }
  /* the session's state for the log; MCP has no standard notification for it */
  if (strcmp(name, "jailbox:state") == 0)
    fprintf(stderr, "jailboxctl mcp-bridge: session %s is %s\n", jb_ctl_text(b->job),
            jb_ctl_text(json_string_value(json_object_get(d, "state"))));
  else if (strcmp(name, "jailbox:abort") == 0)
    fprintf(stderr, "jailboxctl mcp-bridge: session %s was aborted\n", jb_ctl_text(b->job));
}

static void on_connected(void *ctx, struct jb_sio *s, const char *sid) {
  struct bridge *b = ctx;
  fprintf(stderr, "jailboxctl mcp-bridge: connected to session %s\n", jb_ctl_text(b->job));
}

/* The connection broke and the client reconnects: the open requests will get no answer. */
static void on_lost(void *ctx, struct jb_sio *s, const char *why) {
  struct bridge *b = ctx;
  pthread_mutex_lock(&b->lock);
  jb_sio_discard_queued(s); /* what is in the table below must not be sent later */
  jb_sio_hold(s, true); /* until the new connection's snapshot names the session again */
  fprintf(stderr, "jailboxctl mcp-bridge: connection lost (%s); reconnecting\n", jb_ctl_text(why));
  char msg[600];
  snprintf(msg, sizeof msg,
           "the connection to jailbox was lost (%s); the call may or may not "
           "have been carried out",
           why);
  for (size_t i = 0; i < b->nopen; i++) {
    write_error(b, b->open[i].id, RPC_UNAVAILABLE, msg, "unavailable");
    json_decref(b->open[i].id);
  }
  b->nopen = 0;
  if (b->eof) stop_locked(b);
  pthread_mutex_unlock(&b->lock);
}

static void on_closed(void *ctx, struct jb_sio *s, bool refused, const char *why) {
  struct bridge *b = ctx;
  pthread_mutex_lock(&b->lock);
  b->gone = true;
  b->refused |= refused;
  b->failed |= !refused && !b->stop_requested;
  if (!b->stop_requested || refused)
    fprintf(stderr, "jailboxctl mcp-bridge: %s%s\n", refused ? "refused by the server: " : "",
            jb_ctl_text(why));
  char msg[600];
  if (b->refused)
    snprintf(msg, sizeof msg,
             "jailbox refused this bridge's agent token (%s); a retry with it will not help: "
             "the bridge is ending",
             why);
  else
    snprintf(msg, sizeof msg, "the jailbox session is not reachable: %s", why);
  for (size_t i = 0; i < b->nopen; i++) {
    if (b->refused)
      write_error(b, b->open[i].id, RPC_REFUSED, msg, "refused");
    else
      write_error(b, b->open[i].id, RPC_UNAVAILABLE, msg, "unavailable");
    json_decref(b->open[i].id);
  }
  b->nopen = 0;
  pthread_mutex_unlock(&b->lock);
}

/* ---------- client side (stdin thread) ---------- */

int jb_mcp_stdio_check(const char *line, size_t n, json_t **msg, json_t **id, int *code, char *why,
                       size_t why_size) {
  *msg = *id = NULL;
  *code = 0;
  while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t')) n--;
  if (n == 0) return 0; /* blank lines are not messages */
  if (jb_json_depth(line, n, JSON_DEPTH) > JSON_DEPTH) {
    *code = RPC_PARSE;
    snprintf(why, why_size, "Parse error: JSON nested deeper than %d", JSON_DEPTH);
    return -1;
  }
  json_error_t je;
  json_t *m = json_loadb(line, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
  if (!m) {
    *code = RPC_PARSE;
    snprintf(why, why_size, "Parse error: %s", je.text);
    return -1;
  }
  json_t *mid = json_object_get(m, "id");
  const char *ver = json_string_value(json_object_get(m, "jsonrpc"));
  const char *bad = NULL;
  if (json_is_array(m))
    bad = "batches are not supported (MCP 2025-06-18)";
  else if (!json_is_object(m))
    bad = "a message is a JSON object";
  else if (!ver || strcmp(ver, "2.0") != 0)
    bad = "jsonrpc must be \"2.0\"";
  else if (mid && !json_is_string(mid) && !json_is_integer(mid))
    bad = "id must be a string or an integer";
  else if (json_object_get(m, "method") && !json_is_string(json_object_get(m, "method")))
    bad = "method must be a string";
  if (bad) {
    *code = RPC_INVALID;
    snprintf(why, why_size, "Invalid Request: %s", bad);
    if (json_is_string(mid) || json_is_integer(mid)) *id = json_incref(mid);
    json_decref(m);
    return -1;
  }
  if (!json_object_get(m, "method")) { /* a response: jailbox sends no requests */
    json_decref(m);
    return 0;
  }
  *msg = m;
  return 1;
}

/* One complete line from the client. */
static void client_line(struct bridge *b, const char *line, size_t n) {
  json_t *msg, *id;
  int code;
  char why[300];
  int r = jb_mcp_stdio_check(line, n, &msg, &id, &code, why, sizeof why);
  if (r == 0) return;
  pthread_mutex_lock(&b->lock);
  if (r < 0) {
    write_error(b, id, code, why, NULL);
    pthread_mutex_unlock(&b->lock);
    json_decref(id);
    return;
  }
  id = json_object_get(msg, "id");
  const char *bad = NULL;
  if (b->gone && b->refused) {
    if (id) /* a notification is dropped */
      write_error(b, id, RPC_REFUSED,
                  "jailbox refused this bridge's agent token; a retry with it will not help",
                  "refused");
    pthread_mutex_unlock(&b->lock);
    json_decref(msg);
    return;
  }
  if (b->gone)
    bad = "the jailbox session is not reachable";
  else if (id && b->nopen == MAX_OPEN)
    bad = "too many requests awaiting an answer";
  if (bad) {
    if (id) write_error(b, id, RPC_UNAVAILABLE, bad, "unavailable"); /* a notification is dropped */
    pthread_mutex_unlock(&b->lock);
    json_decref(msg);
    return;
  }
  uint64_t ack = 0;
  json_t *keep = id ? json_incref(id) : NULL;
  int er = jb_sio_emit(b->sio, "mcp", msg, id != NULL, &ack);
  if (er == -2) {
    if (keep)
      write_error(b, keep, RPC_TOO_LARGE,
                  "Invalid Request: the message is larger than the "
                  "server accepts (Engine.IO maxPayload)",
                  "too_large");
    json_decref(keep);
  } else if (er < 0) {
    if (keep)
      write_error(b, keep, RPC_UNAVAILABLE, "the jailbox session is not reachable", "unavailable");
    json_decref(keep);
  } else if (keep) {
    b->open[b->nopen++] = (struct open_req){.ack = ack, .id = keep};
  }
  pthread_mutex_unlock(&b->lock);
}

static void *stdin_thread(void *arg) {
  struct bridge *b = arg;
  /* a line over the limit is answered at once and skipped, never buffered whole; a last
   * line without newline counts */
  struct jb_line_reader r;
  jb_line_init(&r,
               &(struct jb_line_opts){
                   .max_line = b->max_message, .over = JB_LINE_SKIP, .last_unterminated = true});
  for (;;) {
    char *line;
    size_t n;
    int rc = jb_line_next(&r, &line, &n);
    if (rc == JB_LINE_AGAIN) {
      jb_error err;
      /* `reading` while it waits for input, nothing taken yet: cleared before the read */
      pthread_mutex_lock(&b->lock);
      b->reading = true;
      pthread_mutex_unlock(&b->lock);
      struct pollfd in = {.fd = STDIN_FILENO, .events = POLLIN};
      while (poll(&in, 1, -1) < 0 && errno == EINTR) {}
      pthread_mutex_lock(&b->lock);
      b->reading = false;
      pthread_mutex_unlock(&b->lock);
      if (jb_line_read(&r, STDIN_FILENO, &err) < 0) jb_line_end(&r); /* read failed: as the end */
      continue;
    }
    if (rc == JB_LINE_OK) {
      client_line(b, line, n);
    } else if (rc == JB_LINE_TOO_LONG) {
      pthread_mutex_lock(&b->lock);
      char m[128];
      snprintf(m, sizeof m, "Invalid Request: message over %zu bytes", b->max_message);
      write_error(b, NULL, RPC_INVALID, m, "too_large");
      pthread_mutex_unlock(&b->lock);
    } else {
      break; /* the end, or out of memory */
    }
  }
  jb_line_free(&r);
  pthread_mutex_lock(&b->lock);
  b->eof = true;
  if (b->nopen == 0) stop_locked(b);
  pthread_mutex_unlock(&b->lock);
  return NULL;
}

int jb_ctl_bridge(struct jb_ctl *o, int argc, char **argv) {
  struct bridge b = {.o = o, .max_message = 4u << 20};
  const char *tok = getenv("JAILBOX_AGENT_TOKEN");
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--job") == 0 && i + 1 < argc)
      b.job = argv[++i];
    else if (strcmp(argv[i], "--max-message") == 0 && i + 1 < argc) {
      char *end;
      errno = 0;
      long long v = strtoll(argv[++i], &end, 10);
      if (errno || *end || v < 1024 || v > (64LL << 20)) {
        fprintf(stderr, "%s: --max-message takes 1024 to 67108864 bytes\n", o->verb);
        return JB_CTL_USAGE;
      }
      b.max_message = (size_t)v;
    } else {
      fprintf(stderr, "%s: unexpected or incomplete argument '%s' (see --help)\n", o->verb,
              argv[i]);
      return JB_CTL_USAGE;
    }
  }
  if (!tok || !tok[0]) tok = o->token;
  if (!b.job || !tok || !tok[0]) {
    fprintf(stderr, "%s: --job JOB and the agent token (JAILBOX_AGENT_TOKEN) are required\n",
            o->verb);
    return JB_CTL_USAGE;
  }
  char base[512];
  if (jb_ctl_ws_base(o, base, sizeof base) < 0) return JB_CTL_USAGE;
  pthread_mutex_init(&b.lock, NULL);
  /* answers can be far larger than requests: a 1 MiB read comes back JSON-escaped, twice */
  struct jb_sio_settings set = {.base_url = base,
                                .token = tok,
                                .max_message = 64u << 20,
                                .connect_timeout_ms = 10000,
                                .reconnect_max = 8};
  struct jb_sio_handlers h = {.ctx = &b,
                              .connected = on_connected,
                              .event = on_event,
                              .ack = on_ack,
                              .closed = on_closed,
                              .lost = on_lost};
  jb_error err = {0};
  if (jb_sio_open(&b.sio, &set, &h, &err) < 0) {
    fprintf(stderr, "%s: %s\n", o->verb, err.msg);
    return JB_CTL_USAGE;
  }
  jb_sio_hold(b.sio, true); /* nothing is relayed before the session is confirmed */
  pthread_t t;
  if (pthread_create(&t, NULL, stdin_thread, &b) != 0) {
    jb_sio_free(b.sio);
    return JB_CTL_FAILED;
  }
  jb_sio_run(b.sio);
  pthread_mutex_lock(&b.lock);
  bool eof = b.eof;
  int rc = b.refused ? JB_CTL_REFUSED : b.failed ? JB_CTL_FAILED : JB_CTL_OK;
  pthread_mutex_unlock(&b.lock);
  if (!eof) {
    /* the socket ended first. Requests the client sent already are answered (refused, or
     * unreachable) before the exit: up to DRAIN_MS, until the stdin thread waits for input
     * with none there, or stdin ends */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += DRAIN_MS / 1000;
    until.tv_nsec += (DRAIN_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    /* (the lock is taken with the deadline too: a writer blocked on a stdout nobody reads
     * holds it, and the exit must not wait for that reader) */
    bool locked = false;
    for (;;) {
      locked = pthread_mutex_timedlock(&b.lock, &until) == 0;
      if (!locked) break;
      bool idle = b.eof || b.reading;
      eof = b.eof;
      struct pollfd in = {.fd = STDIN_FILENO, .events = POLLIN};
      if (eof || (idle && poll(&in, 1, 0) == 0)) break;
      pthread_mutex_unlock(&b.lock);
      locked = false;
      struct timespec now;
      clock_gettime(CLOCK_REALTIME, &now);
      if (now.tv_sec > until.tv_sec || (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec))
        break;
      usleep(10 * 1000);
    }
    /* holding the lock, no answer is written half when the process ends */
    if (!locked) (void)pthread_mutex_timedlock(&b.lock, &until);
    fflush(stdout);
    _exit(rc == JB_CTL_OK ? JB_CTL_FAILED : rc);
  }
  pthread_join(t, NULL);
  jb_sio_free(b.sio);
  pthread_mutex_destroy(&b.lock);
  return rc;
}
