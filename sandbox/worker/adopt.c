/* adopt.c — what a run of this worker id finds at its start: the launch jobs an earlier run
 * left claimed (failed), the containers of this deployment on this Docker daemon (each taken
 * over, failed or removed), and the channels the descriptor keeper (keeper.c) held for them.
 * A running session whose kept channel belongs to its container is re-adopted: it joins the
 * table with its shim channel re-opened, its walls checked again and its spawner's channel
 * taken over, and its thread (launch.c session_main) watches it as after a launch. The
 * containers are handled on a small pool of threads, so that a restart with many live
 * sessions serves them all again in about the time of one. What a launch hands the keeper
 * is in launch.c (keep_channels). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/launch_jobs.h"
#include "db/sessions.h"
#include "lib/metrics.h"
#include "sandbox/worker/worker.h"

/* ---- the channels kept across a restart (keeper.c) ----------------------------------------- */

/* ---- start-up ------------------------------------------------------------------------------- */

/* Fails the jobs a previous run of this worker id had claimed; *list (new) receives their
 * sessions as a JSON array. */
static int abandon_jobs(struct jb_worker *w, char **list, jb_error *err) {
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  if (!conn.pg) return JB_ERR_FAIL;
  return jb_db_jobs_abandon(conn.pg, w->walls.worker_id, "worker restarted while the job ran", list,
                            err);
}

/* The state of session `job` into `state` (20 bytes). */
static int session_state(struct jb_worker *w, const char *job, char state[20], jb_error *err) {
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  if (!conn.pg) return JB_ERR_FAIL;
  return jb_db_session_state(conn.pg, job, state, err);
}

/* Whether session `job` is in the table. */
static bool session_here(struct jb_worker *w, const char *job) {
  pthread_mutex_lock(&w->lock);
  bool here = session_find(w, job) != NULL;
  pthread_mutex_unlock(&w->lock);
  return here;
}

/* Whether `contract` says wall `name` was up. */
static bool contract_wall_up(json_t *contract, const char *name) {
  return json_is_true(
      json_object_get(json_object_get(json_object_get(contract, "walls"), name), "up"));
}

/* Session `s` (new, zeroed) as adopted from kept channel `k` of container `cid`: launch job
 * `jp` (its workspace taken, then freed), `limits` and `contract` (both taken). */
static void fill_session(struct jb_worker *w, const struct jb_kept *k, const char *cid,
                         struct jb_launch_job *jp, json_t *limits, json_t *contract,
                         struct jb_session *s) {
  s->w = w;
  s->adopted = true;
  snprintf(s->job_id, sizeof s->job_id, "%s", k->job);
  s->launch_job = jp->id;
  s->workspace = jp->workspace;
  jp->workspace = NULL;
  s->limits = limits;
  snprintf(s->image, sizeof s->image, "%s", jp->image[0] ? jp->image : w->walls.image);
  jb_launch_job_free(jp);
  pthread_mutex_init(&s->lock, NULL);
  struct jb_sandbox *sb = &s->sb;
  snprintf(sb->job_id, sizeof sb->job_id, "%s", k->job);
  snprintf(sb->container_id, sizeof sb->container_id, "%s", cid);
  sb->contract = contract;
  jb_spawner_init(&sb->spawner);
  for (int wall = 0; wall < JB_WALL_COUNT; wall++)
    sb->walls_up[wall] = contract_wall_up(contract, jb_wall_names[wall]);
}

/* The spawner's channel of sandbox `sb`, taken over from `k` when the launch had one; without
 * it exec is unavailable and the contract (borrowed) says why, and `err` why not. */
static void take_spawner(struct jb_worker *w, const struct jb_kept *k, struct jb_sandbox *sb,
                         json_t *contract, jb_error *err) {
  json_t *xc = json_object_get(contract, "exec");
  bool had_spawner = k->fd[1] >= 0 && json_is_true(json_object_get(xc, "available"));
  int sfd = had_spawner ? dup(k->fd[1]) : -1;
  if (had_spawner && (sfd < 0 || jb_spawner_adopt(&sb->spawner, sfd, xc, 3000, err) < 0)) {
    if (sfd < 0) jb_fail_errno(err, errno, "dup");
    slog(w, JB_LOG_WARN, k->job, err->msg, "step", "take over the spawner's channel", NULL);
    json_t *why_x = json_sprintf(
        "worker restarted; the spawner's channel could not be taken "
        "over: %s",
        err->msg);
    json_object_set_new(xc, "available", json_false());
    json_object_set_new(xc, "reason", why_x);
  }
}

