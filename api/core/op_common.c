/* op_common.c — what every stage of the op path (api/core/op_call.h) and the direct planner
 * share, below all of them: the MCP errors of a refusal, a rejection, an unavailable database
 * and the shim's own errors; which tools change the workspace; an audit entry of an op
 * refused in jailboxd and a path too long for one notification. It calls no other file of
 * api/core/. */
#define _GNU_SOURCE
#include "api/core/op_call.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/audit_store.h"
#include "db/events.h"
#include "lib/log.h"
#include "server/app.h"
#include "server/workers.h"

bool jb_tool_mutates(enum jb_tool tool) {
  return tool == JB_TOOL_WRITE || tool == JB_TOOL_EDIT || tool == JB_TOOL_MKDIR ||
         tool == JB_TOOL_MOVE || tool == JB_TOOL_DELETE || tool == JB_TOOL_EXEC;
}

void op_error(struct jb_mcp_error *e, int code, const char *reason, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  e->code = code;
  e->data = json_pack("{s:s}", "reason", reason);
}

void op_error_rejected(struct jb_mcp_error *e, const char *reason, const char *sess_state) {
  /* the end of a session rejects its pending ops with the reason "session <state>"
   * (db/sessions.c, jb_db_session_end_ops): no buyer decided anything */
  if (reason && sess_state && !jb_state_is_live(sess_state) && !strncmp(reason, "session ", 8) &&
      !strcmp(reason + 8, sess_state)) {
    char why[40];
    snprintf(why, sizeof why, "session_%s", sess_state);
    op_error(e, JB_MCP_DENIED, why,
             "the session %s before the op was decided (not a decision of the buyer): nothing "
             "was run",
             sess_state);
    return;
  }
  op_error(e, JB_MCP_REJECTED, "rejected", "rejected by the buyer%s%s", reason ? ": " : "",
           reason ? reason : "");
}

void op_error_unavailable(struct jb_mcp_error *e, const jb_error *err) {
  char why[640];
  if (jb_signer_retired(why, sizeof why)) { /* every append is refused: say so, not "database" */
    jb_log(JB_LOG_ERROR, "op path: signing key retired", "detail", err->msg, NULL);
    op_error(e, JB_MCP_UNAVAILABLE, "key_retired", "%s", why);
    return;
  }
  jb_log(JB_LOG_ERROR, "op path: database error", "detail", err->msg, NULL);
  op_error(e, JB_MCP_UNAVAILABLE, "unavailable", "the service is unavailable; try again");
}

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
      /* the op's pre-images would pass the session's budget (JAILBOX_PREIMAGE_MAX_BYTES) */
      {"preimage_budget", JB_MCP_TOO_LARGE, "preimage_budget"},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(code, map[i].code)) {
      op_error(e, map[i].rpc, map[i].reason, "%s", msg);
      return;
    }
  op_error(e, JB_MCP_UNAVAILABLE, "unavailable", "%s", msg);
}

void op_audit_refusal(struct op_call *call, const char *path, json_t *details /* stolen */) {
  struct jb_audit_head h;
  jb_error err = {0};
  json_object_set_new(details, "ok", json_false());
  if (jb_audit_append(call->c, jb_signer_key(call->app->signer), call->job,
                      jb_tool_name(call->tool), path, details, &h, &err) == JB_OK) {
    jb_bus_publish(call->app->bus, call->job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&h));
  } else {
    jb_log(JB_LOG_ERROR, "op path: audit append failed", "jobId", call->job, "detail", err.msg,
           NULL);
  }
  json_decref(details);
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

/* The SHA-256 of `len` bytes at `p` in hex into `hex` (65 bytes). */
void op_sha256_hex(const void *p, size_t len, char hex[65]) {
  unsigned char h[32];
  crypto_hash_sha256(h, p, len);
  sodium_bin2hex(hex, 65, h, sizeof h);
}

/* The length, at most `cut`, of a prefix of the `n` bytes of UTF-8 text at `p` that ends before
 * a character's start (the prefix stays UTF-8). */
size_t op_utf8_prefix(const char *p, size_t n, size_t cut) {
  if (cut >= n) return n;
  while (cut > 0 && ((unsigned char)p[cut] & 0xC0) == 0x80) cut--;
  return cut;
}

const char *op_worker_socket(struct jb_app *app, const struct jb_session_facts *sess) {
  return jb_workers_ops_socket(__atomic_load_n(&app->workers, __ATOMIC_ACQUIRE), sess->worker);
}

bool op_insert_refused(struct op_call *call, int rc, const jb_error *err) {
  if (rc == JB_ERR_CONFLICT || rc == JB_ERR_NOT_FOUND) {
    op_error(call->e, JB_MCP_DENIED, "denied", "the session is %s: no file operations now",
             call->st[0] ? call->st : "gone");
    return true;
  }
  if (rc != JB_OK) {
    op_error_unavailable(call->e, err);
    return true;
  }
  return false;
}
