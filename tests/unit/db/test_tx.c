/* test_tx.c — the transaction that rolls back when its variable leaves scope (db/db.h
 * cleanup_tx), against a real PostgreSQL: the embedded cluster (db/pgembed.h) in a
 * directory of its own, started once for the file. Skipped when no PostgreSQL is installed. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/db.h"
#include "db/pgembed.h"

static struct jb_pgembed pg;
static struct jb_db *pool;
static PGconn *conn;
static char dir[] = "/tmp/jb-test-tx-XXXXXX";

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static int setup(void **state) {
  (void)state;
  jb_error err = {0};
  if (!mkdtemp(dir)) return -1;
  if (geteuid() == 0 && chmod(dir, 0755) < 0) return -1;
  if (jb_pgembed_start(&pg, dir, "", "jailbox", &err) < 0) {
    fprintf(stderr, "test_tx: no PostgreSQL (%s): skipped\n", err.msg);
    return 0;
  }
  if (jb_db_open(&pool, pg.conninfo, 1, 10, &err) < 0 || !(conn = jb_db_acquire(pool, &err))) {
    fprintf(stderr, "test_tx: %s\n", err.msg);
    return -1;
  }
  PGresult *r = jb_db_exec(conn, "CREATE TABLE tx_rows (x int)", 0, NULL, PGRES_COMMAND_OK, NULL,
                           &err, "create table");
  PQclear(r);
  return r ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  jb_error err = {0};
  if (conn) jb_db_release(pool, conn);
  jb_db_close(pool);
  jb_pgembed_stop(&pg, &err);
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

static long long rows(void) {
  jb_error err = {0};
  PGresult *r = jb_db_exec(conn, "SELECT count(*) FROM tx_rows", 0, NULL, PGRES_TUPLES_OK, NULL,
                           &err, "count");
  assert_non_null(r);
  long long n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  return n;
}

static void sql(const char *text) {
  jb_error err = {0};
  PGresult *r = jb_db_exec(conn, text, 0, NULL, PGRES_COMMAND_OK, NULL, &err, "statement");
  assert_non_null(r);
  PQclear(r);
}

enum how { COMMIT, LEAVE, FAIL_THEN_LEAVE, HAND_OVER };

/* One row inserted in a transaction of this scope, then left as `how` says. */
static int insert_row(enum how how) {
  jb_error err = {0};
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, conn, &err) < 0) return -1;
  sql("INSERT INTO tx_rows VALUES (1)");
  if (how == FAIL_THEN_LEAVE) {
    PGresult *r = jb_db_exec(conn, "SELECT 1 / 0", 0, NULL, PGRES_TUPLES_OK, NULL, &err, "fail");
    assert_null(r);
    assert_int_equal(PQtransactionStatus(conn), PQTRANS_INERROR);
    return -1;
  }
  if (how == HAND_OVER) {
    jb_tx_hand_over(&tx);
    return 0;
  }
  return how == COMMIT ? jb_tx_commit(&tx, &err) : 0;
}

static void scope_end_rolls_back(void **state) {
  (void)state;
  if (!conn) skip();
  long long before = rows();
  assert_int_equal(insert_row(LEAVE), 0);
  assert_int_equal(PQtransactionStatus(conn), PQTRANS_IDLE);
  assert_int_equal(rows(), before);
  assert_int_equal(insert_row(FAIL_THEN_LEAVE), -1);
  assert_int_equal(PQtransactionStatus(conn), PQTRANS_IDLE);
  assert_int_equal(rows(), before);
  assert_int_equal(insert_row(COMMIT), 0);
  assert_int_equal(PQtransactionStatus(conn), PQTRANS_IDLE);
  assert_int_equal(rows(), before + 1);
}

static void hand_over_keeps_it_open(void **state) {
  (void)state;
  if (!conn) skip();
  long long before = rows();
  assert_int_equal(insert_row(HAND_OVER), 0);
  assert_int_equal(PQtransactionStatus(conn), PQTRANS_INTRANS);
  jb_db_rollback(conn);
  assert_int_equal(rows(), before);
}

/* {0} holds nothing: a transaction opened outside the scope is left to its owner. */
static int leave_empty(void) {
  cleanup_tx struct jb_tx tx = {0};
  (void)tx;
  return 0;
}

static void empty_holds_nothing(void **state) {
  (void)state;
  if (!conn) skip();
  sql("BEGIN");
  leave_empty();
  assert_int_equal(PQtransactionStatus(conn), PQTRANS_INTRANS);
  jb_db_rollback(conn);
}

/* A pipeline's BEGIN held by jb_tx_hold; a later step fails: the scope's end rolls back. */
static int pipeline_fails(void) {
  jb_error err = {0};
  const struct jb_db_step steps[3] = {
      JB_DB_STEP("BEGIN", 0, NULL, PGRES_COMMAND_OK, "begin"),
      JB_DB_STEP("INSERT INTO tx_rows VALUES (2)", 0, NULL, PGRES_COMMAND_OK, "insert"),
      JB_DB_STEP("SELECT 1 / 0", 0, NULL, PGRES_TUPLES_OK, "fail")};
  cleanup_tx struct jb_tx tx = {0};
  jb_tx_hold(&tx, conn);
  PGresult *r = jb_db_pipeline(conn, steps, 3, &err);
  assert_null(r);
  assert_int_not_equal(PQtransactionStatus(conn), PQTRANS_IDLE);
  return -1;
}

static void held_pipeline_rolls_back(void **state) {
  (void)state;
  if (!conn) skip();
  long long before = rows();
  assert_int_equal(pipeline_fails(), -1);
  assert_int_equal(PQtransactionStatus(conn), PQTRANS_IDLE);
  assert_int_equal(rows(), before);
}

static void begin_as_uses_the_statement(void **state) {
  (void)state;
  if (!conn) skip();
  jb_error err = {0};
  {
    cleanup_tx struct jb_tx tx = {0};
    assert_int_equal(
        jb_tx_begin_as(&tx, conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "begin", &err),
        0);
    PGresult *r = jb_db_exec(conn, "SHOW transaction_isolation", 0, NULL, PGRES_TUPLES_OK, NULL,
                             &err, "show");
    assert_non_null(r);
    assert_string_equal(PQgetvalue(r, 0, 0), "repeatable read");
    PQclear(r);
  }
  assert_int_equal(PQtransactionStatus(conn), PQTRANS_IDLE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(scope_end_rolls_back),        cmocka_unit_test(hand_over_keeps_it_open),
      cmocka_unit_test(empty_holds_nothing),         cmocka_unit_test(held_pipeline_rolls_back),
      cmocka_unit_test(begin_as_uses_the_statement),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
