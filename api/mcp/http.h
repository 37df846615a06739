/* mcp_http.h — MCP Streamable HTTP on jailboxd itself: `POST /mcp` carries one JSON-RPC
 * message of the agent (its bearer token names the session) and answers it with
 * application/json (https://modelcontextprotocol.io/specification/2026-07-28/basic/transports/streamable-http,
 * and for the legacy revisions https://modelcontextprotocol.io/specification/2025-11-25/basic/transports).
 * No session ids are minted and no stream is offered: GET and DELETE on /mcp are 405. The
 * protocol itself is api/core/mcp.h. */
#ifndef JB_API_MCP_HTTP_H
#define JB_API_MCP_HTTP_H

#include "server/http.h"

/* POST /mcp (route flag JB_ROUTE_BODY). In order: the Origin header (absent, a loopback origin
 * or one of JAILBOX_MCP_ALLOWED_ORIGINS, else 403 — the DNS-rebinding rule), the bearer token
 * (none or unknown 401 with WWW-Authenticate; a buyer or service token 403), Accept (must admit
 * application/json, else 406), Content-Type application/json (else 415), the body (the HTTP
 * front's size limit, 413; strict JSON, depth ≤ 64, no duplicate keys: -32700 400), then the
 * MCP rules (api/core/mcp.h jb_mcp_check: 400 with the JSON-RPC error, 404 for an unknown
 * method of a 2026-07-28 request). The agent's first request moves its session
 * awaiting_agent → active. A tools/call runs on the socket's handler threads with the
 * connection suspended (server/http.h jb_http_defer), so a supervised write that waits for
 * the buyer holds no HTTP thread; everything else is answered on the HTTP thread. */
void jb_api_mcp_post(void *app, const struct jb_http_req *req, struct jb_http_resp *resp);

#endif
