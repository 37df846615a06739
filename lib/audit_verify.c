/* audit_verify.c — verification of an audit chain (api/audit.md "Verification"): the keys
 * document, the verifier fed one entry at a time, jb_audit_verify over entries in memory,
 * jb_audit_verify_file over an export read line by line, and the result as JSON. Lines are
 * read by lib/audit_export.c (jb_audit_line_read); the canonical bytes, hash and signature are lib/audit.c's.
 * Pure: no database; files only as a FILE the caller opened. */
#include "lib/audit.h"

#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/audit_private.h"

static const char *member_str(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k)); /* NULL unless a string */
}

static const char *const reason_names[] = {
    [JB_AUDIT_OK] = "ok",
    [JB_AUDIT_MALFORMED] = "malformed",
    [JB_AUDIT_CONTENT_CHANGED] = "content changed",
    [JB_AUDIT_BAD_SIGNATURE] = "bad signature",
    [JB_AUDIT_UNKNOWN_KEY] = "unknown key",
    [JB_AUDIT_BROKEN_LINK] = "broken link",
    [JB_AUDIT_GAP] = "gap",
    [JB_AUDIT_REORDERED] = "reordered",
    [JB_AUDIT_TRUNCATED] = "truncated",
    [JB_AUDIT_UNSEALED] = "unsealed",
    [JB_AUDIT_HEAD_MISMATCH] = "head mismatch",
    [JB_AUDIT_AFTER_SEAL] = "entry after seal",
    [JB_AUDIT_WRONG_SESSION] = "wrong session",
    [JB_AUDIT_RETIRED_KEY] = "retired key",
};

const char *jb_audit_reason_name(enum jb_audit_reason r) {
  if ((size_t)r >= sizeof reason_names / sizeof reason_names[0]) return "unknown";
  return reason_names[r];
}

/* --- keys ------------------------------------------------------------------------------------ */

