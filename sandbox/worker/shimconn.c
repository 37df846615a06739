/* shimconn.c — the line channel to jailbox-shim: a per-session Unix socket, or a Docker
 * attach stream (see shimconn.h), its frames taken apart by sandbox/worker/attach.h and its
 * lines cut by lib/line.h. */
#define _GNU_SOURCE
#include "sandbox/worker/shimconn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/json.h"
#include "sandbox/proto/shim.h"
#include "lib/metrics.h"

/* The shim's lines: JB_SHIM_MAX_LINE bytes each; a longer one is dropped up to its newline
 * and reported then (the connection is given up at that point); empty lines are ignored. */
static const struct jb_line_opts shim_lines = {
    .max_line = JB_SHIM_MAX_LINE, .over = JB_LINE_SKIP_WHOLE, .skip_empty = true};

int jb_shimconn_init(struct jb_shimconn *c, const struct jb_docker_stream *stream, jb_error *err) {
  memset(c, 0, sizeof *c);
  c->stream = *stream;
  c->next_id = 1;
  c->sock = -1;
  c->rbuf = malloc(JB_SHIMCONN_RBUF);
  if (!c->rbuf) return jb_fail(err, ENOMEM, "out of memory");
  jb_attach_demux_init(&c->demux);
  jb_line_init(&c->lines, &shim_lines);
  pthread_mutex_init(&c->lock, NULL);
  return 0;
}

void jb_shimconn_close(struct jb_shimconn *c) {
  jb_docker_stream_close(&c->stream);
  if (c->sock >= 0) close(c->sock);
  c->sock = -1;
  jb_line_free(&c->lines);
  free(c->rbuf);
  c->rbuf = NULL;
  pthread_mutex_destroy(&c->lock);
}

int jb_shimconn_use_socket(struct jb_shimconn *c, int fd, jb_error *err) {
  pthread_mutex_lock(&c->lock);
  c->sock = fd;
  pthread_mutex_unlock(&c->lock);
  return 0;
}

static void kill_conn(struct jb_shimconn *c, const char *why) {
  if (c->dead) return;
  c->dead = true;
  snprintf(c->dead_reason, sizeof c->dead_reason, "%s", why);
}

void jb_shimconn_stderr(struct jb_shimconn *c, char *out, size_t len) {
  size_t n = c->err_len < len - 1 ? c->err_len : len - 1;
  /* the end is the most telling part */
  memcpy(out, c->err_tail + (c->err_len - n), n);
  out[n] = '\0';
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)out[i] < 0x20) out[i] = ' ';
  /* trim trailing blanks */
  while (n > 0 && out[n - 1] == ' ') out[--n] = '\0';
}

static void keep_stderr(struct jb_shimconn *c, const unsigned char *p, size_t n) {
  if (n >= JB_SHIMCONN_STDERR_TAIL) {
    memcpy(c->err_tail, p + n - JB_SHIMCONN_STDERR_TAIL, JB_SHIMCONN_STDERR_TAIL);
    c->err_len = JB_SHIMCONN_STDERR_TAIL;
  } else {
    if (c->err_len + n > JB_SHIMCONN_STDERR_TAIL) {
      size_t drop = c->err_len + n - JB_SHIMCONN_STDERR_TAIL;
      memmove(c->err_tail, c->err_tail + drop, c->err_len - drop);
      c->err_len -= drop;
    }
    memcpy(c->err_tail + c->err_len, p, n);
    c->err_len += n;
  }
  c->err_tail[c->err_len] = '\0';
}

/* Demultiplexes the attach bytes in c->rbuf. On the attach channel stdout payload goes to the
 * line reader, and this returns 1 after each piece of it (the reader may have a line: the
 * bytes after a newline stay in c->rbuf); on the socket channel stdout frames can only come
 * from the launcher and join the stderr tail. Returns 0 when the buffer is used up, -1 on a
 * framing error (c->dead set). */
static int parse_attach(struct jb_shimconn *c) {
  while (c->roff < c->rlen) {
    size_t used;
    struct jb_attach_chunk ch;
    int r = jb_attach_demux_next(&c->demux, c->rbuf + c->roff, c->rlen - c->roff, &used, &ch);
    c->roff += used;
    if (r < 0) {
      kill_conn(c, "bad frame header on the attach stream");
      return -1;
    }
    if (r == 0) break;
    if (ch.stream == JB_ATTACH_STDERR || c->sock >= 0) {
      keep_stderr(c, ch.data, ch.len);
      jb_attach_demux_consume(&c->demux, ch.len);
      c->roff += ch.len;
      continue;
    }
    size_t took = jb_line_feed(&c->lines, ch.data, ch.len);
    jb_attach_demux_consume(&c->demux, took);
    c->roff += took;
    return 1;
  }
  c->roff = c->rlen = 0;
  return 0;
}

