/* worker.c — jailbox-worker: the only process that talks to Docker. It claims launch and
 * teardown jobs from PostgreSQL (FOR UPDATE SKIP LOCKED, so workers on many hosts share one
 * queue), pre-scans the workspace, builds the three walls for each session (walls.c), writes
 * the session contract, moves the session on, watches the sandbox until the session ends,
 * and removes it. At start it probes the host's walls and clears what a previous run of the
 * same worker id left behind.
 *
 * Settings are environment variables (the worker is normally started by jailboxd, which
 * passes the database); `jailbox-worker --help` lists them. `--probe` runs the probe, prints
 * it as JSON and exits (0 when every required wall is up); `--explain` reads a session (or its
 * contract) as JSON on stdin and prints the contract for a person. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/json.h"
#include "db/db.h"
#include "db/launch_jobs.h"
#include "db/sessions.h"
#include "sandbox/proto/direct.h"
#include "sandbox/proto/explain.h"
#include "sandbox/worker/head_announce.h"
#include "sandbox/proto/shim.h"
#include "sandbox/worker/walls.h"
#include "db/audit_store.h"
#include "db/escape.h"
#include "db/events.h"
#include "db/ops.h"
#include "sandbox/worker/workspace_access.h"
#include "sandbox/worker/workspace_scan.h"
#include "lib/escape_policy.h"
#include "lib/keyring.h"
#include "lib/log.h"

/* deploy/seccomp/jailbox.json, embedded at build time (cmake/embed_file.cmake) */
extern const unsigned char jb_seccomp_profile[];
extern const size_t jb_seccomp_profile_len;

struct setting {
  const char *env, *def, *help;
};
static const struct setting settings[] = {
  {"JAILBOX_DATABASE_URL", "", "PostgreSQL URL or conninfo (required; jailboxd passes its own)"},
  {"JAILBOX_SIGNING_KEY_FILE", "", "audit signing key (required: every session transition is a signed audit entry; jailboxd passes its own)"},
  {"JAILBOX_WORKER_ID", "", "stable id of this worker; empty: the host name (jailboxd: host:state-dir#N)"},
  {"JAILBOX_DOCKER_SOCKET", "/var/run/docker.sock", "Docker Engine API socket"},
  {"JAILBOX_SANDBOX_IMAGE", "jailbox-sandbox:latest", "sandbox image (deploy/sandbox-image/build.sh)"},
  {"JAILBOX_RUNTIME", "runsc", "name of the gVisor runtime registered with Docker"},
  {"JAILBOX_REQUIRE_WALLS", JB_WALLS_DEFAULT_REQUIRE,
   "walls a session must have, comma-separated; anything narrower is a development override"},
  {"JAILBOX_SECCOMP_PROFILE", "", "Wall 2 seccomp profile file; empty: the copy of deploy/seccomp/jailbox.json built in"},
  {"JAILBOX_CONTAINER_TMP_MIB", "16", "size of the container's /tmp tmpfs, MiB"},
  {"JAILBOX_JAIL_TMP_MIB", "16", "size of the jail's own /tmp tmpfs, MiB"},
  {"JAILBOX_START_TIMEOUT_MS", "30000", "container start to shim ready, ms"},
  {"JAILBOX_CALL_TIMEOUT_MS", "30000", "one call to the shim, ms"},
  {"JAILBOX_SHIM_SOCKET_DIR", "",
   "where each session's shim socket directory (mode 0700) is made; empty: the directory of JAILBOX_WORKER_PIDFILE (jailboxd's state dir), else $TMPDIR or /tmp; none: the Docker attach stream only"},
  {"JAILBOX_WORKER_CONTROL", "", "Unix socket (mode 0600) for operators and tests to talk to a session's shim; empty: none"},
  {"JAILBOX_WORKER_OPS_SOCKET", "",
   "Unix socket (mode 0600) on which jailboxd hands reads, lists and stats straight to this worker (sandbox/proto/direct.h); empty: none (jailboxd: <state dir>/worker-N.ops)"},
  {"JAILBOX_WORKER_PIDFILE", "", "pid file, locked while the worker runs; empty: none"},
  {"JAILBOX_PRESCAN_HOLD", "0", "1: leave sessions in prescanning for the buyer's pre_scan_done; 0: go on to awaiting_agent"},
  {"JAILBOX_PRESCAN_HASH_MAX_MIB", "1024",
   "pre-scan: regular files over this many MiB are not read, only flagged too_large (sandbox/WALLS.md)"},
  {"JAILBOX_WORKER_MAX_SESSIONS", "64", "sessions this worker runs at once"},
  {"JAILBOX_LOG_LEVEL", "info", "debug, info, warn, error"},
  {"JAILBOX_ESCAPE_ABORT", JB_ESCAPE_KINDS_TEXT, "signal kinds that abort a session at once (jailboxd passes its own)"},
  {"JAILBOX_ALERT_AFTER", JB_ALERT_AFTER_DEFAULT, "kind:N,...: signals that alert every N occurrences (jailboxd passes its own)"},
  {"JAILBOX_TRUST_PENALTY", "20", "trust score points an agent loses per escape abort (jailboxd passes its own)"},
};

static const char *env_or(const char *name) {
  const char *v = getenv(name);
  if (v) return v;
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
    if (strcmp(settings[i].env, name) == 0) return settings[i].def;
  return "";
}

static long env_long(const char *name, long min, long max, jb_error *err, bool *bad) {
  const char *v = env_or(name);
  char *end = NULL;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || end == v || *end || n < min || n > max) {
    jb_fail(err, EINVAL, "%s: '%s' is not a whole number in %ld..%ld", name, v, min, max);
    *bad = true;
  }
  return n;
}

/* ---- worker state --------------------------------------------------------------------- */

struct session {
  char job_id[129];
  long long launch_job;
  char *workspace;
  json_t *limits;
  pthread_t thread;
  atomic_bool teardown;      /* the session ended elsewhere: remove the sandbox */
  atomic_bool finished;      /* the thread is done; join and free */
  pthread_mutex_t lock;      /* guards sb; an op in flight holds it for the whole call, so it
                                is never waited for while W.lock is held */
  struct jb_sandbox sb;
  atomic_bool sb_ready;      /* written under lock; read without it as a hint (under it: sure) */
  atomic_int users;          /* threads using the session outside W.lock: not reaped meanwhile */
  struct jb_workspace_grant grant; /* what the launch changed in the workspace, undone at the end */
  char cid[80];              /* the container, once up (guarded by W.lock, not lock: an op in
                                flight holds lock for the whole call) */
  atomic_bool killing;       /* killed for an abort: an op in flight fails with "aborted" */
};

static struct {
  struct jb_walls_config walls;
  char *profile_buf;
  struct jb_db *db;
  struct jb_keyring *keys;   /* signs the audit entries of the transitions the worker makes */
  char conninfo[4096];
  bool prescan_hold;
  long long prescan_hash_max; /* bytes */
  long max_sessions;
  pthread_mutex_t lock;      /* sessions, probe */
  struct session *sessions[1024];
  size_t n_sessions;
  struct jb_probe probe;
  atomic_bool stopping;
  struct jb_escape_policy policy;
} W;

/* Logs about one session: the job id always, and the development override when active, so
 * that no line about such a session can be read without seeing it. */
static void slog(enum jb_log_level lvl, const char *job, const char *msg, ...) __attribute__((sentinel));
static void slog(enum jb_log_level lvl, const char *job, const char *msg, ...) {
  json_t *f = json_object();
  json_object_set_new(f, "worker", json_string(W.walls.worker_id));
  if (job) json_object_set_new(f, "jobId", json_string(job));
  if (W.walls.override) json_object_set_new(f, "devOverride", json_string(W.walls.require_text));
  va_list ap;
  va_start(ap, msg);
  for (;;) {
    const char *k = va_arg(ap, const char *);
    if (!k) break;
    const char *v = va_arg(ap, const char *);
    json_object_set_new(f, k, json_string(v ? v : ""));
  }
  va_end(ap);
  jb_log_json(lvl, msg, f);
}

static void slog_json(enum jb_log_level lvl, const char *job, const char *msg, const char *key,
                      json_t *val /* stolen */) {
  json_t *f = json_object();
  json_object_set_new(f, "worker", json_string(W.walls.worker_id));
  if (job) json_object_set_new(f, "jobId", json_string(job));
  if (W.walls.override) json_object_set_new(f, "devOverride", json_string(W.walls.require_text));
  json_object_set_new(f, key, val ? val : json_null());
  jb_log_json(lvl, msg, f);
}

static struct jb_probe probe_snapshot(void) {
  pthread_mutex_lock(&W.lock);
  struct jb_probe p = W.probe;
  pthread_mutex_unlock(&W.lock);
  return p;
}

/* ---- the workspace ---------------------------------------------------------------------- */

/* Walks the absolute `path` from "/" one component at a time without following any symbolic
 * link (O_PATH|O_NOFOLLOW), and stats the directory it names into *st. Returns 0, or -1 with
 * `err` when a component is missing, is a symbolic link or is not a directory. */
static int pin_workspace(const char *path, struct stat *st, jb_error *err) {
  if (path[0] != '/') return jb_fail(err, EINVAL, "path %s is not absolute", path);
  int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return jb_fail_errno(err, errno, "open /");
  const char *p = path;
  while (*p) {
    while (*p == '/') p++;
    size_t n = strcspn(p, "/");
    if (n == 0) break;
    char name[256];
    if (n >= sizeof name) {
      close(fd);
      return jb_fail(err, ENAMETOOLONG, "a component of %s is too long", path);
    }
    memcpy(name, p, n);
    name[n] = '\0';
    int next = openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    close(fd);
    if (next < 0)
      return jb_fail_errno(err, e, "%s changed since the session was opened ('%s' is no longer a "
                           "plain directory)", path, name);
    fd = next;
    p += n;
  }
  int rc = fstat(fd, st);
  int e = errno;
  close(fd);
  return rc < 0 ? jb_fail_errno(err, e, "stat %s", path) : 0;
}

/* Pins `path` again and checks it is the directory of `first`. */
static int same_workspace(const char *path, const struct stat *first, jb_error *err) {
  struct stat now;
  if (pin_workspace(path, &now, err) < 0) return -1;
  if (now.st_dev != first->st_dev || now.st_ino != first->st_ino)
    return jb_fail(err, EXDEV, "%s was replaced by another directory during the launch", path);
  return 0;
}

/* ---- database steps ------------------------------------------------------------------- */

static int with_conn(int (*fn)(PGconn *, void *, jb_error *), void *arg, jb_error *err) {
  PGconn *c = jb_db_acquire(W.db, err);
  if (!c) return JB_ERR_FAIL;
  int rc = fn(c, arg, err);
  jb_db_release(W.db, c);
  return rc;
}

