/* ops.c — an agent's tools/call on its way through jailboxd (see ops.h). In order: the
 * session must be active (the agent's first call moves awaiting_agent to active; paused
 * sessions take the op and hold it); the path is checked syntactically (lib/pathcheck.h —
 * the shim checks it again at open time); excluded paths are refused; a write is decoded and
 * scanned (flagged: refused, security alert, audit entry); then the op is stored — pending
 * for the buyer when the session is supervised and the op is a write, queued otherwise — and
 * the worker that holds the session runs it in the shim and writes its audit entry
 * (db/ops.h). This thread waits for the outcome, without limit while the op waits for the
 * buyer or a paused session: it sleeps until the jb_op notification of the op's commit wakes
 * it (server/opwait.h), and reads the op row again then (and once a second regardless). */
#define _GNU_SOURCE
#include "api/agent/ops.h"

#include <errno.h>
#include <sodium.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/agent/diff.h"
#include "api/agent/escape.h"
#include "api/agent/scan.h"
#include "db/audit_store.h"
#include "db/db.h"
#include "db/events.h"
#include "db/ops.h"
#include "db/sessions.h"
#include "sandbox/proto/direct.h"
#include "lib/pathcheck.h"
#include "server/workers.h"
#include "server/bus.h"
#include "server/config.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "server/opwait.h"

#define FILE_MAX (1024 * 1024)   /* bytes of one write (the shim's JB_FILE_MAX) */
#define PREVIEW_MAX 2000         /* characters of a write shown in the approval request */
#define RUN_TIMEOUT_MS 120000    /* a queued op of an active session must run within this */
#define SAFETY_NET_MS 1000       /* a waiting call re-reads its op at least this often */
#define DRAIN_ANSWER_MS 1000 /* draining: calls waiting on the buyer end this long before the grace */
#define FALLBACK_MS 20           /* ... and this often while no notification can arrive */

/* Indexed by enum jb_tool. */
static const char *const tool_names[] = {"read", "write", "list", "done"};
_Static_assert(sizeof tool_names / sizeof tool_names[0] == JB_TOOL_DONE + 1, "one name per tool");

const char *jb_tool_name(enum jb_tool tool) {
  if (tool < 0 || (size_t)tool >= sizeof tool_names / sizeof tool_names[0]) return NULL;
  return tool_names[tool];
}

enum jb_tool jb_tool_from_name(const char *name) {
  for (size_t i = 0; name && i < sizeof tool_names / sizeof tool_names[0]; i++)
    if (!strcmp(tool_names[i], name)) return (enum jb_tool)i;
  return JB_TOOL_UNKNOWN;
}

static atomic_long waiting; /* calls of this process between storing their op and its outcome */

