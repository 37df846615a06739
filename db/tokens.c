/* tokens.c — SQL for bearer tokens (see tokens.h). */
#include "db/tokens.h"

#include <string.h>

#include "db/db.h"

int jb_db_token_lookup(PGconn *c, const unsigned char hash[32], char role[16], char job_id[129],
                       unsigned char stored[32], jb_error *err) {
  const char *vals[1] = {(const char *)hash};
  const int lens[1] = {32}, fmts[1] = {1};
  PGresult *r = jb_db_prepared(c,
                               "SELECT role, coalesce(job_id, ''), token_hash FROM tokens"
                               " WHERE token_hash = $1 AND revoked_at IS NULL"
                               " AND (expires_at IS NULL OR expires_at > now())",
                               1, vals, lens, fmts, 1, NULL, err, "token lookup");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1 || PQgetlength(r, 0, 2) != 32) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  snprintf(role, 16, "%.*s", PQgetlength(r, 0, 0), PQgetvalue(r, 0, 0));
  snprintf(job_id, 129, "%.*s", PQgetlength(r, 0, 1), PQgetvalue(r, 0, 1));
  memcpy(stored, PQgetvalue(r, 0, 2), 32);
  PQclear(r);
  return JB_OK;
}

int jb_db_token_insert(PGconn *c, const unsigned char hash[32], const char *role,
                       const char *job_id, const char *label, jb_error *err) {
  const char *vals[4] = {(const char *)hash, role, job_id, label};
  const int lens[4] = {32, 0, 0, 0}, fmts[4] = {1, 0, 0, 0};
  PGresult *r = jb_db_prepared(c,
                               "INSERT INTO tokens (token_hash, role, job_id, label)"
                               " VALUES ($1, $2, $3, $4) ON CONFLICT (token_hash) DO NOTHING",
                               4, vals, lens, fmts, 0, NULL, err, "token insert");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_db_console_token_insert(PGconn *c, const unsigned char hash[32], const char *role,
                               const char *job_id, long ttl_s, jb_error *err) {
  char ttl[24];
  snprintf(ttl, sizeof ttl, "%ld", ttl_s);
  const char *vals[4] = {(const char *)hash, role, job_id, ttl};
  const int lens[4] = {32, 0, 0, 0}, fmts[4] = {1, 0, 0, 0};
  PGresult *r =
      jb_db_prepared(c,
                     "INSERT INTO tokens (token_hash, role, job_id, label, expires_at)"
                     " VALUES ($1, $2, $3, 'console', now() + $4::bigint * interval '1 s')",
                     4, vals, lens, fmts, 0, NULL, err, "console token insert");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_db_token_revoke(PGconn *c, const unsigned char hash[32], jb_error *err) {
  const char *vals[1] = {(const char *)hash};
  const int lens[1] = {32}, fmts[1] = {1};
  PGresult *r = jb_db_prepared(c,
                               "UPDATE tokens SET revoked_at = now()"
                               " WHERE token_hash = $1 AND revoked_at IS NULL",
                               1, vals, lens, fmts, 0, NULL, err, "token revoke");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_db_console_code_insert(PGconn *c, const unsigned char hash[32], const char *role,
                              const char *job_id, long ttl_s, jb_error *err) {
  char ttl[24];
  snprintf(ttl, sizeof ttl, "%ld", ttl_s);
  const char *vals[4] = {(const char *)hash, role, job_id, ttl};
  const int lens[4] = {32, 0, 0, 0}, fmts[4] = {1, 0, 0, 0};
  PGresult *r = jb_db_prepared(
      c,
      "WITH gone AS (DELETE FROM console_codes WHERE expires_at < now() - interval '1 day')"
      " INSERT INTO console_codes (code_hash, role, job_id, expires_at)"
      " VALUES ($1, $2, $3, now() + $4::bigint * interval '1 s')",
      4, vals, lens, fmts, 0, NULL, err, "console code insert");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_db_console_code_use(PGconn *c, const unsigned char hash[32], char role[16], char job_id[129],
                           jb_error *err) {
  const char *vals[1] = {(const char *)hash};
  const int lens[1] = {32}, fmts[1] = {1};
  PGresult *r = jb_db_prepared(c,
                               "UPDATE console_codes SET used_at = now()"
                               " WHERE code_hash = $1 AND used_at IS NULL AND expires_at > now()"
                               " RETURNING role, coalesce(job_id, '')",
                               1, vals, lens, fmts, 0, NULL, err, "console code use");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  snprintf(role, 16, "%s", PQgetvalue(r, 0, 0));
  snprintf(job_id, 129, "%s", PQgetvalue(r, 0, 1));
  PQclear(r);
  return JB_OK;
}