struct tr_args {
  const char *job;
  const char *const *from;
  const char *to, *reason;
  struct jb_transition out;
};
static int tr_fn(PGconn *c, void *a, jb_error *err) {
  struct tr_args *t = a;
  int rc = jb_db_session_transition(c, W.keys, t->job, t->from, t->to, t->reason, "system", &t->out, err);
  if (rc != JB_OK) return rc;
  /* the buyer's sockets live in jailboxd: tell it (best effort, the change is committed) */
  json_t *ev = json_pack("{s:s,s:s,s:s,s:s?,s:s}", "jobId", t->job, "state", t->to, "previous",
                         t->out.previous, "reason", t->reason, "actor", "system");
  json_t *head = jb_audit_head_json(&t->out.head);
  jb_error nerr = {0};
  if (jb_db_notify_event(c, t->job, "jailbox:state", ev, &nerr) != JB_OK ||
      jb_db_notify_event(c, t->job, "jailbox:audit_head", head, &nerr) != JB_OK)
    slog(JB_LOG_WARN, t->job, nerr.msg, "step", "notify event", NULL);
  json_decref(ev);
  json_decref(head);
  return rc;
}

/* The pre-scan's audit entry and its jailbox:pre_scan event. */
struct prescan_args {
  const char *job;
  json_t *scan;
};
static int prescan_fn(PGconn *c, void *a, jb_error *err) {
  struct prescan_args *p = a;
  struct jb_audit_head h;
  int rc = jb_audit_append(c, W.keys, p->job, "pre_scan", NULL, p->scan, &h, err);
  if (rc != JB_OK) return rc;
  /* the contract shows the pre-scan at once (the walls join it once they are up), so that a
   * buyer who connects later is sent it too */
  json_t *pre = json_pack("{s:O}", "prescan", p->scan);
  char *text = pre ? json_dumps(pre, JSON_COMPACT) : NULL;
  json_decref(pre);
  if (text) {
    jb_error werr = {0};
    if (jb_db_session_set_walls(c, p->job, text, &werr) == JB_ERR_FAIL)
      slog(JB_LOG_WARN, p->job, werr.msg, "step", "store pre-scan", NULL);
    free(text);
  }
  json_t *ev = json_pack("{s:s,s:O}", "jobId", p->job, "prescan", p->scan);
  json_t *head = jb_audit_head_json(&h);
  jb_error nerr = {0};
  if (jb_db_notify_event(c, p->job, "jailbox:pre_scan", ev, &nerr) != JB_OK ||
      jb_db_notify_event(c, p->job, "jailbox:audit_head", head, &nerr) != JB_OK)
    slog(JB_LOG_WARN, p->job, nerr.msg, "step", "notify event", NULL);
  json_decref(ev);
  json_decref(head);
  return JB_OK;
}
static int transition(const char *job, const char *const from[], const char *to, const char *reason,
                      jb_error *err) {
  struct tr_args t = {.job = job, .from = from, .to = to, .reason = reason};
  int rc = with_conn(tr_fn, &t, err);
  if (rc == JB_OK)
    slog(JB_LOG_INFO, job, "session state", "from", t.out.previous, "to", to, "reason", reason ? reason : "", NULL);
  else if (rc == JB_ERR_CONFLICT)
    slog(JB_LOG_INFO, job, "session state unchanged", "wanted", to, "current", t.out.state, NULL);
  return rc;
}

static const char *const live_states[] = {JB_LIVE_STATES, NULL};

/* Fails a live session with `reason`; quiet when it has ended already. */
static void fail_session(const char *job, const char *reason) {
  jb_error err = {0};
  int rc = transition(job, live_states, "failed", reason, &err);
  if (rc == JB_ERR_FAIL) slog(JB_LOG_ERROR, job, err.msg, "step", "fail session", NULL);
}

/* ---- escape signals (issue 8) ---------------------------------------------------------- */

static void remove_containers_of(const char *job);
static struct session *find_session(const char *job);

struct escape_args {
  const char *job, *kind, *detail;
  struct jb_escape_out out;
  struct jb_finish_out fin;
  struct jb_count_out count;
  long every;
};
static int escape_abort_fn(PGconn *c, void *a, jb_error *err) {
  struct escape_args *e = a;
  return jb_db_escape_abort(c, W.keys, e->job, e->kind, e->detail, W.policy.trust_penalty, &e->out, err);
}
static int escape_finish_fn(PGconn *c, void *a, jb_error *err) {
  struct escape_args *e = a;
  return jb_db_session_finish(c, W.keys, e->job, e->out.previous, &e->fin, err);
}
static int signal_count_fn(PGconn *c, void *a, jb_error *err) {
  struct escape_args *e = a;
  return jb_db_signal_count(c, W.keys, e->job, e->kind, e->detail, e->every, &e->count, err);
}

/* Waits at most `ms` for container `cid` to be gone (a removal by the teardown job may be
 * running at the same time: the second DELETE answers 409 before the first is done).
 * Returns whether it is gone. */
