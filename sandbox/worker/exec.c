/* exec.c — commands in a session's spawner (see exec.h): one command at a time over the
 * channel (exec_channel.c) with its output chunks decoded for the caller, signals to the
 * running command, and the security signal of a command the exec filter killed. */
#define _GNU_SOURCE
#include "sandbox/worker/exec.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "sandbox/proto/shim.h"
#include "sandbox/worker/worker.h"

/* The request line of `rq` with id `id` (new), or NULL with `err`. */
static json_t *request_json(long long id, const struct jb_exec_request *rq, jb_error *err) {
  json_t *o =
      json_pack("{s:I, s:s, s:O, s:s, s:I, s:I, s:b}", "id", (json_int_t)id, "op", "exec", "argv",
                rq->argv, "cwd", rq->cwd ? rq->cwd : "", "timeoutMs", (json_int_t)rq->timeout_ms,
                "maxOutputBytes", (json_int_t)rq->max_output, "writable", rq->writable);
  if (!o) return jb_fail(err, EINVAL, "argv must be an array"), NULL;
  if (rq->env) json_object_set_new(o, "env", json_deep_copy(rq->env));
  if (rq->stdin_len) {
    if (rq->stdin_len > JB_SPAWNER_MAX_STDIN) {
      json_decref(o);
      return jb_fail(err, EMSGSIZE, "stdin over %d bytes", JB_SPAWNER_MAX_STDIN), NULL;
    }
    size_t n = sodium_base64_ENCODED_LEN(rq->stdin_len, sodium_base64_VARIANT_ORIGINAL);
    char *b = malloc(n);
    if (!b) {
      json_decref(o);
      return jb_fail(err, ENOMEM, "out of memory"), NULL;
    }
    sodium_bin2base64(b, n, rq->stdin_data, rq->stdin_len, sodium_base64_VARIANT_ORIGINAL);
    json_object_set_new(o, "stdin", json_string(b));
    free(b);
  }
  json_t *lim = json_object();
  if (rq->fsize_bytes > 0) json_object_set_new(lim, "fsizeBytes", json_integer(rq->fsize_bytes));
  if (rq->nproc > 0) json_object_set_new(lim, "nproc", json_integer(rq->nproc));
  if (rq->tmp_bytes > 0) json_object_set_new(lim, "tmpBytes", json_integer(rq->tmp_bytes));
  /* tests only: with JB_TEST_EXEC_MEMORY_UNWATCHED set no limit is sent, so that a command can
   * take the sandbox over the container's limit (its OOM end, tests/node/exec_checks.test.mjs) */
  if (rq->memory_bytes > 0 && !getenv("JB_TEST_EXEC_MEMORY_UNWATCHED"))
    json_object_set_new(lim, "memoryBytes", json_integer(rq->memory_bytes));
  json_object_set_new(o, "limits", lim);
  /* tests only: with JB_TEST_EXEC_OVERLAY set a writable command runs on an overlay of the
   * workspace (its writes stay in the overlay's upper; tests/node/exec_overlay.test.mjs) */
  if (rq->writable && getenv("JB_TEST_EXEC_OVERLAY")) {
    char ov[32];
    snprintf(ov, sizeof ov, "x%lld", id);
    json_object_set_new(o, "overlay", json_string(ov));
  }
  return o;
}

/* One request `o` (stolen; its id `id`) on the spawner's channel and its answer's result
 * (new), skipping other lines, within 30 s; with sp->busy set by the caller. NULL with `err`. */
static json_t *spawner_call(struct jb_spawner *sp, long long id, json_t *o, jb_error *err) {
  pthread_mutex_lock(&sp->lock);
  int rc = o ? jb_spawner_send_locked(sp, o, err) : jb_fail(err, ENOMEM, "out of memory");
  pthread_mutex_unlock(&sp->lock);
  json_decref(o);
  for (long long until = jb_now_ms() + 30000; rc == 0;) {
    json_t *a = jb_spawner_read_line(sp, until, err);
    if (!a) return NULL;
    json_t *rid = json_object_get(a, "id");
    if (!json_is_integer(rid) || json_integer_value(rid) != id) {
      json_decref(a);
      continue;
    }
    json_t *res = json_incref(json_object_get(a, "result"));
    json_t *e = json_object_get(a, "error");
    if (!json_is_true(json_object_get(a, "ok")) || !res)
      jb_fail(err, EINVAL, "spawner: %s: %s",
              json_string_value(json_object_get(e, "code")) ?: "error",
              json_string_value(json_object_get(e, "message")) ?: "");
    json_decref(a);
    return res;
  }
  return NULL;
}

