/* buf.c — the bounded growable byte buffer (see buf.h). */
#include "lib/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_ALLOC 256

void jb_buf_init(struct jb_buf *b, size_t cap) {
  b->data = NULL;
  b->len = 0;
  b->alloc = 0;
  b->cap = cap < SIZE_MAX - 1 ? cap : SIZE_MAX - 1;
}

void jb_buf_free(struct jb_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = 0;
  b->alloc = 0;
}

void jb_buf_reset(struct jb_buf *b) {
  b->len = 0;
  if (b->data) b->data[0] = '\0';
}

int jb_buf_reserve(struct jb_buf *b, size_t n, char **tail) {
  if (n > b->cap - b->len) return -EMSGSIZE;
  size_t need = b->len + n + 1; /* cannot overflow: len + n ≤ cap < SIZE_MAX - 1 */
  if (need > b->alloc) {
    size_t a = b->alloc ? b->alloc : MIN_ALLOC;
    while (a < need) a = a > SIZE_MAX / 2 ? SIZE_MAX : a * 2;
    if (a > b->cap + 1) a = b->cap + 1;
    char *p = realloc(b->data, a);
    if (!p) return -ENOMEM;
    if (!b->data) p[0] = '\0';
    b->data = p;
    b->alloc = a;
  }
  if (tail) *tail = b->data + b->len;
  return 0;
}

size_t jb_buf_space(const struct jb_buf *b) {
  if (!b->alloc) return 0;
  size_t s = b->alloc - 1 - b->len;
  return s < b->cap - b->len ? s : b->cap - b->len;
}

void jb_buf_added(struct jb_buf *b, size_t n) {
  b->len += n;
  b->data[b->len] = '\0';
}

int jb_buf_append(struct jb_buf *b, const void *p, size_t n) {
  if (n == 0) return 0;
  char *tail;
  int rc = jb_buf_reserve(b, n, &tail);
  if (rc < 0) return rc;
  memcpy(tail, p, n);
  jb_buf_added(b, n);
  return 0;
}

int jb_buf_vappendf(struct jb_buf *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) return -EINVAL;
  char *tail;
  int rc = jb_buf_reserve(b, (size_t)n, &tail);
  if (rc < 0) return rc;
  vsnprintf(tail, (size_t)n + 1, fmt, ap);
  jb_buf_added(b, (size_t)n);
  return 0;
}

int jb_buf_appendf(struct jb_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = jb_buf_vappendf(b, fmt, ap);
  va_end(ap);
  return rc;
}

char *jb_buf_take(struct jb_buf *b, size_t *len) {
  char *p = b->data;
  if (!p) p = calloc(1, 1);
  if (!p) return NULL;
  if (len) *len = b->len;
  b->data = NULL;
  b->len = 0;
  b->alloc = 0;
  return p;
}

void jb_buf_drop_front(struct jb_buf *b, size_t n) {
  if (n == 0) return;
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
  b->data[b->len] = '\0';
}
