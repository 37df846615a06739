/* op_session.c — the session an agent's tool call is decided on (the load session stage,
 * api/agent/op_call.h), and this process's copies of the sessions whose ops it handled last.
 *
 * A copy is JSON text of what the op path decides on (state, mode, exclude, walls.worker,
 * walls.prescan.flagged) as read from the database: a call decides on it without a round
 * trip. It is never trusted alone: the op's insert checks that the session's mode, exclusions
 * and flags are still the ones decided on (jb_db_op_create's `expect_json`), and the call
 * starts over with a fresh read when they are not. Only sessions read in active or paused are
 * kept, whose exclusions and flags no longer change. The state it keeps decides whether a read
 * is handed straight to the worker, which runs it in the sandbox before anything checks the
 * session: a copy is dropped when the session's state changes (jb_op_session_changed), so
 * that a read after a pause does not run until the resume. */
#define _GNU_SOURCE
#include "api/agent/op_call.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"
#include "server/app.h"

#define SESS_SLOTS 64
static struct {
  pthread_mutex_t lock;
  struct {
    char job[129];
    char *json;
    unsigned long gen; /* moves at every forget: a copy read before it is not kept after it */
  } slot[SESS_SLOTS];
} sess_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t sess_slot(const char *job) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)job; *p; p++) h = (h ^ *p) * 16777619u;
  return h % SESS_SLOTS;
}

/* A copy of the cached session JSON of `job` (new), or NULL. */
static char *sess_cache_get(const char *job) {
  size_t i = sess_slot(job);
  pthread_mutex_lock(&sess_cache.lock);
  char *t = !strcmp(sess_cache.slot[i].job, job) && sess_cache.slot[i].json ? strdup(sess_cache.slot[i].json) : NULL;
  pthread_mutex_unlock(&sess_cache.lock);
  return t;
}

/* The generation of `job`'s slot: take it before reading the session from the database, and
 * give it to sess_cache_put. */
static unsigned long sess_cache_gen(const char *job) {
  size_t i = sess_slot(job);
  pthread_mutex_lock(&sess_cache.lock);
  unsigned long g = sess_cache.slot[i].gen;
  pthread_mutex_unlock(&sess_cache.lock);
  return g;
}

/* Keeps `json` for `job`, read from the database after sess_cache_gen gave `gen` — unless the
 * slot was forgotten since (the copy may predate the change that made it forget). NULL:
 * forgets `job` (`gen` unused). */
static void sess_cache_put(const char *job, const char *json, unsigned long gen) {
  size_t i = sess_slot(job);
  char *t = json ? strdup(json) : NULL;
  pthread_mutex_lock(&sess_cache.lock);
  if (!json) sess_cache.slot[i].gen++;
  if ((t && sess_cache.slot[i].gen == gen) || (!json && !strcmp(sess_cache.slot[i].job, job))) {
    free(sess_cache.slot[i].json);
    sess_cache.slot[i].json = t;
    t = NULL;
    snprintf(sess_cache.slot[i].job, sizeof sess_cache.slot[i].job, "%s", json ? job : "");
  }
  pthread_mutex_unlock(&sess_cache.lock);
  free(t);
}

/* Keeps what is decided on of `sess` (read from the database after sess_cache_gen gave `gen`)
 * as the copy of `job` — not the whole session: its walls contract is most of its ~7 KB, and
 * parsing all of it again costs a quarter of this process's time per op. */
static void keep_copy(const char *job, json_t *sess, unsigned long gen) {
  json_t *walls = json_object_get(sess, "walls");
  cleanup_json json_t *view =
      json_pack("{s:O*, s:O*, s:O*, s:{s:O*, s:{s:O*}}}", "state", json_object_get(sess, "state"), "mode",
                json_object_get(sess, "mode"), "exclude", json_object_get(sess, "exclude"), "walls", "worker",
                json_object_get(walls, "worker"), "prescan", "flagged",
                json_object_get(json_object_get(walls, "prescan"), "flagged"));
  cleanup_free char *vt = view ? json_dumps(view, JSON_COMPACT) : NULL;
  if (vt) sess_cache_put(job, vt, gen);
}

void jb_op_session_changed(const char *job_id) {
  if (job_id) sess_cache_put(job_id, NULL, 0);
}

json_t *op_session_copy(const char *job) {
  cleanup_free char *text = sess_cache_get(job);
  return text ? json_loads(text, 0, NULL) : NULL;
}

enum op_step op_load_session(struct op_call *call) {
  jb_error err = {0};
  call->c = jb_db_acquire(call->app->db, &err);
  if (!call->c) {
    op_error_unavailable(call->e, &err);
    return OP_END;
  }
  cleanup_free char *text = call->fresh ? NULL : sess_cache_get(call->job);
  call->cached = text != NULL;
  unsigned long gen = sess_cache_gen(call->job);
  if (!text && jb_db_session_get(call->c, call->job, &text, &err) != JB_OK) {
    op_error_unavailable(call->e, &err);
    return OP_END;
  }
  call->sess = json_loads(text, 0, NULL);
  call->state = jb_session_state_from_name(json_string_value(json_object_get(call->sess, "state")));
  if (!call->cached && (call->state == JB_SESSION_ACTIVE || call->state == JB_SESSION_PAUSED))
    keep_copy(call->job, call->sess, gen);
  call->arrived = call->state == JB_SESSION_AWAITING_AGENT;
  if (call->arrived) {
    jb_op_agent_arrived(call->c, call->app, call->job);
    call->state = JB_SESSION_ACTIVE;
  }
  call->recheck = call->cached || call->arrived;
  call->supervised =
      !strcmp(json_string_value(json_object_get(call->sess, "mode")) ?: "supervised", "supervised");
  call->exclude = json_object_get(call->sess, "exclude");
  call->flagged = json_object_get(json_object_get(json_object_get(call->sess, "walls"), "prescan"), "flagged");
  return OP_NEXT;
}
