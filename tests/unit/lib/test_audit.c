/* test_audit.c — the audit chain without a database: canonical bytes (golden vectors
 * computed independently with Python's json + hashlib + cryptography), hashing, Ed25519
 * signing, export lines, every tamper class and reason of the verifier, and the key file. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/audit.h"
#include "lib/audit_private.h"
#include "lib/keyring.h"

/* --- golden vectors (seed = bytes 0..31) ---------------------------------------------------- */

static const char golden_canonical[] =
    "{\"details\":{\"decision\":\"approved\",\"nested\":{\"a\":\"tab\\there \\\"q\\\" \\\\\","
    "\"z\":[1,-2,null]},\"ok\":true,\"sha256\":"
    "\"abababababababababababababababababababababababababababababababab\",\"size\":12},"
    "\"operation\":\"write\",\"path\":\"/workspace/a b/\xc3\xa9.txt\",\"seq\":1,"
    "\"session\":\"job-1\",\"timestamp\":\"2026-01-02T03:04:05.678Z\"}";
static const char golden_hash[] =
    "b5ebee7184dc317bf497658b170b3af0c5ad3cb891b37e4f651b56b080a8ffde";
static const char golden_sig[] =
    "65daf79dc68ea984c0e3a87bc57c66e04ee8ae43a86cec4438304ee9bae29d35"
    "e5d4711633d66d0e38c534dd58fccb1d4eae9d1472fbf31d80e75f52de1fa408";
static const char golden_pk[] = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8";
static const char golden_key_id[] = "56475aa75463474c";
static const char golden_seal_canonical[] =
    "{\"details\":{\"entries\":1,\"head\":"
    "\"b5ebee7184dc317bf497658b170b3af0c5ad3cb891b37e4f651b56b080a8ffde\"},"
    "\"operation\":\"seal\",\"path\":null,\"seq\":2,\"session\":\"job-1\","
    "\"timestamp\":\"2026-01-02T03:04:06.000Z\"}";
static const char golden_seal_hash[] =
    "fd9e074f71cdef657a4ed7caf605446eeca9a1f2df0bba1256a8317216e49726";

static struct jb_keyring *key_a, *key_b;

static int setup(void **state) {
  unsigned char seed[32];
  for (int i = 0; i < 32; i++) seed[i] = (unsigned char)i;
  key_a = jb_keyring_from_seed(seed);
  memset(seed, 0x5a, sizeof seed);
  key_b = jb_keyring_from_seed(seed);
  return key_a && key_b ? 0 : -1;
}

static int teardown(void **state) {
  jb_keyring_free(key_a);
  jb_keyring_free(key_b);
  return 0;
}

static json_t *golden_details(void) {
  /* inserted in an order different from the canonical one on purpose */
  return json_pack("{s:I,s:s,s:s,s:b,s:{s:[I,I,n],s:s}}", "size", (json_int_t)12, "sha256",
                   "abababababababababababababababababababababababababababababababab", "decision",
                   "approved", "ok", 1, "nested", "z", (json_int_t)1, (json_int_t)-2, "a",
                   "tab\there \"q\" \\");
}

static void hex_of(const unsigned char *b, size_t n, char *out) { jb_audit_hex(b, n, out); }

static void canonical_golden(void **state) {
  json_t *d = golden_details();
  size_t len = 0;
  char *c = jb_audit_canonical(1, "job-1", "write", "/workspace/a b/\xc3\xa9.txt",
                               "2026-01-02T03:04:05.678Z", d, &len, NULL);
  assert_non_null(c);
  assert_string_equal(c, golden_canonical);
  assert_int_equal(len, strlen(golden_canonical));
  free(c);

  /* the same content built in another order gives the same bytes */
  json_t *d2 = json_pack(
      "{s:{s:s,s:[I,I,n]},s:b,s:s,s:s,s:I}", "nested", "a", "tab\there \"q\" \\", "z",
      (json_int_t)1, (json_int_t)-2, "ok", 1, "decision", "approved", "sha256",
      "abababababababababababababababababababababababababababababababab", "size", (json_int_t)12);
  assert_non_null(d2);
  c = jb_audit_canonical(1, "job-1", "write", "/workspace/a b/\xc3\xa9.txt",
                         "2026-01-02T03:04:05.678Z", d2, &len, NULL);
  assert_string_equal(c, golden_canonical);
  free(c);
  json_decref(d2);

  /* NULL path is JSON null, NULL details is {} */
  c = jb_audit_canonical(7, "s", "pause", NULL, "2026-01-02T03:04:05.678Z", NULL, &len, NULL);
  assert_string_equal(c,
                      "{\"details\":{},\"operation\":\"pause\",\"path\":null,\"seq\":7,"
                      "\"session\":\"s\",\"timestamp\":\"2026-01-02T03:04:05.678Z\"}");
  free(c);
  /* control characters: jansson's escapes (\uXXXX, upper case hex), "/" and DEL verbatim,
   * keys in byte order (U+00E9 after "k") — documented in api/audit.md */
  json_t *d3 = json_pack("{s:s,s:i}", "k", "a\x01\x1f/b\x7f", "\xc3\xa9", 1);
  c = jb_audit_canonical(1, "s", "read", NULL, "2026-01-02T03:04:05.678Z", d3, &len, NULL);
  assert_non_null(c);
  assert_non_null(strstr(c, "{\"details\":{\"k\":\"a\\u0001\\u001F/b\x7f\",\"\xc3\xa9\":1},"));
  free(c);
  json_decref(d3);
  json_decref(d);
}

static void canonical_refuses(void **state) {
  const char *ts = "2026-01-02T03:04:05.678Z";
  size_t len;
  jb_error err = {0};
  json_t *real = json_pack("{s:f}", "x", 1.5);
  assert_null(jb_audit_canonical(1, "s", "read", NULL, ts, real, &len, &err));
  assert_non_null(strstr(err.msg, "real"));
  json_decref(real);
  json_t *nested_real = json_pack("{s:[{s:f}]}", "a", "b", 2.0);
  assert_null(jb_audit_canonical(1, "s", "read", NULL, ts, nested_real, &len, NULL));
  json_decref(nested_real);
  json_t *nul = json_object();
  json_object_set_new(nul, "x", json_stringn("a\0b", 3));
  assert_null(jb_audit_canonical(1, "s", "read", NULL, ts, nul, &len, NULL));
  json_decref(nul);
  json_t *deep = json_object(), *cur = deep;
  for (int i = 0; i < JB_AUDIT_MAX_DEPTH + 1; i++) {
    json_t *n = json_object();
    json_object_set_new(cur, "d", n);
    cur = n;
  }
  assert_null(jb_audit_canonical(1, "s", "read", NULL, ts, deep, &len, &err));
  assert_non_null(strstr(err.msg, "deeper"));
  json_decref(deep);
  json_t *arr = json_array();
  assert_null(jb_audit_canonical(1, "s", "read", NULL, ts, arr, &len, NULL));
  json_decref(arr);
  assert_null(jb_audit_canonical(0, "s", "read", NULL, ts, NULL, &len, NULL));
  assert_null(jb_audit_canonical(1, "", "read", NULL, ts, NULL, &len, NULL));
  assert_null(jb_audit_canonical(1, "s\n", "read", NULL, ts, NULL, &len, NULL));
  assert_null(jb_audit_canonical(1, "s", "Read", NULL, ts, NULL, &len, NULL));
  assert_null(jb_audit_canonical(1, "s", "", NULL, ts, NULL, &len, NULL));
  const char *bad_ts[] = {"2026-01-02T03:04:05Z", "2026-01-02 03:04:05.678Z",
                          "2026-13-02T03:04:05.678Z", "2026-01-02T03:04:05.678+00:00", ""};
  for (size_t i = 0; i < sizeof bad_ts / sizeof bad_ts[0]; i++)
    assert_null(jb_audit_canonical(1, "s", "read", NULL, bad_ts[i], NULL, &len, NULL));
  char *longpath = malloc(JB_AUDIT_MAX_PATH + 2);
  memset(longpath, 'a', JB_AUDIT_MAX_PATH + 1);
  longpath[JB_AUDIT_MAX_PATH + 1] = '\0';
  assert_null(jb_audit_canonical(1, "s", "read", longpath, ts, NULL, &len, NULL));
  free(longpath);
  json_t *big = json_pack("{s:s%}", "x", "", (size_t)0);
  char *blob = malloc(JB_AUDIT_MAX_CANONICAL + 1);
  memset(blob, 'x', JB_AUDIT_MAX_CANONICAL);
  blob[JB_AUDIT_MAX_CANONICAL] = '\0';
  json_object_set_new(big, "x", json_string(blob));
  free(blob);
  assert_null(jb_audit_canonical(1, "s", "read", NULL, ts, big, &len, &err));
  json_decref(big);
}

/* jb_audit_entry_sign makes what jb_audit_entry_make does; jb_audit_canonical_details gives
 * back the details of the canonical bytes, and {} for bytes that state none. */
static void sign_and_details_of_canonical(void **state) {
  (void)state;
  json_t *d = golden_details();
  struct jb_audit_entry e;
  struct jb_audit_signed sg;
  assert_int_equal(
      jb_audit_entry_make(&e, 1, "job-1", "write", "/workspace/a b/\xc3\xa9.txt",
                          "2026-01-02T03:04:05.678Z", d, NULL, key_a->sk, key_a->pk, NULL),
      0);
  assert_int_equal(jb_audit_entry_sign(&sg, 1, "job-1", "write", "/workspace/a b/\xc3\xa9.txt",
                                       "2026-01-02T03:04:05.678Z", d, NULL, key_a->sk, NULL),
                   0);
  assert_int_equal(sg.canonical_len, e.canonical_len);
  assert_memory_equal(sg.canonical, e.canonical, e.canonical_len);
  assert_memory_equal(sg.hash, e.hash, 32);
  assert_memory_equal(sg.signature, e.signature, 64);
  json_t *back = jb_audit_canonical_details(sg.canonical, sg.canonical_len);
  assert_true(json_equal(back, d));
  json_decref(back);
  static const char *const none[] = {"", "{\"details\":", "{\"details\":[1]}",
                                     "{\"details\":{\"a\":1,\"a\":2}}", "{\"operation\":{}}"};
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
    json_t *x = jb_audit_canonical_details((const unsigned char *)none[i], strlen(none[i]));
    assert_true(json_is_object(x) && json_object_size(x) == 0);
    json_decref(x);
  }
  free(sg.canonical);
  jb_audit_entry_clear(&e);
  json_decref(d);
}

