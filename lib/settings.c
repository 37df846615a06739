/* settings.c — the settings engine (see settings.h): defaults, environment and flags into the
 * caller's struct, checked; the --help listing. */
#include "lib/settings.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Stores `val` (from `origin`: "default", "environment", "command line") into the field of
 * `dst` that `s` names. 0, or -1 with `err`. */
static int set_value(void *dst, const struct jb_setting *s, const char *val, const char *origin,
                     jb_error *err) {
  char *field = (char *)dst + s->off;
  if (strlen(val) > JB_SETTING_VALUE_MAX)
    return jb_fail(err, EINVAL, "%s: value longer than %d bytes (from %s)", s->env,
                   JB_SETTING_VALUE_MAX, origin);
  if (s->kind == JB_SETTING_STRING) {
    char *dup = strdup(val);
    if (!dup) return jb_fail_errno(err, ENOMEM, "%s", s->env);
    free(*(char **)field);
    *(char **)field = dup;
    return 0;
  }
  long min = s->kind == JB_SETTING_BOOL ? 0 : s->min, max = s->kind == JB_SETTING_BOOL ? 1 : s->max;
  char *end = NULL;
  errno = 0;
  long v = strtol(val, &end, 10);
  if (errno || end == val || *end != '\0')
    return jb_fail(err, EINVAL, "%s: '%s' is not a whole number (from %s)", s->env, val, origin);
  if (v < min || v > max)
    return jb_fail(err, ERANGE, "%s: %ld is outside %ld..%ld (from %s)", s->env, v, min, max,
                   origin);
  if (s->kind == JB_SETTING_BOOL)
    *(bool *)field = v == 1;
  else
    *(long *)field = v;
  return 0;
}

static const struct jb_setting *find_flag(const struct jb_setting *table, size_t n,
                                          const char *name, size_t len) {
  for (size_t i = 0; i < n; i++)
    if (table[i].flag && strlen(table[i].flag) == len && memcmp(table[i].flag, name, len) == 0)
      return &table[i];
  return NULL;
}

/* The flags of argv[1..argc-1] into `dst`. */
static int load_flags(void *dst, const struct jb_setting *table, size_t n, int argc, char **argv,
                      jb_error *err) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0)
      return jb_fail(err, EINVAL, "unexpected argument '%s' (see --help)", a);
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const struct jb_setting *s = find_flag(table, n, name, len);
    if (!s) return jb_fail(err, EINVAL, "unknown flag '%.*s' (see --help)", (int)len + 2, a);
    const char *val = eq ? eq + 1 : NULL;
    if (!val) {
      if (i + 1 >= argc) return jb_fail(err, EINVAL, "flag --%s needs a value", s->flag);
      val = argv[++i];
    }
    if (set_value(dst, s, val, "command line", err) < 0) return -1;
  }
  return 0;
}

int jb_settings_load(void *dst, const struct jb_setting *table, size_t n, int argc, char **argv,
                     const char *(*get_env)(const char *name), jb_error *err) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
  for (size_t i = 0; i < n; i++)
    if (set_value(dst, &table[i], table[i].def, "default", err) < 0) return -1;
  if (get_env)
    for (size_t i = 0; i < n; i++) {
      const char *v = get_env(table[i].env);
      if (v && set_value(dst, &table[i], v, "environment", err) < 0) return -1;
    }
  return load_flags(dst, table, n, argc, argv, err);
}

void jb_settings_print_help(FILE *out, const struct jb_setting *table, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const struct jb_setting *s = &table[i];
    if (s->flag)
      fprintf(out, "  --%-20s ", s->flag);
    else
      fprintf(out, "  ");
    fprintf(out, "%-28s default: %s\n      %s\n", s->env, s->def[0] ? s->def : "(empty)", s->help);
  }
}

void jb_settings_free(void *dst, const struct jb_setting *table, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (table[i].kind == JB_SETTING_STRING) {
      char **field = (char **)((char *)dst + table[i].off);
      free(*field);
      *field = NULL;
    }
}
