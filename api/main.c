/* main.c — jailboxd: reads its settings, brings up the database (embedded or given),
 * applies migrations, serves HTTP, and shuts down cleanly on SIGTERM/SIGINT. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <signal.h>
#include <sodium.h>
#include <sys/stat.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/audit_store.h"
#include "db/db.h"
#include "db/events.h"
#include "db/listen.h"
#include "db/migrate.h"
#include "db/ops.h"
#include "db/pgembed.h"
#include "api/core/progress.h"
#include "api/start.h"
#include "server/app.h"
#include "server/cache.h"
#include "server/config.h"
#include "server/fanout.h"
#include "server/http.h"
#include "lib/keyring.h"
#include "lib/metrics.h"
#include "lib/log.h"
#include "server/opwait.h"
#include "server/workers.h"

/* The drain's last second: at `at` (CLOCK_MONOTONIC ms), a second before the shutdown grace
 * runs out (when calls waiting on their ops are answered), every statement still running on a
 * lent connection is cancelled (db.h jb_db_cancel_lent): a request waiting in the database,
 * on a row lock say, then fails and is answered instead of outliving the grace and
 * committing after its socket was closed. Ends early when `done` is set. */
struct drain_cancel {
  struct jb_db *db;
  long long at;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool done;
};

static void *drain_cancel_main(void *arg) {
  struct drain_cancel *d = arg;
  struct timespec ts = {(time_t)(d->at / 1000), (long)(d->at % 1000) * 1000000L};
  pthread_mutex_lock(&d->lock);
  int rc = 0;
  while (!d->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&d->cond, &d->lock, &ts);
  bool fire = !d->done;
  pthread_mutex_unlock(&d->lock);
  if (fire) {
    int n = jb_db_cancel_lent(d->db);
    if (n > 0) {
      char nb[16];
      snprintf(nb, sizeof nb, "%d", n);
      jb_log(JB_LOG_WARN, "shutdown grace ending: statements still running cancelled", "count", nb,
             NULL);
    }
  }
  return NULL;
}

static const char *env_lookup(const char *name) { return getenv(name); }

/* LISTEN callbacks. jb_key: a rotation published a key (db/signer.h); jb_change: drop what
 * changed from the cache; jb_op: wake the calls
 * waiting on an op; jb_event: a session event published after its commit by the worker, or by
 * an instance while Redis was down (server/bus.h), delivered on this process's bus. The
 * cache is trusted only while listening. */
static void on_change(void *appv, const char *channel, const char *payload) {
  struct jb_app *app = appv;
  if (strcmp(channel, "jb_change") == 0) {
    jb_cache_invalidate(app->cache, payload);
    return;
  }
  if (strcmp(channel, "jb_key") == 0) { /* a rotation published a key: look at the key file */
    jb_signer_poke(app->signer);
    return;
  }
  if (strcmp(channel, "jb_op") ==
      0) { /* wakes the agent call waiting on that op (api/core/ops.c) */
    long long op_id;
    char state[20];
    const char *job;
    /* a session's state changed (in any process): the op path's copy of it is old */
    if (jb_op_notice_parse(payload, &op_id, state, &job) == 0 && op_id == 0)
      jb_api_session_changed(job);
    jb_opwait_notify_payload(app->opwait, payload);
    return;
  }
  json_t *doc, *ev;
  const char *job;
  enum jb_event_kind kind;
  /* delivered here only, never republished: every instance LISTENs, so each hands the
   * event to its own sockets and no socket gets it twice */
  if (jb_event_parse(payload, &doc, &job, &kind, &ev) == 0) {
    jb_bus_deliver(app->bus, job, kind, json_incref(ev));
    json_decref(doc);
  }
}
/* The LISTEN connection is up again after it was lost (a database restart, a network cut):
 * the events NOTIFY carried meanwhile (the fan-out's fallback, and every event without Redis)
 * are lost, so every socket is sent its session's state and pending approvals again. */
static atomic_bool listen_was_up;
static void on_listen_up(void *appv, bool up) {
  jb_cache_set_enabled(((struct jb_app *)appv)->cache, up);
  jb_opwait_set_up(((struct jb_app *)appv)->opwait, up);
  if (up && atomic_exchange(&listen_was_up, true)) jb_api_resync(appv);
}
/* Any event of a session published in this process means its cached view may be old. */
static void on_bus_event(void *cache, const char *job_id, enum jb_event_kind kind,
                         json_t *payload) {
  (void)kind, (void)payload;
  if (job_id && job_id[0]) jb_cache_invalidate(cache, job_id);
}