static json_t *err_out(struct jb_mcp_error *e, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static json_t *err_out(struct jb_mcp_error *e, int code, const char *reason, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  e->code = code;
  e->data = json_pack("{s:s}", "reason", reason);
  return NULL;
}

static json_t *unavailable(struct jb_mcp_error *e, const jb_error *err) {
  jb_log(JB_LOG_ERROR, "op path: database error", "detail", err->msg, NULL);
  return err_out(e, JB_MCP_UNAVAILABLE, "unavailable", "the service is unavailable; try again");
}

/* An audit entry for an op refused in jailboxd, and its audit_head event. */
static void audit_refusal(PGconn *c, struct jb_app *app, const char *job, const char *tool,
                          const char *path, json_t *details /* stolen */) {
  struct jb_audit_head h;
  jb_error err = {0};
  json_object_set_new(details, "ok", json_false());
  if (jb_audit_append(c, app->keys, job, tool, path, details, &h, &err) == JB_OK) {
    jb_error nerr = {0};
    json_t *hj = jb_audit_head_json(&h);
    jb_db_notify_event(c, job, "jailbox:audit_head", hj, &nerr);
    json_decref(hj);
  } else {
    jb_log(JB_LOG_ERROR, "op path: audit append failed", "jobId", job, "detail", err.msg, NULL);
  }
  json_decref(details);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The shim's error code as a JSON-RPC error. */
static json_t *shim_error(struct jb_mcp_error *e, json_t *error) {
  const char *code = json_string_value(json_object_get(error, "code"));
  const char *msg = json_string_value(json_object_get(error, "message"));
  if (!code) code = "internal";
  if (!msg) msg = code;
  if (!strcmp(code, "denied")) return err_out(e, JB_MCP_DENIED, "denied", "%s", msg);
  if (!strcmp(code, "not_found")) return err_out(e, JB_MCP_NOT_FOUND, "not_found", "%s", msg);
  if (!strcmp(code, "excluded")) return err_out(e, JB_MCP_EXCLUDED, "excluded", "%s", msg);
  if (!strcmp(code, "changed")) return err_out(e, JB_MCP_CHANGED, "changed", "%s", msg);
  if (!strcmp(code, "too_large")) return err_out(e, JB_MCP_TOO_LARGE, "too_large", "%s", msg);
  if (!strcmp(code, "bad_request")) return err_out(e, JB_MCP_INVALID, "invalid", "%s", msg);
  if (!strcmp(code, "aborted")) return err_out(e, JB_MCP_DENIED, "aborted", "%s", msg);
  if (!strcmp(code, "timeout")) return err_out(e, JB_MCP_TIMEOUT, "timeout", "%s", msg); /* jb_db_op_expire */
  return err_out(e, JB_MCP_UNAVAILABLE, "unavailable", "%s", msg);
}

/* The MCP CallToolResult of a finished op (new). */
static json_t *tool_result(const char *tool, json_t *result) {
  json_t *text;
  if (!strcmp(tool, "read") && !strcmp(json_string_value(json_object_get(result, "encoding")) ?: "", "utf-8")) {
    text = json_incref(json_object_get(result, "content"));
  } else {
    char *s = json_dumps(result, JSON_COMPACT);
    text = json_string(s ? s : "{}");
    free(s);
  }
  return json_pack("{s:[{s:s,s:o}],s:O,s:b}", "content", "type", "text", "text", text,
                   "structuredContent", result, "isError", 0);
}

/* The kind of the pre-scan's flagged entry (sandbox/worker/workspace_scan.h) that `path` is or
 * passes through; NULL when none (too_large is a notice, not a refusal). `flagged` is the
 * pre-scan's [{path, kind}] list. */
static const char *flagged_kind(const char *path, const json_t *flagged) {
  size_t i;
  json_t *f;
  json_array_foreach(flagged, i, f) {
    const char *fp = json_string_value(json_object_get(f, "path"));
    const char *kind = json_string_value(json_object_get(f, "kind"));
    if (!fp || !kind || !strcmp(kind, "too_large")) continue;
    size_t n = strlen(fp);
    if (n && !strncmp(path, fp, n) && (path[n] == '\0' || path[n] == '/')) return kind;
  }
  return NULL;
}

/* Filters excluded and flagged names out of a list result (in place). */
static void filter_list(json_t *result, const char *dir, const json_t *globs, const json_t *flagged) {
  json_t *entries = json_object_get(result, "entries");
  size_t i = 0;
  long removed = 0;
  while (i < json_array_size(entries)) {
    const char *name = json_string_value(json_object_get(json_array_get(entries, i), "name"));
    char full[8200];
    snprintf(full, sizeof full, "%s%s%s", strcmp(dir, ".") ? dir : "", strcmp(dir, ".") ? "/" : "",
             name ? name : "");
    if (name && (jb_path_excluded(full, globs, NULL) || flagged_kind(full, flagged))) {
      json_array_remove(entries, i);
      removed++;
    } else {
      i++;
    }
  }
  json_object_set_new(result, "count", json_integer((json_int_t)json_array_size(entries)));
}

static json_t *tool_done(struct jb_app *app, const char *job, json_t *args, struct jb_mcp_error *e) {
  const char *summary = json_string_value(json_object_get(args, "summary"));
  if (summary && strlen(summary) > 4096)
    return err_out(e, JB_MCP_TOO_LARGE, "too_large", "the summary is over 4096 bytes");
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) return unavailable(e, &err);
  static const char *const from[] = {"active", "awaiting_agent", NULL};
  struct jb_transition t;
  int rc = jb_db_session_transition(c, app->keys, job, from, "done", summary, "agent", &t, &err);
  if (rc == JB_OK) {
    jb_op_session_changed(job);
    jb_error nerr = {0};
    json_t *ev = json_pack("{s:s,s:s,s:s,s:s?,s:s}", "jobId", job, "state", "done", "previous",
                           t.previous, "reason", summary, "actor", "agent");
    jb_db_notify_event(c, job, "jailbox:state", ev, &nerr);
    json_decref(ev);
  }
  jb_db_release(app->db, c);
  if (rc == JB_ERR_CONFLICT)
    return err_out(e, JB_MCP_DENIED, "denied", "the session is %s: it cannot be marked done", t.state);
  if (rc != JB_OK) return unavailable(e, &err);
  return json_pack("{s:[{s:s,s:s}],s:{s:s},s:b}", "content", "type", "text", "text",
                   "The session is done; the buyer will review it.", "structuredContent", "state",
                   "done", "isError", 0);
}

void jb_op_agent_arrived(PGconn *c, struct jb_app *app, const char *job) {
  static const char *const from[] = {"awaiting_agent", NULL};
  struct jb_transition t;
  jb_error err = {0};
  if (jb_db_session_transition(c, app->keys, job, from, "active", "the agent connected", "agent",
                               &t, &err) == JB_OK) {
    jb_error nerr = {0};
    json_t *ev = json_pack("{s:s,s:s,s:s,s:s,s:s}", "jobId", job, "state", "active", "previous",
                           t.previous, "reason", "the agent connected", "actor", "agent");
    jb_db_notify_event(c, job, "jailbox:state", ev, &nerr);
    json_decref(ev);
  }
}

/* Starts the wait for an op of `job` that is about to be stored: registers `t` before the
 * insert, so that the notification of its outcome cannot come before anyone listens. */
static void wait_begin(struct jb_app *app, struct jb_opwait_ticket *t, const char *job) {
  if (app->opwait) jb_opwait_register(app->opwait, t, job, -1);
}
static void wait_end(struct jb_app *app, struct jb_opwait_ticket *t) {
  if (app->opwait) jb_opwait_unregister(app->opwait, t);
}

/* Waits for op `op_id` of `job`, just stored with ticket `t` registered (wait_begin), to
 * finish: sleeps until a jb_op notification names the op or the session (server/opwait.h),
 * or SAFETY_NET_MS have passed (FALLBACK_MS while the LISTEN connection is down), then reads
 * the op's row; the connection is released while asleep (*cp is replaced; NULL when it could
 * not be had again). Pending ops and the ops of a paused session wait without limit; a
 * queued op of an active session must run within RUN_TIMEOUT_MS. Ends the wait (`t` is
 * unregistered). Returns the stored answer {ok, result | error} (new), or NULL with *e
 * (rejected, session ended, unavailable). */
static json_t *await_op(struct jb_app *app, PGconn **cp, const char *job, long long op_id,
                        struct jb_opwait_ticket *t, struct jb_mcp_error *e) {
  long long started = jb_now_ms(), stored = started;
  long long approval_ms = app->cfg ? app->cfg->approval_timeout_s * 1000LL : 0;
  long nap = SAFETY_NET_MS;
  jb_error err = {0};
  if (app->opwait) jb_opwait_set_op(app->opwait, t, op_id);
  bool asleep_first = app->opwait != NULL; /* it has not run yet: no read before a wake-up */
  if (asleep_first) jb_db_release(app->db, *cp);
  json_t *out = NULL;
  for (;;) {
    if (asleep_first) {
      jb_opwait_wait(app->opwait, t, SAFETY_NET_MS, FALLBACK_MS);
      asleep_first = false;
      *cp = jb_db_acquire(app->db, &err);
      if (!*cp) {
        unavailable(e, &err);
        break;
      }
    }
    char ost[20], sst[20];
    char *res = NULL, *reason = NULL;
    int rc = jb_db_op_poll(*cp, job, op_id, ost, sst, &res, &reason, &err);
    if (rc != JB_OK) {
      free(res);
      free(reason);
      out = rc == JB_ERR_FAIL ? unavailable(e, &err)
                              : err_out(e, JB_MCP_UNAVAILABLE, "unavailable", "the op disappeared");
      break;
    }
    if (!strcmp(ost, "rejected")) {
      err_out(e, JB_MCP_REJECTED, "rejected", "rejected by the buyer%s%s", reason ? ": " : "",
              reason ? reason : "");
      free(res);
      free(reason);
      break;
    }
    if (!strcmp(ost, "done") || !strcmp(ost, "failed")) {
      out = res ? json_loads(res, 0, NULL) : NULL;
      free(res);
      free(reason);
      if (!out) err_out(e, JB_MCP_UNAVAILABLE, "unavailable", "the op's result cannot be read");
      break;
    }
    free(res);
    free(reason);
    if (!jb_state_is_live(sst) || !strcmp(sst, "done")) {
      err_out(e, JB_MCP_DENIED, "denied", "the session is %s: the op was not run", sst);
      break;
    }
    if (!strcmp(ost, "approved") && !strcmp(sst, "active") && jb_now_ms() - started > RUN_TIMEOUT_MS) {
      err_out(e, JB_MCP_UNAVAILABLE, "unavailable", "the session's sandbox did not run the op in time");
      break;
    }
    if (strcmp(ost, "approved") || strcmp(sst, "active")) started = jb_now_ms();
    nap = SAFETY_NET_MS;
    if (!strcmp(ost, "pending") && approval_ms > 0) { /* JAILBOX_APPROVAL_TIMEOUT */
      long long left = stored + approval_ms - jb_now_ms();
      if (left <= 0) {
        struct jb_audit_head h;
        json_t *opj = NULL;
        int xr = jb_db_op_expire(*cp, app->keys, job, op_id, (long)(approval_ms / 1000), &h, &opj, &err);
        if (xr == JB_OK) { /* the buyer's pending request is over: say so, on every instance */
          jb_error nerr = {0};
          json_t *hj = jb_audit_head_json(&h);
          if (opj) jb_db_notify_event(*cp, job, "jailbox:op", opj, &nerr);
          jb_db_notify_event(*cp, job, "jailbox:audit_head", hj, &nerr);
          json_decref(hj);
          json_decref(opj);
          err_out(e, JB_MCP_TIMEOUT, "timeout", "the buyer did not decide on the write within %lld s",
                  approval_ms / 1000);
          break;
        }
        if (xr == JB_ERR_FAIL) jb_log(JB_LOG_WARN, "approval timeout not recorded", "jobId", job, "detail", err.msg, NULL);
        left = 10; /* decided meanwhile, or not yet that old by the database's clock: read again */
      }
      if (left < nap) nap = (long)left;
    }
    /* draining (SIGTERM): a call still waiting on the buyer or on a pause ends a second before
     * the shutdown grace runs out, so that the instance can stop; the op stays in the database
     * and another instance (or this one restarted) carries its outcome */
    long long deadline = atomic_load(&app->drain_deadline_ms);
    bool on_buyer = !strcmp(ost, "pending") || !strcmp(sst, "paused");
    if (on_buyer && atomic_load(&app->draining) && deadline > 0) {
      long long left = deadline - DRAIN_ANSWER_MS - jb_now_ms();
      if (left <= 0) {
        err_out(e, JB_MCP_UNAVAILABLE, "unavailable",
                "jailboxd is shutting down: op %lld is still %s and stays so; its outcome is in the"
                " session's ops list",
                op_id, !strcmp(ost, "pending") ? "waiting for the buyer" : "held by the pause");
        break;
      }
      if (left < nap) nap = (long)left;
    }
    jb_db_release(app->db, *cp);
    if (app->opwait) jb_opwait_wait(app->opwait, t, nap, FALLBACK_MS);
    else sleep_ms(nap < FALLBACK_MS ? nap : FALLBACK_MS);
    *cp = jb_db_acquire(app->db, &err);
    if (!*cp) {
      unavailable(e, &err);
      break;
    }
  }
  wait_end(app, t);
  return out;
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
      jb_log(JB_LOG_WARN, "no diff preview: the stat's content does not match its sha256", "path", path, NULL);
      return json_null();
    }
  }
  json_t *out = NULL;
  jb_error err = {0};
  if (jb_diff_preview(path, old, olen, exists, data, dlen, (size_t)app->cfg->diff_preview_max, &out, &err) < 0) {
    jb_log(JB_LOG_WARN, "no diff preview", "path", path, "detail", err.msg, NULL);
    out = json_null();
  }
  return out;
}

