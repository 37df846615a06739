/* commands.c — where the agent's commands run on the worker: each claimed exec on a thread of
 * its own, with a connection of the commands' own pool, so that a long command holds neither
 * a runner (relay.c) nor a connection that other sessions' ops need. At most
 * JAILBOX_WORKER_MAX_COMMANDS commands run at once on a worker and one per session; a session
 * whose command runs is left out by the runners until it ends (its ops keep their order), and
 * a session that finds every place taken waits its turn, first come first served, while the
 * other sessions' file ops go on. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/ops.h"
#include "sandbox/proto/tool.h"
#include "sandbox/worker/worker.h"

struct command_arg {
  struct jb_worker *w;
  int slot; /* in w->cmds.slot */
};

int commands_init(struct jb_worker *w, jb_error *err) {
  pthread_mutex_init(&w->cmds.lock, NULL);
  pthread_cond_init(&w->cmds.ended, NULL);
  w->cmds.max = (int)w->set.max_commands;
  if (w->cmds.max > JB_WORKER_COMMANDS_MAX) w->cmds.max = JB_WORKER_COMMANDS_MAX;
  if (jb_db_open(&w->cmds.db, w->set.database_url, w->cmds.max, 10, err) < 0)
    return jb_error_wrap(err, "the commands' database pool");
  return 0;
}

/* Whether `job` is in the list of `n` names `v`. */
static bool listed(char (*v)[129], size_t n, const char *job) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i], job)) return true;
  return false;
}

/* Whether `job` has a command running or waiting for a place (lock held). */
static bool session_out(struct jb_worker *w, const char *job) {
  for (int i = 0; i < JB_WORKER_COMMANDS_MAX; i++)
    if (w->cmds.slot[i].used && !strcmp(w->cmds.slot[i].job, job)) return true;
  return listed(w->cmds.waiting, w->cmds.n_waiting, job);
}

bool commands_session_busy(struct jb_worker *w, const char *job) {
  pthread_mutex_lock(&w->cmds.lock);
  bool busy = session_out(w, job);
  pthread_mutex_unlock(&w->cmds.lock);
  return busy;
}

/* Runs the next queued op of session `job`, when it is an exec, with a connection of the
 * commands' pool; anything else is left queued for the runners. */
static void command_run(struct jb_worker *w, const char *job) {
  jb_error err = {0};
  struct worker_conn conn = {.db = w->cmds.db, .pg = jb_db_acquire(w->cmds.db, &err)};
  int signal = -1;
  char detail[400] = "";
  int rc = JB_ERR_FAIL;
  if (conn.pg) {
    struct jb_op_claim op;
    rc = jb_db_op_claim(conn.pg, job, &op, &err);
    if (rc == JB_OK) {
      if (jb_tool_from_name(op.tool) == JB_TOOL_EXEC)
        rc = exec_op_run(w, conn.pg, job, &op, &signal, detail, sizeof detail, &err);
      else
        jb_db_rollback(conn.pg); /* no exec first in line any more (killed, say): the runners' */
      jb_op_claim_free(&op);
    }
  }
  if (rc != JB_OK && rc != JB_ERR_NOT_FOUND)
    slog(w, JB_LOG_ERROR, job, err.msg, "step", "run command", NULL);
  worker_conn_release(&conn);
  if (signal >= 0) raise_signal(w, job, (enum jb_signal)signal, detail);
}

static bool start_first(struct jb_worker *w, int i);

/* A command's thread (arg: its struct command_arg, freed here; detached): runs the command,
 * gives its place to the session waiting longest, and makes its own session due again. */
static void *command_main(void *arg) {
  struct command_arg *ca = arg;
  struct jb_worker *w = ca->w;
  int i = ca->slot;
  free(ca);
  char job[129];
  snprintf(job, sizeof job, "%s", w->cmds.slot[i].job); /* fixed while the slot is used */
  command_run(w, job);
  pthread_mutex_lock(&w->cmds.lock);
  w->cmds.slot[i].used = false;
  while (w->cmds.n_waiting > 0 && !atomic_load(&w->stopping) && !start_first(w, i)) {
    w->cmds.n_waiting--; /* no thread for it: dropped from the line, found again by the sweep */
    memmove(w->cmds.waiting[0], w->cmds.waiting[1], w->cmds.n_waiting * sizeof w->cmds.waiting[0]);
  }
  pthread_mutex_unlock(&w->cmds.lock);
  run_queued_session(w, job); /* what the session queued after its command */
  pthread_mutex_lock(&w->cmds.lock);
  w->cmds.live--;
  pthread_cond_broadcast(&w->cmds.ended);
  pthread_mutex_unlock(&w->cmds.lock);
  return NULL;
}

/* Starts a detached thread for the session first in the waiting line in free slot `i` (lock
 * held) and takes it off the line. false when no thread could be started (nothing changed). */
static bool start_first(struct jb_worker *w, int i) {
  struct command_arg *ca = malloc(sizeof *ca);
  if (!ca) return false;
  *ca = (struct command_arg){.w = w, .slot = i};
  snprintf(w->cmds.slot[i].job, sizeof w->cmds.slot[i].job, "%s", w->cmds.waiting[0]);
  w->cmds.slot[i].used = true;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  int e = pthread_create(&t, &at, command_main, ca);
  pthread_attr_destroy(&at);
  if (e != 0) {
    w->cmds.slot[i].used = false;
    free(ca);
    return false;
  }
  w->cmds.live++;
  w->cmds.n_waiting--;
  memmove(w->cmds.waiting[0], w->cmds.waiting[1], w->cmds.n_waiting * sizeof w->cmds.waiting[0]);
  return true;
}

int commands_start(struct jb_worker *w, const char *job, jb_error *err) {
  pthread_mutex_lock(&w->cmds.lock);
  int rc = 0;
  if (session_out(w, job) || atomic_load(&w->stopping)) goto out_unlock;
  if (w->cmds.n_waiting >= JB_WORKER_SESSIONS_MAX) {
    rc = jb_fail(err, EBUSY, "too many sessions wait to run a command");
    goto out_unlock;
  }
  snprintf(w->cmds.waiting[w->cmds.n_waiting++], sizeof w->cmds.waiting[0], "%s", job);
  if (w->cmds.n_waiting > 1) goto out_unlock; /* others wait longer: they go first */
  int used = 0, free_slot = -1;
  for (int i = 0; i < JB_WORKER_COMMANDS_MAX; i++) {
    if (w->cmds.slot[i].used)
      used++;
    else if (free_slot < 0)
      free_slot = i;
  }
  if (used >= w->cmds.max || free_slot < 0) goto out_unlock; /* waits for a place */
  if (!start_first(w, free_slot)) {
    w->cmds.n_waiting--; /* not started: left queued for the next sweep */
    rc = jb_fail(err, EAGAIN, "a thread for the command could not be started");
  }
out_unlock:
  pthread_mutex_unlock(&w->cmds.lock);
  return rc;
}

void commands_end(struct jb_worker *w) {
  pthread_mutex_lock(&w->cmds.lock);
  w->cmds.n_waiting = 0; /* nothing new starts while the worker stops */
  while (w->cmds.live > 0) pthread_cond_wait(&w->cmds.ended, &w->cmds.lock);
  pthread_mutex_unlock(&w->cmds.lock);
  jb_db_close(w->cmds.db);
  w->cmds.db = NULL;
}