/* The fan-out's fallback while Redis is down: NOTIFY jb_event, outside any transaction (the
 * event's own commit is done), on a connection of its own (a publisher may hold a pool
 * connection, so borrowing another from the same pool could wait forever). Every instance
 * delivers what arrives there once (on_change). */
static struct jb_db *notify_db;
static int notify_fallback(void *ctx, const char *job_id, enum jb_event_kind kind,
                           json_t *payload) {
  (void)ctx;
  jb_error err = {0};
  PGconn *c = notify_db ? jb_db_acquire(notify_db, &err) : NULL;
  if (!c) return -1;
  int rc = jb_db_notify_event(c, job_id, kind, payload, &err);
  jb_db_release(notify_db, c);
  return rc == JB_OK ? 0 : -1;
}

/* The Redis subscription is (re)made: this instance's sockets may have missed events
 * published meanwhile, so each is sent the state and pending approvals again. */
static void on_subscribed(void *appv) { jb_api_resync(appv); }

static int fatal(const char *what, const jb_error *err) {
  jb_log(JB_LOG_FATAL, err->msg, "phase", what, NULL);
  return 1;
}

/* What main owns, from the settings to the shutdown: each stage below fills in its part, and
 * shut_down releases all of it in one order. Lives in main's frame for the whole process
 * (app.cfg and the threads started point into it). */
struct jailboxd {
  sigset_t sigs; /* SIGTERM, SIGINT, SIGHUP: blocked in every thread, taken by sigwait */
  struct jb_config cfg;
  jb_error err;
  struct jb_pgembed pg; /* the embedded database; not running with JAILBOX_DATABASE_URL */
  const char *conninfo; /* cfg.database_url, or pg.conninfo */
  struct jb_app app;
  struct jb_http_server *srv;
  struct jb_listener *listener;
  struct jb_workers *workers;
  struct jb_fanout *fanout;
};

/* A stage that cannot fail on main's cleanup path returns this to let main go on; any other
 * value is the exit code, what the stage did being undone already. */
#define GO_ON (-1)

/* --routes: prints the route table ("METHOD PATTERN" per line), before any setting is read
 * (tests/node/openapi.test.mjs compares it with api/openapi.yaml). Returns the exit code, or
 * GO_ON without --routes. */
static int print_routes(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--routes") == 0) {
      size_t n;
      const struct jb_route *r = jb_api_routes(&n);
      for (size_t k = 0; k < n; k++) printf("%s %s\n", r[k].method, r[k].pattern);
      return fflush(stdout) == 0 ? 0 : 1;
    }
  return GO_ON;
}

/* The signals are taken synchronously by the main thread; every thread started later
 * inherits the mask, so SIGTERM never interrupts a worker. */
static void block_signals(sigset_t *sigs) {
  sigemptyset(sigs);
  sigaddset(sigs, SIGTERM);
  sigaddset(sigs, SIGINT);
  sigaddset(sigs, SIGHUP); /* reads the signing key file again (db/signer.h) */
  pthread_sigmask(SIG_BLOCK, sigs, NULL);
  signal(SIGPIPE, SIG_IGN);
}

/* The settings (flags, environment), the scan rules and the operator's policy, libsodium and
 * the state directory. Returns GO_ON, or the exit code (0 after --help, 2 for a bad setting,
 * 1 for a failed start) with cfg freed. */
