/* ops.h — the path of an agent's MCP tool call through jailboxd: session state, path
 * syntax, exclusions, content scanning, supervision, audit of what is refused here, and the
 * hand-over to the worker that holds the session. Two routes, one for each kind of call: a
 * read or list of an active session held by one of this process's workers is relayed by the
 * socket's service thread to the worker's ops socket (jb_op_direct_plan below,
 * api/socket/relay.c); every other call is stored as an ops row for the worker to run
 * (jb_op_tool, db/ops.h; the stages of one call are in api/core/op_call.h). */
#ifndef JB_API_OPS_H
#define JB_API_OPS_H

#include <libpq-fe.h>

#include "api/core/mcp.h"
#include "lib/compiler.h"
#include "sandbox/proto/tool.h"

/* Stable codes of the file tools' failures (-32007..-32019; MCP 2026-07-28 reserves -32020 and
 * up for its own protocol errors); each error's data carries {reason} with the
 * name after JB_MCP_. */
enum {
  JB_MCP_DENIED = -32010,
  JB_MCP_NOT_FOUND = -32011,
  JB_MCP_EXCLUDED = -32012,
  JB_MCP_PAUSED = -32013,
  JB_MCP_REJECTED = -32014,
  JB_MCP_FLAGGED = -32015,
  JB_MCP_TOO_LARGE = -32016,
  JB_MCP_INVALID = -32602, /* bad arguments (JSON-RPC "Invalid params") */
  JB_MCP_UNAVAILABLE = -32017, /* database, worker or shim unavailable; try again */
  JB_MCP_CHANGED = -32018, /* the file changed between the write's request and its approval */
  JB_MCP_TIMEOUT = -32019, /* no decision within JAILBOX_APPROVAL_TIMEOUT */
  JB_MCP_EXISTS = -32007, /* the target exists (mkdir onto a file, move without overwrite) */
  JB_MCP_REGEX_LIMIT = -32008, /* a search's regex hit PCRE2's match or depth limit */
  JB_MCP_NO_MATCH = -32009, /* an edit's oldText is not found, or found more than once */
};

/* Whether `tool` may change the workspace or run code (write, edit, mkdir, move, delete,
 * exec): such a call is held for the buyer in a supervised session. */
bool jb_tool_mutates(enum jb_tool tool);

/* The longest timeoutSec an exec may ask for (JAILBOX_EXEC_MAX_TIMEOUT_S, seconds, 1..86400;
 * 600 until set). Set once at start, before any call is decoded. */
void jb_op_set_exec_max_timeout(long seconds);

/* Adds the operator's environment names to those an exec may set (JAILBOX_EXEC_ENV_ALLOW):
 * `list` comma- or space-separated, each a variable name, or a name followed by '*' for every
 * name it starts; JAILBOX_* never. Set once at start, before any call is decoded (not
 * thread-safe). 0, or -1 with a sentence in `msg` (nothing changed). */
int jb_op_set_exec_env_allow(const char *list, char *msg, size_t msize);

/* The tool handler given to jb_socket_start (see jb_mcp_tool_fn): every tool of enum jb_tool
 * for session `job_id`, each op stored as a row. Blocks its socket worker thread until the op
 * has run — for a mutating tool of a supervised session, until the buyer decides (or the
 * session ends). */
JB_MUST_USE json_t *jb_op_tool(void *ctx, struct jb_app *app, const char *job_id, const char *tool,
                               json_t *arguments, unsigned flags, struct jb_progress *progress,
                               struct jb_mcp_error *e);

/* A tools/call of a 2026-07-28 client that declared the Tasks extension
 * (https://modelcontextprotocol.io/extensions/tasks, io.modelcontextprotocol/tasks) is not kept
 * waiting on the buyer: with JB_MCP_CALL_TASK, jb_op_tool stores the op that a supervised
 * session holds for the buyer as it always does, names it by a task id (16 random bytes in hex,
 * after "jbt-"; the ops row's task_id, so that every instance finds it) and returns the
 * CreateTaskResult at once. The task is the op: jb_op_task_get reads it. */
#define JB_OP_TASK_ID_MAX 64

/* A task's state, read from its op (jb_op_task_get). */
struct jb_op_task {
  bool finished; /* terminal: result, or *e (the same failure the call would have had) */
  json_t *result; /* owned: the CallToolResult of a finished op, or NULL */
  char status_message[160]; /* while working: what it waits for */
  char created[32], updated[32]; /* ISO 8601 UTC */
};

/* The task `task_id` of session `job_id`'s agent: its op read from the database, with what
 * waiting in the call would have done on the way — a pending op past JAILBOX_APPROVAL_TIMEOUT
 * expires (failed with timeout, audited, announced). 0 with *t (t->result new, to
 * json_decref); 1 when the session has no such task (another session's is not found either);
 * -1 with *e (unavailable) when the database cannot be read. *e is also filled when the
 * finished op failed (t->result NULL). */
