/* test_images.c — sandbox image names (lib/images.c): the canonical form, the checks on a
 * name, the allowlist setting, and which names a session may run in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "lib/images.h"

static void canonical_adds_latest(void **state) {
  (void)state;
  char out[JB_IMAGE_NAME_MAX + 8];
  jb_error err = {0};
  assert_int_equal(jb_image_name_canonical("jailbox-sandbox-build", out, sizeof out, &err), 0);
  assert_string_equal(out, "jailbox-sandbox-build:latest");
  assert_int_equal(jb_image_name_canonical("jailbox-sandbox:test-x", out, sizeof out, &err), 0);
  assert_string_equal(out, "jailbox-sandbox:test-x");
  /* a registry port is not a tag */
  assert_int_equal(jb_image_name_canonical("reg.example:5000/jb/sandbox", out, sizeof out, &err),
                   0);
  assert_string_equal(out, "reg.example:5000/jb/sandbox:latest");
  assert_int_equal(jb_image_name_canonical("reg.example:5000/jb/sandbox:v2", out, sizeof out, &err),
                   0);
  assert_string_equal(out, "reg.example:5000/jb/sandbox:v2");
  const char *dig = "jb@sha256:0123456789abcdef";
  assert_int_equal(jb_image_name_canonical(dig, out, sizeof out, &err), 0);
  assert_string_equal(out, dig);
}

static void bad_names_refused(void **state) {
  (void)state;
  char out[JB_IMAGE_NAME_MAX + 8];
  static const char *const bad[] = {"",          "-x",      "a b",    "a\nb", "x//y", "x/",
                                    "x:",        "x@",      "/abs",   ".hid", "a;rm", "a$b",
                                    "a\"b:late", "üñí:tag", "a\\b:c", NULL};
  for (size_t i = 0; bad[i]; i++) {
    jb_error err = {0};
    assert_int_equal(jb_image_name_canonical(bad[i], out, sizeof out, &err), -1);
    assert_true(err.msg[0] != '\0');
  }
  char longname[JB_IMAGE_NAME_MAX + 2];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  jb_error err = {0};
  assert_int_equal(jb_image_name_canonical(longname, out, sizeof out, &err), -1);
  assert_int_equal(err.code, ENAMETOOLONG);
  longname[JB_IMAGE_NAME_MAX] = '\0'; /* exactly the maximum: accepted, with its tag */
  assert_int_equal(jb_image_name_canonical(longname, out, sizeof out, &err), 0);
  assert_int_equal(strlen(out), JB_IMAGE_NAME_MAX + strlen(":latest"));
  /* an output buffer too small is an error, not a cut name */
  char small[8];
  assert_int_equal(jb_image_name_canonical("jailbox-sandbox", small, sizeof small, &err), -1);
}

static void list_setting_checked(void **state) {
  (void)state;
  jb_error err = {0};
  assert_int_equal(jb_image_list_check(JB_SANDBOX_IMAGES_DEFAULT, &err), 0);
  assert_int_equal(jb_image_list_check(" a:1 , b ,c:2 ", &err), 0);
  assert_int_equal(jb_image_list_check("", &err), -1);
  assert_non_null(strstr(err.msg, "empty"));
  assert_int_equal(jb_image_list_check(" , ,", &err), -1);
  assert_int_equal(jb_image_list_check("good:1,-bad", &err), -1);
  assert_non_null(strstr(err.msg, "-bad"));
}

static void allowed_names(void **state) {
  (void)state;
  const char *list = JB_SANDBOX_IMAGES_DEFAULT;
  /* the defaults: the two images the project builds, by canonical name */
  assert_true(jb_image_allowed(list, JB_SANDBOX_IMAGE_DEFAULT, "jailbox-sandbox:latest"));
  assert_true(jb_image_allowed(list, JB_SANDBOX_IMAGE_DEFAULT, "jailbox-sandbox-build:latest"));
  assert_false(jb_image_allowed(list, JB_SANDBOX_IMAGE_DEFAULT, "jailbox-sandbox-build:other"));
  assert_false(jb_image_allowed(list, JB_SANDBOX_IMAGE_DEFAULT, "debian:latest"));
  /* list entries without a tag mean :latest */
  assert_true(jb_image_allowed("x, y:2", "z:9", "x:latest"));
  assert_true(jb_image_allowed("x, y:2", "z:9", "y:2"));
  assert_false(jb_image_allowed("x, y:2", "z:9", "y:latest"));
  /* JAILBOX_SANDBOX_IMAGE is always allowed */
  assert_true(jb_image_allowed("x", "z:9", "z:9"));
  assert_true(jb_image_allowed("x", "z", "z:latest"));
  /* no prefix matches */
  assert_false(jb_image_allowed("jailbox-sandbox:latest", "z:9", "jailbox-sandbox:lates"));
  assert_false(jb_image_allowed("jailbox-sandbox:lates", "z:9", "jailbox-sandbox:latest"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(canonical_adds_latest),
      cmocka_unit_test(bad_names_refused),
      cmocka_unit_test(list_setting_checked),
      cmocka_unit_test(allowed_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
