/* buf.h — the one growable byte buffer: a hard cap fixed at init, every append checked
 * against it, the contents always NUL-terminated (after curl's dynbuf).
 *
 * A buffer never holds more than `cap` bytes: an append that would pass the cap appends
 * nothing and fails with -EMSGSIZE; one that cannot allocate appends nothing and fails with
 * -ENOMEM. Either way the contents are left as they were, and the caller must look at the
 * result (JB_MUST_USE). The storage grows by doubling, up to cap + 1 bytes (the + 1 is the
 * terminating NUL, never counted in `len`). */
#ifndef JB_BUF_H
#define JB_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "lib/compiler.h"

struct jb_buf {
  char *data; /* the bytes, NUL-terminated; NULL until the first allocation */
  size_t len; /* bytes held, not counting the NUL */
  size_t alloc; /* bytes allocated at data (0, or ≥ len + 1) */
  size_t cap; /* most bytes the buffer may hold */
};

/* An empty buffer that will hold at most `cap` bytes (SIZE_MAX - 1 at most). Allocates
 * nothing. */
void jb_buf_init(struct jb_buf *b, size_t cap);

/* Frees the storage; the buffer is empty after, with the same cap, and may be used again. */
void jb_buf_free(struct jb_buf *b);

/* Empties the buffer, keeping its storage for later appends. */
void jb_buf_reset(struct jb_buf *b);

/* Appends `n` bytes from `p` (which may hold NUL bytes; may be NULL when n is 0).
 * Returns 0, -EMSGSIZE when len + n would pass the cap, or -ENOMEM. */
JB_MUST_USE int jb_buf_append(struct jb_buf *b, const void *p, size_t n);

/* Appends the printf-style text (without its NUL). Returns 0, -EMSGSIZE, -ENOMEM, or -EINVAL
 * for a format vsnprintf refuses. */
JB_MUST_USE int jb_buf_appendf(struct jb_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
JB_MUST_USE int jb_buf_vappendf(struct jb_buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* Hands the contents over to the caller: a new allocation of *len + 1 bytes (NUL-terminated;
 * `len` may be NULL), to be released with free(). The buffer is empty after, with nothing
 * allocated. Returns NULL only when the buffer was empty and the 1-byte string for it could
 * not be allocated. */
JB_MUST_USE char *jb_buf_take(struct jb_buf *b, size_t *len);

/* Room for a writer that fills the buffer in place (read(2) into it): makes sure at least `n`
 * bytes are allocated past the contents and returns where they start in *tail. Write up to
 * jb_buf_space() bytes there, then call jb_buf_added. Returns 0, -EMSGSIZE when len + n would
 * pass the cap, or -ENOMEM. */
JB_MUST_USE int jb_buf_reserve(struct jb_buf *b, size_t n, char **tail);

/* Bytes allocated past the contents, at most up to the cap (what a writer may fill after
 * jb_buf_reserve). */
size_t jb_buf_space(const struct jb_buf *b);

/* Counts `n` bytes written at the tail jb_buf_reserve returned (n ≤ jb_buf_space) as contents
 * and NUL-terminates them. */
void jb_buf_added(struct jb_buf *b, size_t n);

/* Removes the first `n` bytes (n ≤ len), moving the rest to the front. */
void jb_buf_drop_front(struct jb_buf *b, size_t n);

#endif