int jb_op_task_get(struct jb_app *app, const char *job_id, const char *task_id,
                   struct jb_op_task *t, struct jb_mcp_error *e);

/* The direct path of reads and lists from the socket's service thread (api/core/mcp.h
 * jb_mcp_direct_fns): plan decides on this process's copy of the session alone — an active
 * session, valid arguments, a path that passes the syntax rules, exclusions and pre-scan flags,
 * a worker of this process — with no database and no wait, and otherwise hands the call to
 * jb_op_tool (which refuses and audits what must be, and stores the rest as ops rows). The worker checks the copy against the
 * session under its lock before it runs anything (sandbox/proto/direct.h "expect"), and the shim the
 * path and exclusions again at open time. */
bool jb_op_direct_plan(struct jb_app *app, const char *job_id, const char *tool, json_t *arguments,
                       struct jb_mcp_direct *out);
JB_MUST_USE json_t *jb_op_direct_answer(void *ctx, json_t *answer, struct jb_mcp_error *e,
                                        bool *ran);
void jb_op_direct_free(void *ctx);

/* The kill of exec op `op_id` of session `job_id` by `by` ("buyer", or "service": the
 * operator; recorded as theirs) (db/ops.h jb_db_op_kill) on
 * connection `c`, with what follows it published: a pending exec is rejected (jailbox:op), a
 * queued one failed `killed` (jailbox:op, its audit head), a running one's worker is told to
 * kill its command (NOTIFY jb_exec; the op ends when the command does). JB_OK with *out
 * {opId, state, outcome: "rejected"|"failed"|"killing"} (new); JB_ERR_NOT_FOUND;
 * JB_ERR_CONFLICT with `state` (20 bytes): not an exec, or no longer pending, queued or
 * running; JB_ERR_FAIL. */
int jb_op_kill(struct jb_app *app, PGconn *c, const char *job_id, long long op_id,
               const char *reason, const char *by, json_t **out, char state[20], jb_error *err);

/* The cap on the text of a whole diff (GET /v1/jailbox/:jobId/ops/:opId/diff): bytes. Both
 * sides are at most 1 MiB (the stat's content, a write's size), so a diff reaches it only
 * if those limits grow. */
#define JB_OP_DIFF_FULL_MAX (16 * 1024 * 1024)

/* Why jb_op_full_diff made no diff: the HTTP status and error code to answer with, a
 * sentence, and the state it names (the op's, or the session's when the session is not
 * active; "" when none). */
struct jb_op_diff_fail {
  int status;
  char code[32];
  char msg[400];
  char state[20];
};

/* The whole unified diff of pending write or edit `op_id` of session `job`: the file as it
 * is now — read through the worker that holds the session as the diff preview reads it (a
 * stat op with content, stored and run as any op: it is in the ops list and the audit chain)
 * — against the proposed content kept in the op's arguments, at most `max` bytes of diff
 * text (lib/diff.h jb_diff_preview; truncated when cut). Blocks until the stat has run
 * (OP_RUN_TIMEOUT_MS at most while the session stays active).
 * Returns new {opId, tool, path, diff, exists, currentSha256 (absent for no file),
 * changed (the file is no longer the one the op is bound to: it would be refused if
 * approved), reason?} — diff as jb_diff_preview makes it, or null with `reason` (binary, or
 * the file is over the stat's 1 MiB of content) — or NULL with *fail: 404 not_found; 409
 * no_diff (not a write or an edit), 409 invalid_state (the op is not pending: its content is
 * dropped at its outcome, migration 030; or the session is not active), 409 unreadable (the
 * shim refused the stat), 503 when the database or the sandbox is unavailable. */
JB_MUST_USE json_t *jb_op_full_diff(struct jb_app *app, const char *job, long long op_id,
                                    size_t max, struct jb_op_diff_fail *fail);

/* Whether session `job_id`'s agent is offered exec (tools/list; api/core/mcp.h
 * jb_mcp_tools_list), from this process's copy of the session or, without one, one read of it
 * from the database — decided as the refuse-if stage decides an exec call (op_exec_offer_of,
 * api/core/op_call.h): one place says whether a session can run commands. A session that
 * cannot be read (unknown, database down) is JB_EXEC_OFFER_UNKNOWN. Blocks for one query at
 * most. */
enum jb_exec_offer jb_op_exec_offer(struct jb_app *app, const char *job_id);

/* Moves session `job_id` awaiting_agent → active (its agent has arrived), with its audit entry
 * and jailbox:state event; quiet when the session is in another state. */
void jb_op_agent_arrived(PGconn *c, struct jb_app *app, const char *job_id);

/* Forgets this process's copy of session `job_id` that the op path decides on (its state
 * changed: a pause, a resume, an end). Call it once the change is committed: in the process
 * that made it before anyone is told, and in every process on the change's jb_op
 * notification ("0 <state> <job id>", migration 009). Thread-safe. */
void jb_op_session_changed(const char *job_id);

#endif
