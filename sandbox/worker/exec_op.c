/* exec_op.c — the agent's exec on the worker: a claimed exec op is marked running in its own
 * commit (no session row is held while its command runs: a pause, an abort or the buyer's
 * kill get through meanwhile), run in the session's spawner (sandbox/worker/exec.h), its output
 * published live to the buyer as jailbox:exec_output {opId, stream, data, seq} — UTF-8 text,
 * each event well under PostgreSQL's NOTIFY limit, at most one event every LIVE_INTERVAL_MS
 * (chunks in between coalesced), LIVE_TOTAL_MAX bytes per op —, and its outcome stored with
 * its audit entry: the agent's result {exitCode, signal, timedOut, durationMs, stdout, stderr,
 * stdoutTruncated, stderrTruncated, redactions, ...}, a non-zero exit a normal result, a kill
 * by the buyer or by the exec seccomp filter a failure (`killed`, `seccomp`; the latter a
 * security signal). Both streams pass the redactor (lib/redact.h: the scan rules' `secret` and
 * `redact` rules) as they arrive, before anything else sees them: the live events, the result
 * and its hashes carry the redacted output, never what a rule matched; each redaction is
 * counted and recorded {rule, stream, offset} in the result and the audit details. The audit
 * entry holds hashes and byte counts, never the output. A buyer's
 * kill (NOTIFY jb_exec) and the session's pause and resume (NOTIFY jb_op) reach the running
 * command through exec_op_signal. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/ops.h"
#include "lib/audit.h"
#include "db/sessions.h"
#include "lib/buf.h"
#include "sandbox/worker/workspace_scan.h"
#include "lib/redact.h"
#include "lib/utf8.h"
#include "sandbox/worker/changeset.h"
#include "sandbox/worker/exec.h"
#include "sandbox/worker/exec_effects.h"
#include "sandbox/worker/landing.h"
#include "sandbox/worker/worker.h"

#define LIVE_RAW_MAX \
  4000 /* raw bytes of one exec_output event at most (fewer when escaping would
                           * take its JSON past JB_EVENT_MAX_BYTES) */
#define LIVE_INTERVAL_MS 50 /* one exec_output event of an op at most this often: 20 a second */
#define LIVE_PENDING_MAX (64 * 1024) /* bytes per stream coalesced meanwhile; more are skipped */
#define LIVE_TOTAL_MAX (1024 * 1024) /* bytes of live output per op; then one capped event */
#define LIVE_FINAL_EVENTS 8 /* events sent at once when the command has ended */
#define AUDIT_ARGV_MAX 8192 /* bytes of argv (as JSON) recorded as it is; longer: its hash */
#define RUNNING_MAX 64 /* execs running at once on this worker (one per runner at most) */
#define EXEC_DETAILS_BUDGET \
  (32 * 1024) /* bytes of an exec's details in its entry, at most: the rest of the entry (a
               * 4 KiB path and the 1,000-byte decision reason, escaped) stays within
               * JB_AUDIT_MAX_CANONICAL */
#define REAP_MAX 64 /* overdue running ops looked at per sweep */
#define RULE_ID_MAX 64 /* bytes of a rule id in a redaction record */
#define UNSTORED_WHY_MAX 300 /* bytes of the reason an outcome was not stored, in its entry */

/* ---- the running execs: a kill, pause or resume finds its command here ---- */

static struct {
  pthread_mutex_t lock;
  struct running {
    bool used;
    bool killed; /* the buyer or the operator killed it */
    bool by_service; /* ... the operator (the service token) */
    bool stopped; /* its session is paused (stop asked, no cont since) */
    bool started; /* its command was sent to the spawner: a signal reaches it now */
    long long op_id;
    char job[129];
  } r[RUNNING_MAX];
} running = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int running_add(const char *job, long long op_id) {
  pthread_mutex_lock(&running.lock);
  int slot = -1;
  for (int i = 0; i < RUNNING_MAX && slot < 0; i++)
    if (!running.r[i].used) {
      slot = i;
      running.r[i] = (struct running){.used = true, .op_id = op_id};
      snprintf(running.r[i].job, sizeof running.r[i].job, "%s", job);
    }
  pthread_mutex_unlock(&running.lock);
  return slot;
}

/* Whether the exec of `slot` was killed (*by_service: by the operator, may be NULL); with
 * `remove` the slot is freed. */
static bool running_killed(int slot, bool remove, bool *by_service) {
  if (slot < 0) return false;
  pthread_mutex_lock(&running.lock);
  bool k = running.r[slot].killed;
  if (by_service) *by_service = running.r[slot].by_service;
  if (remove) running.r[slot].used = false;
  pthread_mutex_unlock(&running.lock);
  return k;
}

