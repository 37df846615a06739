/* changes.c — GET /v1/jailbox/:jobId/changes (what the session changed in the workspace, and
 * whether a rollback would be taken: api/core/rollback.h), GET …/rollbacks/:rollbackId (a
 * rollback's state), GET …/ops/:opId/changeset (a changeset's files: api/core/changeset.h)
 * and GET /v1/jailbox/:jobId/alerts (its security alerts): read-only views of a session for
 * its service or buyer token. */
#include <stdlib.h>

#include "api/core/auth.h"
#include "api/core/changeset.h"
#include "api/core/rollback.h"
#include "api/rest/handlers.h"
#include "db/escape.h"

static void read_route(struct jb_app *app, const struct jb_http_req *req, struct jb_http_resp *resp,
                       int (*fn)(PGconn *, const char *, char **, jb_error *)) {
  const char *job = req->params[0];
  PGconn *c = jb_rest_session_conn(app, req, resp);
  if (!c) return;
  jb_error err = {0};
  char *json = NULL;
  int rc = fn(c, job, &json, &err);
  if (rc == JB_OK) {
    free(resp->body);
    resp->status = 200;
    resp->body = json;
    resp->content_type = "application/json";
  } else if (rc == JB_ERR_NOT_FOUND) {
    jb_resp_error(resp, 404, "not_found", "no session '%s'", job);
  } else {
    jb_db_unavailable(resp, &err);
  }
  jb_db_release(app->db, c);
}

void jb_api_alerts_list(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  read_route(app, req, resp, jb_db_alerts_list);
}

/* A read of the core (api/core/rollback.h) for the session's buyer or the service: `id` is
 * req->params[1] (NULL: none). */
static void core_read(struct jb_app *app, const struct jb_http_req *req, struct jb_http_resp *resp,
                      bool rollback) {
  PGconn *c = jb_rest_session_conn(app, req, resp);
  if (!c) return;
  struct jb_reply r;
  if (rollback)
    jb_rollback_get(c, req->params[0], req->params[1], &r);
  else
    jb_rollback_changes(c, req->params[0], &r);
  jb_resp_reply(resp, &r);
  jb_db_release(app->db, c);
}

void jb_api_changes_list(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  core_read(app, req, resp, false);
}

void jb_api_rollback_get(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  core_read(app, req, resp, true);
}

void jb_api_op_changeset(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  PGconn *c = jb_rest_session_conn(app, req, resp);
  if (!c) return;
  const char *after = jb_http_query(req, "after"), *limit = jb_http_query(req, "limit");
  json_t *q = json_pack("{s:s}", "opId", req->params[1]);
  if (q && after) json_object_set_new(q, "after", json_string(after));
  if (q && limit) json_object_set_new(q, "limit", json_string(limit));
  struct jb_reply r = {0};
  if (q)
    jb_changeset_view(c, req->params[0], q, &r);
  else
    jb_reply_fail(&r, 400, "bad_request", "the op id or the query is not valid UTF-8");
  jb_resp_reply(resp, &r);
  json_decref(q);
  jb_db_release(app->db, c);
}
