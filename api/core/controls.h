/* controls.h — one schema per buyer control (pause, resume, abort, accept, approve, reject,
 * kill, mode, rule_add, rule_revoke, pre_scan_done, effects_clear, rollback), shared by the two fronts: the REST
 * handlers (api/rest/) and the Socket.IO events (api/socket/socket.c). A control's arguments
 * are one JSON object, the "socket form": the Socket.IO event's argument as it is, and for
 * REST the body with the path parameter (opId, ruleId) added under its field name. Both
 * fronts check it here, so that the same object is taken or refused, with the same error
 * code, on both (api/events.md, api/openapi.yaml). */
#ifndef JB_API_CONTROLS_H
#define JB_API_CONTROLS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/core/auth.h"
#include "api/core/reply.h"
#include "lib/compiler.h"

enum jb_control {
  JB_CONTROL_PAUSE,
  JB_CONTROL_RESUME,
  JB_CONTROL_ABORT,
  JB_CONTROL_ACCEPT,
  JB_CONTROL_APPROVE,
  JB_CONTROL_REJECT,
  JB_CONTROL_KILL,
  JB_CONTROL_MODE,
  JB_CONTROL_RULE_ADD,
  JB_CONTROL_RULE_REVOKE,
  JB_CONTROL_PRE_SCAN_DONE,
  JB_CONTROL_EFFECTS_CLEAR, /* the buyer lets writable commands run again after incomplete
                               effects (migration 041) */
  JB_CONTROL_ROLLBACK, /* undo the session's ops from its pre-images (migration 044; the worker
                          runs it): on a paused or ended session */
  JB_CONTROL_COUNT
};

/* The checked arguments; strings and JSON values are borrowed from the object checked. */
struct jb_control_args {
  long long op_id; /* approve, reject, kill: > 0 */
  const char *reason; /* 0..1024 bytes, no control characters; NULL when absent */
  const char *allow_similar; /* approve: 1..32 bytes; NULL when absent */
  const char *mode; /* mode: "supervised" or "unsupervised" */
  json_t *rules; /* rule_add: `rules` (an array) or else `rule` (an object) */
  const char *rule_id; /* rule_revoke: 1..64 bytes */
  json_t *exclude; /* pre_scan_done: an array of globs; NULL when absent */
  long long to; /* rollback: the last op kept (> 0); 0 when absent (the state at open) */
  bool force; /* rollback: overwrite paths changed since their op */
  bool dry_run; /* rollback: the plan only, nothing queued */
  json_t *files; /* approve, a changeset: the paths approved (an array of 1..4096-byte
                    strings, at most JB_CONTROL_FILES_MAX); NULL when absent */
  const char *changeset_sha256; /* approve, a changeset: the digest the buyer saw (64 hex);
                                   NULL when absent */
};

#define JB_CONTROL_FILES_MAX 100000 /* paths an approval of a changeset may name */

/* The Socket.IO event of `ctl` ("jailbox:approve" …), or NULL for JB_CONTROL_COUNT. */
const char *jb_control_event(enum jb_control ctl);

/* The control a Socket.IO event names, or JB_CONTROL_COUNT. */
enum jb_control jb_control_from_event(const char *event);

/* The roles (a mask of jb_role) that may send `ctl`: the buyer every control; the operator
 * (the service token) pause, resume, abort, kill and the rules. 0 for JB_CONTROL_COUNT. */
unsigned jb_control_roles(enum jb_control ctl);

/* Whether the operator (the service token) must give a reason for `ctl` (1..1024 bytes, no
 * control characters): pause, resume, abort and rollback. A buyer need not. */
bool jb_control_operator_needs_reason(enum jb_control ctl);

/* Whether `ctl` may run on a session that ended (done is live; aborted, failed, accepted are
 * not): rollback alone, whose own rules say which states it takes. */
bool jb_control_on_ended(enum jb_control ctl);

/* The field `ctl` takes from the REST path ("opId", "ruleId"), or NULL when none. */
const char *jb_control_path_field(enum jb_control ctl);

/* Checks `obj` (the socket form; NULL: no argument, as {}) against the schema of `ctl`: only
 * its fields, each of its type and size, the required ones present. Returns 0 with `out`
 * filled, or -1 with a message for a 400 bad_request in `msg` (`len` bytes). */
JB_MUST_USE int jb_control_check(enum jb_control ctl, const json_t *obj,
                                 struct jb_control_args *out, char *msg, size_t len);

/* The socket form of a REST request: `body` (`body_len` bytes; empty: {}) must be a JSON
 * object without the path field, which is then added with `path_value` (NULL: none; an op
 * id as a JSON integer when it is all digits, else as the string given). Returns a new
 * object, or NULL with a 400 message in `msg`. */
json_t *jb_control_rest_form(enum jb_control ctl, const char *body, size_t body_len,
                             const char *path_value, char *msg, size_t len);

/* Runs control `ctl` on session `job` for `who`, with `args` (its socket form: a JSON
 * object, borrowed; NULL: none): `who` must have a role of jb_control_roles (403 forbidden),
 * the session must be live (unless who->live_checked or jb_control_on_ended; an ended
 * one is read-only: 409 invalid_state), the arguments fit the control's schema (400
 * bad_request; for the operator, a non-empty `reason` where
 * jb_control_operator_needs_reason), then the control is carried out, its events published on app->bus and the
 * session's read cache dropped. `c` is a connection the caller holds, or NULL: one is
 * borrowed from app->db for the call. A state change, a kill and a rule change record their
 * actor ("buyer", or "service" for the operator) in the audit entry and the events; a pause is lifted only by
 * the actor who made it (409 invalid_state "paused by …" otherwise). Fills `out` (zeroed first; release it with
 * jb_reply_release): per control, on success —
 *   pause, resume, abort, accept, pre_scan_done: 200 {jobId, state, previous, rejectedOps}
 *     (resume or accept while a rollback is queued or claimed: 409 rollback_running);
 *     (pre_scan_done on a session the worker already moved on: 200 {jobId, state});
 *   approve, reject: 200 the op, wrap "op", and with allowSimilar extra {rule};
 *   kill: 200 {opId, …} (api/core/ops.h jb_op_kill); mode: 200 the session, wrap "session";
 *   rule_add: 201 {rules}, rule_revoke: 200 {ruleId, state}, both wrap "result";
 *   effects_clear: 200 {jobId, cleared};
 *   rollback: 202 {rollbackId, state: "queued"}, with dryRun 200 the plan (api/core/rollback.h);
 * on failure 404 not_found, 409 invalid_state (with the state) or conflict, 503 (reply.h
 * jb_reply_db). The contracts are api/openapi.yaml and api/events.md. */
void jb_control_run(struct jb_app *app, PGconn *c, const struct jb_principal *who, const char *job,
                    enum jb_control ctl, const json_t *args, struct jb_reply *out);

#endif
