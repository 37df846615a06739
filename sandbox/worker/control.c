/* control.c — the worker's control socket (JAILBOX_WORKER_CONTROL, mode 0600): operators and
 * tests ask for the probe, the sessions, or send one request to a session's shim, one JSON
 * line each way; and the two helpers both sockets of the worker use (listening, answering). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/line.h"
#include "sandbox/proto/shim.h"
#include "sandbox/worker/control.h"
#include "sandbox/worker/worker.h"

int worker_unix_listen(const char *path, const char *what, jb_error *err) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path)
    return jb_fail(err, ENAMETOOLONG, "%s: path too long", what);
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return jb_fail_errno(err, errno, "%s", what);
  unlink(path);
  mode_t old = umask(0177); /* srw------- : 0777 & ~0177 */
  int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
  umask(old);
  if (rc < 0 || listen(fd, 64) < 0) {
    int e = errno;
    close(fd);
    return jb_fail_errno(err, e, "%s %s", what, path);
  }
  return fd;
}

void worker_send_line(int fd, json_t *ans) {
  if (!ans) return;
  jb_line_write_json(fd, ans, 0, -1, NULL); /* a client that went away is seen on its next read */
  json_decref(ans);
}

/* One request of the control socket: the answer (new). */
static json_t *control_request(struct jb_worker *w, const json_t *req) {
  const char *op = json_string_value(json_object_get(req, "op"));
  if (op && strcmp(op, "probe") == 0) {
    struct jb_probe p = worker_probe(w);
    return json_pack("{s:b, s:o}", "ok", 1, "probe", jb_probe_json(&p));
  }
  if (op && strcmp(op, "sessions") == 0) {
    json_t *a = json_array();
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->n_sessions; i++) {
      struct jb_session *s = w->sessions[i];
      bool ready = atomic_load(&s->sb_ready);
      json_array_append_new(a, json_pack("{s:s, s:s, s:b}", "jobId", s->job_id, "container",
                                         ready ? s->cid : "", "ready", ready));
    }
    pthread_mutex_unlock(&w->lock);
    return json_pack("{s:b, s:o}", "ok", 1, "sessions", a);
  }
  const char *job = json_string_value(json_object_get(req, "jobId"));
  json_t *shimreq = json_object_get(req, "request");
  if (!job || !json_is_object(shimreq))
    return json_pack("{s:b, s:s}", "ok", 0, "error",
                     "want {op:probe|sessions} or {jobId, request}");
  struct jb_session *s = session_lock(w, job);
  if (!s) return json_pack("{s:b, s:s}", "ok", 0, "error", "no such session on this worker");
  json_t *out;
  jb_error err = {0};
  if (!s->sb_ready) {
    out = json_pack("{s:b, s:s}", "ok", 0, "error", "the session's sandbox is not up");
  } else {
    json_t *copy = json_deep_copy(shimreq);
    long tmo = jb_control_timeout_ms(json_object_get(req, "timeoutMs"), w->walls.call_timeout_ms);
    json_t *ans = jb_shimconn_call(&s->sb.conn, copy, tmo, &err);
    json_decref(copy);
    out = ans ? json_pack("{s:b, s:o}", "ok", 1, "answer", ans)
              : json_pack("{s:b, s:s}", "ok", 0, "error", err.msg);
  }
  session_unlock(s);
  /* the shim broke the protocol: an escape signal, whoever asked */
  if (err.code == EPROTO || err.code == EMSGSIZE) {
    char job_id[129];
    snprintf(job_id, sizeof job_id, "%s", job);
    raise_signal(w, job_id, JB_SIG_PROTOCOL_VIOLATION, err.msg);
  }
  return out;
}

/* Serves one client of the control socket on `fd` until it goes or the worker stops: request
 * lines of up to JB_SHIM_MAX_LINE + 8192 bytes with their newline (lib/line.h); a longer one
 * ends the connection. */
static void control_serve(struct jb_worker *w, int fd) {
  struct jb_line_reader r;
  jb_line_init(&r,
               &(struct jb_line_opts){.max_line = JB_SHIM_MAX_LINE + 8191, .over = JB_LINE_FAIL});
  for (;;) {
    json_t *req = NULL;
    jb_error err = {0};
    int rc = jb_line_next_object(&r, JB_SHIM_MAX_DEPTH, &req, &err);
    if (rc == JB_LINE_OK || rc == JB_LINE_BAD_JSON) {
      worker_send_line(
          fd, req ? control_request(w, req) : json_pack("{s:b, s:s}", "ok", 0, "error", err.msg));
      json_decref(req);
      continue;
    }
    if (rc != JB_LINE_AGAIN) break; /* over the limit, out of memory, or the end */
    struct pollfd cf = {.fd = fd, .events = POLLIN};
    if (poll(&cf, 1, 1000) == 0) {
      if (atomic_load(&w->stopping)) break;
      continue;
    }
    if (jb_line_read(&r, fd, &err) <= 0 && err.code != EAGAIN && err.code != EINTR) break;
  }
  jb_line_free(&r);
}

void *control_main(void *arg) {
  struct jb_worker *w = arg;
  while (!atomic_load(&w->stopping)) {
    struct pollfd pf = {.fd = w->control_fd, .events = POLLIN};
    if (poll(&pf, 1, 500) <= 0) continue;
    cleanup_close int fd = accept4(w->control_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    control_serve(w, fd);
  }
  return NULL;
}
