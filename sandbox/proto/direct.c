/* direct.c — jailboxd's end of the direct op hand-over (see direct.h). */
#define _GNU_SOURCE
#include "sandbox/proto/direct.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/line.h"
#include "lib/metrics.h"

#define KEPT 4 /* connections kept per thread (one per worker it talked to) */

static __thread struct kept {
  int fd; /* the socket + 1: 0 is an empty slot (thread-local storage starts zeroed) */
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
} kept[KEPT];

static void drop(struct kept *k) {
  if (k->fd > 0) close(k->fd - 1);
  k->fd = 0;
  k->path[0] = '\0';
}

/* The kept connection to `path`, connecting when there is none (evicting the oldest slot). */
static struct kept *conn_for(const char *path, bool *reused, jb_error *err) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) {
    jb_fail(err, ENAMETOOLONG, "worker ops socket path too long");
    return NULL;
  }
  for (int i = 0; i < KEPT; i++)
    if (kept[i].fd > 0 && strcmp(kept[i].path, path) == 0) {
      *reused = true;
      return &kept[i];
    }
  *reused = false;
  struct kept *k = &kept[0];
  for (int i = 0; i < KEPT; i++)
    if (kept[i].fd <= 0) {
      k = &kept[i];
      break;
    }
  drop(k);
  memcpy(a.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    jb_fail_errno(err, errno, "worker ops socket");
    return NULL;
  }
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    jb_fail_errno(err, errno, "connect to the worker's ops socket %s", path);
    close(fd);
    return NULL;
  }
  k->fd = fd + 1;
  snprintf(k->path, sizeof k->path, "%s", path);
  return k;
}

static int send_all(int fd, const char *p, size_t len, jb_error *err) {
  while (len > 0) {
    ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return jb_fail_errno(err, w < 0 ? errno : EPIPE, "send to the worker");
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Reads one answer line from `fd` within `deadline` (CLOCK_MONOTONIC ms): at most
 * JB_DIRECT_MAX_LINE bytes with its newline, and nothing after it (one request in flight).
 * Returns the parsed object or NULL with err; *got_any tells whether any byte arrived. */
static json_t *read_answer(int fd, long long deadline, bool *got_any, jb_error *err) {
  struct jb_line_reader r;
  jb_line_init(&r,
               &(struct jb_line_opts){.max_line = JB_DIRECT_MAX_LINE - 1, .over = JB_LINE_FAIL});
  json_t *out = NULL;
  for (;;) {
    long long left = deadline - jb_now_ms();
    if (left <= 0) {
      jb_fail(err, ETIMEDOUT, "the worker did not answer in time");
      break;
    }
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int pr = poll(&pf, 1, (int)(left > 60000 ? 60000 : left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) {
      jb_fail_errno(err, errno, "poll the worker");
      break;
    }
    if (pr == 0) continue;
    jb_error rerr = {0};
    ssize_t got = jb_line_read(&r, fd, &rerr);
    if (got < 0 && (rerr.code == EAGAIN || rerr.code == EWOULDBLOCK)) continue;
    if (got < 0 && rerr.code == ENOMEM) {
      jb_fail(err, ENOMEM, "out of memory");
      break;
    }
    if (got <= 0) {
      jb_fail_errno(err, got < 0 ? rerr.code : EPIPE, "the worker closed the connection");
      break;
    }
    *got_any = true;
    char *line;
    size_t n;
    int rc = jb_line_next(&r, &line, &n);
    if (rc == JB_LINE_AGAIN) continue;
    if (rc != JB_LINE_OK) {
      jb_fail(err, EMSGSIZE, "the worker's answer is over %d bytes", JB_DIRECT_MAX_LINE);
      break;
    }
    if (jb_line_held(&r) > 0) { /* one request in flight: nothing may follow */
      jb_fail(err, EPROTO, "the worker sent more than one answer");
      break;
    }
    out = jb_json_parse_object(line, n, JB_DIRECT_MAX_DEPTH, err);
    if (!out && err->code != ENOMEM) err->code = EPROTO;
    break;
  }
  jb_line_free(&r);
  return out;
}

static __thread long long last_id; /* the "id" of this thread's last request */

json_t *jb_direct_call(const char *path, const json_t *req, long timeout_ms, jb_error *err) {
  json_t *r = json_deep_copy(req);
  long long id = ++last_id;
  /* numbered: an answer is taken only with its request's id (a stray line is never it) */
  size_t n = 0; /* bytes of the line with its newline */
  jb_error eerr = {0};
  char *line = r && json_object_set_new(r, "id", json_integer(id)) == 0
                   ? jb_line_encode(r, JB_DIRECT_MAX_LINE - 1, &n, &eerr)
                   : NULL;
  json_decref(r);
  if (!line && eerr.code == EMSGSIZE)
    return jb_fail(err, EMSGSIZE, "request over %d bytes", JB_DIRECT_MAX_LINE), NULL;
  if (!line) return jb_fail(err, ENOMEM, "out of memory"), NULL;
  long long deadline = jb_now_ms() + timeout_ms;
  json_t *out = NULL;
  for (int attempt = 0; attempt < 2 && !out; attempt++) {
    bool reused = false, got_any = false;
    struct kept *k = conn_for(path, &reused, err);
    if (!k) break;
    if (send_all(k->fd - 1, line, n, err) == 0)
      out = read_answer(k->fd - 1, deadline, &got_any, err);
    json_t *aid = json_object_get(out, "id");
    if (out && (!json_is_integer(aid) || json_integer_value(aid) != id)) {
      json_decref(out);
      out = NULL;
      jb_fail(err, EPROTO, "the worker answered another request");
    }
    if (!out) drop(k);
    /* a kept connection the worker closed meanwhile (it restarted): once more, new */
    if (out || !reused || got_any || err->code == ETIMEDOUT) break;
  }
  free(line);
  return out;
}
