/* secopt.c — Wall 2's security options judged as Docker applies them (secopt.h). */
#include "sandbox/worker/secopt.h"

#include <string.h>

void jb_secopt_judge(const json_t *opts, const char *profile, size_t profile_len, bool *nnp,
                     bool *seccomp_ours) {
  static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
  *nnp = *seccomp_ours = false;
  size_t i;
  json_t *s;
  json_array_foreach ((json_t *)opts, i, s) {
    const char *o = json_string_value(s);
    size_t n = json_string_length(s);
    if (!o) continue;
    if (!strncmp(o, "no-new-privileges", 17) && (o[17] == '\0' || o[17] == '=' || o[17] == ':')) {
      const char *v = o[17] ? o + 18 : "true";
      *nnp = false;
      for (size_t k = 0; k < sizeof yes / sizeof yes[0]; k++)
        if (!strcmp(v, yes[k])) *nnp = true;
    } else if (!strncmp(o, "seccomp", 7) && (o[7] == '=' || o[7] == ':')) {
      *seccomp_ours = n == 8 + profile_len && memcmp(o + 8, profile, profile_len) == 0;
    }
  }
}
