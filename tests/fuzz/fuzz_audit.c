/* fuzz_audit.c — libFuzzer harness for what `jailboxctl audit verify` reads from untrusted
 * files: the keys document (jb_audit_keys_parse) and an exported chain streamed line by line
 * through the verifier (jb_audit_verify_file: line reader, strict line parse, canonical bytes,
 * verification). The first input byte picks which. Any crash, leak or sanitizer report is a
 * bug; so is a refusal that does not say why. */
#include <sodium.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/audit.h"

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
  /* one published key: the all-zero seed's (tests/fuzz/corpus/audit holds chains it signed),
   * retired at a fixed time */
  static struct jb_audit_pubkey key;
  if (!key.key_id[0]) {
    unsigned char seed[32] = {0}, sk[JB_AUDIT_SK_LEN];
    if (sodium_init() < 0 || crypto_sign_seed_keypair(key.public_key, sk, seed) != 0) abort();
    jb_audit_key_id(key.public_key, key.key_id);
    memcpy(key.retired_at, "2026-06-01T00:00:00.000Z", JB_AUDIT_TS_LEN + 1);
  }
  FILE *in = fmemopen((void *)text, len ? len : 1, "r");
  if (!in) return 0;
  if (!len) (void)getc(in);
  struct jb_audit_result r;
  struct jb_audit_verify_opts opts = {.require_seal = (data[0] & 2) != 0};
  int rc = jb_audit_verify_file(in, &key, 1, &opts, &r, &err);
  fclose(in);
  if (rc == 1 && (r.ok || !r.detail[0] || r.first_bad_seq < 1)) abort(); /* a failure says where and why */
  if (rc == 0 && !r.ok) abort();
  return 0;
}
