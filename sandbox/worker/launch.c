/* launch.c — a session's sandbox from its launch job to its removal. The main thread claims
 * launch and teardown jobs from PostgreSQL (FOR UPDATE SKIP LOCKED, so workers on many hosts
 * share one queue); each launch gets a session thread that pins and pre-scans the workspace,
 * gives the jail access to it, builds the three walls (walls_launch.c), writes the session
 * contract, moves the session on, watches the sandbox until the session ends, removes it and
 * gives the workspace back. A teardown job removes the session's containers. What a previous
 * run of the same worker id left behind is taken over or cleared in adopt.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "db/audit_store.h"
#include "db/events.h"
#include "db/launch_jobs.h"
#include "db/sessions.h"
#include "lib/metrics.h"
#include "sandbox/worker/memcg.h"
#include "sandbox/worker/oomwatch.h"
#include "sandbox/worker/worker.h"
#include "sandbox/worker/hooks_path.h"
#include "sandbox/worker/workspace_scan.h"

#define PRESCAN_ENTRY_MAX (32 * 1024) /* bytes of a pre-scan recorded whole in its entry */
#define PRESCAN_FLAGGED_BYTES (16 * 1024) /* bytes of flagged paths in an entry past that */

/* how long a dead sandbox's running command may take to store its outcome before the
 * session ends (its spawner's channel is gone: it ends at once; the database write is what
 * takes time) */
#define EXEC_STORE_WAIT_MS 5000
/* one wait on a running sandbox, before the stop flag is looked at again */
#define WATCH_MS 3000
/* how long an ending sandbox may take to stop by itself once its channels are closed, before
 * its removal kills it (sandbox_quit) */
#define SANDBOX_QUIT_MS 3000

/* ---- the workspace ---------------------------------------------------------------------- */

/* Walks the absolute `path` from "/" one component at a time without following any symbolic
 * link (O_PATH|O_NOFOLLOW), and stats the directory it names into *st. Returns 0, or -1 with
 * `err` when a component is missing, is a symbolic link or is not a directory. */
static int pin_workspace(const char *path, struct stat *st, jb_error *err) {
  if (path[0] != '/') return jb_fail(err, EINVAL, "path %s is not absolute", path);
  cleanup_close int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return jb_fail_errno(err, errno, "open /");
  const char *p = path;
  while (*p) {
    while (*p == '/') p++;
    size_t n = strcspn(p, "/");
    if (n == 0) break;
    char name[256];
    if (n >= sizeof name) return jb_fail(err, ENAMETOOLONG, "a component of %s is too long", path);
    memcpy(name, p, n);
    name[n] = '\0';
    int next = openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0)
      return jb_fail_errno(err, errno,
                           "%s changed since the session was opened ('%s' is no longer a "
                           "plain directory)",
                           path, name);
    close(fd);
    fd = next;
    p += n;
  }
  if (fstat(fd, st) < 0) return jb_fail_errno(err, errno, "stat %s", path);
  return 0;
}

/* Pins `path` again and checks it is the directory of `first`. */
static int same_workspace(const char *path, const struct stat *first, jb_error *err) {
  struct stat now;
  if (pin_workspace(path, &now, err) < 0) return -1;
  if (now.st_dev != first->st_dev || now.st_ino != first->st_ino)
    return jb_fail(err, EXDEV, "%s was replaced by another directory during the launch", path);
  return 0;
}

/* ---- the session and its job in the database ---------------------------------------------- */

/* Moves `job` from one of `from` to `to` with its audit entry, and publishes the change once
 * committed (worker_publish: the buyer's sockets live in jailboxd). */
static int transition_stored(struct jb_worker *w, const char *job, const char *const from[],
                             const char *to, const char *reason, struct jb_transition *out,
                             jb_error *err) {
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  if (!conn.pg) return JB_ERR_FAIL;
  int rc = jb_db_session_transition(conn.pg, jb_signer_key(w->signer), job, from, to, reason,
                                    "system", out, err);
  if (rc != JB_OK) return rc;
  worker_publish(w, conn.pg, job, JB_EVENT_STATE,
                 json_pack("{s:s,s:s,s:s,s:s?,s:s}", "jobId", job, "state", to, "previous",
                           out->previous, "reason", reason, "actor", "system"));
  worker_publish(w, conn.pg, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&out->head));
  return rc;
}

/* transition_stored, logged. */
static int transition(struct jb_worker *w, const char *job, const char *const from[],
                      const char *to, const char *reason, jb_error *err) {
  struct jb_transition out = {0};
  int rc = transition_stored(w, job, from, to, reason, &out, err);
  if (rc == JB_OK)
    slog(w, JB_LOG_INFO, job, "session state", "from", out.previous, "to", to, "reason",
         reason ? reason : "", NULL);
  else if (rc == JB_ERR_CONFLICT)
    slog(w, JB_LOG_INFO, job, "session state unchanged", "wanted", to, "current", out.state, NULL);
  return rc;
}

