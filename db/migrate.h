/* migrate.h — schema migrations: numbered SQL files from migrations/, compiled into the
 * binary, applied in order under an advisory lock and recorded in schema_migrations. */
#ifndef JB_MIGRATE_H
#define JB_MIGRATE_H

#include <libpq-fe.h>
#include <stddef.h>

#include "lib/err.h"

struct jb_migration {
  const char *name; /* file name, "NNN_description.sql" */
  const char *sql; /* its text, applied verbatim */
};

/* The migrations compiled in from migrations/ (generated at build time), sorted by name. */
extern const struct jb_migration jb_migrations[];
extern const size_t jb_migrations_count;

/* Reads the version of a migration file name "NNN_description.sql" (NNN: 1 to 9 digits,
 * > 0; description: [a-z0-9_]+). Returns 0 and *version, or -1 with `err` set. */
int jb_migration_version(const char *name, long *version, jb_error *err);

/* Checks that `n` migrations have valid names and strictly increasing versions, no version
 * twice. Returns 0, or -1 with `err` naming the first offender. */
int jb_migrations_check(const struct jb_migration *m, size_t n, jb_error *err);

/* Applies every migration of `m` not yet recorded, in version order, in ONE transaction
 * holding a transaction-level advisory lock, so two instances starting together never apply
 * one twice. *applied (may be NULL) receives how many were applied now. Returns 0, or -1 with
 * `err` set (and nothing applied). */
int jb_migrate(PGconn *conn, const struct jb_migration *m, size_t n, int *applied, jb_error *err);

/* How many of `m` are not recorded in schema_migrations (all of them when the table does not
 * exist yet). Returns 0 and *pending, or -1 with `err` set when the query fails. */
int jb_migrations_pending(PGconn *conn, const struct jb_migration *m, size_t n, long *pending,
                          jb_error *err);

#endif
