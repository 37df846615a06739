/* op_worker.c — a tool call's op on its way to the worker that holds the session and back
 * (stages in api/core/op_call.h): stored — pending for the buyer or queued — for the worker
 * to run in the shim with its audit entry (store, db/ops.h); then waited for (wait) and made
 * an MCP result (answer). The request of a read the socket's service thread relays to a
 * worker of this process (api/socket/socket.c) is made here too, and its answer read here.
 * How a call waits for its op is op_wait.c's. */
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

/* ---- answer ---- */

/* The text of an answer, growing as it is appended to (tappend, tprintf); it quietly stops
 * growing past TEXT_MAX (the text is a reading aid; structuredContent has it all). */
#define TEXT_MAX (1024 * 1024)
struct text {
  char *p;
  size_t len, cap;
  bool cut;
};
/* Appends `len` bytes of `s` as they are (content of a file, a formatted line). */
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

__attribute__((format(printf, 2, 3))) static void tprintf(struct text *t, const char *fmt, ...) {
  if (t->cut) return;
  va_list ap;
  va_start(ap, fmt);
  char tmp[1200];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  tappend(t, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static const char *sv(json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key)) ?: "";
}
static long long iv(json_t *o, const char *key) {
  return (long long)json_integer_value(json_object_get(o, key));
}

/* "; created the folders a, a/b" of a write's or a move's createdFolders (nothing without). */
static void folders_text(json_t *r, struct text *t) {
  size_t i;
  json_t *x;
  json_array_foreach (json_object_get(r, "createdFolders"), i, x)
    tprintf(t, "%s%.4100s", i ? ", " : "; created the folders ", json_string_value(x) ?: "?");
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
  if (tool == JB_TOOL_WRITE || tool == JB_TOOL_MOVE) folders_text(result, &t);
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
  if (op_insert_refused(call, rc, &err)) return OP_END;
  if (call->pending) op_announce_approval(call);
  return OP_NEXT;
}

/* ---- wait ---- */

enum op_step op_wait(struct op_call *call) {
  call->ans = op_await(call, call->op_id, &call->ticket);
  return call->ans ? OP_ANSWERED : OP_END;
}
