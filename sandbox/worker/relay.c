/* relay.c — ops, from their row to the shim and back: a stored op is claimed (or, for a read,
 * list or stat jailboxd hands over directly, taken from its request), run in the session's
 * shim, and completed — its outcome and audit entry stored, what its answer tells of the agent
 * acted on (an escape or alert signal). The op thread finds the sessions with queued ops
 * (woken by jb_op) and its runners run them, a session on one runner at a time; the ops
 * socket's pool (direct_server.c) runs the direct ones here. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db/audit_store.h"
#include "db/ops.h"
#include "sandbox/proto/tool.h"
#include "sandbox/worker/changeset.h"
#include "sandbox/worker/preimage_op.h"
#include "sandbox/worker/worker.h"

/* ---- one op ------------------------------------------------------------------------------- */

/* Only values of the expected type go into an entry: anything else would make the entry
 * unrecordable and the op stuck (an agent controls the arguments). `d` is the details. */
#define SET_INT(key, v)                                   \
  do {                                                    \
    json_t *v_ = (v);                                     \
    if (json_is_integer(v_)) json_object_set(d, key, v_); \
  } while (0)
#define SET_HEX64(key, v)                                               \
  do {                                                                  \
    const char *h_ = json_string_value(v);                              \
    if (h_ && strlen(h_) == 64 && strspn(h_, "0123456789abcdef") == 64) \
      json_object_set_new(d, key, json_string(h_));                     \
  } while (0)
#define SET_BOOL(key, v) json_object_set_new(d, key, json_boolean(json_is_true(v)))
#define SET_PATH(key, v)                                                        \
  do {                                                                          \
    const char *p_ = json_string_value(v);                                      \
    if (p_ && strlen(p_) <= 4096) json_object_set_new(d, key, json_string(p_)); \
  } while (0)

/* The details of an op of a tool that changes nothing (read, read_many, stat, list, find,
 * search) into `d`; `ok`: it succeeded, `res` its result, `args` its arguments (borrowed). */
static void details_of_read(enum jb_tool tool, json_t *d, json_t *args, json_t *res, bool ok) {
  switch (tool) {
    case JB_TOOL_READ: {
      json_t *len = json_object_get(res, "length");
      json_object_set_new(d, "size",
                          json_integer(ok && json_is_integer(len) ? json_integer_value(len) : 0));
      if (ok) SET_INT("fileSize", json_object_get(res, "size"));
      SET_INT("offset", json_object_get(args, "offset"));
      json_t *lines = json_object_get(res, "lines");
      if (ok && json_is_object(lines)) {
        SET_INT("firstLine", json_object_get(lines, "first"));
        SET_INT("lines", json_object_get(lines, "count"));
      }
      break;
    }
    case JB_TOOL_READ_MANY: {
      json_t *files = json_object_get(res, "files"), *f;
      size_t i;
      long long failed = 0, size = 0;
      json_array_foreach (files, i, f) {
        if (!json_is_true(json_object_get(f, "ok")))
          failed++;
        else
          size += json_integer_value(json_object_get(json_object_get(f, "result"), "length"));
      }
      json_object_set_new(d, "files", json_integer((json_int_t)json_array_size(files)));
      json_object_set_new(d, "failed", json_integer(failed));
      json_object_set_new(d, "size", json_integer(size));
      break;
    }
    case JB_TOOL_STAT:
      json_object_set_new(d, "exists", json_boolean(json_is_true(json_object_get(res, "exists"))));
      SET_HEX64("sha256", json_object_get(res, "sha256"));
      break;
    case JB_TOOL_LIST:
      json_object_set_new(d, "entries",
                          json_integer(ok ? json_integer_value(json_object_get(res, "count")) : 0));
      SET_BOOL("recursive", json_object_get(args, "recursive"));
      SET_INT("depth", json_object_get(args, "depth"));
      break;
    case JB_TOOL_FIND:
    case JB_TOOL_SEARCH:
      json_object_set_new(
          d, "matches",
          json_integer(ok ? (json_int_t)json_array_size(json_object_get(res, "matches")) : 0));
      SET_BOOL("truncated", json_object_get(res, "truncated"));
      if (ok && tool == JB_TOOL_SEARCH)
        SET_INT("filesScanned", json_object_get(res, "filesScanned"));
      break;
    default: /* the other side's tools, exec (exec_op.c's entry), unknown names */
      break;
  }
}

/* The folders a write or a move made (the shim's "createdFolders": at most 256 paths of at
 * most 4,096 bytes) as `createdFolders` of `d`; nothing when it made none. */
static void set_created_folders(json_t *d, json_t *res) {
  json_t *v = json_object_get(res, "createdFolders"), *x;
  size_t i, n = json_array_size(v);
  if (n == 0 || n > 256) return;
  json_array_foreach (v, i, x)
    if (!json_is_string(x) || json_string_length(x) > 4096) return;
  json_object_set(d, "createdFolders", v);
}

/* The details of an op of a tool that changes files (write, edit, mkdir, move, delete) into
 * `d`, as details_of_read. */
