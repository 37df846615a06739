/* test_settings.c — the settings engine (lib/settings.c): defaults, environment, flags and
 * their precedence, each kind's checks and messages, --help, the listing, freeing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/settings.h"

struct demo {
  char *name;
  long count;
  bool hold;
  char *quiet; /* no flag: environment only */
};

#define O(f) offsetof(struct demo, f)
static const struct jb_setting table[] = {
    {"name", "DEMO_NAME", JB_SETTING_STRING, O(name), "anon", 0, 0, "who"},
    {"count", "DEMO_COUNT", JB_SETTING_INT, O(count), "3", 1, 10, "how many, 1..10"},
    {"hold", "DEMO_HOLD", JB_SETTING_BOOL, O(hold), "0", 0, 0, "1: hold"},
    {NULL, "DEMO_QUIET", JB_SETTING_STRING, O(quiet), "", 0, 0, "read from the environment only"},
};
#undef O
#define N JB_SETTINGS_COUNT(table)

static const char *env[4][2];

static const char *get_env(const char *name) {
  for (size_t i = 0; i < 4; i++)
    if (env[i][0] && strcmp(env[i][0], name) == 0) return env[i][1];
  return NULL;
}

static int reset(void **state) {
  (void)state;
  memset(env, 0, sizeof env);
  return 0;
}

/* Loads `argv` (NULL-terminated) into *d (zeroed first). */
static int load(struct demo *d, char **argv, jb_error *err) {
  int argc = 0;
  while (argv && argv[argc]) argc++;
  memset(d, 0, sizeof *d);
  return jb_settings_load(d, table, N, argc, argv, get_env, err);
}

static void defaults(void **state) {
  (void)state;
  struct demo d;
  char *argv[] = {"demo", NULL};
  assert_int_equal(load(&d, argv, NULL), 0);
  assert_string_equal(d.name, "anon");
  assert_int_equal(d.count, 3);
  assert_false(d.hold);
  assert_string_equal(d.quiet, "");
  jb_settings_free(&d, table, N);
  assert_null(d.name);
  assert_null(d.quiet);
}

static void environment_then_flags(void **state) {
  (void)state;
  env[0][0] = "DEMO_NAME", env[0][1] = "from-env";
  env[1][0] = "DEMO_COUNT", env[1][1] = "5";
  env[2][0] = "DEMO_HOLD", env[2][1] = "1";
  env[3][0] = "DEMO_QUIET", env[3][1] = "shh";
  struct demo d;
  char *argv[] = {"demo", "--name=from-flag", "--count", "7", NULL};
  assert_int_equal(load(&d, argv, NULL), 0);
  assert_string_equal(d.name, "from-flag"); /* flag over environment */
  assert_int_equal(d.count, 7);
  assert_true(d.hold); /* environment over default */
  assert_string_equal(d.quiet, "shh");
  jb_settings_free(&d, table, N);

  /* no command line at all */
  memset(&d, 0, sizeof d);
  assert_int_equal(jb_settings_load(&d, table, N, 0, NULL, get_env, NULL), 0);
  assert_string_equal(d.name, "from-env");
  jb_settings_free(&d, table, N);

  /* no environment */
  memset(&d, 0, sizeof d);
  assert_int_equal(jb_settings_load(&d, table, N, 0, NULL, NULL, NULL), 0);
  assert_string_equal(d.name, "anon");
  jb_settings_free(&d, table, N);
}

/* Loading `argv` fails with exactly `msg`. */
static void refused(char **argv, const char *msg) {
  struct demo d;
  jb_error err = {0};
  assert_int_equal(load(&d, argv, &err), -1);
  assert_string_equal(err.msg, msg);
  jb_settings_free(&d, table, N);
}

