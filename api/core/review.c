/* review.c — the operator's reviewer on the op path (op_review, api/core/op_call.h): the
 * request an op held for the buyer makes (what the buyer would be shown, the session's
 * context, a request id), its sending through lib/reviewer.h, the verdict applied, and the
 * pause of a reviewer that keeps failing: after JAILBOX_REVIEWER_FAILURES failed reviews in a
 * row it is not called for JAILBOX_REVIEWER_PAUSE_MS — those ops go to the buyer at once,
 * "reviewer unavailable" — then the next op calls it again (one more failure pauses it
 * again). A review blocks only the thread of its call, which holds a place among the waiting
 * calls (op_take_waiting_place) as any op that waits for the buyer. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api/core/op_call.h"
#include "db/db.h"
#include "db/sessions.h"
#include "lib/log.h"
#include "server/app.h"
#include "server/config.h"

/* The pause: failed reviews in a row, and until when (CLOCK_MONOTONIC ms) none is sent. */
static pthread_mutex_t pause_lock = PTHREAD_MUTEX_INITIALIZER;
static long failures;
static long long paused_until;
static char last_failure[JB_REVIEW_REASON_MAX + 1];

static long long mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* True when the reviewer is paused now: *out is ask, failed, saying so. */
static bool paused(const struct jb_config *cfg, struct jb_review *out) {
  pthread_mutex_lock(&pause_lock);
  long long left = paused_until - mono_ms();
  bool p = cfg->reviewer_failures > 0 && left > 0;
  if (p) {
    *out = (struct jb_review){.verdict = JB_REVIEW_ASK, .failed = true};
    snprintf(out->reason, sizeof out->reason,
             "reviewer unavailable: %ld failed reviews in a row (the last: %.300s); not called "
             "for another %lld s",
             failures, last_failure, (left + 999) / 1000);
  }
  pthread_mutex_unlock(&pause_lock);
  return p;
}

/* Counts the outcome `r` of a review that was sent. */
static void count(const struct jb_config *cfg, const struct jb_review *r) {
  if (r->cut) return; /* ended by the shutdown: says nothing of the reviewer */
  pthread_mutex_lock(&pause_lock);
  if (!r->failed) {
    failures = 0;
  } else {
    failures++;
    snprintf(last_failure, sizeof last_failure, "%s", r->reason);
    if (cfg->reviewer_failures > 0 && failures >= cfg->reviewer_failures) {
      paused_until = mono_ms() + cfg->reviewer_pause_ms;
      if (failures == cfg->reviewer_failures)
        jb_log(JB_LOG_WARN, "reviewer paused after failed reviews in a row", "detail", r->reason,
               NULL);
    }
  }
  pthread_mutex_unlock(&pause_lock);
}

/* The request (new JSON text) for call's op, with `rid` its request id:
 * {requestId, session {jobId, mode, image, agentId, state}, askedBy, rule?, op}. */
static char *request_text(struct op_call *call, const char *rid, json_t *session) {
  cleanup_json json_t *op = op_approval_view(call);
  if (!op) return NULL;
  json_object_del(op, "jobId");
  json_object_set(op, "diff", call->diff ? call->diff : json_null());
  cleanup_json json_t *req = json_pack(
      "{s:s,s:i,s:s,s:O,s:s,s:O}", "type", "jailbox.review", "version", 1, "requestId", rid,
      "session", session, "askedBy", call->asked_by[0] ? call->asked_by : "mode", "op", op);
  if (!req) return NULL;
  if (call->asked_by[0]) json_object_set_new(req, "rule", json_string(call->asked_by + 5));
  return json_dumps(req, JSON_COMPACT);
}

/* Sends the review of call's op (the connection back in the pool meanwhile) into call->review.
 * False with *call->e when the connection could not be had again. */
