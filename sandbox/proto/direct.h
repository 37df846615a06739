/* direct.h — the hand-over of a read, list or stat from jailboxd straight to the
 * jailbox-worker that holds its session, on the same host, without the queued ops row and its
 * two wake-ups (db/ops.h): the wire contract both ends compile. jailboxd's end is the Socket.IO
 * service thread's relay (api/socket/socket.c), the worker's is
 * sandbox/worker/direct_server.c; nothing else speaks it.
 *
 * The worker listens on a Unix stream socket (JAILBOX_WORKER_OPS_SOCKET, mode 0600; jailboxd
 * gives each worker it starts "<state dir>/worker-<i>.ops", server/workers.h). Each side
 * sends one JSON object per line (UTF-8, '\n'-terminated), one request in flight per
 * connection; the worker accepts every connection and serves their requests in the order
 * they come on a bounded set of threads (a request waits for a thread, never is refused for
 * load):
 *
 *   request  {"jobId": J, "tool": "read"|"list"|"stat", "path": P, "args": {…shim arguments},
 *             "expect": {mode, exclude, flagged} | null, "id": I?}
 *   answer   {"ran": true, "opId": N, "answer": {ok, result | error}, "id": I?}
 *            {"ran": false, "state": S, "reason": R, "id": I?}   (nothing was stored or run)
 *
 * An integer "id" in a request is echoed in its answer, so that a caller that keeps a
 * connection for many requests can tell its answer from a stray line.
 *
 * With ran=true the op row was inserted, run in the shim and completed with its audit entry
 * in one committed transaction before the answer was sent: an answer never precedes its
 * durable record. ran=false means the caller takes the queued path instead (the session is
 * not active — a paused session's op must wait —, an op queued before it waits to run — it
 * goes first —, the expectation no longer holds, the session is not on this worker, or the
 * worker could not reach the database). Only ops that
 * change nothing go this way: if the worker dies before answering, running the op again on
 * the queued path is harmless. Lines are size-limited before parsing (JB_DIRECT_MAX_LINE). */
#ifndef JB_SANDBOX_DIRECT_H
#define JB_SANDBOX_DIRECT_H

#define JB_DIRECT_MAX_LINE (8 * 1024 * 1024) /* bytes of one line, either way */
#define JB_DIRECT_MAX_DEPTH 32 /* JSON nesting of one line */

#endif