int jb_audit_keys_parse(const char *buf, size_t len, struct jb_audit_pubkey **out, size_t *n,
                        jb_error *err) {
  if (len > (1u << 20)) return jb_fail(err, E2BIG, "keys document larger than 1 MiB");
  json_error_t je;
  json_t *o = jb_audit_json_load(buf, len, 0, &je);
  if (!o) return jb_fail(err, EINVAL, "keys document is not JSON: %s", je.text);
  json_t *arr = json_object_get(o, "keys");
  if (!json_is_array(arr)) {
    json_decref(o);
    return jb_fail(err, EINVAL, "keys document has no \"keys\" array");
  }
  size_t cnt = json_array_size(arr);
  struct jb_audit_pubkey *v = calloc(cnt ? cnt : 1, sizeof *v);
  if (!v) {
    json_decref(o);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  size_t i;
  json_t *k;
  json_array_foreach (arr, i, k) {
    const char *kid = member_str(k, "keyId"), *alg = member_str(k, "algorithm"),
               *pk = member_str(k, "publicKey");
    size_t got = 0;
    if (!kid || !alg || !pk || strcmp(alg, "ed25519") != 0 ||
        jb_audit_unbase64(pk, strlen(pk), v[i].public_key, JB_AUDIT_PK_LEN, &got) < 0 ||
        got != JB_AUDIT_PK_LEN) {
      free(v);
      json_decref(o);
      return jb_fail(err, EINVAL,
                     "keys[%zu]: needs keyId, algorithm \"ed25519\" and a base64 "
                     "32-byte publicKey",
                     i);
    }
    json_t *ret = json_object_get(k, "retiredAt");
    if (json_is_string(ret) && jb_audit_timestamp_ok(json_string_value(ret))) {
      memcpy(v[i].retired_at, json_string_value(ret), JB_AUDIT_TS_LEN + 1);
    } else if (ret && !json_is_null(ret)) {
      free(v);
      json_decref(o);
      return jb_fail(err, EINVAL,
                     "keys[%zu]: retiredAt must be null or "
                     "YYYY-MM-DDTHH:MM:SS.mmmZ",
                     i);
    }
    jb_audit_key_id(v[i].public_key, v[i].key_id);
    if (strcmp(kid, v[i].key_id) != 0) {
      jb_fail(err, EINVAL, "keys[%zu]: keyId %.32s is not the id of its public key", i, kid);
      free(v);
      json_decref(o);
      return -1;
    }
    /* one key twice (say once with retiredAt and once without) would make the verdict
     * depend on which copy is looked up first */
    for (size_t j = 0; j < i; j++)
      if (strcmp(v[j].key_id, v[i].key_id) == 0) {
        jb_fail(err, EINVAL, "keys[%zu]: key %s is listed twice (also keys[%zu])", i, v[i].key_id,
                j);
        free(v);
        json_decref(o);
        return -1;
      }
  }
  json_decref(o);
  *out = v;
  *n = cnt;
  return 0;
}

/* --- verification ---------------------------------------------------------------------------- */

/* The six members of a canonical entry, borrowed from the parsed object. */
struct canon {
  json_t *root;
  long long seq;
  const char *session, *operation, *path, *timestamp;
  json_t *details;
};

static int canon_parse(const struct jb_audit_entry *e, struct canon *c) {
  memset(c, 0, sizeof *c);
  if (!e->canonical) return -1;
  json_error_t je;
  c->root = jb_audit_json_load((const char *)e->canonical, e->canonical_len, 0, &je);
  if (!json_is_object(c->root) || json_object_size(c->root) != 6) goto bad;
  json_t *seq = json_object_get(c->root, "seq"), *path = json_object_get(c->root, "path");
  c->session = member_str(c->root, "session");
  c->operation = member_str(c->root, "operation");
  c->timestamp = member_str(c->root, "timestamp");
  c->details = json_object_get(c->root, "details");
  if (!json_is_integer(seq) || !c->session || !c->operation || !c->timestamp || !path ||
      !(json_is_string(path) || json_is_null(path)) || !json_is_object(c->details) ||
      !jb_audit_timestamp_ok(c->timestamp))
    goto bad;
  c->seq = json_integer_value(seq);
  c->path = json_is_string(path) ? json_string_value(path) : NULL;
  return 0;
bad:
  json_decref(c->root);
  c->root = NULL;
  return -1;
}

/* The canonical members of `e` without parsing its canonical bytes when they are exactly the
 * canonical form of its stated fields (the usual case: one serialization and a memcmp instead
 * of a parse and a comparison). Otherwise parses them (canon_parse). c->root is NULL in the
 * first case; then every member is borrowed from `e`. */
static int canon_of(const struct jb_audit_entry *e, struct canon *c) {
  memset(c, 0, sizeof *c);
  if (e->session && e->operation && e->timestamp && e->details) {
    size_t len = 0;
    char *mine = jb_audit_canonical(e->seq, e->session, e->operation, e->path, e->timestamp,
                                    e->details, &len, NULL);
    bool same = mine && len == e->canonical_len && memcmp(mine, e->canonical, len) == 0;
    free(mine);
    if (same) {
      c->seq = e->seq;
      c->session = e->session;
      c->operation = e->operation;
      c->path = e->path;
      c->timestamp = e->timestamp;
      c->details = e->details;
      return 0;
    }
  }
  return canon_parse(e, c);
}

/* The canonical seq of `e`, or -1 when unreadable. */
static long long canon_seq(const struct jb_audit_entry *e) {
  if (e->malformed) return -1;
  struct canon c;
  if (canon_parse(e, &c) < 0) return -1;
  long long s = c.seq;
  json_decref(c.root);
  return s;
}

static bool str_eq(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

static int fail_at(struct jb_audit_result *r, long long seq, enum jb_audit_reason why,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail_at(struct jb_audit_result *r, long long seq, enum jb_audit_reason why,
                   const char *fmt, ...) {
  r->ok = false;
  r->first_bad_seq = seq;
  r->reason = why;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->detail, sizeof r->detail, fmt, ap);
  va_end(ap);
  return 1;
}

static const struct jb_audit_pubkey *find_key(const struct jb_audit_pubkey *keys, size_t n,
                                              const char *id) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(keys[i].key_id, id) == 0) return &keys[i];
  return NULL;
}

