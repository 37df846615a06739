/* op_worker.c — a tool call's op on its way to the worker that holds the session and back
 * (stages in api/core/op_call.h): stored — pending for the buyer or queued — for the worker
 * to run in the shim with its audit entry (store, db/ops.h); then waited for (wait) and made
 * an MCP result (answer). The request of a read the socket's service thread relays to a
 * worker of this process (api/socket/socket.c) is made here too, and its answer read here. The waiting thread sleeps until the
 * jb_op notification of the op's commit wakes it (server/opwait.h), and reads the op row
 * again then (and once a second regardless); without limit while the op waits for the buyer
 * or a paused session. */
#define _GNU_SOURCE
#include "api/core/op_call.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/audit_store.h"
#include "db/db.h"
#include "db/events.h"
#include "db/ops.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "server/app.h"
#include "server/config.h"
#include "server/pool.h"
#include "server/workers.h"

#define SAFETY_NET_MS 1000 /* a waiting call re-reads its op at least this often */
#define FALLBACK_MS 20 /* ... and this often while no notification can arrive */
#define DB_DOWN_WAIT_MS 30000 /* a stored op's call waits this long for an unreachable database */
/* a command still running when its session ended is waited for this long at most */
#define RUNNING_AFTER_END_MS 15000

/* ---- answer ---- */

void op_shim_error(struct jb_mcp_error *e, json_t *error) {
  const char *code = json_string_value(json_object_get(error, "code"));
  const char *msg = json_string_value(json_object_get(error, "message"));
  if (!code) code = "internal";
  if (!msg) msg = code;
  static const struct {
    const char *code;
    int rpc;
    const char *reason;
  } map[] = {
      {"denied", JB_MCP_DENIED, "denied"},
      {"not_found", JB_MCP_NOT_FOUND, "not_found"},
      {"excluded", JB_MCP_EXCLUDED, "excluded"},
      {"changed", JB_MCP_CHANGED, "changed"},
      {"too_large", JB_MCP_TOO_LARGE, "too_large"},
      {"bad_request", JB_MCP_INVALID, "invalid"},
      {"aborted", JB_MCP_DENIED, "aborted"},
      {"timeout", JB_MCP_TIMEOUT, "timeout"}, /* jb_db_op_expire */
      {"exists", JB_MCP_EXISTS, "exists"},
      {"regex_limit", JB_MCP_REGEX_LIMIT, "regex_limit"},
      {"killed", JB_MCP_DENIED, "killed"}, /* an exec killed by the buyer */
      {"seccomp", JB_MCP_DENIED, "denied"}, /* an exec killed by its seccomp filter */
      {"busy", JB_MCP_UNAVAILABLE, "busy"}, /* another command of the session runs */
      /* an exec whose worker died while it ran (killed; the session re-adopted) */
      {"worker_restarted", JB_MCP_DENIED, "worker_restarted"},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(code, map[i].code)) {
      op_error(e, map[i].rpc, map[i].reason, "%s", msg);
      return;
    }
  op_error(e, JB_MCP_UNAVAILABLE, "unavailable", "%s", msg);
}

/* Appends printf-style text to the growing buffer *b (*len used, *cap allocated); quietly
 * stops growing past TEXT_MAX (the text is a reading aid; structuredContent has it all). */
#define TEXT_MAX (1024 * 1024)
struct text {
  char *p;
  size_t len, cap;
  bool cut;
};
__attribute__((format(printf, 2, 3))) static void tprintf(struct text *t, const char *fmt, ...) {
  if (t->cut) return;
  va_list ap;
  va_start(ap, fmt);
  char tmp[1200];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t add = (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
  if (t->len + add > TEXT_MAX) {
    t->cut = true;
    return;
  }
  if (t->len + add + 1 > t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    while (cap < t->len + add + 1) cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p) {
      t->cut = true;
      return;
    }
    t->p = p;
    t->cap = cap;
  }
  memcpy(t->p + t->len, tmp, add);
  t->len += add;
  t->p[t->len] = '\0';
}

