/* exec.c — the worker's end of the spawner's channel (see exec.h): the hello at launch, one
 * command at a time with its output chunks decoded for the caller, signals to the running
 * command, and the security signal of a command the exec filter killed. */
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

static const struct jb_line_opts spawner_lines = {
    .max_line = JB_SPAWNER_MAX_LINE, .over = JB_LINE_FAIL, .skip_empty = true};

void jb_spawner_init(struct jb_spawner *sp) {
  memset(sp, 0, sizeof *sp);
  sp->fd = -1;
  sp->next_id = 1;
  pthread_mutex_init(&sp->lock, NULL);
  pthread_cond_init(&sp->idle, NULL);
  jb_line_init(&sp->lines, &spawner_lines);
}

/* The next line from the spawner within `deadline` (jb_now_ms), parsed: a new object, or NULL
 * with `err` (ETIMEDOUT, EPIPE at the end of the channel, EPROTO/EMSGSIZE for a bad line). */
static json_t *read_line(struct jb_spawner *sp, long long deadline, jb_error *err) {
  for (;;) {
    json_t *o = NULL;
    jb_error perr = {0};
    int rc = jb_line_next_object(&sp->lines, JB_SHIM_MAX_DEPTH, &o, &perr);
    if (rc == JB_LINE_OK) return o;
    if (rc == JB_LINE_BAD_JSON)
      return jb_fail(err, EPROTO, "malformed line from the spawner: %s", perr.msg), NULL;
    if (rc == JB_LINE_TOO_LONG)
      return jb_fail(err, EMSGSIZE, "the spawner sent a line over %d bytes", JB_SPAWNER_MAX_LINE),
             NULL;
    if (rc == JB_LINE_END || rc == JB_LINE_NOMEM)
      return jb_fail(err, EPIPE, "the spawner's channel ended"), NULL;
    long long left = deadline - jb_now_ms();
    if (left <= 0) return jb_fail(err, ETIMEDOUT, "no word from the spawner in time"), NULL;
    struct pollfd pf = {.fd = sp->fd, .events = POLLIN};
    int pr = poll(&pf, 1, (int)(left > 1000 ? 1000 : left));
    if (pr < 0 && errno != EINTR) return jb_fail_errno(err, errno, "poll"), NULL;
    if (pr <= 0) continue;
    jb_error rerr = {0};
    ssize_t n = jb_line_read(&sp->lines, sp->fd, &rerr);
    if (n < 0 && (rerr.code == EAGAIN || rerr.code == EWOULDBLOCK || rerr.code == EINTR)) continue;
    if (n < 0 && rerr.code != ENOMEM) jb_line_end(&sp->lines);
  }
}

int jb_spawner_attach(struct jb_spawner *sp, int fd, long timeout_ms, jb_error *err) {
  sp->fd = fd;
  json_t *h = read_line(sp, jb_now_ms() + timeout_ms, err);
  const char *hello = json_string_value(json_object_get(h, "hello"));
  if (!h || !hello || strcmp(hello, "spawner") != 0 ||
      json_integer_value(json_object_get(h, "protocol")) != JB_SPAWNER_PROTOCOL) {
    if (h)
      jb_fail(err, EPROTO, "the spawner's first line is not its hello (protocol %d)",
              JB_SPAWNER_PROTOCOL);
    json_decref(h);
    close(fd);
    sp->fd = -1;
    return -1;
  }
  sp->hello = h;
  return 0;
}

static int send_locked(struct jb_spawner *sp, const json_t *o, jb_error *err);

