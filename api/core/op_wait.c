/* op_wait.c — how a call of the op path (api/core/op_call.h) waits: its place among this
 * process's calls that wait on the buyer, a command or a pause (bounded per process and per
 * session); the wait for a stored op's outcome; a stat of a path stored and waited for as any
 * op; and the release of what a call took. Every stage above calls down into it.
 *
 * A waiting thread sleeps until the jb_op notification of the op's commit wakes it
 * (server/opwait.h), and reads the op row again then (and once a second regardless); without
 * limit while the op waits for the buyer or a paused session. */
#define _GNU_SOURCE
#include "api/core/op_call.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/core/progress.h"
#include "db/db.h"
#include "db/events.h"
#include "db/ops.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "server/app.h"
#include "server/config.h"
#include "server/pool.h"
#include "server/workers.h"

#define SAFETY_NET_MS 1000 /* a waiting call re-reads its op at least this often */
#define FALLBACK_MS 20 /* ... and this often while no notification can arrive */
#define DB_DOWN_WAIT_MS 30000 /* a stored op's call waits this long for an unreachable database */
/* a command still running when its session ended is waited for this long at most */
#define RUNNING_AFTER_END_MS 15000

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The clocks of one wait, in ms of jb_now_ms. */
struct wait_clock {
  long long stored; /* when the op was stored */
  long long started; /* since when an approved op of an active session waits to run */
  long long approval_ms; /* JAILBOX_APPROVAL_TIMEOUT; 0: none */
  long long ended; /* when a running op's session was first seen ended; 0: not seen */
  bool db_failed; /* the last reading failed in the database (db_error says how) */
  char db_error[256];
  long long running; /* when the op was first seen running; 0: not yet */
  enum jb_op_state os; /* the op's state at the last reading that found it waiting */
  enum jb_session_state ss; /* the session's */
  long long changeset; /* the op waited for is this command's changeset (op id); 0: no */
};

/* The calls of one session that wait, among those of the process. */
struct op_waiting {
  struct op_waiting *next;
  long n;
  char job[]; /* the session's job id */
};

static struct {
  pthread_mutex_t lock;
  long total; /* calls of this process between taking a place and giving it back */
  struct op_waiting *head; /* one entry per session with a call waiting */
} waits = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A call that waits holds the thread it runs on (JAILBOX_WS_WORKERS are kept free beside
 * the waiting ones: server/pool.h), so the buyer's approve and the other sessions' calls are
 * never queued behind it. JAILBOX_MAX_WAITING_CALLS bounds how many wait at once in the
 * process, JAILBOX_MAX_WAITING_PER_SESSION how many of them one session's agents may hold, so
 * that one agent cannot take every place from the other sessions (a buyer's whole diff,
 * call->buyer_wait, is not counted in its session's share: its agent cannot keep the buyer
 * from reading). NULL when a place was taken, else why not. */
static const char *take_place(struct op_call *call) {
  if (call->counted) return NULL;
  long max_total = call->app->cfg ? call->app->cfg->max_waiting_calls : 1;
  long max_session = call->app->cfg ? call->app->cfg->max_waiting_per_session : 1;
  const char *job = call->job ? call->job : "";
  pthread_mutex_lock(&waits.lock);
  struct op_waiting *w = NULL;
  if (!call->buyer_wait)
    for (w = waits.head; w && strcmp(w->job, job);) w = w->next;
  const char *full = NULL;
  if (waits.total >= (max_total < 1 ? 1 : max_total))
    full =
        "too many calls are waiting (for approval, a command or a paused session) on this "
        "server; try again";
  else if (w && w->n >= (max_session < 1 ? 1 : max_session))
    full =
        "too many calls of this session are waiting (for approval, a command or a pause); "
        "try again when one has its answer";
  if (!full && !w && !call->buyer_wait) {
    size_t n = strlen(job) + 1;
    w = calloc(1, sizeof *w + n);
    if (w) {
      memcpy(w->job, job, n);
      w->next = waits.head;
      waits.head = w;
    } else {
      full = "out of memory";
    }
  }
  if (!full) {
    if (w) w->n++;
    waits.total++;
  }
  pthread_mutex_unlock(&waits.lock);
  if (full) return full;
  call->counted = true;
  call->waiting = w;
  if (!jb_pool_block_begin()) {
    op_leave_waiting(call);
    return "no thread can be started for a waiting call on this server; try again";
  }
  return NULL;
}

