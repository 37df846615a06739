/* test_op_state.c — the op states (db/ops.h enum jb_op_state): each one's name is the text
 * of the ops.state column (the CHECK list of migration 001 and of migration 020, which adds
 * running, read from the migrations themselves), and a name that is none of them is
 * JB_OP_UNKNOWN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/ops.h"

static void names_round_trip(void **state) {
  (void)state;
  static const char *const want[] = {"pending", "approved", "rejected", "done",
                                     "failed",  "running",  "staged"};
  for (int st = JB_OP_PENDING; st <= JB_OP_STAGED; st++) {
    assert_string_equal(jb_op_state_name((enum jb_op_state)st), want[st]);
    assert_int_equal(jb_op_state_from_name(want[st]), st);
  }
  assert_int_equal(jb_op_state_from_name("approved"), JB_OP_APPROVED);
  assert_int_equal(jb_op_state_from_name("pending"), JB_OP_PENDING);
}

static void anything_else_is_unknown(void **state) {
  (void)state;
  assert_int_equal(jb_op_state_from_name(NULL), JB_OP_UNKNOWN);
  assert_int_equal(jb_op_state_from_name(""), JB_OP_UNKNOWN);
  assert_int_equal(jb_op_state_from_name("queued"), JB_OP_UNKNOWN); /* not a column value */
  assert_int_equal(jb_op_state_from_name("Done"), JB_OP_UNKNOWN);
  assert_int_equal(jb_op_state_from_name("done "), JB_OP_UNKNOWN);
  assert_null(jb_op_state_name(JB_OP_UNKNOWN));
  assert_null(jb_op_state_name((enum jb_op_state)(JB_OP_STAGED + 1)));
}

/* The CHECK of ops.state in migrations/001_initial_schema.sql lists exactly the enum's names,
 * in its order. */
static void the_column_holds_these(void **state) {
  (void)state;
  FILE *f = fopen(JB_SOURCE_DIR "/migrations/001_initial_schema.sql", "r");
  assert_non_null(f);
  char line[512];
  const char *check = NULL;
  while (fgets(line, sizeof line, f))
    if (strstr(line, "CHECK (state IN ('pending'") && (check = strstr(line, "IN ("))) break;
  fclose(f);
  assert_non_null(check);
  char want[200] = "IN (";
  for (int st = JB_OP_PENDING; st <= JB_OP_FAILED; st++)
    snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'", st ? ", " : "",
             jb_op_state_name((enum jb_op_state)st));
  strcat(want, "))");
  assert_memory_equal(check, want, strlen(want));
  /* migration 020: the same list with running after approved */
  f = fopen(JB_SOURCE_DIR "/migrations/020_exec.sql", "r");
  assert_non_null(f);
  check = NULL;
  while (fgets(line, sizeof line, f))
    if (strstr(line, "CHECK (state IN ('pending'") && (check = strstr(line, "IN ("))) break;
  fclose(f);
  assert_non_null(check);
  static const enum jb_op_state order[] = {JB_OP_PENDING,  JB_OP_APPROVED, JB_OP_RUNNING,
                                           JB_OP_REJECTED, JB_OP_DONE,     JB_OP_FAILED};
  snprintf(want, sizeof want, "IN (");
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
    snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'", i ? ", " : "",
             jb_op_state_name(order[i]));
  strcat(want, "))");
  assert_memory_equal(check, want, strlen(want));
  /* migration 047: staged after them */
  f = fopen(JB_SOURCE_DIR "/migrations/047_batch.sql", "r");
  assert_non_null(f);
  check = NULL;
  while (fgets(line, sizeof line, f))
    if (strstr(line, "CHECK (state IN ('pending'") && (check = strstr(line, "IN ("))) break;
  fclose(f);
  assert_non_null(check);
  want[strlen(want) - 2] = '\0';
  strcat(want, ", 'staged'))");
  assert_memory_equal(check, want, strlen(want));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(names_round_trip),
      cmocka_unit_test(anything_else_is_unknown),
      cmocka_unit_test(the_column_holds_these),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
