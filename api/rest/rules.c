/* rules.c — the REST half of a session's approval rules (api/agent/policy.h):
 * GET, POST /v1/jailbox/:jobId/rules and DELETE /v1/jailbox/:jobId/rules/:ruleId, for the
 * session's buyer and for a service token. */
#include <stdlib.h>
#include <string.h>

#include "api/agent/policy.h"
#include "api/auth.h"
#include "api/rest/handlers.h"
#include "db/db.h"
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

void jb_api_rules_add(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  if (req->body_len > RULES_BODY_MAX) {
    jb_resp_error(resp, 413, "too_large", "a rules body is at most %d bytes", RULES_BODY_MAX);
    return;
  }
  jb_error err = {0};
  json_t *body = jb_json_parse_object(req->body, req->body_len, JB_JSON_MAX_DEPTH, &err);
  static const char *const allowed[] = {"rules", "rule", NULL};
  if (!body || jb_json_only_keys(body, allowed, &err) < 0) {
    jb_resp_error(resp, 400, "bad_request", "%s",
                  body ? err.msg : "the body must be {rules: [...]}");
    json_decref(body);
    return;
  }
  json_t *in = json_object_get(body, "rules");
  if (!in) in = json_object_get(body, "rule");
  if (!in || (!json_is_array(in) && !json_is_object(in))) {
    jb_resp_error(resp, 400, "bad_request", "give 'rules' (an array of rules) or 'rule'");
    json_decref(body);
    return;
  }
  PGconn *c = jb_rest_session_conn(app, req, resp);
  if (c) {
    struct jb_policy_reply r;
    jb_policy_add(app, c, req->params[0], in, &r);
    jb_db_release(app->db, c);
    answer(resp, &r);
  }
  json_decref(body);
}

void jb_api_rule_revoke(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  PGconn *c = jb_rest_session_conn(app, req, resp);
  if (!c) return;
  struct jb_policy_reply r;
  jb_policy_revoke(app, c, req->params[0], req->params[1], &r);
  jb_db_release(app->db, c);
  answer(resp, &r);
}