/* Appends `len` bytes of `s` as they are (content of a file). */
static void tappend(struct text *t, const char *s, size_t len) {
  if (t->cut || !s) return;
  if (t->len + len > TEXT_MAX) {
    t->cut = true;
    return;
  }
  if (t->len + len + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 1024;
    while (cap < t->len + len + 1) cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p) {
      t->cut = true;
      return;
    }
    t->p = p;
    t->cap = cap;
  }
  memcpy(t->p + t->len, s, len);
  t->len += len;
  t->p[t->len] = '\0';
}

static const char *sv(json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key)) ?: "";
}
static long long iv(json_t *o, const char *key) {
  return (long long)json_integer_value(json_object_get(o, key));
}

/* The text a model reads of a `tool`'s `result` on `path` (into *t). */
static void result_text(enum jb_tool tool, const char *path, json_t *r, struct text *t) {
  size_t i;
  json_t *x;
  switch (tool) {
    case JB_TOOL_READ:
      if (!strcmp(sv(r, "encoding"), "utf-8")) {
        tappend(t, json_string_value(json_object_get(r, "content")),
                json_string_length(json_object_get(r, "content")));
      } else {
        tprintf(t, "(binary: %lld bytes from offset %lld, base64 in structuredContent.content)",
                iv(r, "length"), iv(r, "offset"));
      }
      return;
    case JB_TOOL_READ_MANY:
      json_array_foreach (json_object_get(r, "files"), i, x) {
        json_t *fr = json_object_get(x, "result");
        if (!json_is_true(json_object_get(x, "ok"))) {
          tprintf(t, "=== %.4100s: error: %.400s\n", sv(x, "path"),
                  sv(json_object_get(x, "error"), "message"));
        } else if (!strcmp(sv(fr, "encoding"), "utf-8")) {
          tprintf(t, "=== %.4100s\n", sv(x, "path"));
          tappend(t, json_string_value(json_object_get(fr, "content")),
                  json_string_length(json_object_get(fr, "content")));
          if (t->len && t->p[t->len - 1] != '\n') tprintf(t, "\n");
        } else {
          tprintf(t, "=== %.4100s: binary, %lld bytes (base64 in structuredContent)\n",
                  sv(x, "path"), iv(fr, "length"));
        }
      }
      return;
    case JB_TOOL_WRITE:
      tprintf(t, "wrote %lld bytes to %.4100s", iv(r, "written"), path);
      return;
    case JB_TOOL_LIST:
      json_array_foreach (json_object_get(r, "entries"), i, x) {
        const char *type = sv(x, "type");
        if (!strcmp(type, "file"))
          tprintf(t, "%.4100s  (%lld bytes)\n", sv(x, "name"), iv(x, "size"));
        else if (!strcmp(type, "symlink"))
          tprintf(t, "%.4100s -> %.4100s\n", sv(x, "name"),
                  json_object_get(x, "target") ? sv(x, "target") : "?");
        else
          tprintf(t, "%.4100s/\n", sv(x, "name"));
      }
      if (json_array_size(json_object_get(r, "entries")) == 0) tprintf(t, "(empty)\n");
      break;
    case JB_TOOL_FIND:
      json_array_foreach (json_object_get(r, "matches"), i, x)
        tprintf(t, "%.4100s\n", json_string_value(x) ?: "");
      if (json_array_size(json_object_get(r, "matches")) == 0) tprintf(t, "(no match)\n");
      break;
    case JB_TOOL_SEARCH:
      json_array_foreach (json_object_get(r, "matches"), i, x)
        tprintf(t, "%.4100s:%lld:%.600s\n", sv(x, "path"), iv(x, "line"), sv(x, "text"));
      if (json_array_size(json_object_get(r, "matches")) == 0) tprintf(t, "(no match)\n");
      break;
    case JB_TOOL_MKDIR:
      tprintf(t,
              json_is_true(json_object_get(r, "created")) ? "created directory %.4100s"
                                                          : "%.4100s exists already",
              path);
      return;
    case JB_TOOL_MOVE:
      tprintf(t, "moved %.4100s to %.4100s", path, sv(r, "destination"));
      return;
    case JB_TOOL_DELETE:
      tprintf(t, "deleted %.4100s (%lld entries)", path, iv(r, "deleted"));
      return;
    case JB_TOOL_EXEC: {
      json_t *code = json_object_get(r, "exitCode");
      if (json_is_integer(code))
        tprintf(t, "exit code %lld", (long long)json_integer_value(code));
      else
        tprintf(t, "killed by %.40s", sv(r, "signal")[0] ? sv(r, "signal") : "a signal");
      tprintf(t, "%s, %lld ms\n",
              json_is_true(json_object_get(r, "timedOut")) ? " (timed out)" : "",
              iv(r, "durationMs"));
      static const char *const streams[] = {"stdout", "stderr"};
      for (int k = 0; k < 2; k++) {
        json_t *o = json_object_get(r, streams[k]);
        char cut[40];
        snprintf(cut, sizeof cut, "%sTruncated", streams[k]);
        if (json_string_length(o) == 0) continue;
        tprintf(t, "--- %s%s ---\n", streams[k],
                json_is_true(json_object_get(r, cut)) ? " (truncated)" : "");
        tappend(t, json_string_value(o), json_string_length(o));
        if (t->len && t->p[t->len - 1] != '\n') tprintf(t, "\n");
      }
      return;
    }
    default: {
      char *s = json_dumps(r, JSON_COMPACT);
      if (s) tappend(t, s, strlen(s));
      free(s);
      return;
    }
  }
  if (json_is_true(json_object_get(r, "truncated")))
    tprintf(t, "(truncated: narrow the path or the pattern to see the rest)\n");
}

