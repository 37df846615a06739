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

#define JB_CS_OVERLAY_ID_MAX 64
#define JB_CS_DEFAULT_MANIFEST 10000 /* entries the test switch's manifest lists */

/* The overlay command `id` of `rq` runs on into `ov` (JB_CS_OVERLAY_ID_MAX + 1 bytes): the
 * request's, or under the test switch JB_TEST_EXEC_OVERLAY "x<id>" for any writable command
 * (tests/node/exec_overlay.test.mjs). false: none. */
static bool overlay_id(const struct jb_exec_request *rq, long long id, char *ov) {
  if (rq->writable && rq->overlay && rq->overlay[0])
    snprintf(ov, JB_CS_OVERLAY_ID_MAX + 1, "%s", rq->overlay);
  else if (rq->writable && getenv("JB_TEST_EXEC_OVERLAY"))
    snprintf(ov, JB_CS_OVERLAY_ID_MAX + 1, "x%lld", id);
  else
    return false;
  return true;
}

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
  char ov[JB_CS_OVERLAY_ID_MAX + 1];
  if (overlay_id(rq, id, ov)) json_object_set_new(o, "overlay", json_string(ov));
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

struct jb_exec_overlay {
  struct jb_spawner *sp;
  const char *id;
};

/* One spawner request {op, overlay: ov->id, ...`more` (stolen)} and its result (new), or NULL
 * with `err`. */
static json_t *overlay_call(struct jb_exec_overlay *ov, const char *op, json_t *more,
                            jb_error *err) {
  pthread_mutex_lock(&ov->sp->lock);
  long long rid = ov->sp->next_id++;
  pthread_mutex_unlock(&ov->sp->lock);
  json_t *o = json_pack("{s:I, s:s, s:s}", "id", (json_int_t)rid, "op", op, "overlay", ov->id);
  if (o && more) json_object_update(o, more);
  json_decref(more);
  return spawner_call(ov->sp, rid, o, err);
}

json_t *jb_exec_overlay_manifest(struct jb_exec_overlay *ov, size_t max_entries, jb_error *err) {
  json_t *m = overlay_call(ov, "cs_manifest",
                           json_pack("{s:I}", "maxEntries", (json_int_t)max_entries), err);
  json_t *e = json_incref(json_object_get(m, "entries"));
  json_decref(m);
  if (m && !json_is_array(e)) {
    json_decref(e);
    return jb_fail(err, EPROTO, "spawner: the manifest has no entries"), NULL;
  }
  return e;
}

int jb_exec_overlay_read(struct jb_exec_overlay *ov, const char *path, long long offset, size_t len,
                         unsigned char *buf, size_t *n, long long *size, bool *eof, jb_error *err) {
  *n = 0;
  if (len == 0 || len > JB_EXEC_OVERLAY_READ_MAX) return jb_fail(err, EINVAL, "bad read length");
  json_t *r = overlay_call(ov, "cs_read",
                           json_pack("{s:s, s:I, s:I}", "path", path, "offset", (json_int_t)offset,
                                     "length", (json_int_t)len),
                           err);
  if (!r) return -1;
  const char *data = json_string_value(json_object_get(r, "data"));
  json_t *sz = json_object_get(r, "size");
  int rc = 0;
  if (!data || !json_is_integer(sz) ||
      sodium_base642bin(buf, len, data, strlen(data), NULL, n, NULL,
                        sodium_base64_VARIANT_ORIGINAL) != 0)
    rc = jb_fail(err, EPROTO, "spawner: a bad cs_read answer");
  *size = json_integer_value(sz);
  *eof = json_is_true(json_object_get(r, "eof"));
  json_decref(r);
  return rc;
}

/* After command `id` of `rq` ended on an overlay: its on_overlay with the spawner's result
 * `res` (NULL: none) — under the test switch the manifest into `res` as overlayManifest (or
 * overlayError) instead — and then the overlay discarded. */
static void overlay_after(struct jb_spawner *sp, long long id, const struct jb_exec_request *rq,
                          json_t *res) {
  char oid[JB_CS_OVERLAY_ID_MAX + 1];
  if (!overlay_id(rq, id, oid)) return;
  struct jb_exec_overlay ov = {.sp = sp, .id = oid};
  jb_error e = {0};
  if (rq->overlay && rq->overlay[0]) {
    if (rq->on_overlay) rq->on_overlay(rq->overlay_ctx, &ov, res);
  } else if (res) { /* tests only: JB_TEST_EXEC_OVERLAY */
    json_t *m = jb_exec_overlay_manifest(&ov, JB_CS_DEFAULT_MANIFEST, &e);
    if (m)
      json_object_set_new(res, "overlayManifest", m);
    else
      json_object_set_new(res, "overlayError", json_string(e.msg));
  }
  json_t *d = overlay_call(&ov, "cs_discard", NULL, &e);
  if (!d && res) json_object_set_new(res, "overlayDiscardError", json_string(e.msg));
  if (!d)
    jb_log(JB_LOG_WARN, "exec: an overlay was not discarded", "overlay", oid, "error", e.msg, NULL);
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
  overlay_after(sp, id, rq, ok ? res : NULL);
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
