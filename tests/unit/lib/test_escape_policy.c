/* test_escape_policy.c — the escape policy settings (lib/escape_policy.c): which signal
 * kinds abort, which alert after N, the trust penalty, and refusal of bad values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "server/config.h"
#include "lib/escape_policy.h"

static void defaults_abort_every_escape(void **state) {
  (void)state;
  struct jb_escape_policy p;
  jb_error err = {0};
  assert_int_equal(
      jb_escape_policy_parse(&p, JB_ESCAPE_KINDS_TEXT, JB_ALERT_AFTER_DEFAULT, 20, &err), 0);
  for (int k = 0; k < JB_SIG_ESCAPE_COUNT; k++) assert_true(p.abort[k]);
  assert_false(p.abort[JB_SIG_EXCLUDED_PATH]);
  assert_false(p.abort[JB_SIG_DENIED_PATH]);
  assert_int_equal(p.alert_after[JB_SIG_EXCLUDED_PATH], 3);
  assert_int_equal(p.alert_after[JB_SIG_DENIED_PATH], 10);
  assert_int_equal(p.trust_penalty, 20);
}

static void kinds_left_out_alert(void **state) {
  (void)state;
  struct jb_escape_policy p;
  jb_error err = {0};
  /* only traversal aborts; the other escape kinds alert at each occurrence, and a count
   * given for one of them is kept */
  assert_int_equal(
      jb_escape_policy_parse(&p, " path_traversal ", "hard_link:2, excluded_path:5", 0, &err), 0);
  assert_true(p.abort[JB_SIG_PATH_TRAVERSAL]);
  assert_false(p.abort[JB_SIG_ABSOLUTE_PATH]);
  assert_int_equal(p.alert_after[JB_SIG_ABSOLUTE_PATH], 1);
  assert_int_equal(p.alert_after[JB_SIG_HARD_LINK], 2);
  assert_int_equal(p.alert_after[JB_SIG_EXCLUDED_PATH], 5);
  assert_int_equal(p.alert_after[JB_SIG_DENIED_PATH], 0); /* not listed: never */
  assert_int_equal(jb_escape_policy_parse(&p, "none", "", 0, &err), 0);
  for (int k = 0; k < JB_SIG_COUNT; k++) assert_false(p.abort[k]);
  assert_int_equal(jb_escape_policy_parse(&p, "", "", 0, &err), 0);
}

static void bad_values_are_refused(void **state) {
  (void)state;
  struct jb_escape_policy p;
  jb_error err = {0};
  assert_int_equal(jb_escape_policy_parse(&p, "path_traversal,escape_everything", "", 0, &err), -1);
  assert_non_null(strstr(err.msg, "escape_everything"));
  assert_int_equal(jb_escape_policy_parse(&p, "", "excluded_path", 0, &err), -1);
  assert_int_equal(jb_escape_policy_parse(&p, "", "excluded_path:0", 0, &err), -1);
  assert_int_equal(jb_escape_policy_parse(&p, "", "excluded_path:3x", 0, &err), -1);
  assert_int_equal(jb_escape_policy_parse(&p, "", "nosuch:3", 0, &err), -1);
  assert_int_equal(jb_escape_policy_parse(&p, "", "", -1, &err), -1);
  assert_int_equal(jb_escape_policy_parse(&p, "", "", 1001, &err), -1);
  char longname[64];
  memset(longname, 'a', sizeof longname - 1);
  longname[63] = '\0';
  assert_int_equal(jb_escape_policy_parse(&p, longname, "", 0, &err), -1);
}

static void names_round_trip(void **state) {
  (void)state;
  for (int k = 0; k < JB_SIG_COUNT; k++)
    assert_int_equal(jb_signal_from_name(jb_signal_name(k)), k);
  assert_int_equal(jb_signal_from_name("seal"), -1);
  assert_string_equal(jb_signal_name(JB_SIG_COUNT), "unknown");
}

static const char *env_bad(const char *name) {
  return strcmp(name, "JAILBOX_ESCAPE_ABORT") == 0 ? "path_traversal,bogus" : NULL;
}

static void config_refuses_a_bad_policy(void **state) {
  (void)state;
  struct jb_config cfg;
  jb_error err = {0};
  char *argv[] = {"jailboxd", NULL};
  assert_int_equal(jb_config_load(&cfg, 1, argv, env_bad, &err), -1);
  assert_non_null(strstr(err.msg, "JAILBOX_ESCAPE_ABORT"));
  jb_config_free(&cfg);
  assert_int_equal(jb_config_load(&cfg, 1, argv, NULL, &err), 0);
  assert_int_equal(cfg.trust_penalty, 20);
  assert_int_equal(cfg.session_lifetime_s, 3600);
  assert_int_equal(cfg.idle_timeout_s, 900);
  jb_config_free(&cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(defaults_abort_every_escape), cmocka_unit_test(kinds_left_out_alert),
      cmocka_unit_test(bad_values_are_refused),      cmocka_unit_test(names_round_trip),
      cmocka_unit_test(config_refuses_a_bad_policy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
