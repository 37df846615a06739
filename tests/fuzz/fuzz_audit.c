/* fuzz_audit.c — libFuzzer harness for what `jailboxctl audit verify` reads from untrusted
 * files: the keys document (jb_audit_keys_parse) and an exported chain streamed line by line
 * through the verifier (jb_audit_verify_file: line reader, exact-form reader, strict line
 * parse, canonical bytes, verification). The first input byte picks which (bit 0), whether the seal
 * is required (bit 1), and whether the harness first re-signs every line (bit 2: hash and
 * signature made anew from the line's canonical bytes and prevHash with the corpus key, so
 * that mutations of the stated members and the canonical bytes reach the checks after the
 * signature; bit 3: each prevHash also set to the hash before, so the chain stays linked).
 * Every chain is verified twice, with and without the exact-form reader: the two results must
 * be the same (a differential check of the exact-form reader against the full parse). Any
 * crash, leak or sanitizer report is a bug; so is a refusal that does not say why. */
#define _GNU_SOURCE
#include <sodium.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/audit.h"

/* The key the corpus chains are signed with: the all-zero seed's. */
static unsigned char corpus_sk[JB_AUDIT_SK_LEN];

/* Where the body of string member `name` ("\"name\":\"") starts in [line, end), or NULL. */
static char *member_body(char *line, char *end, const char *name) {
  char *at = memmem(line, (size_t)(end - line), name, strlen(name));
  return at ? at + strlen(name) : NULL;
}

/* Re-signs every line of `text` (`len` bytes, in place) as described at the top; a line
 * whose canonical bytes or prevHash cannot be decoded is left as it is. */
static void resign(char *text, size_t len, bool relink) {
  static unsigned char canon[JB_AUDIT_MAX_CANONICAL];
  unsigned char prev[JB_AUDIT_HASH_LEN] = {0}, hash[JB_AUDIT_HASH_LEN], sig[JB_AUDIT_SIG_LEN];
  char hex[2 * JB_AUDIT_HASH_LEN + 1],
      b64[sodium_base64_ENCODED_LEN(JB_AUDIT_SIG_LEN, sodium_base64_VARIANT_ORIGINAL)];
  for (char *line = text, *stop = text + len; line < stop;) {
    char *end = memchr(line, '\n', (size_t)(stop - line));
    if (!end) end = stop;
    char *cb = member_body(line, end, "\"canonical\":\""),
         *ph = member_body(line, end, "\"prevHash\":\""),
         *hh = member_body(line, end, "\"hash\":\""),
         *sg = member_body(line, end, "\"signature\":\"");
    char *cq = cb ? memchr(cb, '"', (size_t)(end - cb)) : NULL;
    size_t clen = 0;
    if (cq && ph && hh && sg && end - ph >= 64 && end - hh >= 64 &&
        end - sg >= (long)sizeof b64 - 1 &&
        sodium_base642bin(canon, sizeof canon, cb, (size_t)(cq - cb), NULL, &clen, NULL,
                          sodium_base64_VARIANT_ORIGINAL) == 0) {
      if (relink) {
        jb_audit_hex(prev, JB_AUDIT_HASH_LEN, hex);
        memcpy(ph, hex, 64);
      }
      if (sodium_hex2bin(prev, sizeof prev, ph, 64, NULL, NULL, NULL) == 0) {
        jb_audit_hash(canon, clen, prev, hash);
        crypto_sign_detached(sig, NULL, hash, sizeof hash, corpus_sk);
        jb_audit_hex(hash, sizeof hash, hex);
        sodium_bin2base64(b64, sizeof b64, sig, sizeof sig, sodium_base64_VARIANT_ORIGINAL);
        memcpy(hh, hex, 64);
        memcpy(sg, b64, sizeof b64 - 1);
        memcpy(prev, hash, sizeof prev);
      }
    }
    line = end + 1;
  }
}

/* Verifies `len` bytes of `text` as a chain; rc as jb_audit_verify_file. */
static int verify_text(const char *text, size_t len, const struct jb_audit_pubkey *key,
                       const struct jb_audit_verify_opts *opts, struct jb_audit_result *r) {
  jb_error err = {0};
  FILE *in = fmemopen((void *)text, len ? len : 1, "r");
  if (!in) abort();
  if (!len) (void)getc(in);
  int rc = jb_audit_verify_file(in, key, 1, opts, r, &err);
  fclose(in);
  if (rc < 0 && !err.msg[0]) abort();
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  jb_error err = {0};
  if (data[0] & 1) {
    struct jb_audit_pubkey *keys = NULL;
    size_t n = 0;
    if (jb_audit_keys_parse(text, len, &keys, &n, &err) < 0) {
      if (!err.msg[0]) abort();
      return 0;
    }
    for (size_t i = 0; i < n; i++)
      if (strlen(keys[i].key_id) != JB_AUDIT_KEY_ID_LEN) abort();
    free(keys);
    return 0;
  }
  if (data[0] &
      16) { /* an entry's details as the export and verifiers read them from stored canonical bytes */
    json_t *d = jb_audit_canonical_details((const unsigned char *)text, len);
    if (d && !json_is_object(d)) abort();
    json_decref(d);
    return 0;
  }
  /* one published key: the all-zero seed's (tests/fuzz/corpus/audit holds chains it signed),
   * retired at a fixed time */
  static struct jb_audit_pubkey key;
  if (!key.key_id[0]) {
    unsigned char seed[32] = {0};
    if (sodium_init() < 0 || crypto_sign_seed_keypair(key.public_key, corpus_sk, seed) != 0)
      abort();
    jb_audit_key_id(key.public_key, key.key_id);
    memcpy(key.retired_at, "2026-06-01T00:00:00.000Z", JB_AUDIT_TS_LEN + 1);
  }
  char *copy = NULL;
  if (data[0] & 4) {
    copy = malloc(len ? len : 1);
    if (!copy) return 0;
    memcpy(copy, text, len);
    resign(copy, len, (data[0] & 8) != 0);
    text = copy;
  }
  struct jb_audit_result r, full;
  struct jb_audit_verify_opts opts = {.require_seal = (data[0] & 2) != 0};
  int rc = verify_text(text, len, &key, &opts, &r);
  if (rc == 1 && (r.ok || !r.detail[0] || r.first_bad_seq < 1))
    abort(); /* a failure says where and why */
  if (rc == 0 && !r.ok) abort();
  /* the exact-form reader changes nothing: the full parse of every line gives the same
   * result */
  opts.full_parse = true;
  int frc = verify_text(text, len, &key, &opts, &full);
  free(copy);
  if (frc != rc) abort();
  if (rc >= 0 &&
      (full.ok != r.ok || full.entries != r.entries || full.first_bad_seq != r.first_bad_seq ||
       full.reason != r.reason || full.sealed != r.sealed || full.head.seq != r.head.seq ||
       memcmp(full.head.hash, r.head.hash, sizeof r.head.hash) != 0 ||
       strcmp(full.session, r.session) != 0 || strcmp(full.detail, r.detail) != 0)) {
    fprintf(stderr, "exact-form reader: %d %lld %s (%s); full parse: %d %lld %s (%s)\n", rc,
            r.first_bad_seq, jb_audit_reason_name(r.reason), r.detail, frc, full.first_bad_seq,
            jb_audit_reason_name(full.reason), full.detail);
    abort();
  }
  return 0;
}
