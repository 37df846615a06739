/* test_migrate.c — migration names, ordering checks, and the embedded set itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "db/migrate.h"

static void version_parsing(void **state) {
  long v = 0;
  assert_int_equal(jb_migration_version("001_initial_schema.sql", &v, NULL), 0);
  assert_int_equal(v, 1);
  assert_int_equal(jb_migration_version("042_add_x.sql", &v, NULL), 0);
  assert_int_equal(v, 42);
  const char *bad[] = {
      "initial.sql",  "001-initial.sql",         "001_.sql", "001_Initial.sql", "001_init.txt",
      "000_zero.sql", "0123456789_too_long.sql", "_x.sql",   "001_a b.sql"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    jb_error err = {0};
    assert_int_equal(jb_migration_version(bad[i], &v, &err), -1);
    assert_true(err.msg[0] != '\0');
  }
}

static void ordering(void **state) {
  const struct jb_migration ok[] = {{"001_a.sql", ""}, {"002_b.sql", ""}, {"010_c.sql", ""}};
  assert_int_equal(jb_migrations_check(ok, 3, NULL), 0);

  jb_error err = {0};
  const struct jb_migration dup[] = {{"001_a.sql", ""}, {"001_b.sql", ""}};
  assert_int_equal(jb_migrations_check(dup, 2, &err), -1);
  assert_non_null(strstr(err.msg, "twice"));

  const struct jb_migration back[] = {{"002_a.sql", ""}, {"001_b.sql", ""}};
  assert_int_equal(jb_migrations_check(back, 2, &err), -1);
  assert_non_null(strstr(err.msg, "out of order"));

  /* numeric, not text, order: 2 before 10 */
  const struct jb_migration num[] = {{"2_a.sql", ""}, {"10_b.sql", ""}};
  assert_int_equal(jb_migrations_check(num, 2, NULL), 0);
}

static void embedded_set(void **state) {
  assert_true(jb_migrations_count >= 1);
  assert_int_equal(jb_migrations_check(jb_migrations, jb_migrations_count, NULL), 0);
  assert_string_equal(jb_migrations[0].name, "001_initial_schema.sql");
  /* the first migration creates every table later issues need */
  const char *tables[] = {"CREATE TABLE sessions",
                          "CREATE TABLE ops",
                          "CREATE TABLE audit_entries",
                          "CREATE TABLE agents",
                          "CREATE TABLE tokens",
                          "CREATE TABLE launch_jobs",
                          "CREATE TABLE audit_signing_keys"};
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
    assert_non_null(strstr(jb_migrations[0].sql, tables[i]));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(version_parsing),
      cmocka_unit_test(ordering),
      cmocka_unit_test(embedded_set),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
