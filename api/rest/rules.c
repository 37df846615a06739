/* rules.c — the REST half of a session's approval rules (api/agent/policy.h):
 * GET, POST /v1/jailbox/:jobId/rules and DELETE /v1/jailbox/:jobId/rules/:ruleId, for the
 * session's buyer and for a service token. */
#include <stdlib.h>
#include <string.h>

#include "api/agent/policy.h"
#include "api/auth.h"
#include "api/controls.h"
#include "api/rest/handlers.h"
#include "db/db.h"
#include "db/sessions.h"
#include "lib/json.h"

#define RULES_BODY_MAX (512 * 1024) /* bytes of a POST …/rules body: 256 rules of 2 KiB */

/* The policy reply as the HTTP answer. */
static void answer(struct jb_http_resp *resp, struct jb_policy_reply *r) {
  if (r->body)
    jb_resp_json(resp, r->status, r->body); /* takes the body */
  else
    jb_resp_error(resp, r->status, r->code ? r->code : "internal", "%s", r->msg);
  r->body = NULL;
}

void jb_api_rules_list(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  const char *all = jb_http_query(req, "all");
  if (all && strcmp(all, "true") && strcmp(all, "false")) {
    jb_resp_error(resp, 400, "bad_request", "query 'all' must be true or false");
    return;
  }
  PGconn *c = jb_rest_session_conn(app, req, resp);
  if (!c) return;
  struct jb_policy_reply r;
  jb_policy_list(app, c, req->params[0], all && !strcmp(all, "true"), &r);
  jb_db_release(app->db, c);
  answer(resp, &r);
}

/* A rules control (add, revoke): the session's buyer or a service token, the session live
 * (api/auth.h JB_AUTH_CONTROL), the arguments as the socket form (api/controls.h). Returns
 * the connection with *doc and `a`, or NULL with `resp` answered. */
static PGconn *control_conn(struct jb_app *app, const struct jb_http_req *req, enum jb_control ctl,
                            const char *path_value, json_t **doc, struct jb_control_args *a,
                            struct jb_http_resp *resp) {
  jb_error err = {0};
  *doc = NULL;
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    jb_db_unavailable(resp, &err);
    return NULL;
  }
  struct jb_principal who;
  char msg[512];
  if (jb_auth_require(app, c, req, req->params[0],
                      JB_ROLE_SERVICE | JB_ROLE_BUYER | JB_AUTH_CONTROL, &who, resp) < 0)
    goto fail;
  *doc = jb_control_rest_form(ctl, req->body, req->body_len, path_value, msg, sizeof msg);
  if (!*doc || jb_control_check(ctl, *doc, a, msg, sizeof msg) < 0) {
    jb_resp_error(resp, 400, "bad_request", "%s", msg);
    goto fail;
  }
  return c;
fail:
  json_decref(*doc);
  *doc = NULL;
  jb_db_release(app->db, c);
  return NULL;
}

void jb_api_rules_add(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  if (req->body_len > RULES_BODY_MAX) {
    jb_resp_error(resp, 413, "too_large", "a rules body is at most %d bytes", RULES_BODY_MAX);
    return;
  }
  json_t *doc;
  struct jb_control_args a;
  PGconn *c = control_conn(app, req, JB_CONTROL_RULE_ADD, NULL, &doc, &a, resp);
  if (!c) return;
  struct jb_policy_reply r;
  jb_policy_add(app, c, req->params[0], a.rules, &r);
  jb_db_release(app->db, c);
  answer(resp, &r);
  json_decref(doc);
}

void jb_api_rule_revoke(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  json_t *doc;
  struct jb_control_args a;
  PGconn *c = control_conn(app, req, JB_CONTROL_RULE_REVOKE, req->params[1], &doc, &a, resp);
  if (!c) return;
  struct jb_policy_reply r;
  jb_policy_revoke(app, c, req->params[0], a.rule_id, &r);
  jb_db_release(app->db, c);
  answer(resp, &r);
  json_decref(doc);
}
