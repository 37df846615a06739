/* audit.c — canonical bytes, hashing, signing, export lines and verification of audit
 * entries (see audit.h and api/audit.md). Pure: no database, no files. */
#include "lib/audit.h"

#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const unsigned char zero_hash[JB_AUDIT_HASH_LEN];

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

void jb_audit_quote(char *dst, size_t cap, const char *src, size_t max) {
  static const char hexd[] = "0123456789abcdef";
  size_t o = 0;
  if (cap == 0) return;
  for (size_t i = 0; src && src[i] && i < max; i++) {
    unsigned char ch = (unsigned char)src[i];
    bool plain = ch >= 0x20 && ch < 0x7f;
    size_t need = plain ? 1 : 4;
    if (o + need >= cap) break;
    if (plain) {
      dst[o++] = (char)ch;
    } else {
      dst[o++] = '\\';
      dst[o++] = 'x';
      dst[o++] = hexd[ch >> 4];
      dst[o++] = hexd[ch & 15];
    }
  }
  dst[o] = '\0';
}

void jb_audit_hex(const unsigned char *in, size_t n, char *out) {
  sodium_bin2hex(out, 2 * n + 1, in, n);
}

/* Decodes exactly `n` bytes of hex (either case) from the NUL-terminated `s`. */
static int unhex(const char *s, unsigned char *out, size_t n) {
  size_t got = 0;
  const char *end = NULL;
  if (strlen(s) != 2 * n) return -1;
  if (sodium_hex2bin(out, n, s, 2 * n, NULL, &got, &end) != 0 || got != n || *end) return -1;
  return 0;
}

/* Decodes padded standard base64 (RFC 4648 §4) of at most `max` bytes; *n receives the
 * length. Every character must be of the alphabet or '=': libsodium 1.0.18's decoder itself
 * takes each byte 0x80..0xff for some digit. */
static int unbase64(const char *s, size_t slen, unsigned char *out, size_t max, size_t *n) {
  for (size_t i = 0; i < slen; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
          c == '+' || c == '/' || c == '='))
      return -1;
  }
  const char *end = NULL;
  if (sodium_base642bin(out, max, s, slen, NULL, n, &end, sodium_base64_VARIANT_ORIGINAL) != 0)
    return -1;
  return end == s + slen ? 0 : -1;
}

/* New NUL-terminated base64 (standard alphabet, padded) of `n` bytes, NULL on OOM. */
static char *base64(const unsigned char *in, size_t n) {
  size_t len = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
  char *out = malloc(len);
  if (out) sodium_bin2base64(out, len, in, n, sodium_base64_VARIANT_ORIGINAL);
  return out;
}

/* --- canonical form ------------------------------------------------------------------------ */

static int check_value(const json_t *v, int depth, jb_error *err) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: {
    if (depth >= JB_AUDIT_MAX_DEPTH)
      return jb_fail(err, EINVAL, "details nested deeper than %d levels", JB_AUDIT_MAX_DEPTH);
    const char *k;
    size_t klen;
    json_t *m;
    json_object_keylen_foreach((json_t *)v, k, klen, m) {
      if (memchr(k, '\0', klen)) return jb_fail(err, EINVAL, "details: a key holds NUL");
      if (check_value(m, depth + 1, err) < 0) return -1;
    }
    return 0;
  }
  case JSON_ARRAY: {
    if (depth >= JB_AUDIT_MAX_DEPTH)
      return jb_fail(err, EINVAL, "details nested deeper than %d levels", JB_AUDIT_MAX_DEPTH);
    size_t i;
    json_t *m;
    json_array_foreach((json_t *)v, i, m) if (check_value(m, depth + 1, err) < 0) return -1;
    return 0;
  }
  case JSON_STRING:
    if (memchr(json_string_value(v), '\0', json_string_length(v)))
      return jb_fail(err, EINVAL, "details: a string holds NUL");
    return 0;
  case JSON_REAL:
    return jb_fail(err, EINVAL, "details: real numbers are not allowed (integers only)");
  default:
    return 0;
  }
}

int jb_audit_details_check(const json_t *details, jb_error *err) {
  if (!json_is_object(details)) return jb_fail(err, EINVAL, "details must be a JSON object");
  return check_value(details, 0, err);
}

static bool is_digits(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

/* YYYY-MM-DDTHH:MM:SS.mmmZ with plausible field ranges. */
static bool timestamp_ok(const char *t) {
  if (strlen(t) != JB_AUDIT_TS_LEN) return false;
  if (t[4] != '-' || t[7] != '-' || t[10] != 'T' || t[13] != ':' || t[16] != ':' ||
      t[19] != '.' || t[23] != 'Z')
    return false;
  if (!is_digits(t, 4) || !is_digits(t + 5, 2) || !is_digits(t + 8, 2) ||
      !is_digits(t + 11, 2) || !is_digits(t + 14, 2) || !is_digits(t + 17, 2) ||
      !is_digits(t + 20, 3))
    return false;
  int mo = (t[5] - '0') * 10 + (t[6] - '0'), d = (t[8] - '0') * 10 + (t[9] - '0');
  int h = (t[11] - '0') * 10 + (t[12] - '0'), mi = (t[14] - '0') * 10 + (t[15] - '0');
  int s = (t[17] - '0') * 10 + (t[18] - '0');
  return mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h <= 23 && mi <= 59 && s <= 60;
}

static bool operation_ok(const char *op) {
  size_t n = strlen(op);
  if (n < 1 || n > JB_AUDIT_MAX_OPERATION) return false;
  for (size_t i = 0; i < n; i++)
    if (!((op[i] >= 'a' && op[i] <= 'z') || op[i] == '_')) return false;
  return true;
}

static bool session_ok(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n > JB_AUDIT_MAX_SESSION) return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return false;
  return true;
}