static void details_of_change(enum jb_tool tool, json_t *d, json_t *args, json_t *res, bool ok) {
  switch (tool) {
    case JB_TOOL_WRITE:
    case JB_TOOL_EDIT:
      SET_INT("size", json_object_get(args, "size"));
      SET_HEX64("sha256", json_object_get(args, "sha256"));
      if (tool == JB_TOOL_EDIT) {
        SET_HEX64("sha256Before", json_object_get(args, "expectSha256"));
        SET_INT("edits", json_object_get(args, "edits"));
        SET_INT("replaced", json_object_get(args, "replaced"));
      }
      if (ok) set_created_folders(d, res);
      break;
    case JB_TOOL_MKDIR:
      SET_BOOL("created", json_object_get(res, "created"));
      break;
    case JB_TOOL_MOVE:
      SET_PATH("destination", json_object_get(args, "destination"));
      SET_BOOL("overwrite", json_object_get(args, "overwrite"));
      if (ok) {
        SET_PATH("type", json_object_get(res, "type"));
        SET_HEX64("sha256", json_object_get(res, "sha256"));
        set_created_folders(d, res);
      }
      break;
    case JB_TOOL_DELETE:
      SET_BOOL("recursive", json_object_get(args, "recursive"));
      if (ok) {
        SET_INT("deleted", json_object_get(res, "deleted"));
        SET_PATH("type", json_object_get(res, "type"));
      }
      break;
    default: /* the other side's tools, exec (exec_op.c's entry), unknown names */
      break;
  }
}

#undef SET_INT
#undef SET_HEX64
#undef SET_BOOL
#undef SET_PATH

/* The audit details of an executed op — hashes and counts, never contents: read {size,
 * fileSize, offset, lines?}, read_many {files, failed, size}, write {size, sha256, decision},
 * edit {size, sha256, sha256Before, edits, replaced, decision}, stat {exists, sha256?}, list
 * {entries, recursive, depth?}, find {matches, truncated}, search {matches, truncated,
 * filesScanned}, mkdir {created, decision}, move {destination, overwrite, type, sha256?,
 * decision}, write and move also createdFolders when they made folders, delete {deleted, recursive, type, decision}; always ok, and a failure adds
 * {error: code}. api/audit.md is the contract. */
static json_t *op_audit_details(const struct jb_op_claim *op, enum jb_tool tool, json_t *args,
                                json_t *answer) {
  bool ok = json_is_true(json_object_get(answer, "ok"));
  json_t *res = json_object_get(answer, "result");
  json_t *d = json_object();
  details_of_read(tool, d, args, res, ok);
  details_of_change(tool, d, args, res, ok);
  if (jb_tool_changes_files(tool)) json_object_set_new(d, "decision", json_string(op->decision));
  json_object_set_new(d, "ok", json_boolean(ok));
  if (!ok) {
    const char *code = json_string_value(json_object_get(json_object_get(answer, "error"), "code"));
    bool plain =
        code && strlen(code) < 32 && strspn(code, "abcdefghijklmnopqrstuvwxyz_") == strlen(code);
    json_object_set_new(d, "error", json_string(plain ? code : "internal"));
  }
  return d;
}

/* What running an op told of the agent: an escape or alert signal (enum jb_signal, -1 none)
 * with its detail, raised once the op is committed. */
struct op_signal {
  int signal;
  char detail[400];
};

/* The signal op `op`'s answer `ans` tells of the agent (enum jb_signal; -1: none), with its
 * detail in *sigout when there is one. `violation`: the shim's line was malformed or oversized. */
static int op_signal_of(const struct jb_op_claim *op, enum jb_tool tool, json_t *ans,
                        bool violation, struct op_signal *sigout) {
  json_t *ej = json_object_get(ans, "error");
  if (!ej && tool == JB_TOOL_READ_MANY) { /* the first file refused for an escape */
    size_t i;
    json_t *f;
    json_array_foreach (json_object_get(json_object_get(ans, "result"), "files"), i, f) {
      json_t *fe = json_object_get(f, "error");
      if (json_is_string(json_object_get(fe, "escape"))) {
        ej = fe;
        break;
      }
    }
  }
  const char *escape = json_string_value(json_object_get(ej, "escape"));
  const char *code = json_string_value(json_object_get(ej, "code"));
  int sig = violation ? JB_SIG_PROTOCOL_VIOLATION : escape ? jb_signal_from_name(escape) : -1;
  if (sig < 0 || sig >= JB_SIG_ESCAPE_COUNT) /* the shim names only escape kinds */
    sig = code && !strcmp(code, "excluded") ? JB_SIG_EXCLUDED_PATH
          : code && !strcmp(code, "denied") ? JB_SIG_DENIED_PATH
                                            : -1;
  if (sig >= 0) {
    sigout->signal = sig;
    const char *msg = json_string_value(json_object_get(ej, "message"));
    snprintf(sigout->detail, sizeof sigout->detail, "%s %.300s: %.80s", op->tool, op->path,
             msg ? msg : "refused");
  }
  return sig;
}

/* An approved mkdir, move or delete runs only on what the buyer was shown: each {path,
 * exists, type?, sha256?} of `expect` is compared with a stat of the path in the shim, under
 * the session's lock (no other op of the session runs between the check and the op). Fills
 * `changed` with what differs (empty: nothing), or `err` when the shim could not be asked.
 * Returns NULL (the answers are not kept). */