static const char *const live_states[] = {JB_LIVE_STATES, NULL};

void session_fail(struct jb_worker *w, const char *job, const char *reason) {
  jb_error err = {0};
  int rc = transition(w, job, live_states, "failed", reason, &err);
  if (rc == JB_ERR_FAIL) slog(w, JB_LOG_ERROR, job, err.msg, "step", "fail session", NULL);
}

/* Stores the session contract of `job` (NULL: nothing to store). */
static void store_walls(struct jb_worker *w, const char *job, json_t *contract) {
  if (!contract) return;
  cleanup_free char *text = json_dumps(contract, JSON_COMPACT);
  if (!text) return;
  jb_error err = {0};
  cleanup_conn struct worker_conn conn = worker_conn(w, &err);
  if (!conn.pg || jb_db_session_set_walls(conn.pg, job, text, &err) == JB_ERR_FAIL)
    slog(w, JB_LOG_ERROR, job, err.msg, "step", "store walls", NULL);
}

/* Ends launch or teardown job `id` of session `job` (`result`: borrowed, may be NULL). */
static void finish_job(struct jb_worker *w, const char *job, long long id, bool ok,
                       const char *error, json_t *result) {
  cleanup_free char *text = result ? json_dumps(result, JSON_COMPACT) : NULL;
  jb_error err = {0};
  cleanup_conn struct worker_conn conn = worker_conn(w, &err);
  if (!conn.pg || jb_db_job_finish(conn.pg, id, ok, error, text, &err) == JB_ERR_FAIL)
    slog(w, JB_LOG_ERROR, job, err.msg, "step", "finish job", NULL);
}

/* The pre-scan's audit details (new): `scan` itself, or — when its JSON is over
 * PRESCAN_ENTRY_MAX bytes (up to JB_SCAN_FLAGGED_MAX flagged paths of 4 KiB each) — a copy
 * whose `flagged` holds the first entries that fit PRESCAN_FLAGGED_BYTES, with `flaggedListed`
 * (how many) and `flaggedSha256` (of the whole list's JSON, JSON_COMPACT | JSON_SORT_KEYS, as
 * the session's contract shows it), so that the entry fits the chain's size cap whatever the
 * workspace holds. NULL when out of memory. */
static json_t *prescan_details(json_t *scan) {
  char *t = json_dumps(scan, JSON_COMPACT | JSON_SORT_KEYS);
  size_t n = t ? strlen(t) : 0;
  free(t);
  if (!t || n <= PRESCAN_ENTRY_MAX) return t ? json_incref(scan) : NULL;
  json_t *all = json_object_get(scan, "flagged"), *d = json_copy(scan), *kept = json_array();
  char *at = json_dumps(all, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  size_t used = 2, k = 0;
  for (; d && kept && at && k < json_array_size(all); k++) {
    char *e = json_dumps(json_array_get(all, k), JSON_COMPACT | JSON_SORT_KEYS);
    size_t el = e ? strlen(e) : SIZE_MAX / 2;
    free(e);
    if (used + el + 1 > PRESCAN_FLAGGED_BYTES) break;
    used += el + 1;
    json_array_append(kept, json_array_get(all, k));
  }
  if (!d || !kept || !at) {
    free(at);
    json_decref(d);
    json_decref(kept);
    return NULL;
  }
  unsigned char h[32];
  char hx[65];
  crypto_hash_sha256(h, (const unsigned char *)at, strlen(at));
  sodium_bin2hex(hx, sizeof hx, h, sizeof h);
  free(at);
  json_object_set_new(d, "flagged", kept);
  json_object_set_new(d, "flaggedListed", json_integer((json_int_t)k));
  json_object_set_new(d, "flaggedSha256", json_string(hx));
  return d;
}

/* The pre-scan's audit entry and its jailbox:pre_scan event; the contract shows the pre-scan
 * at once (the walls join it once they are up), so that a buyer who connects later is sent
 * it too. */
static int prescan_stored(struct jb_worker *w, const char *job, json_t *scan, jb_error *err) {
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  if (!conn.pg) return JB_ERR_FAIL;
  struct jb_audit_head h;
  json_t *details = prescan_details(scan);
  int rc = details ? jb_audit_append(conn.pg, jb_signer_key(w->signer), job, "pre_scan", NULL,
                                     details, &h, err)
                   : jb_fail(err, ENOMEM, "out of memory");
  json_decref(details);
  if (rc != JB_OK) return rc;
  json_t *pre = json_pack("{s:O}", "prescan", scan);
  char *text = pre ? json_dumps(pre, JSON_COMPACT) : NULL;
  json_decref(pre);
  if (text) {
    jb_error werr = {0};
    if (jb_db_session_set_walls(conn.pg, job, text, &werr) == JB_ERR_FAIL)
      slog(w, JB_LOG_WARN, job, werr.msg, "step", "store pre-scan", NULL);
    free(text);
  }
  worker_publish(w, conn.pg, job, JB_EVENT_PRE_SCAN,
                 json_pack("{s:s,s:O}", "jobId", job, "prescan", scan));
  worker_publish(w, conn.pg, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&h));
  return JB_OK;
}