static void hash_sign_golden(void **state) {
  char hex[129];
  hex_of(key_a->pk, 32, hex);
  assert_string_equal(hex, golden_pk);
  assert_string_equal(key_a->key_id, golden_key_id);

  json_t *d = golden_details();
  struct jb_audit_entry e;
  assert_int_equal(
      jb_audit_entry_make(&e, 1, "job-1", "write", "/workspace/a b/\xc3\xa9.txt",
                          "2026-01-02T03:04:05.678Z", d, NULL, key_a->sk, key_a->pk, NULL),
      0);
  json_decref(d);
  hex_of(e.hash, 32, hex);
  assert_string_equal(hex, golden_hash);
  hex_of(e.signature, 64, hex);
  assert_string_equal(hex, golden_sig); /* Ed25519 is deterministic (RFC 8032) */
  assert_string_equal(e.key_id, golden_key_id);
  unsigned char zero[32] = {0};
  assert_memory_equal(e.prev_hash, zero, 32);

  json_t *sd = json_pack("{s:I,s:s}", "entries", (json_int_t)1, "head", golden_hash);
  struct jb_audit_entry s;
  assert_int_equal(jb_audit_entry_make(&s, 2, "job-1", "seal", NULL, "2026-01-02T03:04:06.000Z", sd,
                                       e.hash, key_a->sk, key_a->pk, NULL),
                   0);
  json_decref(sd);
  assert_string_equal((char *)s.canonical, golden_seal_canonical);
  hex_of(s.hash, 32, hex);
  assert_string_equal(hex, golden_seal_hash);

  /* the chain of both verifies, sealed */
  struct jb_audit_entry chain[2] = {e, s};
  struct jb_audit_pubkey k = {0};
  memcpy(k.public_key, key_a->pk, 32);
  jb_audit_key_id(k.public_key, k.key_id);
  struct jb_audit_result r;
  struct jb_audit_verify_opts o = {.require_seal = true};
  assert_int_equal(jb_audit_verify(chain, 2, &k, 1, &o, &r), 0);
  assert_true(r.ok);
  assert_true(r.sealed);
  assert_int_equal(r.head.seq, 2);
  assert_string_equal(r.session, "job-1");
  jb_audit_entry_clear(&e);
  jb_audit_entry_clear(&s);
}

/* --- in-memory chains ------------------------------------------------------------------------ */

#define N 10 /* entries 1..9 and the seal at 10 */

struct chain {
  char *lines[N + 4];
  size_t n;
  struct jb_audit_pubkey keys[2];
  size_t nkeys;
};

static char *make_line(const struct jb_keyring *k, long long seq, const char *session,
                       const char *op, const char *path, json_t *details,
                       const unsigned char prev[32], unsigned char hash_out[32]) {
  struct jb_audit_entry e;
  char ts[32];
  snprintf(ts, sizeof ts, "2026-01-02T03:04:%02lld.%03lldZ", seq % 60, seq % 1000);
  assert_int_equal(
      jb_audit_entry_make(&e, seq, session, op, path, ts, details, prev, k->sk, k->pk, NULL), 0);
  if (hash_out) memcpy(hash_out, e.hash, 32);
  char *line = jb_audit_entry_line(&e);
  assert_non_null(line);
  jb_audit_entry_clear(&e);
  return line;
}

static void chain_build(struct chain *c, bool seal) {
  memset(c, 0, sizeof *c);
  unsigned char prev[32] = {0}, h[32];
  for (long long s = 1; s < N; s++) {
    json_t *d = json_pack("{s:I,s:b,s:s}", "size", (json_int_t)(s * 100), "ok", 1, "decision",
                          s % 2 ? "auto" : "approved");
    char path[32];
    snprintf(path, sizeof path, "/workspace/f%lld", s);
    c->lines[c->n++] = make_line(key_a, s, "job-7", s % 3 ? "write" : "read", path, d, prev, h);
    json_decref(d);
    memcpy(prev, h, 32);
  }
  if (seal) {
    char hex[65];
    jb_audit_hex(prev, 32, hex);
    json_t *d = json_pack("{s:I,s:s}", "entries", (json_int_t)(N - 1), "head", hex);
    c->lines[c->n++] = make_line(key_a, N, "job-7", "seal", NULL, d, prev, NULL);
    json_decref(d);
  }
  memset(c->keys, 0, sizeof c->keys);
  memcpy(c->keys[0].public_key, key_a->pk, 32);
  memcpy(c->keys[0].key_id, key_a->key_id, 17);
  c->nkeys = 1;
}

static void chain_free(struct chain *c) {
  for (size_t i = 0; i < c->n; i++) free(c->lines[i]);
}

/* Verifies the lines of `c` as a file would be: joined, split, parsed. */
static int verify(const struct chain *c, const struct jb_audit_verify_opts *o,
                  struct jb_audit_result *r) {
  size_t total = 0;
  for (size_t i = 0; i < c->n; i++) total += strlen(c->lines[i]);
  char *buf = malloc(total + 1), *p = buf;
  for (size_t i = 0; i < c->n; i++) p = stpcpy(p, c->lines[i]);
  struct jb_audit_entry *v = NULL;
  size_t n = 0;
  assert_int_equal(jb_audit_parse_lines(buf, total, 1000, &v, &n, NULL), 0);
  int rc = jb_audit_verify(v, n, c->keys, c->nkeys, o, r);
  jb_audit_entries_free(v, n);
  /* the streaming verifier (jailboxctl: one line at a time) comes to the same result */
  FILE *in = fmemopen(buf, total ? total : 1, "r");
  assert_non_null(in);
  if (!total) getc(in); /* fmemopen needs a size of at least 1: an empty stream */
  struct jb_audit_result fr;
  assert_int_equal(jb_audit_verify_file(in, c->keys, c->nkeys, o, &fr, NULL), rc);
  fclose(in);
  assert_int_equal(fr.ok, r->ok);
  assert_int_equal(fr.entries, r->entries);
  assert_int_equal(fr.first_bad_seq, r->first_bad_seq);
  assert_int_equal(fr.reason, r->reason);
  assert_int_equal(fr.head.seq, r->head.seq);
  assert_string_equal(fr.detail, r->detail);
  /* and so does the streaming verifier without its exact-form reader */
  struct jb_audit_verify_opts full = o ? *o : (struct jb_audit_verify_opts){0};
  full.full_parse = true;
  in = fmemopen(buf, total ? total : 1, "r");
  assert_non_null(in);
  if (!total) getc(in);
  assert_int_equal(jb_audit_verify_file(in, c->keys, c->nkeys, &full, &fr, NULL), rc);
  fclose(in);
  free(buf);
  assert_int_equal(fr.ok, r->ok);
  assert_int_equal(fr.entries, r->entries);
  assert_int_equal(fr.first_bad_seq, r->first_bad_seq);
  assert_int_equal(fr.reason, r->reason);
  assert_int_equal(fr.head.seq, r->head.seq);
  assert_memory_equal(fr.head.hash, r->head.hash, 32);
  assert_int_equal(fr.sealed, r->sealed);
  assert_string_equal(fr.session, r->session);
  assert_string_equal(fr.detail, r->detail);
  return rc;
}

/* Streams `text` (`len` bytes) through jb_audit_verify_file with the keys of `c`, with and
 * without its exact-form reader: both must give the same result, which lands in `r`. */
static int verify_text(const struct chain *c, const char *text, size_t len,
                       struct jb_audit_result *r) {
  FILE *in = fmemopen((void *)text, len, "r");
  assert_non_null(in);
  int rc = jb_audit_verify_file(in, c->keys, c->nkeys, NULL, r, NULL);
  fclose(in);
  struct jb_audit_verify_opts full = {.full_parse = true};
  struct jb_audit_result fr;
  in = fmemopen((void *)text, len, "r");
  assert_non_null(in);
  assert_int_equal(jb_audit_verify_file(in, c->keys, c->nkeys, &full, &fr, NULL), rc);
  fclose(in);
  assert_int_equal(fr.ok, r->ok);
  assert_int_equal(fr.entries, r->entries);
  assert_int_equal(fr.first_bad_seq, r->first_bad_seq);
  assert_int_equal(fr.reason, r->reason);
  assert_int_equal(fr.head.seq, r->head.seq);
  assert_int_equal(fr.sealed, r->sealed);
  assert_string_equal(fr.session, r->session);
  assert_string_equal(fr.detail, r->detail);
  return rc;
}

/* The streaming verifier's own cases: what only a file has (blank lines, CRLF, NUL bytes,
 * a line over the limit) and the verdict settled early with the rest only counted. */
static void stream_verify(void **state) {
  (void)state;
  struct chain c;
  chain_build(&c, true);
  size_t total = 0;
  for (size_t i = 0; i < c.n; i++) total += strlen(c.lines[i]) + 8;
  size_t cap = total + JB_AUDIT_MAX_LINE + 64;
  char *buf = malloc(cap), *p = buf;
  /* blank lines, spaces and CRLF endings are no entries */
  for (size_t i = 0; i < c.n; i++) {
    size_t l = strlen(c.lines[i]);
    memcpy(p, c.lines[i], l - 1);
    p += l - 1;
    p = stpcpy(p, i % 2 ? "\r\n" : "\n  \t\n\n");
  }
  struct jb_audit_result r;
  assert_int_equal(verify_text(&c, buf, (size_t)(p - buf), &r), 0);
  assert_int_equal(r.entries, N);
  assert_true(r.sealed);
  /* the last line without its newline still counts */
  p = buf;
  for (size_t i = 0; i < c.n; i++) p = stpcpy(p, c.lines[i]);
  assert_int_equal(verify_text(&c, buf, (size_t)(p - buf) - 1, &r), 0);
  assert_int_equal(r.entries, N);
  /* a NUL byte inside line 3: malformed there; the lines after it are still counted */
  p = buf;
  for (size_t i = 0; i < c.n; i++) p = stpcpy(p, c.lines[i]);
  char *third = buf + strlen(c.lines[0]) + strlen(c.lines[1]);
  third[10] = '\0';
  assert_int_equal(verify_text(&c, buf, (size_t)(p - buf), &r), 1);
  assert_int_equal(r.first_bad_seq, 3);
  assert_int_equal(r.reason, JB_AUDIT_MALFORMED);
  assert_int_equal(r.entries, N);
  /* a line over JB_AUDIT_MAX_LINE at position 2: malformed, the rest of it skipped */
  p = stpcpy(buf, c.lines[0]);
  memset(p, 'x', JB_AUDIT_MAX_LINE + 10);
  p += JB_AUDIT_MAX_LINE + 10;
  *p++ = '\n';
  for (size_t i = 1; i < c.n; i++) p = stpcpy(p, c.lines[i]);
  assert_int_equal(verify_text(&c, buf, (size_t)(p - buf), &r), 1);
  assert_int_equal(r.first_bad_seq, 2);
  assert_int_equal(r.reason, JB_AUDIT_MALFORMED);
  assert_non_null(strstr(r.detail, "longer than the limit"));
  assert_int_equal(r.entries, N + 1);
  /* entry 3 moved to the very end: told from a gap only by reading on to the last line */
  p = buf;
  for (size_t i = 0; i < c.n; i++)
    if (i != 2) p = stpcpy(p, c.lines[i]);
  p = stpcpy(p, c.lines[2]);
  assert_int_equal(verify_text(&c, buf, (size_t)(p - buf), &r), 1);
  assert_int_equal(r.first_bad_seq, 3);
  assert_int_equal(r.reason, JB_AUDIT_REORDERED);
  free(buf);
  chain_free(&c);
}

#define EXPECT_BAD(c, opts, seq, why)                                                   \
  do {                                                                                  \
    struct jb_audit_result r_;                                                          \
    assert_int_equal(verify((c), (opts), &r_), 1);                                      \
    assert_false(r_.ok);                                                                \
    if (r_.first_bad_seq != (seq) || r_.reason != (why))                                \
      fail_msg("got seq %lld reason '%s' (%s), wanted seq %lld '%s'", r_.first_bad_seq, \
               jb_audit_reason_name(r_.reason), r_.detail, (long long)(seq),            \
               jb_audit_reason_name(why));                                              \
  } while (0)

