/* test_op_names.c — the names of the agent's tools (api/core/ops.c jb_tool_name,
 * jb_tool_from_name, jb_tool_mutates) and of the session states (db/sessions.c
 * jb_session_state_name, jb_session_state_from_name): every value round-trips through its wire name, the names are
 * the ones stored and sent, and anything else is unknown. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <string.h>

#include "api/core/ops.h"
#include "db/sessions.h"

static void tool_names(void **state) {
  (void)state;
  static const struct {
    enum jb_tool tool;
    const char *name;
  } want[] = {
      {JB_TOOL_READ, "read"},   {JB_TOOL_WRITE, "write"},         {JB_TOOL_LIST, "list"},
      {JB_TOOL_DONE, "done"},   {JB_TOOL_READ_MANY, "read_many"}, {JB_TOOL_EDIT, "edit"},
      {JB_TOOL_FIND, "find"},   {JB_TOOL_SEARCH, "search"},       {JB_TOOL_STAT, "stat"},
      {JB_TOOL_MKDIR, "mkdir"}, {JB_TOOL_MOVE, "move"},           {JB_TOOL_DELETE, "delete"}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    assert_string_equal(jb_tool_name(want[i].tool), want[i].name);
    assert_int_equal(jb_tool_from_name(want[i].name), want[i].tool);
  }
}

static void tool_unknown(void **state) {
  (void)state;
  static const char *const bad[] = {"",      "Read", "READ",     "read ",   " read", "rea",
                                    "reads", "Stat", "readmany", "delete ", "rm",    "done\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(jb_tool_from_name(bad[i]), JB_TOOL_UNKNOWN);
  assert_int_equal(jb_tool_from_name(NULL), JB_TOOL_UNKNOWN);
  assert_null(jb_tool_name(JB_TOOL_UNKNOWN));
  assert_null(jb_tool_name(JB_TOOL_COUNT));
  assert_null(jb_tool_name((enum jb_tool) - 7));
}

/* exactly write, edit, mkdir, move, delete and exec may change the workspace (and are
 * supervised) */
static void tool_mutates(void **state) {
  (void)state;
  for (int t = 0; t < JB_TOOL_COUNT; t++) {
    const char *n = jb_tool_name((enum jb_tool)t);
    bool want = !strcmp(n, "write") || !strcmp(n, "edit") || !strcmp(n, "mkdir") ||
                !strcmp(n, "move") || !strcmp(n, "delete") || !strcmp(n, "exec");
    assert_int_equal(jb_tool_mutates((enum jb_tool)t), want);
  }
  assert_false(jb_tool_mutates(JB_TOOL_UNKNOWN));
}

static void state_names(void **state) {
  (void)state;
  static const struct {
    enum jb_session_state s;
    const char *name;
    bool live;
  } want[] = {
      {JB_SESSION_CREATED, "created", true},
      {JB_SESSION_PRESCANNING, "prescanning", true},
      {JB_SESSION_AWAITING_AGENT, "awaiting_agent", true},
      {JB_SESSION_ACTIVE, "active", true},
      {JB_SESSION_PAUSED, "paused", true},
      {JB_SESSION_DONE, "done", true},
      {JB_SESSION_ACCEPTED, "accepted", false},
      {JB_SESSION_ABORTED, "aborted", false},
      {JB_SESSION_FAILED, "failed", false},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    assert_string_equal(jb_session_state_name(want[i].s), want[i].name);
    assert_int_equal(jb_session_state_from_name(want[i].name), want[i].s);
    /* the same lists as the string checks the database code uses */
    assert_int_equal(jb_state_is_live(want[i].name), want[i].live);
    assert_true(jb_state_is_known(want[i].name));
  }
}

static void state_unknown(void **state) {
  (void)state;
  static const char *const bad[] = {"",         "Active",         "ACTIVE",  "active ",
                                    "awaiting", "awaiting-agent", "pending", "approved",
                                    "rejected", "ended"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(jb_session_state_from_name(bad[i]), JB_SESSION_UNKNOWN);
  assert_int_equal(jb_session_state_from_name(NULL), JB_SESSION_UNKNOWN);
  assert_null(jb_session_state_name(JB_SESSION_UNKNOWN));
  assert_null(jb_session_state_name((enum jb_session_state)(JB_SESSION_FAILED + 1)));
  assert_null(jb_session_state_name((enum jb_session_state) - 3));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(tool_names),    cmocka_unit_test(tool_unknown),
      cmocka_unit_test(tool_mutates),  cmocka_unit_test(state_names),
      cmocka_unit_test(state_unknown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
