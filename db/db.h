/* db.h — the PostgreSQL connection pool. All SQL of the project lives under db/. */
#ifndef JB_DB_H
#define JB_DB_H

#include <libpq-fe.h>

#include "lib/err.h"

struct jb_db;

/* Opens a pool of up to `size` connections to `conninfo` (a libpq URL or key=value string),
 * waiting at most `connect_timeout_s` seconds per connection. One connection is made at once
 * so that a bad or unreachable database is reported here. On success *out is a new pool
 * (free with jb_db_close). Returns 0, or -1 with `err` holding one line naming the problem. */
int jb_db_open(struct jb_db **out, const char *conninfo, int size, int connect_timeout_s,
               jb_error *err);

/* Borrows a healthy connection, reconnecting a broken one; blocks while all `size` are out.
 * Returns a borrowed PGconn (give it back with jb_db_release), or NULL with `err` set when
 * the database cannot be reached. */
PGconn *jb_db_acquire(struct jb_db *db, jb_error *err);

/* Asks PostgreSQL to cancel the statement running on every connection lent out now (PQcancel,
 * from any thread): each borrower's statement fails ("canceling statement due to user
 * request") and its transaction rolls back, nothing of it committed. For the end of a
 * shutdown's grace, so that no request still waiting in the database (on a lock, say) holds
 * the stop or commits after its caller was told it failed. A connection running nothing is
 * untouched. Returns how many cancel requests were sent. `db` may be NULL (0). */
int jb_db_cancel_lent(struct jb_db *db);

/* Gives `conn` back to the pool. A connection left inside a transaction is rolled back; one
 * that is broken, still in pipeline mode, or not idle after the rollback is closed instead
 * (the pool makes a new one when next asked). */
void jb_db_release(struct jb_db *db, PGconn *conn);

/* Closes every connection and frees the pool. NULL is allowed. */
void jb_db_close(struct jb_db *db);

/* Copies the first line of libpq's error for `conn` into `err` after `what`. Returns -1. */
int jb_db_fail(jb_error *err, PGconn *conn, const char *what);

/* As jb_db_fail for a failed result `res` (uses its SQLSTATE and primary message). */
int jb_db_fail_res(jb_error *err, const PGresult *res, const char *what);

/* Runs `sql` as a prepared statement of `conn` (prepared on its first use on each connection,
 * named after the address of `sql`, which must therefore have static storage: a string
 * literal) with `n` parameters: `params` values, `lengths`/`formats` as for PQexecPrepared
 * (NULL: all text). Result columns come back in `result_format` (0 text, 1 binary).
 * Returns the result when its status is PGRES_COMMAND_OK or PGRES_TUPLES_OK, else NULL with
 * `err` set to "`what`: <server message>" and the SQLSTATE copied to `sqlstate` (6 bytes,
 * may be NULL). */
PGresult *jb_db_prepared(PGconn *conn, const char *sql, int n, const char *const *params,
                         const int *lengths, const int *formats, int result_format, char *sqlstate,
                         jb_error *err, const char *what);

/* Runs `sql` with `n` text parameters (NULL entries are SQL NULL) and expects status `want`.
 * Static SQL (a literal) only: it is prepared once per connection (see jb_db_prepared).
 * Returns the result (PQclear it), or NULL with `err` set to "`what`: <server message>"; the
 * failed result's SQLSTATE is copied to `sqlstate` (6 bytes) when that is non-NULL. */
PGresult *jb_db_exec(PGconn *conn, const char *sql, int n, const char *const *params,
                     ExecStatusType want, char *sqlstate, jb_error *err, const char *what);

/* BEGIN / COMMIT / ROLLBACK. The first two return 0 or -1 with `err` set. */
/* One statement of jb_db_pipeline: static SQL `sql` (prepared once per connection, as
 * jb_db_exec) with `n` parameters, expected to end with status `want`. Parameters are text
 * unless `formats` (may be NULL) marks one binary (1), with its length in `lengths`. `keep`
 * (may be NULL) receives this step's result when the whole pipeline succeeded (PQclear it). */
struct jb_db_step {
  const char *sql;
  int n;
  const char *const *params;
  ExecStatusType want;
  const char *what;
  const int *lengths;
  const int *formats;
  PGresult **keep;
};

/* A text-parameter step whose result is not kept. */
#define JB_DB_STEP(sql_, n_, params_, want_, what_) \
  { .sql = (sql_), .n = (n_), .params = (params_), .want = (want_), .what = (what_) }

/* Runs `steps` in order in one round trip (libpq pipeline mode, PostgreSQL protocol 3
 * "extended query" messages ended by one Sync). A step that fails in the server stops the
 * rest: the server skips every later step of the pipeline (so a COMMIT after a failed
 * statement never runs; a transaction the steps opened is then left failed, for the caller
 * to roll back). Only an error stops the server, so a step whose `want` does not fit its
 * statement (PGRES_TUPLES_OK for one that returns rows, PGRES_COMMAND_OK for one that does
 * not; told by a Describe, once per connection) is refused before anything is sent (EINVAL).
 * Returns the last step's result (PQclear it), or NULL with `err` naming the first step that
 * failed (no step's `keep` is then set); the connection is out of pipeline mode either way. */
PGresult *jb_db_pipeline(PGconn *conn, const struct jb_db_step *steps, int n_steps, jb_error *err);

int jb_db_begin(PGconn *conn, jb_error *err);
int jb_db_commit(PGconn *conn, jb_error *err);
void jb_db_rollback(PGconn *conn);

/* A transaction that rolls back when its variable leaves scope, unless committed (a cleanup
 * attribute, as cleanup_free; crun/bubblewrap style) — instead of a `goto fail` ladder:
 *
 *   cleanup_tx struct jb_tx tx = {0};
 *   if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
 *   … every early return rolls back …
 *   return jb_tx_commit(&tx, err) < 0 ? JB_ERR_FAIL : JB_OK;
 *
 * The rollback (jb_db_rollback) runs after the return value is computed, and only when the
 * connection is still inside a transaction. {0} holds nothing: leaving scope does nothing. */
struct jb_tx {
  PGconn *conn; /* borrowed; NULL once committed or rolled back */
};

/* BEGIN on `conn`, held by `tx`. 0, or -1 with `err` set (`tx` then holds nothing). */
int jb_tx_begin(struct jb_tx *tx, PGconn *conn, jb_error *err);

/* As jb_tx_begin with the static statement `begin_sql` (a literal, e.g. "BEGIN ISOLATION
 * LEVEL REPEATABLE READ READ ONLY"); `what` names it in `err`. */
int jb_tx_begin_as(struct jb_tx *tx, PGconn *conn, const char *begin_sql, const char *what,
                   jb_error *err);

/* Makes `tx` hold a transaction opened on `conn` by other means (a BEGIN step of
 * jb_db_pipeline), or one that is about to be: from here on leaving scope rolls it back. */
void jb_tx_hold(struct jb_tx *tx, PGconn *conn);

/* COMMIT. 0 (`tx` then holds nothing), or -1 with `err` set (still held: leaving scope rolls
 * back whatever is left). A `tx` that holds nothing: 0, nothing sent. */
int jb_tx_commit(struct jb_tx *tx, jb_error *err);

/* Lets go without ending the transaction: it stays open on the connection for the caller
 * (a claim that holds its op until jb_db_op_complete commits). */
void jb_tx_hand_over(struct jb_tx *tx);

/* Rolls back now (when the connection is inside a transaction) and lets go. */
void jb_tx_rollback(struct jb_tx *tx);

#define cleanup_tx __attribute__((cleanup(jb_tx_rollback)))

#endif