static int settings(struct jailboxd *d, int argc, char **argv) {
  struct jb_config *cfg = &d->cfg;
  int rc = jb_config_load(cfg, argc, argv, env_lookup, &d->err);
  if (rc == 1) {
    jb_config_print_help(stdout, argv[0]);
    return 0;
  }
  if (rc < 0) {
    fprintf(stderr, "jailboxd: %s\n", d->err.msg);
    jb_config_free(cfg);
    return 2;
  }
  jb_log_set_level(cfg->log_level);
  jb_config_warn_unknown_env(environ);
  /* the workers jailboxd starts inherit its environment: they get the image settings as
   * jailboxd took them (from a flag too), so both sides check one allowlist (no thread runs
   * yet, so setenv is safe here) */
  setenv("JAILBOX_SANDBOX_IMAGE", cfg->sandbox_image, 1);
  setenv("JAILBOX_SANDBOX_IMAGES", cfg->sandbox_images, 1);
  setenv("JAILBOX_SCAN_RULES", cfg->scan_rules, 1); /* the worker redacts exec output with them */
  /* and the escape policy as jailboxd took it; getenv in other threads (libpq's connect reads
   * PG* variables) races with any later setenv, which may move `environ` under it */
  char pen[24];
  snprintf(pen, sizeof pen, "%ld", cfg->trust_penalty);
  setenv("JAILBOX_ESCAPE_ABORT", cfg->escape_abort, 1);
  setenv("JAILBOX_ALERT_AFTER", cfg->alert_after, 1);
  setenv("JAILBOX_TRUST_PENALTY", pen, 1);
  /* a bad rules file stops the start, naming file:line */
  if (jb_api_load_rules(cfg, &d->err) < 0) {
    fprintf(stderr, "jailboxd: scan rules: %s\n", d->err.msg);
    jb_config_free(cfg);
    return 2;
  }
  if (jb_api_load_policy(cfg, &d->err) < 0) {
    fprintf(stderr, "jailboxd: policy: %s\n", d->err.msg);
    jb_config_free(cfg);
    return 2;
  }
  if (sodium_init() < 0) {
    jb_fail(&d->err, EIO, "libsodium failed to initialise");
    jb_config_free(cfg);
    return fatal("start", &d->err);
  }
  if (mkdir(cfg->state_dir, 0711) < 0 && errno != EEXIST) {
    jb_fail_errno(&d->err, errno, "create state directory %s", cfg->state_dir);
    jb_config_free(cfg);
    return fatal("start", &d->err);
  }
  return GO_ON;
}

/* The database to connect to: the one given (cfg.database_url), or an embedded one started in
 * the state directory. Returns GO_ON with d->conninfo set, or the exit code with cfg freed. */
static int embedded_database(struct jailboxd *d) {
  d->conninfo = d->cfg.database_url;
  if (!d->conninfo || !d->conninfo[0]) {
    if (jb_pgembed_start(&d->pg, d->cfg.state_dir, d->cfg.pg_bindir, d->cfg.db_user, &d->err) < 0) {
      jb_config_free(&d->cfg);
      return fatal("embedded database", &d->err);
    }
    d->conninfo = d->pg.conninfo;
  }
  return GO_ON;
}

/* The pool, the migrations, the bootstrap service token, the audit signing key and the
 * workspace root. Returns 0, or the exit code (what started is released by shut_down). */
static int database_up(struct jailboxd *d) {
  const struct jb_config *cfg = &d->cfg;
  struct jb_app *app = &d->app;
  jb_error *err = &d->err;
  if (jb_db_open(&app->db, d->conninfo, (int)cfg->db_pool_size, (int)cfg->db_connect_timeout_s,
                 err) < 0)
    return fatal("database", err);
  PGconn *c = jb_db_acquire(app->db, err);
  int applied = 0;
  if (!c || jb_migrate(c, jb_migrations, jb_migrations_count, &applied, err) < 0) {
    jb_db_release(app->db, c);
    return fatal("migrations", err);
  }
  char tokpath[1200];
  if (cfg->service_token_file[0])
    snprintf(tokpath, sizeof tokpath, "%s", cfg->service_token_file);
  else
    snprintf(tokpath, sizeof tokpath, "%s/service.token", cfg->state_dir);
  if (jb_api_bootstrap_token(c, tokpath, cfg->service_token_file[0] == '\0', err) < 0) {
    jb_db_release(app->db, c);
    return fatal("service token", err);
  }
  /* the audit signing key: loaded (or generated on first start), checked against the published
   * keys — a key that is not the active one stops the start, naming both — and watched */
  jb_db_release(app->db, c);
  c = NULL;
  if (jb_signer_open(&app->signer, app->db, cfg->state_dir, cfg->signing_key_file, "jailboxd",
                     err) < 0)
    return fatal("audit signing key", err);
  jb_log(JB_LOG_INFO, "audit signing key", "key_id", jb_signer_key(app->signer)->key_id, "file",
         jb_signer_key(app->signer)->path, NULL);
  jb_log(JB_LOG_INFO, "scan rules", "file",
         cfg->scan_rules[0] ? cfg->scan_rules : "embedded deploy/scan-rules", NULL);
  if (mkdir(cfg->workspace_root, 0755) < 0 && errno != EEXIST) {
    jb_fail_errno(err, errno, "create workspace root %s", cfg->workspace_root);
    return fatal("workspace root", err);
  }
  char na[16], nt[16];
  snprintf(na, sizeof na, "%d", applied);
  snprintf(nt, sizeof nt, "%zu", jb_migrations_count);
  jb_log(JB_LOG_INFO, "migrations up to date", "applied_now", na, "known", nt, NULL);
  return 0;
}

