/* scan.h — jailboxd's checks of an op before it is stored (issue 7): exclusion globs and the
 * content scanner for writes. Paths are checked with sandbox/pathcheck.h first. */
#ifndef JB_API_SCAN_H
#define JB_API_SCAN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandbox/pathcheck.h" /* jb_path_excluded */

/* The verdict of the content scanner on a proposed write of `len` bytes at `data` to `path`:
 * a new JSON array of the ids of the rules that matched (empty: clean). Built-in rules:
 * private_key (PEM/OpenSSH private-key blocks), aws_access_key_id, github_token, slack_token,
 * gitlab_token, google_api_key, download_and_execute (curl/wget piped into a shell),
 * git_hooks (a write into .git/hooks/), binary_content (NUL bytes in over 8 KiB).
 * Patterns are POSIX extended regular expressions (regcomp(3)); NUL bytes in the content are
 * matched as spaces. NULL on allocation failure. */
json_t *jb_scan_content(const char *path, const unsigned char *data, size_t len);

#endif
