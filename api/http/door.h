/* door.h — what the two HTTP doors (REST in api/rest/, MCP Streamable HTTP in api/mcp/) share
 * over the core: the request's credential checked by the core (api/core/auth.h), and a core
 * reply (api/core/reply.h) rendered as an HTTP answer. No decision is made here. */
#ifndef JB_API_HTTP_DOOR_H
#define JB_API_HTTP_DOOR_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "api/core/auth.h"
#include "api/core/reply.h"
#include "lib/compiler.h"
#include "server/app.h"
#include "server/http.h"

/* Checks the request's credential — "Authorization: Bearer <token>" (RFC 6750 §2.1), else the
 * console cookie (server/http.h jb_http_credential: with the console header on state-changing
 * methods, else 403) — through jb_auth_check with `job_id`, `roles` and `who` as there.
 * Returns 0, or -1 with `resp` answered: 401 for a missing credential or a scheme other than
 * Bearer, else jb_auth_check's answer. */
JB_MUST_USE int jb_auth_require(struct jb_app *app, PGconn *conn, const struct jb_http_req *req,
                                const char *job_id, unsigned roles, struct jb_principal *who,
                                struct jb_http_resp *resp);

/* The SHA-256 of the request's well-formed bearer token into `hash`. Returns 0, or -1 when
 * there is none or it is malformed (no database access). */
int jb_auth_bearer_hash(const struct jb_http_req *req, unsigned char hash[32]);

/* For jb_http_opts.authorize_body: true when `authorization` ("Bearer <token>") names an
 * unrevoked token of any role (`app` is the struct jb_app; one database lookup). A database
 * outage answers true: the handler answers 503 after the body, not 401. */
bool jb_auth_token_known(void *app, const char *authorization);

/* Renders `r` into `resp`: on success its status and body, with r->extra's fields added to the
 * body; on failure {error: {code, message}} with its status, and "state" inside the error
 * when r->state is set (r->extra's fields too, when set). Takes over r->body and r->extra (the reply is left released). */
void jb_resp_reply(struct jb_http_resp *resp, struct jb_reply *r);

/* 409 {error: {code: "invalid_state", message: "<what> in state <state>", state}}. */
void jb_resp_invalid_state(struct jb_http_resp *resp, const char *what, const char *state);

/* Answers 503 (key_retired, or database_unavailable with a fixed message; api/core/reply.h
 * jb_reply_db); the detail (`err`, which may name sockets, hosts or SQL) goes to the log only. */
void jb_db_unavailable(struct jb_http_resp *resp, const jb_error *err);

/* Borrows a database connection and checks that the caller is one of `roles` (enum jb_role
 * bits, JB_AUTH_CONTROL allowed) for session `job` (NULL: any), whom `*who` then names.
 * Returns the connection (release it with jb_db_release) or NULL with `resp` answered (503
 * when no connection, else jb_auth_require's answer). */
PGconn *jb_rest_authed_conn(struct jb_app *app, const struct jb_http_req *req, const char *job,
                            unsigned roles, struct jb_principal *who, struct jb_http_resp *resp);

#endif
