/* routes.c — the route table of jailboxd: every path it serves, kept in step with
 * api/openapi.yaml. */
#include "api/rest/handlers.h"
#include "server/api.h"

static const struct jb_route routes[] = {
    {"GET", "/healthz", jb_api_healthz},
    {"GET", "/readyz", jb_api_readyz},
    {"GET", "/metrics", jb_api_metrics},
    {"POST", "/v1/jailbox", jb_api_session_open},
    {"GET", "/v1/jailbox/:jobId", jb_api_session_get},
    {"PATCH", "/v1/jailbox/:jobId", jb_api_session_patch},
    {"GET", "/v1/jailbox/:jobId/ops", jb_api_ops_list},
    {"POST", "/v1/jailbox/:jobId/approve/:opId", jb_api_op_approve},
    {"POST", "/v1/jailbox/:jobId/reject/:opId", jb_api_op_reject},
    {"POST", "/v1/jailbox/:jobId/abort", jb_api_session_abort},
    {"POST", "/v1/jailbox/:jobId/pause", jb_api_session_pause},
    {"POST", "/v1/jailbox/:jobId/resume", jb_api_session_resume},
    {"POST", "/v1/jailbox/:jobId/accept", jb_api_session_accept},
    {"GET", "/v1/agents/:agentId", jb_api_agent_get},
    {"GET", "/v1/jailbox/:jobId/audit", jb_api_audit_export},
    {"GET", "/v1/jailbox/:jobId/audit/verify", jb_api_audit_verify},
    {"GET", "/v1/audit/keys", jb_api_audit_keys},
    {"GET", "/v1/jailbox/:jobId/alerts", jb_api_alerts_list},
    {"GET", "/v1/jailbox/:jobId/changes", jb_api_changes_list},
};

const struct jb_route *jb_api_routes(size_t *n) {
  *n = sizeof routes / sizeof routes[0];
  return routes;
}
