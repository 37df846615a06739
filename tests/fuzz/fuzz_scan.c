/* fuzz_scan.c — libFuzzer harness for what a write's untrusted bytes go through in jailboxd:
 * the content scanner with the default rules (api/core/scan.c, deploy/scan-rules), the landing
 * check of the path (lib/scan.h jb_scan_landing, Unicode folds included) and the diff
 * preview (lib/diff.c). The input's first line is the path, the rest the content; the content
 * is also split in two halves, diffed against each other. Any crash, leak, sanitizer report,
 * a finding that names no rule, a verdict that changes between two runs or a preview longer
 * than its limit is a bug. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/diff.h"
#include "lib/scan.h"

static struct jb_scan_rules *rules;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!rules) {
    jb_error err = {0};
    if (jb_scan_rules_load(NULL, &rules, &err) < 0) abort();
  }
  const uint8_t *nl = memchr(data, '\n', size < 256 ? size : 256);
  size_t plen = nl ? (size_t)(nl - data) : 0;
  char path[257];
  memcpy(path, data, plen);
  path[plen] = '\0'; /* a NUL inside only shortens the path, as the path checks would refuse it */
  const uint8_t *content = nl ? nl + 1 : data;
  size_t clen = size - (size_t)(content - data);

  json_t *a = jb_scan_run(rules, path, content, clen);
  json_t *b = jb_scan_run(rules, path, content, clen);
  if (!a || !b) abort();
  if (json_array_size(a) > jb_scan_rules_count(rules) || !json_equal(a, b)) abort();
  size_t i;
  json_t *f;
  json_array_foreach (a, i, f) {
    const char *id = json_string_value(json_object_get(f, "rule"));
    bool known = false;
    for (size_t k = 0; id && k < jb_scan_rules_count(rules); k++)
      known |= !strcmp(id, jb_scan_rule_id(rules, k));
    if (!known || !json_string_value(json_object_get(f, "severity"))) abort();
  }
  json_decref(a);
  json_decref(b);

  /* the landing check of the same path, as a file and as a directory: the same answer twice,
   * a known rule id, never an unterminated one */
  for (int dir = 0; dir < 2; dir++) {
    char r1[JB_SCAN_ID_MAX + 1], r2[JB_SCAN_ID_MAX + 1];
    int h1 = jb_scan_landing(rules, path, dir, r1, sizeof r1);
    int h2 = jb_scan_landing(rules, path, dir, r2, sizeof r2);
    if (h1 != h2 || (h1 && strcmp(r1, r2))) abort();
    bool known = !h1 || !strcmp(r1, "scanner_unavailable");
    for (size_t k = 0; h1 && k < jb_scan_rules_count(rules); k++)
      known |= !strcmp(r1, jb_scan_rule_id(rules, k));
    if (!known) abort();
  }

  json_t *d = NULL;
  jb_error err = {0};
  size_t half = clen / 2;
  if (jb_diff_preview(path[0] ? path : "f", content, half, true, content + half, clen - half, 512,
                      &d, &err) < 0) {
    if (!err.msg[0]) abort();
    return 0;
  }
  if (!json_is_null(d) && json_string_length(json_object_get(d, "text")) > 512) abort();
  json_decref(d);
  return 0;
}
