/* redact.c — the redactor of a command's output stream (see redact.h): the `secret` and
 * `redact` rules of a scan rule set matched chunk by chunk with PCRE2's partial matching, the
 * bytes a match may still begin at held back, every match replaced by its marker. */
#define _GNU_SOURCE
#include "lib/redact.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/scan_private.h"

enum cand_state { CAND_UNKNOWN, CAND_NONE, CAND_FULL, CAND_PARTIAL, CAND_ERROR };

/* One rule's leftmost match at or after the search start: still valid while it begins at or
 * after the next search start (a search from later finds the same match). */
struct cand {
  enum cand_state state;
  size_t s, e; /* offsets into win: the match (CAND_FULL), or where a partial one begins */
};

struct jb_redactor {
  const struct jb_scan_rules *r;
  size_t *idx; /* the indices of the rules that redact */
  size_t nidx;
  struct cand *cand; /* per entry of idx, for the feed under way */
  pcre2_match_data *md;
  struct jb_buf win; /* released context (ctx bytes), then the bytes held back */
  size_t ctx;
  unsigned long long base; /* stream offset of win.data[0], bytes */
  bool at_start; /* win.data[0] is the stream's first byte (`^` may match there) */
  size_t count;
  struct jb_redaction rec[JB_REDACT_RECORDS_MAX];
  size_t nrec;
};

int jb_redactor_new(const struct jb_scan_rules *r, struct jb_redactor **out, jb_error *err) {
  *out = NULL;
  struct jb_redactor *rd = calloc(1, sizeof *rd);
  if (!rd) return jb_fail(err, ENOMEM, "redactor: out of memory");
  rd->r = r;
  rd->at_start = true;
  jb_buf_init(&rd->win, SIZE_MAX - 1);
  rd->idx = calloc(r->n ? r->n : 1, sizeof *rd->idx);
  rd->cand = calloc(r->n ? r->n : 1, sizeof *rd->cand);
  rd->md = pcre2_match_data_create(1, NULL);
  if (!rd->idx || !rd->cand || !rd->md) {
    jb_redactor_free(rd);
    return jb_fail(err, ENOMEM, "redactor: out of memory");
  }
  for (size_t i = 0; i < r->n; i++)
    if (r->rules[i].check == JB_SCAN_SECRET || r->rules[i].check == JB_SCAN_REDACT)
      rd->idx[rd->nidx++] = i;
  *out = rd;
  return 0;
}

void jb_redactor_free(struct jb_redactor *rd) {
  if (!rd) return;
  jb_buf_free(&rd->win);
  pcre2_match_data_free(rd->md);
  free(rd->cand);
  free(rd->idx);
  free(rd);
}

size_t jb_redactor_count(const struct jb_redactor *rd) { return rd->count; }

size_t jb_redactor_records(const struct jb_redactor *rd, const struct jb_redaction **records) {
  *records = rd->rec;
  return rd->nrec;
}

size_t jb_redactor_held(const struct jb_redactor *rd) { return rd->win.len - rd->ctx; }

/* Rule k's (an index into idx) leftmost match in win from `from`, into rd->cand[k]; an empty
 * match does not count (the search goes on one byte later). */
static void find(struct jb_redactor *rd, size_t k, size_t from, bool partial) {
  const struct rule *ru = &rd->r->rules[rd->idx[k]];
  struct cand *c = &rd->cand[k];
  uint32_t opts = (partial ? PCRE2_PARTIAL_HARD : 0) | (rd->at_start ? 0 : PCRE2_NOTBOL);
  const unsigned char *s = (const unsigned char *)(rd->win.data ? rd->win.data : "");
  for (;;) {
    if (from > rd->win.len) {
      c->state = CAND_NONE;
      return;
    }
    int rc = pcre2_match(ru->code, (PCRE2_SPTR)s, rd->win.len, from, opts, rd->md, rd->r->mctx);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rd->md);
    if (rc == PCRE2_ERROR_NOMATCH) {
      c->state = CAND_NONE;
    } else if (rc == PCRE2_ERROR_PARTIAL) {
      *c = (struct cand){CAND_PARTIAL, ov[0], rd->win.len};
    } else if (rc < 0 || ov[1] < ov[0]) { /* a limit, or \K past the end: fail closed */
      *c = (struct cand){CAND_ERROR, from, rd->win.len};
    } else if (ov[1] == ov[0]) {
      from = ov[0] + 1;
      continue;
    } else {
      *c = (struct cand){CAND_FULL, ov[0], ov[1]};
    }
    return;
  }
}