/* Takes over session `k->job` whose container `cid` runs and whose shim channel the keeper
 * held: the session joins the table with its channel re-opened (the line boundary found again)
 * and its walls checked again, and its thread watches the sandbox as after a launch. The
 * spawner's channel is taken over too (jb_spawner_adopt: a command that ran is killed, and its
 * op is failed: exec_op_fail_orphans), so exec runs again; when it cannot be, the contract's
 * "exec" says unavailable and why. `cid` is the container k->cid names (pair_kept). Runs on
 * any thread of adopt_at_start, beside the other sessions' adoptions: what they share is the
 * table (under w->lock), the connection pool and the keeper (a connection of its own each).
 * true, or false with `why` (the session is then failed; "" when another worker's lease holds
 * it: it is left alone). */
static bool adopt(struct jb_worker *w, const struct jb_kept *k, const char *cid, char *why,
                  size_t wlen) {
  long long t0 = jb_now_ms(), t[6] = {0}; /* when each step ended, for the log */
  jb_error err = {0};
  struct jb_launch_job j;
  char *walls = NULL;
  {
    cleanup_conn struct worker_conn conn = worker_conn(w, &err);
    int rc = conn.pg
                 ? jb_db_session_adopt_info(conn.pg, k->job, w->walls.worker_id, &j, &walls, &err)
                 : JB_ERR_FAIL;
    if (rc != JB_OK) {
      snprintf(why, wlen, "worker restarted; the session could not be read: %s",
               rc == JB_ERR_NOT_FOUND ? "not launched by this worker" : err.msg);
      return false;
    }
  }
  /* two workers never drive one sandbox */
  t[0] = jb_now_ms();
  if (session_lease(w, k->job) == JB_ERR_CONFLICT) {
    jb_launch_job_free(&j);
    free(walls);
    why[0] = '\0';
    return false;
  }
  struct jb_session *s = calloc(1, sizeof *s);
  json_t *limits = json_loads(j.limits_json, 0, NULL);
  json_t *contract = walls[0] ? json_loads(walls, 0, NULL) : NULL;
  free(walls);
  if (!s || !limits || !contract) {
    free(s);
    json_decref(limits);
    json_decref(contract);
    jb_launch_job_free(&j);
    snprintf(why, wlen, "worker restarted; the session's contract could not be read");
    return false;
  }
  fill_session(w, k, cid, &j, limits, contract, s);
  struct jb_sandbox *sb = &s->sb;
  t[1] = jb_now_ms();
  int fd = dup(k->fd[0]);
  int rc = fd < 0 ? jb_fail_errno(&err, errno, "dup")
                  : jb_shimconn_adopt(&sb->conn, fd, w->walls.call_timeout_ms, &err);
  sb->conn_open = fd >= 0;
  t[2] = jb_now_ms();
  if (rc < 0) {
    snprintf(why, wlen, "worker restarted; the shim's channel could not be taken over: %s",
             err.msg);
  } else if (jb_sandbox_recheck(&w->walls, sb, &err) < 0) {
    snprintf(why, wlen, "worker restarted; the walls were checked again and failed: %s", err.msg);
    rc = -1;
  }
  if (rc < 0) {
    if (sb->conn_open) jb_shimconn_close(&sb->conn);
    sb->conn_open = false;
    json_decref(sb->contract);
    sb->contract = NULL;
    session_free(s);
    return false;
  }
  t[3] = jb_now_ms();
  jb_workspace_grant_load(k->fd[2], &s->grant);
  if (!s->grant.valid)
    slog(w, JB_LOG_WARN, k->job,
         "the record of the workspace grant could not be read: the workspace's groups and "
         "modes will not be given back at the session's end",
         NULL);
  take_spawner(w, k, sb, contract, &err);
  t[4] = jb_now_ms();
  if (keeper_put(w, k->job, cid, k->fd[0], sb->spawner.fd >= 0 ? k->fd[1] : -1, k->fd[2], &err) < 0)
    slog(w, JB_LOG_WARN, k->job, err.msg, "step", "keep channel", NULL);
  s->sb_ready = true;
  atomic_store(&s->kept, true);
  snprintf(s->cid, sizeof s->cid, "%s", cid);
  bool full;
  if (session_start(w, s, JB_WORKER_SESSIONS_MAX, &full) < 0) {
    jb_sandbox_destroy(&w->walls, sb);
    jb_workspace_grant_free(&s->grant);
    session_free(s);
    snprintf(why, wlen, "worker restarted; %s",
             full ? "no room to take the session over" : "its thread could not start");
    return false;
  }
  t[5] = jb_now_ms();
  exec_op_fail_orphans(w, k->job);
  char steps[160];
  snprintf(steps, sizeof steps,
           "read %lld, lease %lld, channel %lld, walls %lld, spawner %lld, keeper %lld, "
           "orphans %lld",
           t[0] - t0, t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3], t[5] - t[4],
           jb_now_ms() - t[5]);
  slog(w, JB_LOG_INFO, k->job, "session re-adopted", "container", cid, "stepsMs", steps, NULL);
  return true;
}

