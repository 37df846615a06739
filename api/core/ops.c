/* ops.c — an agent's tools/call on its way through jailboxd (see ops.h): the op path's
 * stages run in order on one call (api/core/op_call.h, op_*.c, each calling only down), the
 * done tool, and the planner of the direct path for the socket's service thread. */
#define _GNU_SOURCE
#include "api/core/ops.h"

#include <sodium.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/batch.h"
#include "api/core/op_call.h"
#include "db/db.h"
#include "db/events.h"
#include "db/ops.h"
#include "lib/audit.h"
#include "db/sessions.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "server/app.h"

/* ---- names ---- */

/* ---- errors ---- */

/* ---- the op path ---- */

#define cleanup_op_call __attribute__((cleanup(op_call_release)))

/* One run of the stages on a call of any tool but done; `fresh`: read the session from the
 * database, not from this process's copy. *stale is set (and nothing done) when the copy no
 * longer held at the insert. */
static json_t *task_created(struct op_call *call);

static json_t *op_run(struct jb_app *app, const char *job, enum jb_tool tool, json_t *args,
                      unsigned flags, struct jb_progress *progress, struct jb_mcp_error *e,
                      bool fresh, bool *stale) {
  cleanup_op_call struct op_call call = {.app = app,
                                         .job = job,
                                         .tool = tool,
                                         .args = args,
                                         .e = e,
                                         .fresh = fresh,
                                         .progress = progress};
  enum op_step s = op_decode(&call);
  if (s == OP_NEXT) s = op_load_session(&call);
  if (s == OP_NEXT) s = op_refuse_if(&call);
  if (s == OP_NEXT) s = op_prepare(&call);
  if (s == OP_NEXT) s = op_supervise(&call);
  if (s == OP_NEXT && call.staged) return op_stage(&call); /* held for its batch: answered */
  if (s == OP_NEXT) s = op_store(&call);
  /* a task for an op that waits on the buyer, and for a command (which may run for minutes) */
  bool task = call.pending || call.tool == JB_TOOL_EXEC;
  if (s == OP_NEXT && task && (flags & JB_MCP_CALL_TASK)) {
    op_wait_end(&call, &call.ticket); /* nobody waits in this call: the task is polled */
    return task_created(&call);
  }
  if (s == OP_NEXT) s = op_wait(&call);
  *stale = s == OP_STALE;
  return s == OP_ANSWERED ? op_answer(&call) : NULL;
}

static json_t *tool_done(struct jb_app *app, const char *job, json_t *args, struct jb_mcp_error *e);

json_t *jb_op_tool(void *ctx, struct jb_app *app, const char *job, const char *tool, json_t *args,
                   unsigned flags, struct jb_progress *progress, struct jb_mcp_error *e) {
  (void)ctx;
  enum jb_tool t = jb_tool_from_name(tool);
  if (t == JB_TOOL_UNKNOWN && tool && !strcmp(tool, JB_BATCH_TOOL))
    return jb_batch_commit(app, job, args, progress, e);
  if (t == JB_TOOL_UNKNOWN) {
    op_error(e, JB_MCP_INVALID, "invalid", "unknown tool '%.64s'", tool ? tool : "");
    return NULL;
  }
  if (t == JB_TOOL_DONE) {
    struct op_args_view v;
    int code = JB_MCP_INVALID;
    char msg[300];
    if (!op_check_args(t, args, &v, &code, msg, sizeof msg)) {
      op_error(e, code, code == JB_MCP_TOO_LARGE ? "too_large" : "invalid", "%s", msg);
      return NULL;
    }
    return tool_done(app, job, args, e);
  }
  bool stale = false;
  json_t *r = op_run(app, job, t, args, flags, progress, e, false, &stale);
  /* again on the database's rows; a rule change at each attempt ends it after four */
  for (int i = 0; stale && i < 4; i++)
    r = op_run(app, job, t, args, flags, progress, e, true, &stale);
  if (stale && !r && e->code == 0)
    op_error(e, JB_MCP_UNAVAILABLE, "unavailable", "the session's rules kept changing; try again");
  return r;
}

/* ---- tasks (io.modelcontextprotocol/tasks) ---- */

#define TASK_POLL_MS 2000 /* the poll interval suggested to the client */

