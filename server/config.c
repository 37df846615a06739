/* config.c — jailboxd's settings: its table for the settings engine (lib/settings.h) and the
 * checks that span settings (log level, escape policy, listen addresses); see config.h. */
#include "server/config.h"

#include "lib/escape_policy.h"
#include "lib/images.h"
#include "lib/log.h"
#include "lib/reviewer.h"
#include "lib/settings.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define S(f) offsetof(struct jb_config, f)
static const struct jb_setting settings[] = {
    {"listen", "JAILBOX_LISTEN", JB_SETTING_STRING, S(listen), "127.0.0.1:8080", 0, 0,
     "HTTP address host:port (port 0: any free port, logged at start)"},
    {"state-dir", "JAILBOX_STATE_DIR", JB_SETTING_STRING, S(state_dir), "./var", 0, 0,
     "state directory: embedded PostgreSQL cluster, signing keys"},
    {"database-url", "JAILBOX_DATABASE_URL", JB_SETTING_STRING, S(database_url), "", 0, 0,
     "PostgreSQL URL or conninfo; empty: run an embedded cluster under the state directory"},
    {"pg-bindir", "JAILBOX_PG_BINDIR", JB_SETTING_STRING, S(pg_bindir), "", 0, 0,
     "directory holding initdb and pg_ctl; empty: newest /usr/lib/postgresql/*/bin, then PATH"},
    {"db-user", "JAILBOX_DB_USER", JB_SETTING_STRING, S(db_user), "jailbox", 0, 0,
     "unprivileged OS user that runs the embedded cluster when jailboxd runs as root"},
    {"workspace-root", "JAILBOX_WORKSPACE_ROOT", JB_SETTING_STRING, S(workspace_root),
     "./workspaces", 0, 0, "session workspaces must resolve below this directory"},
    {"service-token-file", "JAILBOX_SERVICE_TOKEN_FILE", JB_SETTING_STRING, S(service_token_file),
     "", 0, 0,
     "file holding the bootstrap service token; empty: <state-dir>/service.token, created if "
     "missing"},
    {"signing-key-file", "JAILBOX_SIGNING_KEY_FILE", JB_SETTING_STRING, S(signing_key_file), "", 0,
     0,
     "audit signing key (Ed25519 seed, mode 0600); empty: <state-dir>/audit-signing.key, created "
     "if missing. Must hold the active key (another key stops the start); read again when it "
     "changes or on SIGHUP"},
    {"log-level", "JAILBOX_LOG_LEVEL", JB_SETTING_STRING, S(log_level), "info", 0, 0,
     "least severe level logged: debug, info, warn, error"},
    {"max-body-bytes", "JAILBOX_MAX_BODY_BYTES", JB_SETTING_INT, S(max_body_bytes), "1048576", 1,
     1L << 30, "largest accepted request body, bytes (larger: 413)"},
    {"mcp-allowed-origins", "JAILBOX_MCP_ALLOWED_ORIGINS", JB_SETTING_STRING,
     S(mcp_allowed_origins), "", 0, 0,
     "browser origins (scheme://host[:port], comma-separated) allowed on POST /mcp besides "
     "loopback ones; a request with another Origin header gets 403"},
    {"http-threads", "JAILBOX_HTTP_THREADS", JB_SETTING_INT, S(http_threads), "4", 1, 256,
     "HTTP worker threads"},
    {"http-conns-per-ip", "JAILBOX_HTTP_CONNS_PER_IP", JB_SETTING_INT, S(http_conns_per_ip), "128",
     1, 65536, "HTTP connections one client address may hold (behind a load balancer: raise it)"},
    {"http-body-budget", "JAILBOX_HTTP_BODY_BUDGET", JB_SETTING_INT, S(http_body_budget),
     "67108864", 1024, 1L << 40,
     "request body bytes held in memory at once over all connections (past it: 503), bytes"},
    {"http-timeout", "JAILBOX_HTTP_TIMEOUT", JB_SETTING_INT, S(http_timeout_s), "30", 1, 3600,
     "idle HTTP connection timeout, s; a request body must arrive within twice it"},
    {"db-pool-size", "JAILBOX_DB_POOL_SIZE", JB_SETTING_INT, S(db_pool_size), "8", 1, 1024,
     "PostgreSQL connections kept open"},
    {"db-connect-timeout", "JAILBOX_DB_CONNECT_TIMEOUT", JB_SETTING_INT, S(db_connect_timeout_s),
     "5", 1, 600, "seconds to wait for a PostgreSQL connection"},
    {"shutdown-grace-ms", "JAILBOX_SHUTDOWN_GRACE_MS", JB_SETTING_INT, S(shutdown_grace_ms),
     "10000", 0, 600000, "after SIGTERM/SIGINT, how long in-flight requests may finish, ms"},
    {"ws-listen", "JAILBOX_WS_LISTEN", JB_SETTING_STRING, S(ws_listen), "127.0.0.1:8081", 0, 0,
     "Socket.IO (WebSocket) address host:port, path /socket.io/ (port 0: any free port, logged;"
     " unset while the HTTP port is 0: the HTTP host with port 0)"},
    {"ws-max-payload", "JAILBOX_WS_MAX_PAYLOAD", JB_SETTING_INT, S(ws_max_payload), "1048576", 1024,
     1L << 26, "largest WebSocket message, bytes (Engine.IO maxPayload; larger: close 1009)"},
    {"ws-ping-interval-ms", "JAILBOX_WS_PING_INTERVAL_MS", JB_SETTING_INT, S(ws_ping_interval_ms),
     "25000", 50, 3600000, "Engine.IO pingInterval: the server pings every socket this often, ms"},
    {"ws-ping-timeout-ms", "JAILBOX_WS_PING_TIMEOUT_MS", JB_SETTING_INT, S(ws_ping_timeout_ms),
     "20000", 50, 3600000,
     "Engine.IO pingTimeout: a socket that does not answer a ping within it is dropped, ms"},
    {"ws-handshake-timeout-ms", "JAILBOX_WS_HANDSHAKE_TIMEOUT_MS", JB_SETTING_INT,
     S(ws_handshake_timeout_ms), "10000", 50, 600000,
     "WebSocket upgrade plus Socket.IO CONNECT must complete within, ms"},
    {"ws-max-per-ip", "JAILBOX_WS_MAX_PER_IP", JB_SETTING_INT, S(ws_max_per_ip), "64", 1, 1000000,
     "open WebSocket connections from one client address (more: HTTP 429)"},
    {"ws-send-queue-bytes", "JAILBOX_WS_SEND_QUEUE_BYTES", JB_SETTING_INT, S(ws_send_queue_bytes),
     "4194304", 4096, 1L << 30,
     "outgoing bytes queued for one socket; a slower client is dropped (close 1008)"},
    {"ws-workers", "JAILBOX_WS_WORKERS", JB_SETTING_INT, S(ws_workers), "4", 1, 256,
     "threads kept free to run Socket.IO and MCP handlers (authentication, session controls, "
     "tool calls); a call that waits (for the buyer, a command, a pause) gets a thread of its "
     "own"},
    {"max-waiting-calls", "JAILBOX_MAX_WAITING_CALLS", JB_SETTING_INT, S(max_waiting_calls), "256",
     1, 4096,
     "tool calls of this process waiting at once (for the buyer, a running command or write, a "
     "paused session), each on a thread of its own; more: -32017 unavailable"},
    {"max-waiting-per-session", "JAILBOX_MAX_WAITING_PER_SESSION", JB_SETTING_INT,
     S(max_waiting_per_session), "32", 1, 4096,
     "of the waiting tool calls, the ones one session's agents may hold at once; more: -32017 "
     "unavailable"},
    {"workers", "JAILBOX_WORKERS", JB_SETTING_INT, S(workers), "1", 0, 64,
     "jailbox-worker processes started and supervised by jailboxd (0: none; workers run "
     "elsewhere)"},
    {"approval-timeout", "JAILBOX_APPROVAL_TIMEOUT", JB_SETTING_INT, S(approval_timeout_s), "0", 0,
     31L * 24 * 3600,
     "a supervised write waiting longer for the buyer fails with error `timeout`, s (0: it waits "
     "without limit)"},
    {"start-wait", "JAILBOX_START_WAIT_S", JB_SETTING_INT, S(start_wait_s), "300", 1, 3600,
     "a tool call made while its session is still starting (created, prescanning) waits this "
     "long for it to become active, s; then it answers -32017 unavailable"},
    {"progress-interval", "JAILBOX_PROGRESS_INTERVAL_S", JB_SETTING_INT, S(progress_interval_s),
     "10", 1, 3600,
     "a tool call that waits (a running command, the buyer, a pause, a session starting) and "
     "carries a progress token gets notifications/progress at least this often, s"},
    {"exec-max-timeout", "JAILBOX_EXEC_MAX_TIMEOUT_S", JB_SETTING_INT, S(exec_max_timeout_s), "600",
     1, 86400, "the longest timeoutSec an agent's exec may ask for, s (the default is 120)"},
    {"exec-env-allow", "JAILBOX_EXEC_ENV_ALLOW", JB_SETTING_STRING, S(exec_env_allow), "", 0, 0,
     "environment variables an agent's exec may set besides the locale, colour, CI and debug "
     "ones built in (comma-separated names; NAME* for a prefix; JAILBOX_* never)"},
    {"worker-bin", "JAILBOX_WORKER_BIN", JB_SETTING_STRING, S(worker_bin), "", 0, 0,
     "the jailbox-worker binary; empty: jailbox-worker next to jailboxd"},
    {"scan-rules", "JAILBOX_SCAN_RULES", JB_SETTING_STRING, S(scan_rules), "", 0, 0,
     "the content scanner's rules file (grammar in deploy/scan-rules; its workers redact exec "
     "output with it); empty: the rules built in"},
    {"diff-preview-max", "JAILBOX_DIFF_PREVIEW_MAX", JB_SETTING_INT, S(diff_preview_max), "65536",
     0, 1048576,
     "bytes of a supervised write's unified diff preview stored with the op (longer: cut, "
     "truncated=true; the approval request event may carry less); 0: none"},
    {"escape-abort", "JAILBOX_ESCAPE_ABORT", JB_SETTING_STRING, S(escape_abort),
     JB_ESCAPE_KINDS_TEXT, 0, 0,
     "signal kinds that abort a session at once (comma-separated; 'none'); the others alert"},
    {"alert-after", "JAILBOX_ALERT_AFTER", JB_SETTING_STRING, S(alert_after),
     JB_ALERT_AFTER_DEFAULT, 0, 0,
     "kind:N,...: a security alert at every N-th such signal of a session (escape kinds not"
     " aborting: every one)"},
    {"trust-penalty", "JAILBOX_TRUST_PENALTY", JB_SETTING_INT, S(trust_penalty), "20", 0, 1000,
     "trust score points an agent loses when an escape signal aborts its session"},
    {"session-lifetime", "JAILBOX_SESSION_LIFETIME_S", JB_SETTING_INT, S(session_lifetime_s),
     "3600", 1, 604800,
     "default maximum lifetime of a session (limits.timeoutSec), s; then it is aborted"},
    {"idle-timeout", "JAILBOX_IDLE_TIMEOUT_S", JB_SETTING_INT, S(idle_timeout_s), "900", 1, 604800,
     "default idle timeout (limits.idleTimeoutSec): an active or awaited agent doing nothing"
     " that long is aborted, s"},
    {"buyer-read-retention", "JAILBOX_BUYER_READ_RETENTION_S", JB_SETTING_INT,
     S(buyer_read_retention_s), "2592000", 0, 315360000,
     "how long after a session ended its buyer token still reads it (ops, changes, alerts, audit"
     " export and verify, the session), s; controls answer 409 invalid_state; then 401"},
    {"redis-url", "JAILBOX_REDIS_URL", JB_SETTING_STRING, S(redis_url), "", 0, 0,
     "Redis for cross-instance socket events: redis://[[user]:password@]host[:port] or"
     " unix:///path; empty: one instance, in-process events"},
    {"drain-delay-ms", "JAILBOX_DRAIN_DELAY_MS", JB_SETTING_INT, S(drain_delay_ms), "0", 0, 600000,
     "after SIGTERM, how long /readyz answers 503 while everything is still served (so that a"
     " load balancer stops routing here) before the drain starts, ms"},
    {"sandbox-image", "JAILBOX_SANDBOX_IMAGE", JB_SETTING_STRING, S(sandbox_image),
     JB_SANDBOX_IMAGE_DEFAULT, 0, 0,
     "sandbox image of a session whose open names none (deploy/sandbox-image/build.sh); always"
     " allowed"},
    {"sandbox-images", "JAILBOX_SANDBOX_IMAGES", JB_SETTING_STRING, S(sandbox_images),
     JB_SANDBOX_IMAGES_DEFAULT, 0, 0,
     "images a session may name at open (\"image\"), comma-separated; a name without a tag means"
     " :latest; another name: 400"},
    {"policy-file", "JAILBOX_POLICY_FILE", JB_SETTING_STRING, S(policy_file), "", 0, 0,
     "the operator's approval rules, one JSON rule a line (api/events.md \"Approval rules\");"
     " locked ones decide before a session's rules, the others after; empty: none"},
    {"reviewer-url", "JAILBOX_REVIEWER_URL", JB_SETTING_STRING, S(reviewer_url), "", 0, 0,
     "the op reviewer's webhook: an https:// URL (http:// only to 127.0.0.0/8 or [::1]) that"
     " each op held for the buyer is POSTed to first (api/events.md \"Reviewer\"); empty: none"},
    {"reviewer-cmd", "JAILBOX_REVIEWER_CMD", JB_SETTING_STRING, S(reviewer_cmd), "", 0, 0,
     "the op reviewer as a program (absolute path, run without a shell or arguments): the same"
     " request on its stdin, its answer on stdout; not with JAILBOX_REVIEWER_URL; empty: none"},
    {"reviewer-timeout-ms", "JAILBOX_REVIEWER_TIMEOUT_MS", JB_SETTING_INT, S(reviewer_timeout_ms),
     "5000", 100, 120000,
     "the reviewer must answer within this (connecting included; the program is killed after"
     " it), ms; later: the buyer is asked"},
    {"reviewer-failures", "JAILBOX_REVIEWER_FAILURES", JB_SETTING_INT, S(reviewer_failures), "5", 0,
     1000000,
     "after this many failed reviews in a row the reviewer is not called for"
     " JAILBOX_REVIEWER_PAUSE_MS (ops go to the buyer); 0: always call it"},
    {"reviewer-pause-ms", "JAILBOX_REVIEWER_PAUSE_MS", JB_SETTING_INT, S(reviewer_pause_ms),
     "30000", 0, 3600000, "how long a failing reviewer is left alone, ms"},
    {"changesets", "JAILBOX_CHANGESETS", JB_SETTING_STRING, S(changesets), "supervised", 0, 0,
     "supervised: a writable exec of a supervised session runs on an overlay and its effects"
     " wait for the buyer as one changeset op (api/events.md \"Changesets\"); off: it writes"
     " directly"},
};
#undef S
#define N_SETTINGS JB_SETTINGS_COUNT(settings)

