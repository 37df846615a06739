/* start.c — the parts of jailboxd that main (api/main.c, the composition root) puts together
 * (declared in api/start.h): the scan rules, the bootstrap token, the Socket.IO door with the
 * core's op handlers, the escape policy and the sweeper. */
#define _GNU_SOURCE
#include "api/start.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/core/escape.h"
#include "api/core/ops.h"
#include "api/core/policy.h"
#include "lib/log.h"
#include "lib/reviewer.h"
#include "lib/scan.h"
#include "api/core/auth.h"
#include "api/http/door.h"
#include "api/socket/socket.h"
#include "server/app.h"
#include "server/config.h"

/* The Socket.IO door and the sweeper of this process (one each; set by jb_api_start on the
 * main thread, read by the Redis thread for a resync). */
static struct jb_socket *_Atomic the_socket;
static struct jb_sweeper *the_sweeper;

int jb_api_load_rules(const struct jb_config *cfg, jb_error *err) {
  struct jb_scan_rules *rules = NULL;
  if (jb_scan_rules_load(cfg->scan_rules, &rules, err) < 0) return -1;
  jb_scan_use(rules);
  return 0;
}

int jb_api_load_policy(const struct jb_config *cfg, jb_error *err) {
  if (jb_policy_operator_load(cfg->policy_file, err) < 0) return -1;
  if (!cfg->reviewer_url[0] && !cfg->reviewer_cmd[0]) return 0;
  if (jb_review_global_init(err) < 0) return -1;
  char ms[32];
  snprintf(ms, sizeof ms, "%ld", cfg->reviewer_timeout_ms);
  /* the webhook's URL is not logged: it may hold credentials */
  jb_log(JB_LOG_INFO, "op reviewer configured", "timeoutMs", ms, "kind",
         cfg->reviewer_url[0] ? "webhook" : "program", "program",
         cfg->reviewer_cmd[0] ? cfg->reviewer_cmd : NULL, NULL);
  return 0;
}

int jb_api_bootstrap_token(PGconn *c, const char *path, bool create, jb_error *err) {
  return jb_service_token_bootstrap(c, path, create, err);
}

bool jb_api_token_known(void *app, const char *authorization) {
  return jb_auth_token_known(app, authorization);
}

int jb_api_start(struct jb_app *app, jb_error *err) {
  struct jb_socket *sock = NULL;
  /* the file operations (api/core/ops.c); reads and lists the socket's service thread may
   * hand straight to a local worker */
  const struct jb_mcp_direct_fns direct = {jb_op_direct_plan, jb_op_direct_answer,
                                           jb_op_direct_free};
  if (app->cfg) jb_op_set_exec_max_timeout(app->cfg->exec_max_timeout_s);
  char why[200];
  if (app->cfg && jb_op_set_exec_env_allow(app->cfg->exec_env_allow, why, sizeof why) < 0)
    return jb_fail(err, EINVAL, "%s", why);
  if (jb_socket_start(app, jb_op_tool, NULL, &direct, &sock, err) < 0) /* logs "ws listening" */
    return jb_error_wrap(err, "websocket");
  atomic_store(&the_socket, sock); /* read by the Redis thread */
  if (jb_escape_init(app, err) < 0) return jb_error_wrap(err, "escape policy");
  /* the workers inherit the escape policy through the environment (set in main, before any
   * thread starts) */
  /* lifetime and idle expiry, chains a crash left unsealed */
  if (jb_sweeper_start(app, &the_sweeper, err) < 0) return jb_error_wrap(err, "sweeper");
  return 0;
}

void jb_api_drain(struct jb_app *app) { jb_socket_drain(atomic_load(&the_socket)); }

void jb_api_drain_wait(struct jb_app *app, long ms) {
  jb_socket_drain_wait(atomic_load(&the_socket), ms);
}

void jb_api_stop(struct jb_app *app) {
  jb_sweeper_stop(the_sweeper);
  the_sweeper = NULL;
  struct jb_socket *sock = atomic_exchange(&the_socket, NULL);
  jb_socket_stop(sock); /* its handlers use the database, and the workers (direct ops) */
}

void jb_api_resync(struct jb_app *app) {
  struct jb_socket *sock = atomic_load(&the_socket);
  if (sock) jb_socket_resync(sock);
}

void jb_api_session_changed(const char *job_id) { jb_op_session_changed(job_id); }