char *jb_audit_canonical(long long seq, const char *session, const char *operation,
                         const char *path, const char *timestamp, const json_t *details,
                         size_t *len, jb_error *err) {
  if (seq < 1) {
    jb_fail(err, EINVAL, "seq must be at least 1");
    return NULL;
  }
  if (!session || !session_ok(session)) {
    jb_fail(err, EINVAL, "session id must be 1..%d printable bytes", JB_AUDIT_MAX_SESSION);
    return NULL;
  }
  if (!operation || !operation_ok(operation)) {
    jb_fail(err, EINVAL, "operation must match [a-z_]{1,%d}", JB_AUDIT_MAX_OPERATION);
    return NULL;
  }
  if (path && strlen(path) > JB_AUDIT_MAX_PATH) {
    jb_fail(err, EINVAL, "path longer than %d bytes", JB_AUDIT_MAX_PATH);
    return NULL;
  }
  if (!timestamp || !timestamp_ok(timestamp)) {
    jb_fail(err, EINVAL, "timestamp must be YYYY-MM-DDTHH:MM:SS.mmmZ");
    return NULL;
  }
  json_t *d = details ? json_incref((json_t *)details) : json_object();
  if (!d) {
    jb_fail(err, ENOMEM, "out of memory");
    return NULL;
  }
  if (jb_audit_details_check(d, err) < 0) {
    json_decref(d);
    return NULL;
  }
  json_t *o = json_pack("{s:I,s:s,s:s,s:s?,s:s,s:o}", "seq", (json_int_t)seq, "session", session,
                        "operation", operation, "path", path, "timestamp", timestamp,
                        "details", d);
  if (!o) {
    jb_fail(err, EINVAL, "entry cannot be represented (invalid UTF-8 in a string?)");
    return NULL;
  }
  char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(o);
  if (!s) {
    jb_fail(err, ENOMEM, "out of memory");
    return NULL;
  }
  size_t n = strlen(s);
  if (n > JB_AUDIT_MAX_CANONICAL) {
    free(s);
    jb_fail(err, E2BIG, "entry is %zu bytes, more than %d", n, JB_AUDIT_MAX_CANONICAL);
    return NULL;
  }
  *len = n;
  return s;
}

json_t *jb_audit_canonical_details(const unsigned char *canonical, size_t len) {
  static const char head[] = "{\"details\":";
  json_t *d = NULL;
  if (len > JB_AUDIT_DETAILS_OFFSET && memcmp(canonical, head, JB_AUDIT_DETAILS_OFFSET) == 0)
    d = json_loadb((const char *)canonical + JB_AUDIT_DETAILS_OFFSET,
                   len - JB_AUDIT_DETAILS_OFFSET, JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK,
                   NULL);
  if (json_is_object(d)) return d;
  json_decref(d);
  return json_object();
}

void jb_audit_hash(const unsigned char *canonical, size_t len,
                   const unsigned char prev[JB_AUDIT_HASH_LEN],
                   unsigned char out[JB_AUDIT_HASH_LEN]) {
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  crypto_hash_sha256_update(&st, canonical, len);
  crypto_hash_sha256_update(&st, prev, JB_AUDIT_HASH_LEN);
  crypto_hash_sha256_final(&st, out);
}

void jb_audit_key_id(const unsigned char pk[JB_AUDIT_PK_LEN], char out[JB_AUDIT_KEY_ID_LEN + 1]) {
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, pk, JB_AUDIT_PK_LEN);
  jb_audit_hex(h, JB_AUDIT_KEY_ID_LEN / 2, out);
}

static char *dup_or_null(const char *s, bool *oom) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) *oom = true;
  return d;
}

int jb_audit_entry_sign(struct jb_audit_signed *out, long long seq, const char *session,
                        const char *operation, const char *path, const char *timestamp,
                        const json_t *details, const unsigned char prev[JB_AUDIT_HASH_LEN],
                        const unsigned char sk[JB_AUDIT_SK_LEN], jb_error *err) {
  memset(out, 0, sizeof *out);
  if (sodium_init() < 0) return jb_fail(err, EIO, "libsodium cannot initialise");
  char *c = jb_audit_canonical(seq, session, operation, path, timestamp, details,
                               &out->canonical_len, err);
  if (!c) return -1;
  out->canonical = (unsigned char *)c;
  jb_audit_hash(out->canonical, out->canonical_len, prev ? prev : zero_hash, out->hash);
  crypto_sign_detached(out->signature, NULL, out->hash, JB_AUDIT_HASH_LEN, sk);
  return 0;
}