/* Checks one entry already known to be authentic and in place against what it states. */
static int check_fields(const struct jb_audit_entry *e, const struct canon *c,
                        struct jb_audit_result *r, long long pos) {
  const char *field = NULL;
  if (!c->root) return 0; /* the canonical bytes were made from the stated fields */
  if (e->seq != c->seq)
    field = "seq";
  else if (!str_eq(e->session, c->session))
    field = "session";
  else if (!str_eq(e->operation, c->operation))
    field = "operation";
  else if (!str_eq(e->path, c->path))
    field = "path";
  else if (!str_eq(e->timestamp, c->timestamp))
    field = "timestamp";
  else if (!e->details || !json_equal(e->details, c->details))
    field = "details";
  if (field)
    return fail_at(r, pos, JB_AUDIT_CONTENT_CHANGED,
                   "stated %s differs from the signed canonical bytes", field);
  return 0;
}

/* A seal's details must be {"entries": seq - 1, "head": hex(prevHash)}. */
static int check_seal(const struct jb_audit_entry *e, const struct canon *c,
                      struct jb_audit_result *r, long long pos) {
  json_t *cnt = json_object_get(c->details, "entries");
  const char *head = member_str(c->details, "head");
  char want[2 * JB_AUDIT_HASH_LEN + 1];
  jb_audit_hex(e->prev_hash, JB_AUDIT_HASH_LEN, want);
  if (!json_is_integer(cnt) || json_integer_value(cnt) != c->seq - 1 || !head ||
      strcmp(head, want) != 0)
    return fail_at(r, pos, JB_AUDIT_CONTENT_CHANGED,
                   "seal does not state the entry count and head it seals");
  return 0;
}

void jb_audit_verifier_init(struct jb_audit_verifier *v, const struct jb_audit_pubkey *keys,
                            size_t nkeys, const struct jb_audit_verify_opts *opts) {
  memset(v, 0, sizeof *v);
  if (sodium_init() < 0) {
    v->failed = true;
    fail_at(&v->r, 1, JB_AUDIT_MALFORMED, "libsodium cannot initialise");
  }
  v->keys = keys;
  v->nkeys = nkeys;
  if (opts) v->opts = *opts;
  if (v->opts.session) snprintf(v->r.session, sizeof v->r.session, "%s", v->opts.session);
}

/* Entry p = v->pos is authentic (canonical members `c`): checks that it stands in its place. */
static int check_place(struct jb_audit_verifier *v, const struct jb_audit_entry *e,
                       const struct canon *c) {
  struct jb_audit_result *r = &v->r;
  long long pos = v->pos;
  if (c->seq < pos)
    return fail_at(r, pos, JB_AUDIT_REORDERED, "entry %lld stands at position %lld", c->seq, pos);
  if (c->seq > pos) {
    /* entry p is either later in the input (reordered) or nowhere (a gap): decided by the
     * entries still to come (jb_audit_verifier_add) or at the end (finish) */
    v->pending_seq = c->seq;
    return fail_at(r, pos, JB_AUDIT_GAP, "entry %lld is missing", pos);
  }
  if (strcmp(c->session, r->session) != 0) {
    char a[4 * 24 + 1], b[4 * 24 + 1];
    jb_audit_quote(a, sizeof a, c->session, 24);
    jb_audit_quote(b, sizeof b, r->session, 24);
    return fail_at(r, pos, JB_AUDIT_WRONG_SESSION, "entry of session %s in a chain of %s", a, b);
  }
  if (sodium_memcmp(e->prev_hash, v->prev, JB_AUDIT_HASH_LEN) != 0)
    return fail_at(r, pos, JB_AUDIT_BROKEN_LINK, "prevHash is not the hash of entry %lld", pos - 1);
  if (check_fields(e, c, r, pos)) return 1;
  if (v->seal_seq)
    return fail_at(r, pos, JB_AUDIT_AFTER_SEAL, "entry after the seal at %lld", v->seal_seq);
  if (strcmp(c->operation, "seal") == 0) return check_seal(e, c, r, pos);
  return 0;
}

/* Verifies entry v->pos (authenticity, then place). `known`: its canonical members when the
 * caller has already established them (the exact-form reader of jb_audit_verify_file), else
 * NULL.
 * 0 intact, 1 failed (v->r says why). */
