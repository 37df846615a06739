/* audit.c — the audit entry itself: its canonical bytes, their SHA-256 hash chained on the
 * entry before, the Ed25519 signature of that hash, the key id, the chain head as JSON, and
 * the encodings (hex, base64) the export line and the head use. The export line is
 * lib/audit_export.c, the verifier lib/audit_verify.c; the contract is api/audit.md. Pure:
 * no database, no files. */
#include "lib/audit.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/audit_private.h"
#include "lib/json.h"

static const unsigned char zero_hash[JB_AUDIT_HASH_LEN];

/* --- text and encodings ------------------------------------------------------------------- */

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

int jb_audit_unhex(const char *s, size_t slen, unsigned char *out, size_t n) {
  size_t got = 0;
  const char *end = NULL;
  if (slen != 2 * n || sodium_hex2bin(out, n, s, slen, NULL, &got, &end) != 0 || got != n ||
      end != s + slen)
    return -1;
  return 0;
}

int jb_audit_unbase64(const char *s, size_t slen, unsigned char *out, size_t max, size_t *n) {
  for (size_t i = 0; i < slen; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
          c == '/' || c == '='))
      return -1;
  }
  const char *end = NULL;
  if (sodium_base642bin(out, max, s, slen, NULL, n, &end, sodium_base64_VARIANT_ORIGINAL) != 0)
    return -1;
  return end == s + slen ? 0 : -1;
}

char *jb_audit_base64(const unsigned char *in, size_t n) {
  size_t len = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
  char *out = malloc(len);
  if (out) sodium_bin2base64(out, len, in, n, sodium_base64_VARIANT_ORIGINAL);
  return out;
}

json_t *jb_audit_json_load(const char *buf, size_t len, size_t flags, json_error_t *je) {
  if (jb_json_depth(buf, len, JB_AUDIT_PARSE_MAX_DEPTH) > JB_AUDIT_PARSE_MAX_DEPTH) {
    memset(je, 0, sizeof *je);
    snprintf(je->text, sizeof je->text, "maximum parsing depth reached");
    return NULL;
  }
  return json_loadb(buf, len, JSON_REJECT_DUPLICATES | flags, je);
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
      json_array_foreach ((json_t *)v, i, m)
        if (check_value(m, depth + 1, err) < 0) return -1;
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

bool jb_audit_timestamp_ok(const char *t) {
  if (strlen(t) != JB_AUDIT_TS_LEN) return false;
  if (t[4] != '-' || t[7] != '-' || t[10] != 'T' || t[13] != ':' || t[16] != ':' || t[19] != '.' ||
      t[23] != 'Z')
    return false;
  if (!is_digits(t, 4) || !is_digits(t + 5, 2) || !is_digits(t + 8, 2) || !is_digits(t + 11, 2) ||
      !is_digits(t + 14, 2) || !is_digits(t + 17, 2) || !is_digits(t + 20, 3))
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
  if (!timestamp || !jb_audit_timestamp_ok(timestamp)) {
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
                        "operation", operation, "path", path, "timestamp", timestamp, "details", d);
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
    d = json_loadb((const char *)canonical + JB_AUDIT_DETAILS_OFFSET, len - JB_AUDIT_DETAILS_OFFSET,
                   JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, NULL);
  if (json_is_object(d)) return d;
  json_decref(d);
  return json_object();
}

/* --- hash, key id, signed entries --------------------------------------------------------- */

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
  if (jb_audit_entry_sign(&sg, seq, session, operation, path, timestamp, details, prev, sk, err) <
      0)
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

/* --- chain heads -------------------------------------------------------------------------- */

json_t *jb_audit_head_json(const struct jb_audit_head *h) {
  char hex[2 * JB_AUDIT_HASH_LEN + 1];
  jb_audit_hex(h->hash, JB_AUDIT_HASH_LEN, hex);
  json_t *o = json_pack("{s:I,s:s}", "seq", (json_int_t)h->seq, "hash", hex);
  if (o && h->key_id[0]) {
    char *sig = jb_audit_base64(h->signature, JB_AUDIT_SIG_LEN);
    if (!sig || json_object_set_new(o, "signature", json_string(sig)) < 0 ||
        json_object_set_new(o, "keyId", json_string(h->key_id)) < 0) {
      json_decref(o);
      o = NULL;
    }
    free(sig);
  }
  return o;
}

int jb_audit_head_parse(const char *s, struct jb_audit_head *h, jb_error *err) {
  memset(h, 0, sizeof *h);
  const char *colon = strchr(s, ':');
  if (!colon || colon == s || colon - s > 18 || !is_digits(s, (size_t)(colon - s)))
    return jb_fail(err, EINVAL, "head must be SEQ:HASH (decimal seq, 64 hex characters)");
  h->seq = strtoll(s, NULL, 10);
  if (h->seq < 1 || jb_audit_unhex(colon + 1, strlen(colon + 1), h->hash, JB_AUDIT_HASH_LEN) < 0)
    return jb_fail(err, EINVAL, "head must be SEQ:HASH (seq >= 1, 64 hex characters)");
  return 0;
}
