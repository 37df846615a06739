/* op_checks.c — what jailboxd decides on an agent's tool call before anything runs (stages in
 * api/agent/op_call.h): the call's arguments (decode); its refusal for the session's state,
 * the path's syntax, exclusions and pre-scan flags, each refusal an audit entry and a path
 * that tries to leave the workspace an escape signal (refuse if); the shim's arguments and a
 * write's content, decoded, hashed and scanned (prepare). */
#define _GNU_SOURCE
#include "api/agent/op_call.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/agent/escape.h"
#include "api/agent/scan.h"
#include "db/audit_store.h"
#include "db/events.h"
#include "lib/log.h"
#include "server/app.h"

/* ---- decode ---- */

enum op_args op_check_args(enum jb_tool tool, json_t *args, const char **path, size_t *plen,
                           const char **bad_key) {
  json_t *jp = json_object_get(args, "path");
  if (jp && !json_is_string(jp)) return OP_ARGS_PATH_TYPE;
  if (!jp && tool != JB_TOOL_LIST) return OP_ARGS_PATH_MISSING;
  *path = jp ? json_string_value(jp) : ".";
  *plen = jp ? json_string_length(jp) : 1;
  static const char *const allowed_read[] = {"path", "offset", "length", NULL};
  static const char *const allowed_write[] = {"path", "content", "encoding", NULL};
  static const char *const allowed_list[] = {"path", "recursive", NULL};
  const char *const *allowed = tool == JB_TOOL_WRITE  ? allowed_write
                               : tool == JB_TOOL_LIST ? allowed_list
                                                      : allowed_read;
  const char *key;
  json_t *v;
  json_object_foreach (args, key, v) {
    bool ok = false;
    for (size_t i = 0; allowed[i]; i++) ok = ok || !strcmp(key, allowed[i]);
    if (!ok) {
      *bad_key = key;
      return OP_ARGS_UNKNOWN;
    }
  }
  return OP_ARGS_OK;
}

enum op_step op_decode(struct op_call *call) {
  const char *key = NULL;
  switch (op_check_args(call->tool, call->args, &call->path, &call->plen, &key)) {
    case OP_ARGS_OK:
      return OP_NEXT;
    case OP_ARGS_PATH_TYPE:
      op_error(call->e, JB_MCP_INVALID, "invalid", "'path' must be a string");
      return OP_END;
    case OP_ARGS_PATH_MISSING:
      op_error(call->e, JB_MCP_INVALID, "invalid", "'path' is required");
      return OP_END;
    case OP_ARGS_UNKNOWN:
      op_error(call->e, JB_MCP_INVALID, "invalid", "unknown argument '%.64s' for %s", key,
               jb_tool_name(call->tool));
      return OP_END;
  }
  return OP_END;
}

/* ---- refuse if ---- */

const char *op_flagged_kind(const char *path, const json_t *flagged) {
  size_t i;
  json_t *f;
  json_array_foreach (flagged, i, f) {
    const char *fp = json_string_value(json_object_get(f, "path"));
    const char *kind = json_string_value(json_object_get(f, "kind"));
    if (!fp || !kind || !strcmp(kind, "too_large")) continue;
    size_t n = strlen(fp);
    if (n && !strncmp(path, fp, n) && (path[n] == '\0' || path[n] == '/')) return kind;
  }
  return NULL;
}

bool op_path_passes(const char *path, size_t plen, enum jb_tool tool, const json_t *exclude,
                    const json_t *flagged, struct op_path_verdict *v) {
  *v = (struct op_path_verdict){.syntax = jb_path_check(path, plen, tool == JB_TOOL_LIST)};
  if (v->syntax != JB_PATH_OK) return false;
  if (!strcmp(path, ".")) return true;
  v->excluded = jb_path_excluded(path, exclude, &v->glob);
  if (v->excluded) return false;
  v->flagged_kind = op_flagged_kind(path, flagged);
  return v->flagged_kind == NULL;
}

/* An audit entry for an op refused in jailboxd, and its audit_head event. */
static void audit_refusal(struct op_call *call, const char *path, json_t *details /* stolen */) {
  struct jb_audit_head h;
  jb_error err = {0};
  json_object_set_new(details, "ok", json_false());
  if (jb_audit_append(call->c, call->app->keys, call->job, jb_tool_name(call->tool), path, details,
                      &h, &err) == JB_OK) {
    jb_bus_publish(call->app->bus, call->job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&h));
  } else {
    jb_log(JB_LOG_ERROR, "op path: audit append failed", "jobId", call->job, "detail", err.msg,
           NULL);
  }
  json_decref(details);
}

/* A path that breaks the syntax rules: refused and audited (without the path); one that
 * tries to leave the workspace is an escape signal. */
