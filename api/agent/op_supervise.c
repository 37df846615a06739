/* op_supervise.c — a tool call that may wait (the supervise stage, api/agent/op_call.h): its
 * place among this process's calls that wait on the buyer or a pause, and for a write of a
 * supervised session what the buyer is shown — the file as it is now (a stat through the
 * shim: the same rules; the write is refused if it changes meanwhile), the diff preview, and
 * the approval request. */
#define _GNU_SOURCE
#include "api/agent/op_call.h"

#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/agent/diff.h"
#include "api/agent/escape.h"
#include "db/events.h"
#include "db/ops.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "server/app.h"
#include "server/config.h"

#define PREVIEW_MAX 2000 /* characters of a write shown in the approval request */

static atomic_long waiting; /* calls of this process between storing their op and its outcome */

/* Each call waits on one of the socket's handler threads (JAILBOX_WS_WORKERS): at least one
 * must stay free for everything else — the buyer's approve and resume among it — or the waits
 * would starve the very decision they wait for. */
enum op_step op_take_waiting_place(struct op_call *call) {
  if (call->counted) return OP_NEXT;
  long max_waiting = call->app->cfg ? call->app->cfg->ws_workers - 1 : 1;
  if (max_waiting < 1) max_waiting = 1;
  if (atomic_fetch_add(&waiting, 1) >= max_waiting) {
    atomic_fetch_sub(&waiting, 1);
    op_error(
        call->e, JB_MCP_UNAVAILABLE, "unavailable",
        "too many calls are waiting (for approval or a paused session) on this server; try again");
    return OP_END;
  }
  call->counted = true;
  return OP_NEXT;
}

void op_leave_waiting(struct op_call *call) {
  if (call->counted) atomic_fetch_sub(&waiting, 1);
  call->counted = false;
}

/* The pending write's target as it is now into call->current: a stat op stored (queued) and
 * waited for as any op, run by the worker that holds the session — held while the session is
 * paused, as the write itself would be. */
