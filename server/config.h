/* config.h — jailboxd's settings: one table for the settings engine (lib/settings.h), read
 * from JAILBOX_* environment variables and overridden by matching command-line flags
 * (--name=value or --name value). */
#ifndef JB_CONFIG_H
#define JB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "lib/err.h"

struct jb_config {
  char *listen; /* HTTP listen address "host:port"; port 0 picks a free one */
  char *state_dir; /* state directory (embedded database, keys) */
  char *database_url; /* libpq URL or conninfo; NULL or "" = embedded PostgreSQL */
  char *pg_bindir; /* directory of initdb/pg_ctl for the embedded cluster; "" = search */
  char *db_user; /* unprivileged OS user that runs the embedded cluster when root */
  char *workspace_root; /* every session workspace must resolve below this directory */
  char *service_token_file; /* bootstrap service token; "" = <state_dir>/service.token */
  char *signing_key_file; /* audit signing key (Ed25519 seed); "" = <state_dir>/audit-signing.key */
  char *log_level; /* debug | info | warn | error */
  char *mcp_allowed_origins; /* browser Origins allowed on POST /mcp besides loopback ones,
                              * comma-separated; "" = loopback only */
  long max_body_bytes; /* request body limit, bytes */
  long http_threads; /* HTTP worker threads */
  long http_conns_per_ip; /* HTTP connections one client address may hold */
  long http_body_budget; /* request body bytes held in memory at once, all connections */
  long http_timeout_s; /* idle HTTP connection timeout, s */
  long db_pool_size; /* PostgreSQL connections kept open */
  long db_connect_timeout_s; /* seconds libpq waits for a connection */
  long shutdown_grace_ms; /* how long in-flight requests may run after SIGTERM, ms */
  char *ws_listen; /* Socket.IO (WebSocket) address host:port; port 0 picks a free one */
  long ws_max_payload; /* largest WebSocket message, bytes (close 1009 above) */
  long ws_ping_interval_ms; /* Engine.IO pingInterval, ms */
  long ws_ping_timeout_ms; /* Engine.IO pingTimeout: a silent client is dropped after it, ms */
  long ws_handshake_timeout_ms; /* upgrade + Socket.IO CONNECT must finish within, ms */
  long ws_max_per_ip; /* open WebSocket connections per client address */
  long ws_send_queue_bytes; /* outgoing bytes queued per socket; more: the socket is dropped */
  long ws_workers; /* threads running socket handlers (database work) */
  long max_waiting_calls; /* tool calls of this process that may wait at once (each on a thread) */
  long max_waiting_per_session; /* of them, calls of one session */
  long workers; /* jailbox-worker processes jailboxd starts and supervises; 0: none */
  long approval_timeout_s; /* a supervised write pending longer fails with `timeout`, s; 0: never */
  long exec_max_timeout_s; /* the longest timeoutSec an exec may ask for, s */
  long start_wait_s; /* a tool call of a session still starting waits this long for it, s */
  long progress_interval_s; /* a waiting call that asked for progress hears of it this often, s */
  char *exec_env_allow; /* names an exec may set besides the built-in ones (comma-separated) */
  char *worker_bin; /* the jailbox-worker binary; "" = next to jailboxd */
  char *scan_rules; /* the content scanner's rules file; "" = the embedded deploy/scan-rules */
  long diff_preview_max; /* bytes of a supervised write's diff preview at most; 0: none */
  char *escape_abort; /* signal kinds that abort a session at once (lib/escape_policy.h) */
  char *alert_after; /* "kind:N,…": signals that raise an alert every N occurrences */
  long trust_penalty; /* trust score points an agent loses per escape abort */
  long session_lifetime_s; /* default limits.timeoutSec: a session's maximum lifetime, s */
  long idle_timeout_s; /* default limits.idleTimeoutSec: agent inactivity before abort, s */
  long buyer_read_retention_s; /* an ended session's buyer token reads it this long, s */
  char *redis_url; /* Redis for cross-instance events (server/fanout.h); "" = in-process */
  long drain_delay_ms; /* after SIGTERM: /readyz 503 while still serving, before the drain, ms */
  char *sandbox_image; /* the image of a session that names none (lib/images.h) */
  char *sandbox_images; /* the images a session may name, comma-separated (lib/images.h) */
  char *policy_file; /* the operator's approval rules (lib/policy.h); "" = none */
  char *reviewer_url; /* the op reviewer's webhook (lib/reviewer.h); "" = none */
  char *reviewer_cmd; /* the op reviewer as a program (absolute path); "" = none */
  long reviewer_timeout_ms; /* a review's deadline, ms */
  long reviewer_failures; /* failed reviews in a row that pause the reviewer; 0: never */
  long reviewer_pause_ms; /* how long a paused reviewer is not called, ms */
  char *changesets; /* "supervised": a supervised writable exec's effects become a changeset
                     * op for the buyer; "off": it writes directly */
};

/* Fills `cfg` with the defaults, then the environment (looked up with `get_env`, normally
 * getenv), then `argv` flags. Strings in `cfg` are new allocations; free with
 * jb_config_free(). Returns 0 on success, 1 when --help was asked for (nothing else is
 * parsed), -1 on a bad value or unknown flag with `err` naming the setting. */
int jb_config_load(struct jb_config *cfg, int argc, char **argv,
                   const char *(*get_env)(const char *name), jb_error *err);

/* Writes every setting with its flag, environment variable, default and meaning. */
/* Logs a warning for each JAILBOX_* variable of `envp` (as environ) that neither jailboxd nor
 * another program of jailbox reads — a misspelled setting would otherwise be ignored without
 * a word — with the nearest known name when it is close. Returns how many were logged. */
size_t jb_config_warn_unknown_env(char *const *envp);

void jb_config_print_help(FILE *out, const char *prog);

/* Releases the strings held by `cfg` (not `cfg` itself). */
void jb_config_free(struct jb_config *cfg);

/* Splits "host:port" or "[v6]:port" into `host` (size `host_len` bytes) and `port`.
 * Returns 0, or -1 with `err` set when the form or the port (0..65535) is wrong. */
int jb_parse_listen(const char *addr, char *host, size_t host_len, int *port, jb_error *err);

#endif
