/* rollback_restore.h — one pre-image row put back into the workspace on the host: the path
 * checked to hold still what the op left (else a conflict, left alone unless forced), then
 * restored atomically beneath the workspace root — a file's blob (hashed again) written to a
 * temporary name in its folder, fsynced and renamed over the path, with the mode it had less
 * its set-ID bits (the owner it had is not known); a link made the same way;
 * a folder made; a path the op made removed (a folder only when empty); a folder the op moved
 * renamed back. The folder of the path is opened with openat2 RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS (hostfs.h): a folder on the way replaced by a link — to outside or not —
 * fails the row, even forced; nothing is written through it. */
#ifndef JB_SANDBOX_ROLLBACK_RESTORE_H
#define JB_SANDBOX_ROLLBACK_RESTORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandbox/worker/preimage_store.h"

enum jb_restore_outcome { JB_RESTORED, JB_CONFLICT, JB_RESTORE_FAILED };

/* Whether `now` (what a path holds) is what `kind` ("file", "dir", "link", "absent") with
 * `sha` (a file's content), `mode` (st_mode & 07777 of a file or folder) and `target` (a
 * link's text) describe; `sha`, `target` NULL and `mode` < 0 are not compared. */
bool jb_restore_holds(const struct jb_pstore_item *now, const char *kind, const char *sha,
                      long long mode, const char *target);

/* "restored", "conflict", "failed". */
const char *jb_restore_outcome_name(enum jb_restore_outcome o);

/* Called by a forced restore with what it kept of what it is about to overwrite, before it
 * overwrites it: 0 to go on (the caller has recorded it), -1 to fail the row. */
typedef int (*jb_restore_keep_fn)(void *ctx, json_t *row, const struct jb_pstore_item *kept);

/* Restores row `row` ({path, kind, sha256?, mode?, target?, fromPath?, afterKind?,
 * afterSha256?, afterMode?}, as db/preimages.h jb_db_rollback_rows gives it; borrowed) in the
 * workspace open on `rootfd`, the blobs read from the store of `job` under `store_dir`. A path
 * that holds neither what the op left nor what the row restores is a conflict unless `force`;
 * with `force`, what it overwrites is first kept in the store as *kept (kind ABSENT when
 * nothing was kept; the caller stores it as a row of the rollback) — unless that would pass
 * `room` bytes (then the row fails); `keep` (NULL: none) is called with it before the path is
 * overwritten, so that a rollback killed right after has recorded what it overwrote. A path that holds what the row restores already (a
 * rollback killed after its rename) is restored. `detail` (dsize bytes) says why for a
 * conflict or a failure. */
enum jb_restore_outcome jb_rollback_restore(const char *store_dir, const char *job, int rootfd,
                                            json_t *row, bool force, long long room,
                                            jb_restore_keep_fn keep, void *keep_ctx,
                                            struct jb_pstore_item *kept, char *detail,
                                            size_t dsize);

/* A file row's new content written beside its path, not yet in place (jb_restore_stage). */
struct jb_restore_staged {
  int pfd; /* the path's folder; -1: nothing staged */
  char tmp[64]; /* the temporary file's name in it */
  const char *name; /* the path's last name (borrowed from the row) */
};

/* Many file rows restored with two syncs in all instead of two each (a changeset's apply):
 * jb_restore_stage checks row `row` (kind file) as jb_rollback_restore does — done already
 * (JB_RESTORED, nothing staged), a conflict, a failure — and writes its blob to a temporary
 * file beside the path, not synced (JB_RESTORED, `st` filled: its folder's fd is held). The
 * caller then makes the staged files durable (syncfs(2) of the workspace's file system),
 * and jb_restore_finish checks each path again (a conflict now: the temporary file is removed)
 * and renames the file into place, then the caller syncs again. Never forced. */
enum jb_restore_outcome jb_restore_stage(const char *store_dir, const char *job, int rootfd,
                                         json_t *row, struct jb_restore_staged *st, char *detail,
                                         size_t dsize);
enum jb_restore_outcome jb_restore_finish(const char *job, int rootfd, json_t *row,
                                          struct jb_restore_staged *st, char *detail, size_t dsize);

/* Removes a staged file not put in place and lets its folder go (nothing staged: nothing). */
void jb_restore_staged_drop(struct jb_restore_staged *st);

#endif