/* Replaces member `k` of line `i` with `v` (stolen); NULL `v` removes it. */
static void line_set(struct chain *c, size_t i, const char *k, json_t *v) {
  json_t *o = json_loads(c->lines[i], JSON_REJECT_DUPLICATES, NULL);
  assert_non_null(o);
  if (v)
    json_object_set_new(o, k, v);
  else
    json_object_del(o, k);
  free(c->lines[i]);
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  assert_int_equal(asprintf(&c->lines[i], "%s\n", s) > 0, 1);
  free(s);
}

static json_t *line_get(const struct chain *c, size_t i, const char *k) {
  json_t *o = json_loads(c->lines[i], 0, NULL);
  json_t *v = json_deep_copy(json_object_get(o, k));
  json_decref(o);
  return v;
}

static void intact_chain(void **state) {
  struct chain c;
  chain_build(&c, true);
  struct jb_audit_result r;
  assert_int_equal(verify(&c, NULL, &r), 0);
  assert_true(r.ok);
  assert_int_equal(r.entries, N);
  assert_int_equal(r.head.seq, N);
  assert_true(r.sealed);
  assert_int_equal(r.first_bad_seq, 0);

  /* with every option satisfied */
  struct jb_audit_head known = {.seq = 4}, stored = {.seq = N};
  struct jb_audit_verify_opts all = {
      .session = "job-7", .known_head = &known, .stored_head = &stored, .require_seal = true};
  json_t *h4 = line_get(&c, 3, "hash");
  char spec[100];
  snprintf(spec, sizeof spec, "4:%s", json_string_value(h4));
  json_decref(h4);
  assert_int_equal(jb_audit_head_parse(spec, &known, NULL), 0);
  memcpy(stored.hash, r.head.hash, 32);
  assert_int_equal(verify(&c, &all, &r), 0);

  /* the result as JSON */
  json_t *j = jb_audit_result_json(&r);
  assert_true(json_is_true(json_object_get(j, "ok")));
  assert_int_equal(json_integer_value(json_object_get(j, "entries")), N);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "head"), "seq")), N);
  assert_true(json_is_null(json_object_get(j, "firstBadSeq")));
  assert_true(json_is_null(json_object_get(j, "reason")));
  json_decref(j);

  /* an empty chain is intact unless something says it should not be empty */
  struct jb_audit_result e;
  assert_int_equal(jb_audit_verify(NULL, 0, c.keys, 1, NULL, &e), 0);
  struct jb_audit_verify_opts sealed = {.require_seal = true};
  assert_int_equal(jb_audit_verify(NULL, 0, c.keys, 1, &sealed, &e), 1);
  assert_int_equal(e.reason, JB_AUDIT_UNSEALED);
  assert_int_equal(e.first_bad_seq, 1);
  chain_free(&c);
}

static void tamper_content(void **state) {
  struct chain c;
  /* a stated field changed, canonical left alone */
  const char *fields[] = {"path", "operation", "timestamp", "session"};
  for (size_t f = 0; f < 4; f++) {
    chain_build(&c, true);
    line_set(&c, 4, fields[f], json_string(f == 2 ? "2027-01-01T00:00:00.000Z" : "x"));
    EXPECT_BAD(&c, NULL, 5, JB_AUDIT_CONTENT_CHANGED);
    chain_free(&c);
  }
  chain_build(&c, true);
  line_set(&c, 4, "seq", json_integer(55));
  EXPECT_BAD(&c, NULL, 5, JB_AUDIT_CONTENT_CHANGED);
  chain_free(&c);

  chain_build(&c, true);
  line_set(&c, 4, "path", json_null());
  EXPECT_BAD(&c, NULL, 5, JB_AUDIT_CONTENT_CHANGED);
  chain_free(&c);

  /* a stated string that holds "\u0000" after its signed value: C strings would end at the
   * NUL and see the signed value, a reader of the JSON sees more ("/workspace/f5\0/etc") */
  const char *nul_fields[] = {"path", "operation", "session", "timestamp"};
  for (size_t f = 0; f < 4; f++) {
    chain_build(&c, true);
    json_t *v = line_get(&c, 4, nul_fields[f]);
    size_t vl = json_string_length(v);
    char *grown = malloc(vl + 6);
    memcpy(grown, json_string_value(v), vl);
    memcpy(grown + vl, "\0/etc", 5);
    line_set(&c, 4, nul_fields[f], json_stringn(grown, vl + 5));
    free(grown);
    json_decref(v);
    EXPECT_BAD(&c, NULL, 5, JB_AUDIT_MALFORMED);
    chain_free(&c);
  }

  /* a details value changed, and one turned into a real with the same value */
  chain_build(&c, true);
  json_t *d = line_get(&c, 6, "details");
  json_object_set_new(d, "decision", json_string("approved_by_someone"));
  line_set(&c, 6, "details", d);
  EXPECT_BAD(&c, NULL, 7, JB_AUDIT_CONTENT_CHANGED);
  chain_free(&c);
  chain_build(&c, true);
  d = line_get(&c, 6, "details");
  json_object_set_new(d, "size", json_real(700.0));
  line_set(&c, 6, "details", d);
  EXPECT_BAD(&c, NULL, 7, JB_AUDIT_CONTENT_CHANGED);
  chain_free(&c);

  /* the canonical bytes changed (one byte), the hash, the prevHash */
  chain_build(&c, true);
  json_t *cb = line_get(&c, 2, "canonical");
  unsigned char raw[1024];
  size_t rawlen = 0;
  assert_int_equal(sodium_base642bin(raw, sizeof raw, json_string_value(cb), json_string_length(cb),
                                     NULL, &rawlen, NULL, sodium_base64_VARIANT_ORIGINAL),
                   0);
  json_decref(cb);
  char *p = memmem(raw, rawlen, "f3", 2);
  assert_non_null(p);
  p[1] = '4';
  char b64[2048];
  sodium_bin2base64(b64, sizeof b64, raw, rawlen, sodium_base64_VARIANT_ORIGINAL);
  line_set(&c, 2, "canonical", json_string(b64));
  EXPECT_BAD(&c, NULL, 3, JB_AUDIT_CONTENT_CHANGED);
  chain_free(&c);

  chain_build(&c, true);
  line_set(&c, 8, "hash", line_get(&c, 7, "hash"));
  EXPECT_BAD(&c, NULL, 9, JB_AUDIT_CONTENT_CHANGED);
  chain_free(&c);
  chain_build(&c, true);
  line_set(&c, 8, "prevHash", line_get(&c, 6, "hash"));
  EXPECT_BAD(&c, NULL, 9, JB_AUDIT_CONTENT_CHANGED);
  chain_free(&c);
}

