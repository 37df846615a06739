/* test_secopt.c — Wall 2's security options (sandbox/worker/secopt.c) judged as Docker applies
 * them: the last option of a kind decides, and only jailbox's own seccomp profile counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/worker/secopt.h"

static const char profile[] = "{\"defaultAction\":\"SCMP_ACT_ERRNO\"}";

/* Judges the options given as a JSON array text. */
static void judge(const char *opts_json, bool *nnp, bool *sc) {
  json_t *a = json_loads(opts_json, 0, NULL);
  assert_non_null(a);
  jb_secopt_judge(a, profile, strlen(profile), nnp, sc);
  json_decref(a);
}

static char *with_profile(const char *prefix, const char *tail) {
  static char buf[512];
  json_t *a = json_array();
  char opt[128];
  snprintf(opt, sizeof opt, "%s%s", prefix, profile);
  json_array_append_new(a, json_string(opt));
  json_t *t = json_loads(tail, 0, NULL);
  json_array_extend(a, t);
  json_decref(t);
  char *s = json_dumps(a, JSON_COMPACT);
  snprintf(buf, sizeof buf, "%s", s);
  free(s);
  json_decref(a);
  return buf;
}

static void as_the_worker_sets_them(void **state) {
  (void)state;
  bool nnp, sc;
  judge(with_profile("seccomp=", "[\"no-new-privileges=true\"]"), &nnp, &sc);
  assert_true(nnp);
  assert_true(sc);
  judge(with_profile("seccomp:", "[\"no-new-privileges:true\"]"), &nnp, &sc); /* older form */
  assert_true(nnp);
  assert_true(sc);
  judge(with_profile("seccomp=", "[\"no-new-privileges\"]"), &nnp, &sc); /* bare */
  assert_true(nnp);
}

static void the_last_of_a_kind_decides(void **state) {
  (void)state;
  bool nnp, sc;
  judge(with_profile("seccomp=", "[\"no-new-privileges=true\", \"no-new-privileges=false\"]"), &nnp,
        &sc);
  assert_false(nnp);
  judge(with_profile("seccomp=", "[\"no-new-privileges=false\", \"no-new-privileges=true\"]"), &nnp,
        &sc);
  assert_true(nnp);
  judge(with_profile("seccomp=", "[\"seccomp=unconfined\", \"no-new-privileges\"]"), &nnp, &sc);
  assert_false(sc);
  /* unconfined first, ours last: ours is in force */
  json_t *a = json_pack("[s]", "seccomp=unconfined");
  char opt[128];
  snprintf(opt, sizeof opt, "seccomp=%s", profile);
  json_array_append_new(a, json_string(opt));
  jb_secopt_judge(a, profile, strlen(profile), &nnp, &sc);
  json_decref(a);
  assert_true(sc);
}

static void values_as_go_reads_them(void **state) {
  (void)state;
  const char *on[] = {"1", "t", "T", "TRUE", "true", "True"};
  const char *off[] = {"0", "f", "false", "FALSE", "yes", "on", "", "true ", "tRuE"};
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
    char o[64], j[96];
    snprintf(o, sizeof o, "no-new-privileges=%s", on[i]);
    snprintf(j, sizeof j, "[\"%s\"]", o);
    bool nnp, sc;
    judge(j, &nnp, &sc);
    assert_true(nnp);
    assert_false(sc);
  }
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
    char j[96];
    snprintf(j, sizeof j, "[\"no-new-privileges=%s\"]", off[i]);
    bool nnp, sc;
    judge(j, &nnp, &sc);
    assert_false(nnp);
  }
}

static void other_profiles_and_look_alikes(void **state) {
  (void)state;
  bool nnp, sc;
  judge("[\"seccomp={\\\"defaultAction\\\":\\\"SCMP_ACT_ALLOW\\\"}\"]", &nnp, &sc);
  assert_false(sc);
  judge("[\"seccomp=\"]", &nnp, &sc);
  assert_false(sc);
  /* the profile with a byte more or less */
  char opt[128];
  snprintf(opt, sizeof opt, "seccomp=%s ", profile);
  json_t *a = json_pack("[s]", opt);
  jb_secopt_judge(a, profile, strlen(profile), &nnp, &sc);
  json_decref(a);
  assert_false(sc);
  a = json_pack("[s]", "seccomp={\"defaultAction\":\"SCMP_ACT_ERRNO\"");
  jb_secopt_judge(a, profile, strlen(profile), &nnp, &sc);
  json_decref(a);
  assert_false(sc);
  /* names that only begin alike, and other kinds, change nothing */
  judge(
      "[\"no-new-privileges-x=true\", \"seccompx=1\", \"label=disable\", \"apparmor=unconfined\"]",
      &nnp, &sc);
  assert_false(nnp);
  assert_false(sc);
  jb_secopt_judge(NULL, profile, strlen(profile), &nnp, &sc);
  assert_false(nnp);
  assert_false(sc);
  judge("[1, null, \"no-new-privileges\"]", &nnp, &sc);
  assert_true(nnp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(as_the_worker_sets_them),
      cmocka_unit_test(the_last_of_a_kind_decides),
      cmocka_unit_test(values_as_go_reads_them),
      cmocka_unit_test(other_profiles_and_look_alikes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