static bool container_gone(const char *cid, long ms) {
  char path[160];
  snprintf(path, sizeof path, "/containers/%s/json", cid);
  for (long waited = 0;; waited += 20) {
    long status = 0;
    json_t *in = NULL;
    jb_error err = {0};
    int rc = jb_docker_call(&W.walls.docker, "GET", path, NULL, 5000, &status, &in, &err);
    json_decref(in);
    if (rc == 0 && status == 404) return true;
    if (waited >= ms) return false;
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Acts on signal `kind` of session `job` by the policy. Aborting, in order: the session
 * aborted (escape_detected; alert, trust score), its container killed and removed, pending
 * ops rejected and the chain sealed with the events announced (db/escape.h). Otherwise the
 * signal is counted and alerts every N-th time. Call without holding a connection or a
 * session's lock. */
static void raise_signal(const char *job, enum jb_signal kind, const char *detail) {
  const char *name = jb_signal_name(kind);
  jb_error err = {0};
  struct escape_args e = {.job = job, .kind = name, .detail = detail, .every = W.policy.alert_after[kind]};
  if (!W.policy.abort[kind]) {
    if (e.every <= 0) return;
    int rc = with_conn(signal_count_fn, &e, &err);
    if (rc == JB_OK && e.count.alerted)
      slog(JB_LOG_WARN, job, "security alert", "kind", name, "detail", detail, NULL);
    else if (rc == JB_ERR_FAIL)
      slog(JB_LOG_ERROR, job, err.msg, "step", "count signal", "kind", name, NULL);
    return;
  }
  /* the container's end is no longer news to the session's watcher */
  char cid[80] = "";
  pthread_mutex_lock(&W.lock);
  struct session *s = find_session(job);
  if (s) {
    atomic_store(&s->teardown, true);
    snprintf(cid, sizeof cid, "%s", s->cid);
  }
  pthread_mutex_unlock(&W.lock);
  int rc = with_conn(escape_abort_fn, &e, &err);
  if (rc != JB_OK) {
    if (rc == JB_ERR_FAIL) slog(JB_LOG_ERROR, job, err.msg, "step", "escape abort", "kind", name, NULL);
    return;
  }
  slog(JB_LOG_WARN, job, "escape detected: session aborted", "kind", name, "detail", detail, "from",
       e.out.previous, NULL);
  if (cid[0] && jb_container_remove(&W.walls, cid, &err) < 0)
    slog(JB_LOG_WARN, job, "escape: container remove failed", "error", err.msg, NULL);
  remove_containers_of(job);
  if (cid[0] && !container_gone(cid, 1500))
    slog(JB_LOG_WARN, job, "escape: the container is still there; sealing anyway", "container", cid, NULL);
  if (with_conn(escape_finish_fn, &e, &err) != JB_OK)
    slog(JB_LOG_ERROR, job, err.msg, "step", "escape seal (jailboxd's sweeper retries)", NULL);
}

/* jb_kill: the session is being aborted; kill its container now, so that an op running in
 * the shim (holding the session row the abort needs) fails with "aborted" at once. */
static void kill_for_abort(const char *job) {
  char cid[80] = "";
  pthread_mutex_lock(&W.lock);
  struct session *s = find_session(job);
  if (s) {
    atomic_store(&s->killing, true);
    atomic_store(&s->teardown, true);
    snprintf(cid, sizeof cid, "%s", s->cid);
  }
  pthread_mutex_unlock(&W.lock);
  if (!cid[0]) return;
  jb_error err = {0};
  if (jb_container_remove(&W.walls, cid, &err) < 0)
    slog(JB_LOG_WARN, job, "abort: container remove failed", "error", err.msg, NULL);
  else
    slog(JB_LOG_INFO, job, "abort: container killed", "container", cid, NULL);
}

struct walls_args {
  const char *job;
  const char *json;
};
static int walls_fn(PGconn *c, void *a, jb_error *err) {
  struct walls_args *w = a;
  return jb_db_session_set_walls(c, w->job, w->json, err);
}
static void store_walls(const char *job, json_t *contract) {
  if (!contract) return;
  char *s = json_dumps(contract, JSON_COMPACT);
  if (!s) return;
  struct walls_args a = {job, s};
  jb_error err = {0};
  if (with_conn(walls_fn, &a, &err) == JB_ERR_FAIL) slog(JB_LOG_ERROR, job, err.msg, "step", "store walls", NULL);
  free(s);
}

struct finish_args {
  long long id;
  bool ok;
  const char *error, *result;
};
static int finish_fn(PGconn *c, void *a, jb_error *err) {
  struct finish_args *f = a;
  return jb_db_job_finish(c, f->id, f->ok, f->error, f->result, err);
}
static void finish_job(const char *job, long long id, bool ok, const char *error, json_t *result) {
  char *r = result ? json_dumps(result, JSON_COMPACT) : NULL;
  struct finish_args a = {id, ok, error, r};
  jb_error err = {0};
  if (with_conn(finish_fn, &a, &err) == JB_ERR_FAIL) slog(JB_LOG_ERROR, job, err.msg, "step", "finish job", NULL);
  free(r);
}

struct state_args {
  const char *job;
  char state[20];
};
static int state_fn(PGconn *c, void *a, jb_error *err) {
  struct state_args *s = a;
  return jb_db_session_state(c, s->job, s->state, err);
}

/* ---- one session ---------------------------------------------------------------------- */

/* Why the sandbox ended, from Docker's view of the container; *code receives its exit code
 * (-1 when it cannot be read), *oom whether it was killed for memory. */
static void exit_reason(const char *id, char *out, size_t len, long long *code_out, bool *oom) {
  *code_out = -1;
  *oom = false;
  char path[128];
  snprintf(path, sizeof path, "/containers/%s/json", id);
  json_t *in = NULL;
  jb_error err = {0};
  if (jb_docker_expect(&W.walls.docker, "GET", path, NULL, 10000, &in, &err) < 0) {
    snprintf(out, len, "the sandbox is gone (%s)", err.msg);
    return;
  }
  json_t *st = json_object_get(in, "State");
  json_int_t code = json_integer_value(json_object_get(st, "ExitCode"));
  *code_out = code;
  *oom = json_is_true(json_object_get(st, "OOMKilled"));
  if (*oom) {
    json_int_t mem = json_integer_value(json_object_get(json_object_get(in, "HostConfig"), "Memory"));
    snprintf(out, len, "out of memory: the sandbox went over its limit of %lld MiB and was killed",
             (long long)(mem / (1024 * 1024)));
  } else {
    snprintf(out, len, "the sandbox ended unexpectedly (exit code %lld)", (long long)code);
  }
  json_decref(in);
}

static void *session_main(void *arg) {
  struct session *s = arg;
  const char *job = s->job_id;
  jb_error err = {0};
  slog(JB_LOG_INFO, job, "launch claimed", "workspace", s->workspace, NULL);

  static const char *const from_created[] = {"created", NULL};
  int rc = transition(job, from_created, "prescanning", NULL, &err);
  if (rc != JB_OK) {
    finish_job(job, s->launch_job, rc == JB_ERR_CONFLICT, rc == JB_ERR_CONFLICT ? "session no longer in created" : err.msg, NULL);
    goto end;
  }

  /* the workspace was resolved when the session was opened; pin what that path names now
   * (no symbolic link on the way, the same directory at every step below) */
  struct stat pinned;
  if (pin_workspace(s->workspace, &pinned, &err) < 0) {
    char reason[700];
    snprintf(reason, sizeof reason, "workspace: %s", err.msg);
    fail_session(job, reason);
    finish_job(job, s->launch_job, false, reason, NULL);
    goto end;
  }

  /* the pre-scan: counts, flagged entries, a directory hash */
  struct jb_scan_result scan;
  if (jb_workspace_scan(s->workspace, 100000, W.prescan_hash_max, &scan, &err) < 0) {
    char reason[700];
    snprintf(reason, sizeof reason, "pre-scan failed: %s", err.msg);
    fail_session(job, reason);
    finish_job(job, s->launch_job, false, reason, NULL);
    goto end;
  }
  json_t *scan_json = jb_scan_json(&scan);
  jb_scan_result_free(&scan);
  slog_json(JB_LOG_INFO, job, "pre-scan", "prescan", json_incref(scan_json));
  struct prescan_args pa = {job, scan_json};
  if (with_conn(prescan_fn, &pa, &err) != JB_OK) {
    char reason[700];
    snprintf(reason, sizeof reason, "pre-scan could not be recorded: %s", err.msg);
    json_decref(scan_json);
    fail_session(job, reason);
    finish_job(job, s->launch_job, false, reason, NULL);
    goto end;
  }

  /* the jailed shim runs as 65534:65534: give that group access to the workspace — only
   * to the directory pinned above, and a launch without it does not go ahead */
  if (same_workspace(s->workspace, &pinned, &err) < 0 ||
      jb_workspace_grant(s->workspace, JB_JAIL_GID, 100000, &s->grant, &err) < 0) {
    char reason[700];
    snprintf(reason, sizeof reason, "workspace: %s", err.msg);
    json_decref(scan_json);
    fail_session(job, reason);
    finish_job(job, s->launch_job, false, reason, NULL);
    goto end;
  }

  struct jb_probe probe = probe_snapshot();
  json_t *labels = json_pack("{s:s}", "jailbox.session", job);
  enum jb_wall failed;
  struct jb_sandbox sb;
  rc = jb_sandbox_launch(&W.walls, &probe, job, s->workspace, s->limits, labels, &sb, &failed, &err);
  json_decref(labels);
  if (rc < 0) {
    char reason[700];
    snprintf(reason, sizeof reason, "wall %s", err.msg);
    if (sb.contract) {
      json_object_set(sb.contract, "prescan", scan_json);
      store_walls(job, sb.contract);
      json_decref(sb.contract);
    }
    slog(JB_LOG_WARN, job, "walls failed", "wall", failed < JB_WALL_COUNT ? jb_wall_names[failed] : "?",
         "reason", reason, NULL);
    fail_session(job, reason);
    json_t *res = json_pack("{s:O}", "prescan", scan_json);
    finish_job(job, s->launch_job, false, reason, res);
    json_decref(res);
    json_decref(scan_json);
    goto end;
  }
  /* what was mounted must still be the pinned directory: a swap during the launch fails the
   * session (its teardown removes the container) */
  if (same_workspace(s->workspace, &pinned, &err) < 0) {
    char reason[700];
    snprintf(reason, sizeof reason, "workspace: %s", err.msg);
    json_decref(sb.contract);
    json_decref(scan_json);
    jb_sandbox_destroy(&W.walls, &sb);
    fail_session(job, reason);
    finish_job(job, s->launch_job, false, reason, NULL);
    goto end;
  }
  json_object_set(sb.contract, "prescan", scan_json);
  store_walls(job, sb.contract);
  pthread_mutex_lock(&s->lock);
  s->sb = sb;
  s->sb_ready = true;
  pthread_mutex_unlock(&s->lock);
  pthread_mutex_lock(&W.lock);
  snprintf(s->cid, sizeof s->cid, "%s", sb.container_id);
  pthread_mutex_unlock(&W.lock);
  char ready[32];
  snprintf(ready, sizeof ready, "%ld", sb.ready_ms);
  const char *chan = json_string_value(json_object_get(json_object_get(sb.contract, "shimChannel"), "kind"));
  slog(JB_LOG_INFO, job, "walls up", "container", sb.container_id, "readyMs", ready, "shimChannel",
       chan ? chan : "?", NULL);

  if (!W.prescan_hold && !atomic_load(&s->teardown)) {
    static const char *const from_pre[] = {"prescanning", NULL};
    rc = transition(job, from_pre, "awaiting_agent", NULL, &err);
    if (rc == JB_ERR_FAIL) slog(JB_LOG_ERROR, job, err.msg, "step", "awaiting_agent", NULL);
  }
  json_t *res = json_pack("{s:s, s:I, s:O}", "containerId", sb.container_id, "readyMs",
                          (json_int_t)sb.ready_ms, "prescan", scan_json);
  finish_job(job, s->launch_job, true, NULL, res);
  json_decref(res);
  json_decref(scan_json);

  /* watch the sandbox until it ends: removal by a teardown, or death */
  while (!atomic_load(&s->teardown) && !atomic_load(&W.stopping)) {
    char path[160];
    snprintf(path, sizeof path, "/containers/%s/wait?condition=not-running", sb.container_id);
    long status = 0;
    json_t *w = NULL;
    if (jb_docker_call(&W.walls.docker, "POST", path, NULL, 0, &status, &w, &err) < 0) {
      json_decref(w);
      slog(JB_LOG_WARN, job, "waiting on the sandbox failed; retrying", "error", err.msg, NULL);
      sleep(1);
      continue;
    }
    json_decref(w);
    if (atomic_load(&s->teardown) || atomic_load(&W.stopping)) break;
    char why[300];
    long long code;
    bool oom;
    exit_reason(sb.container_id, why, sizeof why, &code, &oom);
    char tail[300];
    pthread_mutex_lock(&s->lock);
    /* with the socket channel the attach stream (stderr) is read only during calls */
    jb_shimconn_collect_stderr(&s->sb.conn, 500);
    jb_shimconn_stderr(&s->sb.conn, tail, sizeof tail);
    pthread_mutex_unlock(&s->lock);
    slog(JB_LOG_WARN, job, "sandbox ended", "reason", why, "stderr", tail, NULL);
    if (atomic_load(&s->teardown) || atomic_load(&W.stopping)) break;
    /* an out-of-memory kill is the limit doing its work; any other end of the shim is an
     * escape signal: killed by the syscall filter (bwrap reports 128 + SIGSYS), killed from
     * outside (128 + SIGKILL, or the container vanished), or exited by itself */
    if (!oom) {
      char detail[700];
      snprintf(detail, sizeof detail, "%s%s%s", why, tail[0] ? "; stderr: " : "", tail);
      raise_signal(job, code == 128 + SIGSYS ? JB_SIG_SECCOMP_KILL
                        : (code == 128 + SIGKILL || code < 0) ? JB_SIG_SANDBOX_DIED : JB_SIG_SHIM_EXIT,
                   detail);
    }
    fail_session(job, why); /* quiet when the signal ended it already */
    break;
  }
  pthread_mutex_lock(&s->lock);
  s->sb_ready = false;
  jb_sandbox_destroy(&W.walls, &s->sb);
  pthread_mutex_unlock(&s->lock);
  slog(JB_LOG_INFO, job, "sandbox removed", NULL);
end:
  /* the jail can no longer write: give the workspace back its groups and modes */
  if (s->grant.valid) {
    long n = jb_workspace_restore(s->workspace, JB_JAIL_GID, &s->grant, &err);
    char nb[24];
    snprintf(nb, sizeof nb, "%ld", n);
    if (n < 0) slog(JB_LOG_WARN, job, "workspace access not restored", "error", err.msg, NULL);
    else slog(JB_LOG_INFO, job, "workspace access restored", "entries", nb, NULL);
  }
  jb_workspace_grant_free(&s->grant);
  atomic_store(&s->finished, true);
  return NULL;
}

static void session_free(struct session *s) {
  free(s->workspace);
  json_decref(s->limits);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* Joins finished session threads. */
static void reap_sessions(void) {
  pthread_mutex_lock(&W.lock);
  for (size_t i = 0; i < W.n_sessions;) {
    struct session *s = W.sessions[i];
    if (atomic_load(&s->finished) && atomic_load(&s->users) == 0) {
      pthread_join(s->thread, NULL);
      session_free(s);
      W.sessions[i] = W.sessions[--W.n_sessions];
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&W.lock);
}

static struct session *find_session(const char *job) {
  for (size_t i = 0; i < W.n_sessions; i++)
    if (strcmp(W.sessions[i]->job_id, job) == 0) return W.sessions[i];
  return NULL;
}

/* Session `job` with its lock held (NULL: none here), for a call into its shim. W.lock is not
 * held while the session's lock is waited for — an op in flight holds that lock for the whole
 * call, and the abort's kill, the op sweep and the other sessions' ops need W.lock meanwhile —;
 * the session is pinned instead, so that it is not reaped before session_unlock. */
static struct session *session_lock(const char *job) {
  pthread_mutex_lock(&W.lock);
  struct session *s = find_session(job);
  if (s) atomic_fetch_add(&s->users, 1);
  pthread_mutex_unlock(&W.lock);
  if (s) pthread_mutex_lock(&s->lock);
  return s;
}
static void session_unlock(struct session *s) {
  if (!s) return;
  pthread_mutex_unlock(&s->lock);
  atomic_fetch_sub(&s->users, 1);
}

/* Removes every container of this Docker daemon labelled with session `job`. */
static void remove_containers_of(const char *job) {
  char l1[200], l2[64], enc[800], path[900];
  snprintf(l1, sizeof l1, "jailbox.session=%s", job);
  snprintf(l2, sizeof l2, "jailbox.deployment=%s", W.walls.deployment);
  json_t *f = json_pack("{s:[s,s]}", "label", l1, l2);
  char *filt = f ? json_dumps(f, JSON_COMPACT) : NULL;
  json_decref(f);
  if (!filt || jb_docker_urlencode(filt, enc, sizeof enc) < 0) {
    free(filt);
    return;
  }
  free(filt);
  snprintf(path, sizeof path, "/containers/json?all=1&filters=%s", enc);
  json_t *list = NULL;
  jb_error err = {0};
  if (jb_docker_expect(&W.walls.docker, "GET", path, NULL, 10000, &list, &err) < 0) {
    slog(JB_LOG_WARN, job, "listing containers failed", "error", err.msg, NULL);
    return;
  }
  size_t i;
  json_t *c;
  json_array_foreach(list, i, c) {
    const char *id = json_string_value(json_object_get(c, "Id"));
    if (id && jb_container_remove(&W.walls, id, &err) == 0)
      slog(JB_LOG_INFO, job, "container removed", "container", id, NULL);
  }
  json_decref(list);
}

static void handle_job(struct jb_launch_job *j) {
  if (strcmp(j->kind, "teardown") == 0) {
    pthread_mutex_lock(&W.lock);
    struct session *s = find_session(j->job_id);
    char cid[80] = "";
    if (s) {
      atomic_store(&s->teardown, true);
      snprintf(cid, sizeof cid, "%s", s->cid);
    }
    pthread_mutex_unlock(&W.lock);
    jb_error err = {0};
    /* removing the container ends the session thread's wait */
    if (cid[0] && jb_container_remove(&W.walls, cid, &err) < 0)
      slog(JB_LOG_WARN, j->job_id, "teardown: remove failed", "error", err.msg, NULL);
    remove_containers_of(j->job_id);
    /* the job is done when the container is gone (an escape seals after it) */
    if (cid[0] && !container_gone(cid, 1500))
      slog(JB_LOG_WARN, j->job_id, "teardown: the container is still there", "container", cid, NULL);
    slog(JB_LOG_INFO, j->job_id, "teardown", "state", j->state, NULL);
    finish_job(j->job_id, j->id, true, NULL, NULL);
    return;
  }
  /* launch */
  if (strcmp(j->state, "created") != 0) {
    slog(JB_LOG_INFO, j->job_id, "launch skipped", "state", j->state, NULL);
    finish_job(j->job_id, j->id, true, "session not in created", NULL);
    return;
  }
  struct session *s = calloc(1, sizeof *s);
  json_t *limits = json_loads(j->limits_json, 0, NULL);
  if (!s || !limits) {
    free(s);
    json_decref(limits);
    fail_session(j->job_id, "worker: out of memory");
    finish_job(j->job_id, j->id, false, "out of memory", NULL);
    return;
  }
  snprintf(s->job_id, sizeof s->job_id, "%s", j->job_id);
  s->launch_job = j->id;
  s->workspace = j->workspace;
  j->workspace = NULL;
  s->limits = limits;
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_lock(&W.lock);
  bool room = W.n_sessions < (size_t)W.max_sessions && W.n_sessions < sizeof W.sessions / sizeof W.sessions[0];
  if (room) W.sessions[W.n_sessions++] = s;
  pthread_mutex_unlock(&W.lock);
  if (!room || pthread_create(&s->thread, NULL, session_main, s) != 0) {
    if (room) {
      pthread_mutex_lock(&W.lock);
      W.n_sessions--;
      pthread_mutex_unlock(&W.lock);
    }
    fail_session(j->job_id, room ? "worker: cannot start a thread" : "worker: at its session limit");
    finish_job(j->job_id, j->id, false, "no capacity", NULL);
    session_free(s);
  }
}

struct claim_args {
  struct jb_launch_job *job;
};
static int claim_fn(PGconn *c, void *a, jb_error *err) {
  return jb_db_job_claim(c, W.walls.worker_id, ((struct claim_args *)a)->job, err);
}

/* Claims and starts every job available now. */
static void drain_queue(void) {
  for (;;) {
    pthread_mutex_lock(&W.lock);
    bool full = W.n_sessions >= (size_t)W.max_sessions;
    pthread_mutex_unlock(&W.lock);
    if (full || atomic_load(&W.stopping)) return;
    struct jb_launch_job j;
    struct claim_args a = {&j};
    jb_error err = {0};
    int rc = with_conn(claim_fn, &a, &err);
    if (rc == JB_ERR_NOT_FOUND) return;
    if (rc != JB_OK) {
      slog(JB_LOG_ERROR, NULL, err.msg, "step", "claim", NULL);
      return;
    }
    handle_job(&j);
    jb_launch_job_free(&j);
  }
}

/* ---- start-up cleanup ----------------------------------------------------------------- */

struct abandon_args {
  char *list;
};
static int abandon_fn(PGconn *c, void *a, jb_error *err) {
  return jb_db_jobs_abandon(c, W.walls.worker_id, "worker restarted while the job ran",
                            &((struct abandon_args *)a)->list, err);
}

static void startup_cleanup(void) {
  jb_error err = {0};
  struct abandon_args a = {0};
  if (with_conn(abandon_fn, &a, &err) != JB_OK) {
    slog(JB_LOG_ERROR, NULL, err.msg, "step", "abandon jobs", NULL);
  } else {
    json_t *jobs = json_loads(a.list, 0, NULL);
    size_t i;
    json_t *j;
    json_array_foreach(jobs, i, j)
      fail_session(json_string_value(j), "worker restarted during the launch; the sandbox was lost");
    json_decref(jobs);
    free(a.list);
  }
  /* containers on this daemon: ours from before the restart, and any whose session ended */
  char filt[100], enc[200], path[300];
  snprintf(filt, sizeof filt, "{\"label\":[\"jailbox.deployment=%s\"]}", W.walls.deployment);
  jb_docker_urlencode(filt, enc, sizeof enc);
  snprintf(path, sizeof path, "/containers/json?all=1&filters=%s", enc);
  json_t *list = NULL;
  if (jb_docker_expect(&W.walls.docker, "GET", path, NULL, 10000, &list, &err) < 0) {
    slog(JB_LOG_WARN, NULL, "cannot list containers at start", "error", err.msg, NULL);
    return;
  }
  size_t i;
  json_t *c;
  json_array_foreach(list, i, c) {
    const char *id = json_string_value(json_object_get(c, "Id"));
    json_t *labels = json_object_get(c, "Labels");
    const char *job = json_string_value(json_object_get(labels, "jailbox.session"));
    const char *owner = json_string_value(json_object_get(labels, "jailbox.worker"));
    bool mine = owner && strcmp(owner, W.walls.worker_id) == 0;
    bool remove = false;
    const char *why = "";
    if (!job) {
      remove = mine; /* a probe container of ours */
      why = "probe left behind";
    } else {
      struct state_args sa = {.job = job};
      int rc = with_conn(state_fn, &sa, &err);
      bool live = rc == JB_OK && jb_state_is_live(sa.state);
      if (rc == JB_ERR_FAIL) continue; /* cannot tell: leave it */
      if (mine && live) {
        fail_session(job, "worker restarted; the sandbox was lost");
        remove = true;
        why = "session lost by the restart";
      } else if (!live) {
        remove = true;
        why = "session no longer live";
      }
    }
    if (remove && id && jb_container_remove(&W.walls, id, &err) == 0)
      slog(JB_LOG_INFO, job, "stale container removed", "container", id, "why", why, NULL);
  }
  json_decref(list);
}

/* ---- file operations ------------------------------------------------------------------ */

/* The audit details of an executed op (issue 7): read {size, ok}, write {size, sha256,
 * decision, ok}, list {entries, recursive, ok}; a failure adds {error: code}. */
static json_t *op_audit_details(const struct jb_op_claim *op, json_t *args, json_t *answer) {
  bool ok = json_is_true(json_object_get(answer, "ok"));
  json_t *res = json_object_get(answer, "result");
  json_t *d = json_object();
  /* only values of the expected type go into an entry: anything else would make the entry
   * unrecordable and the op stuck (an agent controls the arguments) */
#define SET_INT(key, v) do { json_t *v_ = (v); if (json_is_integer(v_)) json_object_set(d, key, v_); } while (0)
#define SET_HEX64(key, v) do { const char *h_ = json_string_value(v); \
    if (h_ && strlen(h_) == 64 && strspn(h_, "0123456789abcdef") == 64) json_object_set_new(d, key, json_string(h_)); } while (0)
  if (strcmp(op->tool, "read") == 0) {
    json_t *len = json_object_get(res, "length");
    json_object_set_new(d, "size", json_integer(ok && json_is_integer(len) ? json_integer_value(len) : 0));
    if (ok) SET_INT("fileSize", json_object_get(res, "size"));
    SET_INT("offset", json_object_get(args, "offset"));
  } else if (strcmp(op->tool, "write") == 0) {
    SET_INT("size", json_object_get(args, "size"));
    SET_HEX64("sha256", json_object_get(args, "sha256"));
    json_object_set_new(d, "decision", json_string(op->decision));
  } else if (strcmp(op->tool, "stat") == 0) {
    json_object_set_new(d, "exists", json_boolean(json_is_true(json_object_get(res, "exists"))));
    SET_HEX64("sha256", json_object_get(res, "sha256"));
  } else if (strcmp(op->tool, "list") == 0) {
    json_object_set_new(d, "entries", json_integer(ok ? json_integer_value(json_object_get(res, "count")) : 0));
    json_object_set_new(d, "recursive", json_boolean(json_is_true(json_object_get(args, "recursive"))));
  }
  json_object_set_new(d, "ok", json_boolean(ok));
  if (!ok) {
    const char *code = json_string_value(json_object_get(json_object_get(answer, "error"), "code"));
    bool plain = code && strlen(code) < 32 && strspn(code, "abcdefghijklmnopqrstuvwxyz_") == strlen(code);
    json_object_set_new(d, "error", json_string(plain ? code : "internal"));
  }
#undef SET_INT
#undef SET_HEX64
  return d;
}

/* What running an op told of the agent: an escape or alert signal (enum jb_signal, -1 none)
 * with its detail, raised once the op is committed. */
struct op_signal {
  int signal;
  char detail[400];
};

/* The signal op `op`'s answer `ans` tells of the agent (enum jb_signal; -1: none), with its
 * detail in *sigout when there is one. `violation`: the shim's line was malformed or oversized. */
static int op_signal_of(const struct jb_op_claim *op, json_t *ans, bool violation, struct op_signal *sigout) {
  json_t *ej = json_object_get(ans, "error");
  const char *escape = json_string_value(json_object_get(ej, "escape"));
  const char *code = json_string_value(json_object_get(ej, "code"));
  int sig = violation ? JB_SIG_PROTOCOL_VIOLATION : escape ? jb_signal_from_name(escape) : -1;
  if (sig < 0 || sig >= JB_SIG_ESCAPE_COUNT) /* the shim names only escape kinds */
    sig = code && !strcmp(code, "excluded") ? JB_SIG_EXCLUDED_PATH
          : code && !strcmp(code, "denied") ? JB_SIG_DENIED_PATH : -1;
  if (sig >= 0) {
    sigout->signal = sig;
    const char *msg = json_string_value(json_object_get(ej, "message"));
    snprintf(sigout->detail, sizeof sigout->detail, "%s %.300s: %.80s", op->tool, op->path,
             msg ? msg : "refused");
  }
  return sig;
}

/* Runs one claimed op in the session's shim. The answer (new): {ok, result} or {ok:false,
 * error:{code, message}}. */
static json_t *op_run(const char *job, const struct jb_op_claim *op, json_t *args, bool *violation) {
  json_t *req = json_pack("{s:s, s:s}", "op", op->tool, "path", op->path[0] ? op->path : ".");
  static const char *const pass[] = {"offset", "length", "recursive", "content", "encoding", "exclude",
                                     "expectSha256", "withContent", NULL};
  for (size_t i = 0; pass[i]; i++)
    if (json_object_get(args, pass[i])) json_object_set(req, pass[i], json_object_get(args, pass[i]));
  struct session *s = session_lock(job);
  if (s && atomic_load(&s->teardown)) { /* ending: an escape caught, an abort, a teardown */
    session_unlock(s);
    json_decref(req);
    return json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "aborted", "message",
                     "the session is ending: the op was not run");
  }
  json_t *ans = NULL;
  jb_error err = {0};
  if (s && s->sb_ready) ans = jb_shimconn_call(&s->sb.conn, req, W.walls.call_timeout_ms, &err);
  else jb_fail(&err, ESRCH, "the session's sandbox is not up");
  bool killed = s && atomic_load(&s->killing);
  /* a malformed or oversized line from the shim (EPROTO, EMSGSIZE): an escape signal */
  *violation = !ans && !killed && (err.code == EPROTO || err.code == EMSGSIZE);
  json_t *out;
  if (!ans && killed) {
    out = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "aborted", "message",
                    "the session was aborted while the op ran");
  } else if (!ans) {
    out = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "internal", "message", err.msg);
  } else {
    out = json_is_true(json_object_get(ans, "ok"))
              ? json_pack("{s:b, s:O}", "ok", 1, "result", json_object_get(ans, "result"))
              : json_pack("{s:b, s:O}", "ok", 0, "error", json_object_get(ans, "error"));
  }
  /* what the answer tells of the agent, when the policy ends the session on it: the session is
   * marked ending before its lock is let go, so that no op of the session runs in the shim
   * after it — an op handed straight to the worker runs before it waits for anything in the
   * database (direct_fn), so the mark made when this op commits (op_settle) would come after
   * the ops queued behind this one on the lock had run */
  struct op_signal probe = {-1, ""};
  int sig = op_signal_of(op, out, *violation, &probe);
  if (s && sig >= 0 && W.policy.abort[sig]) atomic_store(&s->teardown, true);
  session_unlock(s);
  json_decref(req);
  if (!ans && !killed) slog(JB_LOG_WARN, job, "op failed in the relay", "error", err.msg, NULL);
  json_decref(ans);
  return out;
}

