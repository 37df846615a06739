/* workspace_access.h — how the jailed shim (uid and gid 65534, no capabilities) may write the
 * buyer's workspace: the worker gives the jail's group access at launch, recording what it
 * changed, and undoes it when the session's sandbox is gone (see WALLS.md, "Writing the
 * workspace"). */
#ifndef JB_SANDBOX_WORKSPACE_ACCESS_H
#define JB_SANDBOX_WORKSPACE_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "lib/err.h"

#define JB_JAIL_GID 65534 /* the jailed shim's gid (setpriv --regid) */

/* One entry the grant changed. */
struct jb_grant_entry {
  dev_t dev;
  ino_t ino;
  gid_t gid; /* the group before the grant */
  bool chowned; /* the grant set the group */
  mode_t added; /* mode bits (07777) the grant added */
  bool seen; /* met by the restore's walk */
};

/* What a grant changed (owned; jb_workspace_grant_free). */
struct jb_workspace_grant {
  dev_t root_dev;
  ino_t root_ino;
  bool valid; /* complete: everything changed is recorded */
  struct jb_grant_entry *v;
  size_t n, cap;
};

/* Walks `root` without following any symlink (openat O_NOFOLLOW from the root's own fd, as the
 * pre-scan) and, for every directory and every regular file with a single link, sets the group
 * to `gid` and adds group read/write (and search, plus set-group-ID, on directories so that
 * new entries keep the group). The owner and the other bits are left alone; symlinks, special
 * files and files with several links (which the shim refuses anyway, and which may be shared
 * with a file outside the workspace) are not touched. At most `max_entries` entries.
 * With `rec` (may be NULL), each change is recorded (inode, original group, mode bits added)
 * for jb_workspace_restore; free it with jb_workspace_grant_free.
 * Returns the number changed, or -1 with `err` when the root cannot be opened (or, with `rec`,
 * the record could not be kept: out of memory; the grant itself is then made). */
long jb_workspace_grant(const char *root, unsigned gid, long max_entries,
                        struct jb_workspace_grant *rec, jb_error *err);

/* Undoes a grant recorded in `rec` on `root`: walks it the same way and, for each directory
 * and regular file whose inode the grant changed, gives back the original group when the
 * group is still `gid`, and clears the mode bits the grant added (other changes made during
 * the session stay). Files the session created are not in the record and are left as they
 * are. The walk has no entry budget (entries the session added must not use it up before
 * the recorded ones are met) and ends once every recorded inode has been met. Refuses (-1,
 * ESTALE) when `root` is no longer the directory the grant was made on. Returns the number of
 * entries restored, or -1 with `err`. Sorts `rec`. */
long jb_workspace_restore(const char *root, unsigned gid, struct jb_workspace_grant *rec,
                          jb_error *err);
void jb_workspace_grant_free(struct jb_workspace_grant *rec);

#endif
