/* token.c — minting bearer tokens and hashing their text (see token.h). */
#include "lib/token.h"

#include <sodium.h>
#include <string.h>

#define TOKEN_PREFIX "jbt_"
#define TOKEN_RAW 32

void jb_token_mint(char text[JB_TOKEN_TEXT_LEN], unsigned char hash[32]) {
  unsigned char raw[TOKEN_RAW];
  randombytes_buf(raw, sizeof raw);
  memcpy(text, TOKEN_PREFIX, 4);
  sodium_bin2base64(text + 4, JB_TOKEN_TEXT_LEN - 4, raw, sizeof raw,
                    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  crypto_hash_sha256(hash, raw, sizeof raw);
  sodium_memzero(raw, sizeof raw);
}

int jb_token_hash(const char *text, unsigned char hash[32]) {
  size_t n = strlen(text);
  if (n != JB_TOKEN_TEXT_LEN - 1 || memcmp(text, TOKEN_PREFIX, 4) != 0) return -1;
  unsigned char raw[TOKEN_RAW];
  size_t got = 0;
  const char *end = NULL;
  if (sodium_base642bin(raw, sizeof raw, text + 4, n - 4, NULL, &got, &end,
                        sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
      got != TOKEN_RAW || end != text + n)
    return -1;
  crypto_hash_sha256(hash, raw, sizeof raw);
  sodium_memzero(raw, sizeof raw);
  return 0;
}
