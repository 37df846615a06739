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
                               " WHERE token_hash = $1 AND revoked_at IS NULL",
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
