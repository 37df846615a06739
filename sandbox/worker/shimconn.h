/* shimconn.h — the worker's end of the line protocol with jailbox-shim (sandbox/proto/PROTOCOL.md).
 * Lines travel over one of two channels:
 *   - the per-session Unix socket the launcher connected (jb_shimconn_use_socket): requests
 *     and answers raw, one JSON object per line;
 *   - the hijacked Docker attach stream (the fallback, and the only channel until the switch):
 *     requests are written raw to the container's stdin; answers arrive as stdout frames.
 * The attach stream stays open in both cases: the launch preamble goes in there, its stderr
 * frames are kept as a short tail for error messages (bwrap, setpriv and the launcher report
 * failures there), and it ends with the container.
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

#include "lib/err.h"
#include "lib/line.h"
#include "sandbox/worker/attach.h"
#include "sandbox/worker/docker.h"

#define JB_SHIMCONN_STDERR_TAIL 2048
#define JB_SHIMCONN_RBUF 65536

struct jb_shimconn {
  struct jb_docker_stream stream;
  pthread_mutex_t lock;
  long long next_id;
  /* raw bytes read from the attach stream, not yet demultiplexed: [roff, rlen) */
  unsigned char *rbuf;
  size_t rlen, roff;
  struct jb_attach_demux demux;
  /* the shim's lines: stdout frames of the attach stream, or the socket once the channel moved */
  struct jb_line_reader lines;
  /* last stderr bytes */
  char err_tail[JB_SHIMCONN_STDERR_TAIL + 1];
  size_t err_len;
  bool dead; /* end of stream or protocol violation seen */
  char dead_reason[256];
  /* the socket channel: -1 while the lines travel over the attach stream */
  int sock;
  bool attach_ended; /* the attach stream reached its end (the container stopped) */
};

/* Takes over `stream` (attached, not yet started container). 0 or -1 (`err`: ENOMEM). */
int jb_shimconn_init(struct jb_shimconn *c, const struct jb_docker_stream *stream, jb_error *err);

/* Closes the stream (and the socket, if any) and frees buffers. */
void jb_shimconn_close(struct jb_shimconn *c);

/* Moves the line protocol onto the connected Unix socket `fd` (taken over: closed by
 * jb_shimconn_close). Call it after the launcher's "channel" line was read and before any
 * request. Returns 0. */
int jb_shimconn_use_socket(struct jb_shimconn *c, int fd, jb_error *err);

/* Takes over the shim's socket `fd` (the channel of a session an earlier run of this worker
 * id launched, kept by the descriptor keeper) without an attach stream, and finds the line
 * boundary again: answers to requests the earlier run sent, and the rest of a line it began
 * reading, are skipped until the answer to a ping sent now (ids from then on cannot be
 * confused with the earlier run's). 0, or -1 with `err` (ETIMEDOUT, EPIPE); the connection
 * is initialised either way (jb_shimconn_close). */
int jb_shimconn_adopt(struct jb_shimconn *c, int fd, long timeout_ms, jb_error *err);

/* Reads what the attach stream has for at most `timeout_ms` or until it ends, keeping its
 * stderr in the tail (with the socket channel nobody else reads it between calls). For a
 * stopped container, call it before jb_shimconn_stderr. */
void jb_shimconn_collect_stderr(struct jb_shimconn *c, long timeout_ms);

/* Writes `len` raw bytes to the shim's input: the container's stdin (the launch preamble),
 * or the socket once the channel moved there. 0 or -1. */
int jb_shimconn_send_raw(struct jb_shimconn *c, const void *buf, size_t len, long timeout_ms,
                         jb_error *err);

/* Waits at most `timeout_ms` for the next line from the shim (on the socket, or the attach
 * stream's stdout) and parses it as a JSON object. Returns a new reference, or NULL with
 * `err`: ETIMEDOUT, EPIPE (the shim's output ended; the message carries the stderr tail),
 * EMSGSIZE or EPROTO (bad line: the shim misbehaves). */
json_t *jb_shimconn_read(struct jb_shimconn *c, long timeout_ms, jb_error *err);

/* Sends `req` (borrowed; an "id" is set on it) and waits at most `timeout_ms` for the answer
 * with that id. Returns the answer (new reference; "ok" may be false: that is the shim's
 * error, not a failed call), or NULL with `err` as for jb_shimconn_read. */
json_t *jb_shimconn_call(struct jb_shimconn *c, json_t *req, long timeout_ms, jb_error *err);

/* Copies the stderr tail (one line, control characters replaced) into `out` (`len` bytes). */
void jb_shimconn_stderr(struct jb_shimconn *c, char *out, size_t len);

/* The worker's listening end of the socket channel: a private directory (mode 0700, made
 * with mkdtemp) holding one listening Unix socket, for one session. */
struct jb_shim_listener {
  char dir[256]; /* host path of the directory ("" when not made) */
  char path[320]; /* host path of the socket in it */
  int fd; /* listening socket, -1 when closed */
};
#define JB_SHIM_LISTENER_INIT \
  { .dir = "", .path = "", .fd = -1 }

/* Makes the directory "<parent>/jbshim-XXXXXX" and a listening socket JB_SHIM_SOCKET_NAME
 * (`name`) in it. 0, or -1 with `err` (ENAMETOOLONG: the path does not fit a sockaddr_un;
 * errno of mkdtemp, socket, bind, listen); on failure nothing is left behind. */
int jb_shim_listener_open(struct jb_shim_listener *l, const char *parent, const char *name,
                          jb_error *err);

/* Waits at most `timeout_ms` for the one connection and returns it (a new descriptor,
 * O_CLOEXEC and non-blocking), or -1 with `err` (ETIMEDOUT, or accept's errno). */
int jb_shim_listener_accept(struct jb_shim_listener *l, long timeout_ms, jb_error *err);

/* Closes the listening socket and removes the socket file and its directory (nothing can
 * connect after). Safe to call twice, and on a listener set to JB_SHIM_LISTENER_INIT that
 * was never opened. */
void jb_shim_listener_close(struct jb_shim_listener *l);

#endif
