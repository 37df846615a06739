/* workspace_scan.h — the worker's pre-scan of a session workspace: counts by type, a
 * directory hash, and the flagged entries (symbolic links that leave the workspace,
 * hard-linked files, fifos, sockets, devices, files too large to hash), walking without
 * following any symbolic link. */
#ifndef JB_SANDBOX_WORKSPACE_SCAN_H
#define JB_SANDBOX_WORKSPACE_SCAN_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "lib/err.h"

struct jb_scan_result {
  long files, dirs, symlinks, other; /* entries below the root, by type */
  long long bytes; /* sum of regular file sizes */
  bool truncated; /* stopped at max_entries */
  char dir_hash[65]; /* hex SHA-256, see jb_workspace_scan */
  long long hash_max; /* bytes: larger regular files are not hashed */
  long n_flagged; /* flagged entries, all of them */
  json_t *flagged; /* [{path, kind}], the first JB_SCAN_FLAGGED_MAX (owned) */
  long n_secrets; /* files that look like secrets (jb_workspace_prescan), all of them */
  json_t *repos; /* the work trees of the git repositories found: ["" (the root), "sub" …],
                    the first JB_GIT_PLACES_MAX (jb_workspace_prescan; owned; else NULL) */
  json_t *secrets; /* [{path, rules}], the first that fit JB_SCAN_SECRETS_MAX entries and
                      JB_SCAN_SECRETS_BYTES bytes of paths (owned); NULL: not looked for */
};

#define JB_SCAN_SECRETS_MAX 100
#define JB_SCAN_SECRETS_BYTES (8 * 1024)
#define JB_SCAN_SECRET_FILE_MAX (8LL * 1024 * 1024) /* larger files are not looked into */

#define JB_SCAN_FLAGGED_MAX 1000

/* The kinds of flagged entries. symlink_outside: a symbolic link whose target, resolved
 * lexically from the link's directory, is absolute or climbs above the workspace root, or
 * that leads out when resolved against the tree as it is (jb_scan_link_resolve: through the
 * other links on its way);
 * hardlink: a regular file with more than one link; fifo, socket, device: special files;
 * too_large: a regular file over `hash_max` bytes, not hashed (a notice: it stays usable);
 * landing_link (jb_workspace_scan only): the path a symbolic link at a place the landing rules
 * cover (lib/scan.h jb_scan_landing) names, judged lexically and, where that differs, as the
 * kernel resolves it through other links, with the link as "link" — a
 * notice too: writing, making or moving onto that path is a landing on the covered place;
 * secret (jb_workspace_prescan with exclude_secrets only): a file the `secret` rules match.
 * Entries of the first five kinds and secret ones are invisible to the agent and refused
 * (api/core/ops.c). */

/* Walks `root` (never following symlinks; openat with O_NOFOLLOW from the root's own fd) up
 * to `max_entries` entries. The directory hash is SHA-256 over the entries sorted by path
 * (bytewise), each contributing "<type>\0<path>\0<size>\0<detail>\n", type one of f d l o,
 * path relative to the root, detail the content SHA-256 (hex) of a regular file, "too-large"
 * for a file over `hash_max` bytes (its content is not read: the pre-scan is bounded by
 * hash_max per file, whatever the file's holes), "hardlink" for a file with more than one
 * link (never read: it may be a file outside), the target of a symbolic link, else empty.
 * Returns 0 (free with jb_scan_result_free), or -1 with `err` when the root cannot be opened
 * or a read fails. */
int jb_workspace_scan(const char *root, long max_entries, long long hash_max,
                      struct jb_scan_result *out, jb_error *err);

/* The pre-scan: jb_workspace_scan, and each regular file of at most JB_SCAN_SECRET_FILE_MAX
 * bytes it reads is also matched against the scan rules' `secret` rules (lib/scan.h
 * jb_scan_secrets, in 64 KiB windows that overlap by 4 KiB, so that a secret on a window's
 * edge is still seen): the files that look like secrets are listed in out->secrets with the
 * ids of the rules that matched (a match that fails counts, rule "scanner_error"), so that
 * the buyer can exclude them before the agent reads them. With `exclude_secrets` each of
 * them is also a flagged entry of kind "secret": hidden from the agent and refused, as the
 * other flagged kinds are. Returns as jb_workspace_scan. */
