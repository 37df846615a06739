/* exec.h — the worker's end of a session's spawner (sandbox/proto/PROTOCOL.md, "The spawner";
 * sandbox/WALLS.md, "exec"): the second connection the launcher makes, on which the spawner
 * runs one command at a time in its own jail and streams its output. jb_exec_run runs a
 * command and blocks until it ends; jb_exec_signal stops, continues or kills the running
 * command's whole process tree from any thread. */
#ifndef JB_SANDBOX_WORKER_EXEC_H
#define JB_SANDBOX_WORKER_EXEC_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/err.h"
#include "lib/line.h"

/* The spawner's channel of one sandbox. Lives in struct jb_sandbox. */
struct jb_spawner {
  int fd; /* the connection (non-blocking), -1: no spawner */
  pthread_mutex_t lock; /* writes on fd, and the fields below */
  pthread_cond_t idle; /* signalled when a command ends (busy false) */
  struct jb_line_reader lines; /* read only by the thread whose command runs */
  bool busy; /* a command runs (jb_exec_run is inside) */
  bool closing; /* jb_spawner_close began: nothing new starts */
  long long next_id;
  json_t *hello; /* the spawner's hello line (owned), NULL before it came */
};

/* A spawner without a connection (available false). */
void jb_spawner_init(struct jb_spawner *sp);

/* Takes over the accepted connection `fd` and waits at most `timeout_ms` for the spawner's
 * hello ({"hello":"spawner","protocol":JB_SPAWNER_PROTOCOL,…}). 0, or -1 with `err`
 * (ETIMEDOUT, EPROTO: another first line or protocol); the connection is closed then. */
int jb_spawner_attach(struct jb_spawner *sp, int fd, long timeout_ms, jb_error *err);

/* Takes over the spawner's connection `fd` of a sandbox launched by an earlier worker (the
 * descriptor keeper held it, sandbox/worker/keeper.c): a command still running from that
 * worker is killed (its op was failed at re-adoption), the line boundary is found again by a
 * request whose answer ends what the earlier worker left unread, and ids start far past the
 * ones it used. `exec_contract` (borrowed): the contract's "exec" written at launch, whose
 * spawner protocol, pid, image binds and memory watch stand for the hello. 0, or -1 with `err`
 * (ETIMEDOUT, EPIPE; `fd` is then closed and the spawner stays without a connection). */
int jb_spawner_adopt(struct jb_spawner *sp, int fd, const json_t *exec_contract, long timeout_ms,
                     jb_error *err);

/* Ends the channel: a running command is woken with EPIPE (and killed by the spawner, which
 * sees the end of its channel); waits for jb_exec_run to return, then closes. Safe on a
 * spawner that never had a connection. */
void jb_spawner_close(struct jb_spawner *sp);

/* Whether the spawner's channel is up. */
bool jb_spawner_available(struct jb_spawner *sp);

/* The next line from the spawner within `deadline` (jb_now_ms), parsed: a new object, or NULL
 * with `err` (ETIMEDOUT, EPIPE at the end of the channel, EPROTO/EMSGSIZE for a bad line).
 * Called by the one thread that owns the channel at the time (its command's, or launch). */
json_t *jb_spawner_read_line(struct jb_spawner *sp, long long deadline, jb_error *err);

/* Writes `o` (borrowed) as one line (at most JB_SPAWNER_MAX_LINE bytes, 10 s), with sp->lock
 * held. 0, or -1 with `err`. */
int jb_spawner_send_locked(struct jb_spawner *sp, const json_t *o, jb_error *err);

/* The spawner of a command that ran on an overlay, during its on_overlay call. */
struct jb_exec_overlay;

struct jb_exec_request {
  const json_t *argv; /* array of strings, 1..256 items */
  const char *cwd; /* workspace-relative directory, NULL or "" or ".": the root */
  const json_t *env; /* object of strings, or NULL */
  const unsigned char *stdin_data;
  size_t stdin_len; /* ≤ 1 MiB */
  long timeout_ms; /* wall clock, 1 .. 24 h */
  size_t max_output; /* bytes per stream sent at most; the rest is counted */
  bool writable; /* the workspace read-write for this command */
  /* added: the command's limits (0: the spawner's default — RLIMIT_FSIZE 1 GiB, RLIMIT_NPROC the
   * container's limit less 4, a 128 MiB /tmp) */
  long long fsize_bytes;
  long nproc;
  long long tmp_bytes;
  /* the most memory the command's jail may hold, bytes (jb_exec_memory_limit; 0: no watch) —
   * over it the spawner kills the jail and the result says oom */
  long long memory_bytes;
  /* Called once, with the spawner's lock held, right after the command was sent (from then on
   * jb_exec_signal reaches it): returns a signal asked for before that moment ("kill", "stop")
   * to send at once, or NULL. May be NULL. Must not call into this module. */
  const char *(*on_started)(void *started_ctx);
  void *started_ctx;
  /* true: a command the exec filter killed is not raised here as a seccomp_kill signal; the
   * caller raises it once it has stored the command's outcome, so that the escape's abort
   * finds the op ended with its true result (false: raised before jb_exec_run returns) */
  bool caller_raises_seccomp;
  /* A writable command run on a copy-on-write view of the workspace (sandbox/WALLS.md,
   * "Changesets"): the overlay's id ([A-Za-z0-9_-]{1,64}), or NULL to bind the workspace
   * itself. Its writes stay in the overlay's upper; `on_overlay` (may be NULL) is called once
   * the command has ended, whatever its end, with the spawner still held for this command, to
   * read what the upper holds (jb_exec_overlay_manifest, jb_exec_overlay_read); the overlay is
   * discarded after it returns. `result` is the spawner's result (NULL when it gave none). */
  const char *overlay;
  void (*on_overlay)(void *overlay_ctx, struct jb_exec_overlay *ov, const json_t *result);
  void *overlay_ctx;
};

