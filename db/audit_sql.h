/* audit_sql.h — statement helpers shared by the two files of the audit chain's SQL
 * (audit_store.c: append, seal, load; audit_keys.c: the published signing keys). Internal to
 * db/: nothing outside it includes this. */
#ifndef JB_DB_AUDIT_SQL_H
#define JB_DB_AUDIT_SQL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/err.h"

/* SQL (a boolean expression) of whether the audit chain of the session whose job id is the
 * SQL expression `J` takes no more entries: sealed (audit_heads.sealed), or its seal pending
 * (seals_pending: an escape's abort, sealed once its container is gone). */
#define JB_SQL_CHAIN_CLOSED(J)                                   \
  " (coalesce((SELECT sealed FROM audit_heads WHERE job_id = " J \
  "), false)"                                                    \
  "  OR EXISTS (SELECT 1 FROM seals_pending WHERE job_id = " J "))"

/* As JB_SQL_CHAIN_CLOSED, for rollback job `R` (an SQL bigint expression): a seal pending that
 * waits for that very rollback (seals_pending.rollback_id, migration 046: a rollback on
 * escape) does not close the chain to it. */
#define JB_SQL_CHAIN_CLOSED_BUT(J, R)                            \
  " (coalesce((SELECT sealed FROM audit_heads WHERE job_id = " J \
  "), false)"                                                    \
  "  OR EXISTS (SELECT 1 FROM seals_pending WHERE job_id = " J   \
  "   AND rollback_id IS DISTINCT FROM " R "))"

/* Runs the static SQL `sql` as a prepared statement of the connection (db.h jb_db_prepared)
 * with `n` parameters `vals`; `fmts` marks binary ones (bytea, 1) with their byte lengths in
 * `lens` (both may be NULL when all are text). Returns the result (the caller PQclears it)
 * when its status is `want`; else NULL with `err` naming `what`. */
PGresult *jb_audit_sql(PGconn *c, const char *sql, int n, const char *const *vals, const int *lens,
                       const int *fmts, ExecStatusType want, jb_error *err, const char *what);

/* Decodes the hex text at (row, col) of `r` into exactly `n` bytes at `out`. 0, or -1 when it
 * is NULL, of another length or not hex. */
int jb_audit_col_hex(const PGresult *r, int row, int col, unsigned char *out, size_t n);

/* Runs `begin_sql` when the connection is idle (*own true: the caller ends the transaction
 * with jb_audit_leave_tx), or joins the caller's open transaction (*own false). 0, or -1 with
 * `err` when the caller's transaction has failed or the connection is busy or broken. */
int jb_audit_enter_tx(PGconn *c, const char *begin_sql, bool *own, jb_error *err);

/* Ends a transaction begun by jb_audit_enter_tx (`own`): COMMIT when `rc` is JB_OK, else
 * ROLLBACK; a joined one (`own` false) is left to its owner. Returns `rc`, or JB_ERR_FAIL with
 * `err` when the COMMIT fails. */
int jb_audit_leave_tx(PGconn *c, bool own, int rc, jb_error *err);

#endif