int jb_workspace_prescan(const char *root, long max_entries, long long hash_max,
                         bool exclude_secrets, struct jb_scan_result *out, jb_error *err);
void jb_scan_result_free(struct jb_scan_result *r);

/* One entry of a kept walk (jb_workspace_snapshot): its type (f d l o), permission bits
 * (st_mode & 07777), size (regular files), path relative to the root, detail as in the
 * directory hash (NULL: empty) and its flag kind (a string literal: symlink_outside, hardlink,
 * fifo, socket, device, too_large) or NULL. */
struct jb_scan_entry {
  char type;
  dev_t dev; /* with ino: which names are one file */
  ino_t ino;
  unsigned mode;
  long long size;
  long long mtime_ns, ctime_ns; /* with dev, ino and size: an unchanged file's hash is reused */
  char *path, *detail;
  const char *kind;
};

/* A workspace's entries at one moment, sorted by path (bytewise). */
struct jb_scan_snapshot {
  struct jb_scan_entry *v; /* owned */
  size_t n;
  bool truncated; /* the walk is not whole: it stopped at max_entries or 64 MiB of names, or
                     skipped a path past PATH_MAX, a level past 256, an entry it could not
                     stat or open, or ran past its time or its bytes to hash (struct
                     jb_walk_limits): changes there are not seen */
  long long started_ns; /* CLOCK_REALTIME when the walk began */
  char why[48]; /* when truncated: the first reason ("entries", "depth", "path length",
                   "unreadable entry", "time", "bytes to hash", "names") */
};

/* The bounds of one walk of jb_workspace_snapshot_since. */
struct jb_walk_limits {
  long max_entries; /* entries walked at most */
  long long hash_max; /* bytes: a larger regular file is not read (flagged too_large) */
  long long hash_budget; /* bytes read for hashing in all, at most; 0: no bound. A file whose
                            hash would take it past the bound is left unhashed ("unhashed"),
                            and the walk is not whole */
  long long time_ms; /* the walk stops after this long (monotonic); 0: no bound */
  bool secrets; /* look for files that look like secrets (jb_workspace_prescan) */
  bool exclude_secrets; /* and flag them "secret" */
};

/* Sparse files: a regular file over 1 MiB whose allocated blocks are under an eighth of its
 * size is never read; its detail is "sparse:SIZE:MTIME_NS:CTIME_NS" — it is judged by its
 * metadata (so a hundred `truncate -s 1G` files cost no reading). */

/* The walk of jb_workspace_scan (same bounds, same hashing, never following a link), with its
 * entries kept in *out. 0 (free with jb_scan_snapshot_free), or -1 with `err`. */
int jb_workspace_snapshot(const char *root, long max_entries, long long hash_max,
                          struct jb_scan_snapshot *out, jb_error *err);

/* jb_workspace_snapshot within `lim`; a regular file whose device, inode, size, mtime and
 * ctime are those of its entry in `prev` (an earlier snapshot of the same root; NULL: none)
 * keeps that entry's hash without being read — unless its ctime was less than 2 s before
 * `prev` began (a change in the same clock tick as that read would not show: git's "racy
 * git" rule, Documentation/technical/racy-git.txt). */
int jb_workspace_snapshot_since(const char *root, const struct jb_walk_limits *lim,
                                const struct jb_scan_snapshot *prev, struct jb_scan_snapshot *out,
                                jb_error *err);

/* A copy of `s` (new: free with jb_scan_snapshot_free): 0, or -1 when out of memory. */
int jb_scan_snapshot_copy(const struct jb_scan_snapshot *s, struct jb_scan_snapshot *out);