enum op_step op_take_waiting_place(struct op_call *call) {
  const char *why = take_place(call);
  if (!why) return OP_NEXT;
  op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "%s", why);
  return OP_END;
}

bool op_try_waiting_place(struct op_call *call) { return take_place(call) == NULL; }

void op_leave_waiting(struct op_call *call) {
  if (!call->counted) return;
  jb_pool_block_end();
  pthread_mutex_lock(&waits.lock);
  waits.total--;
  struct op_waiting *w = call->waiting;
  if (w && --w->n == 0) {
    for (struct op_waiting **pp = &waits.head; *pp; pp = &(*pp)->next)
      if (*pp == w) {
        *pp = w->next;
        break;
      }
    free(w);
  }
  pthread_mutex_unlock(&waits.lock);
  call->counted = false;
  call->waiting = NULL;
}

bool op_session_starting(enum jb_session_state state) {
  return state == JB_SESSION_CREATED || state == JB_SESSION_PRESCANNING;
}

/* Whether a wait for a starting session ends before the session is ready, *call->e saying
 * why: the database could not be read (`dberr`, else NULL), the drain, or the limit `until`
 * (ms of jb_now_ms). */
static bool start_wait_over(struct op_call *call, long long until, const jb_error *dberr) {
  if (dberr) {
    op_error_unavailable(call->e, dberr);
    return true;
  }
  if (atomic_load(&call->app->draining)) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
             "jailboxd is shutting down while the session was starting: nothing of the %s was "
             "stored; send it again",
             jb_tool_name(call->tool));
    return true;
  }
  if (jb_now_ms() >= until) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
             "the session is still %s after %ld s: nothing of the %s was stored; try again",
             jb_session_state_name(call->sess.state) ?: "starting",
             call->app->cfg ? call->app->cfg->start_wait_s : 0L, jb_tool_name(call->tool));
    return true;
  }
  return false;
}

enum op_step op_await_start(struct op_call *call) {
  if (!op_session_starting(call->sess.state)) return OP_NEXT;
  if (op_take_waiting_place(call) != OP_NEXT) return OP_END;
  struct jb_app *app = call->app;
  long long until = jb_now_ms() + (app->cfg ? app->cfg->start_wait_s : 300) * 1000LL;
  struct jb_opwait_ticket t;
  op_wait_begin(call, &t); /* fired by every change of the session's state (jb_op "0 …") */
  enum op_step s = OP_NEXT;
  for (bool first = true;; first = false) {
    jb_error err = {0};
    if (!first) {
      jb_db_release(app->db, call->c);
      call->c = NULL;
      long nap = SAFETY_NET_MS;
      if (until - jb_now_ms() < nap) nap = (long)(until - jb_now_ms());
      if (jb_progress_due_in(call->progress) < nap) nap = jb_progress_due_in(call->progress);
      if (nap < 1) nap = 1;
      if (app->opwait)
        jb_opwait_wait(app->opwait, &t, nap, FALLBACK_MS);
      else
        sleep_ms(nap < FALLBACK_MS ? nap : FALLBACK_MS);
      call->c = jb_db_acquire(app->db, &err);
    }
    /* read again after the ticket is registered: a change just before it is not missed */
    if (call->c) {
      jb_session_facts_clear(&call->sess);
      int rc = jb_db_session_facts(call->c, call->job, &call->sess, &err);
      if (rc == JB_ERR_NOT_FOUND || (rc == JB_OK && !op_session_starting(call->sess.state)))
        break; /* ready, ended, or gone: the stages after decide on it */
    }
    if (start_wait_over(call, until, err.msg[0] ? &err : NULL)) {
      s = OP_END;
      break;
    }
    if (jb_progress_on(call->progress)) {
      char m[120];
      snprintf(m, sizeof m, "the session is %s: waiting for it to become active",
               jb_session_state_name(call->sess.state) ?: "starting");
      jb_progress_tick(call->progress, m, false);
    }
  }
  op_wait_end(call, &t);
  op_leave_waiting(call); /* the stages after take their own place where they wait */
  return s;
}