/* The MCP CallToolResult of a finished op (new). */
static json_t *tool_result(enum jb_tool tool, const char *path, json_t *result) {
  struct text t = {0};
  result_text(tool, path, result, &t);
  json_t *text = json_stringn(t.p ? t.p : "", t.len);
  if (!text) text = json_string("(the answer is in structuredContent)");
  free(t.p);
  json_t *out = json_pack("{s:[{s:s,s:o}],s:O,s:b}", "content", "type", "text", "text", text,
                          "structuredContent", result, "isError", 0);
  if (out && t.cut) {
    json_t *c = json_object_get(out, "content");
    json_array_append_new(
        c, json_pack("{s:s,s:s}", "type", "text", "text",
                     "(the text above is cut at 1 MiB; structuredContent is whole)"));
  }
  return out;
}

/* Filters excluded and flagged names out of a list result (in place). */
static void filter_list(json_t *result, const char *dir, const json_t *globs,
                        const json_t *flagged) {
  json_t *entries = json_object_get(result, "entries");
  size_t i = 0;
  while (i < json_array_size(entries)) {
    const char *name = json_string_value(json_object_get(json_array_get(entries, i), "name"));
    char full[8200];
    snprintf(full, sizeof full, "%s%s%s", strcmp(dir, ".") ? dir : "", strcmp(dir, ".") ? "/" : "",
             name ? name : "");
    if (name && (jb_path_excluded(full, globs, NULL) || op_flagged_kind(full, flagged)))
      json_array_remove(entries, i);
    else
      i++;
  }
  json_object_set_new(result, "count", json_integer((json_int_t)json_array_size(entries)));
}

/* Filters excluded and flagged workspace paths out of a find's or search's matches (in place;
 * a find's are strings, a search's {path, line, text}). */
static void filter_matches(json_t *result, const json_t *globs, const json_t *flagged) {
  json_t *m = json_object_get(result, "matches");
  size_t i = 0;
  while (i < json_array_size(m)) {
    json_t *x = json_array_get(m, i);
    const char *p = json_is_string(x) ? json_string_value(x) : sv(x, "path");
    if (!p || jb_path_excluded(p, globs, NULL) || op_flagged_kind(p, flagged))
      json_array_remove(m, i);
    else
      i++;
  }
}

json_t *op_answer_result(enum jb_tool tool, const char *path, json_t *ans, json_t *exclude,
                         json_t *flagged, struct jb_mcp_error *e) {
  if (!json_is_true(json_object_get(ans, "ok"))) {
    op_shim_error(e, json_object_get(ans, "error"));
    return NULL;
  }
  json_t *r = json_object_get(ans, "result");
  if (!json_is_object(r)) {
    op_error(e, JB_MCP_UNAVAILABLE, "unavailable", "the sandbox gave no result");
    return NULL;
  }
  if (tool == JB_TOOL_LIST) filter_list(r, path, exclude, flagged);
  if (tool == JB_TOOL_FIND || tool == JB_TOOL_SEARCH) filter_matches(r, exclude, flagged);
  return tool_result(tool, path, r);
}

