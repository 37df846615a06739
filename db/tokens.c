/* tokens.c — SQL for bearer tokens (see tokens.h). */
#include "db/tokens.h"

#include <stdio.h>
#include <string.h>

#include "db/db.h"

int jb_db_token_find(PGconn *c, const unsigned char hash[32], long retention_s,
                     struct jb_token_info *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  char ret[32];
  snprintf(ret, sizeof ret, "%ld", retention_s);
  const char *vals[2] = {(const char *)hash, ret};
  const int lens[2] = {32, 0}, fmts[2] = {1, 0};
  PGresult *r =
      jb_db_prepared(c,
                     "SELECT t.role, coalesce(t.job_id, ''), t.token_hash, coalesce(s.state, ''),"
                     " s.ended_at IS NOT NULL,"
                     " s.ended_at IS NOT NULL AND (t.role <> 'buyer'"
                     "   OR s.ended_at <= now() - make_interval(secs => $2::bigint))"
                     " FROM tokens t LEFT JOIN sessions s ON s.job_id = t.job_id"
                     " WHERE t.token_hash = $1 AND t.revoked_at IS NULL"
                     " AND (t.expires_at IS NULL OR t.expires_at > now())",
                     2, vals, lens, fmts, 1, NULL, err, "token lookup");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1 || PQgetlength(r, 0, 2) != 32) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  snprintf(out->role, sizeof out->role, "%.*s", PQgetlength(r, 0, 0), PQgetvalue(r, 0, 0));
  snprintf(out->job_id, sizeof out->job_id, "%.*s", PQgetlength(r, 0, 1), PQgetvalue(r, 0, 1));
  memcpy(out->stored, PQgetvalue(r, 0, 2), 32);
  snprintf(out->state, sizeof out->state, "%.*s", PQgetlength(r, 0, 3), PQgetvalue(r, 0, 3));
  out->ended = PQgetlength(r, 0, 4) == 1 && PQgetvalue(r, 0, 4)[0] == 1; /* binary bool */
  out->lapsed = PQgetlength(r, 0, 5) == 1 && PQgetvalue(r, 0, 5)[0] == 1;
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