static enum op_step refuse_syntax(struct op_call *call, enum jb_path_verdict pv) {
  audit_refusal(call, NULL,
                json_pack("{s:s,s:s}", "error", "denied", "detail", jb_path_verdict_text(pv)));
  op_error(call->e, JB_MCP_DENIED, "denied", "%s", jb_path_verdict_text(pv));
  if (pv == JB_PATH_ABSOLUTE || pv == JB_PATH_DOTDOT) {
    char detail[400];
    snprintf(detail, sizeof detail, "%s: %.300s", jb_path_verdict_text(pv), call->path);
    jb_escape_signal(call->app, call->job,
                     pv == JB_PATH_ABSOLUTE ? JB_SIG_ABSOLUTE_PATH : JB_SIG_PATH_TRAVERSAL, detail);
  }
  return OP_END;
}

/* An excluded path: refused, audited, an escape signal. */
static enum op_step refuse_excluded(struct op_call *call, const char *glob) {
  const char *tool = jb_tool_name(call->tool), *path = call->path;
  audit_refusal(call, path, json_pack("{s:s,s:s}", "error", "excluded", "glob", glob));
  op_error(call->e, JB_MCP_EXCLUDED, "excluded", "%s is excluded from this session", path);
  char detail[400];
  snprintf(detail, sizeof detail, "%s %.300s (excluded by %.60s)", tool, path, glob ? glob : "?");
  jb_escape_signal(call->app, call->job, JB_SIG_EXCLUDED_PATH, detail);
  return OP_END;
}

/* A path the pre-scan flagged: refused, audited; through or onto a symlink leaving the
 * workspace, or a hard link, an escape signal of that kind. */
static enum op_step refuse_flagged(struct op_call *call, const char *kind) {
  const char *tool = jb_tool_name(call->tool), *path = call->path;
  audit_refusal(call, path, json_pack("{s:s,s:s}", "error", "flagged", "kind", kind));
  op_error(call->e, JB_MCP_FLAGGED, "flagged", "%s was flagged by the pre-scan (%s)", path, kind);
  char detail[400];
  snprintf(detail, sizeof detail, "%s %.300s (flagged by the pre-scan: %.40s)", tool, path, kind);
  jb_escape_signal(call->app, call->job,
                   !strcmp(kind, "symlink_outside") ? JB_SIG_SYMLINK_ESCAPE
                   : !strcmp(kind, "hardlink")      ? JB_SIG_HARD_LINK
                                                    : JB_SIG_DENIED_PATH,
                   detail);
  return OP_END;
}

enum op_step op_refuse_if(struct op_call *call) {
  if (call->sess.state != JB_SESSION_ACTIVE && call->sess.state != JB_SESSION_PAUSED) {
    op_error(call->e, JB_MCP_DENIED, "denied", "the session is %s: no file operations now",
             jb_session_state_name(call->sess.state) ?: "unknown");
    return OP_END;
  }
  struct op_path_verdict v;
  if (op_path_passes(call->path, call->plen, call->tool, call->sess.exclude, call->sess.flagged,
                     &v))
    return OP_NEXT;
  if (v.syntax != JB_PATH_OK) return refuse_syntax(call, v.syntax);
  if (v.excluded) return refuse_excluded(call, v.glob);
  return refuse_flagged(call, v.flagged_kind);
}

/* ---- prepare ---- */

json_t *op_shim_args(json_t *args, json_t *exclude) {
  json_t *sargs = json_deep_copy(args);
  json_object_del(sargs, "path");
  if (json_array_size(exclude) > 0) json_object_set(sargs, "exclude", exclude);
  return sargs;
}

void op_fit_path(const char *job, enum jb_event_kind kind, json_t *ev) {
  const char *path = json_string_value(json_object_get(ev, "path"));
  size_t size = jb_db_event_size(job, kind, ev);
  if (!path || !size || size <= JB_EVENT_MAX_BYTES) return;
  unsigned char h[32];
  char note[80] = "sha256:";
  crypto_hash_sha256(h, (const unsigned char *)path, strlen(path));
  sodium_bin2hex(note + 7, sizeof note - 7, h, sizeof h);
  json_object_set_new(ev, "path", json_string(note));
}

/* A write's content into call->data (utf-8 text or base64, at most OP_FILE_MAX bytes once
 * decoded; over it an audited refusal) and its SHA-256 into call->sha_hex. */