/* The runtime around the database: the read cache and the op waits with the LISTEN
 * connection that keeps them fresh, and the cross-instance fan-out. Returns 0, or the exit
 * code (what started is released by shut_down). */
static int runtime_up(struct jailboxd *d) {
  const struct jb_config *cfg = &d->cfg;
  struct jb_app *app = &d->app;
  /* the read cache trusts only what a live LISTEN connection keeps fresh */
  app->cache = jb_cache_new(10000);
  app->opwait = jb_opwait_new();
  if ((app->cache || app->opwait) &&
      jb_listener_start(&d->listener, d->conninfo, on_change, on_listen_up, app, &d->err) < 0)
    return fatal("change listener", &d->err);
  if (app->cache && app->bus) jb_bus_subscribe(app->bus, on_bus_event, app->cache);
  /* a waiting command's progress names its last output line (api/core/progress.h) */
  if (app->bus) jb_bus_subscribe(app->bus, jb_exec_line_on_bus, NULL);
  /* cross-instance events over Redis (server/fanout.h), PostgreSQL NOTIFY while it is down */
  if (cfg->redis_url && cfg->redis_url[0]) {
    if (jb_db_open(&notify_db, d->conninfo, 1, (int)cfg->db_connect_timeout_s, &d->err) < 0 ||
        jb_fanout_start(&d->fanout, cfg->redis_url, app->bus, notify_fallback, on_subscribed, app,
                        &d->err) < 0)
      return fatal("redis fan-out", &d->err);
    app->fanout = d->fanout;
  }
  return 0;
}

/* The doors and the walls: the HTTP listener with the route table, the Socket.IO door with
 * the core (jb_api_start), and the workers. Returns 0, or the exit code (what started is
 * released by shut_down). */
static int doors_up(struct jailboxd *d) {
  const struct jb_config *cfg = &d->cfg;
  struct jb_app *app = &d->app;
  size_t n_routes;
  const struct jb_route *routes = jb_api_routes(&n_routes);
  const struct jb_http_opts hopts = {.max_body = cfg->max_body_bytes,
                                     .threads = (int)cfg->http_threads,
                                     .max_conns_per_ip = cfg->http_conns_per_ip,
                                     .body_budget = cfg->http_body_budget,
                                     .timeout_s = cfg->http_timeout_s,
                                     .authorize_body = jb_api_token_known};
  if (jb_http_start(&d->srv, cfg->listen, routes, n_routes, app, &hopts, &d->err) < 0)
    return fatal("http", &d->err);
  if (jb_api_start(app, &d->err) < 0) {
    int exit_code = fatal("api", &d->err);
    jb_http_drain(d->srv, 0);
    return exit_code;
  }
  /* the walls: jailbox-worker processes, unless they run elsewhere (JAILBOX_WORKERS=0) */
  if (cfg->workers > 0 &&
      jb_workers_start(&d->workers, cfg->workers, cfg->worker_bin, cfg->state_dir, d->conninfo,
                       jb_signer_key(app->signer)->path, &d->err) < 0)
    jb_log(JB_LOG_ERROR, d->err.msg, "phase", "workers", NULL);
  __atomic_store_n(&app->workers, d->workers, __ATOMIC_RELEASE); /* read by the op handlers */
  char host[256], addr[300], url[320];
  int port;
  jb_parse_listen(cfg->listen, host, sizeof host, &port, NULL);
  port = jb_http_port(d->srv);
  atomic_store(&app->http_port, port);
  snprintf(addr, sizeof addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
  snprintf(url, sizeof url, "http://%s", addr);
  jb_log(JB_LOG_INFO, "listening", "addr", addr, "url", url, "database",
         d->pg.running ? "embedded" : "external", NULL);
  return 0;
}

/* Serves until SIGTERM or SIGINT; each SIGHUP reads the signing key file again. */
static void run_until_signal(struct jailboxd *d) {
  int sig = 0;
  while (sigwait(&d->sigs, &sig) == 0 && sig == SIGHUP) jb_signer_poke(d->app.signer);
  jb_log(JB_LOG_INFO, "shutting down", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT", NULL);
}

/* Starts the thread of the drain's last second (struct drain_cancel, initialised here).
 * Returns whether it runs; drain_cancel_end is due either way. */
static bool drain_cancel_begin(struct drain_cancel *dc, pthread_t *t) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&dc->cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&dc->lock, NULL);
  return pthread_create(t, NULL, drain_cancel_main, dc) == 0;
}

