/* log.c — JSON log lines on stderr (see log.h). */
#include "lib/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum jb_log_level min_level = JB_LOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error", "fatal"};

void jb_log_set_level(const char *name) {
  for (int i = 0; i <= JB_LOG_ERROR; i++)
    if (name && strcmp(name, level_names[i]) == 0) {
      min_level = (enum jb_log_level)i;
      return;
    }
  min_level = JB_LOG_INFO;
}

void jb_iso8601_at(const struct timespec *ts, char *buf, size_t len) {
  struct tm tm;
  gmtime_r(&ts->tv_sec, &tm);
  char base[32];
  strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, len, "%s.%03ldZ", base, ts->tv_nsec / 1000000);
}

void jb_iso8601_now(char *buf, size_t len) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  jb_iso8601_at(&ts, buf, len);
}

void jb_log_json(enum jb_log_level lvl, const char *msg, json_t *fields) {
  if (lvl < min_level) {
    json_decref(fields);
    return;
  }
  char ts[40];
  jb_iso8601_now(ts, sizeof ts);
  json_t *o = json_object();
  if (!o) {
    json_decref(fields);
    return;
  }
  json_object_set_new(o, "ts", json_string(ts));
  json_object_set_new(o, "level", json_string(level_names[lvl]));
  json_object_set_new(o, "msg", json_string(msg ? msg : ""));
  if (fields && json_is_object(fields)) json_object_update_missing(o, fields);
  json_decref(fields);
  char *line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(o);
  if (!line) return;
  size_t n = strlen(line);
  line[n] = '\n'; /* json_dumps leaves the NUL; replace it and write n+1 bytes */
  ssize_t w = write(STDERR_FILENO, line, n + 1);
  (void)w;
  free(line);
}

void jb_log(enum jb_log_level lvl, const char *msg, ...) {
  if (lvl < min_level) return;
  json_t *f = json_object();
  va_list ap;
  va_start(ap, msg);
  const char *k;
  while ((k = va_arg(ap, const char *)) != NULL) {
    const char *v = va_arg(ap, const char *);
    if (f) json_object_set_new(f, k, v ? json_string(v) : json_null());
  }
  va_end(ap);
  jb_log_json(lvl, msg, f);
}