int jb_config_load(struct jb_config *cfg, int argc, char **argv,
                   const char *(*get_env)(const char *name), jb_error *err) {
  memset(cfg, 0, sizeof *cfg);
  int rc = jb_settings_load(cfg, settings, N_SETTINGS, argc, argv, get_env, err);
  if (rc != 0) return rc;
  const char *lv = cfg->log_level;
  if (strcmp(lv, "debug") && strcmp(lv, "info") && strcmp(lv, "warn") && strcmp(lv, "error"))
    return jb_fail(err, EINVAL, "JAILBOX_LOG_LEVEL: '%s' is not one of debug, info, warn, error",
                   lv);
  struct jb_escape_policy pol;
  if (jb_escape_policy_parse(&pol, cfg->escape_abort, cfg->alert_after, cfg->trust_penalty, err) <
      0)
    return -1;
  char canon[JB_IMAGE_NAME_MAX + 8];
  if (jb_image_name_canonical(cfg->sandbox_image, canon, sizeof canon, err) < 0)
    return jb_error_wrap(err, "JAILBOX_SANDBOX_IMAGE");
  if (jb_image_list_check(cfg->sandbox_images, err) < 0)
    return jb_error_wrap(err, "JAILBOX_SANDBOX_IMAGES");
  if (strcmp(cfg->changesets, "supervised") && strcmp(cfg->changesets, "off"))
    return jb_fail(err, EINVAL, "JAILBOX_CHANGESETS: '%s' is not one of supervised, off",
                   cfg->changesets);
  if (cfg->reviewer_url[0] && cfg->reviewer_cmd[0])
    return jb_fail(
        err, EINVAL,
        "JAILBOX_REVIEWER_URL and JAILBOX_REVIEWER_CMD are both set: choose one reviewer");
  if (cfg->reviewer_url[0] && jb_review_url_check(cfg->reviewer_url, err) < 0)
    return jb_error_wrap(err, "JAILBOX_REVIEWER_URL");
  if (cfg->reviewer_cmd[0] && jb_review_cmd_check(cfg->reviewer_cmd, err) < 0)
    return jb_error_wrap(err, "JAILBOX_REVIEWER_CMD");
  char host[256];
  int port;
  if (jb_parse_listen(cfg->listen, host, sizeof host, &port, err) < 0)
    return jb_error_wrap(err, "JAILBOX_LISTEN");
  /* A free HTTP port (port 0, as tests and parallel instances use) takes a free WebSocket
   * port on the same host too, unless JAILBOX_WS_LISTEN / --ws-listen was given: the fixed
   * default would make two such instances collide. */
  bool ws_given = get_env && get_env("JAILBOX_WS_LISTEN");
  for (int i = 1; i < argc; i++)
    if (strncmp(argv[i], "--ws-listen", 11) == 0 && (argv[i][11] == '\0' || argv[i][11] == '='))
      ws_given = true;
  if (port == 0 && !ws_given) {
    char ws[300];
    snprintf(ws, sizeof ws, strchr(host, ':') ? "[%s]:0" : "%s:0", host);
    char *dup = strdup(ws);
    if (!dup) return jb_fail_errno(err, ENOMEM, "JAILBOX_WS_LISTEN");
    free(cfg->ws_listen);
    cfg->ws_listen = dup;
  }
  if (jb_parse_listen(cfg->ws_listen, host, sizeof host, &port, err) < 0)
    return jb_error_wrap(err, "JAILBOX_WS_LISTEN");
  return 0;
}

