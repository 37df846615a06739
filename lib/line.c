/* line.c — the bounded newline-delimited reader and the line writer (see line.h).
 *
 * Invariant of the reader: it holds at most max_line + 1 bytes (the cap of its buffer), and
 * bytes it has returned are moved out before more are taken in. A line still without its '\n'
 * that fills the whole buffer is therefore over the limit, and a '\n' found in the buffer always
 * ends a line of max_line bytes or fewer. */
#define _GNU_SOURCE
#include "lib/line.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/json.h"

/* Bytes of storage (with the NUL jb_buf keeps after the contents) a read makes room for in
 * all: what the reader holds plus what the read may take. A power of two, so that the
 * buffer's doubling stops at it exactly; a line held past it grows the storage further. */
#define READ_RESERVE 65536

void jb_line_init(struct jb_line_reader *r, const struct jb_line_opts *o) {
  memset(r, 0, sizeof *r);
  r->o = *o;
  if (r->o.max_line == 0) r->o.max_line = 1;
  if (r->o.max_line > SIZE_MAX / 2) r->o.max_line = SIZE_MAX / 2;
  jb_buf_init(&r->buf, r->o.max_line + 1);
}

void jb_line_free(struct jb_line_reader *r) {
  jb_buf_free(&r->buf);
  r->off = r->scanned = 0;
  r->has_last = false;
}

/* Moves the bytes not yet returned to the front of the buffer. */
static void compact(struct jb_line_reader *r) {
  if (r->off == 0) return;
  jb_buf_drop_front(&r->buf, r->off);
  r->off = 0;
  r->has_last = false;
}

/* Drops every byte held. */
static void drop_held(struct jb_line_reader *r) {
  jb_buf_reset(&r->buf);
  r->off = r->scanned = 0;
}

/* The reader ends with `rc` (JB_LINE_TOO_LONG or JB_LINE_NOMEM). */
static int fail(struct jb_line_reader *r, int rc) {
  r->failed = rc;
  r->skipping = r->report = false;
  drop_held(r);
  return rc;
}

size_t jb_line_feed(struct jb_line_reader *r, const void *p, size_t n) {
  const char *s = p;
  if (r->failed) return n;
  if (n == 0) return 0;
  if (r->skipping && r->off == r->buf.len) { /* dropped as it comes, never held */
    const char *nl = memchr(s, '\n', n);
    if (!nl) return n;
    r->skipping = false;
    if (r->o.over == JB_LINE_SKIP_WHOLE) r->report = true;
    return (size_t)(nl - s) + 1;
  }
  compact(r);
  size_t room = r->buf.cap - r->buf.len;
  size_t take = n < room ? n : room;
  const char *nl = memchr(s, '\n', take);
  if (nl) take = (size_t)(nl - s) + 1;
  if (jb_buf_append(&r->buf, s, take) < 0) {
    fail(r, JB_LINE_NOMEM);
    return 0;
  }
  return take;
}

void jb_line_end(struct jb_line_reader *r) { r->ended = true; }

ssize_t jb_line_read(struct jb_line_reader *r, int fd, jb_error *err) {
  if (r->failed) drop_held(r);
  compact(r);
  size_t room = r->buf.cap - r->buf.len;
  if (room == 0) {
    jb_fail(err, ENOBUFS, "a line is waiting to be taken");
    return -1;
  }
  char *tail;
  size_t want = r->buf.len + 1 < READ_RESERVE ? READ_RESERVE - 1 - r->buf.len : 1;
  if (jb_buf_reserve(&r->buf, room < want ? room : want, &tail) < 0) {
    fail(r, JB_LINE_NOMEM);
    jb_fail(err, ENOMEM, "out of memory");
    return -1;
  }
  size_t space = jb_buf_space(&r->buf);
  ssize_t got;
  do got = read(fd, tail, space);
  while (got < 0 && errno == EINTR);
  if (got < 0) {
    jb_fail_errno(err, errno, "read");
    return -1;
  }
  if (got == 0) {
    r->ended = true;
    return 0;
  }
  jb_buf_added(&r->buf, (size_t)got);
  if (r->failed) drop_held(r);
  return got;
}