static json_t *check_current(struct jb_worker *w, struct jb_session *s, json_t *expect,
                             json_t *exclude, char *changed, size_t size, jb_error *err) {
  size_t i;
  json_t *x;
  json_array_foreach (expect, i, x) {
    const char *path = json_string_value(json_object_get(x, "path"));
    if (!path) continue;
    json_t *req = json_pack("{s:s,s:s}", "op", "stat", "path", path);
    if (req && json_is_array(exclude)) json_object_set(req, "exclude", exclude);
    json_t *a = req ? jb_shimconn_call(&s->sb.conn, req, w->walls.call_timeout_ms, err) : NULL;
    json_decref(req);
    if (!a) return NULL;
    json_t *r = json_object_get(a, "result");
    const char *code = json_string_value(json_object_get(json_object_get(a, "error"), "code"));
    bool ok = json_is_true(json_object_get(a, "ok")) || (code && !strcmp(code, "not_found"));
    bool exists =
        ok && json_is_true(json_object_get(r, "exists")); /* not_found: a parent missing */
    bool want = json_is_true(json_object_get(x, "exists"));
    const char *type = json_string_value(json_object_get(r, "type")) ?: "";
    const char *wtype = json_string_value(json_object_get(x, "type"));
    const char *sha = json_string_value(json_object_get(r, "sha256"));
    const char *wsha = json_string_value(json_object_get(x, "sha256"));
    const char *what = NULL;
    char why[120]; /* the shim's reason, for the agent */
    snprintf(why, sizeof why, "cannot be examined any more (%.80s)",
             json_string_value(json_object_get(json_object_get(a, "error"), "message")) ?: "?");
    if (!ok)
      what = why;
    else if (exists != want)
      what = want ? "no longer exists" : "exists now";
    else if (exists && wtype && strcmp(type, wtype))
      what = "is of another type now";
    else if (exists && wsha && (!sha || strcmp(sha, wsha)))
      what = "has changed";
    json_decref(a);
    if (what) {
      snprintf(changed, size, "%.400s %s since the op was requested: not run", path, what);
      return NULL;
    }
  }
  return NULL;
}

/* The answer the shim of `s` (its lock held) recorded for op `op_id` ({ok, result | error},
 * new), or NULL when it ran no such op (or cannot say: an older shim, a failed call — the op
 * then runs, and its own opId stops a second change). A failed call's error goes to `err`:
 * EPROTO or EMSGSIZE (a malformed or oversized line: the channel is dead) is the shim's
 * protocol violation, as for any other answer. */
static json_t *recall(struct jb_worker *w, struct jb_session *s, long long op_id, jb_error *err) {
  json_t *req = json_pack("{s:s, s:I}", "op", "recall", "opId", (json_int_t)op_id);
  json_t *a = req ? jb_shimconn_call(&s->sb.conn, req, w->walls.call_timeout_ms, err) : NULL;
  json_decref(req);
  json_t *r = json_object_get(a, "result");
  json_t *found = json_is_true(json_object_get(r, "found")) ? json_object_get(r, "answer") : NULL;
  json_t *out = json_is_object(found) ? json_incref(found) : NULL;
  json_decref(a);
  return out;
}

/* Whether `a`, the shim's answer to an op (or the one it recalls), is {ok: true, result} or
 * {ok: false, error: {…}} (sandbox/proto/PROTOCOL.md). */
static bool answer_well_formed(json_t *a) {
  json_t *ok = json_object_get(a, "ok");
  if (json_is_true(ok)) return json_object_get(a, "result") != NULL;
  return json_is_false(ok) && json_is_object(json_object_get(a, "error"));
}

/* Fault injection for the tests of exactly-once ops (tests/node/readopt.test.mjs): with
 * JB_TEST_FAULT=<file> in its environment, the worker _exits(86) at the point of a queued op
 * that changes files whose name <file> holds (before_shim_write, after_shim_write,
 * after_commit) — once: it removes <file> first. Unset (always, outside tests) it costs a
 * getenv. */
static void test_fault(struct jb_worker *w, const char *job, enum jb_tool tool, const char *point) {
  const char *f = getenv("JB_TEST_FAULT");
  if (!f || !f[0] || !jb_tool_changes_files(tool)) return;
  char want[40] = "";
  FILE *in = fopen(f, "re");
  if (!in) return;
  if (!fgets(want, sizeof want, in)) want[0] = '\0';
  fclose(in);
  want[strcspn(want, "\r\n")] = '\0';
  if (strcmp(want, point) || unlink(f) < 0) return;
  slog(w, JB_LOG_WARN, job, "test fault: the worker exits", "point", point, NULL);
  _exit(86);
}

/* Runs one claimed op in the session's shim, bound to its pre-images `pre` (NULL: none; its
 * `recalled` is set when the shim's recorded answer is used). The answer (new): {ok, result}
 * or {ok:false, error:{code, message}}. */
