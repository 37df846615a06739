/* fuzz_json.c — libFuzzer harness for the request body parser: depth pre-scan, strict parse,
 * field checks (lib/json.c). Any crash, leak or sanitizer report is a bug. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  jb_error err = {0};
  /* the raw depth scan must agree with itself whatever the limit */
  size_t d = jb_json_depth((const char *)data, size, JB_JSON_MAX_DEPTH);
  if (d > JB_JSON_MAX_DEPTH + 1) abort();
  json_t *o = jb_json_parse_object((const char *)data, size, JB_JSON_MAX_DEPTH, &err);
  if (!o) {
    if (!err.msg[0]) abort(); /* a refusal always says why */
    return 0;
  }
  static const char *const allowed[] = {"jobId",   "agentId", "workspace", "mode",
                                        "exclude", "limits",  NULL};
  const char *s = NULL;
  long long i = 0;
  double n = 0;
  jb_json_only_keys(o, allowed, &err);
  jb_json_get_string(o, "agentId", 1, 200, true, &s, &err);
  jb_json_get_int(o, "pids", 16, 65536, &i, &err);
  jb_json_get_number(o, "cpus", 0.1, 64, &n, &err);
  json_decref(o);
  return 0;
}