/* Refills c->rbuf (empty) from the attach stream: first the bytes that came with the HTTP
 * answer, then one recv. 1 with bytes, 0 when none are ready, -1 at the end of the stream. */
static int fill_attach(struct jb_shimconn *c) {
  if (c->stream.pre_off < c->stream.pre_len) {
    size_t n = c->stream.pre_len - c->stream.pre_off;
    memcpy(c->rbuf, c->stream.pre + c->stream.pre_off, n);
    c->stream.pre_off += n;
    c->roff = 0;
    c->rlen = n;
    return 1;
  }
  ssize_t r = recv(c->stream.fd, c->rbuf, JB_SHIMCONN_RBUF, MSG_DONTWAIT);
  if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (r <= 0) {
    c->attach_ended = true;
    return -1;
  }
  c->roff = 0;
  c->rlen = (size_t)r;
  return 1;
}

/* What a pump found: the line reader's result in *rc (a line, or one over the limit), or
 * nothing in time, or the end of the channel. */
enum pump { PUMP_LINE = 1, PUMP_TIMEOUT = 0, PUMP_END = -1 };

/* The attach channel: reads the stream until the line reader has a result. PUMP_LINE with the
 * reader's result in *rc (the line in *line, *len), PUMP_TIMEOUT, or PUMP_END at the end of the
 * stream or on a framing error (c->dead set). Undemultiplexed bytes stay in c->rbuf for the
 * next call. */
static enum pump pump_attach(struct jb_shimconn *c, long deadline, int *rc, char **line,
                             size_t *len) {
  for (;;) {
    *rc = jb_line_next(&c->lines, line, len);
    if (*rc != JB_LINE_AGAIN) return PUMP_LINE;
    int r = parse_attach(c);
    if (r < 0) return PUMP_END;
    if (r > 0) continue;
    if (c->stream.pre_off >= c->stream.pre_len) {
      long left = deadline - jb_now_ms();
      if (left <= 0) return PUMP_TIMEOUT;
      struct pollfd pf = {.fd = c->stream.fd, .events = POLLIN};
      int pr = poll(&pf, 1, (int)(left > 1000000 ? 1000000 : left));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) return PUMP_TIMEOUT;
    }
    if (fill_attach(c) < 0) {
      kill_conn(c, "the container's output ended");
      return PUMP_END;
    }
  }
}

/* jb_shimconn_collect_stderr with c->lock held. */
static void collect_stderr(struct jb_shimconn *c, long timeout_ms) {
  long deadline = jb_now_ms() + timeout_ms;
  /* on the attach channel stdout bytes belong to the next read: leave the stream alone */
  while (c->sock >= 0 && !c->attach_ended && c->stream.fd >= 0) {
    if (parse_attach(c) < 0) break;
    if (c->stream.pre_off >= c->stream.pre_len) {
      long left = deadline - jb_now_ms();
      if (left <= 0) break;
      struct pollfd pf = {.fd = c->stream.fd, .events = POLLIN};
      int pr = poll(&pf, 1, (int)left);
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0) break;
    }
    if (fill_attach(c) < 0) break;
  }
}

void jb_shimconn_collect_stderr(struct jb_shimconn *c, long timeout_ms) {
  pthread_mutex_lock(&c->lock);
  collect_stderr(c, timeout_ms);
  pthread_mutex_unlock(&c->lock);
}

/* The socket channel: reads the socket until the line reader has a result, reading the
 * attach stream alongside for its stderr. Returns as pump_attach; at the end of the socket,
 * waits a little (at most 300 ms) for the attach stream to end too, so that the message
 * carries what the shim, bwrap or the runtime said last. */