static void reordered_keys_still_verify(void **state) {
  struct chain c;
  chain_build(&c, true);
  /* rebuild line 3 with members and details keys in reverse order: same values */
  json_t *o = json_loads(c.lines[2], 0, NULL);
  const char *order[] = {"canonical", "keyId", "signature", "hash",    "prevHash", "details",
                         "timestamp", "path",  "operation", "session", "seq"};
  json_t *d = json_object_get(o, "details"), *rd = json_object();
  json_object_set(rd, "ok", json_object_get(d, "ok"));
  json_object_set(rd, "size", json_object_get(d, "size"));
  json_object_set(rd, "decision", json_object_get(d, "decision"));
  char *s = strdup("{");
  for (size_t i = 0; i < 11; i++) {
    char *v = json_dumps(strcmp(order[i], "details") ? json_object_get(o, order[i]) : rd,
                         JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    char *n;
    assert_true(asprintf(&n, "%s%s\"%s\" : %s", s, i ? ", " : "", order[i], v) > 0);
    free(s);
    free(v);
    s = n;
  }
  free(c.lines[2]);
  assert_true(asprintf(&c.lines[2], "%s}\n", s) > 0);
  free(s);
  json_decref(rd);
  json_decref(o);
  assert_non_null(strstr(c.lines[2], "{\"canonical\""));
  struct jb_audit_result r;
  assert_int_equal(verify(&c, NULL, &r), 0);
  chain_free(&c);
}

static void tamper_signature_and_keys(void **state) {
  struct chain c;
  /* signature of another entry */
  chain_build(&c, true);
  line_set(&c, 3, "signature", line_get(&c, 4, "signature"));
  EXPECT_BAD(&c, NULL, 4, JB_AUDIT_BAD_SIGNATURE);
  chain_free(&c);
  /* a key id nobody published */
  chain_build(&c, true);
  line_set(&c, 3, "keyId", json_string("0123456789abcdef"));
  EXPECT_BAD(&c, NULL, 4, JB_AUDIT_UNKNOWN_KEY);
  chain_free(&c);

  /* altered entry 5 re-signed with a fresh key: under the fresh key's own id … */
  unsigned char prev[32];
  chain_build(&c, true);
  json_t *ph = line_get(&c, 3, "hash");
  assert_int_equal(sodium_hex2bin(prev, 32, json_string_value(ph), 64, NULL, NULL, NULL), 0);
  json_decref(ph);
  json_t *d = json_pack("{s:I,s:b,s:s}", "size", (json_int_t)1, "ok", 1, "decision", "auto");
  free(c.lines[4]);
  c.lines[4] = make_line(key_b, 5, "job-7", "read", "/workspace/f5", d, prev, NULL);
  EXPECT_BAD(&c, NULL, 5, JB_AUDIT_UNKNOWN_KEY);
  /* … under the real key's id … */
  line_set(&c, 4, "keyId", json_string(key_a->key_id));
  EXPECT_BAD(&c, NULL, 5, JB_AUDIT_BAD_SIGNATURE);
  /* … and with the fresh key published too: the next link breaks */
  line_set(&c, 4, "keyId", json_string(key_b->key_id));
  memcpy(c.keys[1].public_key, key_b->pk, 32);
  memcpy(c.keys[1].key_id, key_b->key_id, 17);
  c.nkeys = 2;
  EXPECT_BAD(&c, NULL, 6, JB_AUDIT_BROKEN_LINK);
  json_decref(d);
  chain_free(&c);

  /* rotation: entries signed by two published keys verify */
  chain_build(&c, false);
  unsigned char h[32];
  ph = line_get(&c, N - 2, "hash");
  sodium_hex2bin(prev, 32, json_string_value(ph), 64, NULL, NULL, NULL);
  json_decref(ph);
  c.lines[c.n++] = make_line(key_b, N, "job-7", "resume", NULL, NULL, prev, h);
  memcpy(c.keys[1].public_key, key_b->pk, 32);
  memcpy(c.keys[1].key_id, key_b->key_id, 17);
  c.nkeys = 2;
  struct jb_audit_result r;
  assert_int_equal(verify(&c, NULL, &r), 0);
  c.nkeys = 1; /* without the new key published */
  EXPECT_BAD(&c, NULL, N, JB_AUDIT_UNKNOWN_KEY);
  /* key_a retired when entry N was made (entry N - 1 is before, at 03:04:09.009Z): intact */
  c.nkeys = 2;
  snprintf(c.keys[0].retired_at, sizeof c.keys[0].retired_at, "2026-01-02T03:04:10.010Z");
  assert_int_equal(verify(&c, NULL, &r), 0);
  /* retired one millisecond after entry 3 was signed: entry 4 on was signed after it */
  snprintf(c.keys[0].retired_at, sizeof c.keys[0].retired_at, "2026-01-02T03:04:03.004Z");
  EXPECT_BAD(&c, NULL, 4, JB_AUDIT_RETIRED_KEY);
  /* retired exactly at entry 3's timestamp: entry 3 is already too late */
  snprintf(c.keys[0].retired_at, sizeof c.keys[0].retired_at, "2026-01-02T03:04:03.003Z");
  EXPECT_BAD(&c, NULL, 3, JB_AUDIT_RETIRED_KEY);
  assert_string_equal(jb_audit_reason_name(JB_AUDIT_RETIRED_KEY), "retired key");
  chain_free(&c);
}

static void remove_line(struct chain *c, size_t i) {
  free(c->lines[i]);
  memmove(&c->lines[i], &c->lines[i + 1], (c->n - i - 1) * sizeof c->lines[0]);
  c->n--;
}

static void tamper_order(void **state) {
  struct chain c;
  /* a middle entry deleted */
  chain_build(&c, true);
  remove_line(&c, 4);
  EXPECT_BAD(&c, NULL, 5, JB_AUDIT_GAP);
  chain_free(&c);
  /* deleted, and the later entries' stated seq renumbered */
  chain_build(&c, true);
  remove_line(&c, 4);
  for (size_t i = 4; i < c.n; i++) line_set(&c, i, "seq", json_integer((json_int_t)i + 1));
  EXPECT_BAD(&c, NULL, 5, JB_AUDIT_GAP);
  chain_free(&c);
  /* two entries swapped */
  chain_build(&c, true);
  char *t = c.lines[3];
  c.lines[3] = c.lines[6];
  c.lines[6] = t;
  EXPECT_BAD(&c, NULL, 4, JB_AUDIT_REORDERED);
  chain_free(&c);
  /* adjacent swap */
  chain_build(&c, true);
  t = c.lines[7];
  c.lines[7] = c.lines[8];
  c.lines[8] = t;
  EXPECT_BAD(&c, NULL, 8, JB_AUDIT_REORDERED);
  chain_free(&c);
  /* an entry repeated */
  chain_build(&c, true);
  free(c.lines[5]);
  c.lines[5] = strdup(c.lines[4]);
  EXPECT_BAD(&c, NULL, 6, JB_AUDIT_REORDERED);
  chain_free(&c);
  /* the stated prevHash and hash of a foreign chain spliced in: broken link */
  chain_build(&c, true);
  unsigned char other[32];
  memset(other, 7, 32);
  free(c.lines[5]);
  c.lines[5] = make_line(key_a, 6, "job-7", "read", "/x", NULL, other, NULL);
  EXPECT_BAD(&c, NULL, 6, JB_AUDIT_BROKEN_LINK);
  chain_free(&c);
  /* an entry of another session */
  chain_build(&c, true);
  free(c.lines[0]);
  c.lines[0] = make_line(key_a, 1, "job-8", "read", "/x", NULL, NULL, NULL);
  struct jb_audit_verify_opts o = {.session = "job-7"};
  EXPECT_BAD(&c, &o, 1, JB_AUDIT_WRONG_SESSION);
  EXPECT_BAD(&c, NULL, 2, JB_AUDIT_WRONG_SESSION); /* session taken from the first entry */
  chain_free(&c);
}

static void tamper_truncation(void **state) {
  struct chain c;
  chain_build(&c, true);
  struct jb_audit_result full;
  assert_int_equal(verify(&c, NULL, &full), 0);
  struct jb_audit_head stored = full.head, kept = {0};
  json_t *h = line_get(&c, 7, "hash");
  char spec[100];
  snprintf(spec, sizeof spec, "8:%s", json_string_value(h));
  json_decref(h);
  assert_int_equal(jb_audit_head_parse(spec, &kept, NULL), 0);

  /* the last entries deleted */
  remove_line(&c, c.n - 1);
  remove_line(&c, c.n - 1);
  remove_line(&c, c.n - 1);
  struct jb_audit_result r;
  assert_int_equal(verify(&c, NULL, &r), 0); /* nothing tells a prefix from a whole */
  struct jb_audit_verify_opts with_kept = {.known_head = &kept};
  EXPECT_BAD(&c, &with_kept, 8, JB_AUDIT_TRUNCATED);
  struct jb_audit_verify_opts with_stored = {.stored_head = &stored};
  EXPECT_BAD(&c, &with_stored, 8, JB_AUDIT_TRUNCATED);
  struct jb_audit_verify_opts ended = {.require_seal = true};
  EXPECT_BAD(&c, &ended, 8, JB_AUDIT_UNSEALED);

  /* everything deleted */
  while (c.n) remove_line(&c, 0);
  EXPECT_BAD(&c, &with_stored, 1, JB_AUDIT_TRUNCATED);
  EXPECT_BAD(&c, &with_kept, 1, JB_AUDIT_TRUNCATED);
  chain_free(&c);

  /* a kept head from another history */
  chain_build(&c, true);
  kept.hash[0] ^= 1;
  EXPECT_BAD(&c, &with_kept, 8, JB_AUDIT_HEAD_MISMATCH);
  /* entries past the stored head */
  stored.seq = 6;
  EXPECT_BAD(&c, &with_stored, 7, JB_AUDIT_HEAD_MISMATCH);
  chain_free(&c);

  /* unsealed, then an entry after the seal */
  chain_build(&c, false);
  EXPECT_BAD(&c, &ended, N, JB_AUDIT_UNSEALED);
  chain_free(&c);
  chain_build(&c, true);
  json_t *sh = line_get(&c, N - 1, "hash");
  unsigned char prev[32];
  sodium_hex2bin(prev, 32, json_string_value(sh), 64, NULL, NULL, NULL);
  json_decref(sh);
  c.lines[c.n++] = make_line(key_a, N + 1, "job-7", "write", "/late", NULL, prev, NULL);
  EXPECT_BAD(&c, NULL, N + 1, JB_AUDIT_AFTER_SEAL);
  chain_free(&c);
  /* a seal that states the wrong count */
  chain_build(&c, false);
  sh = line_get(&c, N - 2, "hash");
  sodium_hex2bin(prev, 32, json_string_value(sh), 64, NULL, NULL, NULL);
  json_t *d = json_pack("{s:I,s:O}", "entries", (json_int_t)3, "head", sh);
  c.lines[c.n++] = make_line(key_a, N, "job-7", "seal", NULL, d, prev, NULL);
  json_decref(d);
  json_decref(sh);
  EXPECT_BAD(&c, NULL, N, JB_AUDIT_CONTENT_CHANGED);
  chain_free(&c);
}

static void malformed_lines(void **state) {
  struct chain c;
  chain_build(&c, true);
  free(c.lines[2]);
  c.lines[2] = strdup("{\"seq\":3,\"seq\":3}\n"); /* duplicate key */
  EXPECT_BAD(&c, NULL, 3, JB_AUDIT_MALFORMED);
  free(c.lines[2]);
  c.lines[2] = strdup("not json\n");
  EXPECT_BAD(&c, NULL, 3, JB_AUDIT_MALFORMED);
  chain_free(&c);
  chain_build(&c, true);
  line_set(&c, 2, "approvedBy", json_string("buyer")); /* unknown member */
  EXPECT_BAD(&c, NULL, 3, JB_AUDIT_MALFORMED);
  chain_free(&c);
  chain_build(&c, true);
  line_set(&c, 2, "signature", NULL);
  EXPECT_BAD(&c, NULL, 3, JB_AUDIT_MALFORMED);
  chain_free(&c);
  chain_build(&c, true);
  line_set(&c, 2, "canonical", json_string("!!!"));
  EXPECT_BAD(&c, NULL, 3, JB_AUDIT_MALFORMED);
  chain_free(&c);
  chain_build(&c, true);
  line_set(&c, 2, "hash", json_string("abcd"));
  EXPECT_BAD(&c, NULL, 3, JB_AUDIT_MALFORMED);
  chain_free(&c);

  /* a member name of terminal escapes (ESC[2K, CR: "erase the line, print a fake verdict")
   * or cut inside a UTF-8 character must reach the detail as printable ASCII, and the result
   * must still serialise (jailboxctl --json) */
  const char *names[] = {"\x1b[2K\rintact: 9 entries, session s\x1b[8m",
                         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9", "\xc2\x9b\x33\x31m"};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    chain_build(&c, true);
    line_set(&c, 2, names[k], json_integer(1));
    struct jb_audit_result r;
    assert_int_equal(verify(&c, NULL, &r), 1);
    assert_int_equal(r.reason, JB_AUDIT_MALFORMED);
    for (const char *q = r.detail; *q; q++)
      if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
        fail_msg("detail holds byte 0x%02x: %s", (unsigned char)*q, r.detail);
    assert_non_null(strstr(r.detail, "unknown member"));
    json_t *j = jb_audit_result_json(&r);
    assert_non_null(j);
    json_decref(j);
    chain_free(&c);
  }
  char q[64];
  jb_audit_quote(q, sizeof q,
                 "a\x1b\x7f\xc3\xa9"
                 "b",
                 100);
  assert_string_equal(q, "a\\x1b\\x7f\\xc3\\xa9b");
  jb_audit_quote(q, 6, "\x1b\x1b", 100); /* an escape that does not fit is left out whole */
  assert_string_equal(q, "\\x1b");

  /* round trip keeps every field */
  chain_build(&c, true);
  struct jb_audit_entry e;
  assert_int_equal(jb_audit_entry_parse_line(&e, c.lines[0], strlen(c.lines[0]), NULL), 0);
  char *again = jb_audit_entry_line(&e);
  assert_string_equal(again, c.lines[0]);
  assert_int_equal(e.seq, 1);
  assert_string_equal(e.path, "/workspace/f1");
  free(again);
  jb_audit_entry_clear(&e);
  /* blank lines and CRLF are fine */
  char *buf;
  assert_true(asprintf(&buf, "\n%s\r\n  \n%s", c.lines[0], c.lines[1]) > 0);
  struct jb_audit_entry *v;
  size_t n;
  assert_int_equal(jb_audit_parse_lines(buf, strlen(buf), 10, &v, &n, NULL), 0);
  assert_int_equal(n, 2);
  assert_false(v[0].malformed);
  assert_false(v[1].malformed);
  jb_audit_entries_free(v, n);
  assert_int_equal(jb_audit_parse_lines(buf, strlen(buf), 1, &v, &n, NULL), -1);
  free(buf);
  chain_free(&c);
}

/* --- the streaming verifier's exact-form reader --------------------------------------------- */

/* A line stating `stated` (its members before prevHash, as text) whose canonical bytes are
 * `canonical` verbatim, chained after `prev` and signed with key_a: for lines the exporter
 * would not write. *hash_out (when given) receives its hash. New string. */
static char *signed_line(const char *stated, const char *canonical, const unsigned char prev[32],
                         unsigned char hash_out[32]) {
  unsigned char h[32], sig[64];
  size_t cl = strlen(canonical);
  jb_audit_hash((const unsigned char *)canonical, cl, prev, h);
  crypto_sign_detached(sig, NULL, h, 32, key_a->sk);
  char ph[65], hh[65], sb[89], cb[4096];
  jb_audit_hex(prev, 32, ph);
  jb_audit_hex(h, 32, hh);
  sodium_bin2base64(sb, sizeof sb, sig, 64, sodium_base64_VARIANT_ORIGINAL);
  assert_true(sodium_base64_ENCODED_LEN(cl, sodium_base64_VARIANT_ORIGINAL) <= sizeof cb);
  sodium_bin2base64(cb, sizeof cb, (const unsigned char *)canonical, cl,
                    sodium_base64_VARIANT_ORIGINAL);
  char *line;
  assert_true(asprintf(&line,
                       "{%s,\"prevHash\":\"%s\",\"hash\":\"%s\",\"signature\":\"%s\","
                       "\"keyId\":\"%s\",\"canonical\":\"%s\"}\n",
                       stated, ph, hh, sb, key_a->key_id, cb) > 0);
  if (hash_out) memcpy(hash_out, h, 32);
  return line;
}

/* A chain of key_a's key holding the `n` given lines (taken). */
static void chain_of(struct chain *c, char **lines, size_t n) {
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < n; i++) c->lines[c->n++] = lines[i];
  memcpy(c->keys[0].public_key, key_a->pk, 32);
  memcpy(c->keys[0].key_id, key_a->key_id, 17);
  c->nkeys = 1;
}

