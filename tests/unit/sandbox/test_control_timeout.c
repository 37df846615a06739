/* test_control_timeout.c — the wait a request of the worker's control socket may ask for
 * (sandbox/worker/control.h): its timeoutMs when positive, an hour at most, the default
 * otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <limits.h>

#include "sandbox/worker/control.h"

static long of(json_t *v) {
  long t = jb_control_timeout_ms(v, 30000);
  json_decref(v);
  return t;
}

static void asked_for_within_the_hour(void **state) {
  (void)state;
  assert_int_equal(of(json_integer(1)), 1);
  assert_int_equal(of(json_integer(250)), 250);
  assert_int_equal(of(json_integer(3600000)), 3600000);
}

static void longer_is_an_hour(void **state) {
  (void)state;
  assert_int_equal(of(json_integer(3600001)), JB_CONTROL_TIMEOUT_MAX_MS);
  assert_int_equal(of(json_integer(LLONG_MAX)), 3600000);
  assert_int_equal(of(json_integer((json_int_t)LONG_MAX - 5)), 3600000);
}

static void otherwise_the_default(void **state) {
  (void)state;
  assert_int_equal(jb_control_timeout_ms(NULL, 30000), 30000);
  assert_int_equal(of(json_integer(0)), 30000);
  assert_int_equal(of(json_integer(-1)), 30000);
  assert_int_equal(of(json_integer(LLONG_MIN)), 30000);
  assert_int_equal(of(json_real(1e300)), 30000);
  assert_int_equal(of(json_string("9999999999")), 30000);
  assert_int_equal(of(json_null()), 30000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(asked_for_within_the_hour),
      cmocka_unit_test(longer_is_an_hour),
      cmocka_unit_test(otherwise_the_default),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
