/* workspace_scan.h — the worker's pre-scan of a session workspace (minimal for now): counts
 * by type and a directory hash, walking without following any symbolic link. */
#ifndef JB_SANDBOX_WORKSPACE_SCAN_H
#define JB_SANDBOX_WORKSPACE_SCAN_H

#include <jansson.h>
#include <stdbool.h>

#include "server/err.h"

struct jb_scan_result {
  long files, dirs, symlinks, other; /* entries below the root, by type */
  long long bytes;                   /* sum of regular file sizes */
  bool truncated;                    /* stopped at max_entries */
  char dir_hash[65];                 /* hex SHA-256, see jb_workspace_scan */
};

/* Walks `root` (never following symlinks; openat with O_NOFOLLOW from the root's own fd) up
 * to `max_entries` entries. The directory hash is SHA-256 over the entries sorted by path
 * (bytewise), each contributing "<type>\0<path>\0<size>\0<content-sha256-hex or link target
 * or empty>\n", type one of f d l o and path relative to the root. Returns 0, or -1 with `err`
 * when the root cannot be opened or a read fails. */
int jb_workspace_scan(const char *root, long max_entries, struct jb_scan_result *out, jb_error *err);

/* The result as JSON (new reference). */
json_t *jb_scan_json(const struct jb_scan_result *r);

#endif
