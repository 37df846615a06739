/* attach.c — the Docker attach stream demultiplexer (see attach.h). */
#include "sandbox/worker/attach.h"

#include <string.h>

void jb_attach_demux_init(struct jb_attach_demux *d) { memset(d, 0, sizeof *d); }

int jb_attach_demux_next(struct jb_attach_demux *d, const void *p, size_t n, size_t *used,
                         struct jb_attach_chunk *chunk) {
  const unsigned char *b = p;
  *used = 0;
  if (d->broken) return -1;
  while (d->left == 0) {
    if (*used == n) return 0;
    size_t want = sizeof d->head - d->head_len, have = n - *used;
    if (have > want) have = want;
    memcpy(d->head + d->head_len, b + *used, have);
    d->head_len += have;
    *used += have;
    if (d->head_len < sizeof d->head) return 0;
    d->head_len = 0;
    if ((d->head[0] != JB_ATTACH_STDOUT && d->head[0] != JB_ATTACH_STDERR) || d->head[1] ||
        d->head[2] || d->head[3]) {
      d->broken = true;
      return -1;
    }
    d->stream = d->head[0];
    d->left = ((size_t)d->head[4] << 24) | ((size_t)d->head[5] << 16) | ((size_t)d->head[6] << 8) |
              d->head[7];
  }
  if (*used == n) return 0;
  chunk->stream = (enum jb_attach_stream)d->stream;
  chunk->data = b + *used;
  chunk->len = n - *used < d->left ? n - *used : d->left;
  return 1;
}

void jb_attach_demux_consume(struct jb_attach_demux *d, size_t k) {
  d->left -= k < d->left ? k : d->left;
}
