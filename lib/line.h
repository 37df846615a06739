/* line.h — the one reader and writer of newline-delimited messages (one JSON object per line,
 * '\n'-terminated: the shim protocol, sandbox/proto/PROTOCOL.md; the direct protocol,
 * sandbox/proto/direct.h; the worker's control socket; MCP's stdio transport).
 *
 * The reader is a codec fed bytes (jb_line_feed) or filled from a descriptor (jb_line_read),
 * from which complete lines are pulled (jb_line_next) without their '\n'. It never holds more
 * than max_line + 1 bytes: a line longer than max_line bytes is found out before more of it is
 * buffered, and then, as the reader was set up, ends the reader or is dropped up to the next
 * newline. Nothing in it touches a descriptor except jb_line_read, so it is tested and fuzzed
 * on plain bytes.
 *
 * Typical use on a descriptor (blocking, or non-blocking after poll(2)):
 *
 *     struct jb_line_reader r;
 *     jb_line_init(&r, &(struct jb_line_opts){.max_line = MAX, .over = JB_LINE_FAIL});
 *     for (;;) {
 *       char *line; size_t n;
 *       int rc = jb_line_next(&r, &line, &n);
 *       if (rc == JB_LINE_AGAIN) {
 *         if (jb_line_read(&r, fd, &err) > 0) continue;
 *         ... err.code EAGAIN: wait for the descriptor; 0: the input ended (next gives END)
 *       }
 *       ...
 *     }
 *     jb_line_free(&r);
 */
#ifndef JB_LINE_H
#define JB_LINE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "lib/buf.h"
#include "lib/compiler.h"
#include "lib/err.h"

/* What a line longer than max_line does. */
enum jb_line_over {
  JB_LINE_FAIL, /* the reader ends: JB_LINE_TOO_LONG from then on, every later byte dropped */
  JB_LINE_SKIP, /* JB_LINE_TOO_LONG once, as soon as the line passes the cap; the rest of the
                       * line, up to and with its '\n', is dropped; the lines after it follow */
  JB_LINE_SKIP_WHOLE, /* the line is dropped up to and with its '\n', and JB_LINE_TOO_LONG is
                       * given once then, in its place among the lines */
};

struct jb_line_opts {
  size_t max_line; /* bytes of one line, not counting its '\n' (≥ 1) */
  enum jb_line_over over; /* what a longer line does */
  bool skip_empty; /* empty lines are not returned */
  bool last_unterminated; /* at the end of the input, bytes after the last '\n' form a line */
};

/* Results of jb_line_next and jb_line_next_object. */
enum jb_line_rc {
  JB_LINE_OK = 1, /* a line */
  JB_LINE_AGAIN = 0, /* no complete line held: feed or read more */
  JB_LINE_END = -1, /* the input ended (jb_line_end, or a read of 0 bytes) and every line
                          * was returned; a part-line without '\n' is dropped unless
                          * last_unterminated */
  JB_LINE_TOO_LONG = -2, /* a line over max_line bytes (see enum jb_line_over) */
  JB_LINE_NOMEM = -3, /* no memory to hold a line: the reader has ended (as JB_LINE_FAIL) */
  JB_LINE_BAD_JSON = -4, /* jb_line_next_object: the line is not one acceptable JSON object; the
                          * reader goes on with the next line */
};

struct jb_line_reader {
  struct jb_buf buf; /* held bytes: [off, buf.len) not yet returned */
  struct jb_line_opts o;
  size_t off; /* start of the bytes not yet returned */
  size_t scanned; /* bytes from off known to hold no '\n' */
  size_t last_off, last_len; /* the line last returned (for jb_line_take) */
  bool has_last; /* … and it is still in place */
  int failed; /* 0, or the result every call gives once the reader has ended */
  bool skipping; /* inside a line over the cap, dropping up to its '\n' */
  bool report; /* a JB_LINE_TOO_LONG is due */
  bool ended; /* no more input will come */
};

/* A reader with options `o` (copied). Allocates nothing until bytes arrive. */
void jb_line_init(struct jb_line_reader *r, const struct jb_line_opts *o);