static int check_entry(struct jb_audit_verifier *v, const struct jb_audit_entry *e,
                       const struct canon *known) {
  struct jb_audit_result *r = &v->r;
  long long pos = v->pos;
  unsigned char calc[JB_AUDIT_HASH_LEN];
  if (e->malformed) return fail_at(r, pos, JB_AUDIT_MALFORMED, "%s", e->error);
  jb_audit_hash(e->canonical, e->canonical_len, e->prev_hash, calc);
  if (sodium_memcmp(calc, e->hash, JB_AUDIT_HASH_LEN) != 0)
    return fail_at(r, pos, JB_AUDIT_CONTENT_CHANGED,
                   "hash is not SHA-256 of the canonical bytes and prevHash");
  const struct jb_audit_pubkey *k = find_key(v->keys, v->nkeys, e->key_id);
  if (!k) return fail_at(r, pos, JB_AUDIT_UNKNOWN_KEY, "key %.16s is not published", e->key_id);
  if (crypto_sign_verify_detached(e->signature, e->hash, JB_AUDIT_HASH_LEN, k->public_key) != 0)
    return fail_at(r, pos, JB_AUDIT_BAD_SIGNATURE, "signature does not verify with key %s",
                   k->key_id);
  struct canon c;
  if (known)
    c = *known;
  else if (canon_of(e, &c) < 0)
    return fail_at(r, pos, JB_AUDIT_MALFORMED, "signed canonical bytes are not an entry");
  int rc = 0;
  /* both fixed-width UTC, so byte order is time order */
  if (k->retired_at[0] && strcmp(c.timestamp, k->retired_at) >= 0)
    rc = fail_at(r, pos, JB_AUDIT_RETIRED_KEY, "signed at %s with key %s, retired at %s",
                 c.timestamp, k->key_id, k->retired_at);
  if (!rc && pos == 1 && !v->opts.session) snprintf(r->session, sizeof r->session, "%s", c.session);
  if (!rc) rc = check_place(v, e, &c);
  if (!rc && strcmp(c.operation, "seal") == 0) v->seal_seq = pos;
  json_decref(c.root);
  return rc;
}

/* jb_audit_verifier_add, with the canonical members of `e` when already known (check_entry). */
static int verifier_add(struct jb_audit_verifier *v, const struct jb_audit_entry *e,
                        const struct canon *known) {
  v->pos++;
  v->r.entries = v->pos;
  if (v->failed) {
    if (!v->pending_seq) return 1;
    /* looking for the missing entry further on: there, it was reordered */
    if (!e) return 0;
    if (canon_seq(e) == v->r.first_bad_seq) {
      long long p = v->r.first_bad_seq, s = v->pending_seq;
      v->pending_seq = 0;
      fail_at(&v->r, p, JB_AUDIT_REORDERED, "entry %lld stands at position %lld", s, p);
      return 1;
    }
    return 0;
  }
  if (!e) { /* a caller may pass NULL only once the verdict is settled */
    v->failed = true;
    fail_at(&v->r, v->pos, JB_AUDIT_MALFORMED, "entry was not read");
    return 1;
  }
  if (check_entry(v, e, known)) {
    v->failed = true;
    if (v->pending_seq && v->pending_seq > v->pos + 1)
      snprintf(v->r.detail, sizeof v->r.detail, "entries %lld..%lld are missing", v->pos,
               v->pending_seq - 1);
    return v->pending_seq ? 0 : 1;
  }
  memcpy(v->prev, e->hash, JB_AUDIT_HASH_LEN);
  const struct jb_audit_head *kh = v->opts.known_head;
  if (kh && kh->seq == v->pos) memcpy(v->known_hash, e->hash, JB_AUDIT_HASH_LEN);
  v->r.head.seq = v->pos;
  memcpy(v->r.head.hash, e->hash, JB_AUDIT_HASH_LEN);
  memcpy(v->r.head.signature, e->signature, JB_AUDIT_SIG_LEN);
  memcpy(v->r.head.key_id, e->key_id, sizeof v->r.head.key_id);
  return 0;
}

int jb_audit_verifier_add(struct jb_audit_verifier *v, const struct jb_audit_entry *e) {
  return verifier_add(v, e, NULL);
}