int jb_line_next(struct jb_line_reader *r, char **line, size_t *len) {
  r->has_last = false;
  if (r->failed) {
    drop_held(r);
    return r->failed;
  }
  for (;;) {
    if (r->report) {
      r->report = false;
      return JB_LINE_TOO_LONG;
    }
    size_t held = r->buf.len - r->off;
    char *base = r->buf.data ? r->buf.data + r->off : NULL;
    char *nl = r->scanned < held ? memchr(base + r->scanned, '\n', held - r->scanned) : NULL;
    if (nl) {
      size_t n = (size_t)(nl - base); /* ≤ max_line: see the invariant at the top */
      r->off += n + 1;
      r->scanned = 0;
      if (r->skipping) { /* the end of a line over the limit */
        r->skipping = false;
        if (r->o.over == JB_LINE_SKIP_WHOLE) r->report = true;
        continue;
      }
      if (n == 0 && r->o.skip_empty) continue;
      *nl = '\0';
      *line = base;
      *len = n;
      r->last_off = (size_t)(base - r->buf.data);
      r->last_len = n;
      r->has_last = true;
      return JB_LINE_OK;
    }
    r->scanned = held;
    if (r->skipping) {
      drop_held(r);
    } else if (held > r->o.max_line) {
      if (r->o.over == JB_LINE_FAIL) return fail(r, JB_LINE_TOO_LONG);
      drop_held(r);
      r->skipping = true;
      if (r->o.over == JB_LINE_SKIP) return JB_LINE_TOO_LONG;
    }
    if (!r->ended) return JB_LINE_AGAIN;
    held = r->buf.len - r->off;
    if (held > 0 && r->o.last_unterminated) {
      /* the buffer keeps a NUL after its bytes: the line is terminated already */
      *line = r->buf.data + r->off;
      *len = held;
      r->last_off = r->off;
      r->last_len = held;
      r->has_last = true;
      r->off = r->buf.len;
      r->scanned = 0;
      return JB_LINE_OK;
    }
    drop_held(r);
    return JB_LINE_END;
  }
}

int jb_line_next_object(struct jb_line_reader *r, size_t max_depth, json_t **obj, jb_error *err) {
  *obj = NULL;
  char *line;
  size_t n;
  int rc = jb_line_next(r, &line, &n);
  if (rc != JB_LINE_OK) return rc;
  *obj = jb_json_parse_object(line, n, max_depth, err);
  return *obj ? JB_LINE_OK : JB_LINE_BAD_JSON;
}

size_t jb_line_held(const struct jb_line_reader *r) { return r->buf.len - r->off; }

char *jb_line_take(struct jb_line_reader *r, size_t *len) {
  if (!r->has_last) return NULL;
  r->has_last = false;
  size_t n = r->last_len;
  char *p;
  if (r->last_off == 0 && r->off == r->buf.len) {
    p = jb_buf_take(&r->buf, NULL); /* the line's '\n' (or the buffer's end) is a NUL already */
    r->off = r->scanned = 0;
  } else {
    p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, r->buf.data + r->last_off, n);
    p[n] = '\0';
  }
  if (p && len) *len = n;
  return p;
}

/* ---- the writer ------------------------------------------------------------------------ */

char *jb_line_encode(const json_t *obj, size_t max_line, size_t *len, jb_error *err) {
  char *s = json_dumps(obj, JSON_COMPACT);
  if (!s) {
    jb_fail(err, ENOMEM, "cannot encode the message");
    return NULL;
  }
  size_t n = strlen(s);
  if (max_line && n > max_line) {
    free(s);
    jb_fail(err, EMSGSIZE, "message over %zu bytes", max_line);
    return NULL;
  }
  char *p = realloc(s, n + 2);
  if (!p) {
    free(s);
    jb_fail(err, ENOMEM, "out of memory");
    return NULL;
  }
  p[n] = '\n';
  p[n + 1] = '\0';
  *len = n + 1;
  return p;
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int jb_line_write_all(int fd, const void *p, size_t n, long timeout_ms, jb_error *err) {
  const char *s = p;
  long long deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : 0;
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int ms = -1;
      if (timeout_ms >= 0) {
        long long left = deadline - now_ms();
        if (left <= 0) return jb_fail(err, ETIMEDOUT, "write timed out");
        ms = left > INT32_MAX ? INT32_MAX : (int)left;
      }
      struct pollfd pf = {.fd = fd, .events = POLLOUT};
      (void)poll(&pf, 1, ms);
      continue;
    }
    if (w < 0) return jb_fail_errno(err, errno, "write");
    if (w == 0) return jb_fail(err, EPIPE, "write: nothing written");
    s += w;
    n -= (size_t)w;
  }
  return 0;
}

int jb_line_write_json(int fd, const json_t *obj, size_t max_line, long timeout_ms, jb_error *err) {
  size_t n;
  char *line = jb_line_encode(obj, max_line, &n, err);
  if (!line) return -1;
  int rc = jb_line_write_all(fd, line, n, timeout_ms, err);
  free(line);
  return rc;
}