int jb_spawner_adopt(struct jb_spawner *sp, int fd, const json_t *exec_contract, long timeout_ms,
                     jb_error *err) {
  sp->fd = fd;
  /* ids the earlier worker used may still come (a command's late output): start far past them */
  long long id = jb_now_ms() * 1000;
  sp->next_id = id + 1;
  json_t *o = json_pack("{s:I, s:s, s:s}", "id", (json_int_t)id, "op", "signal", "what", "kill");
  int rc = o ? send_locked(sp, o, err) : jb_fail(err, ENOMEM, "out of memory");
  json_decref(o);
  long long deadline = jb_now_ms() + timeout_ms;
  bool killed = false;
  while (rc == 0) {
    json_t *line = NULL;
    jb_error perr = {0};
    int lrc = jb_line_next_object(&sp->lines, JB_SHIM_MAX_DEPTH, &line, &perr);
    if (lrc == JB_LINE_BAD_JSON) continue; /* the rest of a line the earlier worker began reading */
    if (lrc == JB_LINE_OK) {
      json_t *rid = json_object_get(line, "id");
      bool ours = json_is_integer(rid) && json_integer_value(rid) == id;
      bool done = json_is_integer(rid) && json_object_get(line, "ok") != NULL;
      /* the command signalled: its result follows, then the spawner takes the next one */
      if (ours && json_is_true(json_object_get(line, "ok")))
        killed = true;
      else if (ours || (killed && done && !ours)) {
        json_decref(line);
        break;
      }
      json_decref(line);
      continue;
    }
    if (lrc != JB_LINE_AGAIN) {
      rc = jb_fail(err, EPIPE, "the spawner's channel ended");
      break;
    }
    long long left = deadline - jb_now_ms();
    if (left <= 0) {
      if (!killed)
        rc = jb_fail(err, ETIMEDOUT, "the spawner did not answer within %ld ms", timeout_ms);
      break; /* a killed command's result still to come is skipped by its id */
    }
    struct pollfd pf = {.fd = sp->fd, .events = POLLIN};
    int pr = poll(&pf, 1, (int)(left > 1000 ? 1000 : left));
    if (pr < 0 && errno != EINTR) {
      rc = jb_fail_errno(err, errno, "poll");
      break;
    }
    if (pr <= 0) continue;
    jb_error rerr = {0};
    ssize_t n = jb_line_read(&sp->lines, sp->fd, &rerr);
    if (n < 0 && (rerr.code == EAGAIN || rerr.code == EWOULDBLOCK || rerr.code == EINTR)) continue;
    if (n < 0 && rerr.code != ENOMEM) jb_line_end(&sp->lines);
  }
  if (rc < 0) {
    close(fd);
    sp->fd = -1;
    jb_line_free(&sp->lines);
    jb_line_init(&sp->lines, &spawner_lines);
    return -1;
  }
  /* the hello the contract recorded at launch (its pid and binds; the protocol was checked
   * equal to ours then) */
  json_t *sh = json_object_get(exec_contract, "spawner");
  json_t *binds = json_object_get(json_object_get(exec_contract, "jail"), "imageBinds");
  sp->hello = json_pack("{s:s, s:i, s:O}", "hello", "spawner", "protocol", JB_SPAWNER_PROTOCOL,
                        "pid", json_object_get(sh, "pid") ?: json_null());
  if (sp->hello && binds) json_object_set(sp->hello, "binds", binds);
  return 0;
}

void jb_spawner_close(struct jb_spawner *sp) {
  pthread_mutex_lock(&sp->lock);
  sp->closing = true;
  if (sp->fd >= 0) shutdown(sp->fd, SHUT_RDWR); /* wakes a running command's reader */
  while (sp->busy) pthread_cond_wait(&sp->idle, &sp->lock);
  if (sp->fd >= 0) close(sp->fd);
  sp->fd = -1;
  json_decref(sp->hello);
  sp->hello = NULL;
  jb_line_free(&sp->lines);
  pthread_mutex_unlock(&sp->lock);
}

bool jb_spawner_available(struct jb_spawner *sp) {
  pthread_mutex_lock(&sp->lock);
  bool up = sp->fd >= 0 && !sp->closing;
  pthread_mutex_unlock(&sp->lock);
  return up;
}

/* Writes `o` (borrowed) as one line, with sp->lock held. */
static int send_locked(struct jb_spawner *sp, const json_t *o, jb_error *err) {
  return jb_line_write_json(sp->fd, o, JB_SPAWNER_MAX_LINE, 10000, err);
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
  json_object_set_new(o, "limits", lim);
  return o;
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
  if (!req || send_locked(sp, req, err) < 0) {
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
    if (!o || send_locked(sp, o, &se) < 0)
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
    json_t *o = read_line(sp, deadline, err);
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
    if (json_is_true(json_object_get(o, "ok")) && json_is_object(json_object_get(o, "result"))) {
      *result = json_incref(json_object_get(o, "result"));
      ret = 0;
    } else {
      json_t *e = json_object_get(o, "error");
      const char *code = json_string_value(json_object_get(e, "code")) ?: "error";
      jb_fail(err, strcmp(code, "busy") == 0 ? EBUSY : EINVAL, "spawner: %s: %s", code,
              json_string_value(json_object_get(e, "message")) ?: "");
    }
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
    rc = send_locked(sp, o, err);
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
    rc = send_locked(sp, o, err);
    json_decref(o);
  }
  pthread_mutex_unlock(&sp->lock);
  return rc;
}