/* Frees what the reader holds. It may be used again after jb_line_init. */
void jb_line_free(struct jb_line_reader *r);

/* Offers `n` bytes of input at `p`. The reader consumes them up to and with the first '\n'
 * (then a line, or a report, waits for jb_line_next), or until it holds max_line + 1 bytes,
 * or all of them; bytes of a line being dropped are consumed without being held. Returns how
 * many bytes it consumed: offer the rest after jb_line_next. When the reader has ended, every
 * byte is consumed and dropped. Out of memory, it consumes nothing and ends the reader
 * (jb_line_next: JB_LINE_NOMEM). */
size_t jb_line_feed(struct jb_line_reader *r, const void *p, size_t n);

/* Marks the end of the input: the lines held are still returned, then JB_LINE_END. */
void jb_line_end(struct jb_line_reader *r);

/* One read(2) from `fd` into the reader (EINTR is retried): at most what fits before the
 * reader holds max_line + 1 bytes, and at most what its storage has room for after growing
 * it to 64 KiB in all (held bytes included; storage already larger, after a longer line, is
 * used as it is). Returns the bytes read (> 0); 0 at the end of the input (the reader
 * then ends as jb_line_end); -1 with `err` (code EAGAIN/EWOULDBLOCK: nothing to read now, no
 * complete line yet; ENOBUFS: the reader is full, call jb_line_next first; ENOMEM; any errno
 * of read). Call it only after jb_line_next returned JB_LINE_AGAIN. */
ssize_t jb_line_read(struct jb_line_reader *r, int fd, jb_error *err);

/* The next complete line: *line points at its bytes inside the reader (NUL-terminated, the
 * '\n' not included; the line may itself contain NUL bytes), *len is its length. The pointer
 * is borrowed and valid until the next call on the reader. Returns a enum jb_line_rc. */
int jb_line_next(struct jb_line_reader *r, char **line, size_t *len);

/* jb_line_next, then the line parsed as one JSON object (lib/json.h jb_json_parse_object:
 * duplicate keys and nesting deeper than `max_depth` refused). JB_LINE_OK with *obj (new
 * reference); JB_LINE_BAD_JSON with `err` saying why (the line is consumed); or another
 * result of jb_line_next. Empty lines go to the parser too unless skip_empty. */
int jb_line_next_object(struct jb_line_reader *r, size_t max_depth, json_t **obj, jb_error *err);

/* Bytes held after the line last returned (input that came with it). */
size_t jb_line_held(const struct jb_line_reader *r);

/* The line jb_line_next returned last, moved out of the reader: a new allocation of *len + 1
 * bytes, NUL-terminated, to be released with free(). When the reader holds nothing else, its
 * storage is handed over without a copy. Call it right after jb_line_next returned
 * JB_LINE_OK; NULL when out of memory. */
JB_MUST_USE char *jb_line_take(struct jb_line_reader *r, size_t *len);

/* The writer. `obj` encoded compactly (JSON_COMPACT: control characters are escaped, so the
 * text holds no newline) with a '\n' after it: a new string of *len bytes (newline included)
 * plus a NUL, to be released with free(). NULL with `err`: EMSGSIZE when the text is over
 * `max_line` bytes (0: no limit), ENOMEM. */
JB_MUST_USE char *jb_line_encode(const json_t *obj, size_t max_line, size_t *len, jb_error *err);

/* Writes all `n` bytes with write(2), going on after short writes and EINTR; on EAGAIN it
 * waits with poll(2) until `fd` takes more, at most `timeout_ms` in all (-1: no limit). 0, or
 * -1 with `err` (ETIMEDOUT, or the errno of write: EPIPE when the reader is gone — the
 * program ignores SIGPIPE). */
JB_MUST_USE int jb_line_write_all(int fd, const void *p, size_t n, long timeout_ms, jb_error *err);

/* jb_line_encode then jb_line_write_all: one write(2) where the descriptor takes it all. */
JB_MUST_USE int jb_line_write_json(int fd, const json_t *obj, size_t max_line, long timeout_ms,
                                   jb_error *err);

#endif