/* `path` as it is now (the shim's stat result, new, into *out): a stat op stored (queued) and
 * waited for as any op, run by the worker that holds the session — held while the session is
 * paused, as the op it prepares would be.
 * `content`: with the file's content when it is at most 1 MiB. `missing_ok`: a path whose
 * parent directory is missing too is {exists: false} (a mkdir with parents, a move's
 * destination), not an error. */
enum op_step op_stat_of(struct op_call *call, const char *path, bool content, bool tree,
                        json_t **out, bool missing_ok) {
  cleanup_json json_t *stargs = json_object();
  if (json_array_size(call->sess.exclude) > 0)
    json_object_set(stargs, "exclude", call->sess.exclude);
  if (content) json_object_set_new(stargs, "withContent", json_true());
  if (tree) json_object_set_new(stargs, "tree", json_true());
  cleanup_json json_t *sa = NULL;
  int rc = JB_OK;
  jb_error err = {0};
  {
    cleanup_free char *stext = json_dumps(stargs, JSON_COMPACT);
    struct jb_opwait_ticket ticket;
    long long op_id = 0;
    op_wait_begin(call, &ticket);
    rc = stext ? jb_db_op_create(call->c, call->job, "stat", path, stext, false, NULL, &op_id,
                                 call->st, &err)
               : JB_ERR_FAIL;
    if (rc == JB_OK) {
      atomic_fetch_add(&jb_metric_ops_queued, 1);
      sa = op_await(call, op_id, &ticket);
    } else {
      op_wait_end(call, &ticket);
    }
  }
  if (op_insert_refused(call, rc, &err)) return OP_END;
  if (!sa) {
    /* op_await said why, of the stat. The call's own op was never stored: an answer that
     * leaves the stat "stored, check before sending it again" is restated for the call */
    if (call->e->code == JB_MCP_UNAVAILABLE && atomic_load(&call->app->draining)) {
      json_decref(call->e->data);
      call->e->data = NULL;
      op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
               "jailboxd is shutting down: the %s was not stored (it waited on a read of %.200s "
               "before it), so nothing of it ran or will run",
               jb_tool_name(call->tool), path);
    }
    return OP_END;
  }
  if (!json_is_true(json_object_get(sa, "ok"))) {
    const char *code = json_string_value(json_object_get(json_object_get(sa, "error"), "code"));
    if (missing_ok && code && !strcmp(code, "not_found")) { /* a parent is missing too */
      *out = json_pack("{s:b}", "exists", 0);
      return *out ? OP_NEXT : OP_END;
    }
    op_shim_error(call->e, json_object_get(sa, "error"));
    return OP_END;
  }
  *out = json_incref(json_object_get(sa, "result"));
  return *out ? OP_NEXT : OP_END;
}

enum op_step op_stat_path(struct op_call *call, const char *path, bool tree, json_t **out,
                          bool missing_ok) {
  return op_stat_of(call, path, false, tree, out, missing_ok);
}

void op_call_release(struct op_call *call) {
  op_leave_waiting(call);
  json_decref(call->current);
  json_decref(call->current2);
  json_decref(call->diff);
  free(call->describe);
  json_decref(call->many);
  jb_db_release(call->app->db, call->c);
  jb_session_facts_clear(&call->sess);
  free(call->data);
  json_decref(call->sargs);
  json_decref(call->ans);
  *call = (struct op_call){.app = call->app,
                           .job = call->job,
                           .tool = call->tool,
                           .args = call->args,
                           .e = call->e,
                           .fresh = call->fresh};
}

void op_wait_begin(struct op_call *call, struct jb_opwait_ticket *t) {
  if (call->app->opwait) jb_opwait_register(call->app->opwait, t, call->job, -1);
}

void op_wait_end(struct op_call *call, struct jb_opwait_ticket *t) {
  if (call->app->opwait) jb_opwait_unregister(call->app->opwait, t);
}

