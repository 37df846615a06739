/* test_tool.c — the tools' names and their enum (sandbox/proto/tool.c): every tool's name
 * parses back to it, and anything else is JB_TOOL_UNKNOWN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "sandbox/proto/tool.h"

static void every_name_round_trips(void **state) {
  (void)state;
  for (int t = JB_TOOL_UNKNOWN + 1; t < JB_TOOL_COUNT; t++) {
    const char *name = jb_tool_name((enum jb_tool)t);
    assert_non_null(name);
    assert_int_equal(jb_tool_from_name(name), t);
    for (int u = JB_TOOL_UNKNOWN + 1; u < t; u++) /* no two tools share a name */
      assert_string_not_equal(name, jb_tool_name((enum jb_tool)u));
  }
  assert_string_equal(jb_tool_name(JB_TOOL_READ_MANY), "read_many");
  assert_string_equal(jb_tool_name(JB_TOOL_EXEC), "exec");
}

static void other_names_are_unknown(void **state) {
  (void)state;
  const char *other[] = {"", "Read", "read ", "readmany", "rm", "write\n", "recall", "ping"};
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    assert_int_equal(jb_tool_from_name(other[i]), JB_TOOL_UNKNOWN);
  assert_int_equal(jb_tool_from_name(NULL), JB_TOOL_UNKNOWN);
  assert_null(jb_tool_name(JB_TOOL_UNKNOWN));
  assert_null(jb_tool_name(JB_TOOL_COUNT));
  assert_null(jb_tool_name((enum jb_tool) - 1));
}

static void only_the_changing_tools_change_files(void **state) {
  (void)state;
  const char *changing[] = {"write", "edit", "mkdir", "move", "delete"};
  int n = 0;
  for (int t = JB_TOOL_UNKNOWN; t < JB_TOOL_COUNT; t++) {
    bool want = false;
    const char *name = jb_tool_name((enum jb_tool)t);
    for (size_t i = 0; name && i < sizeof changing / sizeof changing[0]; i++)
      want = want || strcmp(name, changing[i]) == 0;
    assert_int_equal(jb_tool_changes_files((enum jb_tool)t), want);
    n += want;
  }
  assert_int_equal(n, 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_name_round_trips),
      cmocka_unit_test(other_names_are_unknown),
      cmocka_unit_test(only_the_changing_tools_change_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
