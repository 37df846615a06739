/* test_session_facts.c — what the op path decides on of a session (db/sessions.h
 * jb_session_facts): the mode names, a copy that shares nothing with its source, a clear that
 * leaves the struct empty; and the expectation the op path builds from it
 * (api/core/op_call.h op_direct_expect), checked by the insert against the session's row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/op_call.h"
#include "db/sessions.h"

static void mode_names(void **state) {
  (void)state;
  assert_string_equal(jb_session_mode_name(JB_MODE_SUPERVISED), "supervised");
  assert_string_equal(jb_session_mode_name(JB_MODE_UNSUPERVISED), "unsupervised");
  assert_null(jb_session_mode_name((enum jb_session_mode)(JB_MODE_UNSUPERVISED + 1)));
  assert_null(jb_session_mode_name((enum jb_session_mode) - 1));
}

/* Facts as a read of an active, unsupervised session with one exclusion and one flag gives. */
static struct jb_session_facts sample(void) {
  return (struct jb_session_facts){
      .state = JB_SESSION_ACTIVE,
      .mode = JB_MODE_UNSUPERVISED,
      .worker = strdup("w-1"),
      .exclude = json_pack("[s,s]", "*.env", "secrets/**"),
      .flagged = json_pack("[{s:s,s:s}]", "path", "link", "kind", "symlink_outside"),
      .exec = JB_EXEC_UNAVAILABLE,
      .exec_reason = strdup("no spawner answered"),
  };
}

static void copy_shares_nothing(void **state) {
  (void)state;
  cleanup_session_facts struct jb_session_facts src = sample();
  cleanup_session_facts struct jb_session_facts dst = {.state = JB_SESSION_UNKNOWN};
  jb_error err = {0};
  assert_int_equal(jb_session_facts_copy(&dst, &src, &err), JB_OK);
  assert_int_equal(dst.state, JB_SESSION_ACTIVE);
  assert_int_equal(dst.mode, JB_MODE_UNSUPERVISED);
  assert_string_equal(dst.worker, "w-1");
  assert_ptr_not_equal(dst.worker, src.worker);
  assert_int_equal(dst.exec, JB_EXEC_UNAVAILABLE);
  assert_string_equal(dst.exec_reason, "no spawner answered");
  assert_ptr_not_equal(dst.exec_reason, src.exec_reason);
  assert_true(json_equal(dst.exclude, src.exclude));
  assert_true(json_equal(dst.flagged, src.flagged));
  assert_ptr_not_equal(dst.exclude, src.exclude);
  assert_ptr_not_equal(dst.flagged, src.flagged);
  /* nested values are copied too: changing the copy leaves the source as it was */
  json_object_set_new(json_array_get(dst.flagged, 0), "kind", json_string("hardlink"));
  json_array_clear(dst.exclude);
  assert_string_equal(json_string_value(json_object_get(json_array_get(src.flagged, 0), "kind")),
                      "symlink_outside");
  assert_int_equal(json_array_size(src.exclude), 2);
  assert_int_equal(src.exclude->refcount, 1);
  assert_int_equal(src.flagged->refcount, 1);
}

static void copy_of_absent_fields(void **state) {
  (void)state;
  struct jb_session_facts src = {
      .state = JB_SESSION_AWAITING_AGENT, .mode = JB_MODE_SUPERVISED, .exclude = json_array()};
  struct jb_session_facts dst = {.state = JB_SESSION_UNKNOWN};
  jb_error err = {0};
  assert_int_equal(jb_session_facts_copy(&dst, &src, &err), JB_OK);
  assert_int_equal(dst.state, JB_SESSION_AWAITING_AGENT);
  assert_null(dst.worker);
  assert_null(dst.flagged);
  assert_true(json_is_array(dst.exclude));
  jb_session_facts_clear(&dst);
  jb_session_facts_clear(&src);
}

static void clear_empties(void **state) {
  (void)state;
  struct jb_session_facts f = sample();
  jb_session_facts_clear(&f);
  assert_int_equal(f.state, JB_SESSION_UNKNOWN);
  assert_int_equal(f.mode, JB_MODE_SUPERVISED);
  assert_null(f.worker);
  assert_null(f.exclude);
  assert_null(f.flagged);
  jb_session_facts_clear(&f); /* again: nothing left to free */
  jb_session_facts_clear(NULL);
}

/* The expectation's JSON text, compact, as jb_db_op_create receives it. */
static char *expect_text(const struct jb_session_facts *f) {
  json_t *x = op_direct_expect(f);
  assert_non_null(x);
  char *t = json_dumps(x, JSON_COMPACT);
  json_decref(x);
  assert_non_null(t);
  return t;
}

static void expectation(void **state) {
  (void)state;
  cleanup_session_facts struct jb_session_facts f = sample();
  cleanup_free char *t1 = expect_text(&f);
  assert_string_equal(t1,
                      "{\"mode\":\"unsupervised\",\"exclude\":[\"*.env\",\"secrets/**\"],"
                      "\"flagged\":[{\"path\":\"link\",\"kind\":\"symlink_outside\"}]}");
  /* no pre-scan flags in the contract: [] as the insert's coalesce reads them */
  json_decref(f.flagged);
  f.flagged = NULL;
  f.mode = JB_MODE_SUPERVISED;
  json_array_clear(f.exclude);
  cleanup_free char *t2 = expect_text(&f);
  assert_string_equal(t2, "{\"mode\":\"supervised\",\"exclude\":[],\"flagged\":[]}");
  /* a flag list stored as JSON null stays null */
  f.flagged = json_null();
  cleanup_free char *t3 = expect_text(&f);
  assert_string_equal(t3, "{\"mode\":\"supervised\",\"exclude\":[],\"flagged\":null}");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mode_names),
      cmocka_unit_test(copy_shares_nothing),
      cmocka_unit_test(copy_of_absent_fields),
      cmocka_unit_test(clear_empties),
      cmocka_unit_test(expectation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