/* A pending op past JAILBOX_APPROVAL_TIMEOUT is expired (the buyer's pending request is over:
 * said on every instance) and the call ends with timeout: true. Otherwise *nap is cut to when
 * it will be due. */
static bool approval_overdue(struct op_call *call, long long op_id, const struct wait_clock *clk,
                             long *nap) {
  long long left = clk->stored + clk->approval_ms - jb_now_ms();
  if (left <= 0) {
    struct jb_audit_head h;
    json_t *opj = NULL;
    jb_error err = {0};
    int xr = jb_db_op_expire(call->c, jb_signer_key(call->app->signer), call->job, op_id,
                             (long)(clk->approval_ms / 1000), &h, &opj, &err);
    if (xr == JB_OK) {
      jb_bus_publish(call->app->bus, call->job, JB_EVENT_OP, opj);
      jb_bus_publish(call->app->bus, call->job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&h));
      op_error(call->e, JB_MCP_TIMEOUT, "timeout",
               "the buyer did not decide on the %s within %lld s", jb_tool_name(call->tool),
               clk->approval_ms / 1000);
      return true;
    }
    if (xr == JB_ERR_FAIL)
      jb_log(JB_LOG_WARN, "approval timeout not recorded", "jobId", call->job, "detail", err.msg,
             NULL);
    left = 10; /* decided meanwhile, or not yet that old by the database's clock: read again */
  }
  if (left < *nap) *nap = (long)left;
  return false;
}

/* Draining (SIGTERM): a call still waiting on its op ends a second before the shutdown grace
 * runs out, so that the instance can stop within it. The op stays in the database as it is,
 * and the answer says no more than is known: where the op was, whether its session ends with
 * this instance (its worker is one of this instance's, which end their sessions when they
 * stop) or goes on elsewhere, and that its outcome is in the session's ops list — so that the
 * agent does not send again an op that may still run, or may have run. `os`/`ss`: the op's and
 * the session's state as last read (os JB_OP_UNKNOWN: not read, the database being
 * unreachable). True when the call ends so; otherwise *nap is cut to that moment. */
static bool drain_cut(struct op_call *call, long long op_id, enum jb_op_state os,
                      enum jb_session_state ss, long *nap) {
  struct jb_app *app = call->app;
  long long deadline = atomic_load(&app->drain_deadline_ms);
  if (!atomic_load(&app->draining) || deadline <= 0) return false;
  long long left = deadline - JB_DRAIN_ANSWER_MS - jb_now_ms();
  if (left <= 0) {
    const char *where = os == JB_OP_UNKNOWN       ? "is stored (the database cannot be read now)"
                        : os == JB_OP_PENDING     ? "was waiting for the buyer"
                        : ss == JB_SESSION_PAUSED ? "was held by the pause"
                        : os == JB_OP_RUNNING     ? "was running in the session's sandbox"
                                                  : "was queued for the session's sandbox";
    bool ends = op_worker_socket(app, &call->sess) != NULL;
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
             "jailboxd is shutting down: op %lld %s; %s. Its outcome is in the session's ops "
             "list: check it before sending the op again",
             op_id, where,
             ends ? "the session ends with this instance (its worker stops with it)"
                  : "the session goes on, served by another instance or this one restarted");
    return true;
  }
  if (left < *nap) *nap = (long)left;
  return false;
}

/* One reading of op `op_id`'s row: OP_ANSWERED with its answer in *out (new), OP_END with
 * *call->e, or OP_NEXT with *nap the ms to sleep before the next reading. Pending ops and the
 * ops of a paused session wait without limit; a queued op of an active session must run
 * within OP_RUN_TIMEOUT_MS, counted again while another op of the session runs. */
