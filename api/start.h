/* start.h — what jailboxd's main (api/main.c, the one composition root) puts together over the
 * runtime (server/): the route table of the HTTP doors, the core's rules and policy, the
 * bootstrap token, the Socket.IO door with the core's op handlers, the sweeper, and their
 * drain and stop. Defined in api/start.c and api/routes.c. */
#ifndef JB_API_START_H
#define JB_API_START_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/err.h"
#include "server/http.h"

struct jb_app;
struct jb_config;

/* The route table served by jailboxd (api/routes.c); *n receives its length. The table
 * is static: borrowed for the life of the process. */
const struct jb_route *jb_api_routes(size_t *n);

/* Loads the content scanner's rules (cfg->scan_rules, or the embedded deploy/scan-rules) and
 * makes them the rules of every scan. Call before any thread that scans starts. Returns 0, or
 * -1 with err->msg "FILE:LINE: what is wrong". */
int jb_api_load_rules(const struct jb_config *cfg, jb_error *err);

/* Loads the operator's approval rules (cfg->policy_file; "" = none) for every session's
 * decisions (api/core/policy.h). Call before any thread decides ops. Returns 0, or -1 with
 * err->msg "FILE:LINE: what is wrong". */
int jb_api_load_policy(const struct jb_config *cfg, jb_error *err);

/* Registers the bootstrap service token on `c` (read from `path`, or minted there when
 * `create`; see api/core/auth.h). Returns 0, or -1 with `err`. */
int jb_api_bootstrap_token(PGconn *c, const char *path, bool create, jb_error *err);

/* For jb_http_opts.authorize_body: true when `authorization` names an unrevoked token. */
bool jb_api_token_known(void *app, const char *authorization);

/* Starts what serves clients beside REST: the Socket.IO endpoint with its op handlers, the
 * escape policy (exported to the environment the workers inherit), and the sweeper of expired
 * sessions. Returns 0, or -1 with `err` (what did start is
 * stopped by jb_api_stop). */
int jb_api_start(struct jb_app *app, jb_error *err);

/* The drain at SIGTERM: no new socket events (jb_api_drain), then wait up to `ms` for the
 * socket calls in flight (jb_api_drain_wait). */
void jb_api_drain(struct jb_app *app);
void jb_api_drain_wait(struct jb_app *app, long ms);

/* Stops the sweeper and the Socket.IO endpoint. Safe after a failed or no jb_api_start. */
void jb_api_stop(struct jb_app *app);

/* A Redis subscription was (re)made: every socket is sent its session's state and pending
 * approvals again (events published meanwhile may be lost). */
void jb_api_resync(struct jb_app *app);

/* A session's state changed in some process (a jb_op notice with op id 0): the op path's copy
 * of that session is old. */
void jb_api_session_changed(const char *job_id);

#endif
