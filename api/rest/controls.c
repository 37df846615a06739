/* controls.c — the REST door of the controls (api/core/controls.h; the buyer's, and the
 * operator's with the service token where jb_control_roles allows): each route parses its
 * request into the control's socket form, jb_control_run decides, and the reply is rendered
 * (api/http/door.h). Routes: POST …/pause, …/resume, …/abort, …/accept,
 * …/effects/clear, …/rollback, PATCH /v1/jailbox/:jobId {mode}, POST …/approve/:opId,
 * …/reject/:opId, …/ops/:opId/kill, POST …/rules and DELETE …/rules/:ruleId. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "api/core/controls.h"
#include "api/rest/handlers.h"

#define RULES_BODY_MAX (512 * 1024) /* bytes of a POST …/rules body: 256 rules of 2 KiB */

long long jb_rest_path_op(const char *job, const char *ops, struct jb_http_resp *resp) {
  char *end;
  errno = 0;
  long long op = strtoll(ops, &end, 10);
  if (*end || errno || op <= 0 || !isdigit((unsigned char)ops[0])) {
    jb_resp_error(resp, 404, "not_found", "no op '%s' in session '%s'", ops, job);
    return -1;
  }
  return op;
}

/* Control `ctl` of session req->params[0] for a caller of the control's roles
 * (jb_control_roles; the session live: JB_AUTH_CONTROL, unless jb_control_on_ended); `path_field` (the op's or rule's id)
 * is req->params[1] when set. */
static void control(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp,
                    enum jb_control ctl) {
  struct jb_app *app = appv;
  const char *job = req->params[0];
  const char *path_value = jb_control_path_field(ctl) ? req->params[1] : NULL;
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    jb_db_unavailable(resp, &err);
    return;
  }
  struct jb_principal who;
  json_t *doc = NULL;
  char msg[512];
  unsigned roles = jb_control_roles(ctl) | (jb_control_on_ended(ctl) ? 0 : JB_AUTH_CONTROL);
  if (jb_auth_require(app, c, req, job, roles, &who, resp) == 0 &&
      (ctl == JB_CONTROL_RULE_REVOKE || !path_value ||
       jb_rest_path_op(job, path_value, resp) > 0)) {
    doc = jb_control_rest_form(ctl, req->body, req->body_len, path_value, msg, sizeof msg);
    if (doc) {
      struct jb_reply r;
      jb_control_run(app, c, &who, job, ctl, doc, &r);
      jb_resp_reply(resp, &r);
    } else {
      jb_resp_error(resp, 400, "bad_request", "%s", msg);
    }
  }
  jb_db_release(app->db, c);
  json_decref(doc);
}

void jb_api_session_pause(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  control(app, req, resp, JB_CONTROL_PAUSE);
}
void jb_api_session_resume(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  control(app, req, resp, JB_CONTROL_RESUME);
}
void jb_api_session_abort(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  control(app, req, resp, JB_CONTROL_ABORT);
}
void jb_api_session_accept(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  control(app, req, resp, JB_CONTROL_ACCEPT);
}
void jb_api_session_effects_clear(void *app, const struct jb_http_req *req,
                                  struct jb_http_resp *resp) {
  control(app, req, resp, JB_CONTROL_EFFECTS_CLEAR);
}
void jb_api_session_rollback(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  control(app, req, resp, JB_CONTROL_ROLLBACK);
}
void jb_api_session_patch(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  control(app, req, resp, JB_CONTROL_MODE);
}
void jb_api_op_approve(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  control(app, req, resp, JB_CONTROL_APPROVE);
}
void jb_api_op_reject(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  control(app, req, resp, JB_CONTROL_REJECT);
}
void jb_api_op_kill(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  control(app, req, resp, JB_CONTROL_KILL);
}
void jb_api_rules_add(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  if (req->body_len > RULES_BODY_MAX) {
    jb_resp_error(resp, 413, "too_large", "a rules body is at most %d bytes", RULES_BODY_MAX);
    return;
  }
  control(app, req, resp, JB_CONTROL_RULE_ADD);
}
void jb_api_rule_revoke(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  control(app, req, resp, JB_CONTROL_RULE_REVOKE);
}
