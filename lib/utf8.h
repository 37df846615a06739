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

/* The length in bytes (2 or 3) of the character at `p` (`n` bytes readable) when it is one
 * that plain text shown on a terminal or a status line must not carry as it is, else 0:
 * - U+0080..U+009F, the C1 controls (U+009B is CSI, a terminal's control sequence);
 * - U+200B..U+200F: zero width space, zero width non-joiner and joiner, left-to-right and
 *   right-to-left marks;
 * - U+2028..U+202E: line and paragraph separators, the bidi embeddings (LRE, RLE), pop
 *   (PDF) and overrides (LRO, RLO);
 * - U+2066..U+2069: the bidi isolates (LRI, RLI, FSI, PDI);
 * - U+FEFF, the byte order mark (zero width no-break space).
 * They hide or reorder what a reader sees (sources: Unicode UAX #9, the bidirectional
 * algorithm, §2 "Explicit directional formatting characters"; the format characters, general
 * category Cf, of the Unicode Character Database). `p` is expected to be valid UTF-8; fewer
 * than the character's bytes in `n` answer 0. The caller replaces the character. */
size_t jb_utf8_hidden_mark(const unsigned char *p, size_t n);

#endif