bool exec_op_wait_stored(const char *job, long max_ms) {
  for (long waited = 0;; waited += 20) {
    bool any = false;
    pthread_mutex_lock(&running.lock);
    for (int i = 0; i < RUNNING_MAX && !any; i++)
      any = running.r[i].used && !strcmp(running.r[i].job, job);
    pthread_mutex_unlock(&running.lock);
    if (!any) return true;
    if (waited >= max_ms) return false;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* Session `job` pinned (users + 1, not its lock: a command runs beside the shim's ops), or
 * NULL when it is not here. Let go with session_unpin. */
static struct jb_session *session_pin(struct jb_worker *w, const char *job) {
  pthread_mutex_lock(&w->lock);
  struct jb_session *s = session_find(w, job);
  if (s) atomic_fetch_add(&s->users, 1);
  pthread_mutex_unlock(&w->lock);
  return s;
}

static void session_unpin(struct jb_session *s) {
  if (s) atomic_fetch_sub(&s->users, 1);
}

/* jb_exec_request.on_started of the exec in slot (intptr_t)ctx: from now on its command takes
 * signals; the kill or stop asked for before is sent at once. */
static const char *running_started(void *ctx) {
  int slot = (int)(intptr_t)ctx;
  pthread_mutex_lock(&running.lock);
  running.r[slot].started = true;
  const char *what = running.r[slot].killed ? "kill" : running.r[slot].stopped ? "stop" : NULL;
  pthread_mutex_unlock(&running.lock);
  return what;
}

void exec_op_signal(struct jb_worker *w, const char *job, long long op_id, const char *what) {
  /* The flags are kept for an exec whose command is not yet sent (running_started sends what
   * they ask for); the spawner is signalled only for the one whose command it runs — another
   * exec of the session waiting or failing `busy` must not signal that command. */
  bool found = false;
  bool svc = !strcmp(what, "kill-service");
  if (svc) what = "kill"; /* to the spawner, a kill is a kill */
  pthread_mutex_lock(&running.lock);
  for (int i = 0; i < RUNNING_MAX; i++) {
    struct running *r = &running.r[i];
    if (!r->used || strcmp(r->job, job) || (op_id && r->op_id != op_id)) continue;
    if (!strcmp(what, "kill")) {
      r->killed = true;
      r->by_service = svc;
    }
    if (!strcmp(what, "stop")) r->stopped = true;
    if (!strcmp(what, "cont")) r->stopped = false;
    if (r->started) found = true;
  }
  pthread_mutex_unlock(&running.lock);
  if (!found) return;
  struct jb_session *s = session_pin(w, job);
  if (!s) return;
  jb_error err = {0};
  if (jb_exec_signal(s, what, &err) < 0 && err.code != ESRCH)
    slog(w, JB_LOG_WARN, job, "exec signal failed", "signal", what, "error", err.msg, NULL);
  else
    slog(w, JB_LOG_INFO, job, "exec signalled", "signal", what, NULL);
  session_unpin(s);
}

void exec_op_ahead(struct jb_worker *w, const char *job, bool ahead) {
  struct jb_session *s = session_pin(w, job);
  if (!s) return;
  jb_error err = {0};
  if (atomic_load(&s->sb_ready) && jb_exec_ahead(s, ahead, &err) < 0 && err.code != ENOTSUP)
    slog(w, JB_LOG_WARN, job, "exec: the spawner was not told about the jail ahead", "ahead",
         ahead ? "build" : "discard", "error", err.msg, NULL);
  session_unpin(s);
}

/* ---- output: collected for the agent, published live for the buyer ---- */

static long long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Monotonic time in milliseconds with microseconds, for the stage timings. */
static double mono_msf(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* Rounds `ms` to a tenth of a millisecond as a JSON number (new). */
static json_t *ms_json(double ms) { return json_real((double)(long long)(ms * 10.0 + 0.5) / 10.0); }

/* One stream of a running command. */
struct stream {
  const char *name; /* "stdout", "stderr" */
  struct jb_redactor *rd; /* what the spawner sends passes it first */
  struct jb_buf all; /* the redacted output (at most maxOutputBytes) */
  crypto_hash_sha256_state sha; /* of the redacted output */
  struct jb_buf live; /* not yet published */
  size_t skipped; /* bytes left out of the live view (coalescing buffer full, or the cap) */
};

struct exec_run {
  struct jb_worker *w;
  PGconn *c; /* idle: events are published on it */
  const char *job;
  long long op_id;
  struct stream st[2];
  long long seq; /* exec_output events of this op so far */
  long long last_ms; /* when the last one was published */
  size_t live_total; /* bytes published so far */
  bool capped; /* LIVE_TOTAL_MAX reached: the capped event was sent */
  bool lost; /* out of memory in the redactor or the agent's copy: the op fails, the rest dropped */
};

/* Publishes one exec_output event of stream `sm` from its pending bytes: as many as fit (a
 * sequence cut short at the end waits unless `final`). */
static void live_publish(struct exec_run *x, struct stream *sm, bool final) {
  size_t take = sm->live.len < LIVE_RAW_MAX ? sm->live.len : LIVE_RAW_MAX;
  if (x->live_total + take > LIVE_TOTAL_MAX) take = LIVE_TOTAL_MAX - x->live_total;
  for (;;) {
    struct jb_buf text;
    jb_buf_init(&text, take * 3 + 16);
    size_t rep = 0;
    /* a sequence cut short at the end waits for its next bytes unless the command ended */
    bool fin = final && take == sm->live.len;
    size_t used = jb_utf8_sanitize((const unsigned char *)sm->live.data, take, fin, &text, &rep);
    if (used == (size_t)-1 || used == 0) {
      jb_buf_free(&text);
      return;
    }
    json_t *ev = json_pack("{s:s,s:I,s:s,s:s%,s:I}", "jobId", x->job, "opId", (json_int_t)x->op_id,
                           "stream", sm->name, "data", text.data ? text.data : "", text.len, "seq",
                           (json_int_t)x->seq);
    jb_buf_free(&text);
    if (!ev) return;
    if (sm->skipped) json_object_set_new(ev, "skipped", json_integer((json_int_t)sm->skipped));
    size_t size = jb_db_event_size(x->job, JB_EVENT_EXEC_OUTPUT, ev);
    if (size > JB_EVENT_MAX_BYTES && take > 16) { /* escapes made it too long: fewer bytes */
      json_decref(ev);
      take /= 2;
      continue;
    }
    sm->skipped = 0;
    x->seq++;
    x->live_total += used;
    jb_buf_drop_front(&sm->live, used);
    x->last_ms = mono_ms();
    worker_publish(x->w, x->c, x->job, JB_EVENT_EXEC_OUTPUT, ev);
    return;
  }
}

/* The cap reached: one last event says so; nothing more is published. */
static void live_cap(struct exec_run *x) {
  x->capped = true;
  size_t left = x->st[0].live.len + x->st[1].live.len + x->st[0].skipped + x->st[1].skipped;
  json_t *ev = json_pack("{s:s,s:I,s:s,s:s,s:I,s:b,s:I}", "jobId", x->job, "opId",
                         (json_int_t)x->op_id, "stream", "stdout", "data", "", "seq",
                         (json_int_t)x->seq++, "capped", 1, "skipped", (json_int_t)left);
  for (int k = 0; k < 2; k++) jb_buf_reset(&x->st[k].live);
  worker_publish(x->w, x->c, x->job, JB_EVENT_EXEC_OUTPUT, ev);
}

/* Publishes what waits, one event at most unless `final` (then up to LIVE_FINAL_EVENTS). */
static void live_flush(struct exec_run *x, bool final) {
  for (int n = 0; n < (final ? LIVE_FINAL_EVENTS : 1); n++) {
    if (x->capped) return;
    if (x->live_total >= LIVE_TOTAL_MAX) {
      if (x->st[0].live.len || x->st[1].live.len) live_cap(x);
      return;
    }
    /* the stream with more waiting goes first */
    struct stream *sm = x->st[1].live.len > x->st[0].live.len ? &x->st[1] : &x->st[0];
    if (sm->live.len == 0) return;
    live_publish(x, sm, final);
  }
}

/* Redacted output of `sm` to the agent's copy and the live view. */
static void deliver(struct exec_run *x, struct stream *sm, const unsigned char *data, size_t len) {
  crypto_hash_sha256_update(&sm->sha, data, len);
  if (jb_buf_append(&sm->all, data, len) < 0) { /* past maxOutputBytes: the spawner counts it */
    size_t room = sm->all.cap - sm->all.len;
    if (jb_buf_append(&sm->all, data, room < len ? room : len) < 0) x->lost = true; /* ENOMEM */
  }
  if (x->capped) return;
  size_t room = LIVE_PENDING_MAX - sm->live.len, keep = len < room ? len : room;
  if (jb_buf_append(&sm->live, data, keep) < 0) keep = 0;
  sm->skipped += len - keep;
}

/* Passes `len` bytes of `sm` (none and `final` at the end) through its redactor and delivers
 * what it releases. A redactor out of memory fails closed: nothing more of the op's output is
 * delivered, and the op fails. */
static void redact_deliver(struct exec_run *x, struct stream *sm, const unsigned char *data,
                           size_t len, bool final) {
  if (x->lost) return;
  struct jb_buf clean;
  jb_buf_init(&clean, SIZE_MAX - 1);
  jb_error e = {0};
  if (jb_redactor_feed(sm->rd, data, len, final, &clean, &e) < 0) {
    x->lost = true;
    slog(x->w, JB_LOG_ERROR, x->job, "exec output not redacted: dropped", "error", e.msg, NULL);
  } else {
    deliver(x, sm, (const unsigned char *)clean.data, clean.len);
  }
  jb_buf_free(&clean);
}

/* jb_exec_output_fn: a chunk of `stream`, in order. */
static void on_output(void *ctx, const char *stream, long long seq, const unsigned char *data,
                      size_t len) {
  (void)seq;
  struct exec_run *x = ctx;
  redact_deliver(x, !strcmp(stream, "stderr") ? &x->st[1] : &x->st[0], data, len, false);
  if (mono_ms() - x->last_ms >= LIVE_INTERVAL_MS) live_flush(x, false);
}

/* The redactions of both streams, in stream order per stream: [{rule, stream, offset,
 * failed?}] (new; at most JB_REDACT_RECORDS_MAX a stream), their total in *count. */
static json_t *redaction_records(const struct exec_run *x, size_t *count) {
  json_t *a = json_array();
  *count = 0;
  for (int k = 0; k < 2; k++) {
    const struct jb_redaction *v;
    size_t n = x->st[k].rd ? jb_redactor_records(x->st[k].rd, &v) : 0;
    *count += x->st[k].rd ? jb_redactor_count(x->st[k].rd) : 0;
    for (size_t i = 0; a && i < n; i++) {
      size_t rl = strlen(v[i].rule); /* an operator's rule id, clipped on a character */
      if (rl > RULE_ID_MAX)
        for (rl = RULE_ID_MAX; rl > 0 && ((unsigned char)v[i].rule[rl] & 0xC0) == 0x80; rl--)
          ;
      json_t *r = json_pack("{s:s%,s:s,s:I}", "rule", v[i].rule, rl, "stream", x->st[k].name,
                            "offset", (json_int_t)v[i].offset);
      if (r && v[i].failed) json_object_set_new(r, "failed", json_true());
      if (!r || json_array_append_new(a, r) < 0) {
        json_decref(a);
        a = NULL;
      }
    }
  }
  return a;
}

/* ---- the outcome ---- */

/* `sm`'s bytes as UTF-8 text (new), with the bytes replaced added to *replaced. */
static json_t *stream_text(struct stream *sm, size_t *replaced) {
  struct jb_buf t;
  jb_buf_init(&t, sm->all.len * 3 + 16);
  json_t *out = NULL;
  if (jb_utf8_sanitize((const unsigned char *)sm->all.data, sm->all.len, true, &t, replaced) !=
      (size_t)-1)
    out = json_stringn(t.data ? t.data : "", t.len);
  jb_buf_free(&t);
  return out ? out : json_string("");
}

static void sha_hex(crypto_hash_sha256_state *st, char hex[65]) {
  unsigned char h[32];
  crypto_hash_sha256_final(st, h);
  sodium_bin2hex(hex, 65, h, sizeof h);
}

/* Replaces member `key` of `d` by `key`Sha256 — the hex SHA-256 of its JSON as the entry
 * would hold it (JSON_COMPACT | JSON_SORT_KEYS) — and, for an array, `key`Items (its length). */
static void member_to_hash(json_t *d, const char *key) {
  json_t *v = json_object_get(d, key);
  char *t = v ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
  if (!t) return;
  unsigned char h[32];
  char hx[65], name[64];
  crypto_hash_sha256(h, (const unsigned char *)t, strlen(t));
  sodium_bin2hex(hx, sizeof hx, h, sizeof h);
  free(t);
  snprintf(name, sizeof name, "%sSha256", key);
  json_object_set_new(d, name, json_string(hx));
  if (json_is_array(v)) {
    snprintf(name, sizeof name, "%sItems", key);
    json_object_set_new(d, name, json_integer((json_int_t)json_array_size(v)));
  }
  json_object_del(d, key);
}

/* Holds exec details `d` to EXEC_DETAILS_BUDGET bytes as the entry writes them: its members
 * that grow with what the agent sent or its command printed — the redaction records, cwd,
 * argv — are replaced by their SHA-256 (member_to_hash), in that order, until it fits.
 * Each is bounded already; together, escaped (a control character takes 6 bytes), they might
 * not be. */
static void details_fit(json_t *d) {
  static const char *const grow[] = {"redacted", "cwd", "argv"};
  for (size_t i = 0; i < sizeof grow / sizeof grow[0]; i++) {
    char *t = json_dumps(d, JSON_COMPACT | JSON_SORT_KEYS);
    size_t n = t ? strlen(t) : 0;
    free(t);
    if (n <= EXEC_DETAILS_BUDGET) return;
    member_to_hash(d, grow[i]);
  }
}

/* The audit details of an exec (api/audit.md): what ran and how it ended — hashes and byte
 * counts of the output, never the output. `res` is the spawner's result (NULL when it did not
 * run); `image` is the session's sandbox image; `summary` (borrowed, NULL for a read-only
 * command) the summary of its changes (changes_kept). Every field is bounded whatever the
 * agent sent — argv by AUDIT_ARGV_MAX (else its hash), cwd by PATH_MAX, the redaction records
 * by JB_REDACT_RECORDS_MAX a stream, the changes by their summary — so the entry always
 * fits the chain's JB_AUDIT_MAX_CANONICAL. */
static json_t *exec_details(const char *image, const struct jb_op_claim *op, json_t *args,
                            json_t *res, bool ok, const char *code, const char hex[2][65],
                            size_t redactions, json_t *records, json_t *summary) {
  json_t *d = json_object();
  json_t *argv = json_object_get(args, "argv");
  char *at = json_dumps(argv, JSON_COMPACT);
  if (at && strlen(at) <= AUDIT_ARGV_MAX) {
    json_object_set(d, "argv", argv);
  } else if (at) { /* too long to record whole: its SHA-256 and its first item */
    unsigned char h[32];
    char hx[65];
    crypto_hash_sha256(h, (const unsigned char *)at, strlen(at));
    sodium_bin2hex(hx, sizeof hx, h, sizeof h);
    json_object_set_new(d, "argvSha256", json_string(hx));
    json_object_set_new(d, "argvItems", json_integer((json_int_t)json_array_size(argv)));
  }
  free(at);
  const char *cwd = json_string_value(json_object_get(args, "cwd"));
  if (cwd && strlen(cwd) <= 4096) json_object_set_new(d, "cwd", json_string(cwd));
  json_object_set_new(d, "image", json_string(image));
  json_object_set_new(d, "writable", json_boolean(json_is_true(json_object_get(args, "writable"))));
  json_object_set_new(d, "decision", json_string(op->decision));
  if (res) {
    json_t *ec = json_object_get(res, "exitCode");
    json_object_set_new(d, "exitCode",
                        json_is_integer(ec) ? json_integer(json_integer_value(ec)) : json_null());
    const char *sig = json_string_value(json_object_get(res, "signal"));
    json_object_set_new(d, "signal", sig && strlen(sig) < 16 ? json_string(sig) : json_null());
    json_object_set_new(d, "timedOut",
                        json_boolean(json_is_true(json_object_get(res, "timedOut"))));
    json_t *dm = json_object_get(res, "durationMs");
    json_object_set_new(d, "durationMs",
                        json_integer(json_is_integer(dm) ? json_integer_value(dm) : 0));
    json_object_set_new(d, "stdoutSha256", json_string(hex[0]));
    json_object_set_new(d, "stderrSha256", json_string(hex[1]));
    json_t *ob = json_object_get(res, "stdoutBytes"), *eb = json_object_get(res, "stderrBytes");
    json_object_set_new(
        d, "bytes",
        json_pack("{s:I,s:I}", "stdout",
                  (json_int_t)(json_is_integer(ob) ? json_integer_value(ob) : 0), "stderr",
                  (json_int_t)(json_is_integer(eb) ? json_integer_value(eb) : 0)));
    json_object_set_new(
        d, "truncated",
        json_pack("{s:b,s:b}", "stdout", json_is_true(json_object_get(res, "stdoutTruncated")),
                  "stderr", json_is_true(json_object_get(res, "stderrTruncated"))));
    if (json_is_true(json_object_get(res, "oom"))) json_object_set_new(d, "oom", json_true());
    json_t *mem = json_object_get(res, "memory"); /* the spawner's watch: its limit, the peak */
    if (json_is_object(mem))
      json_object_set_new(
          d, "memory",
          json_pack("{s:I,s:I}", "limitBytes",
                    (json_int_t)json_integer_value(json_object_get(mem, "limitBytes")), "peakBytes",
                    (json_int_t)json_integer_value(json_object_get(mem, "peakBytes"))));
  }
  json_object_set_new(d, "redactions", json_integer((json_int_t)redactions));
  json_object_set(d, "redacted", records);
  if (summary) /* a writable command: what it changed, summarised (any list fits) */
    json_object_set(d, "changesSummary", summary);
  else
    json_object_set_new(d, "changes", json_array());
  json_object_set_new(d, "ok", json_boolean(ok));
  if (!ok) json_object_set_new(d, "error", json_string(code ? code : "internal"));
  details_fit(d);
  return d;
}

/* Frees the buffers of `x`. */
static void run_free(struct exec_run *x) {
  for (int k = 0; k < 2; k++) {
    jb_buf_free(&x->st[k].all);
    jb_buf_free(&x->st[k].live);
    jb_redactor_free(x->st[k].rd);
  }
}

/* {ok:false, error:{code, message}} (new). */
static json_t *failure(const char *code, const char *message) {
  return json_pack("{s:b,s:{s:s,s:s}}", "ok", 0, "error", "code", code, "message", message);
}

/* Stores exec `op`'s outcome (jb_db_op_complete_running with `kept_json`, the changes kept
 * beside it). Its result code. */
static int outcome_store(struct jb_worker *w, PGconn *c, const char *job,
                         const struct jb_op_claim *op, bool ok, const char *text,
                         const char *kept_json, json_t *details, struct jb_audit_head *head,
                         jb_error *err) {
  if (worker_test_fault(w, job, "exec_commit_lost"))
    return jb_fail(err, EIO, "test fault: the outcome is lost"), JB_ERR_CONFLICT;
  if (worker_test_fault(w, job, "exec_entry_too_large")) { /* as an entry over the cap was */
    json_t *big = json_copy(details);
    char *fill = malloc(JB_AUDIT_MAX_CANONICAL + 1);
    if (fill) {
      memset(fill, 'x', JB_AUDIT_MAX_CANONICAL);
      fill[JB_AUDIT_MAX_CANONICAL] = '\0';
      json_object_set_new(big, "testFill", json_string(fill));
    }
    free(fill);
    int rc = jb_db_op_complete_running(c, jb_signer_key(w->signer), job, op, ok, text, kept_json,
                                       big ? big : details, head, err);
    json_decref(big);
    return rc;
  }
  return jb_db_op_complete_running(c, jb_signer_key(w->signer), job, op, ok, text, kept_json,
                                   details, head, err);
}

/* Fails running exec `op` of `job` whose outcome could not be stored (`why`: the error) with
 * a small entry of what is known — whether the command ran, its exit, how many changes it
 * made (`res`: the spawner's result, NULL when it did not run) — so that the op ends and the
 * agent is answered. On `c` (reset when its connection broke). The answer stored (new),
 * {ok:false, error:{code:"unstored", message}}; *rc JB_OK with *head, JB_ERR_CONFLICT (the op
 * is no longer running) or JB_ERR_FAIL (then the op stays running until the reaper,
 * exec_op_reap, fails it). */
static json_t *outcome_unstored(struct jb_worker *w, PGconn *c, const char *job,
                                const struct jb_op_claim *op, json_t *res, size_t changes_total,
                                const char *why, struct jb_audit_head *head, int *rc) {
  char reason[UNSTORED_WHY_MAX + 1], msg[UNSTORED_WHY_MAX + 200];
  size_t wl = strlen(why) < UNSTORED_WHY_MAX ? strlen(why) : UNSTORED_WHY_MAX;
  while (wl > 0 && ((unsigned char)why[wl] & 0xC0) == 0x80) wl--; /* clipped on a character */
  snprintf(reason, sizeof reason, "%.*s", (int)wl, why);
  json_t *ec = json_object_get(res, "exitCode");
  char exit_text[40];
  if (json_is_integer(ec))
    snprintf(exit_text, sizeof exit_text, "exit code %lld", (long long)json_integer_value(ec));
  else
    snprintf(exit_text, sizeof exit_text, "ended by a signal");
  if (!res)
    snprintf(msg, sizeof msg, "the command did not run, and that could not be stored: %s", reason);
  else
    snprintf(msg, sizeof msg,
             "the command ran (%s; %zu changes in the workspace, which stay) but its "
             "outcome could not be stored: %s",
             exit_text, changes_total, reason);
  slog(w, JB_LOG_ERROR, job, "exec: the outcome could not be stored", "error", reason, NULL);
  json_t *ans = failure("unstored", msg);
  json_t *d =
      json_pack("{s:s,s:b,s:s,s:s,s:b,s:I}", "decision", op->decision, "ok", 0, "error", "unstored",
                "reason", reason, "ran", res != NULL, "changesTotal", (json_int_t)changes_total);
  if (d && res) {
    json_object_set_new(d, "exitCode",
                        json_is_integer(ec) ? json_integer(json_integer_value(ec)) : json_null());
    json_object_set_new(d, "timedOut",
                        json_boolean(json_is_true(json_object_get(res, "timedOut"))));
  }
  char *text = ans ? json_dumps(ans, JSON_COMPACT) : NULL;
  jb_error err = {0};
  if (PQstatus(c) != CONNECTION_OK) PQreset(c);
  *rc = text && d ? jb_db_op_complete_running(c, jb_signer_key(w->signer), job, op, false, text,
                                              NULL, d, head, &err)
                  : jb_fail(&err, ENOMEM, "out of memory");
  if (*rc != JB_OK)
    slog(w, JB_LOG_ERROR, job, "exec: its failure could not be stored either (the reaper will)",
         "error", err.msg, NULL);
  free(text);
  json_decref(d);
  return ans;
}

/* What running an exec op's command gave: the spawner's answer, and a writable command's
 * effects on the workspace. */
struct exec_ran {
  int xr; /* jb_exec_run's: 0 it ran (res), -1 it did not (xe) */
  json_t *res; /* new, or NULL */
  jb_error xe;
  json_t *changes, *kept; /* new (exec_workspace_effects, exec_changes_kept), or NULL */
  size_t changes_total;
  int planted_sig; /* what it left that it must not: enum jb_signal, -1 none */
  char planted[300];
  bool incomplete, swept;
  double t_before, t_ran, t_effects; /* mono_msf */
  /* a supervised writable command run on an overlay (args.changeset): its effects read from
   * the overlay (cs.built) and held as a changeset op (`changeset`: the result's member, new) */
  bool on_overlay;
  struct jb_cs_build cs;
  json_t *changeset;
};

/* Runs the command of exec op `args` (x collecting its output) in pinned session `s` (NULL:
 * not here) as running slot `slot`, into *r: refused before it runs when the output cannot be
 * redacted, the worker runs too many, the session is not up or the op was killed already, or
 * a writable one while the session's writable commands are held or its workspace cannot be
 * walked first; a writable command's effects after it. */
static void exec_command(struct jb_worker *w, PGconn *c, const char *job, struct jb_session *s,
                         int slot, json_t *args, size_t max_out, bool redactor, struct exec_run *x,
                         struct exec_ran *r) {
  struct jb_scan_snapshot before = {0};
  struct jb_preimage *pre = NULL;
  bool watched = false;
  struct jb_git_place *places = NULL; /* what the buyer's git config makes git's own */
  r->xr = -1;
  r->planted_sig = -1;
  if (!redactor) { /* no command runs whose output cannot be redacted */
    jb_fail(&r->xe, ENOMEM, "the output redactor could not be made");
  } else if (slot < 0) {
    jb_fail(&r->xe, EBUSY, "too many commands run on this worker");
  } else if (!args || !s || atomic_load(&s->teardown)) {
    jb_fail(&r->xe, ESRCH, "the session's sandbox is not up");
  } else if (!running_killed(slot, false, NULL)) {
    json_t *in = json_object_get(args, "stdin");
    const char *cwd = json_string_value(json_object_get(args, "cwd"));
    struct jb_exec_request rq = {
        .argv = json_object_get(args, "argv"),
        .cwd = cwd ? cwd : ".",
        .env = json_object_get(args, "env"),
        .stdin_data = (const unsigned char *)json_string_value(in),
        .stdin_len = json_string_length(in),
        .timeout_ms = (long)json_integer_value(json_object_get(args, "timeoutMs")),
        .max_output = max_out,
        .writable = json_is_true(json_object_get(args, "writable")),
        .memory_bytes =
            jb_exec_memory_limit(s->limits, json_integer_value(json_object_get(args, "memoryMiB"))),
        .on_started = running_started,
        .started_ctx = (void *)(intptr_t)slot,
        .caller_raises_seccomp = true, /* by the op runner, after the outcome is stored */
    };
    jb_error se = {0};
    char held[320] = "", ov[32];
    /* held for the buyer: the command runs on an overlay, nothing lands until approved */
    r->on_overlay = rq.writable && json_is_true(json_object_get(args, "changeset"));
    if (r->on_overlay) {
      snprintf(ov, sizeof ov, "c%lld", x->op_id);
      r->cs = (struct jb_cs_build){.w = w, .s = s, .job = job, .exec_op_id = x->op_id};
      rq.overlay = ov;
      rq.on_overlay = changeset_on_overlay;
      rq.overlay_ctx = &r->cs;
    }
    if (rq.writable && !r->on_overlay) places = calloc(JB_GIT_PLACES_MAX, sizeof *places);
    if (rq.writable && !r->on_overlay && !places) {
      jb_fail(&r->xe, ENOMEM, "out of memory");
    } else if (rq.writable && exec_writable_held(c, job, held, sizeof held) != 0) {
      jb_fail(&r->xe, EPERM,
              "writable commands are held until the buyer clears the incomplete "
              "effects of an earlier one (%s)",
              held);
    } else if (rq.writable && !r->on_overlay &&
               exec_effects_before(w, s, &before, places, &pre, &se) < 0) {
      jb_fail(&r->xe, EIO, "the workspace could not be read before the command: %s", se.msg);
    } else {
      watched = rq.writable && !r->on_overlay;
      r->t_before = mono_msf();
      r->xr = jb_exec_run(s, &rq, on_output, x, &r->res, &r->xe);
      r->t_ran = mono_msf();
    }
  }
  /* a writable command's effects: what it changed, and what it must not leave behind */
  if (watched)
    r->changes = exec_workspace_effects(w, s, &before, pre, &r->changes_total, &r->incomplete,
                                        &r->swept, &r->planted_sig, r->planted, sizeof r->planted);
  r->kept = r->changes ? exec_changes_kept(r->changes, r->changes_total) : NULL;
  jb_landing_places(NULL, 0);
  free(places);
  jb_scan_snapshot_free(&before);
  jb_preimage_free(pre);
  r->t_effects = mono_msf();
}

/* The answer of exec op `r` ({ok, result} or {ok:false, error}; new): its failure `code` in
 * *code (NULL when it succeeded or the failure is internal), and a seccomp kill in *signal and
 * `detail`. `killed`: 1 the buyer killed it, 2 the operator; `aborted`: its session was aborted; `hex` the
 * SHA-256 of each stream; `records` (borrowed) its `redactions` redactions. */
static json_t *exec_answer(const struct exec_ran *r, struct exec_run *x, int killed, bool aborted,
                           char hex[2][65], size_t redactions, json_t *records, const char **code,
                           int *signal, char *detail, size_t dsize) {
  json_t *ans;
  json_t *res = r->res;
  int xr = r->xr;
  const jb_error *xe = &r->xe;
  json_t *kept = r->kept;
  const char *killed_by = json_string_value(json_object_get(res, "killedBy"));
  if (xr == 0 && killed_by && !strcmp(killed_by, "seccomp")) {
    const char *sc = json_string_value(json_object_get(res, "seccompSyscall"));
    char msg[200];
    snprintf(msg, sizeof msg, "the command was killed by the sandbox's syscall filter (%.40s)",
             sc ? sc : "a forbidden system call");
    ans = failure(*code = "seccomp", msg);
    *signal = JB_SIG_SECCOMP_KILL;
    snprintf(detail, dsize, "exec killed by the syscall filter: %.40s", sc ? sc : "?");
  } else if (x->lost) {
    ans = failure(*code = "internal", "the command's output was lost (out of memory)");
  } else if (killed && (xr != 0 || !json_is_integer(json_object_get(res, "exitCode")))) {
    ans = failure(*code = "killed",
                  killed == 2 ? "the operator killed the command" : "the buyer killed the command");
  } else if (xr == 0) {
    size_t replaced = 0;
    json_t *out = stream_text(&x->st[0], &replaced), *errt = stream_text(&x->st[1], &replaced);
    json_t *ec = json_object_get(res, "exitCode"), *sg = json_object_get(res, "signal");
    json_t *rr = json_pack(
        "{s:O,s:O,s:b,s:I,s:o,s:o,s:b,s:b,s:I,s:I,s:I,s:i,s:b,s:s,s:s}", "exitCode",
        json_is_integer(ec) ? ec : json_null(), "signal", json_is_string(sg) ? sg : json_null(),
        "timedOut", json_is_true(json_object_get(res, "timedOut")), "durationMs",
        (json_int_t)json_integer_value(json_object_get(res, "durationMs")), "stdout", out, "stderr",
        errt, "stdoutTruncated", json_is_true(json_object_get(res, "stdoutTruncated")),
        "stderrTruncated", json_is_true(json_object_get(res, "stderrTruncated")), "stdoutBytes",
        (json_int_t)json_integer_value(json_object_get(res, "stdoutBytes")), "stderrBytes",
        (json_int_t)json_integer_value(json_object_get(res, "stderrBytes")), "invalidUtf8",
        (json_int_t)replaced, "redactions", (json_int_t)redactions, "oom",
        json_is_true(json_object_get(res, "oom")), "stdoutSha256", hex[0], "stderrSha256", hex[1]);
    if (rr) json_object_set(rr, "redacted", records);
    if (rr && kept) {
      json_object_set_new(rr, "changes", exec_changes_for_result(kept));
      json_object_set_new(rr, "changesTotal", json_integer((json_int_t)r->changes_total));
      json_object_set_new(rr, "changesSummary", exec_changes_summary(kept));
    }
    if (rr && r->changeset) json_object_set(rr, "changeset", r->changeset);
    if (rr && json_object_get(res, "overlayManifest")) /* tests only: JB_TEST_EXEC_OVERLAY */
      json_object_set(rr, "overlayManifest", json_object_get(res, "overlayManifest"));
    if (rr && json_object_get(res, "overlayError"))
      json_object_set(rr, "overlayError", json_object_get(res, "overlayError"));
    if (rr && (r->incomplete || r->swept))
      json_object_set_new(rr, "changesIncomplete", json_true());
    if (rr && r->swept) json_object_set_new(rr, "landingSwept", json_true());
    ans = rr ? json_pack("{s:b,s:o}", "ok", 1, "result", rr) : failure("internal", "out of memory");
  } else if (aborted) {
    ans = failure(*code = "aborted", "the session was aborted while the command ran");
  } else if (xe->code == ENOTSUP) {
    ans = failure(*code = "unavailable",
                  "this session's sandbox cannot run commands (its image has no spawner)");
  } else if (xe->code == EBUSY) {
    ans = failure(*code = "busy", xe->msg[0] ? xe->msg : "another command of the session runs");
  } else if (xe->code == EINVAL) {
    ans = failure(*code = "bad_request", xe->msg);
  } else if (xe->code == EPERM) {
    ans = failure(*code = "effects_incomplete", xe->msg);
  } else {
    ans = failure(*code = "internal", xe->msg[0] ? xe->msg : "the command could not be run");
  }
  return ans;
}

/* The audit head `head` exec op `op` committed, and the end of its live view: how the command
 * ended (answer `ans`, `ok`, failure `code`), without its output; `seq` output events were
 * sent. */
static void publish_end(struct jb_worker *w, PGconn *c, const char *job,
                        const struct jb_op_claim *op, const struct jb_audit_head *head, json_t *ans,
                        bool ok, const char *code, long long seq) {
  worker_publish(w, c, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(head));
  /* the end of the live view: how the command ended, without its output */
  json_t *r = json_object_get(ans, "result");
  json_t *summary =
      ok ? json_pack(
               "{s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:b}", "exitCode", json_object_get(r, "exitCode"),
               "signal", json_object_get(r, "signal"), "timedOut", json_object_get(r, "timedOut"),
               "durationMs", json_object_get(r, "durationMs"), "stdoutBytes",
               json_object_get(r, "stdoutBytes"), "stderrBytes", json_object_get(r, "stderrBytes"),
               "redactions", json_object_get(r, "redactions"), "oom",
               json_is_true(json_object_get(r, "oom")))
         : json_pack("{s:s}", "error", code);
  worker_publish(w, c, job, JB_EVENT_OP,
                 json_pack("{s:I,s:s,s:s,s:s,s:s,s:o*,s:I}", "opId", (json_int_t)op->op_id, "jobId",
                           job, "tool", "exec", "path", op->path, "state", ok ? "done" : "failed",
                           "result", summary, "outputEvents", (json_int_t)seq));
}

/* Where the time of an exec op went (bench/exec): claimed at `wall`, marked running at
 * `t_marked` (mono_msf, as t_claimed), then r's stages and the spawner's own timings. */
static void log_timings(struct jb_worker *w, const char *job, const struct timespec *wall,
                        double t_claimed, double t_marked, const struct exec_ran *r) {
  double t_done = mono_msf();
  json_t *tm =
      json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:O*}", "claimedAtEpoch",
                json_real((double)wall->tv_sec * 1000.0 + (double)(wall->tv_nsec / 1000) / 1000.0),
                "markRunning", ms_json(t_marked - t_claimed), "snapshotBefore",
                ms_json(r->t_before - t_marked), "spawner", ms_json(r->t_ran - r->t_before),
                "effects", ms_json(r->t_effects - r->t_ran), "complete",
                ms_json(t_done - r->t_effects), "inSpawner", json_object_get(r->res, "timingsMs"));
  slog_json(w, JB_LOG_INFO, job, "exec timings", "timingsMs", tm);
}

/* The audit entry's `changeset` of a command whose effects are held as changeset `cs` (the
 * result's member): {opId, state, files, changesetSha256, code} (absent ones null). */
static json_t *changeset_entry(json_t *cs) {
  return json_pack("{s:O*, s:O*, s:O*, s:O*, s:O*}", "opId", json_object_get(cs, "opId"), "state",
                   json_object_get(cs, "state"), "files", json_object_get(cs, "files"),
                   "changesetSha256", json_object_get(cs, "changesetSha256"), "code",
                   json_object_get(cs, "code"));
}

int exec_op_run(struct jb_worker *w, PGconn *c, const char *job, struct jb_op_claim *op,
                int *signal, char *detail, size_t dsize, jb_error *err) {
  *signal = -1;
  double t_claimed = mono_msf(), t_marked = 0;
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  json_t *args = json_loads(op->args_json, 0, NULL);
  int slot = running_add(job, op->op_id);
  int rc = jb_db_op_mark_running(c, op, err); /* commits the claim: nothing held from here */
  t_marked = mono_msf();
  if (rc != JB_OK) {
    running_killed(slot, true, NULL);
    json_decref(args);
    return rc;
  }
  size_t max_out = (size_t)json_integer_value(json_object_get(args, "maxOutputBytes"));
  struct exec_run x = {.w = w, .c = c, .job = job, .op_id = op->op_id, .last_ms = 0};
  const struct jb_scan_rules *rules = jb_scan_rules_in_use();
  bool redactor = rules != NULL;
  for (int k = 0; k < 2; k++) {
    x.st[k].name = k ? "stderr" : "stdout";
    if (redactor && jb_redactor_new(rules, &x.st[k].rd, NULL) < 0) redactor = false;
    jb_buf_init(&x.st[k].all, max_out);
    jb_buf_init(&x.st[k].live, LIVE_PENDING_MAX);
    crypto_hash_sha256_init(&x.st[k].sha);
  }
  struct jb_session *s = slot >= 0 ? session_pin(w, job) : NULL;
  struct exec_ran r = {0};
  exec_command(w, c, job, s, slot, args, max_out, redactor, &x, &r);
  if (r.on_overlay && r.xr == 0) /* held for the buyer as a pending changeset op */
    r.changeset = changeset_store(&r.cs, op->path, json_object_get(args, "argv"));
  bool aborted = s && atomic_load(&s->killing);
  char image[sizeof s->image] = "";
  snprintf(image, sizeof image, "%s",
           s ? s->image : (w->set.sandbox_image ? w->set.sandbox_image : ""));
  session_unpin(s);
  for (int k = 0; k < 2 && redactor; k++) redact_deliver(&x, &x.st[k], NULL, 0, true);
  live_flush(&x, true);
  bool by_service = false;
  bool killed = running_killed(slot, false, &by_service); /* freed once the outcome is stored */
  /* the outcome */
  char hex[2][65];
  for (int k = 0; k < 2; k++) sha_hex(&x.st[k].sha, hex[k]);
  size_t redactions = 0;
  json_t *records = redaction_records(&x, &redactions);
  const char *code = NULL;
  json_t *ans = exec_answer(&r, &x, killed ? (by_service ? 2 : 1) : 0, aborted, hex, redactions,
                            records, &code, signal, detail, dsize);
  bool ok = json_is_true(json_object_get(ans, "ok"));
  if (!ok && !code) code = "internal";
  json_t *none = args ? NULL : json_object();
  json_t *kept_summary = exec_changes_summary(r.kept);
  json_t *details = exec_details(image, op, args ? args : none, r.xr == 0 ? r.res : NULL, ok, code,
                                 (const char(*)[65])hex, redactions, records, kept_summary);
  json_decref(kept_summary);
  if (details && r.changeset)
    json_object_set_new(details, "changeset", changeset_entry(r.changeset));
  if (details && killed && code && !strcmp(code, "killed")) /* who decided it, in the chain */
    json_object_set_new(details, "killedBy", json_string(by_service ? "service" : "buyer"));
  if (r.planted_sig >= 0 && *signal < 0) { /* the seccomp kill, when both, is the one raised */
    *signal = r.planted_sig;
    snprintf(detail, dsize, "exec: %s", r.planted);
  }
  json_decref(r.changes);
  json_decref(r.changeset);
  changeset_build_free(&r.cs);
  json_decref(none);
  char *text = json_dumps(ans, JSON_COMPACT);
  char *kept_text = r.kept ? json_dumps(r.kept, JSON_COMPACT) : NULL;
  struct jb_audit_head head;
  rc = text && details && (kept_text || !r.kept)
           ? outcome_store(w, c, job, op, ok, text, kept_text, details, &head, err)
           : jb_fail(err, ENOMEM, "out of memory");
  free(kept_text);
  json_decref(r.kept);
  if (rc == JB_ERR_FAIL) { /* the outcome could not be stored: the op fails with the reason */
    json_decref(ans);
    ans = outcome_unstored(w, c, job, op, r.xr == 0 ? r.res : NULL, r.changes_total, err->msg,
                           &head, &rc);
    ok = false;
    code = "unstored";
  }
  if (rc == JB_OK) publish_end(w, c, job, op, &head, ans, ok, code, x.seq);
  if (r.t_ran > 0) log_timings(w, job, &wall, t_claimed, t_marked, &r);
  if (rc == JB_ERR_CONFLICT) { /* the session ended meanwhile: its end failed the op */
    slog(w, JB_LOG_INFO, job, "exec ended after its session", "detail", err->msg, NULL);
    rc = JB_OK;
  }
  free(text);
  json_decref(details);
  json_decref(records);
  json_decref(ans);
  json_decref(r.res);
  json_decref(args);
  run_free(&x);
  running_killed(slot, true, NULL);
  return rc;
}

/* Fails running exec ops `ids` (n of them) of `job` — none of them runs on this worker — with
 * {code, message} and an audit entry each. */
static void fail_running(struct jb_worker *w, PGconn *c, const char *job, const long long *ids,
                         size_t n, const char *code, const char *msg) {
  for (size_t i = 0; i < n; i++) {
    struct jb_op_claim op = {.op_id = ids[i], .tool = "exec", .path = (char *)""};
    json_t *ans = json_pack("{s:b,s:{s:s,s:s}}", "ok", 0, "error", "code", code, "message", msg);
    json_t *details = json_pack("{s:I,s:b,s:s,s:s}", "opId", (json_int_t)ids[i], "ok", 0, "error",
                                code, "message", msg);
    char *text = ans ? json_dumps(ans, JSON_COMPACT) : NULL;
    struct jb_audit_head head;
    jb_error err = {0};
    int rc = text && details ? jb_db_op_complete_running(c, jb_signer_key(w->signer), job, &op,
                                                         false, text, NULL, details, &head, &err)
                             : JB_ERR_FAIL;
    if (rc == JB_OK) {
      worker_publish(w, c, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
      worker_publish(
          w, c, job, JB_EVENT_OP,
          json_pack("{s:I,s:s,s:s,s:s,s:s,s:{s:s}}", "opId", (json_int_t)ids[i], "jobId", job,
                    "tool", "exec", "path", "", "state", "failed", "result", "error", code));
    } else if (rc == JB_ERR_FAIL) {
      slog(w, JB_LOG_WARN, job, err.msg, "step", "fail running op", "code", code, NULL);
    }
    free(text);
    json_decref(ans);
    json_decref(details);
  }
}

void exec_op_fail_orphans(struct jb_worker *w, const char *job) {
  jb_error err = {0};
  cleanup_conn struct worker_conn conn = worker_conn(w, &err);
  long long ids[16];
  size_t n = 0;
  if (!conn.pg || jb_db_ops_running(conn.pg, job, ids, 16, &n, &err) != JB_OK) {
    slog(w, JB_LOG_WARN, job, err.msg, "step", "running ops at re-adoption", NULL);
    return;
  }
  fail_running(w, conn.pg, job, ids, n, "worker_restarted",
               "the worker restarted while the command ran; the command was killed");
}

/* Whether exec op `op_id` of `job` runs on this worker (its outcome not stored yet). */
static bool running_here(const char *job, long long op_id) {
  bool here = false;
  pthread_mutex_lock(&running.lock);
  for (int i = 0; i < RUNNING_MAX && !here; i++)
    here = running.r[i].used && running.r[i].op_id == op_id && !strcmp(running.r[i].job, job);
  pthread_mutex_unlock(&running.lock);
  return here;
}

void exec_op_reap(struct jb_worker *w) {
  jb_error err = {0};
  cleanup_conn struct worker_conn conn = worker_conn(w, &err);
  struct jb_op_ref due[REAP_MAX];
  size_t n = 0;
  if (!conn.pg ||
      jb_db_ops_overdue(conn.pg, JB_OP_RUNNING_GRACE_S, due, REAP_MAX, &n, &err) != JB_OK) {
    slog(w, JB_LOG_WARN, NULL, err.msg, "step", "overdue running ops", NULL);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    pthread_mutex_lock(&w->lock);
    bool mine = session_find(w, due[i].job) != NULL; /* else another worker's, or a dead one's:
                                                         its lease's expiry ends it */
    pthread_mutex_unlock(&w->lock);
    if (!mine) continue;
    if (running_here(due[i].job, due[i].op_id)) /* still running here past its time: killed, and
                                                   its own thread stores how it ended */
      exec_op_signal(w, due[i].job, due[i].op_id, "kill");
    else /* its outcome was lost: nothing of this worker will store it */
      fail_running(w, conn.pg, due[i].job, &due[i].op_id, 1, "overdue",
                   "no outcome of the command was stored by its worker within its timeout and a "
                   "grace: the op is failed; whether the command finished is not known");
  }
}
