/* settings.c — the settings engine (see settings.h): defaults, environment and flags into the
 * caller's struct, checked; the --help listing. */
#include "lib/settings.h"

#include <errno.h>
#include <stdlib.h>
#include <stdint.h>
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

#define NAME_CMP_MAX 128 /* bytes of a name the distance is computed for */

/* The Levenshtein distance between a[0..na) and b[0..nb) (both at most NAME_CMP_MAX). */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb) {
  size_t row[NAME_CMP_MAX + 1];
  for (size_t j = 0; j <= nb; j++) row[j] = j;
  for (size_t i = 1; i <= na; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= nb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[nb];
}

/* Keeps `cand` in *best when it is nearer to name[0..len) than *best_d (and at most 3 away). */
static void nearer(const char *name, size_t len, const char *cand, const char **best,
                   size_t *best_d) {
  size_t cl = strlen(cand);
  if (len > NAME_CMP_MAX || cl > NAME_CMP_MAX) return;
  size_t d = edit_distance(name, len, cand, cl);
  if (d <= 3 && d < *best_d) {
    *best = cand;
    *best_d = d;
  }
}

size_t jb_settings_unknown_env(const struct jb_setting *table, size_t n, const char *const *also,
                               char *const *envp, const char *prefix,
                               void (*report)(const char *name, size_t name_len,
                                              const char *nearest, void *ctx),
                               void *ctx) {
  size_t reported = 0, pl = strlen(prefix);
  for (char *const *e = envp; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
    if (len < pl || strncmp(*e, prefix, pl) != 0) continue;
    bool known = false;
    for (size_t i = 0; i < n && !known; i++)
      known = strlen(table[i].env) == len && !strncmp(table[i].env, *e, len);
    for (const char *const *a = also; a && *a && !known; a++)
      known = strlen(*a) == len && !strncmp(*a, *e, len);
    if (known) continue;
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < n; i++) nearer(*e, len, table[i].env, &best, &best_d);
    for (const char *const *a = also; a && *a; a++) nearer(*e, len, *a, &best, &best_d);
    report(*e, len, best, ctx);
    reported++;
  }
  return reported;
}
