/* audit.h — the audit chain's pure part: the canonical bytes of an entry, its hash, its
 * signature (lib/audit.c), the export line, JSON Lines (lib/audit_export.c) and the verifier
 * (lib/audit_verify.c). No database, no files: storage is db/audit_store.h, the signing key
 * is lib/keyring.h. The byte-level contract is api/audit.md.
 *
 * An entry's signed unit is (canonical, prevHash, hash, signature, keyId):
 *   hash      = SHA-256(canonical ‖ prevHash)            FIPS 180-4, libsodium crypto_hash_sha256
 *   signature = Ed25519(secret key, message = hash)        RFC 8032 (pure Ed25519), libsodium
 *   prevHash  = hash of the entry before; 32 zero bytes for seq 1
 *   keyId     = lowercase hex of the first 8 bytes of SHA-256(public key)
 * Verification works on the canonical bytes exactly as stored and never re-serializes them. */
#ifndef JB_AUDIT_H
#define JB_AUDIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "lib/compiler.h"
#include "lib/err.h"

#define JB_AUDIT_HASH_LEN 32 /* bytes, SHA-256 */
#define JB_AUDIT_SIG_LEN 64 /* bytes, Ed25519 signature */
#define JB_AUDIT_PK_LEN 32 /* bytes, Ed25519 public key */
#define JB_AUDIT_SK_LEN 64 /* bytes, libsodium Ed25519 secret key (seed ‖ pk) */
#define JB_AUDIT_KEY_ID_LEN 16 /* hex characters */
#define JB_AUDIT_TS_LEN 24 /* "YYYY-MM-DDTHH:MM:SS.mmmZ" */
#define JB_AUDIT_MAX_CANONICAL 65536 /* bytes: a longer entry is refused */
#define JB_AUDIT_MAX_LINE (4 * JB_AUDIT_MAX_CANONICAL) /* bytes of one export line */
#define JB_AUDIT_MAX_DEPTH 8 /* nesting of arrays/objects inside details */
#define JB_AUDIT_MAX_SESSION 128 /* bytes of a session id (sessions.job_id) */
#define JB_AUDIT_MAX_OPERATION 32 /* bytes of an operation name */
#define JB_AUDIT_MAX_PATH 4096 /* bytes of a path */

/* A chain head: the last entry's seq and hash (signature and keyId when known). seq 0 = an
 * empty chain (hash all zero). */
struct jb_audit_head {
  long long seq;
  unsigned char hash[JB_AUDIT_HASH_LEN];
  unsigned char signature[JB_AUDIT_SIG_LEN];
  char key_id[JB_AUDIT_KEY_ID_LEN + 1];
};

/* One entry as an export line (or a database row) states it. The first group is what a
 * reader sees; the second is the signed unit. Every pointer is owned by the entry (release
 * with jb_audit_entry_clear). */
struct jb_audit_entry {
  long long seq;
  char *session;
  char *operation;
  char *path; /* NULL: the entry has no path (JSON null) */
  char *timestamp; /* ISO 8601 UTC with ms, "2026-01-02T03:04:05.678Z" */
  json_t *details; /* an object */

  unsigned char *canonical; /* canonical_len bytes, NUL-terminated for convenience */
  size_t canonical_len;
  unsigned char prev_hash[JB_AUDIT_HASH_LEN];
  unsigned char hash[JB_AUDIT_HASH_LEN];
  unsigned char signature[JB_AUDIT_SIG_LEN];
  char key_id[JB_AUDIT_KEY_ID_LEN + 1];

  bool malformed; /* the line could not be read; `error` says why */
  char error[160];
};

/* A published verification key. It is valid for entries whose canonical timestamp is
 * before retired_at; "" = not retired (zero the struct before filling it). */
struct jb_audit_pubkey {
  char key_id[JB_AUDIT_KEY_ID_LEN + 1];
  unsigned char public_key[JB_AUDIT_PK_LEN];
  char retired_at[JB_AUDIT_TS_LEN + 1]; /* YYYY-MM-DDTHH:MM:SS.mmmZ, or "" */
};

