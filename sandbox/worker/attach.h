/* attach.h — the demultiplexer of a Docker attach stream: the frames the daemon sends on a
 * hijacked attach connection of a container without a TTY (Docker Engine API v1.41, "Attach
 * to a container", stream format). Each frame is an 8-byte header — the stream type (1
 * stdout, 2 stderr), three zero bytes, the payload size as a big-endian 32-bit integer — and
 * then that many payload bytes.
 *
 * A pure codec: fed bytes as they came off the socket, in any chunking, it gives back the
 * (stream, payload) pieces; the caller may take a piece in part and offer the rest again. */
#ifndef JB_SANDBOX_ATTACH_H
#define JB_SANDBOX_ATTACH_H

#include <stdbool.h>
#include <stddef.h>

enum jb_attach_stream { JB_ATTACH_STDOUT = 1, JB_ATTACH_STDERR = 2 };

struct jb_attach_demux {
  unsigned char head[8]; /* the header being read */
  size_t head_len; /* its bytes so far */
  int stream; /* the stream of the frame being read */
  size_t left; /* payload bytes of that frame still to come; 0: a header is next */
  bool broken; /* a bad header was seen: the stream cannot be read on */
};

/* Payload bytes of one stream, borrowed from the bytes offered. */
struct jb_attach_chunk {
  enum jb_attach_stream stream;
  const unsigned char *data;
  size_t len;
};

/* A demultiplexer at the start of a stream. */
void jb_attach_demux_init(struct jb_attach_demux *d);

/* Reads `n` bytes at `p`: header bytes are consumed (their count added to *used, which starts
 * at 0) until a frame's payload begins; then *chunk is the payload in `p` from there (at most
 * what the frame has left), not yet consumed: pass jb_attach_demux_consume the count taken,
 * and offer the bytes after those again. Returns 1 with a chunk; 0 when every byte of `p` was
 * consumed as header bytes (or n is 0); -1 for a bad header (a stream type other than 1 and
 * 2, or non-zero padding), and -1 on every call after it. */
int jb_attach_demux_next(struct jb_attach_demux *d, const void *p, size_t n, size_t *used,
                         struct jb_attach_chunk *chunk);

/* Counts `k` payload bytes of the last chunk (k ≤ its len) as consumed. */
void jb_attach_demux_consume(struct jb_attach_demux *d, size_t k);

#endif