/* The result of answer `ans` as stored in the op's row (JSON text, new): with `strip_content`
 * a read's or stat's file content is left out (its answer is delivered directly, not read back
 * from the row). NULL when out of memory. */
static char *op_stored_text(json_t *ans, bool strip_content) {
  json_t *stored = ans;
  if (strip_content && json_is_true(json_object_get(ans, "ok")) &&
      json_object_get(json_object_get(ans, "result"), "content")) {
    stored = json_deep_copy(ans);
    json_object_del(json_object_get(stored, "result"), "content");
  }
  char *text = stored ? json_dumps(stored, JSON_COMPACT) : NULL;
  if (stored != ans) json_decref(stored);
  return text;
}

/* Completes claimed op `op` of `job` (its transaction open: jb_db_op_claim or
 * jb_db_op_direct_begin) with answer `ans` (taken) of its run in the shim: acts on what it
 * tells of the agent, stores its outcome and audit entry, commits. `args` is borrowed. With
 * `strip_content` see op_stored_text. *answer_out (when not NULL) receives the op's answer
 * {ok, result | error} (new) when it was committed. */
static int op_settle(PGconn *c, const char *job, struct jb_op_claim *op, json_t *args, json_t *ans,
                     bool violation, bool strip_content, struct op_signal *sigout,
                     json_t **answer_out, jb_error *err) {
  int sig = op_signal_of(op, ans, violation, sigout);
  /* a signal the policy aborts on ends the session: marked before this op commits, so that an
   * op of the session waiting for its row (ops handed straight to the worker run in many
   * threads) finds it ending and runs nothing, as on the one op thread */
  if (sig >= 0 && W.policy.abort[sig]) {
    pthread_mutex_lock(&W.lock);
    struct session *s = find_session(job);
    if (s) atomic_store(&s->teardown, true);
    pthread_mutex_unlock(&W.lock);
  }
  json_t *details = op_audit_details(op, args, ans);
  bool ok = json_is_true(json_object_get(ans, "ok"));
  char *text = op_stored_text(ans, strip_content);
  struct jb_audit_head head;
  int rc = text ? jb_db_op_complete(c, W.keys, job, op, ok, text, details, &head, err)
                : (jb_db_rollback(c), jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL);
  free(text);
  json_decref(details);
  if (rc == JB_OK && answer_out) *answer_out = json_incref(ans);
  json_decref(ans);
  return rc;
}

