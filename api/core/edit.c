/* edit.c — the edit tool's exact-text replacements (see edit.h). */
#define _GNU_SOURCE
#include "api/core/edit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The number of non-overlapping occurrences of `pat` (`plen` ≥ 1 bytes) in `s` (`len` bytes),
 * counted up to `stop` (the count returned is then `stop`). */
static size_t count_occurrences(const unsigned char *s, size_t len, const char *pat, size_t plen,
                                size_t stop) {
  size_t n = 0;
  const unsigned char *p = s, *end = s + len;
  while (n < stop && (size_t)(end - p) >= plen) {
    const unsigned char *hit = memmem(p, (size_t)(end - p), pat, plen);
    if (!hit) break;
    n++;
    p = hit + plen;
  }
  return n;
}

/* One edit on `len` bytes at `s`, `count` occurrences of which were counted: the new text
 * (new, `*olen` bytes) or NULL when out of memory. */
static unsigned char *replace(const unsigned char *s, size_t len, const struct jb_edit *e,
                              size_t count, size_t *olen) {
  size_t outlen = len - count * e->old_len + count * e->new_len;
  unsigned char *out = malloc(outlen ? outlen : 1);
  if (!out) return NULL;
  const unsigned char *p = s, *end = s + len;
  unsigned char *w = out;
  for (size_t i = 0; i < count; i++) {
    const unsigned char *hit = memmem(p, (size_t)(end - p), e->old_text, e->old_len);
    size_t keep = (size_t)(hit - p);
    memcpy(w, p, keep);
    w += keep;
    if (e->new_len) memcpy(w, e->new_text, e->new_len);
    w += e->new_len;
    p = hit + e->old_len;
  }
  memcpy(w, p, (size_t)(end - p));
  *olen = outlen;
  return out;
}

int jb_edit_apply(const unsigned char *src, size_t len, const struct jb_edit *edits, size_t n,
                  size_t max, unsigned char **out, size_t *out_len, size_t *replaced,
                  struct jb_edit_failure *fail) {
  *out = NULL;
  *fail = (struct jb_edit_failure){0};
  if (len > max) {
    *fail = (struct jb_edit_failure){.fault = JB_EDIT_TOO_LARGE};
    return -1;
  }
  unsigned char *cur = malloc(len ? len : 1);
  if (!cur) {
    *fail = (struct jb_edit_failure){.fault = JB_EDIT_NOMEM};
    return -1;
  }
  if (len) memcpy(cur, src, len);
  size_t clen = len, total = 0;
  for (size_t i = 0; i < n; i++) {
    const struct jb_edit *e = &edits[i];
    enum jb_edit_fault f = JB_EDIT_OK;
    size_t count = 0;
    if (e->old_len == 0) {
      f = JB_EDIT_EMPTY;
    } else {
      count = count_occurrences(cur, clen, e->old_text, e->old_len, e->replace_all ? SIZE_MAX : 2);
      if (count == 0)
        f = JB_EDIT_NOT_FOUND;
      else if (count > 1 && !e->replace_all)
        count = count_occurrences(cur, clen, e->old_text, e->old_len, SIZE_MAX),
        f = JB_EDIT_AMBIGUOUS;
      else if (e->new_len > e->old_len && (e->new_len - e->old_len) > (max - clen) / count)
        f = JB_EDIT_TOO_LARGE;
    }
    unsigned char *next = NULL;
    size_t nlen = 0;
    if (f == JB_EDIT_OK && !(next = replace(cur, clen, e, count, &nlen))) f = JB_EDIT_NOMEM;
    if (f != JB_EDIT_OK) {
      free(cur);
      *fail = (struct jb_edit_failure){.fault = f, .index = i, .count = count};
      return -1;
    }
    free(cur);
    cur = next;
    clen = nlen;
    total += count;
  }
  *out = cur;
  *out_len = clen;
  *replaced = total;
  return 0;
}

void jb_edit_failure_text(const struct jb_edit_failure *fail, size_t n, size_t max, char *buf,
                          size_t size) {
  size_t k = fail->index + 1;
  switch (fail->fault) {
    case JB_EDIT_EMPTY:
      snprintf(buf, size, "edit %zu of %zu: oldText is empty; give the exact text to replace", k,
               n);
      break;
    case JB_EDIT_NOT_FOUND:
      snprintf(buf, size,
               "edit %zu of %zu: oldText was not found in the file (as the edits before it left"
               " it); read the file and copy the text exactly, whitespace included",
               k, n);
      break;
    case JB_EDIT_AMBIGUOUS:
      snprintf(buf, size,
               "edit %zu of %zu: oldText was found %zu times; add surrounding lines to make it"
               " unique, or set replaceAll to replace every occurrence",
               k, n, fail->count);
      break;
    case JB_EDIT_TOO_LARGE:
      snprintf(buf, size, "edit %zu of %zu: the file would be over %zu bytes", k, n, max);
      break;
    case JB_EDIT_NOMEM:
      snprintf(buf, size, "out of memory applying the edits");
      break;
    default:
      snprintf(buf, size, "the edits applied");
  }
}