int jb_audit_verifier_finish(struct jb_audit_verifier *v, struct jb_audit_result *res) {
  struct jb_audit_result *r = &v->r;
  r->sealed = v->seal_seq != 0;
  if (!v->failed) {
    long long len = v->pos;
    const struct jb_audit_head *kh = v->opts.known_head, *sh = v->opts.stored_head;
    if (kh && kh->seq > 0 && kh->seq > len)
      fail_at(r, len + 1, JB_AUDIT_TRUNCATED, "chain ends at %lld, before the given head %lld", len,
              kh->seq);
    else if (kh && kh->seq > 0 && sodium_memcmp(v->known_hash, kh->hash, JB_AUDIT_HASH_LEN) != 0)
      fail_at(r, kh->seq, JB_AUDIT_HEAD_MISMATCH, "entry %lld does not have the given head's hash",
              kh->seq);
    else if (sh && sh->seq > len)
      fail_at(r, len + 1, JB_AUDIT_TRUNCATED,
              "chain ends at %lld, before the session's stored head %lld", len, sh->seq);
    else if (sh && sh->seq < len)
      fail_at(r, sh->seq + 1, JB_AUDIT_HEAD_MISMATCH, "entries past the session's stored head %lld",
              sh->seq);
    else if (sh && len > 0 && sodium_memcmp(v->prev, sh->hash, JB_AUDIT_HASH_LEN) != 0)
      fail_at(r, len, JB_AUDIT_HEAD_MISMATCH,
              "last entry does not have the session's stored head hash");
    else if (v->opts.require_seal && !v->seal_seq)
      fail_at(r, len + 1, JB_AUDIT_UNSEALED, "the session has ended but its chain has no seal");
    else
      r->ok = true;
  }
  v->failed = true; /* finished: later adds change nothing */
  v->pending_seq = 0;
  *res = *r;
  return r->ok ? 0 : 1;
}

int jb_audit_verify(const struct jb_audit_entry *entries, size_t n,
                    const struct jb_audit_pubkey *keys, size_t nkeys,
                    const struct jb_audit_verify_opts *opts, struct jb_audit_result *r) {
  if (sodium_init() < 0) {
    memset(r, 0, sizeof *r);
    snprintf(r->detail, sizeof r->detail, "libsodium cannot initialise");
    return -1;
  }
  struct jb_audit_verifier v;
  jb_audit_verifier_init(&v, keys, nkeys, opts);
  int done = 0;
  for (size_t i = 0; i < n; i++) done = jb_audit_verifier_add(&v, done ? NULL : &entries[i]);
  return jb_audit_verifier_finish(&v, r);
}

/* --- reading an export file, one line at a time ---------------------------------------------- */

#define READ_CHUNK 65536 /* bytes read from the file at a time */

/* Hands out the lines of a FILE read a chunk at a time (fread, then memchr for "\n"): memory
 * is one chunk and the caller's line buffer, whatever a line's length; a NUL byte is an
 * ordinary byte of its line. */
struct line_reader {
  FILE *in;
  char *chunk; /* READ_CHUNK bytes */
  size_t len, off; /* bytes in chunk; bytes of them handed out */
  bool eof; /* the file has nothing after chunk */
};

/* Reads the next line (without its "\n") into buf, keeping at most `cap` bytes: *len is what
 * was kept (`cap` when the line was longer). 0 on a line, -1 at the end, -2 on a read
 * error. */
static int read_line(struct line_reader *lr, char *buf, size_t cap, size_t *len) {
  size_t n = 0;
  bool any = false;
  for (;;) {
    if (lr->off == lr->len) {
      if (lr->eof) break;
      lr->off = 0;
      lr->len = fread(lr->chunk, 1, READ_CHUNK, lr->in);
      if (lr->len < READ_CHUNK) { /* fread returns short only at the end or on an error */
        if (ferror(lr->in)) return -2;
        lr->eof = true;
      }
      continue;
    }
    const char *start = lr->chunk + lr->off;
    size_t avail = lr->len - lr->off;
    const char *nl = memchr(start, '\n', avail);
    size_t take = nl ? (size_t)(nl - start) : avail;
    size_t keep = take < cap - n ? take : cap - n;
    memcpy(buf + n, start, keep);
    n += keep;
    lr->off += take + (nl ? 1 : 0);
    any = true;
    if (nl) break;
  }
  if (!any) return -1;
  *len = n;
  return 0;
}

