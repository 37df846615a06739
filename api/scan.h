/* scan.h — jailboxd's checks of an op before it is stored (issue 7): exclusion globs and the
 * content scanner for writes. Paths are checked with sandbox/pathcheck.h first. */
#ifndef JB_API_SCAN_H
#define JB_API_SCAN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Whether workspace path `path` is excluded by a glob of `globs` (JSON array of strings,
 * borrowed; NULL or empty: nothing is). Each glob is matched with fnmatch(3)
 * FNM_PATHNAME | FNM_PERIOD against the path and against each of its leading directories, so
 * that excluding "secrets" or ".git" also hides everything below them. *which (may be NULL)
 * receives the matching glob (borrowed from `globs`). */
bool jb_path_excluded(const char *path, const json_t *globs, const char **which);

/* The verdict of the content scanner on a proposed write of `len` bytes at `data` to `path`:
 * a new JSON array of the ids of the rules that matched (empty: clean). Built-in rules:
 * private_key (PEM/OpenSSH private-key blocks), aws_access_key_id, github_token, slack_token,
 * gitlab_token, google_api_key, download_and_execute (curl/wget piped into a shell),
 * git_hooks (a write into .git/hooks/), binary_content (NUL bytes in over 8 KiB).
 * Patterns are POSIX extended regular expressions (regcomp(3)); NUL bytes in the content are
 * matched as spaces. NULL on allocation failure. */
json_t *jb_scan_content(const char *path, const unsigned char *data, size_t len);

#endif