/* Why a chain failed verification. The names (jb_audit_reason_name) are part of the API. */
enum jb_audit_reason {
  JB_AUDIT_OK = 0,
  JB_AUDIT_MALFORMED, /* "malformed": a line or its canonical bytes cannot be read */
  JB_AUDIT_CONTENT_CHANGED, /* "content changed": hash ≠ SHA-256(canonical ‖ prevHash), or a
                                stated field differs from the signed canonical bytes */
  JB_AUDIT_BAD_SIGNATURE, /* "bad signature": the signature does not verify with the key */
  JB_AUDIT_UNKNOWN_KEY, /* "unknown key": keyId is not among the published keys */
  JB_AUDIT_BROKEN_LINK, /* "broken link": prevHash ≠ the hash of the entry before */
  JB_AUDIT_GAP, /* "gap": one or more seq are missing */
  JB_AUDIT_REORDERED, /* "reordered": an entry stands at another entry's place */
  JB_AUDIT_TRUNCATED, /* "truncated": shorter than a given or the stored head */
  JB_AUDIT_UNSEALED, /* "unsealed": an ended session's chain lacks its seal */
  JB_AUDIT_HEAD_MISMATCH, /* "head mismatch": the entry at a head's seq has another hash,
                                or the chain runs past the session's stored head */
  JB_AUDIT_AFTER_SEAL, /* "entry after seal" */
  JB_AUDIT_WRONG_SESSION, /* "wrong session": an entry of another session */
  JB_AUDIT_RETIRED_KEY, /* "retired key": signed (canonical timestamp) at or after its
                                key's retiredAt */
};

/* Copies at most `max` bytes of the NUL-terminated `src` into `dst` (`cap` bytes, always
 * NUL-terminated) as printable ASCII: bytes 0x20..0x7e stay, every other byte (control
 * characters such as ESC and CR, DEL, each byte of a non-ASCII character) becomes "\xNN".
 * For putting text that came from an untrusted file (a member name, a session id) into a
 * result's detail or onto a terminal: it cannot carry terminal escape sequences (ECMA-48) and
 * is always valid UTF-8, however it is cut. */
void jb_audit_quote(char *dst, size_t cap, const char *src, size_t max);

/* The static name of `r` ("content changed", …; "ok" for JB_AUDIT_OK). */
const char *jb_audit_reason_name(enum jb_audit_reason r);

/* What the verifier is told besides the entries. Every member is optional. */
struct jb_audit_verify_opts {
  const char *session; /* the session the chain must belong to; NULL: the
                                             first entry's */
  const struct jb_audit_head *known_head; /* a head seen earlier (e.g. kept by a buyer from
                                             jailbox:audit_head): the chain must reach its seq
                                             with the same hash */
  const struct jb_audit_head *stored_head; /* the session row's head: the chain must end
                                             exactly there */
  bool require_seal; /* the session has ended: the last entry must be
                                             its seal */
  bool full_parse; /* jb_audit_verify_file: read every line by the
                                             full parse, never the exact-form reader (the
                                             verdict is the same; for tests that compare
                                             the two) */
};

struct jb_audit_result {
  bool ok;
  long long entries; /* how many entries were given */
  struct jb_audit_head head; /* last entry verified intact (seq 0: none) */
  bool sealed; /* a valid seal entry was seen */
  long long first_bad_seq; /* the seq at which the chain stops being intact; 0 when ok */
  enum jb_audit_reason reason;
  char session[JB_AUDIT_MAX_SESSION + 1];
  char detail[256]; /* a sentence for a person; "" when ok */
};

/* --- the canonical byte form (api/audit.md) ------------------------------------------------ */

/* Returns the canonical bytes of an entry: a JSON object with exactly the members details,
 * operation, path, seq, session, timestamp, keys sorted bytewise at every level, no
 * whitespace, UTF-8 (jansson JSON_COMPACT | JSON_SORT_KEYS). `path` may be NULL (JSON null);
 * `details` NULL means {}. Refused (NULL, `err` set): seq < 1; session outside 1..128 bytes;
 * operation not [a-z_]{1,32}; path over 4096 bytes; timestamp not YYYY-MM-DDTHH:MM:SS.mmmZ;
 * details not an object, holding a real number, a string or key with NUL, or nested deeper
 * than JB_AUDIT_MAX_DEPTH; a result over JB_AUDIT_MAX_CANONICAL bytes.
 * *len receives the length in bytes. The result is new (free it) and NUL-terminated. */