/* Adds the line `buf` (`len` bytes, writable, no "\n"; not blank) to `v`: in the exporter's
 * exact form read in place (jb_audit_line_read_exact) when `exact`, else by the one reader
 * (jb_audit_line_read), which reaches the same verdict. Returns as jb_audit_verifier_add. */
static int add_line(struct jb_audit_verifier *v, char *buf, size_t len, bool exact,
                    unsigned char *canon) {
  struct jb_audit_entry e;
  size_t body = len > 0 && buf[len - 1] == '\r' ? len - 1 : len; /* the "\r" is not read */
  if (exact && len <= JB_AUDIT_MAX_LINE && jb_audit_line_read_exact(buf, body, canon, &e)) {
    /* the stated fields are the canonical ones (jb_audit_line_read_exact) */
    struct canon c = {.seq = e.seq,
                      .session = e.session,
                      .operation = e.operation,
                      .path = e.path,
                      .timestamp = e.timestamp,
                      .details = e.details};
    int rc = verifier_add(v, &e, &c);
    json_decref(e.details);
    return rc;
  }
  jb_audit_line_read(&e, buf, len, NULL);
  int rc = jb_audit_verifier_add(v, &e);
  jb_audit_entry_clear(&e);
  return rc;
}

int jb_audit_verify_file(FILE *in, const struct jb_audit_pubkey *keys, size_t nkeys,
                         const struct jb_audit_verify_opts *opts, struct jb_audit_result *res,
                         jb_error *err) {
  /* one byte more than a line may have, so that jb_audit_line_read tells a longer one */
  cleanup_free char *buf = malloc(JB_AUDIT_MAX_LINE + 1);
  cleanup_free char *chunk = malloc(READ_CHUNK);
  cleanup_free unsigned char *canon = malloc(JB_AUDIT_MAX_CANONICAL + 1);
  if (!buf || !chunk || !canon) return jb_fail(err, ENOMEM, "out of memory");
  struct line_reader lr = {.in = in, .chunk = chunk};
  bool exact = !(opts && opts->full_parse);
  struct jb_audit_verifier v;
  jb_audit_verifier_init(&v, keys, nkeys, opts);
  bool settled = false;
  size_t len = 0;
  int rc;
  while ((rc = read_line(&lr, buf, JB_AUDIT_MAX_LINE + 1, &len)) == 0) {
    if (jb_audit_line_blank(buf, len)) continue;
    if (settled)
      jb_audit_verifier_add(&v, NULL); /* counted, not read */
    else
      settled = add_line(&v, buf, len, exact, canon) != 0;
  }
  if (rc == -2) return jb_fail(err, EIO, "read error: %s", strerror(errno));
  return jb_audit_verifier_finish(&v, res);
}

json_t *jb_audit_result_json(const struct jb_audit_result *r) {
  json_t *head = json_null();
  if (r->head.seq > 0) {
    char hex[2 * JB_AUDIT_HASH_LEN + 1];
    jb_audit_hex(r->head.hash, JB_AUDIT_HASH_LEN, hex);
    head = json_pack("{s:I,s:s}", "seq", (json_int_t)r->head.seq, "hash", hex);
  }
  json_t *o = json_pack("{s:b,s:I,s:o,s:b,s:s}", "ok", r->ok, "entries", (json_int_t)r->entries,
                        "head", head, "sealed", r->sealed, "session", r->session);
  if (!o) return NULL;
  int bad = 0;
  if (r->ok) {
    bad |= json_object_set_new(o, "firstBadSeq", json_null());
    bad |= json_object_set_new(o, "reason", json_null());
    bad |= json_object_set_new(o, "detail", json_null());
  } else {
    bad |= json_object_set_new(o, "firstBadSeq", json_integer(r->first_bad_seq));
    bad |= json_object_set_new(o, "reason", json_string(jb_audit_reason_name(r->reason)));
    bad |= json_object_set_new(o, "detail", json_string(r->detail));
  }
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}
