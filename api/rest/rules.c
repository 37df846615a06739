/* rules.c — GET /v1/jailbox/:jobId/rules: a session's approval rules (api/core/policy.h), for
 * the session's buyer and for a service token (adding and revoking are controls:
 * api/rest/controls.c). */
#include <stdlib.h>
#include <string.h>

#include "api/core/policy.h"
#include "api/core/auth.h"
#include "api/rest/handlers.h"
#include "db/db.h"

void jb_api_rules_list(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  const char *all = jb_http_query(req, "all");
  if (all && strcmp(all, "true") && strcmp(all, "false")) {
    jb_resp_error(resp, 400, "bad_request", "query 'all' must be true or false");
    return;
  }
  PGconn *c = jb_rest_session_conn(app, req, resp);
  if (!c) return;
  struct jb_reply r;
  jb_policy_list(app, c, req->params[0], all && !strcmp(all, "true"), &r);
  jb_db_release(app->db, c);
  jb_resp_reply(resp, &r);
}