static enum op_step read_outcome(struct op_call *call, long long op_id, struct wait_clock *clk,
                                 json_t **out, long *nap) {
  struct jb_mcp_error *e = call->e;
  char ost[20], sst[20];
  cleanup_free char *res = NULL;
  cleanup_free char *reason = NULL;
  jb_error err = {0};
  int rc = jb_db_op_poll(call->c, call->job, op_id, ost, sst, &res, &reason, &err);
  if (rc == JB_ERR_FAIL) {
    /* the op is stored: waited on as when the database cannot be reached (op_await) */
    clk->db_failed = true;
    snprintf(clk->db_error, sizeof clk->db_error, "%s", err.msg);
    return OP_NEXT;
  }
  if (rc != JB_OK) {
    op_error(e, JB_MCP_UNAVAILABLE, "unavailable", "the op disappeared");
    return OP_END;
  }
  enum jb_op_state os = jb_op_state_from_name(ost);
  if (os == JB_OP_REJECTED) {
    op_error_rejected(e, reason, sst);
    return OP_END;
  }
  if (os == JB_OP_DONE || os == JB_OP_FAILED) {
    *out = res ? json_loads(res, 0, NULL) : NULL;
    if (!*out) {
      op_error(e, JB_MCP_UNAVAILABLE, "unavailable", "the op's result cannot be read");
      return OP_END;
    }
    return OP_ANSWERED;
  }
  enum jb_session_state ss = jb_session_state_from_name(sst);
  if (!jb_state_is_live(sst) || ss == JB_SESSION_DONE) {
    /* a command that ran while its session ended (an escape it made, an abort): its worker
     * stores how it ended, or the session's end fails it with the reason; either is the
     * answer. Bounded, for a worker that can do neither. */
    if (os == JB_OP_RUNNING) {
      long long now = jb_now_ms();
      if (!clk->ended) clk->ended = now;
      if (now - clk->ended < RUNNING_AFTER_END_MS) {
        *nap = SAFETY_NET_MS;
        return drain_cut(call, op_id, os, ss, nap) ? OP_END : OP_NEXT;
      }
      op_error(e, JB_MCP_DENIED, "aborted",
               "the session is %s: the command was running when it ended; how it ended is "
               "recorded in the session's ops list once its worker reports it",
               sst);
      return OP_END;
    }
    op_error(e, JB_MCP_DENIED, "denied", "the session is %s: the op was not run", sst);
    return OP_END;
  }
  bool queued = os == JB_OP_APPROVED && ss == JB_SESSION_ACTIVE; /* for the worker to run */
  if (queued && jb_now_ms() - clk->started > OP_RUN_TIMEOUT_MS) {
    /* behind a command of the session that still runs (one at a time): not late, waiting */
    bool busy = false;
    if (jb_db_session_busy(call->c, call->job, &busy, &err) == JB_OK && busy) {
      clk->started = jb_now_ms();
    } else {
      op_error(e, JB_MCP_UNAVAILABLE, "unavailable",
               "the session's sandbox did not run the op in time");
      return OP_END;
    }
  }
  if (!queued) clk->started = jb_now_ms();
  *nap = SAFETY_NET_MS;
  bool pending = os == JB_OP_PENDING;
  if (pending && clk->approval_ms > 0 && approval_overdue(call, op_id, clk, nap)) return OP_END;
  /* held by a pause: from now on among the calls that wait (op_supervise let a read of an
   * active session in without a place); with none free it waits all the same, since the op
   * is stored and will run at the resume */
  if (ss == JB_SESSION_PAUSED) (void)op_try_waiting_place(call);
  if (drain_cut(call, op_id, os, ss, nap)) return OP_END;
  clk->os = os;
  clk->ss = ss;
  if (os == JB_OP_RUNNING && !clk->running) clk->running = jb_now_ms();
  return OP_NEXT;
}

/* The database could not be reached, or read, while op `op_id` waited (`why`: how). The op
 * is stored: "try again" now would have the agent send again an op that may still run, so the
 * call goes on waiting for the database, up to DB_DOWN_WAIT_MS from *db_down (set now when
 * 0), or until a drain's answer is due. True when the call ends (its error set). */
