/* control.c — the worker's control socket (JAILBOX_WORKER_CONTROL, mode 0600): operators and
 * tests ask for the probe, the sessions, send one request to a session's shim, or run a
 * command of exec (and signal it), one JSON line each way, each client on its own thread; and
 * the two helpers both sockets of the worker use (listening, answering). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sodium.h>
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
  /* a failed write needs nothing here: a client that went away is seen on its next read */
  if (jb_line_write_json(fd, ans, 0, -1, NULL) < 0) {}
  json_decref(ans);
}

/* Session `job` pinned (users + 1) without its lock: exec runs beside the shim's ops. */
static struct jb_session *session_pin(struct jb_worker *w, const char *job) {
  pthread_mutex_lock(&w->lock);
  struct jb_session *s = session_find(w, job);
  if (s) atomic_fetch_add(&s->users, 1);
  pthread_mutex_unlock(&w->lock);
  return s;
}

/* The output of a command run by the control op: both streams in memory. */
struct exec_out {
  struct jb_buf b[2];
  long long chunks;
  bool truncated; /* a chunk did not fit (64 MiB a stream, or out of memory) */
};

static void collect(void *ctx, const char *stream, long long seq, const unsigned char *data,
                    size_t len) {
  (void)seq;
  struct exec_out *o = ctx;
  o->chunks++;
  if (jb_buf_append(&o->b[strcmp(stream, "stderr") == 0], data, len) < 0) o->truncated = true;
}

static json_t *base64_of(const struct jb_buf *b) {
  size_t n = sodium_base64_ENCODED_LEN(b->len, sodium_base64_VARIANT_ORIGINAL);
  char *t = malloc(n);
  if (!t) return json_null();
  sodium_bin2base64(t, n, (const unsigned char *)(b->len ? b->data : ""), b->len,
                    sodium_base64_VARIANT_ORIGINAL);
  json_t *s = json_string(t);
  free(t);
  return s;
}

/* {op:"exec", jobId, argv, cwd?, env?, stdin? (base64), timeoutMs?, maxOutputBytes?, writable?,
 * limits?: {fsizeBytes, nproc, tmpBytes}} → {ok, result, stdout, stderr (base64), chunks,
 * truncated: true when a chunk did not fit in memory};
 * {op:"exec_signal", jobId, what} → {ok}. For tests and operators (exec.h). */
static json_t *control_exec(struct jb_worker *w, const char *op, const json_t *req) {
  const char *job = json_string_value(json_object_get(req, "jobId"));
  struct jb_session *s = job ? session_pin(w, job) : NULL;
  if (!s) return json_pack("{s:b, s:s}", "ok", 0, "error", "no such session on this worker");
  jb_error err = {0};
  json_t *ans;
  if (strcmp(op, "exec_signal") == 0) {
    ans = jb_exec_signal(s, json_string_value(json_object_get(req, "what")), &err) == 0
              ? json_pack("{s:b}", "ok", 1)
              : json_pack("{s:b, s:s, s:i}", "ok", 0, "error", err.msg, "errno", err.code);
    atomic_fetch_sub(&s->users, 1);
    return ans;
  }
  unsigned char *in = NULL;
  size_t in_len = 0;
  const char *b64 = json_string_value(json_object_get(req, "stdin"));
  if (b64) {
    in = malloc(strlen(b64) + 1);
    if (!in || sodium_base642bin(in, strlen(b64) + 1, b64, strlen(b64), NULL, &in_len, NULL,
                                 sodium_base64_VARIANT_ORIGINAL) != 0) {
      free(in);
      atomic_fetch_sub(&s->users, 1);
      return json_pack("{s:b, s:s}", "ok", 0, "error", "stdin must be base64");
    }
  }
  json_t *lim = json_object_get(req, "limits");
  json_int_t tmo = json_integer_value(json_object_get(req, "timeoutMs"));
  json_t *mo = json_object_get(req, "maxOutputBytes");
  struct jb_exec_request rq = {
      .argv = json_object_get(req, "argv"),
      .cwd = json_string_value(json_object_get(req, "cwd")),
      .env = json_object_get(req, "env"),
      .stdin_data = in,
      .stdin_len = in_len,
      .timeout_ms = tmo > 0 ? (long)tmo : 30000,
      .max_output = json_is_integer(mo) ? (size_t)json_integer_value(mo) : 1024 * 1024,
      .writable = json_is_true(json_object_get(req, "writable")),
      .fsize_bytes = json_integer_value(json_object_get(lim, "fsizeBytes")),
      .nproc = (long)json_integer_value(json_object_get(lim, "nproc")),
      .tmp_bytes = json_integer_value(json_object_get(lim, "tmpBytes")),
      .memory_bytes = jb_exec_memory_limit(
          s->limits, json_integer_value(json_object_get(lim, "memoryBytes")) >> 20),
  };
  if (!json_is_object(rq.env)) rq.env = NULL;
  struct exec_out o = {0};
  jb_buf_init(&o.b[0], 64 * 1024 * 1024);
  jb_buf_init(&o.b[1], 64 * 1024 * 1024);
  json_t *result = NULL;
  if (jb_exec_run(s, &rq, collect, &o, &result, &err) == 0) {
    ans =
        json_pack("{s:b, s:o, s:o, s:o, s:I}", "ok", 1, "result", result, "stdout",
                  base64_of(&o.b[0]), "stderr", base64_of(&o.b[1]), "chunks", (json_int_t)o.chunks);
    if (ans && o.truncated) json_object_set_new(ans, "truncated", json_true());
  } else {
    ans = json_pack("{s:b, s:s, s:i}", "ok", 0, "error", err.msg, "errno", err.code);
  }
  jb_buf_free(&o.b[0]);
  jb_buf_free(&o.b[1]);
  free(in);
  atomic_fetch_sub(&s->users, 1);
  return ans;
}

/* One request of the control socket: the answer (new). */
static json_t *control_request(struct jb_worker *w, const json_t *req) {
  const char *op = json_string_value(json_object_get(req, "op"));
  if (op && (strcmp(op, "exec") == 0 || strcmp(op, "exec_signal") == 0))
    return control_exec(w, op, req);
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

struct client {
  struct jb_worker *w;
  int fd;
};

static atomic_int clients; /* client threads running */

static void *client_main(void *arg) {
  struct client *c = arg;
  control_serve(c->w, c->fd);
  close(c->fd);
  free(c);
  atomic_fetch_sub(&clients, 1);
  return NULL;
}

void *control_main(void *arg) {
  struct jb_worker *w = arg;
  while (!atomic_load(&w->stopping)) {
    struct pollfd pf = {.fd = w->control_fd, .events = POLLIN};
    if (poll(&pf, 1, 500) <= 0) continue;
    int fd = accept4(w->control_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    /* each client on a thread of its own, so that an exec (which blocks until its command
     * ends) leaves room for a signal to it and for the shim's ops */
    struct client *c = malloc(sizeof *c);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (c) {
      *c = (struct client){w, fd};
      atomic_fetch_add(&clients, 1);
    }
    if (!c || pthread_create(&t, &at, client_main, c) != 0) {
      if (c) atomic_fetch_sub(&clients, 1);
      free(c);
      control_serve(w, fd);
      close(fd);
    }
    pthread_attr_destroy(&at);
  }
  /* the clients see w->stopping within a second (exec: when its command ends) */
  for (int i = 0; i < 100 && atomic_load(&clients) > 0; i++) usleep(50 * 1000);
  return NULL;
}