int jb_audit_entry_make(struct jb_audit_entry *e, long long seq, const char *session,
                        const char *operation, const char *path, const char *timestamp,
                        const json_t *details, const unsigned char prev[JB_AUDIT_HASH_LEN],
                        const unsigned char sk[JB_AUDIT_SK_LEN],
                        const unsigned char pk[JB_AUDIT_PK_LEN], jb_error *err) {
  memset(e, 0, sizeof *e);
  struct jb_audit_signed sg;
  if (jb_audit_entry_sign(&sg, seq, session, operation, path, timestamp, details, prev, sk,
                          err) < 0)
    return -1;
  e->canonical = sg.canonical;
  e->canonical_len = sg.canonical_len;
  bool oom = false;
  e->seq = seq;
  e->session = dup_or_null(session, &oom);
  e->operation = dup_or_null(operation, &oom);
  e->path = dup_or_null(path, &oom);
  e->timestamp = dup_or_null(timestamp, &oom);
  e->details = details ? json_deep_copy(details) : json_object();
  if (oom || !e->details) {
    jb_audit_entry_clear(e);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  memcpy(e->prev_hash, prev ? prev : zero_hash, JB_AUDIT_HASH_LEN);
  memcpy(e->hash, sg.hash, JB_AUDIT_HASH_LEN);
  memcpy(e->signature, sg.signature, JB_AUDIT_SIG_LEN);
  jb_audit_key_id(pk, e->key_id);
  return 0;
}

void jb_audit_entry_clear(struct jb_audit_entry *e) {
  if (!e) return;
  free(e->session);
  free(e->operation);
  free(e->path);
  free(e->timestamp);
  json_decref(e->details);
  free(e->canonical);
  memset(e, 0, sizeof *e);
}

void jb_audit_entries_free(struct jb_audit_entry *v, size_t n) {
  if (!v) return;
  for (size_t i = 0; i < n; i++) jb_audit_entry_clear(&v[i]);
  free(v);
}

/* --- export lines ------------------------------------------------------------------------- */

/* A copy of `details` whose members, at every depth, stand in ascending byte order of their
 * keys, as in the canonical bytes (jansson keeps the order in which a text lists members).
 * New reference; when it cannot be made (OOM, or a value jansson cannot write back), a new
 * reference to `details` itself, whose order is then as given. */
static json_t *details_sorted(const json_t *details) {
  char *text = json_dumps(details, JSON_COMPACT | JSON_SORT_KEYS);
  json_t *sorted = text ? json_loads(text, JSON_ALLOW_NUL, NULL) : NULL;
  free(text);
  return sorted ? sorted : json_incref((json_t *)details);
}

char *jb_audit_entry_line(const struct jb_audit_entry *e) {
  char prev[2 * JB_AUDIT_HASH_LEN + 1], hash[2 * JB_AUDIT_HASH_LEN + 1];
  jb_audit_hex(e->prev_hash, JB_AUDIT_HASH_LEN, prev);
  jb_audit_hex(e->hash, JB_AUDIT_HASH_LEN, hash);
  char *sig = base64(e->signature, JB_AUDIT_SIG_LEN);
  char *canon = base64(e->canonical, e->canonical_len);
  json_t *details = e->details ? details_sorted(e->details) : NULL;
  json_t *o = NULL;
  if (sig && canon)
    o = json_pack("{s:I,s:s,s:s,s:s?,s:s,s:O,s:s,s:s,s:s,s:s,s:s}", "seq", (json_int_t)e->seq,
                  "session", e->session ? e->session : "", "operation",
                  e->operation ? e->operation : "", "path", e->path, "timestamp",
                  e->timestamp ? e->timestamp : "", "details", details, "prevHash", prev,
                  "hash", hash, "signature", sig, "keyId", e->key_id, "canonical", canon);
  json_decref(details);
  free(sig);
  free(canon);
  if (!o) return NULL;
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!s) return NULL;
  size_t n = strlen(s);
  char *line = realloc(s, n + 2);
  if (!line) {
    free(s);
    return NULL;
  }
  line[n] = '\n';
  line[n + 1] = '\0';
  return line;
}

#define LINE_MEMBERS 11
static const char *const line_members[LINE_MEMBERS] = {
    "seq", "session", "operation", "path", "timestamp", "details",
    "prevHash", "hash", "signature", "keyId", "canonical"};

static int line_fail(struct jb_audit_entry *e, jb_error *err, const char *msg) {
  e->malformed = true;
  snprintf(e->error, sizeof e->error, "%s", msg);
  return jb_fail(err, EINVAL, "%s", msg);
}

