/* test_config.c — settings: defaults, environment, flags, precedence, bad values, help. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/config.h"

static const char *fake_env[][2] = {{NULL, NULL}, {NULL, NULL}, {NULL, NULL}, {NULL, NULL}};

static const char *get_fake(const char *name) {
  for (size_t i = 0; i < sizeof fake_env / sizeof fake_env[0]; i++)
    if (fake_env[i][0] && strcmp(fake_env[i][0], name) == 0) return fake_env[i][1];
  return NULL;
}

static void set_env(int i, const char *k, const char *v) {
  fake_env[i][0] = k;
  fake_env[i][1] = v;
}

static int reset(void **state) {
  memset(fake_env, 0, sizeof fake_env);
  return 0;
}

static void defaults(void **state) {
  struct jb_config c;
  char *argv[] = {"jailboxd", NULL};
  assert_int_equal(jb_config_load(&c, 1, argv, get_fake, NULL), 0);
  assert_string_equal(c.listen, "127.0.0.1:8080");
  assert_string_equal(c.state_dir, "./var");
  assert_string_equal(c.database_url, "");
  assert_int_equal(c.max_body_bytes, 1048576);
  assert_int_equal(c.http_threads, 4);
  assert_string_equal(c.sandbox_image, "jailbox-sandbox:latest");
  assert_string_equal(c.sandbox_images, "jailbox-sandbox:latest,jailbox-sandbox-build:latest");
  jb_config_free(&c);
}

static void env_then_flags(void **state) {
  set_env(0, "JAILBOX_LISTEN", "0.0.0.0:9000");
  set_env(1, "JAILBOX_MAX_BODY_BYTES", "2048");
  set_env(2, "JAILBOX_STATE_DIR", "/env/state");
  struct jb_config c;
  char *argv[] = {"jailboxd", "--state-dir=/flag/state", "--http-threads", "7", NULL};
  assert_int_equal(jb_config_load(&c, 4, argv, get_fake, NULL), 0);
  assert_string_equal(c.listen, "0.0.0.0:9000"); /* environment over default */
  assert_int_equal(c.max_body_bytes, 2048);
  assert_string_equal(c.state_dir, "/flag/state"); /* flag over environment */
  assert_int_equal(c.http_threads, 7);
  jb_config_free(&c);
}