static bool db_unreachable(struct op_call *call, long long op_id, long long *db_down,
                           const char *why) {
  long long at = jb_now_ms();
  if (!*db_down) *db_down = at;
  long nap = SAFETY_NET_MS;
  if (drain_cut(call, op_id, JB_OP_UNKNOWN, JB_SESSION_ACTIVE, &nap)) return true;
  if (at - *db_down < DB_DOWN_WAIT_MS) return false;
  jb_log(JB_LOG_ERROR, "op wait: database unreachable", "detail", why, NULL);
  op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
           "the database has been unreachable for %d s while op %lld waited; the op is "
           "stored and may still run: check the session's ops before sending it again",
           DB_DOWN_WAIT_MS / 1000, op_id);
  return true;
}

/* What op `call` waits for, as its progress notification says it (into `m`, `n` bytes):
 * the buyer, a pause, the queue, or the command running (with its last output line, `line`
 * NULL when not watched). Its kind (into *kind) changes with the op's state. */
static void wait_message(const struct op_call *call, const struct wait_clock *clk,
                         struct jb_exec_line *line, char *m, size_t n, int *kind) {
  char last[sizeof line->line];
  if (clk->ss == JB_SESSION_PAUSED) {
    *kind = 1;
    snprintf(m, n, "the session is paused: the %s is held until it is resumed",
             jb_tool_name(call->tool));
  } else if (clk->os == JB_OP_PENDING && clk->changeset) {
    *kind = 5;
    snprintf(m, n,
             "the command ended; its changes wait for the buyer to approve them in whole or in "
             "part (changeset op %lld)",
             clk->changeset);
  } else if (clk->os == JB_OP_PENDING) {
    *kind = 2;
    snprintf(m, n, "waiting for the buyer to approve or reject the %s", jb_tool_name(call->tool));
  } else if (clk->os != JB_OP_RUNNING) {
    *kind = 3;
    snprintf(m, n, "queued for the session's sandbox (it runs one command at a time)");
  } else {
    *kind = 4;
    long long s = (jb_now_ms() - (clk->running ? clk->running : clk->stored)) / 1000;
    if (line && jb_exec_line_last(line, last, sizeof last))
      snprintf(m, n, "running, %lld s: %s", s, last);
    else
      snprintf(m, n, "running, %lld s", s);
  }
}

/* The changeset op a command's answer `ans` (borrowed) says its changes wait in (its
 * result's changeset {opId, state: "pending"}), or 0. */
static long long pending_changeset(const json_t *ans) {
  json_t *cs = json_object_get(json_object_get(ans, "result"), "changeset");
  const char *st = json_string_value(json_object_get(cs, "state"));
  json_t *id = json_object_get(cs, "opId");
  return st && !strcmp(st, "pending") && json_is_integer(id) ? (long long)json_integer_value(id)
                                                             : 0;
}

/* The command's answer `exec_ans` (stolen) with its changeset's outcome: the changeset op's
 * answer `cs_ans` (stolen; NULL when it was not read), how its wait ended (`st`: OP_ANSWERED
 * done or failed; OP_END rejected, expired, the session ended, the instance draining — the
 * reason, in *call->e, becomes the changeset's `note` and the call answers with the command's
 * result). The changeset member becomes {opId, files, approvable, changesetSha256, state:
 * applied|failed|rejected|undecided, and the apply's applied, conflicts, failed, rejected}. */
static json_t *changeset_outcome(struct op_call *call, json_t *exec_ans, json_t *cs_ans,
                                 enum op_step st) {
  json_t *cs = json_object_get(json_object_get(exec_ans, "result"), "changeset");
  if (!json_is_object(cs)) {
    json_decref(cs_ans);
    return exec_ans;
  }
  if (st == OP_ANSWERED && json_is_true(json_object_get(cs_ans, "ok"))) {
    json_object_set_new(cs, "state", json_string("applied"));
    json_object_update(cs, json_object_get(cs_ans, "result"));
  } else if (st == OP_ANSWERED) {
    json_object_set_new(cs, "state", json_string("failed"));
    json_object_set(cs, "error", json_object_get(cs_ans, "error"));
  } else {
    bool rejected =
        json_is_string(json_object_get(call->e->data, "reason")) &&
        !strcmp(json_string_value(json_object_get(call->e->data, "reason")), "rejected");
    json_object_set_new(cs, "state", json_string(rejected ? "rejected" : "undecided"));
    if (call->e->message[0]) json_object_set_new(cs, "note", json_string(call->e->message));
    /* the command ran: its answer stands, with what became of its changes */
    call->e->code = 0;
    call->e->message[0] = '\0';
    json_decref(call->e->data);
    call->e->data = NULL;
  }
  json_decref(cs_ans);
  return exec_ans;
}