/* Runs claimed op `op` of `job` (its transaction open) in the shim and completes it
 * (op_settle). */
static int op_finish(PGconn *c, const char *job, struct jb_op_claim *op, bool strip_content,
                     struct op_signal *sigout, json_t **answer_out, jb_error *err) {
  json_t *args = json_loads(op->args_json, 0, NULL);
  bool violation = false;
  json_t *ans = op_run(job, op, args, &violation);
  int rc = op_settle(c, job, op, args, ans, violation, strip_content, sigout, answer_out, err);
  json_decref(args);
  return rc;
}

struct opclaim_args {
  const char *job;
  int ran;
  struct op_signal sig;
};
static int opclaim_fn(PGconn *c, void *a, jb_error *err) {
  struct opclaim_args *oa = a;
  struct jb_op_claim op;
  int rc = jb_db_op_claim(c, oa->job, &op, err);
  if (rc != JB_OK) return rc;
  rc = op_finish(c, oa->job, &op, false, &oa->sig, NULL, err);
  if (rc == JB_OK) oa->ran++;
  jb_op_claim_free(&op);
  return rc;
}

/* Runs the queued ops of the sessions whose sandbox is up (only of `only` when not NULL), at
 * most `max` per session. */
static void run_queued_ops(const char *only, int max) {
  static char jobs[sizeof W.sessions / sizeof W.sessions[0]][129]; /* the op thread's own */
  size_t n = 0;
  pthread_mutex_lock(&W.lock);
  for (size_t i = 0; i < W.n_sessions; i++) {
    struct session *s = W.sessions[i];
    if (atomic_load(&s->sb_ready) && (!only || strcmp(only, s->job_id) == 0))
      snprintf(jobs[n++], sizeof jobs[0], "%s", s->job_id);
  }
  pthread_mutex_unlock(&W.lock);
  for (size_t i = 0; i < n; i++) {
    for (int k = 0; k < max; k++) {
      struct opclaim_args a = {jobs[i], 0, {-1, ""}};
      jb_error err = {0};
      int rc = with_conn(opclaim_fn, &a, &err);
      if (a.sig.signal >= 0) raise_signal(jobs[i], (enum jb_signal)a.sig.signal, a.sig.detail);
      if (rc == JB_ERR_NOT_FOUND) break;
      if (rc != JB_OK) {
        slog(JB_LOG_ERROR, jobs[i], err.msg, "step", "run op", NULL);
        break;
      }
    }
  }
}

/* (Re)connects *listen and runs `listen_sql` ("LISTEN channel") when it is not connected;
 * leaves it NULL when the database cannot be reached (the caller's loop tries again). */
static void ensure_listening(PGconn **listen, const char *listen_sql) {
  if (*listen && PQstatus(*listen) == CONNECTION_OK) return;
  if (*listen) PQfinish(*listen);
  *listen = PQconnectdb(W.conninfo);
  PGresult *r = PQstatus(*listen) == CONNECTION_OK ? PQexec(*listen, listen_sql) : NULL;
  if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) {
    PQfinish(*listen);
    *listen = NULL;
  }
  PQclear(r);
}

/* The op thread: woken by jb_op (migration 009: an op queued, or its session back to
 * active; the payload names the session), and a sweep of every session once a second for
 * anything missed. */
static void *ops_main(void *arg) {
  (void)arg;
  PGconn *listen = NULL;
  long long last_sweep = 0;
  while (!atomic_load(&W.stopping)) {
    ensure_listening(&listen, "LISTEN jb_op");
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (now - last_sweep >= 1000) {
      run_queued_ops(NULL, 1000);
      last_sweep = now;
    }
    struct pollfd pf = {.fd = listen ? PQsocket(listen) : -1, .events = POLLIN};
    if (poll(&pf, 1, 250) > 0 && listen) {
      PQconsumeInput(listen);
      PGnotify *nt;
      while ((nt = PQnotifies(listen))) {
        long long op_id;
        char st[20];
        const char *job;
        /* one notification per queued op: one claim each (no empty claim after it); a
         * session back to active may have many waiting */
        if (nt->extra && jb_op_notice_parse(nt->extra, &op_id, st, &job) == 0) {
          if (op_id != 0 && strcmp(st, "approved") == 0) run_queued_ops(job, 1);
          else if (op_id == 0 && strcmp(st, "active") == 0) run_queued_ops(job, 1000);
        }
        PQfreemem(nt);
      }
    }
  }
  if (listen) PQfinish(listen);
  return NULL;
}

/* ---- control socket ------------------------------------------------------------------- */

static int control_fd = -1;