/* Whether entry after->v[i] is not as it was in `before` (both of one root, `before` the
 * earlier): of another type, mode, size (files) or content (the details), or not there. When
 * `before` is not whole, an entry it did not see, or saw without its content hash, counts as
 * unchanged only when its ctime and the ctime of every directory above it in `after` are more
 * than 2 s before `before` began (nothing the later command did touched it, moved it or what
 * holds it: a rename changes the ctime of what it moves). */
bool jb_scan_entry_changed(const struct jb_scan_snapshot *before,
                           const struct jb_scan_snapshot *after, size_t i);

/* Where symbolic link v[i] of snapshot `s` leads, resolved against the snapshot as the kernel
 * resolves a path (each component looked up; a link's target followed from the link's
 * directory, at most 40 links; an absolute target, or ".." at the root, leaves): 1 it leads
 * out of the root, 2 it loops (more than 40 links), 0 it resolves inside or dangles. The
 * pre-scan flags 1 (a loop leads nowhere; the shim refuses it at open time); the effects of a
 * writable command treat 2 as 1. With `changed` (one flag per
 * entry of `s`, may be NULL), *touched tells whether an entry it passed (the link itself, a
 * link or a directory on its way) is flagged, and the indexes of the links on its way (itself
 * first) go to via[] (at most `via_max`, their count in *nvia). */
int jb_scan_link_resolve(const struct jb_scan_snapshot *s, size_t i, const bool *changed,
                         bool *touched, size_t *via, size_t via_max, size_t *nvia);
void jb_scan_snapshot_free(struct jb_scan_snapshot *s);

/* What changed from `before` to `after` (both from jb_workspace_snapshot of one root), in path
 * order: a new array of at most `max` {path, change: "added"|"modified"|"deleted"|"mode",
 * type: "file"|"directory"|"symlink"|"other", mode ("0644"), size? and sha256? (files),
 * target? (symlinks), flagged? (the flag kind)} — a deleted entry as it was, the others as they
 * are; a file is modified when its type, size or content hash changed, a directory only when
 * its mode did. *total counts all of them. NULL when out of memory. */
json_t *jb_scan_changes(const struct jb_scan_snapshot *before, const struct jb_scan_snapshot *after,
                        size_t max, size_t *total);

/* A path of a walk as a JSON string (new): as it is when it is UTF-8, else with each invalid
 * byte replaced by U+FFFD — the form jb_scan_changes lists it in. NULL when out of memory. */
json_t *jb_scan_path_json(const char *path);

/* One flagged entry {path, kind, pathEscaped?, pathBase64?} (new; NULL when out of memory):
 * `path` as jb_scan_path_json shows it; when the name is not UTF-8 also its bytes, as
 * `pathEscaped` (UTF-8 sequences as they are, every other byte as \xNN, lower-case hex) and
 * `pathBase64` (RFC 4648 base64 of the bytes), so that a name U+FFFD stood in for is still
 * reported exactly. `kind` is one of the kinds above. */
json_t *jb_scan_flag_json(const char *path, const char *kind);

/* Whether symbolic link `path` (relative) of the workspace at `root` leads out of it, resolved as
 * the kernel does (openat2 RESOLVE_BENEATH, through any other link on the way — not lexically):
 * 1 it does (or loops), 0 it resolves inside or dangles inside, -1 it cannot be told. */
int jb_workspace_link_leaves(const char *root, const char *path);

/* Removes the non-directory entry `path` (relative) of the workspace at `root`: each directory
 * on the way opened with O_NOFOLLOW from the root's own descriptor, the entry unlinked from
 * its parent's — never through a symbolic link. 0, or -1 with `err` (EISDIR for a
 * directory, EINVAL for an empty, "." or ".." component). */
int jb_workspace_remove(const char *root, const char *path, jb_error *err);

/* The result as JSON (new reference): files, dirs, symlinks, other, bytes, truncated,
 * dirHash, hashMaxBytes, flagged [{path, kind}], flaggedCount. */
json_t *jb_scan_json(const struct jb_scan_result *r);

#endif