/* When event `name` `ev` of `job` would not fit one notification (JB_EVENT_MAX_BYTES) —
 * a path of control characters takes up to six bytes a byte as JSON — its "path" is replaced
 * by "sha256:HEX" of the path, as audit entries record over-long paths. */
static void fit_path(const char *job, const char *name, json_t *ev) {
  const char *path = json_string_value(json_object_get(ev, "path"));
  size_t size = jb_db_event_size(job, name, ev);
  if (!path || !size || size <= JB_EVENT_MAX_BYTES) return;
  unsigned char h[32];
  char note[80] = "sha256:";
  crypto_hash_sha256(h, (const unsigned char *)path, strlen(path));
  sodium_bin2hex(note + 7, sizeof note - 7, h, sizeof h);
  json_object_set_new(ev, "path", json_string(note));
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
      fit_path(job, "jailbox:approval_request", ev);
      return;
    }
    const char *p = json_string_value(pv);
    size_t keep = pl > over ? pl - over : 0;
    while (keep > 0 && ((unsigned char)p[keep] & 0xC0) == 0x80) keep--; /* not inside a character */
    json_object_set_new(ev, "preview", json_stringn(p, keep));
    json_object_set_new(ev, "previewTruncated", json_true());
  }
}

/* The ops socket of the worker that holds session `sess` (its contract's "worker") when that
 * worker is one of this process's (server/workers.h), else NULL. */
static const char *worker_socket(struct jb_app *app, const json_t *sess) {
  const char *worker = json_string_value(json_object_get(json_object_get(sess, "walls"), "worker"));
  return jb_workers_ops_socket(__atomic_load_n(&app->workers, __ATOMIC_ACQUIRE), worker);
}

