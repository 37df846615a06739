/* progress.c — MCP progress notifications of a waiting call, and the last output line of a
 * running command (see progress.h). */
#define _GNU_SOURCE
#include "api/core/progress.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "lib/metrics.h"
#include "lib/utf8.h"

#define TOKEN_MAX 256 /* bytes of a string progress token */
#define MESSAGE_MAX 200 /* bytes of a notification's message */

void jb_progress_init(struct jb_progress *p, json_t *params, const struct jb_progress_sink *sink,
                      long interval_s) {
  *p = (struct jb_progress){0};
  json_t *tok = json_object_get(json_object_get(params, "_meta"), "progressToken");
  bool ok = json_is_integer(tok) || (json_is_string(tok) && json_string_length(tok) <= TOKEN_MAX);
  if (!ok || !sink || !sink->send) return;
  p->token = json_incref(tok);
  p->sink = sink;
  p->interval_ms = (interval_s < 1 ? 1 : interval_s) * 1000LL;
  p->started_ms = jb_now_ms();
  p->due_ms = p->started_ms + p->interval_ms;
}

void jb_progress_clear(struct jb_progress *p) {
  json_decref(p->token);
  *p = (struct jb_progress){0};
}

bool jb_progress_on(const struct jb_progress *p) { return p && p->token && !p->dead; }

long jb_progress_due_in(const struct jb_progress *p) {
  if (!jb_progress_on(p)) return 1L << 30;
  long long left = p->due_ms - jb_now_ms();
  return left < 0 ? 0 : (long)left;
}

/* Valid UTF-8 `b` made one line of plain text in place: every control character (C0 — the
 * escape that starts a terminal's control sequence, CR, tab —, DEL, C1) and every mark of
 * jb_utf8_hidden_mark becomes '?'. A command's output line reaches the client's screen as it is:
 * its escapes could move the cursor, retitle the window or write the clipboard there. */
static void plain_line(struct jb_buf *b) {
  size_t w = 0;
  for (size_t i = 0; i < b->len;) {
    const unsigned char *p = (const unsigned char *)b->data + i;
    size_t h = jb_utf8_hidden_mark(p, b->len - i);
    if (h || *p < 0x20 || *p == 0x7f) {
      b->data[w++] = '?';
      i += h ? h : 1;
    } else {
      b->data[w++] = b->data[i++];
    }
  }
  b->len = w;
  b->data[w] = '\0';
}

/* `m` cut to at most MESSAGE_MAX bytes on a character boundary, as valid UTF-8 and one line
 * of plain text (plain_line) (new). */
static json_t *message_json(const char *m) {
  size_t n = strlen(m);
  if (n > MESSAGE_MAX) n = MESSAGE_MAX;
  struct jb_buf b;
  jb_buf_init(&b, MESSAGE_MAX * 3 + 8);
  size_t rep = 0;
  /* not final: a character the cut splits is left out, not replaced */
  if (jb_utf8_sanitize((const unsigned char *)m, n, n == strlen(m), &b, &rep) == (size_t)-1) {
    jb_buf_free(&b);
    return NULL;
  }
  if (b.data) plain_line(&b);
  json_t *s = json_stringn(b.data ? b.data : "", b.len);
  jb_buf_free(&b);
  return s;
}

void jb_progress_tick(struct jb_progress *p, const char *message, bool force) {
  if (!jb_progress_on(p)) return;
  long long now = jb_now_ms();
  if (!force && now < p->due_ms) return;
  double progress = (double)(now - p->started_ms) / 1000.0;
  if (progress <= p->last) progress = p->last + 0.001; /* grows with every notification */
  json_t *params = json_pack("{s:O,s:f}", "progressToken", p->token, "progress", progress);
  json_t *m = message ? message_json(message) : NULL;
  if (params && m)
    json_object_set_new(params, "message", m);
  else
    json_decref(m);
  json_t *msg = params ? json_pack("{s:s,s:s,s:o}", "jsonrpc", "2.0", "method",
                                   "notifications/progress", "params", params)
                       : NULL;
  p->due_ms = now + p->interval_ms;
  if (!msg) return;
  p->last = progress;
  if (p->sink->send(p->sink->ctx, msg) < 0) p->dead = true;
}

/* ---- the last output line of a running command ---- */

static struct {
  pthread_mutex_t lock;
  struct jb_exec_line *head;
} lines = {.lock = PTHREAD_MUTEX_INITIALIZER};

void jb_exec_line_watch(struct jb_exec_line *w, const char *job, long long op_id) {
  *w = (struct jb_exec_line){.op_id = op_id};
  snprintf(w->job, sizeof w->job, "%s", job);
  pthread_mutex_lock(&lines.lock);
  w->next = lines.head;
  lines.head = w;
  pthread_mutex_unlock(&lines.lock);
}

void jb_exec_line_unwatch(struct jb_exec_line *w) {
  pthread_mutex_lock(&lines.lock);
  for (struct jb_exec_line **pp = &lines.head; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  pthread_mutex_unlock(&lines.lock);
  w->next = NULL;
}

bool jb_exec_line_last(struct jb_exec_line *w, char *out, size_t n) {
  pthread_mutex_lock(&lines.lock);
  snprintf(out, n, "%s", w->line);
  pthread_mutex_unlock(&lines.lock);
  return out[0] != '\0';
}

/* The last line of `d` (`n` bytes) with something but blanks on it, into `out` (`cap` bytes,
 * cut); false when there is none. */
static bool last_line(const char *d, size_t n, char *out, size_t cap) {
  size_t end = n;
  while (end > 0) {
    while (end > 0 && (d[end - 1] == '\n' || d[end - 1] == '\r')) end--;
    size_t start = end;
    while (start > 0 && d[start - 1] != '\n' && d[start - 1] != '\r') start--;
    size_t a = start, b = end;
    while (a < b && (d[a] == ' ' || d[a] == '\t')) a++;
    while (b > a && (d[b - 1] == ' ' || d[b - 1] == '\t')) b--;
    if (b > a) {
      size_t len = b - a < cap - 1 ? b - a : cap - 1;
      memcpy(out, d + a, len);
      out[len] = '\0';
      return true;
    }
    end = start;
  }
  return false;
}

void jb_exec_line_on_bus(void *ctx, const char *job_id, enum jb_event_kind kind, json_t *payload) {
  (void)ctx;
  if (kind != JB_EVENT_EXEC_OUTPUT) return;
  pthread_mutex_lock(&lines.lock);
  if (!lines.head) {
    pthread_mutex_unlock(&lines.lock);
    return;
  }
  json_t *op = json_object_get(payload, "opId");
  json_t *data = json_object_get(payload, "data");
  if (json_is_integer(op) && json_is_string(data)) {
    char line[sizeof lines.head->line];
    bool got = false, done = false;
    for (struct jb_exec_line *w = lines.head; w; w = w->next) {
      if (w->op_id != json_integer_value(op) || strcmp(w->job, job_id)) continue;
      if (!done) {
        got = last_line(json_string_value(data), json_string_length(data), line, sizeof line);
        done = true;
      }
      if (got) memcpy(w->line, line, sizeof line);
    }
  }
  pthread_mutex_unlock(&lines.lock);
}