/* JAILBOX_* names that other programs of a deployment read from the environment jailboxd
 * runs in (the workers it starts inherit it): jailbox-worker's settings, jailboxctl's and
 * the deploy and test scripts'. They are not settings of jailboxd, and not misspellings.
 * tests/integration/readme_config.sh checks this list against the programs' --help. */
static const char *const other_programs_env[] = {
    /* jailbox-worker (sandbox/worker/main.c) */
    "JAILBOX_CALL_TIMEOUT_MS", "JAILBOX_CHANGESET_UPPER_MIB", "JAILBOX_CONTAINER_TMP_MIB",
    "JAILBOX_DOCKER_SOCKET", "JAILBOX_EFFECTS_HASH_MAX_MIB", "JAILBOX_EFFECTS_MAX_ENTRIES",
    "JAILBOX_EFFECTS_MAX_MS", "JAILBOX_EFFECTS_SWEEP_MAX_ENTRIES", "JAILBOX_EFFECTS_SWEEP_MAX_MS",
    "JAILBOX_JAIL_TMP_MIB", "JAILBOX_PREIMAGE_DIR", "JAILBOX_PREIMAGE_MAX_BYTES",
    "JAILBOX_PREIMAGE_RETENTION_S", "JAILBOX_PRESCAN_EXCLUDE_SECRETS",
    "JAILBOX_PRESCAN_HASH_MAX_MIB", "JAILBOX_PRESCAN_HOLD", "JAILBOX_REQUIRE_WALLS",
    "JAILBOX_ROLLBACK_ON_ESCAPE", "JAILBOX_ROLLBACK_ON_ESCAPE_TIMEOUT_S", "JAILBOX_RUNTIME",
    "JAILBOX_SECCOMP_PROFILE", "JAILBOX_SHIM_SOCKET_DIR", "JAILBOX_START_TIMEOUT_MS",
    "JAILBOX_TREE_HASH_MAX_BYTES", "JAILBOX_WORKER_CONTROL", "JAILBOX_WORKER_ID",
    "JAILBOX_WORKER_LEASE_S", "JAILBOX_WORKER_MAX_COMMANDS", "JAILBOX_WORKER_MAX_SESSIONS",
    "JAILBOX_WORKER_OPS_SOCKET", "JAILBOX_WORKER_PIDFILE",
    /* jailboxctl */
    "JAILBOX_AGENT_TOKEN", "JAILBOX_TOKEN", "JAILBOX_URL", "JAILBOX_WS_URL",
    /* deploy/ and tests/ scripts */
    "JAILBOX_BUILD_IMAGE", "JAILBOX_DOCKERD_LOG", "JAILBOX_SERVICE_TOKEN", "JAILBOX_SHIM_TEST",
    "JAILBOX_WORKER", NULL};

