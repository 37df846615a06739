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

#endif
