/* scan_private.h — the compiled rule set, shared by the two files that match it and included
 * by no other: lib/scan.c (the parser, the matcher of writes) and lib/redact.c (the redactor of
 * command output). */
#ifndef JB_SCAN_PRIVATE_H
#define JB_SCAN_PRIVATE_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "lib/scan.h"

struct rule {
  char id[JB_SCAN_ID_MAX + 1];
  const char *severity; /* one of severities[] */
  enum jb_scan_check check;
  pcre2_code *code; /* JB_SCAN_CONTENT, JB_SCAN_SECRET, JB_SCAN_REDACT, JB_SCAN_PATH */
  size_t threshold; /* JB_SCAN_BINARY, bytes */
};

struct jb_scan_rules {
  struct rule *rules;
  size_t n;
  pcre2_match_context *mctx; /* the limits; read-only once built, so shared by threads */
};

#endif
