/* fuzz_gitconfig.c — libFuzzer harness for the worker's reader of a repository's git
 * configuration (sandbox/worker/hooks_path.c: core.hooksPath, with sections, case, quotes,
 * escapes, continued lines and comments as git-config(1) has them). Any crash, sanitizer
 * report, a value that is not NUL-terminated within its buffer, or an answer that changes
 * between two runs is a bug. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/worker/hooks_path.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char a[64], b[64];
  memset(a, 'x', sizeof a);
  int ra = jb_git_hooks_path((const char *)data, size, a, sizeof a);
  int rb = jb_git_hooks_path((const char *)data, size, b, sizeof b);
  if (ra != rb || ra < -1 || ra > 1) abort();
  if (ra == 1 && (!memchr(a, '\0', sizeof a) || strcmp(a, b))) abort();
  return 0;
}