static json_t *op_run(struct jb_worker *w, const char *job, const struct jb_op_claim *op,
                      enum jb_tool tool, json_t *args, bool *violation,
                      struct jb_op_preimages *pre) {
  /* an edit runs as the write jailboxd made of it; read_many names its paths itself */
  json_t *req = json_pack("{s:s}", "op", tool == JB_TOOL_EDIT ? "write" : op->tool);
  if (tool != JB_TOOL_READ_MANY)
    json_object_set_new(req, "path", json_string(op->path[0] ? op->path : "."));
  static const char *const pass[] = {
      "offset",   "length",     "lineOffset",       "lineLimit",     "head",
      "tail",     "paths",      "recursive",        "depth",         "content",
      "encoding", "exclude",    "expectSha256",     "withContent",   "hash",
      "pattern",  "glob",       "maxMatches",       "destination",   "overwrite",
      "tree",     "expectTree", "expectDestSha256", "createParents", NULL};
  for (size_t i = 0; pass[i]; i++)
    if (json_object_get(args, pass[i]))
      json_object_set(req, pass[i], json_object_get(args, pass[i]));
  struct jb_session *s = session_lock(w, job);
  if (s && atomic_load(&s->teardown)) { /* ending: an escape caught, an abort, a teardown */
    session_unlock(s);
    json_decref(req);
    return json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "aborted", "message",
                     "the session is ending: the op was not run");
  }
  json_t *ans = NULL;
  jb_error err = {0};
  char changed[600] = "";
  bool changes = jb_tool_changes_files(tool);
  if (changes) json_object_set_new(req, "opId", json_integer(op->op_id));
  preimage_op_bind(pre, req);
  /* an op the shim ran already — the worker that ran it died before its commit — is
   * committed with the answer it had: not checked or run again */
  jb_error rerr = {0};
  json_t *recalled = changes && s && s->sb_ready ? recall(w, s, op->op_id, &rerr) : NULL;
  if (rerr.code == EPROTO || rerr.code == EMSGSIZE) {
    err = rerr; /* the shim broke the protocol: nothing more runs on its channel */
  } else if (recalled) {
    ans = recalled;
    if (pre) pre->recalled = true;
    slog(w, JB_LOG_INFO, job, "op ran before the worker restarted: its recorded answer is kept",
         "tool", op->tool, NULL);
  } else if (s && s->sb_ready && json_is_array(json_object_get(args, "expectCurrent")))
    ans = check_current(w, s, json_object_get(args, "expectCurrent"),
                        json_object_get(args, "exclude"), changed, sizeof changed, &err);
  if (changed[0]) {
    session_unlock(s);
    json_decref(req);
    json_decref(ans);
    return json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "changed", "message",
                     changed);
  }
  if (!recalled) {
    json_decref(ans);
    ans = NULL;
    if (s && s->sb_ready && !err.msg[0])
      ans = jb_shimconn_call(&s->sb.conn, req, w->walls.call_timeout_ms, &err);
    else if (!err.msg[0])
      jb_fail(&err, ESRCH, "the session's sandbox is not up");
  }
  if (ans && !answer_well_formed(ans)) {
    json_decref(ans);
    ans = NULL;
    jb_fail(&err, EPROTO, "the shim's answer is neither {ok: true, result} nor {ok: false, error}");
  }
  bool killed = s && atomic_load(&s->killing);
  /* a malformed or oversized line from the shim (EPROTO, EMSGSIZE), an answer of the wrong
   * shape (EPROTO): an escape signal */
  *violation = !ans && !killed && (err.code == EPROTO || err.code == EMSGSIZE);
  json_t *out;
  if (!ans && killed) {
    out = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "aborted", "message",
                    "the session was aborted while the op ran");
  } else if (!ans) {
    out =
        json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "internal", "message", err.msg);
  } else {
    out = json_is_true(json_object_get(ans, "ok"))
              ? json_pack("{s:b, s:O}", "ok", 1, "result", json_object_get(ans, "result"))
              : json_pack("{s:b, s:O}", "ok", 0, "error", json_object_get(ans, "error"));
  }
  /* what the answer tells of the agent, when the policy ends the session on it: the session is
   * marked ending before its lock is let go, so that no op of the session runs in the shim
   * after it — an op handed straight to the worker runs before it waits for anything in the
   * database (direct_run), so the mark made when this op commits (op_settle) would come after
   * the ops queued behind this one on the lock had run */
  struct op_signal probe = {-1, ""};
  int sig = op_signal_of(op, tool, out, *violation, &probe);
  if (s && sig >= 0 && w->policy.abort[sig]) atomic_store(&s->teardown, true);
  session_unlock(s);
  json_decref(req);
  if (!ans && !killed) slog(w, JB_LOG_WARN, job, "op failed in the relay", "error", err.msg, NULL);
  json_decref(ans);
  return out;
}

/* The result of answer `ans` as stored in the op's row (JSON text, new): with `strip_content`
 * a read's or stat's file content is left out (its answer is delivered directly, not read back
 * from the row). NULL when out of memory. */
static char *op_stored_text(json_t *ans, bool strip_content) {
  json_t *stored = ans;
  json_t *files = json_object_get(json_object_get(ans, "result"), "files");
  if (strip_content && json_is_array(files)) { /* read_many */
    stored = json_deep_copy(ans);
    size_t i;
    json_t *f;
    json_array_foreach (json_object_get(json_object_get(stored, "result"), "files"), i, f)
      json_object_del(json_object_get(f, "result"), "content");
    char *text = stored ? json_dumps(stored, JSON_COMPACT) : NULL;
    json_decref(stored);
    return text;
  }
  if (strip_content && json_is_true(json_object_get(ans, "ok")) &&
      json_object_get(json_object_get(ans, "result"), "content")) {
    stored = json_deep_copy(ans);
    json_object_del(json_object_get(stored, "result"), "content");
  }
  char *text = stored ? json_dumps(stored, JSON_COMPACT) : NULL;
  if (stored != ans) json_decref(stored);
  return text;
}

/* After the commit of claimed op `op`'s outcome failed (rolled back; `why` the error, `ans`
 * the answer it had from the shim): fails the op with the reason and a small audit entry of
 * what is known (that it ran, and how the shim answered), so that the agent is answered and
 * the op is not claimed and retried without end. The failure answer (new) when it was stored
 * (JB_OK in *rc, *head the new head); NULL with *rc JB_ERR_CONFLICT (it was not stored: a
 * direct op, whose row went with the rollback, or one stored after all) or JB_ERR_FAIL (then
 * it stays queued, and its claim is retried: the shim recalls its answer). */