/* One container listed at start: what the list says of it (borrowed from the list) and which
 * keeper entry goes with it. */
struct found {
  const char *id, *job, *state; /* Id, label jailbox.session (NULL: a probe), State */
  bool mine; /* label jailbox.worker is this worker id */
  int kept; /* the keeper's entry for its session, -1: none */
  bool kept_here; /* that entry names this container (kept[].cid == id) */
  bool stray; /* another container of its session is the one its kept entry names */
};

/* What the threads of adopt_at_start share. found[] and kept[] are read-only while they run;
 * taken[k] is written only by the thread handling the one container whose id entry k names. */
struct start {
  struct jb_worker *w;
  struct found *found;
  size_t n;
  struct jb_kept *kept;
  bool *taken;
  atomic_size_t next; /* the next container to handle */
};

/* Handles container `f`: a running container of a live session of ours whose kept channel is
 * its own is re-adopted, or left alone when another worker's lease holds the session; any other
 * of a live session of ours fails the session (a kept channel of another container says so)
 * and is removed, as is a probe of ours, a container whose session has ended and a second
 * container of a session whose kept channel is another's (the session is not failed for it).
 * One whose session cannot be read is left as it is. */
static void handle_found(struct start *st, const struct found *f) {
  struct jb_worker *w = st->w;
  jb_error err = {0};
  bool remove = false;
  const char *why = "";
  char reason[700] = "worker restarted; the sandbox was lost";
  if (!f->job) {
    remove = f->mine;
    why = "probe left behind";
  } else {
    char state[20] = "";
    int rc = session_state(w, f->job, state, &err);
    if (rc == JB_ERR_FAIL) return; /* cannot tell: leave it */
    bool live = rc == JB_OK && jb_state_is_live(state);
    if (f->mine && live && f->stray) {
      remove = true;
      why = "not the container of the session's kept channel";
    } else if (f->mine && live) {
      const struct jb_kept *k = f->kept >= 0 ? &st->kept[f->kept] : NULL;
      bool running = f->state && !strcmp(f->state, "running");
      if (k && !f->kept_here) {
        snprintf(reason, sizeof reason,
                 "worker restarted; the channel the descriptor keeper held for the session "
                 "belongs to container %.12s, not to its container %.12s: not taken over",
                 k->cid[0] ? k->cid : "(none)", f->id);
        slog(w, JB_LOG_WARN, f->job, "kept channel of another container", "container", f->id,
             "keptContainer", k->cid, NULL);
      } else if (k && running) {
        st->taken[f->kept] = true;
        if (adopt(w, k, f->id, reason, sizeof reason)) return;
        if (!reason[0]) return; /* another worker drives it: left alone */
      }
      session_fail(w, f->job, reason);
      remove = true;
      why = "session lost by the restart";
    } else if (!live) {
      remove = true;
      why = "session no longer live";
    }
  }
  if (remove && jb_container_remove(&w->walls, f->id, &err) == 0)
    slog(w, JB_LOG_INFO, f->job, "stale container removed", "container", f->id, "why", why, NULL);
}