static void control_answer(int fd, json_t *ans /* stolen */) {
  char *s = json_dumps(ans, JSON_COMPACT);
  json_decref(ans);
  if (!s) return;
  size_t n = strlen(s);
  s[n] = '\n';
  const char *p = s;
  size_t left = n + 1;
  while (left > 0) {
    ssize_t w = send(fd, p, left, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    p += w;
    left -= (size_t)w;
  }
  free(s);
}

static json_t *control_request(const json_t *req) {
  const char *op = json_string_value(json_object_get(req, "op"));
  if (op && strcmp(op, "probe") == 0) {
    struct jb_probe p = probe_snapshot();
    return json_pack("{s:b, s:o}", "ok", 1, "probe", jb_probe_json(&p));
  }
  if (op && strcmp(op, "sessions") == 0) {
    json_t *a = json_array();
    pthread_mutex_lock(&W.lock);
    for (size_t i = 0; i < W.n_sessions; i++) {
      struct session *s = W.sessions[i];
      bool ready = atomic_load(&s->sb_ready);
      json_array_append_new(a, json_pack("{s:s, s:s, s:b}", "jobId", s->job_id, "container",
                                         ready ? s->cid : "", "ready", ready));
    }
    pthread_mutex_unlock(&W.lock);
    return json_pack("{s:b, s:o}", "ok", 1, "sessions", a);
  }
  const char *job = json_string_value(json_object_get(req, "jobId"));
  json_t *shimreq = json_object_get(req, "request");
  if (!job || !json_is_object(shimreq))
    return json_pack("{s:b, s:s}", "ok", 0, "error", "want {op:probe|sessions} or {jobId, request}");
  struct session *s = session_lock(job);
  if (!s) return json_pack("{s:b, s:s}", "ok", 0, "error", "no such session on this worker");
  json_t *out;
  jb_error err = {0};
  if (!s->sb_ready) {
    out = json_pack("{s:b, s:s}", "ok", 0, "error", "the session's sandbox is not up");
  } else {
    json_t *copy = json_deep_copy(shimreq);
    json_int_t tmo = json_integer_value(json_object_get(req, "timeoutMs"));
    json_t *ans = jb_shimconn_call(&s->sb.conn, copy, tmo > 0 ? (long)tmo : W.walls.call_timeout_ms, &err);
    json_decref(copy);
    out = ans ? json_pack("{s:b, s:o}", "ok", 1, "answer", ans)
              : json_pack("{s:b, s:s}", "ok", 0, "error", err.msg);
  }
  session_unlock(s);
  /* the shim broke the protocol: an escape signal, whoever asked */
  if (err.code == EPROTO || err.code == EMSGSIZE) {
    char job_id[129];
    snprintf(job_id, sizeof job_id, "%s", job);
    raise_signal(job_id, JB_SIG_PROTOCOL_VIOLATION, err.msg);
  }
  return out;
}

static void *control_main(void *arg) {
  (void)arg;
  char *buf = malloc(JB_SHIM_MAX_LINE + 8192);
  if (!buf) return NULL;
  while (!atomic_load(&W.stopping)) {
    struct pollfd pf = {.fd = control_fd, .events = POLLIN};
    if (poll(&pf, 1, 500) <= 0) continue;
    int fd = accept4(control_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    size_t len = 0;
    for (;;) {
      char *nl = memchr(buf, '\n', len);
      if (!nl) {
        if (len >= JB_SHIM_MAX_LINE + 8192) break;
        struct pollfd cf = {.fd = fd, .events = POLLIN};
        if (poll(&cf, 1, 1000) == 0) {
          if (atomic_load(&W.stopping)) break;
          continue;
        }
        ssize_t r = recv(fd, buf + len, JB_SHIM_MAX_LINE + 8192 - len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
        continue;
      }
      size_t n = (size_t)(nl - buf);
      jb_error err = {0};
      json_t *req = jb_json_parse_object(buf, n, JB_SHIM_MAX_DEPTH, &err);
      control_answer(fd, req ? control_request(req) : json_pack("{s:b, s:s}", "ok", 0, "error", err.msg));
      json_decref(req);
      memmove(buf, nl + 1, len - n - 1);
      len -= n + 1;
    }
    close(fd);
  }
  free(buf);
  return NULL;
}

/* A listening Unix socket at `path` (mode 0600): the fd, or -1 with `err`. */
static int unix_listen(const char *path, const char *what, jb_error *err) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) return jb_fail(err, ENAMETOOLONG, "%s: path too long", what);
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return jb_fail_errno(err, errno, "%s", what);
  unlink(path);
  mode_t old = umask(0177); /* srw------- : 0777 & ~0177 */
  int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
  umask(old);
  if (rc < 0 || listen(fd, 64) < 0) {
    int e = errno;
    close(fd);
    return jb_fail_errno(err, e, "%s %s", what, path);
  }
  return fd;
}

static int control_open(const char *path, jb_error *err) {
  control_fd = unix_listen(path, "JAILBOX_WORKER_CONTROL", err);
  return control_fd < 0 ? -1 : 0;
}

/* ---- audit heads of direct ops ---------------------------------------------------------- */

/* A read, list or stat handed straight to this worker commits its audit entry without a
 * NOTIFY (db/ops.h jb_db_op_direct_store): its head is announced here, on this thread's
 * own time, after the answer has gone — at most one announcement per session every
 * HEAD_ANNOUNCE_MS, the newest head, the session waiting longest first (head_announce.h). An
 * agent reading in a loop thus costs its buyers one announcement per interval, not one per
 * read; a head is never more than about an interval late while the thread keeps up, and the
 * newest is always announced. What stops the worker is announced before it exits. */
#define HEAD_ANNOUNCE_MS 100
static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct jb_head_schedule sched;
  bool stop;
} HA = {.lock = PTHREAD_MUTEX_INITIALIZER, .sched = {.interval_ms = HEAD_ANNOUNCE_MS}};

static long long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Head `seq` of `job` was committed without an announcement. */
static void head_committed(const char *job, long long seq) {
  pthread_mutex_lock(&HA.lock);
  int rc = jb_head_committed(&HA.sched, job, seq, mono_ms());
  if (rc == 0) {
    pthread_cond_signal(&HA.cond);
  } else if (rc < 0) { /* 1,024 sessions waiting on this thread: it is far behind, or the database away */
    slog(JB_LOG_WARN, job, "audit head not announced: too many sessions waiting", NULL);
  }
  pthread_mutex_unlock(&HA.lock);
}

struct announce_args {
  const char *job;
  long long after, seq;
};
static int announce_fn(PGconn *c, void *a, jb_error *err) {
  struct announce_args *x = a;
  return jb_db_announce_audit_head(c, x->job, x->after, &x->seq, err);
}

static void *head_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&HA.lock);
  for (;;) {
    long long now = mono_ms(), wake;
    char job[129];
    struct announce_args x = {.job = job};
    if (!jb_head_next(&HA.sched, now, HA.stop, job, &x.after, &wake)) {
      if (HA.stop) break;
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      long long wait = wake - now;
      ts.tv_sec += wait / 1000;
      ts.tv_nsec += (wait % 1000) * 1000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&HA.cond, &HA.lock, &ts);
      continue;
    }
    pthread_mutex_unlock(&HA.lock);
    jb_error err = {0};
    int rc = with_conn(announce_fn, &x, &err);
    pthread_mutex_lock(&HA.lock);
    if (rc != JB_OK)
      slog(JB_LOG_WARN, job, HA.stop ? "audit head not announced: given up, the worker stops" : "audit head not announced",
           "error", err.msg, NULL);
    /* failed: again after an interval; when stopping, given up with the rest (the heads are
     * in the database) */
    jb_head_done(&HA.sched, job, rc == JB_OK, x.seq, HA.stop);
  }
  pthread_mutex_unlock(&HA.lock);
  return NULL;
}

/* ---- direct ops (sandbox/proto/direct.h) ------------------------------------------------------ */

#define DIRECT_CONNS_MAX 1024 /* connections served at once (jailboxd keeps one per handler thread, JAILBOX_WS_WORKERS at most 256, per instance) */
#define DIRECT_STACK (1024 * 1024) /* bytes of stack of a connection's thread */
static int ops_listen_fd = -1;
static atomic_int direct_conns;

struct direct_args {
  const char *job, *tool, *path, *args_json, *expect_json;
  json_t *args;
  long long op_id;
  char state[20];
  json_t *answer;
  struct op_signal sig;
  long long announce; /* the head it committed without announcing it; 0: none */
};

/* The locked way: the session row locked and the op inserted first (jb_db_op_direct_begin),
 * then run, then completed. `ran` (taken; NULL: run it now) is an answer the op already got
 * from the shim, with `violation`. */
static int direct_locked(PGconn *c, struct direct_args *d, json_t *ran, bool violation, jb_error *err) {
  int rc = jb_db_op_direct_begin(c, d->job, d->tool, d->path, d->args_json, d->expect_json,
                                 &d->op_id, d->state, err);
  if (rc != JB_OK) {
    json_decref(ran);
    return rc;
  }
  struct jb_op_claim op = {.op_id = d->op_id, .decision = "auto"};
  snprintf(op.tool, sizeof op.tool, "%s", d->tool);
  op.path = strdup(d->path);
  op.args_json = strdup(d->args_json);
  if (!op.path || !op.args_json) {
    jb_op_claim_free(&op);
    json_decref(ran);
    jb_db_rollback(c);
    return jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL;
  }
  if (ran) rc = op_settle(c, d->job, &op, d->args, ran, violation, true, &d->sig, &d->answer, err);
  else rc = op_finish(c, d->job, &op, true, &d->sig, &d->answer, err);
  jb_op_claim_free(&op);
  return rc;
}

/* A direct op changes no file, so it may run before anything is stored: it runs first, on the
 * audit head this process knows, and its row, outcome and audit entry go in one round trip
 * after (jb_db_op_direct_store), which commits only if that head has not moved meanwhile —
 * else the op runs again the locked way. An op that tells something of the agent (an escape
 * or alert signal) is completed the locked way with the answer it got (its signal is not
 * raised twice, and a shim it killed is not asked again); its signal is raised even when the
 * locked way refuses it. */
static int direct_fn(PGconn *c, void *a, jb_error *err) {
  struct direct_args *d = a;
  long long head;
  unsigned char prev[JB_AUDIT_HASH_LEN];
  if (!jb_audit_head_peek(d->job, &head, prev)) return direct_locked(c, d, NULL, false, err);
  struct jb_op_claim op = {.decision = "auto", .path = (char *)d->path};
  snprintf(op.tool, sizeof op.tool, "%s", d->tool);
  bool violation = false;
  json_t *ans = op_run(d->job, &op, d->args, &violation);
  struct op_signal probe = {-1, ""};
  int sig = op_signal_of(&op, ans, violation, &probe);
  if (sig >= 0) {
    /* Raised even when the locked way then refuses the op (the session paused or changed, an
     * op queued ahead: op_settle, which would raise it, is not reached) when running it again
     * the queued way would not tell it again: a shim that broke the protocol is not asked
     * again (its channel is dead), and a session the signal ends takes no op. A signal that
     * only alerts is told again by that run (raising it here too would count it twice). */
    if (violation || W.policy.abort[sig]) d->sig = probe;
    return direct_locked(c, d, ans, violation, err);
  }
  json_t *details = op_audit_details(&op, d->args, ans);
  char *text = op_stored_text(ans, true);
  int rc = JB_ERR_FAIL;
  if (details && text) {
    struct jb_audit_head h;
    jb_error serr = {0};
    rc = jb_db_op_direct_store(c, W.keys, d->job, d->tool, d->path, d->args_json, d->expect_json,
                               json_is_true(json_object_get(ans, "ok")), text, details, head, prev,
                               &d->op_id, &h, &serr);
    if (rc == JB_OK) d->announce = h.seq;
    if (rc == JB_ERR_FAIL) *err = serr;
  } else {
    jb_fail(err, ENOMEM, "out of memory");
  }
  free(text);
  json_decref(details);
  if (rc == JB_OK) {
    d->answer = ans;
    return JB_OK;
  }
  json_decref(ans);
  return rc == JB_ERR_CONFLICT ? direct_locked(c, d, NULL, false, err) : rc;
}

static json_t *not_run(const char *state, const char *reason) {
  return json_pack("{s:b, s:s, s:s}", "ran", 0, "state", state, "reason", reason);
}

/* One request of jailboxd: the answer object (new). *head receives the audit head the op
 * committed without announcing it (0: none). */
static json_t *direct_request(const json_t *req, long long *head) {
  const char *job = json_string_value(json_object_get(req, "jobId"));
  const char *tool = json_string_value(json_object_get(req, "tool"));
  const char *path = json_string_value(json_object_get(req, "path"));
  json_t *args = json_object_get(req, "args"), *expect = json_object_get(req, "expect");
  if (!job || !tool || !path || !json_is_object(args) || (expect && !json_is_object(expect) && !json_is_null(expect)))
    return not_run("", "want {jobId, tool, path, args, expect}");
  if (strcmp(tool, "read") && strcmp(tool, "list") && strcmp(tool, "stat"))
    return not_run("", "only read, list and stat are handed over directly");
  /* not s->lock: another op of the session may hold it for its whole call (op_run checks
   * again under it) */
  pthread_mutex_lock(&W.lock);
  struct session *s = find_session(job);
  bool here = s && atomic_load(&s->sb_ready);
  pthread_mutex_unlock(&W.lock);
  if (!here) return not_run("", "the session's sandbox is not on this worker");
  char *args_json = json_dumps(args, JSON_COMPACT);
  char *expect_json = json_is_object(expect) ? json_dumps(expect, JSON_COMPACT) : NULL;
  if (!args_json || (json_is_object(expect) && !expect_json)) {
    free(args_json);
    free(expect_json);
    return not_run("", "out of memory");
  }
  struct direct_args d = {.job = job, .tool = tool, .path = path, .args_json = args_json,
                          .expect_json = expect_json, .args = args, .sig = {-1, ""}};
  jb_error err = {0};
  int rc = with_conn(direct_fn, &d, &err);
  free(args_json);
  free(expect_json);
  if (d.sig.signal >= 0) raise_signal(job, (enum jb_signal)d.sig.signal, d.sig.detail);
  if (rc == JB_OK) *head = d.announce;
  if (rc == JB_OK && d.answer)
    return json_pack("{s:b, s:I, s:o}", "ran", 1, "opId", (json_int_t)d.op_id, "answer", d.answer);
  json_decref(d.answer);
  if (rc == JB_ERR_CONFLICT && !strcmp(d.state, "queued"))
    return not_run("active", "an op queued before it goes first: the queued path, behind it");
  if (rc == JB_ERR_CONFLICT) return not_run(d.state, d.state[0] ? "the session is not active" : "the session changed");
  if (rc == JB_ERR_NOT_FOUND) return not_run("", "no such session");
  if (rc != JB_OK) slog(JB_LOG_WARN, job, "direct op not run", "error", err.msg, NULL);
  return not_run("", "the worker could not run the op");
}

