/* settings.h — the settings engine of every program: a table describes each setting (its
 * environment variable, its command-line flag, its kind and range, its default and one line of
 * help, and where it is stored in the caller's struct); the engine fills that struct from the
 * defaults, then the environment, then the flags, checks every value, and lists the table for
 * --help. jailboxd's table is in server/config.c, the worker's in sandbox/worker/main.c. */
#ifndef JB_SETTINGS_H
#define JB_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "lib/err.h"

/* Longest value accepted from any source, bytes. */
#define JB_SETTING_VALUE_MAX 4096

enum jb_setting_kind {
  JB_SETTING_STRING, /* char *: a new copy of the text (jb_settings_free releases it) */
  JB_SETTING_INT, /* long: a whole number in min..max */
  JB_SETTING_BOOL, /* bool: the whole number 0 or 1 */
};

struct jb_setting {
  const char *flag; /* command-line name without "--"; NULL: set by the environment only */
  const char *env; /* environment variable; it also names the setting in every message */
  enum jb_setting_kind kind;
  size_t off; /* offsetof the field in the caller's struct (of the type of `kind`) */
  const char *def; /* default, as text ("" lists as "(empty)") */
  long min, max; /* accepted range of a JB_SETTING_INT */
  const char *help; /* one line */
};

/* Number of entries of a table defined as an array. */
#define JB_SETTINGS_COUNT(table) (sizeof(table) / sizeof((table)[0]))

/* Fills the fields of `dst` named by the `n` entries of `table`: first every default, then
 * each environment variable `get_env` (normally getenv; NULL: none) finds, then the flags of
 * `argv` (`argc` entries, argv[0] the program; 0: no command line), "--flag=value" or
 * "--flag value". The string fields must hold NULL or an earlier value of this engine when
 * called (zero the struct first). A "--help" or "-h" anywhere wins: nothing is read.
 * Returns 0; 1 when --help was asked for; -1 with `err` naming the variable and where the
 * value came from ("(from environment)") on a value that is too long (JB_SETTING_VALUE_MAX),
 * not a whole number or out of range, and on an argument that is not a known flag or a flag
 * without its value. What was stored before the failure stays (jb_settings_free frees it). */
int jb_settings_load(void *dst, const struct jb_setting *table, size_t n, int argc, char **argv,
                     const char *(*get_env)(const char *name), jb_error *err);

/* Writes one entry per setting of `table` to `out`: "  --flag  VARIABLE  default: D" (without
 * the flag column when the setting has none) and its help on the next line. */
void jb_settings_print_help(FILE *out, const struct jb_setting *table, size_t n);

/* Frees the string fields of `dst` named by `table` and sets them to NULL (not `dst`). */
void jb_settings_free(void *dst, const struct jb_setting *table, size_t n);

/* Reports each variable of the environment `envp` (NULL-terminated "NAME=value" strings, as
 * environ) whose name starts with `prefix` ("JAILBOX_") and is neither the `env` of an entry
 * of `table` (`n` entries) nor one of `also` (NULL-terminated; names other programs of the
 * same deployment read from the same environment; may be NULL): `report` gets the name (not
 * NUL-terminated: `name_len` bytes), the known name nearest to it when one is at most 3 edits
 * away (Levenshtein distance; a misspelling), else NULL, and `ctx`. Returns how many were
 * reported. Names over 128 bytes are reported without a suggestion. */
size_t jb_settings_unknown_env(const struct jb_setting *table, size_t n, const char *const *also,
                               char *const *envp, const char *prefix,
                               void (*report)(const char *name, size_t name_len,
                                              const char *nearest, void *ctx),
                               void *ctx);

#endif
