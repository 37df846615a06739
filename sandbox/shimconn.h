/* shimconn.h — the worker's end of the line protocol with jailbox-shim (sandbox/PROTOCOL.md),
 * carried over a hijacked Docker attach stream: requests are written raw to the container's
 * stdin; answers arrive as stdout frames and are cut into lines; stderr frames are kept as a
 * short tail for error messages (bwrap, setpriv and the launcher report failures there).
 *
 * The shim is untrusted: every line it sends is size-limited (JB_SHIM_MAX_LINE) and parsed
 * strictly; a violation is reported as EPROTO/EMSGSIZE and the connection is unusable after.
 * Calls are serialized by a mutex, so any thread may call; one request is in flight. */
#ifndef JB_SANDBOX_SHIMCONN_H
#define JB_SANDBOX_SHIMCONN_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandbox/docker.h"
#include "server/err.h"

#define JB_SHIMCONN_STDERR_TAIL 2048
#define JB_SHIMCONN_RBUF 65536

struct jb_shimconn {
  struct jb_docker_stream stream;
  pthread_mutex_t lock;
  long long next_id;
  /* raw bytes read from the stream, not yet parsed */
  unsigned char *rbuf;
  size_t rlen, roff;
  /* frame parser */
  unsigned char fhead[8];
  size_t fhead_len;
  int ftype;          /* type of the frame being read: 1 stdout, 2 stderr */
  size_t fleft;       /* payload bytes left in that frame */
  /* stdout line assembly */
  char *line;
  size_t line_len, line_cap;
  bool line_overflow;
  /* last stderr bytes */
  char err_tail[JB_SHIMCONN_STDERR_TAIL + 1];
  size_t err_len;
  bool dead;          /* end of stream or protocol violation seen */
  char dead_reason[256];
};

/* Takes over `stream` (attached, not yet started container). 0 or -1 (`err`: ENOMEM). */
int jb_shimconn_init(struct jb_shimconn *c, const struct jb_docker_stream *stream, jb_error *err);

/* Closes the stream and frees buffers. */
void jb_shimconn_close(struct jb_shimconn *c);

/* Writes `len` raw bytes to the container's stdin (the launch preamble). 0 or -1. */
int jb_shimconn_send_raw(struct jb_shimconn *c, const void *buf, size_t len, long timeout_ms,
                         jb_error *err);

/* Waits at most `timeout_ms` for the next stdout line and parses it as a JSON object.
 * Returns a new reference, or NULL with `err`: ETIMEDOUT, EPIPE (the shim's output ended;
 * the message carries the stderr tail), EMSGSIZE or EPROTO (bad line: the shim misbehaves). */
json_t *jb_shimconn_read(struct jb_shimconn *c, long timeout_ms, jb_error *err);

/* Sends `req` (borrowed; an "id" is set on it) and waits at most `timeout_ms` for the answer
 * with that id. Returns the answer (new reference; "ok" may be false: that is the shim's
 * error, not a failed call), or NULL with `err` as for jb_shimconn_read. */
json_t *jb_shimconn_call(struct jb_shimconn *c, json_t *req, long timeout_ms, jb_error *err);

/* Copies the stderr tail (one line, control characters replaced) into `out` (`len` bytes). */
void jb_shimconn_stderr(struct jb_shimconn *c, char *out, size_t len);

#endif
