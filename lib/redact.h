/* redact.h — the redactor of a command's output: one stream's bytes, fed in the chunks they
 * arrive in, come out with every match of the rule set's `secret` and `redact` rules
 * (lib/scan.h, deploy/scan-rules) replaced by the marker "[REDACTED:<rule id>]".
 *
 * Chunks: a secret may arrive in two chunks (or more). The redactor holds back the bytes from
 * where a match might still begin: each rule is matched with PCRE2_PARTIAL_HARD, and a
 * partial match at the end of what has arrived keeps its bytes (and everything after them)
 * until the next chunk completes or refutes it (multi-segment matching, pcre2partial(3)).
 * Bytes no rule could be the start of are released at once, so a live view is delayed only
 * by output that looks like the beginning of a secret. The last JB_REDACT_CONTEXT bytes
 * released stay as look-behind context of the next match.
 *
 * Limit: at most JB_REDACT_HOLD_MAX bytes are held. When a partial match grows past that, the
 * held bytes are released with the matches that are complete in them redacted; a secret
 * still open there is cut: its first part is redacted if a rule matches it whole, its rest
 * goes out as it is. No rule of deploy/scan-rules reaches that far (a PEM block of an
 * 8192-bit RSA key is ~6.5 KB). The squeezed second look of the write scanner (NUL bytes
 * removed) is not made here.
 *
 * A match stopped by PCRE2's match, depth or heap limit, or failing otherwise, fails closed:
 * every byte held is replaced by the rule's marker and the redaction is recorded with
 * `failed`. */
#ifndef JB_REDACT_H
#define JB_REDACT_H

#include <stdbool.h>
#include <stddef.h>

#include "lib/buf.h"
#include "lib/compiler.h"
#include "lib/err.h"
#include "lib/scan.h"

#define JB_REDACT_HOLD_MAX (64 * 1024) /* bytes held back at most (see the top of this file) */
#define JB_REDACT_CONTEXT 255 /* bytes of released output kept for look-behinds, at most */
#define JB_REDACT_RECORDS_MAX 100 /* redactions recorded per stream; more are only counted */

/* One redaction: the rule (its id, borrowed from the rule set) and where the secret began,
 * as a byte offset into the stream as the command wrote it (before any earlier marker). */
struct jb_redaction {
  const char *rule;
  unsigned long long offset; /* bytes */
  bool failed; /* the rule's match failed (limit): the held bytes were replaced whole */
};

struct jb_redactor; /* one stream's state; not thread-safe (one stream, one thread) */

/* A redactor for one stream with the rule set `r` (borrowed; must outlive the redactor).
 * Returns 0 with *out (new, free with jb_redactor_free), or -1 with err (ENOMEM). A rule set
 * without `secret` and `redact` rules makes a redactor that passes everything at once. */
int jb_redactor_new(const struct jb_scan_rules *r, struct jb_redactor **out, jb_error *err);

void jb_redactor_free(struct jb_redactor *rd);

/* Feeds `len` bytes of the stream (the next ones, in order; NULL when len is 0) and appends
 * to `out` the output that is safe to show: redacted, without the bytes held back. With
 * `final` (the stream has ended) nothing is held: everything left is released, redacted.
 * Returns 0, or -1 with err: ENOMEM (what was held stays held; feed again or free), or
 * EMSGSIZE when `out` reached its cap (the part that fit is in `out`; the rest is dropped
 * — the caller's output is full). */
JB_MUST_USE int jb_redactor_feed(struct jb_redactor *rd, const unsigned char *data, size_t len,
                                 bool final, struct jb_buf *out, jb_error *err);

/* Redactions made so far: their number (all of them), and the first JB_REDACT_RECORDS_MAX
 * of them in stream order in *records (borrowed, valid until the next feed or the free);
 * returns how many *records holds. */
size_t jb_redactor_count(const struct jb_redactor *rd);
size_t jb_redactor_records(const struct jb_redactor *rd, const struct jb_redaction **records);

/* Bytes held back now (released by a later feed). */
size_t jb_redactor_held(const struct jb_redactor *rd);

#endif