static json_t *settle_unstored(struct jb_worker *w, PGconn *c, const char *job,
                               const struct jb_op_claim *op, json_t *ans, const char *why,
                               struct jb_audit_head *head, int *rc) {
  char reason[301], msg[500];
  size_t wl = strlen(why) < 300 ? strlen(why) : 300;
  while (wl > 0 && ((unsigned char)why[wl] & 0xC0) == 0x80) wl--; /* clipped on a character */
  snprintf(reason, sizeof reason, "%.*s", (int)wl, why);
  bool shim_ok = json_is_true(json_object_get(ans, "ok"));
  snprintf(msg, sizeof msg,
           "the %s ran in the sandbox (%s) but its outcome could not be stored: %s", op->tool,
           shim_ok ? "it succeeded there: its effect stays" : "it failed there", reason);
  json_t *out =
      json_pack("{s:b,s:{s:s,s:s}}", "ok", 0, "error", "code", "unstored", "message", msg);
  json_t *d = json_pack("{s:s,s:b,s:s,s:s,s:b,s:b}", "decision", op->decision, "ok", 0, "error",
                        "unstored", "reason", reason, "ran", 1, "sandboxOk", shim_ok);
  char *text = out ? json_dumps(out, JSON_COMPACT) : NULL;
  jb_error err = {0};
  if (PQstatus(c) != CONNECTION_OK) PQreset(c);
  *rc = text && d
            ? jb_db_op_fail_unstored(c, jb_signer_key(w->signer), job, op, text, d, head, &err)
            : JB_ERR_FAIL;
  if (*rc == JB_OK)
    slog(w, JB_LOG_ERROR, job, "op failed: its outcome could not be stored", "tool", op->tool,
         "error", reason, NULL);
  free(text);
  json_decref(d);
  if (*rc != JB_OK) {
    json_decref(out);
    out = NULL;
  }
  return out;
}

/* Completes claimed op `op` of `job` (its transaction open on `c`: jb_db_op_claim or
 * jb_db_op_direct_begin) with answer `ans` (taken) of its run in the shim: acts on what it
 * tells of the agent, stores its outcome and audit entry, commits. `args` is borrowed. With
 * `strip_content` see op_stored_text. *answer_out (when not NULL) receives the op's answer
 * {ok, result | error} (new) when it was committed. */
