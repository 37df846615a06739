/* op_call.h — one agent tools/call on the op path, as named stages over one per-call struct
 * (private to api/core/ops.c and api/core/op_*.c). jb_op_tool (ops.c) runs the stages in
 * this order, each on what the ones before it filled in:
 *
 *   decode        (op_checks.c) the tool's arguments and its path
 *   load session  (op_session.c) this process's copy of the session, or the database's row;
 *                 a session still starting (created, prescanning) is waited for
 *                 (op_await_start) and read again; the agent's first call moves
 *                 awaiting_agent to active
 *   refuse if     (op_checks.c) the session is not active or paused, naming its state and
 *                 why it is in it (a paused session takes
 *                 the op and holds it); the path breaks the syntax rules (lib/pathcheck.h —
 *                 the shim checks it again at open time), is excluded, or was flagged by the
 *                 pre-scan: an audit entry each, and an escape signal where the path tries to
 *                 leave the workspace
 *   prepare       (op_checks.c) the shim's arguments; a write's content decoded, hashed and
 *                 scanned (flagged: refused, security alert, audit entry)
 *   supervise     (op_supervise.c) a place among the calls that wait (a read or list of an
 *                 active session takes one only if it meets a pause); for a write of a
 *                 supervised session the file as it is now (a stat op, stored and waited for
 *                 as the ops below) and the diff preview
 *   store         (op_worker.c) the op stored: pending for the buyer (and announced to them)
 *                 when the session is supervised and the op is a write, queued otherwise
 *   wait          (op_worker.c) until the worker that holds the session has run it and
 *                 written its audit entry (db/ops.h), or the buyer rejected it
 *   answer        (op_worker.c) the MCP result of the op's answer
 *
 * Each stage returns an enum op_step; op_call_release (op_wait.c) frees what the stages took, on
 * every path. Every op that comes here is stored as a row. The one other way an op reaches a
 * worker is the socket's service thread (api/socket/socket.c): a read or list of an active
 * session that one of this process's workers holds, planned with the same helpers
 * (jb_op_direct_plan) on this process's copy of the session, without the database and
 * without a wait, and relayed on the worker's ops socket (sandbox/proto/direct.h). What the
 * planner leaves — a refusal to audit, the call that moves awaiting_agent to active, a
 * session with no copy here, paused, or held by a worker of another host — comes here. */
#ifndef JB_API_OP_CALL_H
#define JB_API_OP_CALL_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/core/ops.h"
#include "db/events.h"
#include "db/sessions.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/pathcheck.h"
#include "lib/reviewer.h"
#include "server/opwait.h"

#define OP_FILE_MAX (1024 * 1024) /* bytes of one write (the shim's JB_FILE_MAX) */
#define OP_PATTERN_MAX 1024 /* bytes of a find pattern, a search regex or glob */
#define OP_EDITS_MAX 100 /* replacements of one edit call */
#define OP_READ_MANY_MAX 50 /* paths of one read_many call */
#define OP_RUN_TIMEOUT_MS 120000 /* a queued op of an active session must run within this */
#define OP_EXEC_ARGV_MAX 256 /* items of an exec's argv */
#define OP_EXEC_ARGS_BYTES (128 * 1024) /* bytes of an exec's argv (or command), and of its env */
#define OP_EXEC_ENV_MAX 256 /* variables of an exec's env */
#define OP_EXEC_STDIN_MAX (1024 * 1024) /* bytes of an exec's stdin */
#define OP_EXEC_OUTPUT_MAX (8 * 1024 * 1024) /* maxOutputBytes at most (per stream) */
#define OP_EXEC_OUTPUT_DEFAULT (1024 * 1024) /* maxOutputBytes when not given */
#define OP_EXEC_TIMEOUT_DEFAULT 120 /* timeoutSec when not given */
#define OP_EXEC_TIMEOUT_MAX_DEFAULT 600 /* JAILBOX_EXEC_MAX_TIMEOUT_S's default */

/* What a stage tells the sequence. */
enum op_step {
  OP_NEXT = 0, /* on to the next stage */
  OP_ANSWERED, /* call->ans holds the op's answer: on to the answer stage */
  OP_END, /* the call ends without a result; *call->e says why */
  OP_STALE, /* the copy of the session decided on no longer held at the insert: nothing
                 * was done; the call starts over on the database's row */
};