/* The task object of op `t` (new): {taskId, status, statusMessage?, createdAt, lastUpdatedAt,
 * ttlMs: null (kept as long as the session's ops), pollIntervalMs}. */
static json_t *task_json(const char *task_id, const char *status, const char *message,
                         const char *created, const char *updated) {
  return json_pack("{s:s,s:s,s:s?,s:s,s:s,s:n,s:i}", "taskId", task_id, "status", status,
                   "statusMessage", message, "createdAt", created, "lastUpdatedAt", updated,
                   "ttlMs", "pollIntervalMs", TASK_POLL_MS);
}

/* The op just stored by `call` (pending, or a command queued) named as a task: its CreateTaskResult (new), or NULL
 * with *call->e. The task exists before the answer leaves (2026-07-28 Tasks extension, "Task
 * Creation": durably created first). */
static json_t *task_created(struct op_call *call) {
  unsigned char raw[16];
  randombytes_buf(raw, sizeof raw);
  char id[4 + 2 * sizeof raw + 1] = "jbt-";
  sodium_bin2hex(id + 4, sizeof id - 4, raw, sizeof raw);
  jb_error err = {0};
  struct jb_op_task_row row;
  int rc = jb_db_op_set_task(call->c, call->job, call->op_id, id, &err);
  if (rc == JB_OK) rc = jb_db_op_task(call->c, call->job, id, &row, &err);
  if (rc != JB_OK) {
    op_error_unavailable(call->e, &err);
    return NULL;
  }
  char msg[160];
  snprintf(msg, sizeof msg, "op %lld %s", call->op_id,
           call->pending ? "waits for the buyer's approval" : "is queued for the sandbox");
  json_t *t = task_json(id, "working", msg, row.created, row.updated);
  jb_op_task_row_clear(&row);
  if (t) json_object_set_new(t, "resultType", json_string("task"));
  return t;
}

/* The CallToolResult of a finished op of task row `row` from its stored answer `ans`
 * (borrowed), or NULL with *e: as op_answer would have made it in the call, but for what only
 * the call held (an edit's replacement count). */
static json_t *task_result(const struct jb_op_task_row *row, json_t *ans, struct jb_mcp_error *e) {
  enum jb_tool tool = jb_tool_from_name(row->tool);
  json_t *r = json_object_get(ans, "result");
  bool ok = json_is_true(json_object_get(ans, "ok")) && json_is_object(r);
  if (ok && tool == JB_TOOL_MOVE && row->destination)
    json_object_set_new(r, "destination", json_string(row->destination));
  if (ok && tool == JB_TOOL_EDIT) {
    json_object_set_new(r, "path", json_string(row->path ? row->path : ""));
    json_t *diff = row->diff ? json_loads(row->diff, 0, NULL) : NULL;
    json_object_set_new(r, "diff", diff ? diff : json_null());
    const char *dt = json_string_value(json_object_get(diff, "text"));
    cleanup_free char *text = NULL;
    if (asprintf(&text, "edited %.4100s\n%s", row->path ? row->path : "", dt ? dt : "") < 0)
      text = NULL;
    return json_pack("{s:[{s:s,s:s}],s:O,s:b}", "content", "type", "text", "text",
                     text ? text : "edited", "structuredContent", r, "isError", 0);
  }
  return op_answer_result(tool, row->path ? row->path : "", ans, NULL, NULL, e);
}