static enum op_step decode_content(struct op_call *call) {
  json_t *jc = json_object_get(call->args, "content");
  const char *enc = json_string_value(json_object_get(call->args, "encoding")) ?: "utf-8";
  if (!json_is_string(jc) || (strcmp(enc, "utf-8") && strcmp(enc, "base64"))) {
    op_error(call->e, JB_MCP_INVALID, "invalid",
             "'content' must be a string, 'encoding' utf-8 or base64");
    return OP_END;
  }
  size_t tlen = json_string_length(jc);
  if (tlen > (size_t)OP_FILE_MAX * 2) {
    op_error(call->e, JB_MCP_TOO_LARGE, "too_large", "content over %d bytes", OP_FILE_MAX);
    return OP_END;
  }
  if (!strcmp(enc, "base64")) {
    call->data = malloc(tlen / 4 * 3 + 4);
    if (!call->data ||
        sodium_base642bin(call->data, tlen / 4 * 3 + 4, json_string_value(jc), tlen, NULL,
                          &call->dlen, NULL, sodium_base64_VARIANT_ORIGINAL) != 0) {
      op_error(call->e, JB_MCP_INVALID, "invalid", "'content' is not valid base64");
      return OP_END;
    }
  } else {
    call->dlen = tlen;
    call->data = malloc(tlen ? tlen : 1);
    if (call->data) memcpy(call->data, json_string_value(jc), tlen);
  }
  if (!call->data) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
    return OP_END;
  }
  if (call->dlen > OP_FILE_MAX) {
    audit_refusal(call, call->path,
                  json_pack("{s:s,s:I}", "error", "too_large", "size", (json_int_t)call->dlen));
    op_error(call->e, JB_MCP_TOO_LARGE, "too_large", "content of %zu bytes is over %d", call->dlen,
             OP_FILE_MAX);
    return OP_END;
  }
  unsigned char h[32];
  crypto_hash_sha256(h, call->data, call->dlen);
  sodium_bin2hex(call->sha_hex, sizeof call->sha_hex, h, sizeof h);
  return OP_NEXT;
}

/* A write the scanner flagged (rule ids `hits`, `findings`; both stolen; NULL findings: the
 * scanner could not run): refused, audited, and a security alert for the buyer. */
static enum op_step refuse_scanned(struct op_call *call, json_t *hits, json_t *findings) {
  const char *job = call->job, *path = call->path;
  if (!hits) {
    json_decref(findings);
    hits = json_pack("[s]", "scanner_unavailable");
    findings = json_pack("[{s:s,s:s,s:s}]", "rule", "scanner_unavailable", "severity", "critical",
                         "error", "out of memory");
  }
  audit_refusal(call, path,
                json_pack("{s:s,s:I,s:s,s:s,s:O,s:O?}", "error", "flagged", "size",
                          (json_int_t)call->dlen, "sha256", call->sha_hex, "decision", "flagged",
                          "rules", hits, "findings", findings));
  json_t *ev = json_pack("{s:s,s:s,s:s,s:I,s:s,s:O,s:O?}", "jobId", job, "kind", "flagged_write",
                         "path", path, "size", (json_int_t)call->dlen, "sha256", call->sha_hex,
                         "rules", hits, "findings", findings);
  json_decref(findings);
  op_fit_path(job, JB_EVENT_SECURITY_ALERT, ev);
  jb_bus_publish(call->app->bus, job, JB_EVENT_SECURITY_ALERT, ev);
  char rl[200] = "";
  size_t i;
  json_t *r;
  json_array_foreach (hits, i, r) {
    if (i) strncat(rl, ", ", sizeof rl - strlen(rl) - 1);
    strncat(rl, json_string_value(r), sizeof rl - strlen(rl) - 1);
  }
  json_decref(hits);
  op_error(call->e, JB_MCP_FLAGGED, "flagged", "the content scanner flagged this write (%s)", rl);
  return OP_END;
}

/* The content scanner (api/agent/scan.h) on a write's content: a clean write's shim
 * arguments get its size and SHA-256. */
static enum op_step scan_content(struct op_call *call) {
  json_t *findings = jb_scan_content(call->path, call->data, call->dlen);
  json_t *hits = findings ? jb_scan_rule_ids(findings) : NULL;
  if (!hits || json_array_size(hits) > 0) return refuse_scanned(call, hits, findings);
  json_decref(hits);
  json_decref(findings);
  json_object_set_new(call->sargs, "size", json_integer((json_int_t)call->dlen));
  json_object_set_new(call->sargs, "sha256", json_string(call->sha_hex));
  return OP_NEXT;
}

enum op_step op_prepare(struct op_call *call) {
  call->sargs = op_shim_args(call->args, call->sess.exclude);
  if (call->tool != JB_TOOL_WRITE) return OP_NEXT;
  enum op_step s = decode_content(call);
  if (s == OP_NEXT) s = scan_content(call);
  return s;
}
