/* db.c — a fixed-size pool of libpq connections shared by the HTTP threads (see db.h). */
#include "db/db.h"

#include "lib/log.h"

#include <errno.h>
#include <pthread.h>
#include <libpq-events.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jb_db {
  pthread_mutex_t lock;
  pthread_cond_t freed;
  char *conninfo;
  char timeout[16];
  int size; /* most connections at once */
  int opened; /* connections that exist (idle + lent) */
  int n_idle;
  PGconn **idle; /* stack of idle connections, `size` slots */
  /* the connections lent out, each with the cancel handle made by the thread it was lent
   * to (libpq: PQgetCancel in the connection's thread, PQcancel from any): `size` slots,
   * NULL where free */
  PGconn **lent;
  PGcancel **cancel;
};

/* First non-empty line of a libpq message, with "FATAL:  " style prefixes kept. */
static void first_line(const char *m, char *out, size_t len) {
  while (*m == '\n' || *m == ' ') m++;
  size_t n = strcspn(m, "\n");
  if (n >= len) n = len - 1;
  memcpy(out, m, n);
  out[n] = '\0';
}

int jb_db_fail(jb_error *err, PGconn *conn, const char *what) {
  char line[400];
  first_line(conn ? PQerrorMessage(conn) : "out of memory", line, sizeof line);
  return jb_fail(err, EIO, "%s: %s", what, line);
}

int jb_db_fail_res(jb_error *err, const PGresult *res, const char *what) {
  const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
  const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
  char line[400];
  first_line(msg ? msg : (res ? PQresultErrorMessage(res) : "no result"), line, sizeof line);
  return jb_fail(err, EIO, "%s: %s%s%s%s", what, line, state ? " (SQLSTATE " : "",
                 state ? state : "", state ? ")" : "");
}

static void track_prepared(PGconn *c);

/* Server notices (e.g. "already exists, skipping") go to the log, never raw to stderr. */
static void on_notice(void *arg, const char *message) {
  char line[400];
  first_line(message, line, sizeof line);
  jb_log(JB_LOG_DEBUG, "postgres notice", "detail", line, NULL);
}

static PGconn *connect_one(struct jb_db *db, jb_error *err) {
  const char *const keys[] = {"dbname", "connect_timeout", "application_name", NULL};
  const char *const vals[] = {db->conninfo, db->timeout, "jailboxd", NULL};
  PGconn *c = PQconnectdbParams(keys, vals, 1);
  if (!c || PQstatus(c) != CONNECTION_OK) {
    jb_db_fail(err, c, "cannot connect to PostgreSQL");
    PQfinish(c);
    return NULL;
  }
  PQsetNoticeProcessor(c, on_notice, NULL);
  track_prepared(c);
  return c;
}

