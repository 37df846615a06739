/* err.c — builds and wraps jb_error values (see err.h). */
#define _GNU_SOURCE
#include "lib/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Replaces control characters so that a message always stays on one log line. */
static void one_line(char *s) {
  for (; *s; s++)
    if (*s == '\n' || *s == '\r' || *s == '\t') *s = ' ';
}

int jb_fail(jb_error *err, int code, const char *fmt, ...) {
  if (!err) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  one_line(err->msg);
  err->code = code;
  return -1;
}

int jb_fail_errno(jb_error *err, int code, const char *fmt, ...) {
  if (!err) return -1;
  char head[JB_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  char ebuf[128];
  const char *e = strerror_r(code, ebuf, sizeof ebuf);
  snprintf(err->msg, sizeof err->msg, "%s: %s", head, e);
  one_line(err->msg);
  err->code = code;
  return -1;
}

int jb_error_wrap(jb_error *err, const char *fmt, ...) {
  if (!err) return -1;
  char head[JB_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  char old[JB_ERROR_MSG_MAX];
  memcpy(old, err->msg, sizeof old);
  snprintf(err->msg, sizeof err->msg, "%s: %s", head, old);
  one_line(err->msg);
  return -1;
}

void jb_freep(void *p) {
  void **pp = p;
  free(*pp);
  *pp = NULL;
}

void jb_closep(int *fd) {
  if (*fd >= 0) {
    int saved = errno;
    close(*fd);
    errno = saved;
    *fd = -1;
  }
}