int jb_op_task_get(struct jb_app *app, const char *job, const char *task_id, struct jb_op_task *t,
                   struct jb_mcp_error *e) {
  *t = (struct jb_op_task){0};
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    op_error_unavailable(e, &err);
    return -1;
  }
  struct jb_op_task_row row;
  int rc = jb_db_op_task(c, job, task_id, &row, &err);
  if (rc == JB_ERR_NOT_FOUND) {
    jb_db_release(app->db, c);
    return 1;
  }
  char ost[20], sst[20];
  cleanup_free char *res = NULL;
  cleanup_free char *reason = NULL;
  if (rc == JB_OK) rc = jb_db_op_poll(c, job, row.op_id, ost, sst, &res, &reason, &err);
  long approval_s = app->cfg ? app->cfg->approval_timeout_s : 0;
  if (rc == JB_OK && jb_op_state_from_name(ost) == JB_OP_PENDING && approval_s > 0) {
    struct jb_audit_head h;
    json_t *opj = NULL;
    int xr =
        jb_db_op_expire(c, jb_signer_key(app->signer), job, row.op_id, approval_s, &h, &opj, &err);
    if (xr == JB_OK) { /* as a waiting call would have: announced, then the timeout */
      jb_bus_publish(app->bus, job, JB_EVENT_OP, opj);
      jb_bus_publish(app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&h));
      free(res);
      free(reason);
      res = reason = NULL;
      rc = jb_db_op_poll(c, job, row.op_id, ost, sst, &res, &reason, &err);
    } else if (xr == JB_ERR_FAIL) {
      jb_log(JB_LOG_WARN, "approval timeout not recorded", "jobId", job, "detail", err.msg, NULL);
    }
  }
  jb_db_release(app->db, c);
  if (rc != JB_OK) {
    jb_op_task_row_clear(&row);
    if (rc == JB_ERR_NOT_FOUND) return 1;
    op_error_unavailable(e, &err);
    return -1;
  }
  snprintf(t->created, sizeof t->created, "%s", row.created);
  snprintf(t->updated, sizeof t->updated, "%s", row.updated);
  enum jb_op_state os = jb_op_state_from_name(ost);
  enum jb_session_state ss = jb_session_state_from_name(sst);
  if (os == JB_OP_REJECTED) {
    t->finished = true;
    op_error_rejected(e, reason, sst);
  } else if (os == JB_OP_DONE || os == JB_OP_FAILED) {
    t->finished = true;
    cleanup_json json_t *ans = res ? json_loads(res, 0, NULL) : NULL;
    if (!ans)
      op_error(e, JB_MCP_UNAVAILABLE, "unavailable", "the op's result cannot be read");
    else
      t->result = task_result(&row, ans, e);
  } else if (!jb_state_is_live(sst) || ss == JB_SESSION_DONE) {
    t->finished = true;
    op_error(e, JB_MCP_DENIED, "denied", "the session is %s: the op was not run", sst);
  } else {
    snprintf(t->status_message, sizeof t->status_message, "op %lld %s", row.op_id,
             os == JB_OP_PENDING       ? "waits for the buyer's approval"
             : ss == JB_SESSION_PAUSED ? "is held: the session is paused"
             : os == JB_OP_RUNNING     ? "runs in the sandbox"
                                       : "is queued for the sandbox");
  }
  jb_op_task_row_clear(&row);
  return 0;
}

/* ---- done ---- */

static json_t *tool_done(struct jb_app *app, const char *job, json_t *args,
                         struct jb_mcp_error *e) {
  const char *summary = json_string_value(json_object_get(args, "summary"));
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    op_error_unavailable(e, &err);
    return NULL;
  }
  static const char *const from[] = {"active", "awaiting_agent", NULL};
  struct jb_transition t;
  int rc = jb_db_session_transition(c, jb_signer_key(app->signer), job, from, "done", summary,
                                    "agent", &t, &err);
  if (rc == JB_OK) {
    jb_op_session_changed(job);
    jb_bus_publish(app->bus, job, JB_EVENT_STATE,
                   json_pack("{s:s,s:s,s:s,s:s?,s:s}", "jobId", job, "state", "done", "previous",
                             t.previous, "reason", summary, "actor", "agent"));
  }
  jb_db_release(app->db, c);
  if (rc == JB_ERR_CONFLICT) {
    op_error(e, JB_MCP_DENIED, "denied", "the session is %s: it cannot be marked done", t.state);
    return NULL;
  }
  if (rc != JB_OK) {
    op_error_unavailable(e, &err);
    return NULL;
  }
  return json_pack("{s:[{s:s,s:s}],s:{s:s},s:b}", "content", "type", "text", "text",
                   "The session is done; the buyer will review it.", "structuredContent", "state",
                   "done", "isError", 0);
}

/* ---- the buyer's kill of an exec ---- */