/* The direct hand-over's request (sandbox/proto/direct.h; new): `sargs`, `expect` borrowed. */
static json_t *direct_request(const char *job, const char *tool, const char *path, json_t *sargs,
                              json_t *expect) {
  return json_pack("{s:s,s:s,s:s,s:O,s:O?}", "jobId", job, "tool", tool, "path", path, "args",
                   sargs, "expect", expect);
}

/* Hands op `tool` on `path` with the shim's arguments `sargs` (borrowed) straight to the
 * worker that holds `job` (its contract's "worker", `sess` borrowed) when that worker is one
 * of this process's (sandbox/proto/direct.h); `expect` (borrowed, NULL: none) is checked against the
 * session as jb_db_op_create does. The worker stores, runs and completes the op with its
 * audit entry in one transaction and answers on the socket. Returns the op's answer {ok,
 * result | error} (new), or NULL when the op must take the queued path (no local worker, the
 * session is not active — a paused session holds its ops —, the session changed, or the
 * worker could not be reached: only ops that change nothing come here, so running one again
 * there is harmless). */
static json_t *try_direct(struct jb_app *app, PGconn **cp, const json_t *sess, const char *job,
                          const char *tool, const char *path, json_t *sargs, json_t *expect) {
  const char *sock = worker_socket(app, sess);
  if (!sock) return NULL;
  json_t *req = direct_request(job, tool, path, sargs, expect);
  if (!req) return NULL;
  jb_error err = {0};
  /* the database connection is not needed while the worker works: back to the pool, and
   * taken again for the queued path (*cp NULL when it cannot be had) */
  jb_db_release(app->db, *cp);
  json_t *ans = jb_direct_call(sock, req, RUN_TIMEOUT_MS, &err);
  json_decref(req);
  jb_error aerr = {0};
  *cp = jb_db_acquire(app->db, &aerr);
  if (!*cp) jb_log(JB_LOG_ERROR, "op path: database error", "detail", aerr.msg, NULL);
  if (!ans) {
    jb_log(JB_LOG_WARN, "direct op hand-over failed: the op takes the queued path", "jobId", job,
           "detail", err.msg, NULL);
    return NULL;
  }
  json_t *out = NULL;
  if (json_is_true(json_object_get(ans, "ran")) && json_is_object(json_object_get(ans, "answer"))) {
    out = json_incref(json_object_get(ans, "answer"));
    atomic_fetch_add(&jb_metric_ops_direct, 1);
  }
  json_decref(ans);
  return out;
}

/* The sessions whose ops this process handled last, as read from the database (JSON text of
 * what op_tool decides on: state, mode, exclude, walls.worker, walls.prescan.flagged): a copy
 * to decide on without a round trip. Never trusted alone: the op's insert checks that
 * the session's mode, exclusions and flags are still the ones decided on (jb_db_op_create's
 * `expect_json`), and the call starts over with a fresh read when they are not. Only sessions
 * read in active or paused are kept, whose exclusions and flags no longer change. The state
 * it keeps decides whether a read is handed straight to the worker, which runs it in the
 * sandbox before anything checks the session: a copy is dropped when the session's state
 * changes (jb_op_session_changed), so that a read after a pause does not run until the resume. */
#define SESS_SLOTS 64
static struct {
  pthread_mutex_t lock;
  struct {
    char job[129];
    char *json;
    unsigned long gen; /* moves at every forget: a copy read before it is not kept after it */
  } slot[SESS_SLOTS];
} sess_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t sess_slot(const char *job) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)job; *p; p++) h = (h ^ *p) * 16777619u;
  return h % SESS_SLOTS;
}

/* A copy of the cached session JSON of `job` (new), or NULL. */
static char *sess_cache_get(const char *job) {
  size_t i = sess_slot(job);
  pthread_mutex_lock(&sess_cache.lock);
  char *t = !strcmp(sess_cache.slot[i].job, job) && sess_cache.slot[i].json ? strdup(sess_cache.slot[i].json) : NULL;
  pthread_mutex_unlock(&sess_cache.lock);
  return t;
}

/* The generation of `job`'s slot: take it before reading the session from the database, and
 * give it to sess_cache_put. */
static unsigned long sess_cache_gen(const char *job) {
  size_t i = sess_slot(job);
  pthread_mutex_lock(&sess_cache.lock);
  unsigned long g = sess_cache.slot[i].gen;
  pthread_mutex_unlock(&sess_cache.lock);
  return g;
}

/* Keeps `json` for `job`, read from the database after sess_cache_gen gave `gen` — unless the
 * slot was forgotten since (the copy may predate the change that made it forget). NULL:
 * forgets `job` (`gen` unused). */
static void sess_cache_put(const char *job, const char *json, unsigned long gen) {
  size_t i = sess_slot(job);
  char *t = json ? strdup(json) : NULL;
  pthread_mutex_lock(&sess_cache.lock);
  if (!json) sess_cache.slot[i].gen++;
  if ((t && sess_cache.slot[i].gen == gen) || (!json && !strcmp(sess_cache.slot[i].job, job))) {
    free(sess_cache.slot[i].json);
    sess_cache.slot[i].json = t;
    t = NULL;
    snprintf(sess_cache.slot[i].job, sizeof sess_cache.slot[i].job, "%s", json ? job : "");
  }
  pthread_mutex_unlock(&sess_cache.lock);
  free(t);
}

void jb_op_session_changed(const char *job_id) {
  if (job_id) sess_cache_put(job_id, NULL, 0);
}

enum args_check { ARGS_OK, ARGS_PATH_TYPE, ARGS_PATH_MISSING, ARGS_UNKNOWN };

/* Checks the names of a tool call's arguments and its path argument: *path (borrowed from
 * `args`; "." when a list has none) and *plen its length in bytes; *bad_key the first unknown
 * argument. */
