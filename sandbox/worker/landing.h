/* landing.h — what a writable command leaves where the landing check (lib/scan.h,
 * jb_scan_landing: the scanner's path rules) covers a path: before the command, a copy of every
 * covered entry of the workspace (its pre-image: content, mode, owner, link target — bounded,
 * kept in the worker's memory, never in the workspace); after it, each entry the command
 * added, changed, renamed or re-moded at a covered path undone — a new one removed (with what
 * is under it, never through a link), an existing one put back as it was — and every covered
 * entry that changed or vanished restored, so that covered entries end as they were. Set-ID
 * bits the command left on a file are cleared. */
#ifndef JB_SANDBOX_LANDING_H
#define JB_SANDBOX_LANDING_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/err.h"
#include "sandbox/worker/hooks_path.h"
#include "sandbox/worker/workspace_scan.h"

#define JB_PREIMAGE_ENTRIES_MAX 4096 /* covered entries (and their directories) kept at most */
#define JB_PREIMAGE_BYTES_MAX (8 << 20) /* bytes of content kept at most */

struct jb_preimage; /* opaque; owned by the caller of jb_preimage_take */

/* Keeps the pre-image of the covered entries of `before` (a snapshot of the workspace at
 * `root` taken just now) and of the directories above them: each read through its parent
 * opened beneath the root without following any link (openat2 RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS), a file's content with O_NOFOLLOW. Past JB_PREIMAGE_ENTRIES_MAX entries or
 * JB_PREIMAGE_BYTES_MAX bytes the rest is not kept and the pre-image is not whole
 * (jb_preimage_whole). Returns 0 with *out (new; jb_preimage_free), or -1 with `err` when out
 * of memory or the root cannot be opened. */
int jb_preimage_take(const char *root, const struct jb_scan_snapshot *before,
                     struct jb_preimage **out, jb_error *err);

/* Whether every covered entry was kept. */
bool jb_preimage_whole(const struct jb_preimage *p);

void jb_preimage_free(struct jb_preimage *p);

/* What jb_landing_undo did. */
struct jb_landing_outcome {
  size_t flagged; /* entries the command left at covered paths, and covered entries it changed */
  size_t failed; /* of which could not be undone (they are named in the log) */
  bool incomplete; /* the pre-image was not whole: a covered entry may not be restored */
  char first[300]; /* "landing RULE PATH removed|restored" of the first one; "" when none */
};

/* A symbolic link is judged as a directory (its path with and without a trailing slash), and
 * by where it resolves (as the kernel would, against the walk; what is missing on its way taken
 * as it is): an entry at or under the in-workspace resolution T of a link at P also lies at
 * P/… . So the pre-image keeps the entries reached through the buyer's links at covered paths;
 * an entry the command added or changed that is reached so (links as they were before the
 * command) is undone; and a link the command made or changed that puts any entry at a covered
 * path is removed (what it leads to stays: it may be the buyer's). */

/* The places the buyer's git configuration makes its hooks or its config (hooks_path.h
 * jb_git_config_places): for the calling thread, until it calls again (NULL, 0 to clear),
 * each is judged as a link from its `as` (.git/hooks, .git/config) to it would be — what lies
 * there is covered as what lies at .git/hooks/… or .git/config. `v` is borrowed meanwhile. */
void jb_landing_places(const struct jb_git_place *v, size_t n);

/* Undoes what a writable command left at covered paths of the workspace at `root`, against
 * `before` and `after` (snapshots just before and just after it) and the pre-image `pre`
 * (taken with `before`; NULL: none kept, then every flagged entry is removed). Each entry
 * undone is marked in `changes` (jb_scan_changes of before and after; may be NULL):
 * `flagged` (the rule id) and `removed` or `restored` (true, or false when it failed).
 * Regular files the command added or changed keep no set-ID bit. Never fails as a whole: what
 * could not be done is counted in out->failed. */
void jb_landing_undo(const char *root, const struct jb_scan_snapshot *before,
                     const struct jb_scan_snapshot *after, const struct jb_preimage *pre,
                     json_t *changes, struct jb_landing_outcome *out);

/* The bounds of jb_landing_sweep. */
struct jb_sweep_limits {
  long max_entries; /* entries looked at, at most */
  long long time_ms; /* milliseconds (monotonic), at most; 0: no bound */
  long long since_ns; /* CLOCK_REALTIME: an entry whose ctime is older is not the command's */
};

/* jb_preimage_take when `before` is whole; when it was cut, the pre-image is taken from a
 * stat-only walk of the whole workspace within `lim` (lim->since_ns unused) instead, which
 * keeps every directory, every symbolic link (with its target) and every entry at a covered
 * path, then every entry under where those links resolve — so that the pre-image (and the
 * links the sweep after the command judges by) is whole past the cut. Not whole when that walk
 * is cut too. 0, or -1 with `err` as jb_preimage_take. */
int jb_preimage_take_swept(const char *root, const struct jb_scan_snapshot *before,
                           const struct jb_sweep_limits *lim, struct jb_preimage **out,
                           jb_error *err);

/* When the walk before or after a writable command was cut, a cheap sweep of the whole
 * workspace at `root` for what lies past the cut: each entry is lstat'ed only (nothing
 * read or hashed, no link followed, nothing kept), and each whose ctime is at or after
 * lim->since_ns is judged — one at a covered path (a link or a directory judged as a
 * directory), as it is or through a link of `before`, is undone (restored from `pre` when it
 * keeps it, else removed with what is under it); a link of `after` the command made or changed
 * through which one lies at a covered path is removed; a link leading out, a fifo, socket or
 * device is removed; a new link to a directory is judged by what it reaches (each entry under
 * it, links there not followed: one at a covered path through it and not where it is makes the
 * link a landing, removed). Each is counted in `out` (as jb_landing_undo) and appended to `changes`
 * (may be NULL) as {path, change, flagged, removed|restored, pastWalk: true}. Returns whether
 * the sweep was whole; when not, the first reason in `why` ("entries", "time", "depth",
 * "path length", "unreadable entry", "out of memory"). */
bool jb_landing_sweep(const char *root, const struct jb_scan_snapshot *before,
                      const struct jb_scan_snapshot *after, const struct jb_preimage *pre,
                      const struct jb_sweep_limits *lim, json_t *changes,
                      struct jb_landing_outcome *out, char *why, size_t wsize);

#endif
