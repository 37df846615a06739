/* json.c — strict JSON body parsing and field checks (see json.h). */
#include "lib/json.h"

#include <errno.h>
#include <math.h>
#include <string.h>

size_t jb_json_depth(const char *buf, size_t len, size_t limit) {
  size_t depth = 0, max = 0;
  bool in_str = false, esc = false;
  for (size_t i = 0; i < len; i++) {
    char c = buf[i];
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"')
      in_str = true;
    else if (c == '[' || c == '{') {
      if (++depth > max) max = depth;
      if (max > limit) return limit + 1;
    } else if ((c == ']' || c == '}') && depth > 0)
      depth--;
  }
  return max;
}

json_t *jb_json_parse_object(const char *buf, size_t len, size_t max_depth, jb_error *err) {
  if (!buf || len == 0) {
    jb_fail(err, EINVAL, "request body must be a JSON object");
    return NULL;
  }
  if (jb_json_depth(buf, len, max_depth) > max_depth) {
    jb_fail(err, EINVAL, "JSON nested deeper than %zu levels", max_depth);
    return NULL;
  }
  json_error_t je;
  json_t *v = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
  if (!v) {
    jb_fail(err, EINVAL, "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
    return NULL;
  }
  if (!json_is_object(v)) {
    json_decref(v);
    jb_fail(err, EINVAL, "request body must be a JSON object");
    return NULL;
  }
  return v;
}

int jb_json_only_keys(const json_t *obj, const char *const allowed[], jb_error *err) {
  const char *key;
  json_t *val;
  json_object_foreach ((json_t *)obj, key, val) {
    bool ok = false;
    for (size_t i = 0; allowed[i]; i++)
      if (strcmp(key, allowed[i]) == 0) ok = true;
    if (!ok) return jb_fail(err, EINVAL, "unknown field '%.64s'", key);
  }
  return 0;
}

int jb_json_get_string(const json_t *obj, const char *key, size_t min_len, size_t max_len,
                       bool printable, const char **out, jb_error *err) {
  json_t *v = json_object_get(obj, key);
  if (!v) return 0;
  if (!json_is_string(v)) return jb_fail(err, EINVAL, "field '%s' must be a string", key);
  size_t n = json_string_length(v);
  const char *s = json_string_value(v);
  if (n < min_len || n > max_len)
    return jb_fail(err, EINVAL, "field '%s' must be %zu to %zu bytes long", key, min_len, max_len);
  if (strlen(s) != n) return jb_fail(err, EINVAL, "field '%s' contains NUL", key);
  if (printable)
    for (size_t i = 0; i < n; i++)
      if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
        return jb_fail(err, EINVAL, "field '%s' contains a control character", key);
  *out = s;
  return 0;
}

int jb_json_get_int(const json_t *obj, const char *key, long long min, long long max,
                    long long *out, jb_error *err) {
  json_t *v = json_object_get(obj, key);
  if (!v) return 0;
  if (!json_is_integer(v)) return jb_fail(err, EINVAL, "field '%s' must be an integer", key);
  long long x = json_integer_value(v);
  if (x < min || x > max)
    return jb_fail(err, ERANGE, "field '%s' must be between %lld and %lld", key, min, max);
  *out = x;
  return 0;
}

int jb_json_get_number(const json_t *obj, const char *key, double min, double max, double *out,
                       jb_error *err) {
  json_t *v = json_object_get(obj, key);
  if (!v) return 0;
  if (!json_is_number(v)) return jb_fail(err, EINVAL, "field '%s' must be a number", key);
  double x = json_number_value(v);
  if (!isfinite(x) || x < min || x > max)
    return jb_fail(err, ERANGE, "field '%s' must be between %g and %g", key, min, max);
  *out = x;
  return 0;
}
