/* op_session.c — the session an agent's tool call is decided on (the load session stage,
 * api/core/op_call.h), and this process's copies of the sessions whose ops it handled last.
 *
 * A copy is the struct of what the op path decides on (db/sessions.h jb_session_facts: state,
 * mode, exclusions, the contract's worker, the pre-scan's flags) as read from the database:
 * a call decides on it without a round trip. It is never trusted alone: the op's insert checks
 * that the session's mode, exclusions and flags are still the ones decided on
 * (jb_db_op_create's `expect_json`), and the call starts over with a fresh read when they are
 * not. Only sessions read in active or paused are kept, whose exclusions and flags no longer
 * change. The state it keeps decides whether a read is relayed straight to the worker
 * (api/socket/socket.c, jb_op_direct_plan), which runs it in the sandbox before anything checks
 * the session: a copy is dropped when the session's state changes (jb_op_session_changed), so
 * that a read after a pause does not run until the resume. Copies go in and out under the lock as jb_session_facts_copy makes them:
 * no JSON value is shared between threads. */
#define _GNU_SOURCE
#include "api/core/op_call.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"
#include "lib/log.h"
#include "server/app.h"

#define SESS_SLOTS 64
static struct {
  pthread_mutex_t lock;
  struct {
    char job[129]; /* "" when the slot holds no copy */
    struct jb_session_facts facts;
    unsigned long gen; /* moves at every forget: a copy read before it is not kept after it */
  } slot[SESS_SLOTS];
} sess_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t sess_slot(const char *job) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)job; *p; p++) h = (h ^ *p) * 16777619u;
  return h % SESS_SLOTS;
}

/* The copy of `job` copied into *out (which must own nothing): true, or false with *out
 * empty when there is none. */
static bool sess_cache_get(const char *job, struct jb_session_facts *out) {
  size_t i = sess_slot(job);
  jb_error err = {0};
  pthread_mutex_lock(&sess_cache.lock);
  bool have = !strcmp(sess_cache.slot[i].job, job);
  if (have)
    have = jb_session_facts_copy(out, &sess_cache.slot[i].facts, &err) == JB_OK;
  else
    *out = (struct jb_session_facts){.state = JB_SESSION_UNKNOWN};
  pthread_mutex_unlock(&sess_cache.lock);
  return have;
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

/* Keeps a copy of `facts` (borrowed) for `job`, read from the database after sess_cache_gen
 * gave `gen` — unless the slot was forgotten since (the copy may predate the change that made
 * it forget). NULL: forgets `job` (`gen` unused). */
static void sess_cache_put(const char *job, const struct jb_session_facts *facts,
                           unsigned long gen) {
  size_t i = sess_slot(job);
  struct jb_session_facts t = {.state = JB_SESSION_UNKNOWN};
  jb_error err = {0};
  if (facts && jb_session_facts_copy(&t, facts, &err) != JB_OK) return;
  pthread_mutex_lock(&sess_cache.lock);
  if (!facts) sess_cache.slot[i].gen++;
  if ((facts && sess_cache.slot[i].gen == gen) ||
      (!facts && !strcmp(sess_cache.slot[i].job, job))) {
    struct jb_session_facts old = sess_cache.slot[i].facts;
    sess_cache.slot[i].facts = t;
    t = old;
    snprintf(sess_cache.slot[i].job, sizeof sess_cache.slot[i].job, "%s", facts ? job : "");
  }
  pthread_mutex_unlock(&sess_cache.lock);
  jb_session_facts_clear(&t);
}

void jb_op_session_changed(const char *job_id) {
  if (job_id) sess_cache_put(job_id, NULL, 0);
}

bool op_session_copy(const char *job, struct jb_session_facts *out) {
  return sess_cache_get(job, out);
}

enum jb_exec_offer op_exec_offer_of(const struct jb_session_facts *sess) {
  return sess->exec == JB_EXEC_AVAILABLE     ? JB_EXEC_OFFERED
         : sess->exec == JB_EXEC_UNAVAILABLE ? JB_EXEC_NOT_OFFERED
                                             : JB_EXEC_OFFER_UNKNOWN;
}

enum jb_exec_offer jb_op_exec_offer(struct jb_app *app, const char *job) {
  cleanup_session_facts struct jb_session_facts f = {.state = JB_SESSION_UNKNOWN};
  if (!sess_cache_get(job, &f)) {
    jb_error err = {0};
    PGconn *c = jb_db_acquire(app->db, &err);
    int rc = c ? jb_db_session_facts(c, job, &f, &err) : JB_ERR_FAIL;
    if (c) jb_db_release(app->db, c);
    if (rc != JB_OK) {
      if (rc != JB_ERR_NOT_FOUND)
        jb_log(JB_LOG_WARN, "tools/list: the session could not be read", "jobId", job, "detail",
               err.msg, NULL);
      return JB_EXEC_OFFER_UNKNOWN;
    }
  }
  return op_exec_offer_of(&f);
}

enum op_step op_load_session(struct op_call *call) {
  jb_error err = {0};
  call->c = jb_db_acquire(call->app->db, &err);
  if (!call->c) {
    op_error_unavailable(call->e, &err);
    return OP_END;
  }
  call->cached = !call->fresh && sess_cache_get(call->job, &call->sess);
  unsigned long gen = sess_cache_gen(call->job);
  if (!call->cached && jb_db_session_facts(call->c, call->job, &call->sess, &err) != JB_OK) {
    op_error_unavailable(call->e, &err);
    return OP_END;
  }
  /* a call made while the session is being prepared waits for it (read again after; the
   * copy is kept by the next call, whose read follows the change) */
  bool waited = !call->cached && op_session_starting(call->sess.state);
  if (waited && op_await_start(call) != OP_NEXT) return OP_END;
  if (!call->cached && !waited &&
      (call->sess.state == JB_SESSION_ACTIVE || call->sess.state == JB_SESSION_PAUSED))
    sess_cache_put(call->job, &call->sess, gen);
  call->arrived = call->sess.state == JB_SESSION_AWAITING_AGENT;
  if (call->arrived) {
    jb_op_agent_arrived(call->c, call->app, call->job);
    call->sess.state = JB_SESSION_ACTIVE;
  }
  call->recheck = call->cached || call->arrived;
  return OP_NEXT;
}

void jb_op_agent_arrived(PGconn *c, struct jb_app *app, const char *job) {
  static const char *const from[] = {"awaiting_agent", NULL};
  struct jb_transition t;
  jb_error err = {0};
  if (jb_db_session_transition(c, jb_signer_key(app->signer), job, from, "active",
                               "the agent connected", "agent", &t, &err) == JB_OK)
    jb_bus_publish(app->bus, job, JB_EVENT_STATE,
                   json_pack("{s:s,s:s,s:s,s:s,s:s}", "jobId", job, "state", "active", "previous",
                             t.previous, "reason", "the agent connected", "actor", "agent"));
}