static int op_settle(struct jb_worker *w, PGconn *c, const char *job, struct jb_op_claim *op,
                     enum jb_tool tool, json_t *args, json_t *ans, bool violation,
                     bool strip_content, struct jb_op_preimages *pre, struct op_signal *sigout,
                     json_t **answer_out, jb_error *err) {
  int sig = op_signal_of(op, tool, ans, violation, sigout);
  /* a signal the policy aborts on ends the session: marked before this op commits, so that an
   * op of the session waiting for its row (ops handed straight to the worker run in many
   * threads) finds it ending and runs nothing, as on the one op thread */
  if (sig >= 0 && w->policy.abort[sig]) session_mark_ending(w, job, false, NULL);
  json_t *details = op_audit_details(op, tool, args, ans);
  bool ok = json_is_true(json_object_get(ans, "ok"));
  char *text = op_stored_text(ans, strip_content);
  struct jb_audit_head head;
  if (text && details && worker_test_fault(w, job, "op_entry_too_large")) { /* over the cap */
    char *fill = calloc(1, JB_AUDIT_MAX_CANONICAL + 1);
    if (fill)
      json_object_set_new(details, "testFill",
                          json_string(memset(fill, 'x', JB_AUDIT_MAX_CANONICAL)));
    free(fill);
  }
  /* the pre-image rows go in the op's own transaction, before its entry (which lists them) */
  int rc = text ? preimage_op_settle(w, c, op, ans, pre, details, err)
                : (jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL);
  if (rc == JB_OK)
    rc = jb_db_op_complete(c, jb_signer_key(w->signer), job, op, ok, text, details, &head, err);
  else
    jb_db_rollback(c);
  free(text);
  json_decref(details);
  if (rc == JB_ERR_FAIL) { /* stored as failed, with the reason, when the database answers */
    json_t *failed = settle_unstored(w, c, job, op, ans, err->msg, &head, &rc);
    if (failed) {
      json_decref(ans);
      ans = failed;
    }
    if (rc == JB_ERR_CONFLICT) rc = JB_ERR_FAIL; /* as the first failure was */
  }
  if (rc == JB_OK) worker_publish(w, c, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
  if (rc == JB_OK && answer_out) *answer_out = json_incref(ans);
  json_decref(ans);
  return rc;
}

/* Runs claimed op `op` of `job` (its transaction open on `c`) in the shim and completes it
 * (op_settle). */
static int op_finish(struct jb_worker *w, PGconn *c, const char *job, struct jb_op_claim *op,
                     enum jb_tool tool, bool strip_content, struct op_signal *sigout,
                     json_t **answer_out, jb_error *err) {
  json_t *args = json_loads(op->args_json, 0, NULL);
  bool violation = false;
  struct jb_op_preimages pre;
  preimage_op_take(w, c, job, op, tool, args, &pre); /* before the shim changes anything */
  test_fault(w, job, tool, "before_shim_write");
  json_t *ans =
      pre.refusal ? json_incref(pre.refusal) : op_run(w, job, op, tool, args, &violation, &pre);
  test_fault(w, job, tool, "after_shim_write");
  int rc = op_settle(w, c, job, op, tool, args, ans, violation, strip_content, &pre, sigout,
                     answer_out, err);
  preimage_op_free(&pre);
  json_decref(args);
  if (rc == JB_OK) test_fault(w, job, tool, "after_commit");
  return rc;
}

/* ---- queued ops ----------------------------------------------------------------------------- */

/* Claims the next queued op of `job` and runs it. JB_ERR_NOT_FOUND: none is waiting. */
static int run_next_queued(struct jb_worker *w, const char *job, struct op_signal *sig,
                           jb_error *err) {
  if (commands_session_busy(w, job)) return JB_ERR_NOT_FOUND; /* after its command */
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  if (!conn.pg) return JB_ERR_FAIL;
  struct jb_op_claim op;
  int rc = jb_db_op_claim(conn.pg, job, &op, err);
  if (rc != JB_OK) return rc;
  if (!strcmp(op.tool, "changeset")) { /* a command's effects the buyer approved */
    rc = changeset_apply_run(w, conn.pg, job, &op, err);
    jb_op_claim_free(&op);
    return rc;
  }
  enum jb_tool tool = jb_tool_from_name(op.tool); /* parsed once: the ops' names end here */
  if (tool == JB_TOOL_EXEC) { /* run apart: it holds no runner and no pooled connection */
    jb_db_rollback(conn.pg);
    jb_op_claim_free(&op);
    return commands_start(w, job, err) == 0 ? JB_ERR_NOT_FOUND : JB_ERR_FAIL;
  }
  rc = op_finish(w, conn.pg, job, &op, tool, false, sig, NULL, err);
  jb_op_claim_free(&op);
  return rc;
}

/* Runs up to `max` queued ops of `job`, oldest first, until none is waiting. */
static void run_session_queued(struct jb_worker *w, const char *job, int max) {
  /* a stopping worker claims nothing more: what is queued waits for the next one */
  for (int k = 0; k < max && !atomic_load(&w->stopping); k++) {
    struct op_signal sig = {-1, ""};
    jb_error err = {0};
    int rc = run_next_queued(w, job, &sig, &err);
    if (sig.signal >= 0) raise_signal(w, job, (enum jb_signal)sig.signal, sig.detail);
    if (rc == JB_ERR_NOT_FOUND) break;
    if (rc != JB_OK) {
      slog(w, JB_LOG_ERROR, job, err.msg, "step", "run op", NULL);
      break;
    }
  }
}

/* Makes the queued ops of the sessions whose sandbox is up due (only of `only` when not
 * NULL), at most `max` per session. */
static void run_queued_ops(struct jb_worker *w, const char *only, int max) {
  char(*jobs)[129] = w->queued_jobs;
  size_t n = 0;
  pthread_mutex_lock(&w->lock);
  for (size_t i = 0; i < w->n_sessions; i++) {
    struct jb_session *s = w->sessions[i];
    if (atomic_load(&s->sb_ready) && (!only || strcmp(only, s->job_id) == 0))
      snprintf(jobs[n++], sizeof jobs[0], "%s", s->job_id);
  }
  pthread_mutex_unlock(&w->lock);
  for (size_t i = 0; i < n; i++) due_add(w, jobs[i], max);
}

struct runner_arg {
  struct jb_worker *w;
  int index; /* in w->due.running */
};

/* A runner (arg: its struct runner_arg): the oldest due session that no runner has, its
 * queued ops run in order; until the worker stops. */
static void *queued_runner_main(void *arg) {
  struct runner_arg *ra = arg;
  struct jb_worker *w = ra->w;
  int me = ra->index;
  pthread_mutex_lock(&w->due.lock);
  while (!atomic_load(&w->stopping)) {
    if (w->due.n == 0) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      ts.tv_nsec += 250 * 1000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&w->due.cond, &w->due.lock, &ts);
      continue;
    }
    w->due.running[me] = w->due.ring[w->due.head];
    w->due.head = (w->due.head + 1) % JB_WORKER_SESSIONS_MAX;
    w->due.n--;
    w->due.again[me] = 0;
    for (;;) {
      struct jb_due job = w->due.running[me];
      pthread_mutex_unlock(&w->due.lock);
      run_session_queued(w, job.job, job.budget);
      pthread_mutex_lock(&w->due.lock);
      if (w->due.again[me] == 0 || atomic_load(&w->stopping)) break;
      w->due.running[me].budget = w->due.again[me]; /* asked for meanwhile: once more */
      w->due.again[me] = 0;
    }
    w->due.running[me].job[0] = '\0';
  }
  pthread_mutex_unlock(&w->due.lock);
  return NULL;
}

/* Woken by jb_op (migration 009: an op queued, or its session back to active; the payload
 * names the session; a pause stops a running exec's command and a resume continues it) and
 * jb_exec (migration 020: the buyer's kill of a running exec), and a sweep of every session once a second for anything missed: the
 * sessions with ops to run are handed to JB_QUEUED_RUNNERS runners. Returns when the worker
 * stops, its runners ended. */