static void log_unknown(const char *name, size_t len, const char *nearest, void *ctx) {
  (void)ctx;
  char nb[160];
  snprintf(nb, sizeof nb, "%.*s", (int)(len < sizeof nb - 1 ? len : sizeof nb - 1), name);
  jb_log(JB_LOG_WARN, "unknown setting ignored: no program of jailbox reads it", "name", nb,
         "didYouMean", nearest, NULL);
}

size_t jb_config_warn_unknown_env(char *const *envp) {
  return jb_settings_unknown_env(settings, N_SETTINGS, other_programs_env, envp, "JAILBOX_",
                                 log_unknown, NULL);
}

void jb_config_print_help(FILE *out, const char *prog) {
  fprintf(out,
          "Usage: %s [--flag=value ...]\n\n"
          "jailboxd, the jailbox control-plane server. Every setting is read from its\n"
          "environment variable and may be overridden by its flag.\n\n",
          prog);
  jb_settings_print_help(out, settings, N_SETTINGS);
  fprintf(out, "\n  --help                 show this text\n");
  fprintf(out,
          "  --routes               print the served routes, METHOD PATTERN per line, and exit\n");
  fprintf(out,
          "\nOther JAILBOX_* variables are logged as unknown at the start, except these, read by\n"
          "jailbox-worker, jailboxctl and the scripts:\n ");
  size_t col = 1;
  for (const char *const *a = other_programs_env; *a; a++) {
    if (col + strlen(*a) + 1 > 90) {
      fprintf(out, "\n ");
      col = 1;
    }
    col += (size_t)fprintf(out, " %s", *a);
  }
  fprintf(out, "\n");
}

void jb_config_free(struct jb_config *cfg) { jb_settings_free(cfg, settings, N_SETTINGS); }

int jb_parse_listen(const char *addr, char *host, size_t host_len, int *port, jb_error *err) {
  const char *colon;
  const char *h = addr;
  size_t hl;
  if (addr[0] == '[') {
    const char *rb = strchr(addr, ']');
    if (!rb || rb[1] != ':') return jb_fail(err, EINVAL, "'%s' is not [ipv6]:port", addr);
    h = addr + 1;
    hl = (size_t)(rb - h);
    colon = rb + 1;
  } else {
    colon = strrchr(addr, ':');
    if (!colon) return jb_fail(err, EINVAL, "'%s' is not host:port", addr);
    hl = (size_t)(colon - addr);
  }
  if (hl == 0 || hl >= host_len) return jb_fail(err, EINVAL, "'%s': bad host part", addr);
  char *end = NULL;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (errno || end == colon + 1 || *end || p < 0 || p > 65535)
    return jb_fail(err, EINVAL, "'%s': port must be 0..65535", addr);
  memcpy(host, h, hl);
  host[hl] = '\0';
  *port = (int)p;
  return 0;
}