/* Replaces the first `from` in *line with `to`. */
static void line_replace(char **line, const char *from, const char *to) {
  char *at = strstr(*line, from);
  assert_non_null(at);
  char *n;
  assert_true(asprintf(&n, "%.*s%s%s", (int)(at - *line), *line, to, at + strlen(from)) > 0);
  free(*line);
  *line = n;
}

#define TS "\"2026-01-02T03:04:05.678Z\""
/* the stated members and canonical bytes of entry 1 as the exporter writes them */
#define STATED_OK                                                                      \
  "\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":\"/workspace/a\"," \
  "\"timestamp\":" TS ",\"details\":{\"ok\":true,\"size\":1}"
#define CANON_OK                                                                             \
  "{\"details\":{\"ok\":true,\"size\":1},\"operation\":\"write\",\"path\":\"/workspace/a\"," \
  "\"seq\":1,\"session\":\"job-7\",\"timestamp\":" TS "}"

/* Verifies the one-line chain `line` (taken) three ways (verify: the full parse, the streaming
 * verifier, the streaming verifier without its exact-form reader) and checks the shared verdict. */
static void expect_one(char *line, int want_rc, enum jb_audit_reason want) {
  struct chain c;
  chain_of(&c, &line, 1);
  struct jb_audit_result r;
  int rc = verify(&c, NULL, &r);
  if (rc != want_rc || r.reason != want)
    fail_msg("line %s: got %d '%s' (%s), wanted %d '%s'", line, rc, jb_audit_reason_name(r.reason),
             r.detail, want_rc, jb_audit_reason_name(want));
  chain_free(&c);
}

/* Lines near the exporter's form: whatever the exact-form reader takes or leaves, the verdict
 * is the full parse's (verify compares them). */
static void exact_form_edges(void **state) {
  (void)state;
  static const unsigned char zero[32];
  static const struct {
    const char *stated, *canonical;
    int rc;
    enum jb_audit_reason why;
  } cases[] = {
      /* the exporter's form */
      {STATED_OK, CANON_OK, 0, JB_AUDIT_OK},
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":null,\"timestamp\":" TS
       ",\"details\":{}",
       "{\"details\":{},\"operation\":\"write\",\"path\":null,\"seq\":1,\"session\":\"job-7\","
       "\"timestamp\":" TS "}",
       0, JB_AUDIT_OK},
      /* escapes and non-ASCII in path and session, the same token on both sides */
      {"\"seq\":1,\"session\":\"job \\\"7\\\"\",\"operation\":\"write\",\"path\":\"/w/a \\\"q\\\""
       " \\\\ \\n \xc3\xa9\",\"timestamp\":" TS ",\"details\":{}",
       "{\"details\":{},\"operation\":\"write\",\"path\":\"/w/a \\\"q\\\" \\\\ \\n \xc3\xa9\","
       "\"seq\":1,\"session\":\"job \\\"7\\\"\",\"timestamp\":" TS "}",
       0, JB_AUDIT_OK},
      /* the same values written with other escapes than the canonical bytes' */
      {"\"seq\":1,\"session\":\"job-\\u0037\",\"operation\":\"wr\\u0069te\",\"path\":"
       "\"\\/workspace\\/a\",\"timestamp\":" TS ",\"details\":{\"ok\":true,\"size\":1}",
       CANON_OK, 0, JB_AUDIT_OK},
      /* a stated value that differs only after an escape */
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":\"/workspace/a\\t\","
       "\"timestamp\":" TS ",\"details\":{\"ok\":true,\"size\":1}",
       CANON_OK, 1, JB_AUDIT_CONTENT_CHANGED},
      /* reordered members, and whitespace between tokens */
      {"\"session\":\"job-7\",\"seq\":1,\"operation\":\"write\",\"path\":\"/workspace/a\","
       "\"timestamp\":" TS ",\"details\":{\"ok\":true,\"size\":1}",
       CANON_OK, 0, JB_AUDIT_OK},
      {"\"seq\": 1, \"session\" :\"job-7\",\"operation\":\"write\",\"path\":\"/workspace/a\","
       "\"timestamp\":" TS ",\"details\": {\"ok\":true, \"size\":1}",
       CANON_OK, 0, JB_AUDIT_OK},
      /* details in JSONB's member order (an export before details were sorted) */
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":\"/workspace/a\","
       "\"timestamp\":" TS ",\"details\":{\"size\":1,\"ok\":true}",
       CANON_OK, 0, JB_AUDIT_OK},
      /* canonical bytes not in canonical form, the line stating the very same tokens: whitespace
       * inside details, details out of order, an operation outside [a-z_] */
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":\"/workspace/a\","
       "\"timestamp\":" TS ",\"details\":{\"ok\": true,\"size\":1}",
       "{\"details\":{\"ok\": true,\"size\":1},\"operation\":\"write\",\"path\":\"/workspace/a\","
       "\"seq\":1,\"session\":\"job-7\",\"timestamp\":" TS "}",
       0, JB_AUDIT_OK},
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":\"/workspace/a\","
       "\"timestamp\":" TS ",\"details\":{\"size\":1,\"ok\":true}",
       "{\"details\":{\"size\":1,\"ok\":true},\"operation\":\"write\",\"path\":\"/workspace/a\","
       "\"seq\":1,\"session\":\"job-7\",\"timestamp\":" TS "}",
       0, JB_AUDIT_OK},
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"WRITE\",\"path\":\"/workspace/a\","
       "\"timestamp\":" TS ",\"details\":{}",
       "{\"details\":{},\"operation\":\"WRITE\",\"path\":\"/workspace/a\",\"seq\":1,"
       "\"session\":\"job-7\",\"timestamp\":" TS "}",
       0, JB_AUDIT_OK},
      /* details that hold the members' own text, a brace in a string, a real, a duplicate */
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":null,\"timestamp\":" TS
       ",\"details\":{\"prevHash\":\"}\",\"z\":\",\\\"prevHash\\\":\\\"\"}",
       "{\"details\":{\"prevHash\":\"}\",\"z\":\",\\\"prevHash\\\":\\\"\"},\"operation\":\"write\","
       "\"path\":null,\"seq\":1,\"session\":\"job-7\",\"timestamp\":" TS "}",
       0, JB_AUDIT_OK},
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":null,\"timestamp\":" TS
       ",\"details\":{\"r\":1.5}",
       "{\"details\":{\"r\":1.5},\"operation\":\"write\",\"path\":null,\"seq\":1,"
       "\"session\":\"job-7\",\"timestamp\":" TS "}",
       0, JB_AUDIT_OK},
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":null,\"timestamp\":" TS
       ",\"details\":{\"a\":1,\"a\":1}",
       "{\"details\":{\"a\":1,\"a\":1},\"operation\":\"write\",\"path\":null,\"seq\":1,"
       "\"session\":\"job-7\",\"timestamp\":" TS "}",
       1, JB_AUDIT_MALFORMED},
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":null,\"timestamp\":" TS
       ",\"details\":{\"a\":\"\\u0000\"}",
       "{\"details\":{\"a\":\"\\u0000\"},\"operation\":\"write\",\"path\":null,\"seq\":1,"
       "\"session\":\"job-7\",\"timestamp\":" TS "}",
       1, JB_AUDIT_MALFORMED},
      /* seq: a leading zero is no JSON; 19 digits fall to the full parse (a gap there) */
      {"\"seq\":01,\"session\":\"job-7\",\"operation\":\"write\",\"path\":null,\"timestamp\":" TS
       ",\"details\":{}",
       "{\"details\":{},\"operation\":\"write\",\"path\":null,\"seq\":01,\"session\":\"job-7\","
       "\"timestamp\":" TS "}",
       1, JB_AUDIT_MALFORMED},
      {"\"seq\":1000000000000000000,\"session\":\"job-7\",\"operation\":\"write\",\"path\":null,"
       "\"timestamp\":" TS ",\"details\":{}",
       "{\"details\":{},\"operation\":\"write\",\"path\":null,\"seq\":1000000000000000000,"
       "\"session\":\"job-7\",\"timestamp\":" TS "}",
       1, JB_AUDIT_GAP},
      /* an impossible timestamp, the same on both sides */
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":null,\"timestamp\":"
       "\"2026-13-02T03:04:05.678Z\",\"details\":{}",
       "{\"details\":{},\"operation\":\"write\",\"path\":null,\"seq\":1,\"session\":\"job-7\","
       "\"timestamp\":\"2026-13-02T03:04:05.678Z\"}",
       1, JB_AUDIT_MALFORMED},
      /* an extra member, a missing one */
      {STATED_OK ",\"x\":1", CANON_OK, 1, JB_AUDIT_MALFORMED},
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"timestamp\":" TS
       ",\"details\":{\"ok\":true,\"size\":1}",
       CANON_OK, 1, JB_AUDIT_MALFORMED},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    expect_one(signed_line(cases[i].stated, cases[i].canonical, zero, NULL), cases[i].rc,
               cases[i].why);

  /* the encodings of the fixed members */
  char *l = signed_line(STATED_OK, CANON_OK, zero, NULL);
  char *hash = strstr(l, "\"hash\":\"") + 8, *sig = strstr(l, "\"signature\":\"") + 13;
  char *can = strstr(l, "\"canonical\":\"") + 13;
  char *x = strdup(l); /* uppercase hex */
  for (char *p = x + (hash - l); p < x + (hash - l) + 64; p++)
    if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 'a' + 'A');
  expect_one(x, 0, JB_AUDIT_OK);
  x = strdup(l); /* a base64 character written as an escape */
  line_replace(&x, "\"canonical\":\"e", "\"canonical\":\"\\u0065");
  expect_one(x, 0, JB_AUDIT_OK);
  x = strdup(l);
  x[sig - l] = '*';
  expect_one(x, 1, JB_AUDIT_MALFORMED);
  x = strdup(l); /* 87 characters */
  memmove(x + (sig - l), x + (sig - l) + 1, strlen(x) - (size_t)(sig - l));
  expect_one(x, 1, JB_AUDIT_MALFORMED);
  x = strdup(l); /* padding taken off */
  line_replace(&x, "=\"}", "\"}");
  expect_one(x, 1, JB_AUDIT_MALFORMED);
  x = strdup(l);
  x[can - l + 4] = ' ';
  expect_one(x, 1, JB_AUDIT_MALFORMED);
  x = strdup(l);
  x[can - l + 4] = '\\';
  expect_one(x, 1, JB_AUDIT_MALFORMED);
  /* a non-ASCII character (valid UTF-8) for two base64 digits: libsodium 1.0.18 alone would
   * take each of its bytes for a digit */
  for (int f = 0; f < 2; f++) {
    x = strdup(l);
    char *at = x + ((f ? can : sig) - l) + 8;
    at[0] = (char)0xc3;
    at[1] = (char)0xa9;
    expect_one(x, 1, JB_AUDIT_MALFORMED);
  }
  x = strdup(l); /* bits left over by the padding set: not the encoding of any bytes */
  assert_memory_equal(x + (sig - l) + 86, "==", 2);
  x[sig - l + 85] = 'B';
  expect_one(x, 1, JB_AUDIT_MALFORMED);
  x = strdup(l); /* another digit there, leftover bits clear: other bytes */
  x[sig - l + 85] = x[sig - l + 85] == 'Q' ? 'g' : 'Q';
  expect_one(x, 1, JB_AUDIT_BAD_SIGNATURE);
  x = strdup(l); /* '=' inside, and padding missing */
  x[sig - l + 40] = '=';
  expect_one(x, 1, JB_AUDIT_MALFORMED);
  x = strdup(l);
  line_replace(&x, "==\",\"keyId", "\",\"keyId");
  expect_one(x, 1, JB_AUDIT_MALFORMED);
  x = strdup(l); /* keyId as escapes */
  line_replace(&x, "\"keyId\":\"", "\"keyId\":\"\\u0035");
  line_replace(&x, "\\u00355", "\\u0035");
  expect_one(x, 0, JB_AUDIT_OK);
  x = strdup(l); /* cut short, then something after the object */
  x[can - l + 10] = '\0';
  expect_one(x, 1, JB_AUDIT_MALFORMED);
  x = strdup(l);
  line_replace(&x, "}\n", "}x\n");
  expect_one(x, 1, JB_AUDIT_MALFORMED);
  x = strdup(l); /* trailing whitespace is still JSON */
  line_replace(&x, "}\n", "} \t\n");
  expect_one(x, 0, JB_AUDIT_OK);
  free(l);

  /* seals: the exporter's form, details out of order (same tokens both sides), a wrong count */
  static const struct {
    int entries;
    bool head_first;
    int rc;
  } seals[] = {{1, false, 0}, {1, true, 0}, {2, false, 1}};
  for (size_t i = 0; i < 3; i++) {
    unsigned char h1[32];
    char *lines[2] = {signed_line(STATED_OK, CANON_OK, zero, h1), NULL};
    char hex[65], *d, *st, *cn;
    jb_audit_hex(h1, 32, hex);
    if (seals[i].head_first)
      assert_true(asprintf(&d, "{\"head\":\"%s\",\"entries\":%d}", hex, seals[i].entries) > 0);
    else
      assert_true(asprintf(&d, "{\"entries\":%d,\"head\":\"%s\"}", seals[i].entries, hex) > 0);
    assert_true(asprintf(&st,
                         "\"seq\":2,\"session\":\"job-7\",\"operation\":\"seal\",\"path\":null,"
                         "\"timestamp\":" TS ",\"details\":%s",
                         d) > 0);
    assert_true(asprintf(&cn,
                         "{\"details\":%s,\"operation\":\"seal\",\"path\":null,\"seq\":2,"
                         "\"session\":\"job-7\",\"timestamp\":" TS "}",
                         d) > 0);
    lines[1] = signed_line(st, cn, h1, NULL);
    free(d);
    free(st);
    free(cn);
    struct chain c;
    chain_of(&c, lines, 2);
    struct jb_audit_verify_opts sealed = {.require_seal = true};
    struct jb_audit_result r;
    assert_int_equal(verify(&c, &sealed, &r), seals[i].rc);
    if (seals[i].rc) {
      assert_int_equal(r.reason, JB_AUDIT_CONTENT_CHANGED);
      assert_int_equal(r.first_bad_seq, 2);
    } else {
      assert_true(r.sealed);
    }
    chain_free(&c);
  }

  /* the exporter states details in the canonical bytes' member order */
  struct chain c;
  chain_build(&c, true);
  assert_non_null(
      strstr(c.lines[0], "\"details\":{\"decision\":\"auto\",\"ok\":true,\"size\":100}"));
  chain_free(&c);
}

