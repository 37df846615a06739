/* shimconn.c — the line channel to jailbox-shim: a per-session Unix socket, or a Docker
 * attach stream (see shimconn.h). Frame format of the attach stream: Docker Engine API,
 * "Attach to a container" (stream format). */
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

int jb_shimconn_init(struct jb_shimconn *c, const struct jb_docker_stream *stream, jb_error *err) {
  memset(c, 0, sizeof *c);
  c->stream = *stream;
  c->next_id = 1;
  c->sock = -1;
  c->line_cap = 64 * 1024;
  c->line = malloc(c->line_cap);
  c->rbuf = malloc(JB_SHIMCONN_RBUF);
  if (!c->line || !c->rbuf) {
    free(c->line);
    free(c->rbuf);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  pthread_mutex_init(&c->lock, NULL);
  return 0;
}

void jb_shimconn_close(struct jb_shimconn *c) {
  jb_docker_stream_close(&c->stream);
  if (c->sock >= 0) close(c->sock);
  c->sock = -1;
  free(c->line);
  free(c->rbuf);
  free(c->sbuf);
  c->line = NULL;
  c->rbuf = NULL;
  c->sbuf = NULL;
  pthread_mutex_destroy(&c->lock);
}

int jb_shimconn_use_socket(struct jb_shimconn *c, int fd, jb_error *err) {
  unsigned char *b = malloc(JB_SHIMCONN_RBUF);
  if (!b) {
    close(fd);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  pthread_mutex_lock(&c->lock);
  c->sock = fd;
  c->sbuf = b;
  c->slen = c->soff = 0;
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

static void keep_stderr(struct jb_shimconn *c, const char *p, size_t n) {
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

/* Appends stdout bytes to the line buffer; returns how many bytes of `p` were consumed up to
 * and including the first newline (the line is then complete), or n when none. */
static size_t take_stdout(struct jb_shimconn *c, const char *p, size_t n, bool *complete) {
  const char *nl = memchr(p, '\n', n);
  size_t upto = nl ? (size_t)(nl - p) : n;
  if (!c->line_overflow) {
    if (c->line_len + upto > JB_SHIM_MAX_LINE) c->line_overflow = true;
    else {
      if (c->line_len + upto + 1 > c->line_cap) {
        size_t cap = c->line_cap;
        while (cap < c->line_len + upto + 1) cap *= 2;
        char *nb = realloc(c->line, cap);
        if (!nb) {
          c->line_overflow = true; /* reported as too large: no memory to hold it */
        } else {
          c->line = nb;
          c->line_cap = cap;
        }
      }
      if (!c->line_overflow) {
        memcpy(c->line + c->line_len, p, upto);
        c->line_len += upto;
      }
    }
  }
  *complete = nl != NULL;
  return nl ? upto + 1 : n;
}

/* Runs the frame parser over the attach bytes in c->rbuf. On the attach channel returns 1
 * as soon as a stdout line is complete (in c->line, NUL-terminated, c->line_len bytes; the
 * rest stays in c->rbuf); on the socket channel stdout frames can only come from the
 * launcher and join the stderr tail. Returns 0 when the buffer is used up, -1 on a framing
 * error (c->dead set). */
static int parse_attach(struct jb_shimconn *c) {
  while (c->roff < c->rlen) {
    const unsigned char *buf = c->rbuf + c->roff;
    size_t n = c->rlen - c->roff;
    if (c->fleft == 0) {
      size_t want = 8 - c->fhead_len, have = n < want ? n : want;
      memcpy(c->fhead + c->fhead_len, buf, have);
      c->fhead_len += have;
      c->roff += have;
      if (c->fhead_len < 8) break;
      c->fhead_len = 0;
      c->ftype = c->fhead[0];
      c->fleft = ((size_t)c->fhead[4] << 24) | ((size_t)c->fhead[5] << 16) |
                 ((size_t)c->fhead[6] << 8) | c->fhead[7];
      if ((c->ftype != 1 && c->ftype != 2) || c->fhead[1] || c->fhead[2] || c->fhead[3]) {
        kill_conn(c, "bad frame header on the attach stream");
        return -1;
      }
      continue;
    }
    size_t take = n < c->fleft ? n : c->fleft;
    if (c->ftype == 2 || c->sock >= 0) {
      keep_stderr(c, (const char *)buf, take);
      c->roff += take;
      c->fleft -= take;
      continue;
    }
    bool complete = false;
    size_t used = take_stdout(c, (const char *)buf, take, &complete);
    c->roff += used;
    c->fleft -= used;
    if (complete) {
      c->line[c->line_len] = '\0';
      return 1;
    }
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

/* The attach channel: reads the stream until a stdout line is complete. Returns 1 with the
 * line in c->line, 0 on timeout, -1 at the end of the stream or on a framing error (c->dead
 * set). Unparsed bytes stay in c->rbuf for the next call. */
static int pump_attach(struct jb_shimconn *c, long deadline) {
  for (;;) {
    int r = parse_attach(c);
    if (r != 0) return r;
    if (c->stream.pre_off >= c->stream.pre_len) {
      long left = deadline - jb_now_ms();
      if (left <= 0) return 0;
      struct pollfd pf = {.fd = c->stream.fd, .events = POLLIN};
      int pr = poll(&pf, 1, (int)(left > 1000000 ? 1000000 : left));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) return 0;
    }
    if (fill_attach(c) < 0) {
      kill_conn(c, "the container's output ended");
      return -1;
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

/* The socket channel: reads the socket until a line is complete, reading the attach stream
 * alongside for its stderr. Returns as pump_attach; at the end of the socket, waits a little
 * (at most 300 ms) for the attach stream to end too, so that the message carries what the
 * shim, bwrap or the runtime said last. */
static int pump_socket(struct jb_shimconn *c, long deadline) {
  for (;;) {
    if (c->soff < c->slen) {
      bool complete = false;
      c->soff += take_stdout(c, (const char *)c->sbuf + c->soff, c->slen - c->soff, &complete);
      if (complete) {
        c->line[c->line_len] = '\0';
        return 1;
      }
      continue;
    }
    if (!c->attach_ended) {
      if (parse_attach(c) < 0) return -1; /* framing error: c->dead */
      if (c->stream.pre_off < c->stream.pre_len) {
        (void)fill_attach(c); /* the bytes that came with the HTTP answer */
        continue;
      }
    }
    long left = deadline - jb_now_ms();
    if (left <= 0) return 0;
    struct pollfd pf[2] = {{.fd = c->sock, .events = POLLIN},
                           {.fd = c->attach_ended ? -1 : c->stream.fd, .events = POLLIN}};
    int pr = poll(pf, 2, (int)(left > 1000000 ? 1000000 : left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) return 0;
    if (pf[1].revents) (void)fill_attach(c);
    if (pf[0].revents) {
      ssize_t r = recv(c->sock, c->sbuf, JB_SHIMCONN_RBUF, MSG_DONTWAIT);
      if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (r <= 0) {
        kill_conn(c, "the shim's socket closed");
        collect_stderr(c, 300);
        return -1;
      }
      c->soff = 0;
      c->slen = (size_t)r;
    }
  }
}

static int pump(struct jb_shimconn *c, long deadline) {
  return c->sock >= 0 ? pump_socket(c, deadline) : pump_attach(c, deadline);
}

json_t *jb_shimconn_read(struct jb_shimconn *c, long timeout_ms, jb_error *err) {
  if (c->dead) {
    char tail[512];
    jb_shimconn_stderr(c, tail, sizeof tail);
    jb_fail(err, EPIPE, "%s%s%s", c->dead_reason, tail[0] ? ": " : "", tail);
    return NULL;
  }
  long deadline = jb_now_ms() + timeout_ms;
  for (;;) {
    int r = pump(c, deadline);
    if (r == 0) {
      jb_fail(err, ETIMEDOUT, "no answer from the shim within %ld ms", timeout_ms);
      return NULL;
    }
    if (r < 0) return jb_shimconn_read(c, 0, err); /* reports the reason */
    bool over = c->line_overflow;
    size_t len = c->line_len;
    c->line_len = 0;
    c->line_overflow = false;
    if (over) {
      kill_conn(c, "the shim sent a line over the limit");
      jb_fail(err, EMSGSIZE, "the shim sent a line over %d bytes", JB_SHIM_MAX_LINE);
      return NULL;
    }
    if (len == 0) continue;
    jb_error perr = {0};
    json_t *o = jb_json_parse_object(c->line, len, JB_SHIM_MAX_DEPTH, &perr);
    if (!o) {
      kill_conn(c, "the shim sent a malformed line");
      jb_fail(err, EPROTO, "malformed line from the shim: %s", perr.msg);
      return NULL;
    }
    return o;
  }
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
  char *s = json_dumps(req, JSON_COMPACT);
  if (!s) {
    jb_fail(err, ENOMEM, "cannot encode the request");
    goto out;
  }
  size_t n = strlen(s);
  if (n > JB_SHIM_MAX_LINE) {
    free(s);
    jb_fail(err, EMSGSIZE, "request over %d bytes", JB_SHIM_MAX_LINE);
    goto out;
  }
  s[n] = '\n'; /* json_dumps leaves room for the NUL, used here for the newline */
  int rc = jb_shimconn_send_raw(c, s, n + 1, timeout_ms, err);
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

/* ---- the listening end of the socket channel ------------------------------------------ */

int jb_shim_listener_open(struct jb_shim_listener *l, const char *parent, const char *name,
                          jb_error *err) {
  memset(l, 0, sizeof *l);
  l->fd = -1;
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  int n = snprintf(l->dir, sizeof l->dir, "%s/jbshim-XXXXXX", parent);
  if (n < 0 || (size_t)n >= sizeof l->dir ||
      (size_t)n + 1 + strlen(name) >= sizeof a.sun_path) {
    l->dir[0] = '\0';
    return jb_fail(err, ENAMETOOLONG, "shim socket directory %s: a socket path under it would "
                   "exceed %zu bytes", parent, sizeof a.sun_path - 1);
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