char *jb_audit_canonical(long long seq, const char *session, const char *operation,
                         const char *path, const char *timestamp, const json_t *details,
                         size_t *len, jb_error *err);

/* Returns the details that the canonical bytes `canonical` (`len` bytes) state: the object
 * after their leading `{"details":`, parsed as far as it goes (JSON_REJECT_DUPLICATES). When
 * they hold none, an empty object: such bytes are no entry's canonical form, which
 * verification reports by the hash or by the fields. New reference; NULL only on OOM. */
json_t *jb_audit_canonical_details(const unsigned char *canonical, size_t len);

/* Checks the details object alone by the rules of jb_audit_canonical. 0 or -1 with `err`. */
int jb_audit_details_check(const json_t *details, jb_error *err);

/* out = SHA-256(canonical ‖ prev) (FIPS 180-4). */
void jb_audit_hash(const unsigned char *canonical, size_t len,
                   const unsigned char prev[JB_AUDIT_HASH_LEN],
                   unsigned char out[JB_AUDIT_HASH_LEN]);

/* Writes the key id of `pk` (16 lowercase hex characters and a NUL) into `out`. */
void jb_audit_key_id(const unsigned char pk[JB_AUDIT_PK_LEN], char out[JB_AUDIT_KEY_ID_LEN + 1]);

/* Fills a complete entry `e` (zeroed first; release with jb_audit_entry_clear): canonical
 * bytes from the fields, prevHash = `prev` (NULL: 32 zero bytes), hash, and the Ed25519
 * signature of the hash with `sk` (libsodium secret key, 64 bytes; RFC 8032), keyId of `pk`.
 * `details` is borrowed (a copy is kept). Returns 0, or -1 with `err` set. */
int jb_audit_entry_make(struct jb_audit_entry *e, long long seq, const char *session,
                        const char *operation, const char *path, const char *timestamp,
                        const json_t *details, const unsigned char prev[JB_AUDIT_HASH_LEN],
                        const unsigned char sk[JB_AUDIT_SK_LEN],
                        const unsigned char pk[JB_AUDIT_PK_LEN], jb_error *err);

/* The signed part of an entry, made by jb_audit_entry_sign. */
struct jb_audit_signed {
  unsigned char *canonical; /* canonical_len bytes and a NUL; owned (free) */
  size_t canonical_len;
  unsigned char hash[JB_AUDIT_HASH_LEN];
  unsigned char signature[JB_AUDIT_SIG_LEN];
};

/* The canonical bytes start with `{"details":` (details is the first key in byte order), then
 * the details object. */
#define JB_AUDIT_DETAILS_OFFSET 11

/* What jb_audit_entry_make computes and an append stores, without the copies of the fields
 * an entry keeps: the canonical bytes (jb_audit_canonical, same refusals), hash on `prev`
 * (NULL: 32 zero bytes) and the Ed25519 signature of the hash with `sk` (RFC 8032).
 * `details` is borrowed. Returns 0 with `out` filled (release out->canonical with free), or
 * -1 with `err` set. */
int jb_audit_entry_sign(struct jb_audit_signed *out, long long seq, const char *session,
                        const char *operation, const char *path, const char *timestamp,
                        const json_t *details, const unsigned char prev[JB_AUDIT_HASH_LEN],
                        const unsigned char sk[JB_AUDIT_SK_LEN], jb_error *err);

/* Releases what `e` owns and zeroes it. NULL is allowed. */
void jb_audit_entry_clear(struct jb_audit_entry *e);

/* Frees an array of `n` entries and their contents. */
void jb_audit_entries_free(struct jb_audit_entry *v, size_t n);

/* --- the export line (JSON Lines) ------------------------------------------------------------ */

/* Returns the export line of `e`: one compact JSON object with seq, session, operation,
 * path, timestamp, details (its members in ascending byte order of their keys at every
 * depth, as in the canonical bytes), prevHash, hash (lowercase hex), signature (base64,
 * RFC 4648 §4, padded), keyId, canonical (base64 of the verbatim canonical bytes), in this
 * order, followed by "\n".
 * New string (free it), NULL on OOM. */