static enum op_step stat_target(struct op_call *call) {
  struct jb_app *app = call->app;
  cleanup_json json_t *stargs = json_object();
  if (json_array_size(call->sess.exclude) > 0)
    json_object_set(stargs, "exclude", call->sess.exclude);
  if (app->cfg && app->cfg->diff_preview_max > 0) /* the current text too, for the diff preview */
    json_object_set_new(stargs, "withContent", json_true());
  cleanup_free char *stext = json_dumps(stargs, JSON_COMPACT);
  cleanup_json json_t *sa = NULL;
  jb_error err = {0};
  struct jb_opwait_ticket ticket;
  long long op_id = 0;
  op_wait_begin(call, &ticket);
  int rc = stext ? jb_db_op_create(call->c, call->job, "stat", call->path, stext, false, NULL,
                                   &op_id, call->st, &err)
                 : JB_ERR_FAIL;
  if (rc == JB_OK) {
    atomic_fetch_add(&jb_metric_ops_queued, 1);
    sa = op_await(call, op_id, &ticket);
  } else {
    op_wait_end(call, &ticket);
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
  if (!sa) return OP_END; /* op_await said why */
  if (!json_is_true(json_object_get(sa, "ok"))) {
    op_shim_error(call->e, json_object_get(sa, "error"));
    return OP_END;
  }
  call->current = json_incref(json_object_get(sa, "result"));
  return call->current ? OP_NEXT : OP_END;
}

/* The target must not exist, or be a regular file with a single link: the shim would refuse
 * the write otherwise. One with more links, or a symlink leading out, is an escape signal. */
static enum op_step check_target(struct op_call *call) {
  json_t *current = call->current;
  const char *path = call->path;
  const char *cur = json_is_true(json_object_get(current, "exists"))
                        ? json_string_value(json_object_get(current, "sha256"))
                        : "";
  if (cur) {
    json_object_set_new(call->sargs, "expectSha256", json_string(cur));
    return OP_NEXT;
  }
  op_error(call->e, JB_MCP_DENIED, "denied", "%s is not a regular file with a single link", path);
  json_t *links = json_object_get(current, "links");
  char detail[400];
  if (json_is_integer(links) && json_integer_value(links) > 1 &&
      !strcmp(json_string_value(json_object_get(current, "type")) ?: "", "file")) {
    snprintf(detail, sizeof detail, "write onto %.300s, a file with %lld hard links", path,
             (long long)json_integer_value(links));
    jb_escape_signal(call->app, call->job, JB_SIG_HARD_LINK, detail);
  } else if (json_is_true(json_object_get(current, "leadsOut"))) {
    snprintf(detail, sizeof detail, "write onto %.300s, a symlink that leads out of the workspace",
             path);
    jb_escape_signal(call->app, call->job, JB_SIG_SYMLINK_ESCAPE, detail);
  }
  return OP_END;
}

/* The diff preview (new; JSON null for binary content, or when the current content did not
 * come with the stat: over 1 MiB, or previews switched off) of a supervised write replacing
 * `current` (the stat op's result) by `data`. */
static json_t *write_diff(struct jb_app *app, const char *path, json_t *current,
                          const unsigned char *data, size_t dlen) {
  bool exists = json_is_true(json_object_get(current, "exists"));
  json_t *jc = json_object_get(current, "content");
  const char *enc = json_string_value(json_object_get(current, "encoding"));
  if (!app->cfg || app->cfg->diff_preview_max <= 0 || (exists && (!json_is_string(jc) || !enc)))
    return json_null();
  const unsigned char *old = NULL;
  size_t olen = 0;
  if (exists && !strcmp(enc, "utf-8")) {
    old = (const unsigned char *)json_string_value(jc);
    olen = json_string_length(jc);
  } else if (exists) { /* base64: not text; no diff */
    return json_null();
  }
  if (exists) { /* the shim is not trusted: the text shown must be the one the write replaces */
    unsigned char h[32];
    char hex[65];
    crypto_hash_sha256(h, old, olen);
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    if (strcmp(hex, json_string_value(json_object_get(current, "sha256")) ?: "")) {
      jb_log(JB_LOG_WARN, "no diff preview: the stat's content does not match its sha256", "path",
             path, NULL);
      return json_null();
    }
  }
  json_t *out = NULL;
  jb_error err = {0};
  if (jb_diff_preview(path, old, olen, exists, data, dlen, (size_t)app->cfg->diff_preview_max, &out,
                      &err) < 0) {
    jb_log(JB_LOG_WARN, "no diff preview", "path", path, "detail", err.msg, NULL);
    out = json_null();
  }
  return out;
}

enum op_step op_supervise(struct op_call *call) {
  /* a read or list of an active session waits for nobody: the worker runs it within
   * OP_RUN_TIMEOUT_MS, so it takes a place only if it meets a pause (op_await) */
  bool bounded = call->tool != JB_TOOL_WRITE && call->sess.state == JB_SESSION_ACTIVE;
  enum op_step s = bounded ? OP_NEXT : op_take_waiting_place(call);
  if (s != OP_NEXT) return s;
  call->pending = call->tool == JB_TOOL_WRITE && call->sess.mode == JB_MODE_SUPERVISED;
  if (!call->pending) return OP_NEXT;
  s = stat_target(call);
  if (s == OP_NEXT) s = check_target(call);
  if (s == OP_NEXT)
    call->diff = write_diff(call->app, call->path, call->current, call->data, call->dlen);
  return s;
}

/* Puts `diff` (borrowed; NULL: none) into the approval request `ev` so that the event fits
 * one notification (JB_EVENT_MAX_BYTES): the diff is cut shorter first (truncated; the op row
 * keeps it whole), then left out, then the content preview is cut (previewTruncated) — text
 * of control characters takes six bytes a byte escaped. */
static void fit_event(const char *job, json_t *ev, json_t *diff) {
  json_t *d = json_incref(diff ? diff : json_null());
  for (;;) {
    json_object_set_new(ev, "diff", d);
    size_t size = jb_db_event_size(job, "jailbox:approval_request", ev);
    if (!size || size <= JB_EVENT_MAX_BYTES) return;
    size_t over = size - JB_EVENT_MAX_BYTES; /* a byte less of text is at least a byte less */
    size_t tl = json_string_length(json_object_get(d, "text"));
    if (json_is_object(d) && tl > 0) {
      d = jb_diff_shorten(d, tl > over ? tl - over : 0);
      if (d) continue;
    }
    d = json_null();
    json_object_set_new(ev, "diff", json_incref(d));
    json_t *pv = json_object_get(ev, "preview");
    size_t pl = json_string_length(pv);
    if (!json_is_string(pv) || pl == 0) { /* last: the path */
      op_fit_path(job, "jailbox:approval_request", ev);
      return;
    }
    const char *p = json_string_value(pv);
    size_t keep = pl > over ? pl - over : 0;
    while (keep > 0 && ((unsigned char)p[keep] & 0xC0) == 0x80) keep--; /* not inside a character */
    json_object_set_new(ev, "preview", json_stringn(p, keep));
    json_object_set_new(ev, "previewTruncated", json_true());
  }
}

void op_announce_approval(struct op_call *call) {
  const char *job = call->job;
  jb_error err = {0};
  if (json_is_object(call->diff) &&
      jb_db_op_set_diff(call->c, call->op_id, call->diff, &err) != JB_OK)
    jb_log(JB_LOG_WARN, "diff preview not stored", "jobId", job, "detail", err.msg, NULL);
  size_t dlen = call->dlen;
  bool text_ok = !memchr(call->data, '\0', dlen);
  json_t *preview =
      text_ok ? json_stringn((const char *)call->data, dlen < PREVIEW_MAX ? dlen : PREVIEW_MAX)
              : NULL;
  const char *cur = json_string_value(json_object_get(call->current, "sha256"));
  json_t *ev = json_pack("{s:s,s:I,s:s,s:s,s:I,s:s,s:s,s:o,s:b,s:s?,s:b}", "jobId", job, "opId",
                         (json_int_t)call->op_id, "tool", "write", "path", call->path, "size",
                         (json_int_t)dlen, "sha256", call->sha_hex, "verdict", "clean", "preview",
                         preview ? preview : json_null(), "previewTruncated", dlen > PREVIEW_MAX,
                         "currentSha256", cur, "exists",
                         json_is_true(json_object_get(call->current, "exists")));
  fit_event(job, ev, call->diff);
  jb_error nerr = {0};
  if (jb_db_notify_event(call->c, job, "jailbox:approval_request", ev, &nerr) != JB_OK)
    jb_log(JB_LOG_WARN, "approval request not announced", "jobId", job, "detail", nerr.msg, NULL);
  json_decref(ev);
}