/* Appends [a, b) of win to out; the first failure is kept in *rc. */
/* Appends n bytes of `base` from `off` (base may be NULL when n is 0: nothing is formed). */
static void emit(struct jb_buf *out, const char *base, size_t off, size_t n, int *rc) {
  if (n == 0 || *rc) return;
  int r = jb_buf_append(out, base + off, n);
  if (r < 0) *rc = r;
}

/* One redaction by rule k at win offset s: the marker out, the record kept. */
static void redacted(struct jb_redactor *rd, size_t k, size_t s, bool failed, struct jb_buf *out,
                     int *rc) {
  const char *id = rd->r->rules[rd->idx[k]].id;
  char marker[JB_SCAN_ID_MAX + 16];
  int n = snprintf(marker, sizeof marker, "[REDACTED:%s]", id);
  emit(out, marker, 0, (size_t)n, rc);
  if (rd->nrec < JB_REDACT_RECORDS_MAX)
    rd->rec[rd->nrec++] = (struct jb_redaction){id, rd->base + s, failed};
  rd->count++;
}

/* Releases win from *pos on: the text before each match, a marker for the match; stops at
 * the first partial match (when `partial`), which stays held. */
static void release(struct jb_redactor *rd, size_t *pos, bool partial, struct jb_buf *out,
                    int *rc) {
  for (size_t k = 0; k < rd->nidx; k++) rd->cand[k].state = CAND_UNKNOWN;
  for (;;) {
    size_t best = SIZE_MAX;
    for (size_t k = 0; k < rd->nidx; k++) {
      struct cand *c = &rd->cand[k];
      if (c->state == CAND_UNKNOWN || (c->state != CAND_NONE && c->s < *pos))
        find(rd, k, *pos, partial);
      if (c->state == CAND_NONE) continue;
      if (c->state == CAND_ERROR) {
        best = k;
        break;
      }
      if (best == SIZE_MAX) {
        best = k;
        continue;
      }
      const struct cand *b = &rd->cand[best];
      /* the leftmost; at one start a partial match waits, else the longest */
      if (c->s < b->s ||
          (c->s == b->s && b->state == CAND_FULL && (c->state == CAND_PARTIAL || c->e > b->e)))
        best = k;
    }
    const char *w = rd->win.data;
    if (best == SIZE_MAX) {
      emit(out, w, *pos, rd->win.len - *pos, rc);
      *pos = rd->win.len;
      return;
    }
    const struct cand *b = &rd->cand[best];
    if (b->state == CAND_ERROR) { /* fail closed: all that is held goes as the marker */
      redacted(rd, best, *pos, true, out, rc);
      *pos = rd->win.len;
      return;
    }
    emit(out, w, *pos, b->s - *pos, rc);
    *pos = b->s;
    if (b->state == CAND_PARTIAL) return;
    redacted(rd, best, b->s, false, out, rc);
    *pos = b->e;
  }
}

int jb_redactor_feed(struct jb_redactor *rd, const unsigned char *data, size_t len, bool final,
                     struct jb_buf *out, jb_error *err) {
  if (len && jb_buf_append(&rd->win, data, len) < 0)
    return jb_fail(err, ENOMEM, "redactor: out of memory");
  size_t pos = rd->ctx;
  int rc = 0;
  if (rd->nidx == 0) {
    emit(out, rd->win.data, pos, rd->win.len - pos, &rc);
    pos = rd->win.len;
  } else {
    release(rd, &pos, !final, out, &rc);
    if (rd->win.len - pos > JB_REDACT_HOLD_MAX) release(rd, &pos, false, out, &rc);
  }
  /* keep the last released bytes as look-behind context */
  size_t drop = pos > JB_REDACT_CONTEXT ? pos - JB_REDACT_CONTEXT : 0;
  jb_buf_drop_front(&rd->win, drop);
  rd->base += drop;
  rd->ctx = pos - drop;
  if (drop) rd->at_start = false;
  if (rc == -ENOMEM) return jb_fail(err, ENOMEM, "redactor: out of memory");
  if (rc < 0) return jb_fail(err, -rc, "redactor: the output is full");
  return 0;
}
