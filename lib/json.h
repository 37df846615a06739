/* json.h — strict parsing and checking of untrusted JSON request bodies. */
#ifndef JB_JSON_H
#define JB_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/err.h"

#define JB_JSON_MAX_DEPTH 64

/* Parses `len` bytes of `buf` as one JSON value (RFC 8259) that must be an object: nesting
 * deeper than `max_depth` arrays/objects, duplicate keys, NUL in strings, trailing bytes,
 * invalid UTF-8 and integers beyond int64 are refused. The depth is checked on the raw bytes
 * before anything is allocated. Returns a new reference, or NULL with `err` set. */
json_t *jb_json_parse_object(const char *buf, size_t len, size_t max_depth, jb_error *err);

/* Depth of the deepest array/object nesting in `buf` (strings skipped), stopping early once
 * past `limit` (returns limit + 1 then). */
size_t jb_json_depth(const char *buf, size_t len, size_t limit);

/* Fails (-1, `err` naming the key) when `obj` has a key not in the NULL-terminated `allowed`. */
int jb_json_only_keys(const json_t *obj, const char *const allowed[], jb_error *err);

/* Typed field readers. Each returns 0 when the key is absent (outputs untouched) or valid,
 * and -1 with `err` naming the field when it has the wrong type or is out of range.
 * Strings: [min_len, max_len] bytes, no control characters when `printable`. Borrowed. */
int jb_json_get_string(const json_t *obj, const char *key, size_t min_len, size_t max_len,
                       bool printable, const char **out, jb_error *err);
int jb_json_get_int(const json_t *obj, const char *key, long long min, long long max,
                    long long *out, jb_error *err);
/* A number (integer or real) in [min, max]. */
int jb_json_get_number(const json_t *obj, const char *key, double min, double max, double *out,
                       jb_error *err);

/* Cleanup attribute for a json_t * (json_decref on every return path; NULL is allowed):
 * `cleanup_json json_t *doc = json_loads(…);`. */
static inline void jb_json_decrefp(json_t **j) { json_decref(*j); }
#define cleanup_json __attribute__((cleanup(jb_json_decrefp)))

#endif
