/* utf8.h — bytes made into valid UTF-8 text (RFC 3629) for readers that must get text: a
 * command's output for the agent and the buyer. Each byte that does not start a valid
 * sequence (an overlong form, a surrogate, a code point past U+10FFFF, a stray continuation
 * byte, a sequence cut short) and each NUL becomes U+FFFD and is counted. */
#ifndef JB_UTF8_H
#define JB_UTF8_H

#include <stdbool.h>
#include <stddef.h>

#include "lib/buf.h"
#include "lib/compiler.h"

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when none starts there; -1 when
 * s[0..n) is the valid beginning of a sequence that n cuts short. */
int jb_utf8_seq(const unsigned char *s, size_t n);

/* Appends `n` bytes of `in` to `out` as valid UTF-8 (see the top of this file), adding the
 * replacements to *replaced. Unless `final`, a sequence cut short at the end is not consumed
 * (the caller gives it again with the bytes that follow). Returns the bytes of `in` consumed,
 * or (size_t)-1 when `out` is full or out of memory (what was appended stays). */
JB_MUST_USE size_t jb_utf8_sanitize(const unsigned char *in, size_t n, bool final,
                                    struct jb_buf *out, size_t *replaced);

#endif