/* Sleeps until a jb_op notification names the op or the session (server/opwait.h), or `nap`
 * ms have passed (FALLBACK_MS while the LISTEN connection is down), with the connection back
 * in the pool meanwhile. Before the first reading when notifications can come: the op has
 * not run yet. */
json_t *op_await(struct op_call *call, long long op_id, struct jb_opwait_ticket *t) {
  struct jb_app *app = call->app;
  long long now = jb_now_ms();
  struct wait_clock clk = {.stored = now,
                           .started = now,
                           .approval_ms = app->cfg ? app->cfg->approval_timeout_s * 1000LL : 0};
  long nap = SAFETY_NET_MS;
  json_t *out = NULL;
  /* a wait of the handler pool, so that the threads kept free stay free (a call that took a
   * waiting place began one already) */
  bool began = !jb_pool_blocking() && jb_pool_block_begin() && jb_pool_blocking();
  long long db_down = 0; /* since when the database could not be reached, ms */
  if (app->opwait) jb_opwait_set_op(app->opwait, t, op_id);
  bool told = jb_progress_on(call->progress);
  struct jb_exec_line line;
  if (told && call->tool == JB_TOOL_EXEC) jb_exec_line_watch(&line, call->job, op_id);
  int kind = 0; /* of the last message (wait_message) */
  json_t *exec_ans = NULL; /* a command's answer while its changeset is waited for */
  for (bool read_now = !app->opwait;; read_now = false) {
    if (!read_now) {
      jb_db_release(app->db, call->c);
      if (app->opwait)
        jb_opwait_wait(app->opwait, t, db_down ? FALLBACK_MS * 25 : nap, FALLBACK_MS);
      else
        sleep_ms(db_down ? FALLBACK_MS * 25 : nap < FALLBACK_MS ? nap : FALLBACK_MS);
      jb_error err = {0};
      call->c = jb_db_acquire(app->db, &err);
      if (!call->c) {
        if (db_unreachable(call, op_id, &db_down, err.msg)) break;
        continue;
      }
    }
    clk.db_failed = false;
    enum op_step st = read_outcome(call, op_id, &clk, &out, &nap);
    if (st != OP_NEXT && clk.changeset) { /* the changeset decided (or the wait for it over) */
      out = changeset_outcome(call, exec_ans, out, st);
      exec_ans = NULL;
      break;
    }
    if (st != OP_NEXT) {
      long long cs = st == OP_ANSWERED ? pending_changeset(out) : 0;
      if (!cs) break;
      /* a command whose changes are held for the buyer: the call waits for that decision, so
       * that the agent's next command sees what was applied */
      exec_ans = out;
      out = NULL;
      op_id = clk.changeset = cs;
      clk.stored = clk.started = jb_now_ms();
      clk.running = 0;
      if (app->opwait) jb_opwait_set_op(app->opwait, t, op_id);
      continue;
    }
    if (!clk.db_failed)
      db_down = 0;
    else if (db_unreachable(call, op_id, &db_down, clk.db_error))
      break;
    if (told && !clk.db_failed) {
      char m[300];
      int was = kind;
      wait_message(call, &clk, call->tool == JB_TOOL_EXEC ? &line : NULL, m, sizeof m, &kind);
      /* a new state is told at once (not at the first reading: the call just began) */
      jb_progress_tick(call->progress, m, was && was != kind);
      if (jb_progress_due_in(call->progress) < nap) nap = jb_progress_due_in(call->progress);
    }
  }
  if (exec_ans) out = changeset_outcome(call, exec_ans, out, OP_END); /* the wait cut short */
  if (told && call->tool == JB_TOOL_EXEC) jb_exec_line_unwatch(&line);
  op_wait_end(call, t);
  if (began) jb_pool_block_end();
  return out;
}
