/* workspace_access.h — how the jailed shim (uid and gid 65534, no capabilities) may write the
 * buyer's workspace: the worker gives the jail's group access at launch (see WALLS.md,
 * "Writing the workspace"). */
#ifndef JB_SANDBOX_WORKSPACE_ACCESS_H
#define JB_SANDBOX_WORKSPACE_ACCESS_H

#include "server/err.h"

#define JB_JAIL_GID 65534 /* the jailed shim's gid (setpriv --regid) */

/* Walks `root` without following any symlink (openat O_NOFOLLOW from the root's own fd, as the
 * pre-scan) and, for every directory and every regular file with a single link, sets the group
 * to `gid` and adds group read/write (and search, plus set-group-ID, on directories so that
 * new entries keep the group). The owner and the other bits are left alone; symlinks, special
 * files and files with several links (which the shim refuses anyway, and which may be shared
 * with a file outside the workspace) are not touched. At most `max_entries` entries.
 * Returns the number changed, or -1 with `err` when the root cannot be opened. */
long jb_workspace_grant(const char *root, unsigned gid, long max_entries, jb_error *err);

#endif