/* ---- the keeper ------------------------------------------------------------------------------ */

/* The grant `g` as a memfd (the keeper holds it for the worker that re-adopts the session, so
 * that the workspace is given back at the session's end), or -1. */
static int grant_memfd(const struct jb_workspace_grant *g) {
  int fd = memfd_create("jailbox-grant", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (jb_workspace_grant_save(fd, g) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Hands the keeper copies of running session `s`'s channels and workspace grant, so that a
 * worker that starts under this id after this one died or was upgraded can take the session
 * over (adopt.c; only with the socket channel: the attach stream ends with the worker); sets
 * s->kept. A failure is logged: the session then ends with this worker. */
static void keep_channels(struct jb_session *s) {
  if (s->sb.conn.sock < 0) return;
  int gfd = grant_memfd(&s->grant);
  jb_error err = {0};
  if (keeper_put(s->w, s->job_id, s->sb.container_id, s->sb.conn.sock, s->sb.spawner.fd, gfd,
                 &err) < 0)
    slog(s->w, JB_LOG_WARN, s->job_id, "the session will not outlive this worker", "error", err.msg,
         NULL);
  else
    atomic_store(&s->kept, true);
  if (gfd >= 0) close(gfd);
}

/* ---- the launch --------------------------------------------------------------------------- */

/* The launch of `s` failed with the reason `fmt`…: the session fails, and its launch job
 * with it (`result`: borrowed, may be NULL). Returns -1. */
static int launch_failed(struct jb_session *s, json_t *result, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int launch_failed(struct jb_session *s, json_t *result, const char *fmt, ...) {
  char reason[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  session_fail(s->w, s->job_id, reason);
  finish_job(s->w, s->job_id, s->launch_job, false, reason, result);
  return -1;
}

/* Adds the tree hash v1 of the workspace at `path` (lib/treehash.h) to the pre-scan `scan`:
 * treeSha256, or treeSha256 null and treeSha256Why — the hash's reason, "replaced" when `path`
 * is no longer the directory pinned as `pinned`, "error" on a failure (logged). */
static void prescan_tree_hash(struct jb_session *s, const struct stat *pinned, json_t *scan) {
  char hex[65] = "";
  const char *why = "replaced";
  jb_error err = {0};
  int fd = open(s->workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == pinned->st_dev &&
      st.st_ino == pinned->st_ino && jb_tree_hash_at(fd, &s->w->tree_hash, hex, &why, &err) < 0) {
    slog(s->w, JB_LOG_WARN, s->job_id, "tree hash failed", "error", err.msg, NULL);
    why = "error";
  }
  if (fd >= 0) close(fd);
  if (hex[0])
    json_object_set_new(scan, "treeSha256", json_string(hex));
  else
    json_object_update_new(scan, json_pack("{s:n,s:s}", "treeSha256", "treeSha256Why", why));
}

/* The pre-scan of the workspace pinned as `pinned` (counts, flagged entries, a directory
 * hash, the tree hash), logged and recorded: 0 with *scan_out (new), or -1 with the launch
 * failed. */
static int prescan(struct jb_session *s, const struct stat *pinned, json_t **scan_out) {
  struct jb_worker *w = s->w;
  jb_error err = {0};
  struct jb_scan_result scan;
  if (jb_workspace_prescan(s->workspace, 100000, w->prescan_hash_max,
                           w->set.prescan_exclude_secrets, &scan, &err) < 0)
    return launch_failed(s, NULL, "pre-scan failed: %s", err.msg);
  json_t *scan_json = jb_scan_json(&scan);
  if (scan_json) jb_prescan_hooks_path(s->workspace, scan.repos, scan_json); /* git's own */
  if (scan_json) prescan_tree_hash(s, pinned, scan_json); /* before the grant adds its bits */
  jb_scan_result_free(&scan);
  slog_json(w, JB_LOG_INFO, s->job_id, "pre-scan", "prescan", json_incref(scan_json));
  if (prescan_stored(w, s->job_id, scan_json, &err) != JB_OK) {
    json_decref(scan_json);
    return launch_failed(s, NULL, "pre-scan could not be recorded: %s", err.msg);
  }
  *scan_out = scan_json;
  return 0;
}

/* Builds the walls over the workspace pinned as `pinned`, and checks that what was mounted is
 * still that directory (a swap during the launch fails the session). 0 with the sandbox in
 * *sb, or -1 with the launch failed and nothing left standing. `scan` is borrowed. */
static int build_walls(struct jb_session *s, const struct stat *pinned, json_t *scan,
                       struct jb_sandbox *sb) {
  struct jb_worker *w = s->w;
  const char *job = s->job_id;
  jb_error err = {0};
  /* the session's image: allowed here too, present on this daemon, described as it is now */
  if (!jb_image_allowed(w->set.sandbox_images, w->walls.image, s->image))
    return launch_failed(s, NULL,
                         "wall docker: image %s is not allowed on worker %s "
                         "(JAILBOX_SANDBOX_IMAGES: %s)",
                         s->image, w->walls.worker_id, w->set.sandbox_images);
  struct jb_image_info img;
  if (jb_image_inspect(&w->walls, s->image, &img, &err) < 0) {
    slog(w, JB_LOG_WARN, job, "walls failed", "wall", "docker", "reason", err.msg, NULL);
    return launch_failed(s, NULL, "wall docker: %s", err.msg);
  }
  struct jb_probe probe = worker_probe(w);
  jb_probe_set_image(&probe, &img);
  struct jb_walls_config *cfg = malloc(sizeof *cfg);
  if (!cfg) return launch_failed(s, NULL, "worker: out of memory");
  *cfg = w->walls;
  snprintf(cfg->image, sizeof cfg->image, "%s", s->image);
  json_t *labels = json_pack("{s:s}", "jailbox.session", job);
  enum jb_wall failed;
  int rc = jb_sandbox_launch(cfg, &probe, job, s->workspace, s->limits, labels, sb, &failed, &err);
  free(cfg);
  json_decref(labels);
  if (rc < 0) {
    char reason[700];
    snprintf(reason, sizeof reason, "wall %s", err.msg);
    if (sb->contract) {
      json_object_set(sb->contract, "prescan", scan);
      store_walls(w, job, sb->contract);
      json_decref(sb->contract);
    }
    slog(w, JB_LOG_WARN, job, "walls failed", "wall",
         failed < JB_WALL_COUNT ? jb_wall_names[failed] : "?", "reason", reason, NULL);
    json_auto_t *res = json_pack("{s:O}", "prescan", scan);
    return launch_failed(s, res, "%s", reason);
  }
  if (same_workspace(s->workspace, pinned, &err) < 0) {
    jb_sandbox_destroy(&w->walls, sb); /* the contract with it */
    return launch_failed(s, NULL, "workspace: %s", err.msg);
  }
  return 0;
}

/* Launches session `s`: prescanning, the workspace pinned (no symbolic link on the way, the
 * same directory at every step), pre-scanned, opened to the jail's group, the walls built,
 * the contract stored, the session on to awaiting_agent (unless JAILBOX_PRESCAN_HOLD) and the
 * launch job done. 0 with the sandbox up in s->sb, or -1 when the launch ended (its job
 * finished, the session failed unless it had left created). */
static int launch(struct jb_session *s) {
  struct jb_worker *w = s->w;
  const char *job = s->job_id;
  jb_error err = {0};
  static const char *const from_created[] = {"created", NULL};
  int rc = transition(w, job, from_created, "prescanning", NULL, &err);
  if (rc != JB_OK) {
    finish_job(w, job, s->launch_job, rc == JB_ERR_CONFLICT,
               rc == JB_ERR_CONFLICT ? "session no longer in created" : err.msg, NULL);
    return -1;
  }
  /* the workspace was resolved when the session was opened; pin what that path names now */
  struct stat pinned;
  if (pin_workspace(s->workspace, &pinned, &err) < 0)
    return launch_failed(s, NULL, "workspace: %s", err.msg);
  json_auto_t *scan = NULL;
  if (prescan(s, &pinned, &scan) < 0) return -1;
  /* the jailed shim runs as 65534:65534: give that group access to the workspace — only
   * to the directory pinned above, and a launch without it does not go ahead */
  if (same_workspace(s->workspace, &pinned, &err) < 0 ||
      jb_workspace_grant(s->workspace, JB_JAIL_GID, 100000, &s->grant, &err) < 0)
    return launch_failed(s, NULL, "workspace: %s", err.msg);
  struct jb_sandbox sb;
  if (build_walls(s, &pinned, scan, &sb) < 0) return -1;

  json_object_set(sb.contract, "prescan", scan);
  store_walls(w, job, sb.contract);
  pthread_mutex_lock(&s->lock);
  s->sb = sb;
  s->sb_ready = true;
  pthread_mutex_unlock(&s->lock);
  pthread_mutex_lock(&w->lock);
  snprintf(s->cid, sizeof s->cid, "%s", sb.container_id);
  pthread_mutex_unlock(&w->lock);
  keep_channels(s);
  (void)session_lease(w, job);
  char ready[32];
  snprintf(ready, sizeof ready, "%ld", sb.ready_ms);
  const char *chan =
      json_string_value(json_object_get(json_object_get(sb.contract, "shimChannel"), "kind"));
  slog(w, JB_LOG_INFO, job, "walls up", "container", sb.container_id, "readyMs", ready,
       "shimChannel", chan ? chan : "?", NULL);

  if (!w->set.prescan_hold && !atomic_load(&s->teardown)) {
    static const char *const from_pre[] = {"prescanning", NULL};
    rc = transition(w, job, from_pre, "awaiting_agent", NULL, &err);
    if (rc == JB_ERR_FAIL) slog(w, JB_LOG_ERROR, job, err.msg, "step", "awaiting_agent", NULL);
  }
  json_auto_t *res = json_pack("{s:s, s:I, s:O}", "containerId", sb.container_id, "readyMs",
                               (json_int_t)sb.ready_ms, "prescan", scan);
  finish_job(w, job, s->launch_job, true, NULL, res);
  return 0;
}

/* ---- watching and removing the sandbox ------------------------------------------------------ */

/* Why the sandbox ended, from Docker's view of the container; *code receives its exit code
 * (-1 when it cannot be read), *oom whether it was killed for memory. */
static void exit_reason(struct jb_worker *w, const char *id, char *out, size_t len,
                        long long *code_out, bool *oom) {
  *code_out = -1;
  *oom = false;
  char path[128];
  snprintf(path, sizeof path, "/containers/%s/json", id);
  json_t *in = NULL;
  jb_error err = {0};
  if (jb_docker_expect(&w->walls.docker, "GET", path, NULL, 10000, &in, &err) < 0) {
    snprintf(out, len, "the sandbox is gone (%s)", err.msg);
    return;
  }
  json_t *st = json_object_get(in, "State");
  json_int_t code = json_integer_value(json_object_get(st, "ExitCode"));
  *code_out = code;
  *oom = json_is_true(json_object_get(st, "OOMKilled"));
  if (*oom) {
    json_int_t mem =
        json_integer_value(json_object_get(json_object_get(in, "HostConfig"), "Memory"));
    snprintf(out, len, "out of memory: the sandbox went over its limit of %lld MiB and was killed",
             (long long)(mem / (1024 * 1024)));
  } else {
    snprintf(out, len, "the sandbox ended unexpectedly (exit code %lld)", (long long)code);
  }
  json_decref(in);
}

/* The OOM watch of container `cid` (oomwatch.h) on its memory cgroup, found from its main
 * process; a watch that sees nothing when there is no cgroup (logged), NULL when out of
 * memory. */
static struct jb_oomwatch *watch_memcg(struct jb_worker *w, const char *job, const char *cid) {
  struct jb_memcg mc = {.dirfd = -1}, *m = &mc;
  char path[128];
  snprintf(path, sizeof path, "/containers/%s/json", cid);
  json_t *in = NULL;
  jb_error err = {0};
  if (jb_docker_expect(&w->walls.docker, "GET", path, NULL, 10000, &in, &err) == 0) {
    json_int_t pid = json_integer_value(json_object_get(json_object_get(in, "State"), "Pid"));
    if (pid <= 0)
      jb_fail(&err, ESRCH, "the container has no process");
    else if (jb_memcg_open((pid_t)pid, "/sys/fs/cgroup", m, &err) == 0)
      err.msg[0] = '\0';
  }
  json_decref(in);
  if (m->dirfd < 0)
    slog(w, JB_LOG_WARN, job, "memory cgroup not found: an OOM kill is known from Docker only",
         "error", err.msg, NULL);
  struct jb_oomwatch *ow = NULL;
  bool found = m->dirfd >= 0;
  if (jb_oomwatch_start(m, &ow, &err) != 0 && found)
    slog(w, JB_LOG_WARN, job, "no OOM notification: the memory cgroup is sampled instead", "error",
         err.msg, NULL);
  return ow;
}

/* Watches the sandbox of `s` until it ends: removal by a teardown, the worker stopping, or
 * death — then the session fails, and an end other than out of memory is an escape signal.
 * Out of memory is what the container's memory cgroup says (oomwatch.h: the kernel's OOM
 * notification, read the moment it comes while the cgroup still exists, kept for the session;
 * where it cannot be had, the counters sampled every WATCH_MS) or what Docker says
 * (State.OOMKilled). The cgroup goes with the container, so the notification, not a read
 * after the end, is what makes a kill that ends the sandbox at once known. */
static void watch_sandbox(struct jb_session *s) {
  struct jb_worker *w = s->w;
  const char *job = s->job_id, *cid = s->sb.container_id;
  jb_error err = {0};
  struct jb_oomwatch *ow = watch_memcg(w, job, cid);
  atomic_store(&s->oomwatch, ow); /* a command the sandbox's end killed asks it too */
  while (!atomic_load(&s->teardown) && !atomic_load(&w->stopping)) {
    char path[160];
    snprintf(path, sizeof path, "/containers/%s/wait?condition=not-running", cid);
    long status = 0;
    json_t *ans = NULL;
    /* bounded, so that a stop that leaves the sandbox running is seen within WATCH_MS; each
     * time it runs out, a cgroup without notification is sampled */
    if (jb_docker_call(&w->walls.docker, "POST", path, NULL, WATCH_MS, &status, &ans, &err) < 0) {
      json_decref(ans);
      jb_oomwatch_sample(ow);
      if (err.code == ETIMEDOUT) continue;
      slog(w, JB_LOG_WARN, job, "waiting on the sandbox failed; retrying", "error", err.msg, NULL);
      sleep(1);
      continue;
    }
    json_decref(ans);
    long long ended_ms = jb_now_ms();
    if (atomic_load(&s->teardown) || atomic_load(&w->stopping)) break;
    char why[300];
    long long code;
    bool docker_oom;
    exit_reason(w, cid, why, sizeof why, &code, &docker_oom);
    struct jb_oom_record seen;
    /* An OOM decides only the end it caused: one seen within JB_OOM_END_WINDOW_MS before it,
     * and never the syscall filter's SIGSYS (jb_oom_ended_it). An earlier OOM, which killed one command
     * while the sandbox lived on, excuses nothing later. Docker's OOMKilled stays set for the
     * container's life: it decides only where the kernel's notification could not be had. */
    bool any = jb_oomwatch_seen(ow, &seen);
    bool memcg_oom = any && ended_ms - seen.last_ms <= JB_OOM_END_WINDOW_MS;
    bool oom = jb_oom_ended_it(any, &seen, ended_ms, code, docker_oom);
    if (oom && memcg_oom && !docker_oom)
      snprintf(why, sizeof why,
               "out of memory: the sandbox's memory cgroup counted %lld OOM kill(s) and %lld "
               "time(s) over its limit (exit code %lld)",
               seen.counts.oom_kill, seen.counts.oom, code);
    else if (!oom && docker_oom) /* exit_reason's words were of an OOM that did not end it */
      snprintf(why, sizeof why,
               "the sandbox ended unexpectedly (exit code %lld); the OOM kill in it %s did not "
               "end it",
               code, seen.last_ms ? "seen earlier" : "Docker reports");
    char tail[300];
    pthread_mutex_lock(&s->lock);
    /* with the socket channel the attach stream (stderr) is read only during calls */
    jb_shimconn_collect_stderr(&s->sb.conn, 500);
    jb_shimconn_stderr(&s->sb.conn, tail, sizeof tail);
    pthread_mutex_unlock(&s->lock);
    /* for the log: what the memory cgroup counted ("unknown": never read), how the OOM was
     * known, and how long before Docker reported the end */
    char kills[24] = "unknown", lead[24] = "";
    if (seen.counted) snprintf(kills, sizeof kills, "%lld", seen.counts.oom_kill);
    if (memcg_oom) snprintf(lead, sizeof lead, "%lld", ended_ms - seen.last_ms);
    slog(w, JB_LOG_WARN, job, "sandbox ended", "reason", why, "stderr", tail, "memcgOomKills",
         kills, "oomKnownFrom",
         !oom        ? "none"
         : memcg_oom ? jb_oom_source_name(seen.source)
                     : "docker",
         "oomKnownMsBeforeEnd", lead, NULL);
    if (atomic_load(&s->teardown) || atomic_load(&w->stopping)) break;
    /* a command running when the sandbox died ends at once (its spawner's channel is gone):
     * its op records how (oom) before the session's end would fail it as unknown */
    if (!exec_op_wait_stored(job, EXEC_STORE_WAIT_MS))
      slog(w, JB_LOG_WARN, job, "a command's outcome was not stored before the session ended",
           NULL);
    /* an out-of-memory kill is the limit doing its work; any other end of the shim is an
     * escape signal: killed by the syscall filter (bwrap reports 128 + SIGSYS), killed from
     * outside (128 + SIGKILL, or the container vanished), or exited by itself */
    if (!oom) {
      char detail[700];
      snprintf(detail, sizeof detail, "%s%s%s", why, tail[0] ? "; stderr: " : "", tail);
      raise_signal(w, job,
                   code == 128 + SIGSYS                  ? JB_SIG_SECCOMP_KILL
                   : (code == 128 + SIGKILL || code < 0) ? JB_SIG_SANDBOX_DIED
                                                         : JB_SIG_SHIM_EXIT,
                   detail);
    }
    session_fail(w, job, why); /* quiet when the signal ended it already */
    break;
  }
}

/* The jail can no longer write: gives the workspace back its groups and modes. */
static void restore_workspace(struct jb_session *s) {
  if (s->grant.valid) {
    jb_error err = {0};
    long n = jb_workspace_restore(s->workspace, JB_JAIL_GID, JB_JAIL_UID, &s->grant, &err);
    char nb[24];
    snprintf(nb, sizeof nb, "%ld", n);
    if (n < 0)
      slog(s->w, JB_LOG_WARN, s->job_id, "workspace access not restored", "error", err.msg, NULL);
    else
      slog(s->w, JB_LOG_INFO, s->job_id, "workspace access restored", "entries", nb, NULL);
  }
  jb_workspace_grant_free(&s->grant);
}

int session_lease(struct jb_worker *w, const char *job) {
  jb_error err = {0};
  cleanup_conn struct worker_conn conn = worker_conn(w, &err);
  int rc = conn.pg ? jb_db_session_lease(conn.pg, job, w->walls.worker_id, w->set.lease_s, &err)
                   : JB_ERR_FAIL;
  if (rc != JB_OK) slog(w, JB_LOG_WARN, job, err.msg, "step", "lease", NULL);
  return rc;
}

bool session_keepable(struct jb_session *s) {
  return s->w->keeper_path[0] && atomic_load(&s->kept);
}

void *session_main(void *arg) {
  struct jb_session *s = arg;
  struct jb_worker *w = s->w;
  if (!s->adopted)
    slog(w, JB_LOG_INFO, s->job_id, "launch claimed", "workspace", s->workspace, "image", s->image,
         NULL);
  if (s->adopted || launch(s) == 0) {
    watch_sandbox(s);
    if (atomic_load(&w->drain) && !atomic_load(&s->teardown) && session_keepable(s)) {
      /* a drain: the sandbox stays up, its channel held by the keeper for the next worker */
      pthread_mutex_lock(&s->lock);
      s->sb_ready = false;
      jb_spawner_close(&s->sb.spawner);
      if (s->sb.conn_open) jb_shimconn_close(&s->sb.conn);
      s->sb.conn_open = false;
      json_decref(s->sb.contract);
      s->sb.contract = NULL;
      pthread_mutex_unlock(&s->lock);
      jb_workspace_grant_free(&s->grant);
      slog(w, JB_LOG_INFO, s->job_id, "sandbox left running for the next worker", NULL);
      atomic_store(&s->finished, true);
      return NULL;
    }
    char cid[80];
    sandbox_quit(s, SANDBOX_QUIT_MS, cid);
    pthread_mutex_lock(&s->lock);
    jb_sandbox_destroy(&w->walls, &s->sb);
    pthread_mutex_unlock(&s->lock);
    slog(w, JB_LOG_INFO, s->job_id, "sandbox removed", NULL);
  }
  escape_rollback_wait(w, s->job_id); /* it restores before the workspace is given back */
  restore_workspace(s);
  atomic_store(&s->finished, true);
  return NULL;
}

void sandbox_quit(struct jb_session *s, long wait_ms, char *cid) {
  struct jb_worker *w = s->w;
  keeper_del(w, s->job_id);
  cid[0] = '\0';
  pthread_mutex_lock(&s->lock);
  if (s->sb_ready && s->sb.container_id[0]) snprintf(cid, 80, "%s", s->sb.container_id);
  s->sb_ready = false;
  jb_spawner_close(&s->sb.spawner);
  if (s->sb.conn_open) jb_shimconn_close(&s->sb.conn);
  s->sb.conn_open = false;
  pthread_mutex_unlock(&s->lock);
  if (!cid[0] || wait_ms <= 0) return;
  char path[160];
  snprintf(path, sizeof path, "/containers/%s/wait?condition=not-running", cid);
  long status = 0;
  json_t *ans = NULL;
  jb_error err = {0};
  long long t0 = jb_now_ms();
  int rc = jb_docker_call(&w->walls.docker, "POST", path, NULL, wait_ms, &status, &ans, &err);
  json_decref(ans);
  char ms[24];
  snprintf(ms, sizeof ms, "%lld", jb_now_ms() - t0);
  slog(w, JB_LOG_INFO, s->job_id, "sandbox quit", "container", cid, "stopped",
       rc == 0 ? "yes" : "no (it is killed)", "waitedMs", ms, NULL);
}

int session_start(struct jb_worker *w, struct jb_session *s, size_t max, bool *full) {
  pthread_mutex_lock(&w->lock);
  bool room = w->n_sessions < max && w->n_sessions < JB_WORKER_SESSIONS_MAX;
  if (room) w->sessions[w->n_sessions++] = s;
  pthread_mutex_unlock(&w->lock);
  *full = !room;
  if (room && pthread_create(&s->thread, NULL, session_main, s) == 0) return 0;
  if (room) { /* out again, by identity: another thread may have entered one since */
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->n_sessions; i++)
      if (w->sessions[i] == s) {
        w->sessions[i] = w->sessions[--w->n_sessions];
        break;
      }
    pthread_mutex_unlock(&w->lock);
  }
  return -1;
}

/* ---- the queue ------------------------------------------------------------------------------- */

/* A teardown job: the session ended elsewhere; its containers are removed (which ends the
 * session thread's wait), and the job is done when they are gone (an escape seals after it). */
static void teardown(struct jb_worker *w, const struct jb_launch_job *j) {
  /* an escape jailboxd caught: its seal waits for the teardown, so queued before it is done */
  if (strcmp(j->state, "aborted") == 0) escape_rollback_queue(w, j->job_id);
  char cid[80];
  session_mark_ending(w, j->job_id, false, cid);
  jb_error err = {0};
  if (cid[0] && jb_container_remove(&w->walls, cid, &err) < 0)
    slog(w, JB_LOG_WARN, j->job_id, "teardown: remove failed", "error", err.msg, NULL);
  session_remove_containers(w, j->job_id);
  if (cid[0] && !container_gone(w, cid, 1500))
    slog(w, JB_LOG_WARN, j->job_id, "teardown: the container is still there", "container", cid,
         NULL);
  slog(w, JB_LOG_INFO, j->job_id, "teardown", "state", j->state, NULL);
  if (strcmp(j->state, "accepted") == 0) preimages_drop(w, j->job_id); /* nothing to undo now */
  finish_job(w, j->job_id, j->id, true, NULL, NULL);
}

/* A launch job: the session joins the table and gets its thread (it takes j->workspace). */
static void start_session(struct jb_worker *w, struct jb_launch_job *j) {
  if (strcmp(j->state, "created") != 0) {
    slog(w, JB_LOG_INFO, j->job_id, "launch skipped", "state", j->state, NULL);
    finish_job(w, j->job_id, j->id, true, "session not in created", NULL);
    return;
  }
  struct jb_session *s = calloc(1, sizeof *s);
  json_t *limits = json_loads(j->limits_json, 0, NULL);
  if (!s || !limits) {
    free(s);
    json_decref(limits);
    session_fail(w, j->job_id, "worker: out of memory");
    finish_job(w, j->job_id, j->id, false, "out of memory", NULL);
    return;
  }
  s->w = w;
  snprintf(s->job_id, sizeof s->job_id, "%s", j->job_id);
  s->launch_job = j->id;
  s->workspace = j->workspace;
  j->workspace = NULL;
  s->limits = limits;
  snprintf(s->image, sizeof s->image, "%s", j->image[0] ? j->image : w->walls.image);
  pthread_mutex_init(&s->lock, NULL);
  bool full;
  if (session_start(w, s, (size_t)w->set.max_sessions, &full) < 0) {
    session_fail(w, j->job_id,
                 full ? "worker: at its session limit" : "worker: cannot start a thread");
    finish_job(w, j->job_id, j->id, false, "no capacity", NULL);
    session_free(s);
  }
}

/* Claims the oldest job this worker may take. */
static int claim(struct jb_worker *w, struct jb_launch_job *j, jb_error *err) {
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  if (!conn.pg) return JB_ERR_FAIL;
  return jb_db_job_claim(conn.pg, w->walls.worker_id, j, err);
}

void launch_drain_queue(struct jb_worker *w) {
  for (;;) {
    pthread_mutex_lock(&w->lock);
    bool full = w->n_sessions >= (size_t)w->set.max_sessions;
    pthread_mutex_unlock(&w->lock);
    if (full || atomic_load(&w->stopping)) return;
    struct jb_launch_job j;
    jb_error err = {0};
    int rc = claim(w, &j, &err);
    if (rc == JB_ERR_NOT_FOUND) return;
    if (rc != JB_OK) {
      slog(w, JB_LOG_ERROR, NULL, err.msg, "step", "claim", NULL);
      return;
    }
    if (strcmp(j.kind, "teardown") == 0)
      teardown(w, &j);
    else if (strcmp(j.kind, "rollback") == 0)
      rollback_start(w, &j);
    else
      start_session(w, &j);
    jb_launch_job_free(&j);
  }
}
