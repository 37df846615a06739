/* tokens.h — storage of bearer tokens: only SHA-256 hashes are kept. */
#ifndef JB_DB_TOKENS_H
#define JB_DB_TOKENS_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "lib/err.h"

/* What the tokens table and the token's session say of one token. */
struct jb_token_info {
  char role[16]; /* "service", "buyer" or "agent" */
  char job_id[129]; /* the token's session; "" for service */
  unsigned char stored[32]; /* the hash as stored, for a constant-time comparison */
  char state[20]; /* the session's state; "" for service */
  bool ended; /* the session ended (accepted, aborted, failed): the token may only read */
  bool lapsed; /* it ended more than the retention period ago: the token is no longer valid */
};

/* Finds an unrevoked, unexpired (tokens.expires_at: console sign-ins) token by its 32-byte
 * SHA-256 `hash`, with its session's state. A buyer
 * token outlives its session's end for reading: `ended` is set, and `lapsed` once
 * `retention_s` seconds (JAILBOX_BUYER_READ_RETENTION_S) have passed since sessions.ended_at.
 * Agent tokens are revoked when their session ends; one found on an ended session anyway is
 * `lapsed`. JB_OK; JB_ERR_NOT_FOUND when unknown or revoked; JB_ERR_FAIL with `err` on a
 * database failure. */
int jb_db_token_find(PGconn *c, const unsigned char hash[32], long retention_s,
                     struct jb_token_info *out, jb_error *err);

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
