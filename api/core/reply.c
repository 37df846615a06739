/* reply.c — the core's answer type and the one database-result mapping (see reply.h). */
#include "api/core/reply.h"

#include <stdarg.h>
#include <stdio.h>

#include "db/db.h"
#include "db/signer.h"
#include "lib/log.h"

int jb_reply_ok(struct jb_reply *r, int status, json_t *body) {
  if (!body) return jb_reply_fail(r, 500, "internal", "out of memory");
  json_decref(r->body);
  r->status = status;
  r->body = body;
  return 0;
}

int jb_reply_fail(struct jb_reply *r, int status, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->msg, sizeof r->msg, fmt, ap);
  va_end(ap);
  r->status = status;
  r->code = code;
  r->state[0] = '\0';
  return -1;
}

int jb_reply_invalid_state(struct jb_reply *r, const char *what, const char *state) {
  jb_reply_fail(r, 409, "invalid_state", "%s in state %s", what, state);
  snprintf(r->state, sizeof r->state, "%s", state);
  return -1;
}

int jb_reply_db(struct jb_reply *r, int rc, const jb_error *err, const char *not_found,
                const char *conflict, const char *state) {
  switch (rc) {
    case JB_OK:
      return 0;
    case JB_ERR_NOT_FOUND:
      return jb_reply_fail(r, 404, "not_found", "%s", not_found);
    case JB_ERR_CONFLICT:
      if (state) return jb_reply_invalid_state(r, conflict, state);
      return jb_reply_fail(r, 409, "conflict", "%s", conflict);
    case JB_ERR_EXISTS:
      return jb_reply_fail(r, 409, "exists", "%s", conflict);
    default:
      break;
  }
  char why[sizeof r->msg];
  if (jb_signer_retired(why, sizeof why)) {
    jb_log(JB_LOG_ERROR, "signing key retired", "detail", err ? err->msg : "", NULL);
    return jb_reply_fail(r, 503, "key_retired", "%s", why);
  }
  jb_log(JB_LOG_ERROR, "database error", "detail", err ? err->msg : "", NULL);
  return jb_reply_fail(r, 503, "database_unavailable", "the database is unavailable; try again");
}

void jb_reply_release(struct jb_reply *r) {
  json_decref(r->body);
  json_decref(r->extra);
  r->body = r->extra = NULL;
}
