/* routes.c — the route table of jailboxd: every path its HTTP listener serves, the REST
 * door's (api/rest/) and the MCP door's (api/mcp/), kept in step with api/openapi.yaml. */
#include "api/mcp/http.h"
#include "api/rest/handlers.h"
#include "api/start.h"

static const struct jb_route routes[] = {
    {"GET", "/healthz", jb_api_healthz, 0},
    {"GET", "/readyz", jb_api_readyz, 0},
    {"GET", "/metrics", jb_api_metrics, 0},
    {"POST", "/v1/jailbox", jb_api_session_open, 0},
    {"GET", "/v1/jailbox/:jobId", jb_api_session_get, 0},
    {"PATCH", "/v1/jailbox/:jobId", jb_api_session_patch, 0},
    {"GET", "/v1/jailbox/:jobId/ops", jb_api_ops_list, 0},
    {"POST", "/v1/jailbox/:jobId/approve/:opId", jb_api_op_approve, 0},
    {"POST", "/v1/jailbox/:jobId/reject/:opId", jb_api_op_reject, 0},
    {"POST", "/v1/jailbox/:jobId/ops/:opId/kill", jb_api_op_kill, 0},
    {"GET", "/v1/jailbox/:jobId/ops/:opId/diff", jb_api_op_diff, 0},
    {"GET", "/v1/jailbox/:jobId/ops/:opId/changeset", jb_api_op_changeset, 0},
    {"GET", "/v1/jailbox/:jobId/rules", jb_api_rules_list, 0},
    {"POST", "/v1/jailbox/:jobId/rules", jb_api_rules_add, 0},
    {"DELETE", "/v1/jailbox/:jobId/rules/:ruleId", jb_api_rule_revoke, 0},
    {"POST", "/v1/jailbox/:jobId/abort", jb_api_session_abort, 0},
    {"POST", "/v1/jailbox/:jobId/pause", jb_api_session_pause, 0},
    {"POST", "/v1/jailbox/:jobId/resume", jb_api_session_resume, 0},
    {"POST", "/v1/jailbox/:jobId/accept", jb_api_session_accept, 0},
    {"POST", "/v1/jailbox/:jobId/effects/clear", jb_api_session_effects_clear, 0},
    {"POST", "/v1/jailbox/:jobId/rollback", jb_api_session_rollback, 0},
    {"GET", "/v1/jailbox/:jobId/rollbacks/:rollbackId", jb_api_rollback_get, 0},
    {"GET", "/v1/agents/:agentId", jb_api_agent_get, 0},
    {"GET", "/v1/jailbox/:jobId/audit", jb_api_audit_export, 0},
    {"GET", "/v1/jailbox/:jobId/audit/verify", jb_api_audit_verify, 0},
    {"GET", "/v1/audit/keys", jb_api_audit_keys, 0},
    {"GET", "/v1/jailbox/:jobId/alerts", jb_api_alerts_list, 0},
    {"GET", "/v1/jailbox/:jobId/changes", jb_api_changes_list, 0},
    {"GET", "/console/", jb_api_console_index, 0},
    {"GET", "/console/:file", jb_api_console_file, 0},
    {"GET", "/console/:dir/:file", jb_api_console_file, 0},
    {"POST", "/v1/console/codes", jb_api_console_code, 0},
    {"POST", "/v1/console/session", jb_api_console_signin, 0},
    {"GET", "/v1/console/session", jb_api_console_whoami, 0},
    {"DELETE", "/v1/console/session", jb_api_console_signout, 0},
    {"GET", "/v1/console/sessions", jb_api_console_sessions, 0},
    /* MCP Streamable HTTP (api/mcp/http.h): GET and DELETE get 405 */
    {"POST", "/mcp", jb_api_mcp_post, JB_ROUTE_BODY},
};

const struct jb_route *jb_api_routes(size_t *n) {
  *n = sizeof routes / sizeof routes[0];
  return routes;
}