JB_MUST_USE char *jb_audit_entry_line(const struct jb_audit_entry *e);

/* Reads one export line (`len` bytes, no newline needed) into `e` (zeroed first), parsed by
 * jansson. Parsing is strict: at most JB_AUDIT_MAX_LINE bytes and no deeper nesting than
 * jansson parses (both refused before parsing), duplicate keys refused, exactly the eleven
 * members, each with its type, hex (libsodium) and padded base64 (libsodium, RFC 4648 §4)
 * of the right lengths, canonical bytes of at most JB_AUDIT_MAX_CANONICAL. Returns 0; or -1
 * with `err` set, and then `e` is still usable: malformed = true, the message in e->error,
 * seq taken when readable. */
int jb_audit_entry_parse_line(struct jb_audit_entry *e, const char *line, size_t len,
                              jb_error *err);

/* What one line of an export holds (jb_audit_line_read). */
enum jb_audit_line {
  JB_AUDIT_LINE_MALFORMED = -1, /* an entry that cannot be read: `e` is a malformed entry */
  JB_AUDIT_LINE_ENTRY = 0, /* an entry, read into `e` */
  JB_AUDIT_LINE_BLANK = 1, /* only spaces and tabs (or nothing): no entry; skip it */
};

/* The one reader of the export format (api/audit.md "Export line"): every program that reads
 * an exported chain reads each line with this. `line` is `len` bytes with or without its
 * "\n". A line of more than JB_AUDIT_MAX_LINE bytes before its "\n" (a "\r" counted) is
 * malformed, unread ("line longer than the limit"); a "\r" before the end is then dropped; a
 * line of only spaces and tabs is blank (`e` zeroed, nothing to release); any other is read
 * by jb_audit_entry_parse_line. Returns JB_AUDIT_LINE_ENTRY (release `e` with
 * jb_audit_entry_clear), JB_AUDIT_LINE_BLANK, or JB_AUDIT_LINE_MALFORMED with `err` set and
 * `e` a malformed entry (seq when readable; release it as well). */
enum jb_audit_line jb_audit_line_read(struct jb_audit_entry *e, const char *line, size_t len,
                                      jb_error *err);

/* Whether jb_audit_line_read would call `line` (`len` bytes) blank, without reading it: for
 * a reader that only counts the lines after a verdict. */
bool jb_audit_line_blank(const char *line, size_t len);

/* Splits `len` bytes of JSON Lines into entries (blank lines skipped; a line that cannot be
 * read becomes a malformed entry, so the verifier reports its position). On success *out is
 * a new array of *n entries (jb_audit_entries_free). Returns 0, or -1 with `err` on OOM or
 * more than `max_entries` lines. */
int jb_audit_parse_lines(const char *buf, size_t len, size_t max_entries,
                         struct jb_audit_entry **out, size_t *n, jb_error *err);

/* --- keys ----------------------------------------------------------------------------------- */

/* Reads the body of GET /v1/audit/keys ({"keys":[{"keyId","algorithm":"ed25519",
 * "publicKey":base64,…}]}), at most 1 MiB, duplicate keys refused. A key whose keyId is not
 * the id of its public key is refused, and so is a key listed twice. On success *out is a new array of *n keys (free it).
 * Returns 0 or -1 with `err` set. */
int jb_audit_keys_parse(const char *buf, size_t len, struct jb_audit_pubkey **out, size_t *n,
                        jb_error *err);

/* --- verification ---------------------------------------------------------------------------- */

/* A verifier fed one entry at a time, so that a chain of any length is verified in bounded
 * memory (a streamed export, rows fetched in pages). Fields are private. Rules: see
 * jb_audit_verify. `keys` and the pointers in `opts` are borrowed until finish. */
struct jb_audit_verifier {
  const struct jb_audit_pubkey *keys;
  size_t nkeys;
  struct jb_audit_verify_opts opts;
  struct jb_audit_result r;
  unsigned char prev[JB_AUDIT_HASH_LEN]; /* hash of the last intact entry */
  unsigned char known_hash[JB_AUDIT_HASH_LEN]; /* hash seen at opts.known_head->seq */
  long long pos; /* entries added */
  long long seal_seq;
  long long pending_seq; /* a seq found where r.first_bad_seq was due: gap or reordered */
  bool failed;
};