/* Tests only (JB_TEST_EXEC_OVERLAY): the manifest of the overlay of command `id` into its
 * result `res` as overlayManifest (or overlayError), then the overlay discarded. */
static void overlay_after(struct jb_spawner *sp, long long id, json_t *res) {
  char ov[32];
  snprintf(ov, sizeof ov, "x%lld", id);
  jb_error e = {0};
  pthread_mutex_lock(&sp->lock);
  long long mid = sp->next_id++, did = sp->next_id++;
  pthread_mutex_unlock(&sp->lock);
  json_t *m = spawner_call(
      sp, mid,
      json_pack("{s:I, s:s, s:s}", "id", (json_int_t)mid, "op", "cs_manifest", "overlay", ov), &e);
  if (m)
    json_object_set(res, "overlayManifest", json_object_get(m, "entries"));
  else
    json_object_set_new(res, "overlayError", json_string(e.msg));
  json_decref(m);
  json_t *d = spawner_call(
      sp, did,
      json_pack("{s:I, s:s, s:s}", "id", (json_int_t)did, "op", "cs_discard", "overlay", ov), &e);
  if (!d) json_object_set_new(res, "overlayDiscardError", json_string(e.msg));
  json_decref(d);
}

long long jb_exec_memory_limit(const json_t *limits, long long asked_mib) {
  json_int_t mib = json_integer_value(json_object_get(limits, "memoryMiB"));
  long long all = (mib > 0 ? (long long)mib : 1024) << 20;
  long long reserve = all / 8 > (JB_EXEC_MEMORY_RESERVE_MIN_MIB << 20)
                          ? all / 8
                          : (long long)JB_EXEC_MEMORY_RESERVE_MIN_MIB << 20;
  if (reserve > all - (16LL << 20)) reserve = all - (16LL << 20); /* 16 MiB a command at least */
  long long lim = all - reserve;
  return asked_mib > 0 && (asked_mib << 20) < lim ? asked_mib << 20 : lim;
}

/* How long a command whose spawner's channel ended waits for the OOM to be known: the
 * memory cgroup's notification and counters can come a moment after the sandbox's end. */
#define DIED_OOM_WAIT_MS 1000

/* The sandbox of `s` died during a command: the result when it was killed for memory (Docker's
 * State.OOMKilled, or the OOM the session's memory cgroup watch saw), or NULL with what was
 * found instead in `why` (for the command's error). A container Docker no longer knows is
 * judged as gone, by the memory cgroup alone. */
static json_t *died_result(struct jb_session *s, long long start, char *why, size_t why_len) {
  char cid[80];
  pthread_mutex_lock(&s->w->lock);
  snprintf(cid, sizeof cid, "%s", s->cid);
  pthread_mutex_unlock(&s->w->lock);
  snprintf(why, why_len, "the session has no sandbox");
  if (!cid[0]) return NULL;
  char path[160];
  snprintf(path, sizeof path, "/containers/%s/json", cid);
  json_t *in = NULL;
  jb_error err = {0};
  bool read = false;
  /* the container's end is recorded a moment after the channel closes */
  for (int i = 0; i < 20; i++) {
    read = jb_docker_expect(&s->w->walls.docker, "GET", path, NULL, 5000, &in, &err) == 0;
    if (!read) break;
    json_t *st = json_object_get(in, "State");
    if (!json_is_true(json_object_get(st, "Running"))) break;
    json_decref(in);
    in = NULL;
    usleep(100 * 1000);
  }
  json_t *st = json_object_get(in, "State"), *ec = json_object_get(st, "ExitCode");
  bool running = json_is_true(json_object_get(st, "Running"));
  bool docker_oom = json_is_true(json_object_get(st, "OOMKilled"));
  /* not read, or still running after the tries: judged as the container gone */
  long long code = in && json_is_integer(ec) && !running ? (long long)json_integer_value(ec) : -1;
  json_decref(in);
  /* as the session's end is judged (launch.c watch_sandbox): any end but the filter's SIGSYS
   * with an OOM just before it; Docker's sticky flag only where the kernel's notification
   * could not be had */
  struct jb_oom_record rec;
  bool seen = false, oom = false;
  for (long long until = jb_now_ms() + DIED_OOM_WAIT_MS;;) {
    seen = jb_oomwatch_seen(atomic_load(&s->oomwatch), &rec);
    oom = jb_oom_ended_it(seen, &rec, jb_now_ms(), code, docker_oom);
    if (oom || code == 128 + SIGSYS || jb_now_ms() >= until) break;
    usleep(50 * 1000);
  }
  if (!oom) {
    if (!read)
      snprintf(why, why_len, "the sandbox's container cannot be read (%.160s); no OOM seen",
               err.msg);
    else if (running)
      snprintf(why, why_len, "the sandbox still runs");
    else
      snprintf(why, why_len, "the sandbox ended with exit code %lld%s; no OOM seen", code,
               docker_oom ? " (Docker's OOMKilled flag is set, but the memory cgroup saw no OOM "
                            "just before the end)"
                          : "");
    return NULL;
  }
  return json_pack("{s:n, s:s, s:b, s:I, s:i, s:i, s:b, s:b, s:b, s:n, s:n, s:s}", "exitCode",
                   "signal", "SIGKILL", "timedOut", 0, "durationMs",
                   (json_int_t)(jb_now_ms() - start), "stdoutBytes", 0, "stderrBytes", 0,
                   "stdoutTruncated", 0, "stderrTruncated", 0, "oom", 1, "killedBy",
                   "seccompSyscall", "note",
                   "the sandbox went over its memory limit and was killed with the command");
}