/* --- the exact-form reader and the full parse, each on its own ------------------------------- */

/* Reads `line` (a string, its "\n" not read) with jb_audit_line_read_exact on a copy;
 * returns what it returned, and checks that a declined line is left as it was. */
static bool read_exact(const char *line) {
  static unsigned char canon[JB_AUDIT_MAX_CANONICAL + 1];
  size_t len = strlen(line);
  if (len && line[len - 1] == '\n') len--;
  char *copy = strdup(line);
  struct jb_audit_entry e;
  bool took = jb_audit_line_read_exact(copy, len, canon, &e);
  if (took)
    json_decref(e.details);
  else
    assert_string_equal(copy, line);
  free(copy);
  return took;
}

/* The exact-form reader takes the exporter's lines and reads them into the entry the full
 * parse gives; it declines every other form (the verdicts of the same lines, through either
 * reader, are exact_form_edges'). */
static void exact_reader(void **state) {
  (void)state;
  static unsigned char canon[JB_AUDIT_MAX_CANONICAL + 1];
  static const unsigned char zero[32];
  struct chain c;
  chain_build(&c, true);
  for (size_t i = 0; i < c.n; i++) {
    size_t len = strlen(c.lines[i]) - 1;
    char *copy = strdup(c.lines[i]);
    struct jb_audit_entry fast, full;
    assert_true(jb_audit_line_read_exact(copy, len, canon, &fast));
    assert_int_equal(jb_audit_entry_parse_line(&full, c.lines[i], len, NULL), 0);
    assert_int_equal(fast.seq, full.seq);
    assert_string_equal(fast.session, full.session);
    assert_string_equal(fast.operation, full.operation);
    if (full.path)
      assert_string_equal(fast.path, full.path);
    else
      assert_null(fast.path);
    assert_string_equal(fast.timestamp, full.timestamp);
    assert_true(json_equal(fast.details, full.details));
    assert_int_equal(fast.canonical_len, full.canonical_len);
    assert_memory_equal(fast.canonical, full.canonical, full.canonical_len + 1);
    assert_memory_equal(fast.prev_hash, full.prev_hash, 32);
    assert_memory_equal(fast.hash, full.hash, 32);
    assert_memory_equal(fast.signature, full.signature, 64);
    assert_string_equal(fast.key_id, full.key_id);
    assert_false(fast.malformed);
    json_decref(fast.details);
    jb_audit_entry_clear(&full);
    free(copy);
  }
  chain_free(&c);

  /* lines signed here: the exporter's form is taken, hex in either case too */
  char *l = signed_line(STATED_OK, CANON_OK, zero, NULL);
  assert_true(read_exact(l));
  char *x = strdup(l);
  char *h = strstr(x, "\"hash\":\"") + 8;
  for (char *p = h; p < h + 64; p++)
    if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 'a' + 'A');
  assert_true(read_exact(x));
  free(x);
  /* and every other form is declined */
  static const struct {
    const char *stated, *canonical;
  } other[] = {
      /* members in another order, whitespace, an escape */
      {"\"session\":\"job-7\",\"seq\":1,\"operation\":\"write\",\"path\":\"/workspace/a\","
       "\"timestamp\":" TS ",\"details\":{\"ok\":true,\"size\":1}",
       CANON_OK},
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":\"/workspace/a\","
       "\"timestamp\":" TS ",\"details\": {\"ok\":true,\"size\":1}",
       CANON_OK},
      {"\"seq\":1,\"session\":\"job-\\u0037\",\"operation\":\"write\",\"path\":\"/workspace/a\","
       "\"timestamp\":" TS ",\"details\":{\"ok\":true,\"size\":1}",
       CANON_OK},
      /* canonical bytes with their members in another order than the canonical one */
      {STATED_OK,
       "{\"operation\":\"write\",\"details\":{\"ok\":true,\"size\":1},\"path\":\"/workspace/a\","
       "\"seq\":1,\"session\":\"job-7\",\"timestamp\":" TS "}"},
      /* a duplicate key, a real, in details (the same on both sides) */
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":null,\"timestamp\":" TS
       ",\"details\":{\"a\":1,\"a\":1}",
       "{\"details\":{\"a\":1,\"a\":1},\"operation\":\"write\",\"path\":null,\"seq\":1,"
       "\"session\":\"job-7\",\"timestamp\":" TS "}"},
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":null,\"timestamp\":" TS
       ",\"details\":{\"r\":1.5}",
       "{\"details\":{\"r\":1.5},\"operation\":\"write\",\"path\":null,\"seq\":1,"
       "\"session\":\"job-7\",\"timestamp\":" TS "}"},
      /* non-ASCII in the path, the same on both sides */
      {"\"seq\":1,\"session\":\"job-7\",\"operation\":\"write\",\"path\":\"/w/\xc3\xa9\","
       "\"timestamp\":" TS ",\"details\":{}",
       "{\"details\":{},\"operation\":\"write\",\"path\":\"/w/\xc3\xa9\",\"seq\":1,"
       "\"session\":\"job-7\",\"timestamp\":" TS "}"},
  };
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
    x = signed_line(other[i].stated, other[i].canonical, zero, NULL);
    if (read_exact(x)) fail_msg("taken: %s", x);
    free(x);
  }
  /* malformed base64: a digit escaped, padding bits set, padding missing, a byte outside
   * the alphabet in the signature, trailing whitespace after the object */
  char *sig = strstr(l, "\"signature\":\"") + 13;
  x = strdup(l);
  line_replace(&x, "\"canonical\":\"e", "\"canonical\":\"\\u0065");
  assert_false(read_exact(x));
  free(x);
  x = strdup(l);
  x[sig - l + 85] = 'B'; /* "...B==": bits left over by the padding */
  assert_false(read_exact(x));
  free(x);
  x = strdup(l);
  line_replace(&x, "==\",\"keyId", "\",\"keyId");
  assert_false(read_exact(x));
  free(x);
  x = strdup(l);
  x[sig - l + 8] = '*';
  assert_false(read_exact(x));
  free(x);
  x = strdup(l);
  line_replace(&x, "}\n", "} \n");
  assert_false(read_exact(x));
  free(x);
  x = strdup(l);
  line_replace(&x, "=\"}", "\"}"); /* the canonical text's padding */
  assert_false(read_exact(x));
  free(x);
  free(l);

  /* canonical bytes of each length modulo 3 (libsodium's base64 of them, as signed_line
   * writes it, ends in no, two or one '='): taken; with the bits left over by the padding
   * set in the last digit: declined, and malformed by the full parse too */
  for (int extra = 0; extra < 3; extra++) {
    char session[16], *st, *cn;
    snprintf(session, sizeof session, "job-%.*s", extra, "77");
    assert_true(asprintf(&st,
                         "\"seq\":1,\"session\":\"%s\",\"operation\":\"write\",\"path\":null,"
                         "\"timestamp\":" TS ",\"details\":{}",
                         session) > 0);
    assert_true(asprintf(&cn,
                         "{\"details\":{},\"operation\":\"write\",\"path\":null,\"seq\":1,"
                         "\"session\":\"%s\",\"timestamp\":" TS "}",
                         session) > 0);
    size_t pad = (3 - strlen(cn) % 3) % 3;
    x = signed_line(st, cn, zero, NULL);
    assert_true(read_exact(x));
    if (pad == 2) { /* a digit for the first '=': the base64 of one byte more */
      char *y = strdup(x);
      line_replace(&y, "==\"}", "A=\"}");
      assert_false(read_exact(y));
      expect_one(y, 1, JB_AUDIT_CONTENT_CHANGED);
    }
    if (pad) {
      static const char digits[] =
          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
      char *last = strstr(x, "\"}\n") - pad - 1; /* the digit before the padding */
      assert_int_equal((strchr(digits, *last) - digits) & 1, 0);
      *last = digits[(strchr(digits, *last) - digits) | 1];
      assert_false(read_exact(x));
      expect_one(x, 1, JB_AUDIT_MALFORMED);
    } else {
      free(x);
    }
    free(st);
    free(cn);
  }
}