static void bad_values(void **state) {
  (void)state;
  refused((char *[]){"demo", "--count=many", NULL},
          "DEMO_COUNT: 'many' is not a whole number (from command line)");
  refused((char *[]){"demo", "--count=11", NULL},
          "DEMO_COUNT: 11 is outside 1..10 (from command line)");
  refused((char *[]){"demo", "--hold=2", NULL}, "DEMO_HOLD: 2 is outside 0..1 (from command line)");
  refused((char *[]){"demo", "--hold=yes", NULL},
          "DEMO_HOLD: 'yes' is not a whole number (from command line)");
  refused((char *[]){"demo", "--nope=1", NULL}, "unknown flag '--nope' (see --help)");
  refused((char *[]){"demo", "--quiet=1", NULL}, "unknown flag '--quiet' (see --help)");
  refused((char *[]){"demo", "--count", NULL}, "flag --count needs a value");
  refused((char *[]){"demo", "stray", NULL}, "unexpected argument 'stray' (see --help)");
  env[0][0] = "DEMO_COUNT", env[0][1] = "0";
  refused((char *[]){"demo", NULL}, "DEMO_COUNT: 0 is outside 1..10 (from environment)");

  char *big = malloc(JB_SETTING_VALUE_MAX + 2);
  assert_non_null(big);
  memset(big, 'x', JB_SETTING_VALUE_MAX + 1);
  big[JB_SETTING_VALUE_MAX + 1] = '\0';
  env[0][0] = "DEMO_NAME", env[0][1] = big;
  refused((char *[]){"demo", NULL}, "DEMO_NAME: value longer than 4096 bytes (from environment)");
  big[JB_SETTING_VALUE_MAX] = '\0'; /* exactly the limit: taken */
  struct demo d;
  assert_int_equal(load(&d, (char *[]){"demo", NULL}, NULL), 0);
  assert_int_equal(strlen(d.name), JB_SETTING_VALUE_MAX);
  jb_settings_free(&d, table, N);
  free(big);
}

static void help_wins(void **state) {
  (void)state;
  env[0][0] = "DEMO_COUNT", env[0][1] = "bad";
  struct demo d;
  assert_int_equal(load(&d, (char *[]){"demo", "--bogus", "--help", NULL}, NULL), 1);
  assert_null(d.name); /* nothing was read */
  assert_int_equal(load(&d, (char *[]){"demo", "-h", NULL}, NULL), 1);
}

static void listing(void **state) {
  (void)state;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  jb_settings_print_help(f, table, N);
  fclose(f);
  assert_string_equal(buf,
                      "  --name                 DEMO_NAME                    default: anon\n"
                      "      who\n"
                      "  --count                DEMO_COUNT                   default: 3\n"
                      "      how many, 1..10\n"
                      "  --hold                 DEMO_HOLD                    default: 0\n"
                      "      1: hold\n"
                      "  DEMO_QUIET                   default: (empty)\n"
                      "      read from the environment only\n");
  free(buf);
}

struct seen {
  char names[4][64], nearest[4][64];
  size_t n;
};

static void note(const char *name, size_t len, const char *nearest, void *ctx) {
  struct seen *s = ctx;
  assert_true(s->n < 4);
  snprintf(s->names[s->n], sizeof s->names[0], "%.*s", (int)len, name);
  snprintf(s->nearest[s->n], sizeof s->nearest[0], "%s", nearest ? nearest : "-");
  s->n++;
}

/* A variable with the prefix that no table entry nor `also` names is reported, with the
 * nearest known name when it is a few edits away; known names, other prefixes and a name
 * equal to a known one's start are told apart */
static void unknown_env(void **state) {
  (void)state;
  static const char *const also[] = {"DEMO_URL", NULL};
  char *envp[] = {"DEMO_NAME=x", "DEMO_CUONT=2", "DEMO_URL=http://a",
                  "PATH=/bin",   "DEMO_NAMES=y", "DEMO_ZZZZZZZZZZZZ=1",
                  "DEMO_UR=1",   "DEMONAME=1",   NULL};
  struct seen s = {0};
  assert_int_equal(jb_settings_unknown_env(table, N, also, envp, "DEMO_", note, &s), 4);
  assert_string_equal(s.names[0], "DEMO_CUONT");
  assert_string_equal(s.nearest[0], "DEMO_COUNT");
  assert_string_equal(s.names[1], "DEMO_NAMES");
  assert_string_equal(s.nearest[1], "DEMO_NAME");
  assert_string_equal(s.names[2], "DEMO_ZZZZZZZZZZZZ");
  assert_string_equal(s.nearest[2], "-");
  assert_string_equal(s.names[3], "DEMO_UR");
  assert_string_equal(s.nearest[3], "DEMO_URL");
  s.n = 0;
  char *none[] = {NULL};
  assert_int_equal(jb_settings_unknown_env(table, N, NULL, none, "DEMO_", note, &s), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(defaults, reset),
      cmocka_unit_test_setup(environment_then_flags, reset),
      cmocka_unit_test_setup(bad_values, reset),
      cmocka_unit_test_setup(help_wins, reset),
      cmocka_unit_test_setup(listing, reset),
      cmocka_unit_test_setup(unknown_env, reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
