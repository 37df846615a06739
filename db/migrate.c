/* migrate.c — applies the embedded migrations (see migrate.h). */
#include "db/migrate.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"

/* Key of the advisory lock that serializes migrations: "jailbox!" as a big-endian int64. */
#define MIGRATION_LOCK_KEY "7665523954990151713"

int jb_migration_version(const char *name, long *version, jb_error *err) {
  size_t d = 0;
  while (isdigit((unsigned char)name[d])) d++;
  if (d == 0 || d > 9 || name[d] != '_')
    return jb_fail(err, EINVAL, "migration '%s': name must start with digits and '_'", name);
  const char *desc = name + d + 1;
  size_t len = strlen(desc);
  if (len <= 4 || strcmp(desc + len - 4, ".sql") != 0)
    return jb_fail(err, EINVAL, "migration '%s': name must end in .sql", name);
  for (size_t i = 0; i < len - 4; i++)
    if (!(islower((unsigned char)desc[i]) || isdigit((unsigned char)desc[i]) || desc[i] == '_'))
      return jb_fail(err, EINVAL, "migration '%s': description must be [a-z0-9_]", name);
  long v = strtol(name, NULL, 10);
  if (v <= 0) return jb_fail(err, EINVAL, "migration '%s': version must be > 0", name);
  *version = v;
  return 0;
}

int jb_migrations_check(const struct jb_migration *m, size_t n, jb_error *err) {
  long prev = 0;
  for (size_t i = 0; i < n; i++) {
    long v;
    if (jb_migration_version(m[i].name, &v, err) < 0) return -1;
    if (v == prev) return jb_fail(err, EINVAL, "migration version %ld appears twice", v);
    if (v < prev)
      return jb_fail(err, EINVAL, "migration '%s' is out of order (after version %ld)", m[i].name,
                     prev);
    prev = v;
  }
  return 0;
}

/* Runs `sql` (one or more statements); fine when it ends in a command or a query. */
static int exec_ok(PGconn *c, const char *sql, jb_error *err, const char *what) {
  PGresult *r = PQexec(c, sql);
  ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    jb_db_fail_res(err, r, what);
    PQclear(r);
    return -1;
  }
  PQclear(r);
  return 0;
}

/* Reads the recorded versions into a new array *have (free it) of *nhave items. A missing
 * schema_migrations table reads as none. Returns 0 or -1 with `err` set. */
static int read_versions(PGconn *c, long **have, int *nhave, jb_error *err) {
  *have = NULL;
  *nhave = 0;
  PGresult *r = PQexec(c, "SELECT version FROM schema_migrations");
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    int missing = state && strcmp(state, "42P01") == 0; /* undefined_table */
    if (!missing) jb_db_fail_res(err, r, "read schema_migrations");
    PQclear(r);
    return missing ? 0 : -1;
  }
  int n = PQntuples(r);
  *have = calloc((size_t)n + 1, sizeof **have);
  if (!*have) {
    PQclear(r);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  for (int i = 0; i < n; i++) (*have)[i] = strtol(PQgetvalue(r, i, 0), NULL, 10);
  *nhave = n;
  PQclear(r);
  return 0;
}

static int has_version(const long *have, int nhave, long v) {
  for (int i = 0; i < nhave; i++)
    if (have[i] == v) return 1;
  return 0;
}

int jb_migrate(PGconn *c, const struct jb_migration *m, size_t n, int *applied, jb_error *err) {
  if (applied) *applied = 0;
  if (jb_migrations_check(m, n, err) < 0) return -1;
  if (exec_ok(c, "BEGIN", err, "begin migrations") < 0) return -1;
  cleanup_tx struct jb_tx tx = {0};
  jb_tx_hold(&tx, c);
  cleanup_free long *have = NULL;
  int nhave = 0, count = 0;
  if (exec_ok(c, "SELECT pg_advisory_xact_lock(" MIGRATION_LOCK_KEY ")", err,
              "take migration lock") < 0 ||
      exec_ok(c,
              "CREATE TABLE IF NOT EXISTS schema_migrations ("
              " version bigint PRIMARY KEY, name text NOT NULL,"
              " applied_at timestamptz NOT NULL DEFAULT now())",
              err, "create schema_migrations") < 0 ||
      read_versions(c, &have, &nhave, err) < 0)
    return -1;

  for (size_t i = 0; i < n; i++) {
    long v;
    jb_migration_version(m[i].name, &v, NULL);
    if (has_version(have, nhave, v)) continue;
    if (exec_ok(c, m[i].sql, err, m[i].name) < 0) {
      jb_error_wrap(err, "migration failed");
      return -1;
    }
    char ver[24];
    snprintf(ver, sizeof ver, "%ld", v);
    const char *params[2] = {ver, m[i].name};
    PGresult *ins = PQexecParams(c, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                                 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(ins) != PGRES_COMMAND_OK) {
      jb_db_fail_res(err, ins, "record migration");
      PQclear(ins);
      return -1;
    }
    PQclear(ins);
    count++;
  }
  if (exec_ok(c, "COMMIT", err, "commit migrations") < 0) return -1;
  jb_tx_hand_over(&tx); /* committed */
  if (applied) *applied = count;
  return 0;
}

int jb_migrations_pending(PGconn *c, const struct jb_migration *m, size_t n, long *pending,
                          jb_error *err) {
  long *have = NULL;
  int nhave = 0;
  if (read_versions(c, &have, &nhave, err) < 0) return -1;
  long count = 0;
  for (size_t i = 0; i < n; i++) {
    long v;
    if (jb_migration_version(m[i].name, &v, err) < 0) {
      free(have);
      return -1;
    }
    if (!has_version(have, nhave, v)) count++;
  }
  free(have);
  *pending = count;
  return 0;
}
