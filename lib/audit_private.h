/* audit_private.h — what the three files of the audit primitives share and no other file
 * of the tree includes: lib/audit.c (canonical bytes, hash, signature, encodings),
 * lib/audit_export.c (the export line) and lib/audit_verify.c (the verifier).
 * tests/unit/lib/test_audit.c includes it to test the exact-form reader on its own. */
#ifndef JB_AUDIT_PRIVATE_H
#define JB_AUDIT_PRIVATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/audit.h"

/* Nesting of arrays and objects (counted as jb_json_depth counts them) above which an export
 * line, the canonical bytes or the keys document is refused before jansson parses it: the
 * depth jansson's own parser stops at, so that the check refuses nothing jansson would read
 * (a line with details deeper than JB_AUDIT_MAX_DEPTH is still read, and its verdict is
 * the one the checks after the parse give). */
#define JB_AUDIT_PARSE_MAX_DEPTH JSON_PARSER_MAX_DEPTH

/* json_loadb(buf, len, JSON_REJECT_DUPLICATES | flags) after jb_json_depth has checked on
 * the raw bytes that they nest at most JB_AUDIT_PARSE_MAX_DEPTH deep; deeper bytes are
 * refused before anything is allocated, with jansson's own message for them in je->text.
 * New reference, or NULL with `je` filled. */
json_t *jb_audit_json_load(const char *buf, size_t len, size_t flags, json_error_t *je);

/* true when the NUL-terminated `t` is YYYY-MM-DDTHH:MM:SS.mmmZ with plausible field ranges. */
bool jb_audit_timestamp_ok(const char *t);

/* Decodes the `slen` hex characters (either case) at `s` into exactly `n` bytes at `out`
 * (libsodium sodium_hex2bin, nothing ignored). 0, or -1 when they are not 2n hex digits. */
int jb_audit_unhex(const char *s, size_t slen, unsigned char *out, size_t n);

/* Decodes the `slen` characters at `s` as padded standard base64 (RFC 4648 §4) of at most
 * `max` bytes into `out`; *n receives the length (libsodium sodium_base642bin: padding
 * required, nothing ignored, the bits a padded group leaves over must be zero). Every
 * character must be of the alphabet or '=': libsodium 1.0.18's decoder itself takes each
 * byte 0x80..0xff for some digit. 0, or -1. */
int jb_audit_unbase64(const char *s, size_t slen, unsigned char *out, size_t max, size_t *n);

/* New NUL-terminated padded standard base64 of the `n` bytes at `in` (libsodium
 * sodium_bin2base64), NULL on OOM. */
char *jb_audit_base64(const unsigned char *in, size_t n);

/* Zeroes `e` and marks it malformed because of `why` (kept in e->error, cut to fit). */
void jb_audit_entry_malformed(struct jb_audit_entry *e, const char *why);

/* Reads `line` (`len` bytes without its newline; writable) when it is in exactly the form
 * jb_audit_entry_line writes and its canonical bytes are, byte for byte, the canonical
 * object made of the very tokens the line states (the why and the how: lib/audit_export.c).
 * `canon` (JB_AUDIT_MAX_CANONICAL + 1 bytes) receives the canonical bytes.
 * Returns true with `e` filled exactly as jb_audit_entry_parse_line fills it, except that
 * e->session, operation, path and timestamp then point into `line` (their closing quotes
 * overwritten with NUL) and e->canonical to `canon`: release only e->details (json_decref),
 * never jb_audit_entry_clear. The stated seq, session, operation, path, timestamp and
 * details are then the canonical ones. Returns false with `line` untouched and nothing to
 * release for any other line, which jb_audit_entry_parse_line then reads. */
bool jb_audit_line_read_exact(char *line, size_t len, unsigned char *canon,
                              struct jb_audit_entry *e);

#endif