/* read_many: the shim's per-file answers put back among the paths refused here, in the order
 * the agent gave them. */
static void merge_many(struct op_call *call) {
  json_t *r = json_object_get(call->ans, "result");
  json_t *files = json_object_get(r, "files");
  if (!json_is_array(files)) return;
  json_t *all = json_array();
  size_t k = 0, i;
  json_t *m;
  json_array_foreach (call->many, i, m) {
    if (json_is_null(m)) {
      json_t *f = json_array_get(files, k++);
      json_array_append(all, f ? f : json_null());
    } else {
      json_array_append(all, m);
    }
  }
  json_object_set_new(r, "files", all);
}

json_t *op_answer(struct op_call *call) {
  if (call->tool == JB_TOOL_READ_MANY && call->many &&
      json_is_true(json_object_get(call->ans, "ok")))
    merge_many(call);
  if (call->tool == JB_TOOL_EDIT && json_is_true(json_object_get(call->ans, "ok"))) {
    json_t *r = json_object_get(call->ans, "result");
    if (!json_is_true(json_object_get(r, "dryRun"))) { /* what the write of the edit did */
      json_object_set_new(r, "path", json_string(call->path));
      json_object_set_new(
          r, "edits",
          json_integer((json_int_t)json_array_size(json_object_get(call->args, "edits"))));
      json_object_set_new(r, "replaced", json_integer((json_int_t)call->replaced));
      json_object_set(r, "diff", call->diff ? call->diff : json_null());
    }
    json_t *out = tool_result(JB_TOOL_EDIT, call->path, r);
    json_t *c = json_object_get(out, "content");
    const char *dt = json_string_value(json_object_get(call->diff, "text"));
    char head[4300];
    snprintf(head, sizeof head, "%s %.4100s: %zu replacement%s\n",
             json_is_true(json_object_get(r, "dryRun")) ? "dry run, nothing written:" : "edited",
             call->path, call->replaced, call->replaced == 1 ? "" : "s");
    json_t *txt = json_pack("{s:s,s:s+}", "type", "text", "text", head, dt ? dt : "");
    json_array_clear(c);
    json_array_append_new(c, txt);
    return out;
  }
  if (call->tool == JB_TOOL_MOVE && json_is_true(json_object_get(call->ans, "ok")))
    json_object_set_new(json_object_get(call->ans, "result"), "destination",
                        json_string(call->dest));
  return op_answer_result(call->tool, call->path, call->ans, call->sess.exclude, call->sess.flagged,
                          call->e);
}

/* ---- the request the socket's service thread relays (api/socket/socket.c) ---- */

const char *op_worker_socket(struct jb_app *app, const struct jb_session_facts *sess) {
  return jb_workers_ops_socket(__atomic_load_n(&app->workers, __ATOMIC_ACQUIRE), sess->worker);
}

json_t *op_direct_request(const char *job, const char *tool, const char *path, json_t *sargs,
                          json_t *expect) {
  return json_pack("{s:s,s:s,s:s,s:O,s:O?}", "jobId", job, "tool", tool, "path", path, "args",
                   sargs, "expect", expect);
}

json_t *op_direct_expect(const struct jb_session_facts *sess) {
  const char *mode = jb_session_mode_name(sess->mode);
  if (!mode) return NULL;
  return json_pack("{s:s,s:O?,s:o}", "mode", mode, "exclude", sess->exclude, "flagged",
                   sess->flagged ? json_incref(sess->flagged) : json_array());
}

/* ---- store ---- */

void op_wait_begin(struct op_call *call, struct jb_opwait_ticket *t) {
  if (call->app->opwait) jb_opwait_register(call->app->opwait, t, call->job, -1);
}

void op_wait_end(struct op_call *call, struct jb_opwait_ticket *t) {
  if (call->app->opwait) jb_opwait_unregister(call->app->opwait, t);
}

/* The {mode, exclude, flagged} the call decided on as JSON text (new), or NULL. */
static char *expect_text(struct op_call *call) {
  cleanup_json json_t *x = op_direct_expect(&call->sess);
  return x ? json_dumps(x, JSON_COMPACT) : NULL;
}