static void *direct_conn_main(void *arg) {
  int fd = (int)(intptr_t)arg;
  size_t cap = 65536, len = 0;
  char *buf = malloc(cap);
  while (buf && !atomic_load(&W.stopping)) {
    char *nl = memchr(buf, '\n', len);
    if (!nl) {
      if (len == cap) {
        if (cap >= JB_DIRECT_MAX_LINE) break; /* over the limit: the connection ends */
        size_t ncap = cap * 4 > JB_DIRECT_MAX_LINE ? JB_DIRECT_MAX_LINE : cap * 4;
        char *nb = realloc(buf, ncap);
        if (!nb) break;
        buf = nb;
        cap = ncap;
      }
      struct pollfd pf = {.fd = fd, .events = POLLIN};
      if (poll(&pf, 1, 1000) == 0) continue;
      ssize_t r = recv(fd, buf + len, cap - len, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      len += (size_t)r;
      continue;
    }
    size_t n = (size_t)(nl - buf);
    jb_error err = {0};
    json_t *req = jb_json_parse_object(buf, n, JB_DIRECT_MAX_DEPTH, &err);
    long long head = 0;
    json_t *da = req ? direct_request(req, &head) : not_run("", err.msg);
    json_t *rid = json_object_get(req, "id"); /* echoed: the caller matches answer to request */
    if (da && json_is_integer(rid)) json_object_set(da, "id", rid);
    control_answer(fd, da);
    /* the answer is out: now its head's announcement */
    if (head > 0) head_committed(json_string_value(json_object_get(req, "jobId")), head);
    json_decref(req);
    memmove(buf, nl + 1, len - n - 1);
    len -= n + 1;
  }
  free(buf);
  close(fd);
  atomic_fetch_sub(&direct_conns, 1);
  return NULL;
}

static void *ops_listen_main(void *arg) {
  (void)arg;
  while (!atomic_load(&W.stopping)) {
    struct pollfd pf = {.fd = ops_listen_fd, .events = POLLIN};
    if (poll(&pf, 1, 500) <= 0) continue;
    int fd = accept4(ops_listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, DIRECT_STACK);
    if (atomic_fetch_add(&direct_conns, 1) >= DIRECT_CONNS_MAX ||
        pthread_create(&t, &at, direct_conn_main, (void *)(intptr_t)fd) != 0) {
      atomic_fetch_sub(&direct_conns, 1);
      close(fd); /* jailboxd takes the queued path */
    }
    pthread_attr_destroy(&at);
  }
  return NULL;
}

/* ---- main ----------------------------------------------------------------------------- */

static void print_help(const char *prog) {
  printf("Usage: %s [--probe]\n\njailbox-worker: builds the walls of jailbox sessions. Settings:\n\n", prog);
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
    printf("  %-28s default: %s\n      %s\n", settings[i].env, settings[i].def[0] ? settings[i].def : "(empty)",
           settings[i].help);
  printf("\n  --probe   probe the walls, print the result as JSON, exit 0 when every required wall is up\n");
  printf("  --explain read GET /v1/jailbox/:jobId (or its walls) on stdin, print the session contract for a person\n");
}

static int load_profile(jb_error *err) {
  const char *file = env_or("JAILBOX_SECCOMP_PROFILE");
  const char *text;
  size_t len;
  if (file[0]) {
    FILE *f = fopen(file, "re");
    if (!f) return jb_fail_errno(err, errno, "JAILBOX_SECCOMP_PROFILE %s", file);
    W.profile_buf = malloc(1 << 20);
    len = W.profile_buf ? fread(W.profile_buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!W.profile_buf || len == 0) return jb_fail(err, EINVAL, "JAILBOX_SECCOMP_PROFILE %s: empty or unreadable", file);
    W.profile_buf[len] = '\0';
    text = W.profile_buf;
    snprintf(W.walls.profile_source, sizeof W.walls.profile_source, "file %s", file);
  } else {
    text = (const char *)jb_seccomp_profile;
    len = jb_seccomp_profile_len;
    snprintf(W.walls.profile_source, sizeof W.walls.profile_source, "built into jailbox-worker");
  }
  json_error_t je;
  json_t *p = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!json_is_object(p) || !json_is_array(json_object_get(p, "syscalls"))) {
    json_decref(p);
    return jb_fail(err, EINVAL, "seccomp profile (%s) is not a Docker profile: %s", W.walls.profile_source, je.text);
  }
  json_decref(p);
  W.walls.profile = text;
  W.walls.profile_len = len;
  unsigned char h[32];
  crypto_hash_sha256(h, (const unsigned char *)text, len);
  sodium_bin2hex(W.walls.profile_sha256, sizeof W.walls.profile_sha256, h, sizeof h);
  return 0;
}

/* JAILBOX_SHIM_SOCKET_DIR into cfg->shim_socket_dir (absolute, made if missing) or
 * cfg->shim_socket_off. The default sits where a socket path fits (sockaddr_un: 108 bytes,
 * of which "/jbshim-XXXXXX/shim.sock" takes 24). 0 or -1 with `err`. */
static int shim_socket_dir(struct jb_walls_config *c, jb_error *err) {
  const char *v = env_or("JAILBOX_SHIM_SOCKET_DIR");
  const size_t fits = 107 - strlen("/jbshim-XXXXXX/" JB_SHIM_SOCKET_NAME);
  char dir[PATH_MAX] = "";
  c->shim_socket_off = strcmp(v, "none") == 0;
  if (c->shim_socket_off) return 0;
  if (v[0]) {
    snprintf(dir, sizeof dir, "%s", v);
  } else {
    char pid[PATH_MAX], abs[PATH_MAX];
    snprintf(pid, sizeof pid, "%s", env_or("JAILBOX_WORKER_PIDFILE"));
    char *slash = strrchr(pid, '/');
    const char *pdir = !slash ? "." : slash == pid ? "/" : (*slash = '\0', pid);
    if (pid[0] && realpath(pdir, abs) && strlen(abs) <= fits) snprintf(dir, sizeof dir, "%s", abs);
    if (!dir[0]) snprintf(dir, sizeof dir, "%s", getenv("TMPDIR") && getenv("TMPDIR")[0] == '/' ? getenv("TMPDIR") : "/tmp");
  }
  if (dir[0] != '/') return jb_fail(err, EINVAL, "JAILBOX_SHIM_SOCKET_DIR must be an absolute path or none");
  if (strlen(dir) > fits || strlen(dir) >= sizeof c->shim_socket_dir)
    return jb_fail(err, ENAMETOOLONG, "JAILBOX_SHIM_SOCKET_DIR %s: at most %zu bytes (a socket path under it must fit 108)", dir, fits);
  if (mkdir(dir, 0700) < 0 && errno != EEXIST) return jb_fail_errno(err, errno, "JAILBOX_SHIM_SOCKET_DIR %s", dir);
  snprintf(c->shim_socket_dir, sizeof c->shim_socket_dir, "%s", dir);
  return 0;
}

static int load_config(jb_error *err) {
  struct jb_walls_config *c = &W.walls;
  bool bad = false;
  snprintf(W.conninfo, sizeof W.conninfo, "%s", env_or("JAILBOX_DATABASE_URL"));
  const char *id = env_or("JAILBOX_WORKER_ID");
  if (id[0]) snprintf(c->worker_id, sizeof c->worker_id, "%s", id);
  else if (gethostname(c->worker_id, sizeof c->worker_id - 1) < 0) snprintf(c->worker_id, sizeof c->worker_id, "worker");
  snprintf(c->docker.socket, sizeof c->docker.socket, "%s", env_or("JAILBOX_DOCKER_SOCKET"));
  snprintf(c->image, sizeof c->image, "%s", env_or("JAILBOX_SANDBOX_IMAGE"));
  snprintf(c->runtime, sizeof c->runtime, "%s", env_or("JAILBOX_RUNTIME"));
  snprintf(c->require_text, sizeof c->require_text, "%s", env_or("JAILBOX_REQUIRE_WALLS"));
  char req[128];
  snprintf(req, sizeof req, "%s", c->require_text);
  char *save = NULL;
  for (char *t = strtok_r(req, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
    int w;
    for (w = 0; w < JB_WALL_COUNT; w++)
      if (strcmp(t, jb_wall_names[w]) == 0) break;
    if (w == JB_WALL_COUNT)
      return jb_fail(err, EINVAL, "JAILBOX_REQUIRE_WALLS: unknown wall '%s' (gvisor, docker, bwrap)", t);
    c->require[w] = true;
  }
  c->override = !(c->require[JB_WALL_GVISOR] && c->require[JB_WALL_DOCKER] && c->require[JB_WALL_BWRAP]);
  c->container_tmp_mib = env_long("JAILBOX_CONTAINER_TMP_MIB", 1, 4096, err, &bad);
  c->jail_tmp_mib = env_long("JAILBOX_JAIL_TMP_MIB", 1, 4096, err, &bad);
  c->start_timeout_ms = env_long("JAILBOX_START_TIMEOUT_MS", 1000, 600000, err, &bad);
  c->call_timeout_ms = env_long("JAILBOX_CALL_TIMEOUT_MS", 100, 3600000, err, &bad);
  if (shim_socket_dir(c, err) < 0) return -1;
  W.prescan_hold = env_long("JAILBOX_PRESCAN_HOLD", 0, 1, err, &bad) == 1;
  W.prescan_hash_max = (long long)env_long("JAILBOX_PRESCAN_HASH_MAX_MIB", 0, 1L << 30, err, &bad) << 20;
  W.max_sessions = env_long("JAILBOX_WORKER_MAX_SESSIONS", 1, 1024, err, &bad);
  long penalty = env_long("JAILBOX_TRUST_PENALTY", 0, 1000, err, &bad);
  if (bad) return -1;
  if (jb_escape_policy_parse(&W.policy, env_or("JAILBOX_ESCAPE_ABORT"), env_or("JAILBOX_ALERT_AFTER"),
                             penalty, err) < 0)
    return -1;
  return load_profile(err);
}

/* Locks the pid file so that jailboxd (and a second worker with the same id) can tell this
 * one runs. */
static int take_pidfile(const char *path, jb_error *err) {
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return jb_fail_errno(err, errno, "pid file %s", path);
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    close(fd);
    return jb_fail(err, EEXIST, "pid file %s is locked: a worker with this id runs already", path);
  }
  char pid[32];
  int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
    close(fd);
    return jb_fail_errno(err, errno, "pid file %s", path);
  }
  return fd; /* kept open (and locked) for the life of the process */
}