static enum pump pump_socket(struct jb_shimconn *c, long deadline, int *rc, char **line,
                             size_t *len) {
  for (;;) {
    *rc = jb_line_next(&c->lines, line, len);
    if (*rc != JB_LINE_AGAIN) return PUMP_LINE;
    if (!c->attach_ended) {
      if (parse_attach(c) < 0) return PUMP_END; /* framing error: c->dead */
      if (c->stream.pre_off < c->stream.pre_len) {
        (void)fill_attach(c); /* the bytes that came with the HTTP answer */
        continue;
      }
    }
    long left = deadline - jb_now_ms();
    if (left <= 0) return PUMP_TIMEOUT;
    struct pollfd pf[2] = {{.fd = c->sock, .events = POLLIN},
                           {.fd = c->attach_ended ? -1 : c->stream.fd, .events = POLLIN}};
    int pr = poll(pf, 2, (int)(left > 1000000 ? 1000000 : left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) return PUMP_TIMEOUT;
    if (pf[1].revents) (void)fill_attach(c);
    if (pf[0].revents) {
      jb_error rerr = {0};
      ssize_t r = jb_line_read(&c->lines, c->sock, &rerr);
      if (r < 0 && (rerr.code == EAGAIN || rerr.code == EWOULDBLOCK)) continue;
      if (r < 0 && rerr.code == ENOMEM) continue; /* the reader has ended: JB_LINE_NOMEM next */
      if (r <= 0) {
        kill_conn(c, "the shim's socket closed");
        collect_stderr(c, 300);
        return PUMP_END;
      }
    }
  }
}

json_t *jb_shimconn_read(struct jb_shimconn *c, long timeout_ms, jb_error *err) {
  if (c->dead) {
    char tail[512];
    jb_shimconn_stderr(c, tail, sizeof tail);
    jb_fail(err, EPIPE, "%s%s%s", c->dead_reason, tail[0] ? ": " : "", tail);
    return NULL;
  }
  long deadline = jb_now_ms() + timeout_ms;
  int rc = JB_LINE_AGAIN;
  char *line = NULL;
  size_t len = 0;
  enum pump p = c->sock >= 0 ? pump_socket(c, deadline, &rc, &line, &len)
                             : pump_attach(c, deadline, &rc, &line, &len);
  if (p == PUMP_TIMEOUT) {
    jb_fail(err, ETIMEDOUT, "no answer from the shim within %ld ms", timeout_ms);
    return NULL;
  }
  if (p == PUMP_END) return jb_shimconn_read(c, 0, err); /* reports the reason */
  if (rc != JB_LINE_OK) { /* over the limit, or no memory to hold it: the same to the caller */
    kill_conn(c, "the shim sent a line over the limit");
    jb_fail(err, EMSGSIZE, "the shim sent a line over %d bytes", JB_SHIM_MAX_LINE);
    return NULL;
  }
  jb_error perr = {0};
  json_t *o = jb_json_parse_object(line, len, JB_SHIM_MAX_DEPTH, &perr);
  if (!o) {
    kill_conn(c, "the shim sent a malformed line");
    jb_fail(err, EPROTO, "malformed line from the shim: %s", perr.msg);
    return NULL;
  }
  return o;
}

int jb_shimconn_send_raw(struct jb_shimconn *c, const void *buf, size_t len, long timeout_ms,
                         jb_error *err) {
  const char *p = buf;
  long deadline = jb_now_ms() + timeout_ms;
  int fd = c->sock >= 0 ? c->sock : c->stream.fd;
  while (len > 0) {
    ssize_t w = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      long left = deadline - jb_now_ms();
      if (left <= 0) return jb_fail(err, ETIMEDOUT, "writing to the shim timed out");
      struct pollfd pf = {.fd = fd, .events = POLLOUT};
      poll(&pf, 1, (int)left);
      continue;
    }
    if (w < 0) {
      kill_conn(c, c->sock >= 0 ? "the shim's socket closed" : "the container's input closed");
      return jb_fail_errno(err, errno, "writing to the shim");
    }
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

json_t *jb_shimconn_call(struct jb_shimconn *c, json_t *req, long timeout_ms, jb_error *err) {
  pthread_mutex_lock(&c->lock);
  json_t *answer = NULL;
  long long id = c->next_id++;
  json_object_set_new(req, "id", json_integer(id));
  size_t n = 0;
  jb_error eerr = {0};
  char *s = jb_line_encode(req, JB_SHIM_MAX_LINE, &n, &eerr);
  if (!s) {
    if (eerr.code == EMSGSIZE)
      jb_fail(err, EMSGSIZE, "request over %d bytes", JB_SHIM_MAX_LINE);
    else
      jb_fail(err, ENOMEM, "cannot encode the request");
    goto out;
  }
  int rc = jb_shimconn_send_raw(c, s, n, timeout_ms, err);
  free(s);
  if (rc < 0) goto out;
  long deadline = jb_now_ms() + timeout_ms;
  for (;;) {
    long left = deadline - jb_now_ms();
    json_t *o = jb_shimconn_read(c, left > 0 ? left : 0, err);
    if (!o) goto out;
    json_t *rid = json_object_get(o, "id");
    if (json_is_integer(rid) && json_integer_value(rid) == id) {
      answer = o;
      break;
    }
    /* answers to earlier requests that timed out, or events: not ours */
    json_decref(o);
  }
out:
  pthread_mutex_unlock(&c->lock);
  return answer;
}

int jb_shimconn_adopt(struct jb_shimconn *c, int fd, long timeout_ms, jb_error *err) {
  struct jb_docker_stream none = {.fd = -1};
  if (jb_shimconn_init(c, &none, err) < 0) {
    close(fd);
    return -1;
  }
  c->attach_ended = true;
  c->sock = fd;
  pthread_mutex_lock(&c->lock);
  /* ids the earlier run used may still come (answers it never read): start far past them */
  long long id = jb_now_ms() * 1000;
  c->next_id = id + 1;
  char req[96];
  int n = snprintf(req, sizeof req, "{\"op\":\"ping\",\"id\":%lld}\n", id);
  int rc = jb_shimconn_send_raw(c, req, (size_t)n, timeout_ms, err);
  long deadline = jb_now_ms() + timeout_ms;
  while (rc == 0) {
    int lrc = JB_LINE_AGAIN;
    char *line = NULL;
    size_t len = 0;
    enum pump p = pump_socket(c, deadline, &lrc, &line, &len);
    if (p == PUMP_TIMEOUT) {
      rc = jb_fail(err, ETIMEDOUT, "the shim did not answer within %ld ms", timeout_ms);
      break;
    }
    if (p == PUMP_END) {
      rc = jb_fail(err, EPIPE, "%s", c->dead_reason);
      break;
    }
    if (lrc != JB_LINE_OK) continue; /* the rest of a line the earlier run began reading */
    jb_error perr = {0};
    json_t *o = jb_json_parse_object(line, len, JB_SHIM_MAX_DEPTH, &perr);
    json_t *rid = json_object_get(o, "id");
    bool ours = json_is_integer(rid) && json_integer_value(rid) == id;
    json_decref(o);
    if (ours) break;
  }
  pthread_mutex_unlock(&c->lock);
  return rc;
}

/* ---- the listening end of the socket channel ------------------------------------------ */

int jb_shim_listener_open(struct jb_shim_listener *l, const char *parent, const char *name,
                          jb_error *err) {
  memset(l, 0, sizeof *l);
  l->fd = -1;
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  int n = snprintf(l->dir, sizeof l->dir, "%s/jbshim-XXXXXX", parent);
  if (n < 0 || (size_t)n >= sizeof l->dir || (size_t)n + 1 + strlen(name) >= sizeof a.sun_path) {
    l->dir[0] = '\0';
    return jb_fail(err, ENAMETOOLONG,
                   "shim socket directory %s: a socket path under it would "
                   "exceed %zu bytes",
                   parent, sizeof a.sun_path - 1);
  }
  if (!mkdtemp(l->dir)) { /* mode 0700 */
    int e = errno;
    l->dir[0] = '\0';
    return jb_fail_errno(err, e, "shim socket directory under %s", parent);
  }
  snprintf(l->path, sizeof l->path, "%s/%s", l->dir, name);
  memcpy(a.sun_path, l->path, strlen(l->path) + 1);
  l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(l->fd, 1) < 0) {
    int e = errno;
    jb_shim_listener_close(l);
    return jb_fail_errno(err, e, "shim socket %s/%s", parent, name);
  }
  return 0;
}

int jb_shim_listener_accept(struct jb_shim_listener *l, long timeout_ms, jb_error *err) {
  long deadline = jb_now_ms() + timeout_ms;
  for (;;) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) return fd;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      return jb_fail_errno(err, errno, "accepting the shim's connection");
    long left = deadline - jb_now_ms();
    if (left <= 0)
      return jb_fail(err, ETIMEDOUT, "the launcher did not connect within %ld ms", timeout_ms);
    struct pollfd pf = {.fd = l->fd, .events = POLLIN};
    (void)poll(&pf, 1, (int)left);
  }
}

void jb_shim_listener_close(struct jb_shim_listener *l) {
  if (l->fd >= 0) close(l->fd);
  l->fd = -1;
  if (l->path[0]) unlink(l->path);
  l->path[0] = '\0';
  if (l->dir[0]) rmdir(l->dir);
  l->dir[0] = '\0';
}