/* A thread of adopt_at_start (arg: struct start): handles containers until none is left. */
static void *start_main(void *arg) {
  struct start *st = arg;
  for (;;) {
    size_t i = atomic_fetch_add(&st->next, 1);
    if (i >= st->n) return NULL;
    handle_found(st, &st->found[i]);
  }
}

/* Reads the containers of `list` into found[] (*n of them; those without an Id are skipped)
 * and pairs each kept entry with the container of its session: the one whose Id it names,
 * else every container of that session (kept_here false: the channel is not theirs). */
static void pair_kept(struct jb_worker *w, json_t *list, struct jb_kept *kept, size_t nkept,
                      struct found *found, size_t *n) {
  size_t i;
  json_t *c;
  *n = 0;
  json_array_foreach (list, i, c) {
    json_t *labels = json_object_get(c, "Labels");
    const char *owner = json_string_value(json_object_get(labels, "jailbox.worker"));
    struct found f = {
        .id = json_string_value(json_object_get(c, "Id")),
        .job = json_string_value(json_object_get(labels, "jailbox.session")),
        .state = json_string_value(json_object_get(c, "State")),
        .mine = owner && !strcmp(owner, w->walls.worker_id),
        .kept = -1,
    };
    if (f.id) found[(*n)++] = f;
  }
  for (size_t k = 0; k < nkept; k++) {
    if (kept[k].fd[0] < 0) continue;
    size_t same = *n;
    for (size_t f = 0; f < *n && same == *n; f++)
      if (found[f].job && !strcmp(found[f].job, kept[k].job) && !strcmp(found[f].id, kept[k].cid))
        same = f;
    for (size_t f = 0; f < *n; f++) {
      if (!found[f].job || strcmp(found[f].job, kept[k].job) || found[f].kept >= 0) continue;
      found[f].stray = same < *n && f != same;
      if (found[f].stray) continue;
      found[f].kept = (int)k;
      found[f].kept_here = f == same;
    }
  }
}

void adopt_at_start(struct jb_worker *w) {
  jb_error err = {0};
  char *abandoned = NULL;
  if (abandon_jobs(w, &abandoned, &err) != JB_OK) {
    slog(w, JB_LOG_ERROR, NULL, err.msg, "step", "abandon jobs", NULL);
  } else {
    json_t *jobs = json_loads(abandoned, 0, NULL);
    size_t i;
    json_t *j;
    json_array_foreach (jobs, i, j)
      session_fail(w, json_string_value(j),
                   "worker restarted during the launch; the sandbox was lost");
    json_decref(jobs);
    free(abandoned);
  }
  /* the channels an earlier run of this worker id handed the keeper */
  struct jb_kept *kept = NULL;
  size_t nkept = 0;
  if (keeper_get(w, &kept, &nkept, &err) < 0)
    slog(w, JB_LOG_WARN, NULL, err.msg, "step", "kept channels", NULL);
  /* containers on this daemon: ours from before the restart, and any whose session ended */
  json_auto_t *list = list_containers(w, NULL, &err);
  size_t nlist = json_array_size(list);
  struct start st = {.w = w, .kept = kept};
  st.taken = calloc(nkept ? nkept : 1, sizeof *st.taken);
  st.found = calloc(nlist ? nlist : 1, sizeof *st.found);
  if (!list || !st.taken || !st.found) {
    slog(w, JB_LOG_WARN, NULL, "cannot list containers at start", "error",
         list ? "out of memory" : err.msg, NULL);
    kept_free(kept, nkept);
    free(st.taken);
    free(st.found);
    return;
  }
  pair_kept(w, list, kept, nkept, st.found, &st.n);
  atomic_init(&st.next, 0);
  sessions_in_parallel(start_main, &st, st.n);
  /* what the keeper held for sessions not taken over: let go */
  for (size_t k = 0; k < nkept; k++)
    if (!st.taken[k] || !session_here(w, kept[k].job)) keeper_del(w, kept[k].job);
  kept_free(kept, nkept);
  free(st.taken);
  free(st.found);
}