enum op_step op_store(struct op_call *call) {
  cleanup_free char *args_text = json_dumps(call->sargs, JSON_COMPACT);
  if (!args_text) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
    return OP_END;
  }
  op_wait_begin(call, &call->ticket);
  cleanup_free char *expect = call->recheck ? expect_text(call) : NULL;
  jb_error err = {0};
  bool rules_stale = false;
  int rc = call->recheck && !expect ? JB_ERR_FAIL
                                    : op_insert_ruled(call, args_text, expect, &rules_stale, &err);
  if (rc != JB_OK)
    op_wait_end(call, &call->ticket);
  else
    atomic_fetch_add(&jb_metric_ops_queued, 1);
  if (rules_stale) return OP_STALE; /* decided on rules that no longer stand: decide again */
  if (rc == JB_ERR_CONFLICT && !call->fresh &&
      !call->st[0]) { /* the copy was stale: start over, fresh */
    jb_op_session_changed(call->job);
    return OP_STALE;
  }
  if (rc == JB_ERR_CONFLICT && !call->st[0]) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
             "the session's settings changed meanwhile; try again");
    return OP_END;
  }
  if (rc == JB_ERR_CONFLICT || rc == JB_ERR_NOT_FOUND) {
    op_error(call->e, JB_MCP_DENIED, "denied", "the session is %s: no file operations now",
             call->st[0] ? call->st : "gone");
    return OP_END;
  }
  if (rc != JB_OK) {
    op_error_unavailable(call->e, &err);
    return OP_END;
  }
  if (call->pending) op_announce_approval(call);
  return OP_NEXT;
}

/* ---- wait ---- */

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The clocks of one wait, in ms of jb_now_ms. */
struct wait_clock {
  long long stored; /* when the op was stored */
  long long started; /* since when an approved op of an active session waits to run */
  long long approval_ms; /* JAILBOX_APPROVAL_TIMEOUT; 0: none */
  long long ended; /* when a running op's session was first seen ended; 0: not seen */
  bool db_failed; /* the last reading failed in the database (db_error says how) */
  char db_error[256];
};

/* A pending op past JAILBOX_APPROVAL_TIMEOUT is expired (the buyer's pending request is over:
 * said on every instance) and the call ends with timeout: true. Otherwise *nap is cut to when
 * it will be due. */
static bool approval_overdue(struct op_call *call, long long op_id, const struct wait_clock *clk,
                             long *nap) {
  long long left = clk->stored + clk->approval_ms - jb_now_ms();
  if (left <= 0) {
    struct jb_audit_head h;
    json_t *opj = NULL;
    jb_error err = {0};
    int xr = jb_db_op_expire(call->c, jb_signer_key(call->app->signer), call->job, op_id,
                             (long)(clk->approval_ms / 1000), &h, &opj, &err);
    if (xr == JB_OK) {
      jb_bus_publish(call->app->bus, call->job, JB_EVENT_OP, opj);
      jb_bus_publish(call->app->bus, call->job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&h));
      op_error(call->e, JB_MCP_TIMEOUT, "timeout",
               "the buyer did not decide on the %s within %lld s", jb_tool_name(call->tool),
               clk->approval_ms / 1000);
      return true;
    }
    if (xr == JB_ERR_FAIL)
      jb_log(JB_LOG_WARN, "approval timeout not recorded", "jobId", call->job, "detail", err.msg,
             NULL);
    left = 10; /* decided meanwhile, or not yet that old by the database's clock: read again */
  }
  if (left < *nap) *nap = (long)left;
  return false;
}

/* Draining (SIGTERM): a call still waiting on its op ends a second before the shutdown grace
 * runs out, so that the instance can stop within it. The op stays in the database as it is,
 * and the answer says no more than is known: where the op was, whether its session ends with
 * this instance (its worker is one of this instance's, which end their sessions when they
 * stop) or goes on elsewhere, and that its outcome is in the session's ops list — so that the
 * agent does not send again an op that may still run, or may have run. `os`/`ss`: the op's and
 * the session's state as last read (os JB_OP_UNKNOWN: not read, the database being
 * unreachable). True when the call ends so; otherwise *nap is cut to that moment. */