static enum args_check check_args(const char *tool, json_t *args, const char **path, size_t *plen,
                                  const char **bad_key) {
  bool is_write = !strcmp(tool, "write"), is_list = !strcmp(tool, "list");
  json_t *jp = json_object_get(args, "path");
  if (jp && !json_is_string(jp)) return ARGS_PATH_TYPE;
  if (!jp && !is_list) return ARGS_PATH_MISSING;
  *path = jp ? json_string_value(jp) : ".";
  *plen = jp ? json_string_length(jp) : 1;
  static const char *const allowed_read[] = {"path", "offset", "length", NULL};
  static const char *const allowed_write[] = {"path", "content", "encoding", NULL};
  static const char *const allowed_list[] = {"path", "recursive", NULL};
  const char *const *allowed = is_write ? allowed_write : is_list ? allowed_list : allowed_read;
  const char *key;
  json_t *v;
  json_object_foreach(args, key, v) {
    bool ok = false;
    for (size_t i = 0; allowed[i]; i++) ok = ok || !strcmp(key, allowed[i]);
    if (!ok) {
      *bad_key = key;
      return ARGS_UNKNOWN;
    }
  }
  return ARGS_OK;
}

/* The shim's arguments of a tool call (new): `args` without the path, and the session's
 * exclusions (borrowed) when it has any — the shim checks them again on the path it resolves:
 * a symlink must not lead around them. */
static json_t *shim_args(json_t *args, json_t *exclude) {
  json_t *sargs = json_deep_copy(args);
  json_object_del(sargs, "path");
  if (json_array_size(exclude) > 0) json_object_set(sargs, "exclude", exclude);
  return sargs;
}

/* What a direct op is decided on, for the worker to check against the session (new). */
static json_t *direct_expect(json_t *sess, json_t *exclude, json_t *flagged) {
  return json_pack("{s:O?,s:O?,s:o}", "mode", json_object_get(sess, "mode"), "exclude", exclude,
                   "flagged", flagged ? json_incref(flagged) : json_array());
}

/* The MCP result of a read or list that ran (`ans` {ok, result | error}, borrowed): new, or
 * NULL with `e` set when the shim refused it. A list's entries are filtered by the session's
 * exclusions and pre-scan flags (borrowed). */
static json_t *answer_result(const char *tool, const char *path, json_t *ans, json_t *exclude,
                             json_t *flagged, struct jb_mcp_error *e) {
  if (!json_is_true(json_object_get(ans, "ok"))) return shim_error(e, json_object_get(ans, "error"));
  json_t *r = json_object_get(ans, "result");
  if (!strcmp(tool, "list")) filter_list(r, path, exclude, flagged);
  return tool_result(tool, r);
}

/* One tool call; `fresh`: read the session from the database, not from sess_cache. *stale is
 * set (and nothing done) when the cached copy no longer held at the insert. */
static json_t *op_tool(struct jb_app *app, const char *job, const char *tool, json_t *args,
                       struct jb_mcp_error *e, bool fresh, bool *stale);

json_t *jb_op_tool(void *ctx, struct jb_app *app, const char *job, const char *tool,
                   json_t *args, struct jb_mcp_error *e) {
  (void)ctx;
  if (!strcmp(tool, "done")) return tool_done(app, job, args, e);
  bool stale = false;
  json_t *r = op_tool(app, job, tool, args, e, false, &stale);
  if (stale) r = op_tool(app, job, tool, args, e, true, &stale);
  return r;
}