static bool probe_ok(const struct jb_probe *p) {
  for (int w = 0; w < JB_WALL_COUNT; w++)
    if (W.walls.require[w] && !p->up[w]) return false;
  return true;
}

static void log_probe(const struct jb_probe *p) {
  for (int w = 0; w < JB_WALL_COUNT; w++)
    slog(p->up[w] ? JB_LOG_INFO : (W.walls.require[w] ? JB_LOG_ERROR : JB_LOG_WARN), NULL, "wall probe",
         "wall", jb_wall_names[w], "up", p->up[w] ? "true" : "false", "required",
         W.walls.require[w] ? "true" : "false", "reason", p->reason[w], NULL);
}

int main(int argc, char **argv) {
  bool probe_only = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      print_help(argv[0]);
      return 0;
    }
    if (!strcmp(argv[i], "--explain")) {
      json_error_t je;
      json_t *c = json_loadf(stdin, JSON_REJECT_DUPLICATES, &je);
      int rc = c ? jb_contract_explain(c, stdout) : -1;
      json_decref(c);
      if (rc < 0) fprintf(stderr, "jailbox-worker: stdin is not a session contract\n");
      return rc < 0 ? 1 : 0;
    }
    if (!strcmp(argv[i], "--probe")) probe_only = true;
    else {
      fprintf(stderr, "jailbox-worker: unknown argument '%s' (see --help)\n", argv[i]);
      return 2;
    }
  }
  jb_log_set_level(env_or("JAILBOX_LOG_LEVEL"));
  signal(SIGPIPE, SIG_IGN);
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);

  jb_error err = {0};
  if (sodium_init() < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    fprintf(stderr, "jailbox-worker: library initialisation failed\n");
    return 1;
  }
  pthread_mutex_init(&W.lock, NULL);
  if (load_config(&err) < 0) {
    fprintf(stderr, "jailbox-worker: %s\n", err.msg);
    return 2;
  }
  if (probe_only) {
    jb_walls_probe(&W.walls, &W.probe);
    json_t *j = jb_probe_json(&W.probe);
    json_object_set_new(j, "required", json_string(W.walls.require_text));
    json_object_set_new(j, "seccompProfileSha256", json_string(W.walls.profile_sha256));
    char *s = json_dumps(j, JSON_INDENT(2));
    printf("%s\n", s ? s : "{}");
    free(s);
    json_decref(j);
    return probe_ok(&W.probe) ? 0 : 1;
  }
  if (!W.conninfo[0]) {
    fprintf(stderr, "jailbox-worker: JAILBOX_DATABASE_URL is required\n");
    return 2;
  }
  const char *keyfile = env_or("JAILBOX_SIGNING_KEY_FILE");
  if (!keyfile[0]) {
    fprintf(stderr, "jailbox-worker: JAILBOX_SIGNING_KEY_FILE is required (the audit signing key)\n");
    return 2;
  }
  if (jb_keyring_load(&W.keys, "/nonexistent", keyfile, &err) < 0) {
    fprintf(stderr, "jailbox-worker: %s\n", err.msg);
    return 2;
  }
  const char *pidfile = env_or("JAILBOX_WORKER_PIDFILE");
  if (pidfile[0] && take_pidfile(pidfile, &err) < 0) {
    jb_log(JB_LOG_FATAL, err.msg, "worker", W.walls.worker_id, NULL);
    return 1;
  }
  slog(JB_LOG_INFO, NULL, "worker starting", "require", W.walls.require_text, "image", W.walls.image,
       "runtime", W.walls.runtime, "seccompProfileSha256", W.walls.profile_sha256, NULL);
  if (W.walls.override)
    slog(JB_LOG_WARN, NULL, "development override: sessions may run with fewer walls", "require",
         W.walls.require_text, NULL);
  if (jb_db_open(&W.db, W.conninfo, 8, 10, &err) < 0) {
    slog(JB_LOG_FATAL, NULL, err.msg, "phase", "database", NULL);
    return 1;
  }
  /* never sign with a key verifiers cannot find: publish it first (after a rotation the
   * worker may hold a newer key than the jailboxd that started it) */
  {
    PGconn *kc = jb_db_acquire(W.db, &err);
    int krc = kc ? jb_keyring_publish_keep_others(W.keys, kc, &err) : -1;
    jb_db_release(W.db, kc);
    if (krc < 0) {
      slog(JB_LOG_FATAL, NULL, err.msg, "phase", "publish signing key", NULL);
      return 1;
    }
  }
  {
    char name[300];
    PGconn *c = jb_db_acquire(W.db, &err);
    if (!c || jb_db_deployment_name(c, name, sizeof name, &err) != JB_OK) {
      jb_db_release(W.db, c);
      slog(JB_LOG_FATAL, NULL, err.msg, "phase", "deployment name", NULL);
      return 1;
    }
    jb_db_release(W.db, c);
    unsigned char h[32];
    crypto_hash_sha256(h, (const unsigned char *)name, strlen(name));
    sodium_bin2hex(W.walls.deployment, sizeof W.walls.deployment, h, 8);
    slog(JB_LOG_INFO, NULL, "deployment", "name", name, "label", W.walls.deployment, NULL);
  }
  startup_cleanup();
  jb_walls_probe(&W.walls, &W.probe);
  log_probe(&W.probe);
  pthread_t control_thread;
  bool control = false;
  const char *cpath = env_or("JAILBOX_WORKER_CONTROL");
  if (cpath[0]) {
    if (control_open(cpath, &err) < 0) slog(JB_LOG_ERROR, NULL, err.msg, "phase", "control socket", NULL);
    else control = pthread_create(&control_thread, NULL, control_main, NULL) == 0;
  }
  pthread_t ops_thread;
  bool ops = pthread_create(&ops_thread, NULL, ops_main, NULL) == 0;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&HA.cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_t head_thread;
  bool heads = pthread_create(&head_thread, NULL, head_main, NULL) == 0;
  /* without it the heads of direct reads would never be announced: no ops socket then, and
   * jailboxd sends every op the queued way */
  if (!heads) slog(JB_LOG_ERROR, NULL, "cannot start the audit-head thread: no ops socket", NULL);
  pthread_t ops_listen_thread;
  bool direct = false;
  const char *opath = env_or("JAILBOX_WORKER_OPS_SOCKET");
  if (opath[0] && heads) {
    ops_listen_fd = unix_listen(opath, "JAILBOX_WORKER_OPS_SOCKET", &err);
    if (ops_listen_fd < 0) slog(JB_LOG_ERROR, NULL, err.msg, "phase", "ops socket", NULL);
    else direct = pthread_create(&ops_listen_thread, NULL, ops_listen_main, NULL) == 0;
  }
  slog(JB_LOG_INFO, NULL, "worker ready", "control", control ? cpath : "", NULL);

  /* wake-ups: a change notification (sessions and their launch jobs are inserted together),
   * a signal, or once a second to catch anything missed */
  PGconn *listen = NULL;
  long long last_probe = W.probe.at_ms;
  while (!atomic_load(&W.stopping)) {
    /* jb_kill: an abort waits for an op this worker runs (api/agent/escape.h) */
    ensure_listening(&listen, "LISTEN jb_change; LISTEN jb_kill");
    drain_queue();
    reap_sessions();
    /* a wall that was down may have been fixed: probe again now and then */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long now = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    struct jb_probe snap = probe_snapshot();
    if (!probe_ok(&snap) && now - last_probe > 30000) {
      struct jb_probe p;
      jb_walls_probe(&W.walls, &p);
      pthread_mutex_lock(&W.lock);
      W.probe = p;
      pthread_mutex_unlock(&W.lock);
      last_probe = now;
      log_probe(&p);
    }
    struct pollfd pf[2] = {{.fd = sfd, .events = POLLIN}, {.fd = listen ? PQsocket(listen) : -1, .events = POLLIN}};
    int pr = poll(pf, 2, 1000);
    if (pr > 0 && (pf[0].revents & POLLIN)) {
      struct signalfd_siginfo si;
      if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        slog(JB_LOG_INFO, NULL, "worker stopping", "signal", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT", NULL);
        atomic_store(&W.stopping, true);
      }
    }
    if (listen && pr > 0 && (pf[1].revents & POLLIN)) {
      PQconsumeInput(listen);
      PGnotify *n;
      while ((n = PQnotifies(listen))) {
        if (!strcmp(n->relname, "jb_kill") && n->extra && n->extra[0]) kill_for_abort(n->extra);
        PQfreemem(n);
      }
    }
  }

  /* stop: every session of this worker ends with it (its container would not outlive the
   * attach connection anyway: the shim's stdin closes) */
  pthread_mutex_lock(&W.lock);
  size_t n = W.n_sessions;
  struct session *list[1024];
  memcpy(list, W.sessions, n * sizeof list[0]);
  pthread_mutex_unlock(&W.lock);
  for (size_t i = 0; i < n; i++) {
    struct session *s = list[i];
    atomic_store(&s->teardown, true);
    pthread_mutex_lock(&s->lock);
    char cid[80] = "";
    if (s->sb_ready) snprintf(cid, sizeof cid, "%s", s->sb.container_id);
    pthread_mutex_unlock(&s->lock);
    fail_session(s->job_id, "worker stopped");
    if (cid[0]) jb_container_remove(&W.walls, cid, &err);
  }
  for (size_t i = 0; i < n; i++) pthread_join(list[i]->thread, NULL);
  /* the threads that may still hold a session or a connection end first: an op they run
   * fails at once now that the containers are gone */
  if (control) pthread_join(control_thread, NULL);
  if (ops) pthread_join(ops_thread, NULL);
  if (direct) pthread_join(ops_listen_thread, NULL);
  for (int waited = 0; atomic_load(&direct_conns) > 0; waited += 10) { /* detached; each ends after its request */
    if (waited >= 10000) { /* one stuck on a peer that reads nothing: exit without freeing */
      slog(JB_LOG_WARN, NULL, "worker stopped with an ops-socket connection still open", NULL);
      return 0;
    }
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
  /* the heads the last direct ops committed, announced before the pool closes */
  pthread_mutex_lock(&HA.lock);
  HA.stop = true;
  pthread_cond_signal(&HA.cond);
  pthread_mutex_unlock(&HA.lock);
  if (heads) pthread_join(head_thread, NULL);
  for (size_t i = 0; i < n; i++) session_free(list[i]);
  W.n_sessions = 0;
  if (ops_listen_fd >= 0) {
    close(ops_listen_fd);
    unlink(opath);
  }
  if (control_fd >= 0) {
    close(control_fd);
    unlink(cpath);
  }
  if (listen) PQfinish(listen);
  jb_db_close(W.db);
  jb_keyring_free(W.keys);
  free(W.profile_buf);
  curl_global_cleanup();
  slog(JB_LOG_INFO, NULL, "worker stopped", NULL);
  return 0;
}