/* A line of chain `c` (entry `i`) with member `k` set to `v` (stolen), read by the full
 * parse: returns its result and leaves the entry in `e` (clear it). */
static int parse_with(struct chain *c, size_t i, const char *k, json_t *v,
                      struct jb_audit_entry *e) {
  line_set(c, i, k, v);
  return jb_audit_entry_parse_line(e, c->lines[i], strlen(c->lines[i]) - 1, NULL);
}

#define EXPECT_REFUSED(e, rc, why)                                                               \
  do {                                                                                           \
    assert_int_equal((rc), -1);                                                                  \
    assert_true((e)->malformed);                                                                 \
    if (!strstr((e)->error, (why))) fail_msg("refused as '%s', wanted '%s'", (e)->error, (why)); \
  } while (0)

/* The one reader of a line (jb_audit_line_read): its "\n" and "\r" are not read, a line of
 * spaces and tabs is blank, the limit counts a "\r" and refuses unread, and an entry is read
 * as the full parse reads it. */
static void line_read_kinds(void **state) {
  (void)state;
  struct chain c;
  chain_build(&c, true);
  struct jb_audit_entry e;
  jb_error err = {0};
  const char *blanks[] = {"", "\n", "\r\n", " \t \n", "\t"};
  for (size_t i = 0; i < sizeof blanks / sizeof blanks[0]; i++) {
    assert_true(jb_audit_line_blank(blanks[i], strlen(blanks[i])));
    assert_int_equal(jb_audit_line_read(&e, blanks[i], strlen(blanks[i]), &err),
                     JB_AUDIT_LINE_BLANK);
    assert_false(e.malformed);
  }
  char *crlf;
  size_t n0 = strlen(c.lines[0]); /* c.lines[0] ends with "\n" */
  assert_true(asprintf(&crlf, "%.*s\r\n", (int)(n0 - 1), c.lines[0]) > 0);
  const char *forms[] = {c.lines[0], crlf};
  for (size_t i = 0; i < 2; i++) {
    assert_false(jb_audit_line_blank(forms[i], strlen(forms[i])));
    assert_int_equal(jb_audit_line_read(&e, forms[i], strlen(forms[i]), &err), JB_AUDIT_LINE_ENTRY);
    assert_int_equal(e.seq, 1);
    char *again = jb_audit_entry_line(&e);
    assert_string_equal(again, c.lines[0]);
    free(again);
    jb_audit_entry_clear(&e);
  }
  free(crlf);
  assert_int_equal(jb_audit_line_read(&e, "{\"seq\":3}", 9, &err), JB_AUDIT_LINE_MALFORMED);
  assert_true(e.malformed);
  jb_audit_entry_clear(&e);
  /* JB_AUDIT_MAX_LINE spaces and a "\r": over the limit, malformed, not blank */
  char *big = malloc(JB_AUDIT_MAX_LINE + 2);
  memset(big, ' ', JB_AUDIT_MAX_LINE);
  memcpy(big + JB_AUDIT_MAX_LINE, "\r\n", 2);
  assert_false(jb_audit_line_blank(big, JB_AUDIT_MAX_LINE + 2));
  assert_int_equal(jb_audit_line_read(&e, big, JB_AUDIT_MAX_LINE + 2, &err),
                   JB_AUDIT_LINE_MALFORMED);
  assert_true(e.malformed);
  assert_non_null(strstr(e.error, "longer than the limit"));
  /* JB_AUDIT_MAX_LINE spaces alone: blank */
  assert_int_equal(jb_audit_line_read(&e, big, JB_AUDIT_MAX_LINE, &err), JB_AUDIT_LINE_BLANK);
  free(big);
  chain_free(&c);
}

/* Every refusal of the full parse, with its message; the seq stays readable where the line
 * states one, so that the verifier reports the line at its place. */