static const char *member_str(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

int jb_audit_entry_parse_line(struct jb_audit_entry *e, const char *line, size_t len,
                              jb_error *err) {
  memset(e, 0, sizeof *e);
  if (len > JB_AUDIT_MAX_LINE) return line_fail(e, err, "line longer than the limit");
  json_error_t je;
  json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
  if (!o) {
    char m[160];
    snprintf(m, sizeof m, "not JSON: %s", je.text);
    return line_fail(e, err, m);
  }
  int rc = -1;
  if (!json_is_object(o)) {
    line_fail(e, err, "line is not a JSON object");
    goto out;
  }
  json_t *seq = json_object_get(o, "seq");
  if (json_is_integer(seq)) e->seq = json_integer_value(seq);
  /* every member below is required; with exactly as many members there is no other one */
  if (json_object_size(o) != LINE_MEMBERS) {
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
      bool known = false;
      for (size_t i = 0; i < LINE_MEMBERS; i++)
        if (strcmp(k, line_members[i]) == 0) known = true;
      if (!known) {
        char m[160], q[4 * 32 + 1];
        jb_audit_quote(q, sizeof q, k, 32);
        snprintf(m, sizeof m, "unknown member '%s'", q);
        line_fail(e, err, m);
        goto out;
      }
    }
  }
  json_t *path = json_object_get(o, "path"), *details = json_object_get(o, "details");
  const char *session = member_str(o, "session"), *op = member_str(o, "operation"),
             *ts = member_str(o, "timestamp"), *prev = member_str(o, "prevHash"),
             *hash = member_str(o, "hash"), *sig = member_str(o, "signature"),
             *kid = member_str(o, "keyId"), *canon = member_str(o, "canonical");
  if (!json_is_integer(seq) || !session || !op || !ts || !prev || !hash || !sig || !kid ||
      !canon || !path || !(json_is_string(path) || json_is_null(path)) ||
      !json_is_object(details)) {
    line_fail(e, err, "a member is missing or has the wrong type");
    goto out;
  }
  if (unhex(prev, e->prev_hash, JB_AUDIT_HASH_LEN) < 0 ||
      unhex(hash, e->hash, JB_AUDIT_HASH_LEN) < 0) {
    line_fail(e, err, "prevHash/hash must be 64 hex characters");
    goto out;
  }
  size_t n = 0;
  if (unbase64(sig, strlen(sig), e->signature, JB_AUDIT_SIG_LEN, &n) < 0 ||
      n != JB_AUDIT_SIG_LEN) {
    line_fail(e, err, "signature must be base64 of 64 bytes");
    goto out;
  }
  if (strlen(kid) != JB_AUDIT_KEY_ID_LEN) {
    line_fail(e, err, "keyId must be 16 characters");
    goto out;
  }
  memcpy(e->key_id, kid, JB_AUDIT_KEY_ID_LEN + 1);
  size_t clen = json_string_length(json_object_get(o, "canonical"));
  e->canonical = malloc(clen / 4 * 3 + 4);
  if (!e->canonical) {
    line_fail(e, err, "out of memory");
    goto out;
  }
  if (unbase64(canon, clen, e->canonical, clen / 4 * 3 + 3, &n) < 0 ||
      n > JB_AUDIT_MAX_CANONICAL) {
    line_fail(e, err, "canonical must be base64 of at most 64 KiB");
    goto out;
  }
  e->canonical[n] = '\0';
  e->canonical_len = n;
  bool oom = false;
  e->session = dup_or_null(session, &oom);
  e->operation = dup_or_null(op, &oom);
  e->path = json_is_string(path) ? dup_or_null(json_string_value(path), &oom) : NULL;
  e->timestamp = dup_or_null(ts, &oom);
  e->details = json_incref(details);
  if (oom) {
    line_fail(e, err, "out of memory");
    goto out;
  }
  rc = 0;
out:
  json_decref(o);
  if (rc < 0) {
    /* keep only what the verifier needs to place the line: seq and the reason */
    long long s = e->seq;
    char why[sizeof e->error];
    memcpy(why, e->error, sizeof why);
    jb_audit_entry_clear(e);
    e->seq = s;
    e->malformed = true;
    memcpy(e->error, why, sizeof why);
  }
  return rc;
}

int jb_audit_parse_lines(const char *buf, size_t len, size_t max_entries,
                         struct jb_audit_entry **out, size_t *n, jb_error *err) {
  size_t cap = 0, cnt = 0;
  struct jb_audit_entry *v = NULL;
  size_t pos = 0;
  while (pos < len) {
    const char *start = buf + pos;
    const char *nl = memchr(start, '\n', len - pos);
    size_t l = nl ? (size_t)(nl - start) : len - pos;
    pos += l + (nl ? 1 : 0);
    if (l > 0 && start[l - 1] == '\r') l--;
    bool blank = true;
    for (size_t i = 0; i < l; i++)
      if (start[i] != ' ' && start[i] != '\t') blank = false;
    if (blank) continue;
    if (cnt == max_entries) {
      jb_audit_entries_free(v, cnt);
      return jb_fail(err, E2BIG, "more than %zu entries", max_entries);
    }
    if (cnt == cap) {
      size_t nc = cap ? cap * 2 : 64;
      struct jb_audit_entry *nv = realloc(v, nc * sizeof *nv);
      if (!nv) {
        jb_audit_entries_free(v, cnt);
        return jb_fail(err, ENOMEM, "out of memory");
      }
      v = nv;
      cap = nc;
    }
    jb_audit_entry_parse_line(&v[cnt], start, l, NULL);
    cnt++;
  }
  *out = v;
  *n = cnt;
  return 0;
}

/* --- keys ------------------------------------------------------------------------------------ */

