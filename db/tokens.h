/* tokens.h — storage of bearer tokens: only SHA-256 hashes are kept. */
#ifndef JB_DB_TOKENS_H
#define JB_DB_TOKENS_H

#include <libpq-fe.h>

#include "lib/err.h"

/* Finds an unrevoked, unexpired token by its 32-byte SHA-256 `hash`. On JB_OK fills `role` (16 bytes:
 * "service", "buyer" or "agent"), `job_id` (129 bytes, "" for service) and `stored` (the
 * hash as stored, for a constant-time comparison). JB_ERR_NOT_FOUND when unknown or revoked,
 * JB_ERR_FAIL with `err` on a database failure. */
int jb_db_token_lookup(PGconn *c, const unsigned char hash[32], char role[16], char job_id[129],
                       unsigned char stored[32], jb_error *err);

/* Stores a token hash for `role` (and `job_id`, NULL for service), with a free-text `label`
 * (nullable). An existing identical hash is left as it is. JB_OK or JB_ERR_FAIL. */
int jb_db_token_insert(PGconn *c, const unsigned char hash[32], const char *role,
                       const char *job_id, const char *label, jb_error *err);

/* Stores a console sign-in token (label "console") for `role` ("buyer" or "service") and
 * `job_id` (NULL for service) that expires `ttl_s` seconds from now. JB_OK or JB_ERR_FAIL. */
int jb_db_console_token_insert(PGconn *c, const unsigned char hash[32], const char *role,
                               const char *job_id, long ttl_s, jb_error *err);

/* Revokes the token whose SHA-256 is `hash` (nothing when unknown). JB_OK or JB_ERR_FAIL. */
int jb_db_token_revoke(PGconn *c, const unsigned char hash[32], jb_error *err);

/* Stores a one-time console code (its SHA-256 `hash`) granting `role` on `job_id` (NULL for
 * service), valid for `ttl_s` seconds; codes expired for a day are dropped on the way.
 * JB_OK or JB_ERR_FAIL. */
int jb_db_console_code_insert(PGconn *c, const unsigned char hash[32], const char *role,
                              const char *job_id, long ttl_s, jb_error *err);

/* Uses the console code `hash` once: on JB_OK fills `role` (16 bytes) and `job_id` (129
 * bytes, "" for service) and marks it used. JB_ERR_NOT_FOUND when unknown, used or expired;
 * JB_ERR_FAIL with `err`. */
int jb_db_console_code_use(PGconn *c, const unsigned char hash[32], char role[16], char job_id[129],
                           jb_error *err);

#endif