/* One call: the fields of a stage are filled by it and read by the stages after it. */
struct op_call {
  /* the call (borrowed) */
  struct jb_app *app;
  const char *job;
  enum jb_tool tool; /* any but done */
  json_t *args;
  struct jb_mcp_error *e;
  bool fresh; /* read the session from the database, not from the copy */
  struct jb_progress *progress; /* the client's progress notifications while the call waits
                                 * (borrowed; NULL or off: none asked for) */
  /* decode */
  const char *path; /* borrowed from args: the path the op runs on (move: the source); "."
                     * for list, find and search without one; "" for read_many */
  size_t plen; /* its length in bytes */
  const char *dest; /* move's destination (borrowed), else NULL */
  size_t destlen;
  json_t *paths; /* read_many's paths (borrowed), else NULL */
  /* load session */
  PGconn *c; /* owned; NULL once it could not be had again */
  struct jb_session_facts sess; /* owned: what the op path decides on; its state becomes
                                 * active when this call's arrival moved it there */
  bool cached; /* sess is this process's copy */
  bool arrived; /* this call moved the session from awaiting_agent to active */
  bool recheck; /* decided on a copy, or on a read made before the session became
                               * active (the buyer may still add exclusions in awaiting_agent):
                               * the insert checks that it still holds */
  /* refuse if */
  json_t *many; /* owned: read_many's answers by index, JSON null where the shim answers;
                 * the paths refused here hold {path, ok:false, error} */
  /* prepare */
  json_t *sargs; /* owned: the shim's arguments */
  unsigned char *data; /* owned: a write's content or an edit's result, dlen bytes */
  size_t dlen;
  char sha_hex[65]; /* its SHA-256 in hex */
  /* supervise */
  bool counted; /* holds a place among this process's waiting calls */
  struct op_waiting *waiting; /* and its session's count of them (op_wait.c) */
  bool buyer_wait; /* a buyer's whole diff: not in its session's share of the places */
  bool pending; /* a write of a supervised session: waits for the buyer */
  bool staged; /* a mutating op with a `changeset` name: checked and shown as a pending one,
                * then held 'staged' for its batch (op_stage) instead of run or asked */
  json_t *current; /* owned: a pending op's target (an edit's file) as it is now (its stat) */
  json_t *current2; /* owned: a supervised move's destination as it is now (its stat) */
  json_t *diff; /* owned: its diff preview (lib/diff.h) */
  char *describe; /* owned: what a supervised mkdir, move or delete will do, for the buyer */
  size_t replaced; /* an edit's replacements */
  char before_hex[65]; /* an edit's file as read: its SHA-256 */
  /* rules (api/core/policy.c) */
  char decided_by[80]; /* "rule:<id>" when a rule allowed the op, "reviewer" when the
                        * reviewer did; "" otherwise */
  char decision_reason[768]; /* why, when a rule allowed or asked ("asked by rule r-…"), or
                              * the reviewer allowed or passed the op to the buyer */
  char asked_by[80]; /* "rule:<id>" when an ask rule held the op for the buyer; "" otherwise */
  /* review (api/core/review.c) */
  bool reviewed; /* the reviewer was asked (or skipped while it is paused): review holds it */
  struct jb_review review;
  bool ruled; /* the rules decided on are those of rules_version: the insert checks it */
  long long rules_version;
  char use_rule[72]; /* the deciding rule counts uses: the insert counts one; "" otherwise */
  /* store, wait */
  struct jb_opwait_ticket ticket; /* registered from just before the insert to the outcome */
  long long op_id;
  char st[20]; /* the session's state as the last insert saw it; "" when the
                               * copy decided on no longer held */
  json_t *ans; /* owned: the op's answer {ok, result | error} */
};

/* The stages, in order (see the top of this file). */
enum op_step op_decode(struct op_call *call); /* op_checks.c */
enum op_step op_load_session(struct op_call *call); /* op_session.c */
enum op_step op_refuse_if(struct op_call *call); /* op_checks.c */
enum op_step op_prepare(struct op_call *call); /* op_checks.c */
enum op_step op_supervise(struct op_call *call); /* op_supervise.c */
enum op_step op_store(struct op_call *call); /* op_worker.c */
/* A staged call's store and answer (op_stage.c): the op held 'staged' in its batch and the
 * CallToolResult {staged: true, changeset, opId, tool, path, …} (new), or NULL with *call->e
 * (bad_request naming the batch's op on the same path, the session's state). */
