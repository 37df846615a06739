/* token.h — the text of a bearer token: 32 random bytes (libsodium) given out once as
 * "jbt_" + base64url without padding (RFC 4648 §5), and known to the server only by its
 * SHA-256. Shared by jailboxd (api/auth.h) and `jailboxctl token`. */
#ifndef JB_LIB_TOKEN_H
#define JB_LIB_TOKEN_H

#define JB_TOKEN_TEXT_LEN 48 /* "jbt_" + 43 base64url chars + NUL */

/* Mints a new token: 32 random bytes from libsodium, written as "jbt_" + base64url without
 * padding into `text` (JB_TOKEN_TEXT_LEN bytes), and its SHA-256 into `hash`. */
void jb_token_mint(char text[JB_TOKEN_TEXT_LEN], unsigned char hash[32]);

/* Parses token text into its SHA-256 `hash`. Returns 0, or -1 when `text` is not a token of
 * the form jb_token_mint writes. */
int jb_token_hash(const char *text, unsigned char hash[32]);

#endif
