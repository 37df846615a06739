/* exec_channel.c — the worker's end of the spawner's channel (see exec.h): the hello at
 * launch, the take-over of an earlier worker's channel, its lines in and out, and its end.
 * Below walls_launch.c and adopt.c, which open it, and exec.c, which runs commands over it. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "sandbox/proto/shim.h"
#include "sandbox/worker/exec.h"
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

json_t *jb_spawner_read_line(struct jb_spawner *sp, long long deadline, jb_error *err) {
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
  json_t *h = jb_spawner_read_line(sp, jb_now_ms() + timeout_ms, err);
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

int jb_spawner_adopt(struct jb_spawner *sp, int fd, const json_t *exec_contract, long timeout_ms,
                     jb_error *err) {
  sp->fd = fd;
  /* ids the earlier worker used may still come (a command's late output): start far past them */
  long long id = jb_now_ms() * 1000;
  sp->next_id = id + 1;
  json_t *o = json_pack("{s:I, s:s, s:s}", "id", (json_int_t)id, "op", "signal", "what", "kill");
  int rc = o ? jb_spawner_send_locked(sp, o, err) : jb_fail(err, ENOMEM, "out of memory");
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
  /* the hello the contract recorded at launch (its pid, binds and memory watch; the protocol
   * was checked equal to ours then) */
  json_t *sh = json_object_get(exec_contract, "spawner");
  json_t *binds = json_object_get(json_object_get(exec_contract, "jail"), "imageBinds");
  sp->hello = json_pack("{s:s, s:i, s:O}", "hello", "spawner", "protocol", JB_SPAWNER_PROTOCOL,
                        "pid", json_object_get(sh, "pid") ?: json_null());
  if (sp->hello && binds) json_object_set(sp->hello, "binds", binds);
  json_t *mem = json_object_get(exec_contract, "memory"); /* how it watched memory */
  if (sp->hello && json_is_string(json_object_get(mem, "watch")))
    json_object_set_new(sp->hello, "memory",
                        json_pack("{s:O, s:O?}", "watch", json_object_get(mem, "watch"),
                                  "intervalMs", json_object_get(mem, "intervalMs")));
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

int jb_spawner_send_locked(struct jb_spawner *sp, const json_t *o, jb_error *err) {
  return jb_line_write_json(sp->fd, o, JB_SPAWNER_MAX_LINE, 10000, err);
}