json_t *op_stage(struct op_call *call);
enum op_step op_wait(struct op_call *call); /* op_worker.c */
/* The MCP result of call->ans (new), or NULL with *call->e when the shim refused the op. */
json_t *op_answer(struct op_call *call); /* op_worker.c */

/* Frees what the stages took (the connection back to the pool, the place among the waiting
 * calls given back) and leaves `call` empty but for its borrowed fields. */
void op_call_release(struct op_call *call); /* op_wait.c */

/* ---- shared by the stages and the direct planner ---- */

/* Fills *e: JSON-RPC error `code`, data {reason}, and the printf-style message. */
void op_error(struct jb_mcp_error *e, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Fills *e for an op found rejected with `reason` (nullable) while its session is in
 * `sess_state`: "rejected" (-32014) when the buyer (or a rule) rejected it; when the session's
 * end rejected it, -32010 with the reason "session_<state>" (session_failed, session_aborted,
 * …) — the buyer decided nothing. */
void op_error_rejected(struct jb_mcp_error *e, const char *reason, const char *sess_state);
/* Logs the database error `err` and fills *e with "unavailable". */
void op_error_unavailable(struct jb_mcp_error *e, const jb_error *err);
/* The answer to an op insert (db/ops.h jb_db_op_create_decided) that returned `rc`: false for
 * JB_OK; else true with *call->e filled — "denied" naming the session's state (call->st, as
 * the insert saw it; "gone" when empty) for JB_ERR_CONFLICT and JB_ERR_NOT_FOUND,
 * "unavailable" (logged) for a database failure `err`. */
bool op_insert_refused(struct op_call *call, int rc, const jb_error *err); /* op_common.c */

/* The paths a call names, borrowed from its arguments. */
struct op_args_view {
  const char *path; /* path (move: source); "." for list, find, search without; "" read_many */
  size_t plen;
  const char *dest; /* move's destination, else NULL */
  size_t destlen;
  json_t *paths; /* read_many's paths, else NULL */
};

/* Decodes a `tool` call's arguments before anything else is done with them: every argument
 * known to the tool and of its type, the required ones there, and the limits — integers in
 * their ranges (read's offset ≥ 0, limit/head/tail ≥ 1, at most one way of choosing what to
 * read; list's depth 1..64; search's maxMatches 1..5000), patterns and globs non-empty and at
 * most OP_PATTERN_MAX bytes, read_many 1..OP_READ_MANY_MAX paths, edit 1..OP_EDITS_MAX
 * {oldText (non-empty), newText, replaceAll?} with texts of at most OP_FILE_MAX bytes, done's
 * summary at most 4096 bytes; exec exactly one of argv (1..OP_EXEC_ARGV_MAX strings) or
 * command, each at most OP_EXEC_ARGS_BYTES without NUL, env of variable names each
 * op_exec_env_allowed allows (else JB_MCP_DENIED), stdin at most OP_EXEC_STDIN_MAX bytes,
 * timeoutSec 1..JAILBOX_EXEC_MAX_TIMEOUT_S, maxOutputBytes 0..OP_EXEC_OUTPUT_MAX, its cwd the
 * path. (A path's own rules — 4096 bytes among them — are checked
 * after, with an audit entry: op_path_passes.) True with *out; false with *code
 * (JB_MCP_INVALID, or JB_MCP_TOO_LARGE for an over-long text) and a sentence in `msg`. */
bool op_check_args(enum jb_tool tool, json_t *args, struct op_args_view *out, int *code, char *msg,
                   size_t msize);

/* Whether an exec may set environment variable `name`: a locale, colour, CI or debug name of
 * the built-in allow-list, or one of JAILBOX_EXEC_ENV_ALLOW (jb_op_set_exec_env_allow); never
 * a JAILBOX_* name. */
bool op_exec_env_allowed(const char *name);

/* The worker's arguments of a decoded exec call (new; sandbox/worker/exec_op.c): {argv (a
 * command becomes ["/bin/sh","-c",text], kept as "command" too), cwd ("." when not given),
 * env ({} when not given), stdin?, timeoutMs, maxOutputBytes, writable}. NULL on OOM. */
json_t *op_exec_args(json_t *args);

/* What the path rules say about a path; the first rule it breaks decides. */
struct op_path_verdict {
  enum jb_path_verdict syntax; /* JB_PATH_OK, or the syntax rule broken */
  bool excluded; /* matches an exclusion: glob (borrowed; may be NULL) */
  const char *glob;
  const char *flagged_kind; /* the pre-scan's kind of the flagged entry it is or passes
                                * through (borrowed), or NULL */
};

/* Whether `path` (`plen` bytes) may be used by `tool` in a session with exclusions `exclude`
 * and pre-scan flags `flagged` (both borrowed): true, or false with *v saying why. The
 * workspace root "." is a path only of list, find and search, and never excluded nor
 * flagged. */
bool op_path_passes(const char *path, size_t plen, enum jb_tool tool, const json_t *exclude,
                    const json_t *flagged, struct op_path_verdict *v);

/* The kind of the pre-scan's flagged entry (sandbox/worker/workspace_scan.h) that `path` is or
 * passes through; NULL when none (too_large is a notice, not a refusal). `flagged` is the
 * pre-scan's [{path, kind}] list. */
const char *op_flagged_kind(const char *path, const json_t *flagged);

/* The shim's arguments of a `tool` call (new; sandbox/proto/PROTOCOL.md): `args` without the
 * path (move: without the source) and named as the shim names them (read: offset/limit →
 * lineOffset/lineLimit, byteOffset/byteLength → offset/length; stat: sha256 → hash, false by
 * default), and the session's exclusions (borrowed) when it has any — the shim checks them
 * again on the path it resolves: a symlink must not lead around them. NULL for edit (its
 * shim op is the write jailboxd makes of it) and on allocation failure. */
json_t *op_shim_args(enum jb_tool tool, json_t *args, json_t *exclude);

/* Whether a `tool` call may be handed straight to the worker (sandbox/proto/direct.h): the
 * tools that change nothing (read, read_many, list, find, search, stat). */
bool op_tool_direct(enum jb_tool tool);

/* What an op is decided on, for the insert or the worker to check against the session (new):
 * {mode, exclude, flagged} of `sess` (borrowed; flagged [] when it has none). */
json_t *op_direct_expect(const struct jb_session_facts *sess);

/* The relayed read's request (sandbox/proto/direct.h; new): `sargs`, `expect` borrowed. */
json_t *op_direct_request(const char *job, const char *tool, const char *path, json_t *sargs,
                          json_t *expect);

/* The ops socket of the worker that holds session `sess` (its contract's "worker") when that
 * worker is one of this process's (server/workers.h), else NULL. Borrowed. */
const char *op_worker_socket(struct jb_app *app, const struct jb_session_facts *sess);

/* The MCP result of a `tool` op that ran on `path` (`ans` {ok, result | error}, borrowed):
 * new, or NULL with *e set when the shim refused it. A list's entries, a find's matches and
 * a search's matches are filtered by the session's exclusions and pre-scan flags (borrowed). */
json_t *op_answer_result(enum jb_tool tool, const char *path, json_t *ans, json_t *exclude,
                         json_t *flagged, struct jb_mcp_error *e);

/* Fills *e with the JSON-RPC error of the shim's `error` {code, message} (borrowed). */
void op_shim_error(struct jb_mcp_error *e, json_t *error);

/* Whether session `sess` offers exec, from its contract's exec.available (db/sessions.h
 * jb_session_exec): the one decision behind tools/list (jb_op_exec_offer) and the refuse-if
 * stage's refusal of an exec call. Only a contract that says false takes exec away; while
 * there is none (a session being launched) exec is offered and the worker decides when a
 * command runs. */
enum jb_exec_offer op_exec_offer_of(const struct jb_session_facts *sess); /* op_session.c */

/* This process's copy of session `job` copied into *out (overwritten: it must own nothing;
 * clear it with jb_session_facts_clear): true, or false with *out empty when there is none
 * (or no memory for the copy). */
bool op_session_copy(const char *job, struct jb_session_facts *out);

/* When event `kind` `ev` of `job` would not fit one notification (JB_EVENT_MAX_BYTES) — a
 * path of control characters takes up to six bytes a byte as JSON — its "path" is replaced
 * by "sha256:HEX" of the path, as audit entries record over-long paths. */
void op_fit_path(const char *job, enum jb_event_kind kind, json_t *ev);

/* Starts the wait for an op of call->job that is about to be stored: registers `t` before the
 * insert, so that the notification of its outcome cannot come before anyone listens. */
void op_wait_begin(struct op_call *call, struct jb_opwait_ticket *t);
/* Ends a wait begun with op_wait_begin whose op was not stored. */
void op_wait_end(struct op_call *call, struct jb_opwait_ticket *t);

/* Waits for op `op_id`, just stored with ticket `t` registered (op_wait_begin), to finish,
 * and ends the wait. Returns its stored answer {ok, result | error} (new), or NULL with
 * *call->e (rejected, timed out, session ended, unavailable; or an answer that cannot be
 * read). call->c may be NULL after. */
json_t *op_await(struct op_call *call, long long op_id, struct jb_opwait_ticket *t);

/* An audit entry (operation: the call's tool; `path` borrowed, NULL: none) for an op refused
 * in jailboxd, with `details` (stolen; "ok": false is added), and its audit_head event. */
void op_audit_refusal(struct op_call *call, const char *path, json_t *details); /* op_common.c */

/* The content scanner (api/core/scan.h) on call->data, the content a write or an edit would
 * leave: flagged, the op is refused (audited, a security alert); clean, call->sargs get its
 * size and SHA-256 (call->sha_hex, filled before). */
enum op_step op_scan_content(struct op_call *call); /* op_checks.c */

/* The session's approval rules on a mutating op (api/core/policy.c), after the path checks
 * and the content scanner, before the buyer is asked: the first live rule that matches
 * decides — allow (call->pending false, call->decided_by "rule:<id>"), ask (pending true),
 * deny (OP_END: refused, named in *call->e and in an audit entry) — and a rule with uses has
 * one counted; none matches: the mode's default as op_supervise set call->pending. */
enum op_step op_apply_rules(struct op_call *call); /* policy.c */
/* The insert of the store stage (op_worker.c op_store): the op as jb_db_op_create_decided
 * stores it, checked against the rules version it was decided on and counting the deciding
 * rule's use in the same transaction (db/policy.h jb_db_op_create_used) when op_apply_rules
 * said so. *rules_stale: the rules changed meanwhile (nothing stored; this process's copy of
 * them is dropped, the call starts over). Returns as jb_db_op_create_decided. */
int op_insert_ruled(struct op_call *call, const char *args_text, const char *expect,
                    bool *rules_stale, jb_error *err); /* policy.c */

/* What the buyer is shown of a pending op (new; NULL on OOM), before it is stored: {jobId,
 * tool, path, …} as the approval request carries it (api/events.md), without opId, diff and
 * the decision's fields. The reviewer is sent the same view. */
json_t *op_approval_view(struct op_call *call); /* op_view.c */

/* Puts call->diff into the approval request of the pending op call->op_id and announces it,
 * with askedBy ("rule:<id>" or "mode") and the reviewer's {verdict, reason, failed} when it
 * was asked. */
void op_announce_approval(struct op_call *call); /* op_view.c */

/* The diff preview kept with a pending op (call->diff cut to JAILBOX_DIFF_PREVIEW_MAX bytes of
 * text) as JSON text, new (free it); NULL when there is none. The op insert stores it, so the
 * op is never seen pending without it. */
char *op_diff_kept_text(const struct op_call *call); /* op_view.c */

/* The operator's reviewer (lib/reviewer.h) on an op that would wait for the buyer
 * (call->pending after the rules, its diff or description made): allow — call->pending false,
 * decided_by "reviewer", decision_reason its reason; deny — OP_END, refused (JB_MCP_DENIED,
 * an audit entry with decidedBy "reviewer" and the reason); ask, or any failure — the buyer
 * is asked, call->review saying why. No reviewer configured, or not pending: OP_NEXT at once.
 * The database connection is back in the pool while the reviewer is waited for. */
enum op_step op_review(struct op_call *call); /* review.c */

/* Takes a place among this process's calls that wait on the buyer, a command, a write or a
 * pause (at most JAILBOX_MAX_WAITING_CALLS) and tells the handler pool that this thread waits
 * (server/pool.h: another thread stands in, so JAILBOX_WS_WORKERS stay free for the decision
 * the call waits for and for everything else): OP_NEXT (also when the call holds one
 * already), or OP_END with *call->e "unavailable" when they are all taken or no thread can
 * be started. */
enum op_step op_take_waiting_place(struct op_call *call); /* op_wait.c */

/* As op_take_waiting_place, for an op stored already: false (and nothing set in *call->e) when
 * no place is free — the call then waits all the same, since answering "try again" of an op
 * that will still run would make the agent send it twice. */
bool op_try_waiting_place(struct op_call *call); /* op_wait.c */

/* `path` as it is now: a stat op (with the directory's names as they would land when `tree`:
 * the shim's stat `tree`) stored and waited for as any op, its result into *out (new).
 * `missing_ok`: a path whose parent is missing too is {exists: false}. OP_END with *call->e
 * when the stat could not be had or the shim refused it. */
enum op_step op_stat_path(struct op_call *call, const char *path, bool tree, json_t **out,
                          bool missing_ok); /* op_wait.c */

/* The landing check (op_landing.c) of a write's or an edit's path, a mkdir's path and the
 * directories it may make, a move's source, destination and (a directory's) tree as it would
 * land — the last bound to the move as its `expectTree`: the path rules of the scanner
 * (jb_scan_landing) and the covered links of the pre-scan ("landing_link"). A flagged
 * landing: refused (audit entry decided by the scanner, security alert flagged_landing,
 * `flagged`), OP_END. */
enum op_step op_check_landing(struct op_call *call);

/* The folders above `path` (a write's path, a move's destination) that the op may make:
 * none when the agent's createParents is false; else each folder above it, less those the
 * landing check flags when they exist now (a stat of the deepest flagged one) — one that does
 * not exist is refused as a mkdir of it is. A list over 16 KiB as JSON is narrowed to the
 * folders missing now (op_parents_exact), and is too_large when they still are. Sets the
 * shim's argument "createParents" (the paths, shallowest first; the shim makes only those).
 * OP_NEXT or OP_END. */
enum op_step op_check_parents(struct op_call *call, const char *path);

/* Narrows the shim's "createParents" to the folders missing now (none when `target`, the
 * stat of the write's path or the move's destination, exists; else, `target` NULL too, a
 * binary search of stats):
 * what a supervised op shows the buyer and may make. OP_NEXT or OP_END. */
enum op_step op_parents_exact(struct op_call *call, json_t *target);

/* The landing check of one `path` (a directory when `is_dir`) for `call`: OP_NEXT, or OP_END
 * refused as op_check_landing refuses. */
enum op_step op_check_landing_path(struct op_call *call, const char *path, bool is_dir);

/* The SHA-256 of `len` bytes at `p` as 64 lowercase hex digits and a NUL into `hex`. */
void op_sha256_hex(const void *p, size_t len, char hex[65]); /* op_common.c */

/* The length, at most `cut`, of a prefix of the `n` bytes of UTF-8 text at `p` that ends at a
 * character's start (the prefix stays UTF-8). */
size_t op_utf8_prefix(const char *p, size_t n, size_t cut); /* op_common.c */

/* `path` as it is now, as op_stat_path, and with the file's content when `content` and the
 * file is at most 1 MiB (a pending write's or an edit's target, for the diff). */
enum op_step op_stat_of(struct op_call *call, const char *path, bool content, bool tree,
                        json_t **out, bool missing_ok); /* op_wait.c */

/* Whether a session in `state` is still being prepared (created, prescanning): a call waits
 * for it (op_await_start). */
bool op_session_starting(enum jb_session_state state); /* op_wait.c */

/* The wait of a call whose session (call->sess, read from the database) is still starting:
 * with a place among the waiting calls (given back after), woken by the session's changes of
 * state (jb_op "0 <state> <job>", server/opwait.h; re-read at least every second), until a
 * fresh read of the session (into call->sess) finds it past starting — active, paused,
 * awaiting_agent, ended or gone: the stages after decide on it — OP_NEXT; or OP_END with
 * *call->e "unavailable" after JAILBOX_START_WAIT_S, in a drain, or when the database cannot
 * be read. Not starting: OP_NEXT at once. Nothing is stored. */
enum op_step op_await_start(struct op_call *call); /* op_wait.c */

/* Gives back the place op_take_waiting_place took. */
void op_leave_waiting(struct op_call *call); /* op_wait.c */

#endif