static void bad_values(void **state) {
  struct jb_config c;
  jb_error err = {0};
  char *a1[] = {"jailboxd", "--http-threads=zero", NULL};
  assert_int_equal(jb_config_load(&c, 2, a1, get_fake, &err), -1);
  assert_non_null(strstr(err.msg, "JAILBOX_HTTP_THREADS"));
  jb_config_free(&c);

  char *a2[] = {"jailboxd", "--max-body-bytes=0", NULL};
  assert_int_equal(jb_config_load(&c, 2, a2, get_fake, &err), -1);
  assert_non_null(strstr(err.msg, "outside"));
  jb_config_free(&c);

  char *a3[] = {"jailboxd", "--no-such-flag=1", NULL};
  assert_int_equal(jb_config_load(&c, 2, a3, get_fake, &err), -1);
  assert_non_null(strstr(err.msg, "unknown flag"));
  jb_config_free(&c);

  char *a4[] = {"jailboxd", "--listen", NULL};
  assert_int_equal(jb_config_load(&c, 2, a4, get_fake, &err), -1);
  assert_non_null(strstr(err.msg, "needs a value"));
  jb_config_free(&c);

  set_env(0, "JAILBOX_LISTEN", "no-port");
  char *a5[] = {"jailboxd", NULL};
  assert_int_equal(jb_config_load(&c, 1, a5, get_fake, &err), -1);
  assert_non_null(strstr(err.msg, "JAILBOX_LISTEN"));
  jb_config_free(&c);

  set_env(0, "JAILBOX_LOG_LEVEL", "loud");
  assert_int_equal(jb_config_load(&c, 1, a5, get_fake, &err), -1);
  assert_non_null(strstr(err.msg, "JAILBOX_LOG_LEVEL"));
  jb_config_free(&c);

  set_env(0, "JAILBOX_SANDBOX_IMAGES", "jailbox-sandbox, bad;image");
  assert_int_equal(jb_config_load(&c, 1, a5, get_fake, &err), -1);
  assert_non_null(strstr(err.msg, "JAILBOX_SANDBOX_IMAGES"));
  jb_config_free(&c);

  set_env(0, "JAILBOX_SANDBOX_IMAGES", " , ");
  assert_int_equal(jb_config_load(&c, 1, a5, get_fake, &err), -1);
  assert_non_null(strstr(err.msg, "JAILBOX_SANDBOX_IMAGES"));
  jb_config_free(&c);

  set_env(0, "JAILBOX_SANDBOX_IMAGE", "-x");
  assert_int_equal(jb_config_load(&c, 1, a5, get_fake, &err), -1);
  assert_non_null(strstr(err.msg, "JAILBOX_SANDBOX_IMAGE"));
  jb_config_free(&c);

  set_env(0, "JAILBOX_SANDBOX_IMAGE", "jailbox-sandbox");
  set_env(1, "JAILBOX_REVIEWER_URL", "http://op:s3cret@review.example.com/hook");
  assert_int_equal(jb_config_load(&c, 1, a5, get_fake, &err), -1);
  assert_non_null(strstr(err.msg, "JAILBOX_REVIEWER_URL: http:// is allowed only to a loopback"));
  assert_null(strstr(err.msg, "s3cret"));
  jb_config_free(&c);

  set_env(1, "JAILBOX_REVIEWER_URL", "https://op:s3cret@review.example.com/hook");
  set_env(2, "JAILBOX_REVIEWER_CMD", "/bin/true");
  assert_int_equal(jb_config_load(&c, 1, a5, get_fake, &err), -1);
  assert_non_null(strstr(err.msg, "both set"));
  jb_config_free(&c);

  set_env(2, "JAILBOX_REVIEWER_TIMEOUT_MS", "250");
  assert_int_equal(jb_config_load(&c, 1, a5, get_fake, &err), 0);
  assert_int_equal(c.reviewer_timeout_ms, 250);
  assert_int_equal(c.reviewer_failures, 5);
  assert_int_equal(c.reviewer_pause_ms, 30000);
  jb_config_free(&c);
}

static void help_flag(void **state) {
  struct jb_config c;
  char *argv[] = {"jailboxd", "--bogus", "--help", NULL};
  assert_int_equal(jb_config_load(&c, 3, argv, get_fake, NULL), 1);
  jb_config_free(&c);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  jb_config_print_help(f, "jailboxd");
  fclose(f);
  /* every setting is listed with its variable and default */
  const char *must[] = {"JAILBOX_LISTEN",         "JAILBOX_STATE_DIR", "JAILBOX_DATABASE_URL",
                        "JAILBOX_MAX_BODY_BYTES", "JAILBOX_DB_USER",   "default: ./var"};
  for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) assert_non_null(strstr(buf, must[i]));
  /* the row form tests/integration/readme_config.sh reads */
  assert_non_null(
      strstr(buf,
             "\n  --listen               JAILBOX_LISTEN               default: 127.0.0.1:8080\n"
             "      HTTP address host:port"));
  free(buf);
}

static void listen_forms(void **state) {
  char host[64];
  int port;
  assert_int_equal(jb_parse_listen("127.0.0.1:0", host, sizeof host, &port, NULL), 0);
  assert_string_equal(host, "127.0.0.1");
  assert_int_equal(port, 0);
  assert_int_equal(jb_parse_listen("[::1]:8080", host, sizeof host, &port, NULL), 0);
  assert_string_equal(host, "::1");
  assert_int_equal(port, 8080);
  assert_int_equal(jb_parse_listen("localhost:65536", host, sizeof host, &port, NULL), -1);
  assert_int_equal(jb_parse_listen(":80", host, sizeof host, &port, NULL), -1);
  assert_int_equal(jb_parse_listen("[::1]80", host, sizeof host, &port, NULL), -1);
  assert_int_equal(jb_parse_listen("h:8x", host, sizeof host, &port, NULL), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(defaults, reset),     cmocka_unit_test_setup(env_then_flags, reset),
      cmocka_unit_test_setup(bad_values, reset),   cmocka_unit_test_setup(help_flag, reset),
      cmocka_unit_test_setup(listen_forms, reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