/* Ends the thread drain_cancel_begin started (`started`: whether it did) before its second
 * comes, and releases `dc`. */
static void drain_cancel_end(struct drain_cancel *dc, pthread_t t, bool started) {
  if (started) {
    pthread_mutex_lock(&dc->lock);
    dc->done = true;
    pthread_cond_signal(&dc->cond);
    pthread_mutex_unlock(&dc->lock);
    pthread_join(t, NULL);
  }
  pthread_cond_destroy(&dc->cond);
  pthread_mutex_destroy(&dc->lock);
}

/* The drain: /readyz answers 503 at once; everything is still served for drain-delay-ms
 * (a load balancer's health check notices; a second signal cuts it short); then no new
 * connections or socket events, and requests and socket calls in flight finish within the
 * grace; each socket is closed (Engine.IO close, WebSocket 1001) once its calls have
 * answered, so that socket.io-client reconnects through the load balancer elsewhere. */
static void drain(struct jailboxd *d) {
  const struct jb_config *cfg = &d->cfg;
  struct jb_app *app = &d->app;
  {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    atomic_store(&app->drain_deadline_ms, (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000 +
                                              cfg->drain_delay_ms + cfg->shutdown_grace_ms);
  }
  atomic_store(&app->draining, true);
  if (cfg->drain_delay_ms > 0) {
    struct timespec dl = {cfg->drain_delay_ms / 1000, (cfg->drain_delay_ms % 1000) * 1000000L};
    sigtimedwait(&d->sigs, NULL, &dl);
  }
  jb_api_drain(app);
  long long drain_start = jb_metrics_now_ns();
  struct drain_cancel dc = {.db = app->db,
                            .at = atomic_load(&app->drain_deadline_ms) - JB_DRAIN_ANSWER_MS};
  pthread_t dct;
  bool dc_started = drain_cancel_begin(&dc, &dct);
  jb_http_drain(d->srv, cfg->shutdown_grace_ms);
  long left_ms = cfg->shutdown_grace_ms - (long)((jb_metrics_now_ns() - drain_start) / 1000000);
  jb_api_drain_wait(app, left_ms > 0 ? left_ms : 0);
  drain_cancel_end(&dc, dct, dc_started);
}

/* Releases everything main started, in this order whatever stage failed (each release takes
 * what was never started), and returns the exit code: `exit_code`, or 1 when it was 0 and the
 * embedded database does not stop cleanly. */
static int shut_down(struct jailboxd *d, int exit_code) {
  struct jb_app *app = &d->app;
  jb_api_stop(app); /* its handlers use the database, and the workers (direct ops) */
  __atomic_store_n(&app->workers, NULL, __ATOMIC_RELEASE);
  jb_workers_stop(d->workers, 20000); /* they fail their sessions in the database on the way out */
  jb_fanout_stop(d->fanout);
  jb_db_close(notify_db);
  jb_listener_stop(d->listener);
  jb_cache_free(app->cache);
  jb_opwait_free(app->opwait);
  jb_signer_close(app->signer); /* after the handlers and workers that sign with it */
  jb_db_close(app->db);
  jb_bus_free(app->bus);
  if (jb_pgembed_stop(&d->pg, &d->err) < 0) {
    jb_log(JB_LOG_ERROR, d->err.msg, "phase", "shutdown", NULL);
    if (!exit_code) exit_code = 1;
  }
  jb_config_free(&d->cfg);
  if (!exit_code) jb_log(JB_LOG_INFO, "stopped", NULL);
  return exit_code;
}

/* The stages in the order they run: settings, the database, the runtime, the doors, serving,
 * the drain; from the database on, every way out goes through shut_down. */
int main(int argc, char **argv) {
  int rc = print_routes(argc, argv);
  if (rc != GO_ON) return rc;
  struct jailboxd d = {0};
  block_signals(&d.sigs);
  if ((rc = settings(&d, argc, argv)) != GO_ON) return rc;
  if ((rc = embedded_database(&d)) != GO_ON) return rc;
  d.app.cfg = &d.cfg;
  d.app.bus = jb_bus_new();
  atomic_init(&d.app.draining, false);
  int exit_code = database_up(&d);
  if (!exit_code) exit_code = runtime_up(&d);
  if (!exit_code) exit_code = doors_up(&d);
  if (!exit_code) {
    run_until_signal(&d);
    drain(&d);
  }
  return shut_down(&d, exit_code);
}