#define REAP_INTERVAL_MS 5000 /* how often running exec ops are checked for being overdue */
void *relay_queued_main(void *arg) {
  struct jb_worker *w = arg;
  pthread_mutex_init(&w->due.lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w->due.cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_t runners[JB_QUEUED_RUNNERS];
  struct runner_arg ra[JB_QUEUED_RUNNERS];
  int started = 0;
  for (int i = 0; i < JB_QUEUED_RUNNERS; i++) {
    ra[started] = (struct runner_arg){.w = w, .index = started};
    if (pthread_create(&runners[started], NULL, queued_runner_main, &ra[started]) == 0) started++;
  }
  if (started == 0) slog(w, JB_LOG_ERROR, NULL, "no thread to run queued ops", NULL);
  PGconn *listen = NULL;
  long long last_sweep = 0, last_reap = 0;
  while (!atomic_load(&w->stopping)) {
    worker_listen(w, &listen, "LISTEN jb_op; LISTEN jb_exec");
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (now - last_sweep >= 1000) {
      run_queued_ops(w, NULL, 1000);
      last_sweep = now;
    }
    if (now - last_reap >= REAP_INTERVAL_MS) { /* running ops whose outcome was lost */
      exec_op_reap(w);
      last_reap = now;
    }
    struct pollfd pf = {.fd = listen ? PQsocket(listen) : -1, .events = POLLIN};
    if (poll(&pf, 1, 250) > 0 && listen) {
      PQconsumeInput(listen);
      PGnotify *nt;
      while ((nt = PQnotifies(listen))) {
        long long op_id;
        char st[20];
        const char *job;
        /* one notification per queued op: one claim each (no empty claim after it); a
         * session back to active may have many waiting */
        bool exec = !strcmp(nt->relname, "jb_exec");
        if (nt->extra && jb_op_notice_parse(nt->extra, &op_id, st, &job) == 0) {
          if (exec && op_id > 0 && (!strcmp(st, "kill") || !strcmp(st, "kill-service")))
            exec_op_signal(w, job, op_id, st); /* the buyer's or the operator's (db/ops.h) */
          else if (exec)
            ;
          else if (op_id != 0 && jb_op_state_from_name(st) == JB_OP_APPROVED)
            run_queued_ops(w, job, 1);
          else if (op_id == 0 && strcmp(st, "active") == 0) {
            exec_op_signal(w, job, 0, "cont"); /* resumed: a command stopped by the pause */
            exec_op_ahead(w, job, true); /* and the next command's jail is built ahead again */
            run_queued_ops(w, job, 1000);
          } else if (op_id == 0 && strcmp(st, "paused") == 0) {
            exec_op_signal(w, job, 0, "stop"); /* paused: the running command stops too */
            exec_op_ahead(w, job, false); /* and the jail built ahead is killed */
          }
        }
        PQfreemem(nt);
      }
    }
  }
  if (listen) PQfinish(listen);
  pthread_mutex_lock(&w->due.lock);
  pthread_cond_broadcast(&w->due.cond);
  pthread_mutex_unlock(&w->due.lock);
  for (int i = 0; i < started; i++) pthread_join(runners[i], NULL);
  commands_end(w);
  return NULL;
}

/* ---- direct ops (sandbox/proto/direct.h) ---------------------------------------------------- */

/* An op that changes nothing (read, read_many, list, find, search, stat) jailboxd handed
 * over: its request, and what running it gave. */
struct direct_op {
  const char *job, *tool, *path, *args_json, *expect_json;
  enum jb_tool kind; /* `tool`, parsed */
  json_t *args;
  long long op_id;
  char state[20]; /* the session's state when the locked way refused the op */
  json_t *answer; /* new, when it ran and was committed */
  struct op_signal sig; /* to raise once the connection is given back */
  long long announce; /* the head it committed without announcing it; 0: none */
};

/* The locked way: the session row locked and the op inserted first (jb_db_op_direct_begin),
 * then run, then completed. `ran` (taken; NULL: run it now) is an answer the op already got
 * from the shim, with `violation`. */
static int direct_locked(struct jb_worker *w, PGconn *c, struct direct_op *d, json_t *ran,
                         bool violation, jb_error *err) {
  int rc = jb_db_op_direct_begin(c, d->job, d->tool, d->path, d->args_json, d->expect_json,
                                 &d->op_id, d->state, err);
  if (rc != JB_OK) {
    json_decref(ran);
    return rc;
  }
  struct jb_op_claim op = {.op_id = d->op_id, .decision = "auto"};
  snprintf(op.tool, sizeof op.tool, "%s", d->tool);
  op.path = strdup(d->path);
  op.args_json = strdup(d->args_json);
  if (!op.path || !op.args_json) {
    jb_op_claim_free(&op);
    json_decref(ran);
    jb_db_rollback(c);
    return jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL;
  }
  if (ran)
    rc = op_settle(w, c, d->job, &op, d->kind, d->args, ran, violation, true, NULL, &d->sig,
                   &d->answer, err);
  else
    rc = op_finish(w, c, d->job, &op, d->kind, true, &d->sig, &d->answer, err);
  jb_op_claim_free(&op);
  return rc;
}

/* A direct op changes no file, so it may run before anything is stored: it runs first, on the
 * audit head this process knows, and its row, outcome and audit entry go in one round trip
 * after (jb_db_op_direct_store), which commits only if that head has not moved meanwhile —
 * else the op runs again the locked way. An op that tells something of the agent (an escape
 * or alert signal) is completed the locked way with the answer it got (its signal is not
 * raised twice, and a shim it killed is not asked again); its signal is raised even when the
 * locked way refuses it. One connection is held throughout. */
static int direct_run(struct jb_worker *w, struct direct_op *d, jb_error *err) {
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  PGconn *c = conn.pg;
  if (!c) return JB_ERR_FAIL;
  long long head;
  unsigned char prev[JB_AUDIT_HASH_LEN];
  if (!jb_audit_head_peek(d->job, &head, prev)) return direct_locked(w, c, d, NULL, false, err);
  struct jb_op_claim op = {.decision = "auto", .path = (char *)d->path};
  snprintf(op.tool, sizeof op.tool, "%s", d->tool);
  bool violation = false;
  json_t *ans = op_run(w, d->job, &op, d->kind, d->args, &violation, NULL);
  struct op_signal probe = {-1, ""};
  int sig = op_signal_of(&op, d->kind, ans, violation, &probe);
  if (sig >= 0) {
    /* Raised even when the locked way then refuses the op (the session paused or changed, an
     * op queued ahead: op_settle, which would raise it, is not reached) when running it again
     * the queued way would not tell it again: a shim that broke the protocol is not asked
     * again (its channel is dead), and a session the signal ends takes no op. A signal that
     * only alerts is told again by that run (raising it here too would count it twice). */
    if (violation || w->policy.abort[sig]) d->sig = probe;
    return direct_locked(w, c, d, ans, violation, err);
  }
  json_t *details = op_audit_details(&op, d->kind, d->args, ans);
  char *text = op_stored_text(ans, true);
  int rc = JB_ERR_FAIL;
  if (details && text) {
    struct jb_audit_head h;
    jb_error serr = {0};
    rc = jb_db_op_direct_store(c, jb_signer_key(w->signer), d->job, d->tool, d->path, d->args_json,
                               d->expect_json, json_is_true(json_object_get(ans, "ok")), text,
                               details, head, prev, &d->op_id, &h, &serr);
    if (rc == JB_OK) d->announce = h.seq;
    if (rc == JB_ERR_FAIL) *err = serr;
  } else {
    jb_fail(err, ENOMEM, "out of memory");
  }
  free(text);
  json_decref(details);
  if (rc == JB_OK) {
    d->answer = ans;
    return JB_OK;
  }
  json_decref(ans);
  return rc == JB_ERR_CONFLICT ? direct_locked(w, c, d, NULL, false, err) : rc;
}

json_t *relay_not_run(const char *state, const char *reason) {
  return json_pack("{s:b, s:s, s:s}", "ran", 0, "state", state, "reason", reason);
}

json_t *relay_direct(struct jb_worker *w, const json_t *req, long long *head) {
  const char *job = json_string_value(json_object_get(req, "jobId"));
  const char *tool = json_string_value(json_object_get(req, "tool"));
  const char *path = json_string_value(json_object_get(req, "path"));
  json_t *args = json_object_get(req, "args"), *expect = json_object_get(req, "expect");
  if (!job || !tool || !path || !json_is_object(args) ||
      (expect && !json_is_object(expect) && !json_is_null(expect)))
    return relay_not_run("", "want {jobId, tool, path, args, expect}");
  enum jb_tool kind = jb_tool_from_name(tool); /* parsed once: the protocol's names end here */
  bool direct = kind == JB_TOOL_READ || kind == JB_TOOL_READ_MANY || kind == JB_TOOL_LIST ||
                kind == JB_TOOL_FIND || kind == JB_TOOL_SEARCH || kind == JB_TOOL_STAT;
  if (!direct) return relay_not_run("", "only tools that change nothing are handed over directly");
  /* not s->lock: another op of the session may hold it for its whole call (op_run checks
   * again under it) */
  pthread_mutex_lock(&w->lock);
  struct jb_session *s = session_find(w, job);
  bool here = s && atomic_load(&s->sb_ready);
  pthread_mutex_unlock(&w->lock);
  if (!here) return relay_not_run("", "the session's sandbox is not on this worker");
  cleanup_free char *args_json = json_dumps(args, JSON_COMPACT);
  cleanup_free char *expect_json = json_is_object(expect) ? json_dumps(expect, JSON_COMPACT) : NULL;
  if (!args_json || (json_is_object(expect) && !expect_json))
    return relay_not_run("", "out of memory");
  struct direct_op d = {.job = job,
                        .tool = tool,
                        .kind = kind,
                        .path = path,
                        .args_json = args_json,
                        .expect_json = expect_json,
                        .args = args,
                        .sig = {-1, ""}};
  jb_error err = {0};
  int rc = direct_run(w, &d, &err);
  if (d.sig.signal >= 0) raise_signal(w, job, (enum jb_signal)d.sig.signal, d.sig.detail);
  if (rc == JB_OK) *head = d.announce;
  if (rc == JB_OK && d.answer)
    return json_pack("{s:b, s:I, s:o}", "ran", 1, "opId", (json_int_t)d.op_id, "answer", d.answer);
  json_decref(d.answer);
  if (rc == JB_ERR_CONFLICT && !strcmp(d.state, "queued"))
    return relay_not_run("active", "an op queued before it goes first: the queued path, behind it");
  if (rc == JB_ERR_CONFLICT)
    return relay_not_run(d.state, d.state[0] ? "the session is not active" : "the session changed");
  if (rc == JB_ERR_NOT_FOUND) return relay_not_run("", "no such session");
  if (rc != JB_OK) slog(w, JB_LOG_WARN, job, "direct op not run", "error", err.msg, NULL);
  return relay_not_run("", "the worker could not run the op");
}
