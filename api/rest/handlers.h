/* handlers.h — the REST handlers of jailboxd, one group per file under api/. Each has the
 * jb_http_handler signature (server/http.h) and receives the struct jb_app as `app`. */
#ifndef JB_HANDLERS_H
#define JB_HANDLERS_H

#include "api/core/auth.h"
#include "api/http/door.h"
#include "server/app.h"
#include "server/http.h"

/* Borrows a database connection and checks that the caller is the buyer of the session named
 * by req->params[0] or holds a service token (api/core/auth.h jb_auth_require). Returns the
 * connection, which the caller releases with jb_db_release; or NULL with `resp` answered
 * (503 when no connection, else jb_auth_require's 401/403/404). */
PGconn *jb_rest_session_conn(struct jb_app *app, const struct jb_http_req *req,
                             struct jb_http_resp *resp);

/* An op id of the URL (`ops`, of session `job`): a positive integer, else -1 with 404 answered
 * (the URL names no op). */
long long jb_rest_path_op(const char *job, const char *ops, struct jb_http_resp *resp);

void jb_api_healthz(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_readyz(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
/* api/rest/metrics.c */
void jb_api_metrics(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);

void jb_api_session_open(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_session_get(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_session_patch(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_ops_list(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_op_approve(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_op_reject(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
/* POST /v1/jailbox/:jobId/ops/:opId/kill: the buyer's (or the service's) kill of an exec. */
void jb_api_op_kill(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
/* GET /v1/jailbox/:jobId/ops/:opId/diff: the whole diff of a pending write or edit (buyer or
 * service; api/core/ops.h jb_op_full_diff). */
void jb_api_op_diff(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_session_abort(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_session_pause(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_session_resume(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
/* POST /v1/jailbox/:jobId/effects/clear: the buyer lets writable commands run again after
 * incomplete effects (db/sessions.h jb_db_session_effects_clear). */
void jb_api_session_effects_clear(void *app, const struct jb_http_req *req,
                                  struct jb_http_resp *resp);
void jb_api_session_accept(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
/* POST /v1/jailbox/:jobId/rollback: the buyer's (or the service's, with a reason) rollback, on a
 * paused or ended session (api/core/rollback.h). */
void jb_api_session_rollback(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
/* GET /v1/jailbox/:jobId/rollbacks/:rollbackId: a rollback's state (service or buyer;
 * api/rest/changes.c). */
void jb_api_rollback_get(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_agent_get(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);

/* api/rest/audit.c */
void jb_api_audit_export(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_audit_verify(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_audit_keys(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);

/* GET /v1/jailbox/:jobId/alerts and GET /v1/jailbox/:jobId/changes (service or buyer;
 * api/rest/changes.c). */
void jb_api_rules_list(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_rules_add(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_rule_revoke(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);

void jb_api_alerts_list(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_changes_list(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
/* GET /v1/jailbox/:jobId/ops/:opId/changeset?after&limit (api/core/changeset.h). */
void jb_api_op_changeset(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);

/* api/rest/console.c: the web console's files and sign-in */
void jb_api_console_index(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_console_file(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_console_code(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_console_signin(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_console_whoami(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_console_signout(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);
void jb_api_console_sessions(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);

#endif