static bool drain_cut(struct op_call *call, long long op_id, enum jb_op_state os,
                      enum jb_session_state ss, long *nap) {
  struct jb_app *app = call->app;
  long long deadline = atomic_load(&app->drain_deadline_ms);
  if (!atomic_load(&app->draining) || deadline <= 0) return false;
  long long left = deadline - JB_DRAIN_ANSWER_MS - jb_now_ms();
  if (left <= 0) {
    const char *where = os == JB_OP_UNKNOWN       ? "is stored (the database cannot be read now)"
                        : os == JB_OP_PENDING     ? "was waiting for the buyer"
                        : ss == JB_SESSION_PAUSED ? "was held by the pause"
                        : os == JB_OP_RUNNING     ? "was running in the session's sandbox"
                                                  : "was queued for the session's sandbox";
    bool ends = op_worker_socket(app, &call->sess) != NULL;
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
             "jailboxd is shutting down: op %lld %s; %s. Its outcome is in the session's ops "
             "list: check it before sending the op again",
             op_id, where,
             ends ? "the session ends with this instance (its worker stops with it)"
                  : "the session goes on, served by another instance or this one restarted");
    return true;
  }
  if (left < *nap) *nap = (long)left;
  return false;
}

/* One reading of op `op_id`'s row: OP_ANSWERED with its answer in *out (new), OP_END with
 * *call->e, or OP_NEXT with *nap the ms to sleep before the next reading. Pending ops and the
 * ops of a paused session wait without limit; a queued op of an active session must run
 * within OP_RUN_TIMEOUT_MS. */
static enum op_step read_outcome(struct op_call *call, long long op_id, struct wait_clock *clk,
                                 json_t **out, long *nap) {
  struct jb_mcp_error *e = call->e;
  char ost[20], sst[20];
  cleanup_free char *res = NULL;
  cleanup_free char *reason = NULL;
  jb_error err = {0};
  int rc = jb_db_op_poll(call->c, call->job, op_id, ost, sst, &res, &reason, &err);
  if (rc == JB_ERR_FAIL) {
    /* the op is stored: waited on as when the database cannot be reached (op_await) */
    clk->db_failed = true;
    snprintf(clk->db_error, sizeof clk->db_error, "%s", err.msg);
    return OP_NEXT;
  }
  if (rc != JB_OK) {
    op_error(e, JB_MCP_UNAVAILABLE, "unavailable", "the op disappeared");
    return OP_END;
  }
  enum jb_op_state os = jb_op_state_from_name(ost);
  if (os == JB_OP_REJECTED) {
    op_error_rejected(e, reason, sst);
    return OP_END;
  }
  if (os == JB_OP_DONE || os == JB_OP_FAILED) {
    *out = res ? json_loads(res, 0, NULL) : NULL;
    if (!*out) {
      op_error(e, JB_MCP_UNAVAILABLE, "unavailable", "the op's result cannot be read");
      return OP_END;
    }
    return OP_ANSWERED;
  }
  enum jb_session_state ss = jb_session_state_from_name(sst);
  if (!jb_state_is_live(sst) || ss == JB_SESSION_DONE) {
    /* a command that ran while its session ended (an escape it made, an abort): its worker
     * stores how it ended, or the session's end fails it with the reason; either is the
     * answer. Bounded, for a worker that can do neither. */
    if (os == JB_OP_RUNNING) {
      long long now = jb_now_ms();
      if (!clk->ended) clk->ended = now;
      if (now - clk->ended < RUNNING_AFTER_END_MS) {
        *nap = SAFETY_NET_MS;
        return drain_cut(call, op_id, os, ss, nap) ? OP_END : OP_NEXT;
      }
      op_error(e, JB_MCP_DENIED, "aborted",
               "the session is %s: the command was running when it ended; how it ended is "
               "recorded in the session's ops list once its worker reports it",
               sst);
      return OP_END;
    }
    op_error(e, JB_MCP_DENIED, "denied", "the session is %s: the op was not run", sst);
    return OP_END;
  }
  bool queued = os == JB_OP_APPROVED && ss == JB_SESSION_ACTIVE; /* for the worker to run */
  if (queued && jb_now_ms() - clk->started > OP_RUN_TIMEOUT_MS) {
    op_error(e, JB_MCP_UNAVAILABLE, "unavailable",
             "the session's sandbox did not run the op in time");
    return OP_END;
  }
  if (!queued) clk->started = jb_now_ms();
  *nap = SAFETY_NET_MS;
  bool pending = os == JB_OP_PENDING;
  if (pending && clk->approval_ms > 0 && approval_overdue(call, op_id, clk, nap)) return OP_END;
  /* held by a pause: from now on among the calls that wait (op_supervise let a read of an
   * active session in without a place); with none free it waits all the same, since the op
   * is stored and will run at the resume */
  if (ss == JB_SESSION_PAUSED) (void)op_try_waiting_place(call);
  if (drain_cut(call, op_id, os, ss, nap)) return OP_END;
  return OP_NEXT;
}