int jb_db_open(struct jb_db **out, const char *conninfo, int size, int connect_timeout_s,
               jb_error *err) {
  struct jb_db *db = calloc(1, sizeof *db);
  if (!db) return jb_fail(err, ENOMEM, "out of memory");
  db->conninfo = strdup(conninfo);
  db->idle = calloc((size_t)size, sizeof *db->idle);
  db->lent = calloc((size_t)size, sizeof *db->lent);
  db->cancel = calloc((size_t)size, sizeof *db->cancel);
  if (!db->conninfo || !db->idle || !db->lent || !db->cancel) {
    jb_db_close(db);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  db->size = size;
  snprintf(db->timeout, sizeof db->timeout, "%d", connect_timeout_s);
  pthread_mutex_init(&db->lock, NULL);
  pthread_cond_init(&db->freed, NULL);
  PGconn *c = connect_one(db, err);
  if (!c) {
    jb_db_close(db);
    return -1;
  }
  db->idle[db->n_idle++] = c;
  db->opened = 1;
  *out = db;
  return 0;
}

/* Records `c` as lent, with its cancel handle (made here, in the borrowing thread). */
static PGconn *lend(struct jb_db *db, PGconn *c) {
  PGcancel *k = PQgetCancel(c); /* NULL (out of memory): this one cannot be cancelled */
  pthread_mutex_lock(&db->lock);
  for (int i = 0; i < db->size; i++)
    if (!db->lent[i]) {
      db->lent[i] = c;
      db->cancel[i] = k;
      k = NULL;
      break;
    }
  pthread_mutex_unlock(&db->lock);
  if (k) PQfreeCancel(k); /* no free slot: cannot happen, `opened` <= size */
  return c;
}

PGconn *jb_db_acquire(struct jb_db *db, jb_error *err) {
  pthread_mutex_lock(&db->lock);
  while (db->n_idle == 0 && db->opened >= db->size) pthread_cond_wait(&db->freed, &db->lock);
  PGconn *c = NULL;
  if (db->n_idle > 0) {
    c = db->idle[--db->n_idle];
  } else {
    db->opened++; /* reserve the slot, connect outside the lock */
  }
  pthread_mutex_unlock(&db->lock);

  if (c && PQstatus(c) != CONNECTION_OK) {
    PQreset(c);
    if (PQstatus(c) == CONNECTION_OK) return lend(db, c);
    jb_db_fail(err, c, "cannot connect to PostgreSQL");
    PQfinish(c);
    c = NULL;
    goto give_back_slot;
  }
  if (c) return lend(db, c);
  c = connect_one(db, err);
  if (c) return lend(db, c);
give_back_slot:
  pthread_mutex_lock(&db->lock);
  db->opened--;
  pthread_cond_signal(&db->freed);
  pthread_mutex_unlock(&db->lock);
  return NULL;
}

int jb_db_cancel_lent(struct jb_db *db) {
  if (!db) return 0;
  int n = 0;
  char why[256];
  pthread_mutex_lock(&db->lock);
  for (int i = 0; i < db->size; i++)
    if (db->lent[i] && db->cancel[i] && PQcancel(db->cancel[i], why, sizeof why)) n++;
  pthread_mutex_unlock(&db->lock);
  return n;
}

void jb_db_release(struct jb_db *db, PGconn *conn) {
  if (!conn) return;
  /* kept only when idle: a connection left in pipeline mode (a pipeline cut short by a
   * server going away) or in a transaction that will not roll back would fail every later
   * use while PQstatus still says CONNECTION_OK */
  bool usable = PQstatus(conn) == CONNECTION_OK && PQpipelineStatus(conn) == PQ_PIPELINE_OFF;
  if (usable && PQtransactionStatus(conn) != PQTRANS_IDLE) PQclear(PQexec(conn, "ROLLBACK"));
  usable = usable && PQstatus(conn) == CONNECTION_OK && PQtransactionStatus(conn) == PQTRANS_IDLE;
  PGcancel *k = NULL;
  pthread_mutex_lock(&db->lock);
  for (int i = 0; i < db->size; i++)
    if (db->lent[i] == conn) {
      db->lent[i] = NULL;
      k = db->cancel[i];
      db->cancel[i] = NULL;
      break;
    }
  if (usable) {
    db->idle[db->n_idle++] = conn;
  } else {
    PQfinish(conn);
    db->opened--;
  }
  pthread_cond_signal(&db->freed);
  pthread_mutex_unlock(&db->lock);
  if (k) PQfreeCancel(k);
}

void jb_db_close(struct jb_db *db) {
  if (!db) return;
  for (int i = 0; i < db->n_idle; i++) PQfinish(db->idle[i]);
  for (int i = 0; db->cancel && i < db->size; i++)
    if (db->cancel[i]) PQfreeCancel(db->cancel[i]);
  free(db->idle);
  free(db->lent);
  free(db->cancel);
  free(db->conninfo);
  if (db->size) {
    pthread_mutex_destroy(&db->lock);
    pthread_cond_destroy(&db->freed);
  }
  free(db);
}

/* ---------- prepared statements, remembered per connection ---------- */

/* The statements prepared on one connection: kept as libpq instance data of an event
 * procedure, so that a reset connection (which loses them) starts empty again. */
struct prepared_set {
  size_t n, cap;
  const char **sql; /* the static SQL strings prepared so far */
  signed char *rows; /* for each: whether it returns rows (1) or not (0), -1 not asked yet */
};

static int on_conn_event(PGEventId id, void *info, void *passthrough) {
  (void)passthrough;
  if (id == PGEVT_CONNRESET || id == PGEVT_CONNDESTROY) {
    PGconn *c = id == PGEVT_CONNRESET ? ((PGEventConnReset *)info)->conn
                                      : ((PGEventConnDestroy *)info)->conn;
    struct prepared_set *ps = PQinstanceData(c, on_conn_event);
    if (ps) {
      free(ps->sql);
      free(ps->rows);
      free(ps);
      PQsetInstanceData(c, on_conn_event, NULL);
    }
  }
  return 1;
}

/* Registers the event procedure on a new connection (idempotent). */
static void track_prepared(PGconn *c) { PQregisterEventProc(c, on_conn_event, "jailbox", NULL); }

static bool is_prepared(PGconn *c, const char *sql) {
  struct prepared_set *ps = PQinstanceData(c, on_conn_event);
  for (size_t i = 0; ps && i < ps->n; i++)
    if (ps->sql[i] == sql) return true;
  return false;
}

static void mark_prepared(PGconn *c, const char *sql) {
  struct prepared_set *ps = PQinstanceData(c, on_conn_event);
  if (!ps) {
    ps = calloc(1, sizeof *ps);
    if (!ps || !PQsetInstanceData(c, on_conn_event, ps)) {
      free(ps);
      return; /* not remembered: it is prepared again next time, under the same name */
    }
  }
  if (ps->n == ps->cap) {
    size_t cap = ps->cap ? ps->cap * 2 : 16;
    const char **nv = realloc(ps->sql, cap * sizeof *nv);
    if (!nv) return;
    ps->sql = nv;
    signed char *nr = realloc(ps->rows, cap * sizeof *nr);
    if (!nr) return;
    ps->rows = nr;
    ps->cap = cap;
  }
  ps->rows[ps->n] = -1;
  ps->sql[ps->n++] = sql;
}

PGresult *jb_db_prepared(PGconn *conn, const char *sql, int n, const char *const *params,
                         const int *lengths, const int *formats, int result_format, char *sqlstate,
                         jb_error *err, const char *what) {
  char name[32];
  snprintf(name, sizeof name, "jb_%p", (const void *)sql);
  PGresult *r = NULL;
  if (!is_prepared(conn, sql)) {
    r = PQprepare(conn, name, sql, n, NULL);
    const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    /* 42P05 duplicate_prepared_statement: prepared before but not remembered */
    if (PQresultStatus(r) == PGRES_COMMAND_OK || (st && strcmp(st, "42P05") == 0)) {
      mark_prepared(conn, sql);
      PQclear(r);
      r = NULL;
    }
  }
  if (!r) r = PQexecPrepared(conn, name, n, params, lengths, formats, result_format);
  ExecStatusType got = PQresultStatus(r);
  if (got == PGRES_COMMAND_OK || got == PGRES_TUPLES_OK) return r;
  if (sqlstate) {
    const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    snprintf(sqlstate, 6, "%s", st ? st : "");
  }
  if (r)
    jb_db_fail_res(err, r, what);
  else
    jb_db_fail(err, conn, what);
  PQclear(r);
  return NULL;
}

PGresult *jb_db_exec(PGconn *conn, const char *sql, int n, const char *const *params,
                     ExecStatusType want, char *sqlstate, jb_error *err, const char *what) {
  PGresult *r = jb_db_prepared(conn, sql, n, params, NULL, NULL, 0, sqlstate, err, what);
  if (!r) return NULL;
  if (PQresultStatus(r) == want) return r;
  jb_fail(err, EIO, "%s: unexpected result %s", what, PQresStatus(PQresultStatus(r)));
  PQclear(r);
  return NULL;
}

/* Whether prepared statement `name` (of static SQL `sql`) returns rows: 1 or 0, remembered
 * per connection once asked (a Describe round trip); -1 with `err` when it cannot be told. */
static int statement_rows(PGconn *conn, const char *sql, const char *name, jb_error *err) {
  struct prepared_set *ps = PQinstanceData(conn, on_conn_event);
  size_t i = 0;
  while (ps && i < ps->n && ps->sql[i] != sql) i++;
  if (ps && i < ps->n && ps->rows[i] >= 0) return ps->rows[i];
  PGresult *d = PQdescribePrepared(conn, name);
  if (PQresultStatus(d) != PGRES_COMMAND_OK) {
    if (d)
      jb_db_fail_res(err, d, "describe");
    else
      jb_db_fail(err, conn, "describe");
    PQclear(d);
    return -1;
  }
  int rows = PQnfields(d) > 0;
  PQclear(d);
  if (ps && i < ps->n) ps->rows[i] = (signed char)rows;
  return rows;
}

PGresult *jb_db_pipeline(PGconn *conn, const struct jb_db_step *steps, int n_steps, jb_error *err) {
  char names[16][32];
  if (n_steps < 1 || n_steps > 16)
    return jb_fail(err, EINVAL, "pipeline of %d steps", n_steps), NULL;
  for (int i = 0; i < n_steps; i++) { /* prepared beforehand, in the ordinary way */
    snprintf(names[i], sizeof names[i], "jb_%p", (const void *)steps[i].sql);
    if (is_prepared(conn, steps[i].sql)) continue;
    PGresult *r = PQprepare(conn, names[i], steps[i].sql, steps[i].n, NULL);
    const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    bool done = PQresultStatus(r) == PGRES_COMMAND_OK || (st && strcmp(st, "42P05") == 0);
    if (!done) {
      if (r)
        jb_db_fail_res(err, r, steps[i].what);
      else
        jb_db_fail(err, conn, steps[i].what);
      PQclear(r);
      return NULL;
    }
    mark_prepared(conn, steps[i].sql);
    PQclear(r);
  }
  /* A step that ends with another status than its `want` without an error would not stop
   * the server from running the steps after it (a COMMIT among them): only an error does.
   * So whether each statement returns rows is checked against `want` before anything is sent. */
  for (int i = 0; i < n_steps; i++) {
    int rows = statement_rows(conn, steps[i].sql, names[i], err);
    if (rows < 0) return NULL;
    bool fits = steps[i].want == PGRES_TUPLES_OK ? rows == 1
                                                 : steps[i].want == PGRES_COMMAND_OK && rows == 0;
    if (!fits)
      return jb_fail(err, EINVAL, "%s: the statement %s rows; want %s", steps[i].what,
                     rows ? "returns" : "returns no", PQresStatus(steps[i].want)),
             NULL;
  }
  if (PQenterPipelineMode(conn) != 1) return jb_db_fail(err, conn, "pipeline"), NULL;
  bool sent = true;
  for (int i = 0; i < n_steps && sent; i++)
    sent = PQsendQueryPrepared(conn, names[i], steps[i].n, steps[i].params, steps[i].lengths,
                               steps[i].formats, 0) == 1;
  sent = sent && PQpipelineSync(conn) == 1;
  PGresult *last = NULL;
  bool failed = !sent;
  if (!sent) jb_db_fail(err, conn, "pipeline: send");
  PGresult *kept[16] = {0};
  for (int i = 0; i < n_steps; i++)
    if (steps[i].keep) *steps[i].keep = NULL;
  /* every step's result (each followed by a NULL), then the Sync's */
  for (int i = 0; sent && i < n_steps; i++) {
    PGresult *r = PQgetResult(conn);
    if (!r) {
      if (!failed) jb_db_fail(err, conn, steps[i].what);
      failed = true;
      break;
    }
    ExecStatusType got = PQresultStatus(r);
    if (!failed && got != steps[i].want) {
      if (got == PGRES_FATAL_ERROR)
        jb_db_fail_res(err, r, steps[i].what);
      else
        jb_fail(err, EIO, "%s: unexpected result %s", steps[i].what, PQresStatus(got));
      failed = true;
    }
    if (i == n_steps - 1 && !failed)
      last = r;
    else if (steps[i].keep && !failed)
      kept[i] = r;
    else
      PQclear(r);
    while ((r = PQgetResult(conn))) PQclear(r); /* the NULL that ends this step's results */
  }
  /* what is left up to the Sync's result: nothing after a good run; after a failure, the
   * results of the steps not read, or a broken connection's errors. A connection still in
   * pipeline mode when this returns is not given back to the pool (jb_db_release). */
  for (int nulls = 0; sent && nulls < 2 * n_steps + 2 && PQstatus(conn) == CONNECTION_OK;) {
    PGresult *r = PQgetResult(conn);
    if (!r) {
      nulls++;
      continue;
    }
    ExecStatusType got = PQresultStatus(r);
    PQclear(r);
    if (got == PGRES_PIPELINE_SYNC) break;
  }
  if (PQexitPipelineMode(conn) != 1 && !failed) {
    jb_db_fail(err, conn, "pipeline: exit");
    failed = true;
  }
  if (failed) {
    PQclear(last);
    for (int i = 0; i < n_steps; i++) PQclear(kept[i]);
    return NULL;
  }
  for (int i = 0; i < n_steps - 1; i++)
    if (steps[i].keep) *steps[i].keep = kept[i];
  return last;
}

int jb_db_begin(PGconn *conn, jb_error *err) {
  PGresult *r = jb_db_exec(conn, "BEGIN", 0, NULL, PGRES_COMMAND_OK, NULL, err, "begin");
  PQclear(r);
  return r ? 0 : -1;
}

int jb_db_commit(PGconn *conn, jb_error *err) {
  PGresult *r = jb_db_exec(conn, "COMMIT", 0, NULL, PGRES_COMMAND_OK, NULL, err, "commit");
  PQclear(r);
  return r ? 0 : -1;
}

void jb_db_rollback(PGconn *conn) {
  if (PQtransactionStatus(conn) != PQTRANS_IDLE) PQclear(PQexec(conn, "ROLLBACK"));
}

int jb_tx_begin(struct jb_tx *tx, PGconn *conn, jb_error *err) {
  tx->conn = NULL;
  if (jb_db_begin(conn, err) < 0) return -1;
  tx->conn = conn;
  return 0;
}

int jb_tx_begin_as(struct jb_tx *tx, PGconn *conn, const char *begin_sql, const char *what,
                   jb_error *err) {
  tx->conn = NULL;
  PGresult *r = jb_db_exec(conn, begin_sql, 0, NULL, PGRES_COMMAND_OK, NULL, err, what);
  if (!r) return -1;
  PQclear(r);
  tx->conn = conn;
  return 0;
}

void jb_tx_hold(struct jb_tx *tx, PGconn *conn) { tx->conn = conn; }

int jb_tx_commit(struct jb_tx *tx, jb_error *err) {
  if (!tx->conn) return 0;
  if (jb_db_commit(tx->conn, err) < 0) return -1;
  tx->conn = NULL;
  return 0;
}

void jb_tx_hand_over(struct jb_tx *tx) { tx->conn = NULL; }

void jb_tx_rollback(struct jb_tx *tx) {
  if (!tx->conn) return;
  jb_db_rollback(tx->conn);
  tx->conn = NULL;
}