int jb_op_kill(struct jb_app *app, PGconn *c, const char *job, long long op_id, const char *reason,
               const char *by, json_t **out, char state[20], jb_error *err) {
  enum jb_op_kill_outcome how;
  char *text = NULL;
  struct jb_audit_head head;
  *out = NULL;
  int rc = jb_db_op_kill(c, jb_signer_key(app->signer), job, op_id, reason, by, &how, &text, state,
                         &head, err);
  if (rc != JB_OK) return rc;
  if (head.seq > 0) jb_bus_publish(app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
  json_t *op = text ? json_loads(text, 0, NULL) : NULL;
  free(text);
  if (op) jb_bus_publish(app->bus, job, JB_EVENT_OP, json_incref(op));
  const char *outcome = how == JB_KILL_REJECTED ? "rejected"
                        : how == JB_KILL_FAILED ? "failed"
                                                : "killing";
  *out = json_pack("{s:I,s:s,s:s}", "opId", (json_int_t)op_id, "state",
                   how == JB_KILL_SIGNALLED
                       ? "running"
                       : json_string_value(json_object_get(op, "state")) ?: outcome,
                   "outcome", outcome);
  json_decref(op);
  jb_log(JB_LOG_INFO, "exec killed", "jobId", job, "outcome", outcome, "by", by, NULL);
  return *out ? JB_OK : jb_fail(err, ENOMEM, "out of memory");
}

/* ---- the direct path from the socket's service thread (api/socket/socket.h) ---- */

struct direct_plan {
  enum jb_tool tool;
  char *path;
  json_t *exclude, *flagged; /* to filter a list's answer */
};

bool jb_op_direct_plan(struct jb_app *app, const char *job, const char *tool_name, json_t *args,
                       struct jb_mcp_direct *out) {
  memset(out, 0, sizeof *out);
  enum jb_tool tool = jb_tool_from_name(tool_name);
  if (!op_tool_direct(tool)) return false;
  struct op_args_view av;
  int code;
  char msg[300];
  if (!op_check_args(tool, args, &av, &code, msg, sizeof msg)) return false;
  const char *path = av.path;
  size_t plen = av.plen;
  cleanup_session_facts struct jb_session_facts sess = {.state = JB_SESSION_UNKNOWN};
  if (!op_session_copy(job, &sess) || sess.state != JB_SESSION_ACTIVE) return false;
  json_t *exclude = sess.exclude, *flagged = sess.flagged;
  /* anything jb_op_tool would refuse (and audit, and signal) goes its way */
  struct op_path_verdict v;
  if (tool == JB_TOOL_READ_MANY) { /* every path must pass: a refusal is audited */
    size_t i;
    json_t *jp;
    json_array_foreach (av.paths, i, jp)
      if (!op_path_passes(json_string_value(jp), json_string_length(jp), tool, exclude, flagged,
                          &v))
        return false;
  } else if (!op_path_passes(path, plen, tool, exclude, flagged, &v)) {
    return false;
  }
  const char *sock = op_worker_socket(app, &sess);
  if (!sock || strlen(sock) >= sizeof out->sock) return false;
  cleanup_json json_t *sargs = op_shim_args(tool, args, exclude);
  cleanup_json json_t *x = sargs ? op_direct_expect(&sess) : NULL;
  cleanup_json json_t *req = x ? op_direct_request(job, jb_tool_name(tool), path, sargs, x) : NULL;
  struct direct_plan *dp = req ? calloc(1, sizeof *dp) : NULL;
  if (!dp || !(dp->path = strdup(path))) {
    free(dp);
    return false;
  }
  dp->tool = tool;
  dp->exclude = json_incref(exclude);
  dp->flagged = json_incref(flagged);
  snprintf(out->sock, sizeof out->sock, "%s", sock);
  out->req = jb_steal_pointer(&req);
  out->ctx = dp;
  return true;
}

json_t *jb_op_direct_answer(void *ctx, json_t *answer, struct jb_mcp_error *e, bool *ran) {
  struct direct_plan *dp = ctx;
  json_t *a = json_object_get(answer, "answer");
  *ran = json_is_true(json_object_get(answer, "ran")) && json_is_object(a);
  if (!*ran) return NULL;
  atomic_fetch_add(&jb_metric_ops_direct, 1);
  return op_answer_result(dp->tool, dp->path, a, dp->exclude, dp->flagged, e);
}

void jb_op_direct_free(void *ctx) {
  struct direct_plan *dp = ctx;
  if (!dp) return;
  free(dp->path);
  json_decref(dp->exclude);
  json_decref(dp->flagged);
  free(dp);
}