static json_t *op_tool(struct jb_app *app, const char *job, const char *tool, json_t *args,
                       struct jb_mcp_error *e, bool fresh, bool *stale) {
  *stale = false;

  /* arguments */
  bool is_write = !strcmp(tool, "write"), is_list = !strcmp(tool, "list");
  const char *path, *key;
  size_t plen;
  switch (check_args(tool, args, &path, &plen, &key)) {
  case ARGS_OK:
    break;
  case ARGS_PATH_TYPE:
    return err_out(e, JB_MCP_INVALID, "invalid", "'path' must be a string");
  case ARGS_PATH_MISSING:
    return err_out(e, JB_MCP_INVALID, "invalid", "'path' is required");
  case ARGS_UNKNOWN:
    return err_out(e, JB_MCP_INVALID, "invalid", "unknown argument '%.64s' for %s", key, tool);
  }

  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) return unavailable(e, &err);
  json_t *result = NULL;
  json_t *sess = NULL;
  char *text = NULL;
  unsigned char *data = NULL;
  char *args_text = NULL;
  bool counted = false;
  json_t *current = NULL; /* a supervised write's target as it is now (stat through the shim) */
  json_t *diff = NULL;    /* its diff preview (api/agent/diff.h) */

  /* the session */
  text = fresh ? NULL : sess_cache_get(job);
  bool cached = text != NULL;
  unsigned long gen = sess_cache_gen(job);
  if (!text && jb_db_session_get(c, job, &text, &err) != JB_OK) {
    result = unavailable(e, &err);
    goto out;
  }
  sess = json_loads(text, 0, NULL);
  const char *state = json_string_value(json_object_get(sess, "state"));
  if (!cached && state && (!strcmp(state, "active") || !strcmp(state, "paused"))) {
    /* the cache keeps what is decided on, not the whole session: its walls contract is most
     * of its ~7 KB, and parsing that again was a quarter of this process's time per op */
    json_t *walls = json_object_get(sess, "walls");
    json_t *view = json_pack("{s:O*, s:O*, s:O*, s:{s:O*, s:{s:O*}}}", "state", json_object_get(sess, "state"),
                             "mode", json_object_get(sess, "mode"), "exclude", json_object_get(sess, "exclude"),
                             "walls", "worker", json_object_get(walls, "worker"), "prescan", "flagged",
                             json_object_get(json_object_get(walls, "prescan"), "flagged"));
    char *vt = view ? json_dumps(view, JSON_COMPACT) : NULL;
    if (vt) sess_cache_put(job, vt, gen);
    free(vt);
    json_decref(view);
  }
  bool arrived = state && !strcmp(state, "awaiting_agent");
  if (arrived) {
    jb_op_agent_arrived(c, app, job);
    state = "active";
  }
  if (!state || (strcmp(state, "active") && strcmp(state, "paused"))) {
    result = err_out(e, JB_MCP_DENIED, "denied", "the session is %s: no file operations now",
                     state ? state : "unknown");
    goto out;
  }
  bool supervised = !strcmp(json_string_value(json_object_get(sess, "mode")) ?: "supervised", "supervised");
  json_t *exclude = json_object_get(sess, "exclude");
  json_t *flagged = json_object_get(json_object_get(json_object_get(sess, "walls"), "prescan"), "flagged");

  /* the path: syntax, then exclusions */
  enum jb_path_verdict pv = jb_path_check(path, plen, is_list);
  if (pv != JB_PATH_OK) {
    audit_refusal(c, app, job, tool, NULL,
                  json_pack("{s:s,s:s}", "error", "denied", "detail", jb_path_verdict_text(pv)));
    result = err_out(e, JB_MCP_DENIED, "denied", "%s", jb_path_verdict_text(pv));
    /* a path that tries to leave the workspace is an escape signal (issue 8) */
    if (pv == JB_PATH_ABSOLUTE || pv == JB_PATH_DOTDOT) {
      char detail[400];
      snprintf(detail, sizeof detail, "%s: %.300s", jb_path_verdict_text(pv), path);
      jb_escape_signal(app, job, pv == JB_PATH_ABSOLUTE ? JB_SIG_ABSOLUTE_PATH : JB_SIG_PATH_TRAVERSAL, detail);
    }
    goto out;
  }
  const char *glob = NULL;
  if (strcmp(path, ".") && jb_path_excluded(path, exclude, &glob)) {
    audit_refusal(c, app, job, tool, path, json_pack("{s:s,s:s}", "error", "excluded", "glob", glob));
    result = err_out(e, JB_MCP_EXCLUDED, "excluded", "%s is excluded from this session", path);
    char detail[400];
    snprintf(detail, sizeof detail, "%s %.300s (excluded by %.60s)", tool, path, glob ? glob : "?");
    jb_escape_signal(app, job, JB_SIG_EXCLUDED_PATH, detail);
    goto out;
  }
  const char *fkind = strcmp(path, ".") ? flagged_kind(path, flagged) : NULL;
  if (fkind) {
    audit_refusal(c, app, job, tool, path, json_pack("{s:s,s:s}", "error", "flagged", "kind", fkind));
    result = err_out(e, JB_MCP_FLAGGED, "flagged", "%s was flagged by the pre-scan (%s)", path, fkind);
    /* through or onto a symlink leaving the workspace, or a hard link: an escape signal */
    char detail[400];
    snprintf(detail, sizeof detail, "%s %.300s (flagged by the pre-scan: %.40s)", tool, path, fkind);
    jb_escape_signal(app, job, !strcmp(fkind, "symlink_outside") ? JB_SIG_SYMLINK_ESCAPE
                               : !strcmp(fkind, "hardlink") ? JB_SIG_HARD_LINK : JB_SIG_DENIED_PATH,
                     detail);
    goto out;
  }

  /* the shim's arguments */
  json_t *sargs = shim_args(args, exclude);
  char sha_hex[65] = "";
  size_t dlen = 0;
  if (is_write) {
    json_t *jc = json_object_get(args, "content");
    const char *enc = json_string_value(json_object_get(args, "encoding")) ?: "utf-8";
    if (!json_is_string(jc) || (strcmp(enc, "utf-8") && strcmp(enc, "base64"))) {
      json_decref(sargs);
      result = err_out(e, JB_MCP_INVALID, "invalid", "'content' must be a string, 'encoding' utf-8 or base64");
      goto out;
    }
    size_t tlen = json_string_length(jc);
    if (tlen > (size_t)FILE_MAX * 2) {
      json_decref(sargs);
      result = err_out(e, JB_MCP_TOO_LARGE, "too_large", "content over %d bytes", FILE_MAX);
      goto out;
    }
    if (!strcmp(enc, "base64")) {
      data = malloc(tlen / 4 * 3 + 4);
      if (!data || sodium_base642bin(data, tlen / 4 * 3 + 4, json_string_value(jc), tlen, NULL, &dlen,
                                     NULL, sodium_base64_VARIANT_ORIGINAL) != 0) {
        json_decref(sargs);
        result = err_out(e, JB_MCP_INVALID, "invalid", "'content' is not valid base64");
        goto out;
      }
    } else {
      dlen = tlen;
      data = malloc(tlen ? tlen : 1);
      if (data) memcpy(data, json_string_value(jc), tlen);
    }
    if (!data) {
      json_decref(sargs);
      result = err_out(e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
      goto out;
    }
    if (dlen > FILE_MAX) {
      json_decref(sargs);
      audit_refusal(c, app, job, tool, path, json_pack("{s:s,s:I}", "error", "too_large", "size", (json_int_t)dlen));
      result = err_out(e, JB_MCP_TOO_LARGE, "too_large", "content of %zu bytes is over %d", dlen, FILE_MAX);
      goto out;
    }
    unsigned char h[32];
    crypto_hash_sha256(h, data, dlen);
    sodium_bin2hex(sha_hex, sizeof sha_hex, h, sizeof h);
    json_t *findings = jb_scan_content(path, data, dlen);
    json_t *hits = findings ? jb_scan_rule_ids(findings) : NULL;
    if (!hits || json_array_size(hits) > 0) {
      json_decref(sargs);
      if (!hits) {
        json_decref(findings);
        hits = json_pack("[s]", "scanner_unavailable");
        findings = json_pack("[{s:s,s:s,s:s}]", "rule", "scanner_unavailable", "severity", "critical",
                             "error", "out of memory");
      }
      audit_refusal(c, app, job, tool, path,
                    json_pack("{s:s,s:I,s:s,s:s,s:O,s:O?}", "error", "flagged", "size", (json_int_t)dlen,
                              "sha256", sha_hex, "decision", "flagged", "rules", hits, "findings", findings));
      jb_error nerr = {0};
      json_t *ev = json_pack("{s:s,s:s,s:s,s:I,s:s,s:O,s:O?}", "jobId", job, "kind", "flagged_write",
                             "path", path, "size", (json_int_t)dlen, "sha256", sha_hex, "rules", hits,
                             "findings", findings);
      json_decref(findings);
      fit_path(job, "jailbox:security_alert", ev);
      jb_db_notify_event(c, job, "jailbox:security_alert", ev, &nerr);
      json_decref(ev);
      char rl[200] = "";
      size_t i;
      json_t *r;
      json_array_foreach(hits, i, r) {
        if (i) strncat(rl, ", ", sizeof rl - strlen(rl) - 1);
        strncat(rl, json_string_value(r), sizeof rl - strlen(rl) - 1);
      }
      json_decref(hits);
      result = err_out(e, JB_MCP_FLAGGED, "flagged", "the content scanner flagged this write (%s)", rl);
      goto out;
    }
    json_decref(hits);
    json_decref(findings);
    json_object_set_new(sargs, "size", json_integer((json_int_t)dlen));
    json_object_set_new(sargs, "sha256", json_string(sha_hex));
  }
  /* decided on a copy, or on a read made before the session became active (the buyer may
   * still add exclusions in awaiting_agent): the insert checks it still holds */
  bool check = cached || arrived;
  json_t *ans = NULL;
  /* a read or list: straight to the worker when it is ours — no wait on a buyer or a pause,
   * so it is not counted among the waiting calls below. Not in a pause the session was read
   * in: the worker runs a direct op before it stores it (and refuses it then), and nothing
   * should run in the sandbox while the buyer holds the session. */
  if (!is_write && !strcmp(state, "active")) {
    json_t *x = check ? direct_expect(sess, exclude, flagged) : NULL;
    if (!check || x) ans = try_direct(app, &c, sess, job, tool, path, sargs, x);
    json_decref(x);
    if (!c && !ans) {
      json_decref(sargs);
      result = err_out(e, JB_MCP_UNAVAILABLE, "unavailable", "the service is unavailable; try again");
      goto out;
    }
  }
  if (ans) {
    json_decref(sargs);
    goto answered;
  }
  /* Each call waits on one of the socket's handler threads (JAILBOX_WS_WORKERS): at least
   * one must stay free for everything else — the buyer's approve among it — or the waits
   * would starve the very decision they wait for. */
  long max_waiting = app->cfg ? app->cfg->ws_workers - 1 : 1;
  if (max_waiting < 1) max_waiting = 1;
  if (atomic_fetch_add(&waiting, 1) >= max_waiting) {
    atomic_fetch_sub(&waiting, 1);
    json_decref(sargs);
    result = err_out(e, JB_MCP_UNAVAILABLE, "unavailable",
                     "too many calls are waiting (for approval or a paused session) on this server; try again");
    goto out;
  }
  counted = true;

  /* a supervised write: first the file as it is now (through the shim: the same rules), so
   * that the buyer sees what it replaces and the write is refused if it changes meanwhile */
  bool pending = is_write && supervised;
  long long op_id = 0;
  char st[20] = "";
  int rc;
  if (pending) {
    json_t *stargs = json_object();
    if (json_array_size(exclude) > 0) json_object_set(stargs, "exclude", exclude);
    if (app->cfg && app->cfg->diff_preview_max > 0) /* the current text too, for the diff preview */
      json_object_set_new(stargs, "withContent", json_true());
    json_t *sa = strcmp(state, "active") ? NULL : try_direct(app, &c, sess, job, "stat", path, stargs, NULL);
    rc = JB_OK;
    if (!c) {
      json_decref(sa);
      json_decref(stargs);
      json_decref(sargs);
      result = err_out(e, JB_MCP_UNAVAILABLE, "unavailable", "the service is unavailable; try again");
      goto out;
    }
    if (!sa) {
      char *stext = json_dumps(stargs, JSON_COMPACT);
      struct jb_opwait_ticket sticket;
      wait_begin(app, &sticket, job);
      rc = stext ? jb_db_op_create(c, job, "stat", path, stext, false, NULL, &op_id, st, &err) : JB_ERR_FAIL;
      free(stext);
      if (rc == JB_OK) atomic_fetch_add(&jb_metric_ops_queued, 1);
      if (rc == JB_OK) sa = await_op(app, &c, job, op_id, &sticket, e);
      else wait_end(app, &sticket);
    }
    json_decref(stargs);
    if (rc == JB_ERR_CONFLICT || rc == JB_ERR_NOT_FOUND) {
      result = err_out(e, JB_MCP_DENIED, "denied", "the session is %s: no file operations now", st[0] ? st : "gone");
    } else if (rc != JB_OK) {
      result = unavailable(e, &err);
    } else if (sa && !json_is_true(json_object_get(sa, "ok"))) {
      result = shim_error(e, json_object_get(sa, "error"));
    } else if (sa) {
      current = json_incref(json_object_get(sa, "result"));
    }
    json_decref(sa);
    if (!current) {
      json_decref(sargs);
      goto out;
    }
    const char *cur = json_is_true(json_object_get(current, "exists"))
                          ? json_string_value(json_object_get(current, "sha256"))
                          : "";
    if (!cur) { /* exists but is no single-link regular file: the write would be refused */
      json_decref(sargs);
      result = err_out(e, JB_MCP_DENIED, "denied", "%s is not a regular file with a single link", path);
      json_t *links = json_object_get(current, "links");
      if (json_is_integer(links) && json_integer_value(links) > 1 &&
          !strcmp(json_string_value(json_object_get(current, "type")) ?: "", "file")) {
        char detail[400];
        snprintf(detail, sizeof detail, "write onto %.300s, a file with %lld hard links", path,
                 (long long)json_integer_value(links));
        jb_escape_signal(app, job, JB_SIG_HARD_LINK, detail);
      } else if (json_is_true(json_object_get(current, "leadsOut"))) {
        char detail[400];
        snprintf(detail, sizeof detail, "write onto %.300s, a symlink that leads out of the workspace", path);
        jb_escape_signal(app, job, JB_SIG_SYMLINK_ESCAPE, detail);
      }
      goto out;
    }
    json_object_set_new(sargs, "expectSha256", json_string(cur));
    diff = write_diff(app, path, current, data, dlen);
  }
  args_text = json_dumps(sargs, JSON_COMPACT);
  json_decref(sargs);
  if (!args_text) {
    result = err_out(e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
    goto out;
  }

  /* store it: pending for the buyer, or queued for the worker */
  struct jb_opwait_ticket ticket;
  wait_begin(app, &ticket, job);
  char *expect = NULL;
  if (check) {
    json_t *x = json_pack("{s:O?,s:O?,s:o}", "mode", json_object_get(sess, "mode"), "exclude", exclude,
                          "flagged", flagged ? json_incref(flagged) : json_array());
    expect = x ? json_dumps(x, JSON_COMPACT) : NULL;
    json_decref(x);
  }
  rc = check && !expect ? JB_ERR_FAIL
                         : jb_db_op_create(c, job, tool, path, args_text, pending, expect, &op_id, st, &err);
  free(expect);
  if (rc != JB_OK) wait_end(app, &ticket);
  else atomic_fetch_add(&jb_metric_ops_queued, 1);
  if (rc == JB_ERR_CONFLICT && !fresh && !st[0]) { /* the copy was stale: start over, fresh */
    sess_cache_put(job, NULL, 0);
    *stale = true;
    goto out;
  }
  if (rc == JB_ERR_CONFLICT && !st[0]) {
    result = err_out(e, JB_MCP_UNAVAILABLE, "unavailable", "the session's settings changed meanwhile; try again");
    goto out;
  }
  if (rc == JB_ERR_CONFLICT || rc == JB_ERR_NOT_FOUND) {
    result = err_out(e, JB_MCP_DENIED, "denied", "the session is %s: no file operations now", st[0] ? st : "gone");
    goto out;
  }
  if (rc != JB_OK) {
    result = unavailable(e, &err);
    goto out;
  }
  if (pending) {
    if (json_is_object(diff) && jb_db_op_set_diff(c, op_id, diff, &err) != JB_OK)
      jb_log(JB_LOG_WARN, "diff preview not stored", "jobId", job, "detail", err.msg, NULL);
    bool text_ok = !memchr(data, '\0', dlen);
    json_t *preview = text_ok ? json_stringn((const char *)data, dlen < PREVIEW_MAX ? dlen : PREVIEW_MAX) : NULL;
    const char *cur = json_string_value(json_object_get(current, "sha256"));
    json_t *ev = json_pack("{s:s,s:I,s:s,s:s,s:I,s:s,s:s,s:o,s:b,s:s?,s:b}", "jobId", job, "opId",
                           (json_int_t)op_id, "tool", "write", "path", path, "size", (json_int_t)dlen,
                           "sha256", sha_hex, "verdict", "clean", "preview", preview ? preview : json_null(),
                           "previewTruncated", dlen > PREVIEW_MAX, "currentSha256", cur, "exists",
                           json_is_true(json_object_get(current, "exists")));
    fit_event(job, ev, diff);
    jb_error nerr = {0};
    if (jb_db_notify_event(c, job, "jailbox:approval_request", ev, &nerr) != JB_OK)
      jb_log(JB_LOG_WARN, "approval request not announced", "jobId", job, "detail", nerr.msg, NULL);
    json_decref(ev);
  }

  /* wait for the outcome */
  ans = await_op(app, &c, job, op_id, &ticket, e);
answered:
  if (ans) {
    result = answer_result(tool, path, ans, exclude, flagged, e);
    json_decref(ans);
  }

out:
  if (counted) atomic_fetch_sub(&waiting, 1);
  json_decref(current);
  json_decref(diff);
  jb_db_release(app->db, c);
  json_decref(sess);
  free(text);
  free(data);
  free(args_text);
  return result;
}

/* ---- the direct path from the socket's service thread (api/agent/socket.h) --------------------- */

struct direct_plan {
  char tool[8];
  char *path;
  json_t *exclude, *flagged; /* to filter a list's answer */
};

bool jb_op_direct_plan(struct jb_app *app, const char *job, const char *tool, json_t *args,
                       struct jb_mcp_direct *out) {
  memset(out, 0, sizeof *out);
  if (strcmp(tool, "read") && strcmp(tool, "list")) return false;
  bool is_list = !strcmp(tool, "list");
  const char *path, *key;
  size_t plen;
  if (check_args(tool, args, &path, &plen, &key) != ARGS_OK) return false;
  char *text = sess_cache_get(job);
  if (!text) return false;
  json_t *sess = json_loads(text, 0, NULL);
  free(text);
  bool ok = false;
  json_t *sargs = NULL, *x = NULL, *req = NULL;
  const char *state = json_string_value(json_object_get(sess, "state"));
  if (!state || strcmp(state, "active")) goto out;
  json_t *exclude = json_object_get(sess, "exclude");
  json_t *flagged = json_object_get(json_object_get(json_object_get(sess, "walls"), "prescan"), "flagged");
  /* anything op_tool would refuse (and audit, and signal) goes its way */
  const char *glob = NULL;
  if (jb_path_check(path, plen, is_list) != JB_PATH_OK) goto out;
  if (strcmp(path, ".") && (jb_path_excluded(path, exclude, &glob) || flagged_kind(path, flagged))) goto out;
  const char *sock = worker_socket(app, sess);
  if (!sock || strlen(sock) >= sizeof out->sock) goto out;
  sargs = shim_args(args, exclude);
  x = sargs ? direct_expect(sess, exclude, flagged) : NULL;
  req = x ? direct_request(job, tool, path, sargs, x) : NULL;
  struct direct_plan *dp = req ? calloc(1, sizeof *dp) : NULL;
  if (!dp || !(dp->path = strdup(path))) {
    free(dp);
    goto out;
  }
  snprintf(dp->tool, sizeof dp->tool, "%s", tool);
  dp->exclude = json_incref(exclude);
  dp->flagged = json_incref(flagged);
  snprintf(out->sock, sizeof out->sock, "%s", sock);
  out->req = req;
  out->ctx = dp;
  req = NULL;
  ok = true;
out:
  json_decref(req);
  json_decref(x);
  json_decref(sargs);
  json_decref(sess);
  return ok;
}

json_t *jb_op_direct_answer(void *ctx, json_t *answer, struct jb_mcp_error *e, bool *ran) {
  struct direct_plan *dp = ctx;
  json_t *a = json_object_get(answer, "answer");
  *ran = json_is_true(json_object_get(answer, "ran")) && json_is_object(a);
  if (!*ran) return NULL;
  atomic_fetch_add(&jb_metric_ops_direct, 1);
  return answer_result(dp->tool, dp->path, a, dp->exclude, dp->flagged, e);
}

void jb_op_direct_free(void *ctx) {
  struct direct_plan *dp = ctx;
  if (!dp) return;
  free(dp->path);
  json_decref(dp->exclude);
  json_decref(dp->flagged);
  free(dp);
}