static void line_parse_refusals(void **state) {
  (void)state;
  struct jb_audit_entry e;
  jb_error err = {0};
  /* over the size limit: refused before it is parsed */
  char *big = malloc(JB_AUDIT_MAX_LINE + 1);
  memset(big, ' ', JB_AUDIT_MAX_LINE + 1);
  EXPECT_REFUSED(&e, jb_audit_entry_parse_line(&e, big, JB_AUDIT_MAX_LINE + 1, &err),
                 "line longer than the limit");
  assert_non_null(strstr(err.msg, "longer than the limit"));
  free(big);
  EXPECT_REFUSED(&e, jb_audit_entry_parse_line(&e, "{\"seq\":1,", 9, NULL), "not JSON");
  const char *dup = "{\"seq\":4,\"seq\":4}";
  EXPECT_REFUSED(&e, jb_audit_entry_parse_line(&e, dup, strlen(dup), NULL), "duplicate");
  EXPECT_REFUSED(&e, jb_audit_entry_parse_line(&e, "[1]", 3, NULL), "not a JSON object");
  /* nesting: what jansson itself would not parse is refused before it is; anything it parses
   * is read (details deeper than JB_AUDIT_MAX_DEPTH included: the checks after the parse
   * give their verdict) */
  size_t deep = JSON_PARSER_MAX_DEPTH + 1;
  char *nest = malloc(2 * deep + 1);
  memset(nest, '[', deep);
  memset(nest + deep, ']', deep);
  nest[0] = '{';
  nest[2 * deep - 1] = '}';
  EXPECT_REFUSED(&e, jb_audit_entry_parse_line(&e, nest, 2 * deep, NULL),
                 "maximum parsing depth reached");
  free(nest);
  struct chain c;
  chain_build(&c, true);
  json_t *d = json_object();
  for (int i = 0; i < 3 * JB_AUDIT_MAX_DEPTH; i++) d = json_pack("{s:o}", "n", d);
  assert_int_equal(parse_with(&c, 2, "details", d, &e), 0);
  jb_audit_entry_clear(&e);
  chain_free(&c);

  /* each member's type and encoding */
  static const struct {
    const char *member, *value, *why;
  } bad[] = {
      {"approvedBy", "\"buyer\"", "unknown member 'approvedBy'"},
      {"path", "1", "missing or has the wrong type"},
      {"details", "[]", "missing or has the wrong type"},
      {"canonical", "null", "missing or has the wrong type"},
      {"hash", "\"abcd\"", "prevHash/hash must be 64 hex characters"},
      {"prevHash", "\"zz00000000000000000000000000000000000000000000000000000000000000\"",
       "prevHash/hash must be 64 hex characters"},
      {"signature", "\"!!!!\"", "signature must be base64 of 64 bytes"},
      {"signature", "\"AAAA\"", "signature must be base64 of 64 bytes"},
      {"keyId", "\"abc\"", "keyId must be 16 characters"},
      {"canonical", "\"!!!\"", "canonical must be base64 of at most 64 KiB"},
      {"canonical", "\"eyJ=\"", "canonical must be base64 of at most 64 KiB"},
      {"canonical", "\"eyJ\"", "canonical must be base64 of at most 64 KiB"},
      {"canonical", "\"eyJB\xc3\xa9==\"", "canonical must be base64 of at most 64 KiB"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    chain_build(&c, true);
    json_t *v = json_loads(bad[i].value, JSON_DECODE_ANY, NULL);
    assert_non_null(v);
    int rc = parse_with(&c, 2, bad[i].member, v, &e);
    EXPECT_REFUSED(&e, rc, bad[i].why);
    assert_int_equal(e.seq, 3);
    chain_free(&c);
  }
  /* the canonical bytes' limit: 64 KiB decode; one byte more, or a text too long for 64 KiB,
   * is refused */
  static const size_t sizes[] = {JB_AUDIT_MAX_CANONICAL, JB_AUDIT_MAX_CANONICAL + 1,
                                 JB_AUDIT_MAX_CANONICAL + 3};
  unsigned char *bytes = calloc(1, JB_AUDIT_MAX_CANONICAL + 3);
  char *b64 = malloc(2 * JB_AUDIT_MAX_CANONICAL);
  for (size_t i = 0; i < 3; i++) {
    chain_build(&c, true);
    sodium_bin2base64(b64, 2 * JB_AUDIT_MAX_CANONICAL, bytes, sizes[i],
                      sodium_base64_VARIANT_ORIGINAL);
    int rc = parse_with(&c, 2, "canonical", json_string(b64), &e);
    if (i == 0) {
      assert_int_equal(rc, 0);
      assert_int_equal(e.canonical_len, JB_AUDIT_MAX_CANONICAL);
      jb_audit_entry_clear(&e);
    } else {
      EXPECT_REFUSED(&e, rc, "canonical must be base64 of at most 64 KiB");
    }
    chain_free(&c);
  }
  free(bytes);
  free(b64);
}

static void keys_document(void **state) {
  char b64[64], doc[512];
  sodium_bin2base64(b64, sizeof b64, key_a->pk, 32, sodium_base64_VARIANT_ORIGINAL);
  snprintf(doc, sizeof doc,
           "{\"keys\":[{\"keyId\":\"%s\",\"algorithm\":\"ed25519\",\"publicKey\":\"%s\","
           "\"createdAt\":\"2026-01-01T00:00:00.000Z\",\"retiredAt\":null}]}",
           key_a->key_id, b64);
  struct jb_audit_pubkey *k = NULL;
  size_t n = 0;
  assert_int_equal(jb_audit_keys_parse(doc, strlen(doc), &k, &n, NULL), 0);
  assert_int_equal(n, 1);
  assert_string_equal(k[0].key_id, key_a->key_id);
  assert_memory_equal(k[0].public_key, key_a->pk, 32);
  assert_string_equal(k[0].retired_at, "");
  free(k);
  /* a publicKey with a character outside the base64 alphabet is refused */
  char odd[64];
  memcpy(odd, b64, sizeof odd);
  odd[4] = (char)0xc3;
  odd[5] = (char)0xa9;
  snprintf(doc, sizeof doc,
           "{\"keys\":[{\"keyId\":\"%s\",\"algorithm\":\"ed25519\",\"publicKey\":\"%s\"}]}",
           key_a->key_id, odd);
  assert_int_equal(jb_audit_keys_parse(doc, strlen(doc), &k, &n, NULL), -1);
  /* retiredAt is read; it must be null or a timestamp of the entries' form */
  snprintf(doc, sizeof doc,
           "{\"keys\":[{\"keyId\":\"%s\",\"algorithm\":\"ed25519\",\"publicKey\":\"%s\","
           "\"retiredAt\":\"2026-03-04T05:06:07.089Z\"}]}",
           key_a->key_id, b64);
  assert_int_equal(jb_audit_keys_parse(doc, strlen(doc), &k, &n, NULL), 0);
  assert_string_equal(k[0].retired_at, "2026-03-04T05:06:07.089Z");
  free(k);
  const char *bad_retired[] = {"\"yesterday\"", "1", "true", "\"2026-03-04T05:06:07Z\""};
  for (size_t i = 0; i < 4; i++) {
    snprintf(doc, sizeof doc,
             "{\"keys\":[{\"keyId\":\"%s\",\"algorithm\":\"ed25519\",\"publicKey\":\"%s\","
             "\"retiredAt\":%s}]}",
             key_a->key_id, b64, bad_retired[i]);
    assert_int_equal(jb_audit_keys_parse(doc, strlen(doc), &k, &n, NULL), -1);
  }
  /* a key published under another key's id is refused */
  snprintf(doc, sizeof doc,
           "{\"keys\":[{\"keyId\":\"%s\",\"algorithm\":\"ed25519\",\"publicKey\":\"%s\"}]}",
           key_b->key_id, b64);
  jb_error err = {0};
  assert_int_equal(jb_audit_keys_parse(doc, strlen(doc), &k, &n, &err), -1);
  assert_non_null(strstr(err.msg, "not the id"));
  /* one key listed twice (once retired, once not) is refused whatever the order: the
   * verdict must not depend on which copy is found first */
  const char *retired[2] = {"\"2026-03-04T05:06:07.089Z\"", "null"};
  for (size_t i = 0; i < 2; i++) {
    snprintf(doc, sizeof doc,
             "{\"keys\":[{\"keyId\":\"%s\",\"algorithm\":\"ed25519\",\"publicKey\":\"%s\","
             "\"retiredAt\":%s},"
             "{\"keyId\":\"%s\",\"algorithm\":\"ed25519\",\"publicKey\":\"%s\",\"retiredAt\":%s}]}",
             key_a->key_id, b64, retired[i], key_a->key_id, b64, retired[1 - i]);
    assert_int_equal(jb_audit_keys_parse(doc, strlen(doc), &k, &n, &err), -1);
    assert_non_null(strstr(err.msg, "listed twice"));
  }
  /* nested deeper than jansson parses: refused before it is parsed, with jansson's words */
  size_t deep = JSON_PARSER_MAX_DEPTH + 1;
  char *nest = malloc(2 * deep + 16);
  char *q = stpcpy(nest, "{\"keys\":");
  memset(q, '[', deep - 1);
  memset(q + deep - 1, ']', deep - 1);
  strcpy(q + 2 * (deep - 1), "}");
  assert_int_equal(jb_audit_keys_parse(nest, strlen(nest), &k, &n, &err), -1);
  assert_non_null(strstr(err.msg, "maximum parsing depth reached"));
  free(nest);
  const char *bad[] = {"{\"keys\":{}}", "[]", "{\"keys\":[{\"keyId\":\"x\"}]}",
                       "{\"keys\":[],\"keys\":[]}"};
  for (size_t i = 0; i < 4; i++)
    assert_int_equal(jb_audit_keys_parse(bad[i], strlen(bad[i]), &k, &n, NULL), -1);

  struct jb_audit_head h;
  assert_int_equal(
      jb_audit_head_parse("12:"
                          "b5ebee7184dc317bf497658b170b3af0c5ad3cb891b37e4f651b56b080a8ffde",
                          &h, NULL),
      0);
  assert_int_equal(h.seq, 12);
  const char *bad_heads[] = {
      "12",
      ":ab",
      "0:b5ebee7184dc317bf497658b170b3af0c5ad3cb891b37e4f651b56b080a8ffde",
      "-1:b5ebee7184dc317bf497658b170b3af0c5ad3cb891b37e4f651b56b080a8ffde",
      "3:b5ee",
      "3:zz",
      "3:b5ebee7184dc317bf497658b170b3af0c5ad3cb891b37e4f651b56b080a8ffde0",
      "3:b5ebee7184dc317bf497658b170b3af0c5ad3cb891b37e4f651b56b080a8ffde ",
      "3 :b5ebee7184dc317bf497658b170b3af0c5ad3cb891b37e4f651b56b080a8ffde",
      "99999999999999999999:b5ebee7184dc317bf497658b170b3af0c5ad3cb891b37e4f651b56b080a8ffde",
      "1x:b5ebee7184dc317bf497658b170b3af0c5ad3cb891b37e4f651b56b080a8ffde"};
  for (size_t i = 0; i < sizeof bad_heads / sizeof bad_heads[0]; i++)
    assert_int_equal(jb_audit_head_parse(bad_heads[i], &h, NULL), -1);
}

static void key_file(void **state) {
  char dir[] = "/tmp/jbkeys.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char state_dir[64], path[96];
  snprintf(state_dir, sizeof state_dir, "%s/state", dir);
  snprintf(path, sizeof path, "%s/%s", state_dir, JB_KEY_FILE_NAME);

  /* first start: generated, 0600; second start: the same key */
  struct jb_keyring *k1 = NULL, *k2 = NULL;
  jb_error err = {0};
  assert_int_equal(jb_keyring_load(&k1, state_dir, "", &err), 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_int_equal(st.st_size, 65);
  assert_int_equal(jb_keyring_load(&k2, state_dir, NULL, &err), 0);
  assert_string_equal(k1->key_id, k2->key_id);
  assert_memory_equal(k1->sk, k2->sk, 64);
  jb_keyring_free(k2);

  /* rotation replaces the file with a new key */
  char nid[17], oid[17];
  assert_int_equal(jb_keyring_rotate(path, nid, oid, &err), 0);
  assert_string_equal(oid, k1->key_id);
  assert_string_not_equal(nid, k1->key_id);
  assert_int_equal(jb_keyring_load(&k2, state_dir, NULL, &err), 0);
  assert_string_equal(k2->key_id, nid);
  jb_keyring_free(k2);

  /* JAILBOX_SIGNING_KEY_FILE: raw 32 bytes accepted; loose modes, symlinks, junk refused */
  char given[128], link_path[128];
  snprintf(given, sizeof given, "%s/given.key", dir);
  int fd = open(given, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  unsigned char seed[32];
  for (int i = 0; i < 32; i++) seed[i] = (unsigned char)i;
  assert_int_equal(write(fd, seed, 32), 32);
  close(fd);
  assert_int_equal(jb_keyring_load(&k2, "/nonexistent", given, &err), 0);
  assert_string_equal(k2->key_id, golden_key_id);
  jb_keyring_free(k2);
  chmod(given, 0640);
  assert_int_equal(jb_keyring_load(&k2, "/nonexistent", given, &err), -1);
  assert_non_null(strstr(err.msg, "group or others"));
  chmod(given, 0600);
  snprintf(link_path, sizeof link_path, "%s/link.key", dir);
  assert_int_equal(symlink(given, link_path), 0);
  assert_int_equal(jb_keyring_load(&k2, "/nonexistent", link_path, &err), -1);
  fd = open(given, O_WRONLY | O_TRUNC | O_CLOEXEC);
  assert_int_equal(write(fd, "not a key\n", 10), 10);
  close(fd);
  assert_int_equal(jb_keyring_load(&k2, "/nonexistent", given, &err), -1);
  assert_non_null(strstr(err.msg, "64 hex"));
  snprintf(link_path, sizeof link_path, "%s/missing.key", dir);
  assert_int_equal(jb_keyring_load(&k2, state_dir, link_path, &err), -1);

  /* 32 hex characters are half a hex seed, not a raw seed */
  fd = open(given, O_WRONLY | O_TRUNC | O_CLOEXEC);
  assert_int_equal(write(fd, "0123456789abcdef0123456789abcdef", 32), 32);
  close(fd);
  assert_int_equal(jb_keyring_load(&k2, "/nonexistent", given, &err), -1);
  assert_non_null(strstr(err.msg, "32 hex characters"));
  /* a key file another user owns is not ours to trust */
  fd = open(given, O_WRONLY | O_TRUNC | O_CLOEXEC);
  assert_int_equal(write(fd, seed, 32), 32);
  close(fd);
  if (geteuid() == 0) {
    assert_int_equal(chown(given, 65534, 65534), 0);
    assert_int_equal(jb_keyring_load(&k2, "/nonexistent", given, &err), -1);
    assert_non_null(strstr(err.msg, "owned by uid 65534"));
  }
  /* a FIFO at the key path is refused at once, never waited on */
  char fifo[128];
  snprintf(fifo, sizeof fifo, "%s/fifo.key", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(jb_keyring_load(&k2, "/nonexistent", fifo, &err), -1);
  assert_non_null(strstr(err.msg, "not a regular file"));

  jb_keyring_free(k1);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* jb_keyring_generate never overwrites; jb_keyring_watch sees the key file replaced by a
 * rename, written in place, or deleted, and ignores its neighbours */
static void key_file_generate_and_watch(void **state) {
  char dir[] = "/tmp/jbkeyw.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[96], other[96], tmp[96];
  snprintf(path, sizeof path, "%s/audit.key", dir);
  snprintf(other, sizeof other, "%s/other.key", dir);
  snprintf(tmp, sizeof tmp, "%s/audit.key.new", dir);
  jb_error err = {0};
  char id1[17], id2[17];
  assert_int_equal(jb_keyring_generate(path, id1, &err), 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  struct jb_keyring *k = NULL;
  assert_int_equal(jb_keyring_load(&k, "/nonexistent", path, &err), 0);
  assert_string_equal(k->key_id, id1);
  jb_keyring_free(k);
  assert_int_equal(jb_keyring_generate(path, id2, &err), -1); /* exists: kept */
  assert_int_equal(err.code, EEXIST);
  assert_int_equal(jb_keyring_load(&k, "/nonexistent", path, &err), 0);
  assert_string_equal(k->key_id, id1);
  jb_keyring_free(k);

  int fd = jb_keyring_watch(path, &err);
  assert_true(fd >= 0);
  assert_false(jb_keyring_watch_drain(fd, path)); /* nothing yet */
  assert_int_equal(jb_keyring_generate(other, id2, &err), 0); /* a neighbour: not the key */
  assert_false(jb_keyring_watch_drain(fd, path));
  assert_int_equal(jb_keyring_generate(tmp, id2, &err), 0);
  (void)jb_keyring_watch_drain(fd, path);
  assert_int_equal(rename(tmp, path), 0); /* replaced by a rename */
  assert_true(jb_keyring_watch_drain(fd, path));
  assert_int_equal(jb_keyring_load(&k, "/nonexistent", path, &err), 0);
  assert_string_equal(k->key_id, id2);
  jb_keyring_free(k);
  int w = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC); /* written in place */
  assert_true(w >= 0);
  assert_int_equal(write(w, "00", 2), 2);
  close(w);
  assert_true(jb_keyring_watch_drain(fd, path));
  assert_int_equal(unlink(path), 0); /* deleted */
  assert_true(jb_keyring_watch_drain(fd, path));
  assert_false(jb_keyring_watch_drain(fd, path)); /* drained */
  close(fd);
  assert_int_equal(jb_keyring_watch("/nonexistent-dir/audit.key", &err), -1);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(canonical_golden),
      cmocka_unit_test(line_read_kinds),
      cmocka_unit_test(key_file_generate_and_watch),
      cmocka_unit_test(canonical_refuses),
      cmocka_unit_test(hash_sign_golden),
      cmocka_unit_test(sign_and_details_of_canonical),
      cmocka_unit_test(intact_chain),
      cmocka_unit_test(tamper_content),
      cmocka_unit_test(reordered_keys_still_verify),
      cmocka_unit_test(tamper_signature_and_keys),
      cmocka_unit_test(tamper_order),
      cmocka_unit_test(tamper_truncation),
      cmocka_unit_test(malformed_lines),
      cmocka_unit_test(stream_verify),
      cmocka_unit_test(exact_form_edges),
      cmocka_unit_test(exact_reader),
      cmocka_unit_test(line_parse_refusals),
      cmocka_unit_test(keys_document),
      cmocka_unit_test(key_file),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