/* Starts verifying one session's chain against the published `keys` (`nkeys`). */
void jb_audit_verifier_init(struct jb_audit_verifier *v, const struct jb_audit_pubkey *keys,
                            size_t nkeys, const struct jb_audit_verify_opts *opts);

/* Adds the next entry (borrowed; it may be released as soon as this returns). Returns 0 when
 * the verifier wants the next entry read; 1 when the verdict on the entries is settled — the
 * caller may then stop reading, or pass NULL for each further entry only to count it
 * (res->entries). After a seq found ahead of its place the verifier keeps asking for entries
 * (0) to tell a gap from an entry moved later. */
int jb_audit_verifier_add(struct jb_audit_verifier *v, const struct jb_audit_entry *e);

/* Ends the input: checks the heads of `opts` and the seal requirement, fills `res`
 * completely. Returns 0 when the chain is intact, 1 when it is not. */
int jb_audit_verifier_finish(struct jb_audit_verifier *v, struct jb_audit_result *res);

/* Verifies `n` entries, in the order given, as one session's chain, against the published
 * `keys` (`nkeys`). Per entry, in this order: readable; hash = SHA-256(canonical ‖ prevHash);
 * keyId known; Ed25519 signature of hash (RFC 8032); the canonical timestamp before the
 * key's retiredAt (else "retired key"); canonical seq = position (else gap or reordered);
 * session; prevHash = previous hash; every stated field equals the canonical one (details
 * compared as JSON values, so member order does not matter); a seal's details match. Then
 * the heads of `opts` and the seal requirement. Stops at the first failure. Fills `res`
 * completely. Returns 0 when the chain is intact, 1 when it is not, -1 when libsodium cannot
 * initialise (res->detail says so). */
int jb_audit_verify(const struct jb_audit_entry *entries, size_t n,
                    const struct jb_audit_pubkey *keys, size_t nkeys,
                    const struct jb_audit_verify_opts *opts, struct jb_audit_result *res);

/* Verifies the JSON Lines export read from `in` (to its end) as jb_audit_verify does, one
 * line at a time: memory stays bounded by one line (JB_AUDIT_MAX_LINE bytes), one 64 KiB
 * read buffer, one canonical buffer (JB_AUDIT_MAX_CANONICAL bytes) and one entry, whatever
 * the length of the chain. A line in exactly the exporter's form is read without parsing
 * all of it (api/audit.md, "Verification"; lib/audit_export.c says how), which reaches the
 * same verdict as the full parse (jb_audit_entry_parse_line); opts->full_parse turns it off.
 * Blank lines are skipped; a line that cannot be read, or longer than JB_AUDIT_MAX_LINE, is a
 * malformed entry at its position. Once the verdict is settled the remaining lines are only
 * counted (res->entries). Returns 0 intact, 1 not intact, -1 with `err` on a read error or
 * OOM. */
int jb_audit_verify_file(FILE *in, const struct jb_audit_pubkey *keys, size_t nkeys,
                         const struct jb_audit_verify_opts *opts, struct jb_audit_result *res,
                         jb_error *err);

/* The verification result as {ok, entries, head:{seq,hash}|null, firstBadSeq|null,
 * reason|null, detail|null, sealed, session}. New reference, NULL on OOM. */
JB_MUST_USE json_t *jb_audit_result_json(const struct jb_audit_result *res);

/* A chain head as the jailbox:audit_head payload {seq, hash, signature, keyId}; signature and
 * keyId are left out when key_id is "". New reference, NULL on OOM. */
JB_MUST_USE json_t *jb_audit_head_json(const struct jb_audit_head *h);

/* Parses "SEQ:HASH" (decimal seq ≥ 1, 64 hex characters) into `h`. 0 or -1 with `err`. */
int jb_audit_head_parse(const char *s, struct jb_audit_head *h, jb_error *err);

/* Lowercase hex of `n` bytes into `out` (2n+1 bytes). */
void jb_audit_hex(const unsigned char *in, size_t n, char *out);

#endif
