/* progress.h — what a tool call that waits tells its client meanwhile: MCP progress
 * notifications (https://modelcontextprotocol.io/specification/2025-03-26/basic/utilities/progress,
 * unchanged through 2026-07-28). A request that carries `params._meta.progressToken` (a string
 * or an integer) may receive `notifications/progress {progressToken, progress, message}`
 * until its response; `progress` grows with every notification (here: the seconds the call has
 * waited), there is no `total`. Clients that reset their request timeout on progress (the
 * TypeScript SDK's `resetTimeoutOnProgress`) so wait for a command of many minutes.
 *
 * The core decides when and what (api/core/op_wait.c: a running command's last output line,
 * "waiting for the buyer", a pause, a session starting); each door says how a notification
 * reaches its client (a jb_progress_sink): the Socket.IO `mcp` event, an SSE event of the
 * POST /mcp answer. The last output line of a running command comes from the session's
 * `exec_output` events (the same redacted text the buyer sees), watched here per op. */
#ifndef JB_API_PROGRESS_H
#define JB_API_PROGRESS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "db/events.h"
#include "lib/compiler.h"

/* How a door hands a notification to the client of one request. */
struct jb_progress_sink {
  /* Sends JSON-RPC notification `msg` (stolen) to the client; runs on the call's thread.
   * Returns 0, or -1 when the client can no longer be reached (nothing more is sent). */
  int (*send)(void *ctx, json_t *msg);
  void *ctx;
};

/* The progress of one waiting call. Zeroed: none asked for (every function is a no-op). */
struct jb_progress {
  json_t *token; /* the request's progressToken (own reference); NULL: none asked for */
  const struct jb_progress_sink *sink; /* borrowed; NULL: none */
  long long interval_ms; /* at least this often while the call waits */
  long long started_ms; /* jb_now_ms when the call began */
  long long due_ms; /* jb_now_ms when the next notification is due */
  double last; /* the `progress` of the last one sent */
  bool dead; /* the sink refused: nothing more is sent */
};

/* Sets up `p` for request params `params` (borrowed; NULL allowed): when its
 * `_meta.progressToken` is a string (at most 256 bytes) or an integer and `sink` is not NULL,
 * notifications go to `sink` every `interval_s` seconds (at least 1) from now, the first
 * one `interval_s` from now. Otherwise `p` stays off. Free with jb_progress_clear. */
void jb_progress_init(struct jb_progress *p, json_t *params, const struct jb_progress_sink *sink,
                      long interval_s);

/* Releases the token of `p`; `p` is off afterwards. */
void jb_progress_clear(struct jb_progress *p);

/* Whether `p` sends notifications. */
bool jb_progress_on(const struct jb_progress *p);

/* Milliseconds until the next notification of `p` is due (0: now); a large value when off. A
 * waiting loop sleeps no longer than this. */
long jb_progress_due_in(const struct jb_progress *p);

/* Sends `message` (UTF-8, cut to 200 bytes on a character boundary, its control characters,
 * bidi controls and zero-width marks sent as '?': one line of plain text; NULL: none) as the next
 * notification when one is due; `force`: now, due or not (a new state worth telling). */
void jb_progress_tick(struct jb_progress *p, const char *message, bool force);

/* A watch on the output of one running command: the last line of text it printed. Lives on
 * the caller's stack between jb_exec_line_watch and jb_exec_line_unwatch. */
struct jb_exec_line {
  char job[129];
  long long op_id;
  char line[201]; /* the last non-blank line seen, "" until then */
  struct jb_exec_line *next; /* in the watch list (under its lock) */
};

/* Starts watching the exec_output events of op `op_id` of session `job` (an op id known once
 * stored). */
void jb_exec_line_watch(struct jb_exec_line *w, const char *job, long long op_id);

/* Stops the watch of `w` (no-op when it never started). */
void jb_exec_line_unwatch(struct jb_exec_line *w);

/* Copies the last line `w` saw into `out` (`n` bytes, NUL-terminated); false when none yet. */
bool jb_exec_line_last(struct jb_exec_line *w, char *out, size_t n);

/* Bus subscriber (server/bus.h jb_bus_fn) that feeds the watches: subscribe it once per
 * process (api/start.c). `payload` borrowed. */
void jb_exec_line_on_bus(void *ctx, const char *job_id, enum jb_event_kind kind, json_t *payload);

#endif