int jb_audit_keys_parse(const char *buf, size_t len, struct jb_audit_pubkey **out, size_t *n,
                        jb_error *err) {
  if (len > (1u << 20)) return jb_fail(err, E2BIG, "keys document larger than 1 MiB");
  json_error_t je;
  json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
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
  json_array_foreach(arr, i, k) {
    const char *kid = member_str(k, "keyId"), *alg = member_str(k, "algorithm"),
               *pk = member_str(k, "publicKey");
    size_t got = 0;
    if (!kid || !alg || !pk || strcmp(alg, "ed25519") != 0 ||
        unbase64(pk, strlen(pk), v[i].public_key, JB_AUDIT_PK_LEN, &got) < 0 ||
        got != JB_AUDIT_PK_LEN) {
      free(v);
      json_decref(o);
      return jb_fail(err, EINVAL, "keys[%zu]: needs keyId, algorithm \"ed25519\" and a base64 "
                     "32-byte publicKey", i);
    }
    json_t *ret = json_object_get(k, "retiredAt");
    if (json_is_string(ret) && timestamp_ok(json_string_value(ret))) {
      memcpy(v[i].retired_at, json_string_value(ret), JB_AUDIT_TS_LEN + 1);
    } else if (ret && !json_is_null(ret)) {
      free(v);
      json_decref(o);
      return jb_fail(err, EINVAL, "keys[%zu]: retiredAt must be null or "
                     "YYYY-MM-DDTHH:MM:SS.mmmZ", i);
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
        jb_fail(err, EINVAL, "keys[%zu]: key %s is listed twice (also keys[%zu])", i, v[i].key_id, j);
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
  c->root = json_loadb((const char *)e->canonical, e->canonical_len, JSON_REJECT_DUPLICATES, NULL);
  if (!json_is_object(c->root) || json_object_size(c->root) != 6) goto bad;
  json_t *seq = json_object_get(c->root, "seq"), *path = json_object_get(c->root, "path");
  c->session = member_str(c->root, "session");
  c->operation = member_str(c->root, "operation");
  c->timestamp = member_str(c->root, "timestamp");
  c->details = json_object_get(c->root, "details");
  if (!json_is_integer(seq) || !c->session || !c->operation || !c->timestamp || !path ||
      !(json_is_string(path) || json_is_null(path)) || !json_is_object(c->details) ||
      !timestamp_ok(c->timestamp))
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
  if (e->seq != c->seq) field = "seq";
  else if (!str_eq(e->session, c->session)) field = "session";
  else if (!str_eq(e->operation, c->operation)) field = "operation";
  else if (!str_eq(e->path, c->path)) field = "path";
  else if (!str_eq(e->timestamp, c->timestamp)) field = "timestamp";
  else if (!e->details || !json_equal(e->details, c->details)) field = "details";
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
    return fail_at(r, pos, JB_AUDIT_BROKEN_LINK, "prevHash is not the hash of entry %lld",
                   pos - 1);
  if (check_fields(e, c, r, pos)) return 1;
  if (v->seal_seq)
    return fail_at(r, pos, JB_AUDIT_AFTER_SEAL, "entry after the seal at %lld", v->seal_seq);
  if (strcmp(c->operation, "seal") == 0) return check_seal(e, c, r, pos);
  return 0;
}

/* Verifies entry v->pos (authenticity, then place). `known`: its canonical members when the
 * caller has already established them (the fast path of jb_audit_verify_file), else NULL.
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
  if (!rc && pos == 1 && !v->opts.session)
    snprintf(r->session, sizeof r->session, "%s", c.session);
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
      fail_at(r, len + 1, JB_AUDIT_TRUNCATED, "chain ends at %lld, before the given head %lld",
              len, kh->seq);
    else if (kh && kh->seq > 0 && sodium_memcmp(v->known_hash, kh->hash, JB_AUDIT_HASH_LEN) != 0)
      fail_at(r, kh->seq, JB_AUDIT_HEAD_MISMATCH,
              "entry %lld does not have the given head's hash", kh->seq);
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

/* --- reading an export file: lines, and the fast path for the exporter's own form ----------- */

#define READ_CHUNK 65536 /* bytes read from the file at a time */

/* Hands out the lines of a FILE read a chunk at a time (fread, then memchr for "\n"): memory
 * is one chunk and the caller's line buffer, whatever a line's length; a NUL byte is an
 * ordinary byte of its line. */
struct line_reader {
  FILE *in;
  char *chunk;      /* READ_CHUNK bytes */
  size_t len, off;  /* bytes in chunk; bytes of them handed out */
  bool eof;         /* the file has nothing after chunk */
};

/* Reads the next line (without its "\n") into buf, keeping at most `cap` bytes: *len is what
 * was kept, *too_long says bytes were dropped. 0 on a line, -1 at the end, -2 on a read
 * error. */
static int read_line(struct line_reader *lr, char *buf, size_t cap, size_t *len,
                     bool *too_long) {
  size_t n = 0;
  bool any = false;
  *too_long = false;
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
    if (keep < take) *too_long = true;
    lr->off += take + (nl ? 1 : 0);
    any = true;
    if (nl) break;
  }
  if (!any) return -1;
  *len = n;
  return 0;
}

/* The fast path. A line in exactly the form jb_audit_entry_line writes (members in its order,
 * no whitespace, every string but details' of printable ASCII without escapes, details in
 * canonical order) whose canonical bytes are, byte for byte, the canonical object built from
 * the very tokens the line states, is read without a parse of the whole line and without a
 * parse of the canonical bytes: jansson parses only `details` (JSON_REJECT_DUPLICATES, as the
 * full parse). Equal tokens decode to equal values, so the stated fields are the canonical
 * ones; and such a line is one that jb_audit_entry_parse_line reads into the same entry and
 * canon_of into the same members (the tokens are plain, details pass
 * jb_audit_details_check, the timestamp is valid, seq has at most 18 digits, hex and base64
 * decode as unhex and unbase64 decode them). Any other line
 * — whitespace, another member order, an escape, a non-ASCII byte, details in another order,
 * a canonical form that is not byte-equal — goes the full way (jb_audit_entry_parse_line,
 * canon_of), so the fast path decides no verdict of its own; hash, key, signature and every
 * later check run on what it read exactly as on a fully parsed entry. */

/* A token of a line: `n` bytes at `p` (a string token with its quotes). */
struct tok {
  const char *p;
  size_t n;
};

/* Advances *at over the `n` bytes of `lit`; false when the line does not continue so. */
static bool take_lit(const char **at, const char *end, const char *lit, size_t n) {
  if ((size_t)(end - *at) < n || memcmp(*at, lit, n) != 0) return false;
  *at += n;
  return true;
}
#define TAKE(at, end, lit) take_lit(at, end, lit, sizeof lit - 1)

/* Takes a string token whose value is its bytes: '"', printable ASCII other than '"' and
 * '\\', '"'. */
static bool take_plain(const char **at, const char *end, struct tok *t) {
  const char *p = *at;
  if (p == end || *p != '"') return false;
  for (p++; p < end && *p != '"'; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e || *p == '\\') return false;
  if (p == end) return false;
  t->p = *at;
  t->n = (size_t)(p + 1 - *at);
  *at = p + 1;
  return true;
}

/* Takes the bytes up to the next '"' (the body of a string token whose opening quote was
 * taken) and the quote. The body is then checked by its decoder (unbase64_table), which
 * takes only characters of the base64 alphabet: no '\\', no control or non-ASCII byte. */
static bool take_body(const char **at, const char *end, struct tok *t) {
  const char *q = memchr(*at, '"', (size_t)(end - *at));
  if (!q) return false;
  t->p = *at;
  t->n = (size_t)(q - *at);
  *at = q + 1;
  return true;
}

/* Takes 64 hex characters and the closing '"' into out (32 bytes), as unhex accepts them. */
static bool take_hash(const char **at, const char *end, unsigned char out[JB_AUDIT_HASH_LEN]) {
  size_t got = 0;
  const char *stop = NULL;
  if ((size_t)(end - *at) < 2 * JB_AUDIT_HASH_LEN + 1 || (*at)[2 * JB_AUDIT_HASH_LEN] != '"' ||
      sodium_hex2bin(out, JB_AUDIT_HASH_LEN, *at, 2 * JB_AUDIT_HASH_LEN, NULL, &got, &stop) != 0 ||
      got != JB_AUDIT_HASH_LEN || stop != *at + 2 * JB_AUDIT_HASH_LEN)
    return false;
  *at += 2 * JB_AUDIT_HASH_LEN + 1;
  return true;
}

/* The value of each base64 digit (RFC 4648 §4, standard alphabet); 255: not a digit. */
static const unsigned char b64_digit[256] = {
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,  62, 255, 255, 255,  63,
     52,  53,  54,  55,  56,  57,  58,  59,  60,  61, 255, 255, 255, 255, 255, 255,
    255,   0,   1,   2,   3,   4,   5,   6,   7,   8,   9,  10,  11,  12,  13,  14,
     15,  16,  17,  18,  19,  20,  21,  22,  23,  24,  25, 255, 255, 255, 255, 255,
    255,  26,  27,  28,  29,  30,  31,  32,  33,  34,  35,  36,  37,  38,  39,  40,
     41,  42,  43,  44,  45,  46,  47,  48,  49,  50,  51, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
};

/* Decodes padded standard base64 exactly as unbase64 does (the same strings accepted, the
 * same bytes out: '=' only as the last one or two characters of a length that is a multiple
 * of 4, the bits a padded group leaves over all zero, at most `max` bytes), by table instead
 * of libsodium's constant-time decoder, which an offline check of public data does not need
 * and which takes ~10 times as long. The fast path alone uses it; the differential check of
 * tests/fuzz/fuzz_audit.c compares the two. 0, or -1. */
static int unbase64_table(const char *s, size_t slen, unsigned char *out, size_t max,
                          size_t *n) {
  const unsigned char *in = (const unsigned char *)s;
  if (slen % 4) return -1;
  size_t pad = slen && in[slen - 1] == '=' ? (slen >= 2 && in[slen - 2] == '=' ? 2 : 1) : 0;
  size_t len = slen / 4 * 3 - pad;
  if (len > max) return -1;
  size_t groups = (slen - pad) / 4, o = 0;
  for (size_t g = 0; g < groups; g++, in += 4) {
    unsigned a = b64_digit[in[0]], b = b64_digit[in[1]], c = b64_digit[in[2]],
             d = b64_digit[in[3]];
    if ((a | b | c | d) & 0x80) return -1;
    unsigned v = a << 18 | b << 12 | c << 6 | d;
    out[o++] = (unsigned char)(v >> 16);
    out[o++] = (unsigned char)(v >> 8);
    out[o++] = (unsigned char)v;
  }
  if (pad) {
    unsigned a = b64_digit[in[0]], b = b64_digit[in[1]], c = pad == 1 ? b64_digit[in[2]] : 0;
    if ((a | b | c) & 0x80 || (pad == 1 ? c & 3 : b & 15)) return -1;
    unsigned v = a << 18 | b << 12 | c << 6;
    out[o++] = (unsigned char)(v >> 16);
    if (pad == 1) out[o++] = (unsigned char)(v >> 8);
  }
  *n = o;
  return 0;
}

/* The value of the plain string token `t` of `line`, made a C string in place: its closing
 * quote becomes NUL. */
static char *plain_value(char *line, const struct tok *t) {
  char *v = line + (t->p - line) + 1;
  v[t->n - 2] = '\0';
  return v;
}

/* Reads `line` (`len` bytes, writable) by the fast path into `e` and `c` (see above).
 * `canon` (JB_AUDIT_MAX_CANONICAL + 1 bytes) receives the canonical bytes. Returns true with
 * `e` and `c` filled: e->session, operation, path and timestamp then point into `line`
 * (their closing quotes overwritten with NUL), e->canonical to `canon`, e->details and
 * c->details to one new object (json_decref it; do not jb_audit_entry_clear `e`). Returns
 * false with `line` untouched and nothing to release when the line is not in that form. */
static bool read_fast(char *line, size_t len, unsigned char *canon, struct jb_audit_entry *e,
                      struct canon *c) {
  const char *at = line, *end = line + len;
  struct tok seq, session, op, path = {"null", 4}, ts, details, sig, kid, cb;
  unsigned char prev[JB_AUDIT_HASH_LEN], hash[JB_AUDIT_HASH_LEN], sigb[JB_AUDIT_SIG_LEN];
  if (!TAKE(&at, end, "{\"seq\":") || at == end || *at < '1' || *at > '9') return false;
  seq.p = at;
  while (at < end && *at >= '0' && *at <= '9' && at - seq.p < 18) at++;
  seq.n = (size_t)(at - seq.p);
  if (!TAKE(&at, end, ",\"session\":") || !take_plain(&at, end, &session) ||
      !TAKE(&at, end, ",\"operation\":") || !take_plain(&at, end, &op) ||
      !TAKE(&at, end, ",\"path\":"))
    return false;
  bool path_null = TAKE(&at, end, "null");
  if (!path_null && !take_plain(&at, end, &path)) return false;
  if (!TAKE(&at, end, ",\"timestamp\":") || !take_plain(&at, end, &ts) ||
      ts.n != JB_AUDIT_TS_LEN + 2 || !TAKE(&at, end, ",\"details\":") || at == end || *at != '{')
    return false;
  char tsv[JB_AUDIT_TS_LEN + 1];
  memcpy(tsv, ts.p + 1, JB_AUDIT_TS_LEN);
  tsv[JB_AUDIT_TS_LEN] = '\0';
  if (!timestamp_ok(tsv)) return false;
  /* details: one JSON object, parsed as the full parse would (duplicates refused); where it
   * ends, the fixed members follow */
  json_error_t je;
  json_t *d = json_loadb(at, (size_t)(end - at), JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK,
                         &je);
  if (!d) return false;
  if (!json_is_object(d) || je.position <= 0 || (size_t)je.position > (size_t)(end - at) ||
      jb_audit_details_check(d, NULL) < 0)
    goto no;
  details = (struct tok){at, (size_t)je.position};
  at += je.position;
  size_t n = 0, clen = 0;
  if (!TAKE(&at, end, ",\"prevHash\":\"") || !take_hash(&at, end, prev) ||
      !TAKE(&at, end, ",\"hash\":\"") || !take_hash(&at, end, hash) ||
      !TAKE(&at, end, ",\"signature\":\"") || !take_body(&at, end, &sig) ||
      unbase64_table(sig.p, sig.n, sigb, JB_AUDIT_SIG_LEN, &n) < 0 || n != JB_AUDIT_SIG_LEN ||
      !TAKE(&at, end, ",\"keyId\":") || !take_plain(&at, end, &kid) ||
      kid.n != JB_AUDIT_KEY_ID_LEN + 2 || !TAKE(&at, end, ",\"canonical\":\"") ||
      !take_body(&at, end, &cb) || !TAKE(&at, end, "}") || at != end ||
      unbase64_table(cb.p, cb.n, canon, JB_AUDIT_MAX_CANONICAL, &clen) < 0)
    goto no;
  /* the canonical bytes must be the canonical object of these very tokens */
  const char *cp = (const char *)canon, *cend = cp + clen;
  if (!TAKE(&cp, cend, "{\"details\":") || !take_lit(&cp, cend, details.p, details.n) ||
      !TAKE(&cp, cend, ",\"operation\":") || !take_lit(&cp, cend, op.p, op.n) ||
      !TAKE(&cp, cend, ",\"path\":") || !take_lit(&cp, cend, path.p, path.n) ||
      !TAKE(&cp, cend, ",\"seq\":") || !take_lit(&cp, cend, seq.p, seq.n) ||
      !TAKE(&cp, cend, ",\"session\":") || !take_lit(&cp, cend, session.p, session.n) ||
      !TAKE(&cp, cend, ",\"timestamp\":") || !take_lit(&cp, cend, ts.p, ts.n) ||
      !TAKE(&cp, cend, "}") || cp != cend)
    goto no;
  /* accepted: from here on nothing fails */
  memset(e, 0, sizeof *e);
  for (size_t i = 0; i < seq.n; i++) e->seq = e->seq * 10 + (seq.p[i] - '0');
  e->session = plain_value(line, &session);
  e->operation = plain_value(line, &op);
  e->path = path_null ? NULL : plain_value(line, &path);
  e->timestamp = plain_value(line, &ts);
  e->details = d;
  canon[clen] = '\0';
  e->canonical = canon;
  e->canonical_len = clen;
  memcpy(e->prev_hash, prev, JB_AUDIT_HASH_LEN);
  memcpy(e->hash, hash, JB_AUDIT_HASH_LEN);
  memcpy(e->signature, sigb, JB_AUDIT_SIG_LEN);
  memcpy(e->key_id, kid.p + 1, JB_AUDIT_KEY_ID_LEN);
  e->key_id[JB_AUDIT_KEY_ID_LEN] = '\0';
  *c = (struct canon){.seq = e->seq, .session = e->session, .operation = e->operation,
                      .path = e->path, .timestamp = e->timestamp, .details = d};
  return true;
no:
  json_decref(d);
  return false;
}

int jb_audit_verify_file(FILE *in, const struct jb_audit_pubkey *keys, size_t nkeys,
                         const struct jb_audit_verify_opts *opts, struct jb_audit_result *res,
                         jb_error *err) {
  char *buf = malloc(JB_AUDIT_MAX_LINE);
  char *chunk = malloc(READ_CHUNK);
  unsigned char *canon = malloc(JB_AUDIT_MAX_CANONICAL + 1);
  if (!buf || !chunk || !canon) {
    free(buf);
    free(chunk);
    free(canon);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  struct line_reader lr = {.in = in, .chunk = chunk};
  bool fast = !(opts && opts->full_parse);
  struct jb_audit_verifier v;
  jb_audit_verifier_init(&v, keys, nkeys, opts);
  bool settled = false, too_long = false;
  size_t len = 0;
  int rc;
  while ((rc = read_line(&lr, buf, JB_AUDIT_MAX_LINE, &len, &too_long)) == 0) {
    if (len > 0 && buf[len - 1] == '\r') len--;
    bool blank = !too_long;
    for (size_t i = 0; i < len && blank; i++)
      if (buf[i] != ' ' && buf[i] != '\t') blank = false;
    if (blank) continue;
    if (settled) {
      jb_audit_verifier_add(&v, NULL); /* counted, not read */
      continue;
    }
    struct jb_audit_entry e;
    struct canon c;
    if (fast && !too_long && read_fast(buf, len, canon, &e, &c)) {
      settled = verifier_add(&v, &e, &c) != 0;
      json_decref(e.details);
      continue;
    }
    if (too_long) {
      memset(&e, 0, sizeof e);
      line_fail(&e, NULL, "line longer than the limit");
    } else {
      jb_audit_entry_parse_line(&e, buf, len, NULL);
    }
    settled = jb_audit_verifier_add(&v, &e) != 0;
    jb_audit_entry_clear(&e);
  }
  free(buf);
  free(chunk);
  free(canon);
  if (rc == -2) return jb_fail(err, EIO, "read error: %s", strerror(errno));
  return jb_audit_verifier_finish(&v, res);
}

json_t *jb_audit_head_json(const struct jb_audit_head *h) {
  char hex[2 * JB_AUDIT_HASH_LEN + 1];
  jb_audit_hex(h->hash, JB_AUDIT_HASH_LEN, hex);
  json_t *o = json_pack("{s:I,s:s}", "seq", (json_int_t)h->seq, "hash", hex);
  if (o && h->key_id[0]) {
    char *sig = base64(h->signature, JB_AUDIT_SIG_LEN);
    if (!sig || json_object_set_new(o, "signature", json_string(sig)) < 0 ||
        json_object_set_new(o, "keyId", json_string(h->key_id)) < 0) {
      json_decref(o);
      o = NULL;
    }
    free(sig);
  }
  return o;
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

int jb_audit_head_parse(const char *s, struct jb_audit_head *h, jb_error *err) {
  memset(h, 0, sizeof *h);
  const char *colon = strchr(s, ':');
  if (!colon || colon == s || colon - s > 18 || !is_digits(s, (size_t)(colon - s)))
    return jb_fail(err, EINVAL, "head must be SEQ:HASH (decimal seq, 64 hex characters)");
  h->seq = strtoll(s, NULL, 10);
  if (h->seq < 1 || unhex(colon + 1, h->hash, JB_AUDIT_HASH_LEN) < 0)
    return jb_fail(err, EINVAL, "head must be SEQ:HASH (seq >= 1, 64 hex characters)");
  return 0;
}