static bool send_review(struct op_call *call, const char *rid) {
  const struct jb_config *cfg = call->app->cfg;
  jb_error err = {0};
  json_t *session = NULL;
  int rc = jb_db_session_context(call->c, call->job, &session, &err);
  if (rc != JB_OK) {
    call->review = (struct jb_review){.verdict = JB_REVIEW_ASK, .failed = true};
    snprintf(call->review.reason, sizeof call->review.reason,
             "reviewer not asked: the session could not be read");
    jb_log(JB_LOG_WARN, "reviewer not asked", "jobId", call->job, "detail", err.msg, NULL);
    return true;
  }
  char *body = request_text(call, rid, session);
  json_decref(session);
  if (!body) {
    call->review = (struct jb_review){.verdict = JB_REVIEW_ASK, .failed = true};
    snprintf(call->review.reason, sizeof call->review.reason, "reviewer not asked: out of memory");
    return true;
  }
  jb_db_release(call->app->db, call->c);
  call->c = NULL;
  long long t0 = mono_ms();
  /* a shutdown cuts the review short in time for the call's answer (server/app.h); a
   * webhook's transfer sees the cut within about a second (libcurl's progress calls) */
  const struct jb_review_cut cut = {.at_ms = &call->app->drain_deadline_ms,
                                    .before_ms = JB_DRAIN_ANSWER_MS + 1500};
  if (cfg->reviewer_url[0])
    jb_review_http(cfg->reviewer_url, body, strlen(body), cfg->reviewer_timeout_ms, &cut,
                   &call->review);
  else
    jb_review_cmd(cfg->reviewer_cmd, body, strlen(body), cfg->reviewer_timeout_ms, &cut,
                  &call->review);
  long long took = mono_ms() - t0;
  free(body);
  count(cfg, &call->review);
  char ms[32];
  snprintf(ms, sizeof ms, "%lld", took);
  jb_log(call->review.failed ? JB_LOG_WARN : JB_LOG_INFO, "op reviewed", "jobId", call->job,
         "requestId", rid, "tool", jb_tool_name(call->tool), "verdict",
         jb_review_verdict_name(call->review.verdict), "failed",
         call->review.failed ? "true" : "false", "ms", ms, "reason", call->review.reason, NULL);
  call->c = jb_db_acquire(call->app->db, &err);
  if (!call->c) {
    op_error_unavailable(call->e, &err);
    return false;
  }
  return true;
}

/* Appends `label` and `text` to call->decision_reason ("; " between), cut to fit. */
static void add_reason(struct op_call *call, const char *label, const char *text) {
  size_t n = strlen(call->decision_reason);
  snprintf(call->decision_reason + n, sizeof call->decision_reason - n, "%s%s: %s",
           n > 0 ? "; " : "", label, text);
}

enum op_step op_review(struct op_call *call) {
  const struct jb_config *cfg = call->app->cfg;
  call->reviewed = false;
  if (!call->pending || !cfg || (!cfg->reviewer_url[0] && !cfg->reviewer_cmd[0])) return OP_NEXT;
  char rid[33];
  {
    unsigned char b[16];
    randombytes_buf(b, sizeof b);
    sodium_bin2hex(rid, sizeof rid, b, sizeof b);
  }
  if (!paused(cfg, &call->review) && !send_review(call, rid)) return OP_END;
  call->reviewed = true;
  struct jb_review *r = &call->review;
  if (r->cut) { /* nothing stored yet: the call ends, and nothing of it will run */
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
             "jailboxd is shutting down: the %s was not stored (its review was cut short), so "
             "nothing of it ran or will run",
             jb_tool_name(call->tool));
    return OP_END;
  }
  if (r->verdict == JB_REVIEW_ALLOW) {
    call->pending = false;
    snprintf(call->decided_by, sizeof call->decided_by, "reviewer");
    snprintf(call->decision_reason, sizeof call->decision_reason, "%s",
             r->reason[0] ? r->reason : "allowed by the reviewer");
    return OP_NEXT;
  }
  if (r->verdict == JB_REVIEW_DENY) {
    snprintf(call->decided_by, sizeof call->decided_by, "reviewer");
    op_error(call->e, JB_MCP_DENIED, "denied", "denied by the reviewer%s%.500s",
             r->reason[0] ? ": " : "", r->reason);
    op_audit_refusal(
        call, call->path,
        json_pack("{s:s,s:s,s:s,s:s}", "error", "denied", "decidedBy", "reviewer", "reason",
                  r->reason[0] ? r->reason : "denied by the reviewer", "requestId", rid));
    return OP_END;
  }
  /* ask: the buyer decides; the op's reason says what the reviewer said */
  add_reason(call, r->failed ? "reviewer failed" : "reviewer asked",
             r->reason[0] ? r->reason : "no reason given");
  return OP_NEXT;
}