/* The spawner's answer `o` (borrowed) to command `id`: its result into *result (new
 * reference) and 0, or -1 with `err` (EBUSY, EINVAL). Tests only: when the command asked for
 * an overlay, its manifest joins the result and the overlay is discarded, whatever the answer. */
static int take_result(struct jb_spawner *sp, long long id, const struct jb_exec_request *rq,
                       const json_t *o, json_t **result, jb_error *err) {
  json_t *res = json_object_get(o, "result");
  bool ok = json_is_true(json_object_get(o, "ok")) && json_is_object(res);
  json_t *sink = ok ? NULL : json_object();
  if (rq->writable && getenv("JB_TEST_EXEC_OVERLAY")) overlay_after(sp, id, ok ? res : sink);
  json_decref(sink);
  if (ok) {
    *result = json_incref(res);
    return 0;
  }
  json_t *e = json_object_get(o, "error");
  const char *code = json_string_value(json_object_get(e, "code")) ?: "error";
  return jb_fail(err, strcmp(code, "busy") == 0 ? EBUSY : EINVAL, "spawner: %s: %s", code,
                 json_string_value(json_object_get(e, "message")) ?: "");
}

int jb_exec_run(struct jb_session *s, const struct jb_exec_request *rq, jb_exec_output_fn out,
                void *ctx, json_t **result, jb_error *err) {
  *result = NULL;
  struct jb_spawner *sp = &s->sb.spawner;
  if (!atomic_load(&s->sb_ready)) return jb_fail(err, ENOTSUP, "the session's sandbox is not up");
  pthread_mutex_lock(&sp->lock);
  if (sp->fd < 0 || sp->closing) {
    pthread_mutex_unlock(&sp->lock);
    return jb_fail(err, ENOTSUP, "the session's sandbox has no spawner (exec unavailable)");
  }
  if (sp->busy) {
    pthread_mutex_unlock(&sp->lock);
    return jb_fail(err, EBUSY, "a command is running in this session (one at a time)");
  }
  long long id = sp->next_id++;
  json_t *req = request_json(id, rq, err);
  if (!req || jb_spawner_send_locked(sp, req, err) < 0) {
    json_decref(req);
    pthread_mutex_unlock(&sp->lock);
    return -1;
  }
  json_decref(req);
  sp->busy = true;
  /* a kill or pause that came while the command was not yet sent: carried out now */
  const char *what = rq->on_started ? rq->on_started(rq->started_ctx) : NULL;
  if (what) {
    jb_error se = {0};
    json_t *o =
        json_pack("{s:I, s:s, s:s}", "id", (json_int_t)sp->next_id++, "op", "signal", "what", what);
    if (!o || jb_spawner_send_locked(sp, o, &se) < 0)
      jb_log(JB_LOG_WARN, "exec: a signal asked for before the start was not sent", "signal", what,
             "error", se.msg, NULL);
    json_decref(o);
  }
  pthread_mutex_unlock(&sp->lock);

  long long start = jb_now_ms();
  long long deadline = start + rq->timeout_ms + 15000;
  int ret = -1;
  unsigned char *buf = malloc(JB_SPAWNER_CHUNK + 4);
  if (!buf) {
    jb_fail(err, ENOMEM, "out of memory");
    goto out;
  }
  for (;;) {
    json_t *o = jb_spawner_read_line(sp, deadline, err);
    if (!o) break;
    json_t *eid = json_object_get(o, "exec");
    if (json_is_integer(eid)) {
      if (json_integer_value(eid) == id && out) {
        const char *stream = json_string_value(json_object_get(o, "stream"));
        const char *data = json_string_value(json_object_get(o, "data"));
        size_t n = 0;
        if (!stream || !data ||
            sodium_base642bin(buf, JB_SPAWNER_CHUNK, data, strlen(data), NULL, &n, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0) {
          json_decref(o);
          jb_fail(err, EPROTO, "the spawner sent a bad output chunk");
          break;
        }
        out(ctx, stream, json_integer_value(json_object_get(o, "seq")), buf, n);
      }
      json_decref(o);
      continue;
    }
    json_t *rid = json_object_get(o, "id");
    if (!json_is_integer(rid) || json_integer_value(rid) != id) {
      json_decref(o); /* a signal's answer, or an error about a line of ours */
      continue;
    }
    ret = take_result(sp, id, rq, o, result, err);
    json_decref(o);
    break;
  }
out:
  free(buf);
  int code = ret < 0 ? err->code : 0;
  pthread_mutex_lock(&sp->lock);
  sp->busy = false;
  if (code == EPROTO || code == EMSGSIZE) {
    /* the spawner broke the protocol: its channel is given up */
    shutdown(sp->fd, SHUT_RDWR);
    sp->closing = true;
  }
  pthread_cond_broadcast(&sp->idle);
  pthread_mutex_unlock(&sp->lock);
  if (code == EPIPE) {
    char why[300];
    json_t *r = died_result(s, start, why, sizeof why);
    if (r) {
      *result = r;
      ret = 0;
    } else {
      jb_fail(err, EPIPE, "the spawner's channel ended: %s", why);
      jb_log(JB_LOG_WARN, "exec: the spawner's channel ended", "job", s->job_id, "reason", why,
             NULL);
    }
  }
  if (code == EPROTO || code == EMSGSIZE)
    raise_signal(s->w, s->job_id, JB_SIG_PROTOCOL_VIOLATION, err->msg);
  if (ret == 0 && !rq->caller_raises_seccomp) {
    const char *by = json_string_value(json_object_get(*result, "killedBy"));
    if (by && strcmp(by, "seccomp") == 0) {
      char detail[600];
      const char *a0 = json_string_value(json_array_get(rq->argv, 0));
      snprintf(detail, sizeof detail, "exec: the command %.200s was killed by the exec filter",
               a0 ? a0 : "?");
      raise_signal(s->w, s->job_id, JB_SIG_SECCOMP_KILL, detail);
    }
  }
  return ret;
}

int jb_exec_signal(struct jb_session *s, const char *what, jb_error *err) {
  if (!what ||
      (strcmp(what, "kill") != 0 && strcmp(what, "stop") != 0 && strcmp(what, "cont") != 0))
    return jb_fail(err, EINVAL, "what must be kill, stop or cont");
  struct jb_spawner *sp = &s->sb.spawner;
  pthread_mutex_lock(&sp->lock);
  int rc;
  if (sp->fd < 0 || sp->closing || !sp->busy) {
    rc = jb_fail(err, ESRCH, "no command is running");
  } else {
    json_t *o =
        json_pack("{s:I, s:s, s:s}", "id", (json_int_t)sp->next_id++, "op", "signal", "what", what);
    rc = jb_spawner_send_locked(sp, o, err);
    json_decref(o);
  }
  pthread_mutex_unlock(&sp->lock);
  return rc;
}

int jb_exec_ahead(struct jb_session *s, bool ahead, jb_error *err) {
  struct jb_spawner *sp = &s->sb.spawner;
  pthread_mutex_lock(&sp->lock);
  int rc;
  if (sp->fd < 0 || sp->closing) {
    rc = jb_fail(err, ENOTSUP, "the session's sandbox has no spawner");
  } else {
    json_t *o =
        json_pack("{s:I, s:s}", "id", (json_int_t)sp->next_id++, "op", ahead ? "warm" : "discard");
    rc = jb_spawner_send_locked(sp, o, err);
    json_decref(o);
  }
  pthread_mutex_unlock(&sp->lock);
  return rc;
}