/* The database could not be reached, or read, while op `op_id` waited (`why`: how). The op
 * is stored: "try again" now would have the agent send again an op that may still run, so the
 * call goes on waiting for the database, up to DB_DOWN_WAIT_MS from *db_down (set now when
 * 0), or until a drain's answer is due. True when the call ends (its error set). */
static bool db_unreachable(struct op_call *call, long long op_id, long long *db_down,
                           const char *why) {
  long long at = jb_now_ms();
  if (!*db_down) *db_down = at;
  long nap = SAFETY_NET_MS;
  if (drain_cut(call, op_id, JB_OP_UNKNOWN, JB_SESSION_ACTIVE, &nap)) return true;
  if (at - *db_down < DB_DOWN_WAIT_MS) return false;
  jb_log(JB_LOG_ERROR, "op wait: database unreachable", "detail", why, NULL);
  op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
           "the database has been unreachable for %d s while op %lld waited; the op is "
           "stored and may still run: check the session's ops before sending it again",
           DB_DOWN_WAIT_MS / 1000, op_id);
  return true;
}

/* Sleeps until a jb_op notification names the op or the session (server/opwait.h), or `nap`
 * ms have passed (FALLBACK_MS while the LISTEN connection is down), with the connection back
 * in the pool meanwhile. Before the first reading when notifications can come: the op has
 * not run yet. */
json_t *op_await(struct op_call *call, long long op_id, struct jb_opwait_ticket *t) {
  struct jb_app *app = call->app;
  long long now = jb_now_ms();
  struct wait_clock clk = {.stored = now,
                           .started = now,
                           .approval_ms = app->cfg ? app->cfg->approval_timeout_s * 1000LL : 0};
  long nap = SAFETY_NET_MS;
  json_t *out = NULL;
  /* a wait of the handler pool, so that the threads kept free stay free (a call that took a
   * waiting place began one already) */
  bool began = !jb_pool_blocking() && jb_pool_block_begin() && jb_pool_blocking();
  long long db_down = 0; /* since when the database could not be reached, ms */
  if (app->opwait) jb_opwait_set_op(app->opwait, t, op_id);
  for (bool read_now = !app->opwait;; read_now = false) {
    if (!read_now) {
      jb_db_release(app->db, call->c);
      if (app->opwait)
        jb_opwait_wait(app->opwait, t, db_down ? FALLBACK_MS * 25 : nap, FALLBACK_MS);
      else
        sleep_ms(db_down ? FALLBACK_MS * 25 : nap < FALLBACK_MS ? nap : FALLBACK_MS);
      jb_error err = {0};
      call->c = jb_db_acquire(app->db, &err);
      if (!call->c) {
        if (db_unreachable(call, op_id, &db_down, err.msg)) break;
        continue;
      }
    }
    clk.db_failed = false;
    if (read_outcome(call, op_id, &clk, &out, &nap) != OP_NEXT) break;
    if (!clk.db_failed)
      db_down = 0;
    else if (db_unreachable(call, op_id, &db_down, clk.db_error))
      break;
  }
  op_wait_end(call, t);
  if (began) jb_pool_block_end();
  return out;
}

enum op_step op_wait(struct op_call *call) {
  call->ans = op_await(call, call->op_id, &call->ticket);
  return call->ans ? OP_ANSWERED : OP_END;
}