/* The entries of the overlay's upper (the spawner's cs_manifest, PROTOCOL.md: [{path, type,
 * mode, size, target?, whiteout, opaque}], new), at most `max_entries`. NULL with `err`, whose
 * message begins with the spawner's code ("spawner: too_large: …", "spawner: bad_name: …"). */
json_t *jb_exec_overlay_manifest(struct jb_exec_overlay *ov, size_t max_entries, jb_error *err);

/* Up to `len` bytes (1..JB_EXEC_OVERLAY_READ_MAX) of regular file `path` of the overlay's
 * upper from byte `offset` into `buf` (`len` bytes), their number into *n, the file's size into
 * *size and whether the end was reached into *eof (the spawner's cs_read). 0, or -1 with `err`
 * ("spawner: not_file: …" for anything but a regular file, reached with no link followed). */
int jb_exec_overlay_read(struct jb_exec_overlay *ov, const char *path, long long offset, size_t len,
                         unsigned char *buf, size_t *n, long long *size, bool *eof, jb_error *err);
#define JB_EXEC_OVERLAY_READ_MAX (768 * 1024)

/* The reserve kept out of a command's memory limit: what the container holds besides the
 * command (the Sentry's own memory outside gVisor's count, the shim, the spawner, the shim's
 * /tmp) and what a command can allocate between two reads of the spawner's watch. */
#define JB_EXEC_MEMORY_RESERVE_MIN_MIB 64

/* A command's memory limit in bytes in a session whose limits (borrowed; {"memoryMiB"}, 1024
 * when absent) give the container's: that limit less max(JB_EXEC_MEMORY_RESERVE_MIN_MIB, an
 * eighth of it), 16 MiB at least (64 MiB → 16, 128 → 64, 256 → 192); `asked_mib` > 0 (the
 * exec's memoryMiB) lowers it, never raises it. */
long long jb_exec_memory_limit(const json_t *limits, long long asked_mib);

/* Called on the calling thread for each chunk, in order; seq counts per command from 0. */
typedef void (*jb_exec_output_fn)(void *ctx, const char *stream, long long seq,
                                  const unsigned char *data, size_t len);

struct jb_session;

/* Runs one command in session s's spawner; blocks until it ends (the spawner enforces the
 * timeout; the worker gives up 15 s after it with ETIMEDOUT). *result: new reference, the
 * spawner's result object ({exitCode, signal, timedOut, durationMs, stdoutBytes, stderrBytes,
 * stdoutTruncated, stderrTruncated, oom, killedBy, seccompSyscall}). When the sandbox died
 * during the command and Docker reports it killed for memory, the result is made here with
 * oom true. Returns 0, or -1 with err: ENOTSUP (no spawner), EBUSY (a command runs), EINVAL
 * (the spawner refused the request: the message carries its code), EPIPE (the channel ended),
 * ETIMEDOUT, EPROTO (the spawner broke the protocol). `s` must be pinned by the caller. */
int jb_exec_run(struct jb_session *s, const struct jb_exec_request *rq, jb_exec_output_fn out,
                void *ctx, json_t **result, jb_error *err);

/* Sends "kill", "stop" or "cont" to session s's running command (its whole process tree; any
 * thread). 0, or -1 (ESRCH: none running; EINVAL: another `what`; EPIPE). */
int jb_exec_signal(struct jb_session *s, const char *what, jb_error *err);

/* Tells session s's spawner to keep a jail built ahead for the next command (`ahead` true: the
 * session is active) or to kill the one it holds and build none (false: the session is paused),
 * whether or not a command runs (any thread; the answer is skipped by jb_exec_run's reader).
 * 0, or -1 (ENOTSUP: no spawner; EPIPE). */
int jb_exec_ahead(struct jb_session *s, bool ahead, jb_error *err);

#endif
