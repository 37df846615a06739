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
  uid_t uid; /* the owner then: an inode owned by the jail now, that was not then, is a new
               file that took a freed inode number */
  gid_t gid; /* the group before the grant */
  bool chowned; /* the grant set the group */
  mode_t added; /* mode bits (07777) the grant added */
};

/* An entry the grant walked, by its place: the directory holding it and its name. A file the
 * agent wrote or edited is a new file put in the old one's place (written beside it, renamed
 * over it), owned by the jail: the restore gives it what the place held. */
struct jb_grant_place {
  dev_t dir_dev;
  ino_t dir_ino; /* the directory holding the entry */
  size_t name; /* offset of its NUL-terminated name in names */
  uid_t uid; /* owner, group and mode bits (07777) before the grant */
  gid_t gid;
  mode_t mode;
  mode_t added; /* mode bits (07777) the grant added to it */
  bool dir; /* a directory, not a regular file */
};

/* What a grant changed, and what it found where (owned; jb_workspace_grant_free). */
struct jb_workspace_grant {
  dev_t root_dev;
  ino_t root_ino;
  bool valid; /* complete: everything changed is recorded */
  struct jb_grant_entry *v;
  size_t n, cap;
  struct jb_grant_place *p; /* every directory and single-link regular file below the root */
  size_t np, pcap;
  char *names; /* the places' names, each NUL-terminated */
  size_t names_len, names_cap;
};

/* Walks `root` without following any symlink or leaving its file system (openat O_NOFOLLOW
 * from the root's own fd, as the pre-scan; a mount inside, a bind mount of the same file
 * system included, stays closed to the jail) and, for every directory and every regular file with a single link, sets the group
 * to `gid` and adds group read/write (and search, plus set-group-ID, on directories so that
 * new entries keep the group). The owner and the other bits are left alone; symlinks, special
 * files, set-ID files, files with capabilities (a chown would drop them) and files with
 * several links (which the shim refuses anyway, and which may be shared
 * with a file outside the workspace) are not touched. At most `max_entries` entries.
 * With `rec` (may be NULL), each change is recorded (inode, original group, mode bits added),
 * and so is the place of every directory and regular file walked below the root (its
 * directory's inode, its name, owner, group, mode and the bits added), for jb_workspace_restore;
 * free it with jb_workspace_grant_free.
 * Returns the number changed, or -1 with `err` when the root cannot be opened (or, with `rec`,
 * the record could not be kept: out of memory; the grant itself is then made). */
long jb_workspace_grant(const char *root, unsigned gid, long max_entries,
                        struct jb_workspace_grant *rec, jb_error *err);

/* Undoes a grant recorded in `rec` on `root`, once the jail can no longer write it: walks it
 * the same way and, for each directory and regular file whose inode the grant changed, gives
 * back the original group when the group is still `gid`, and clears the mode bits the grant
 * added (other changes made during the session stay, but a file the jail owns loses any
 * set-ID bit: it could have set them). A directory or single-link regular file the jail made
 * (owned by `jail_uid`, not in the record) is given an owner outside the jail:
 *  - in the place of one the grant walked (a file the agent rewrote, a directory it made
 *    again): that one's owner and group; the owner's mode bits as the agent left them, the
 *    group's and others' no more than the original gave them (execute where it gave read),
 *    never the bits the grant added, set-group-ID and sticky on a directory as the original;
 *  - elsewhere (one the agent created): the owner and group of the directory holding it (as
 *    given back), its mode bits as they are now, without write for others, with group write
 *    and a directory's set-group-ID and sticky bits only where that directory has them.
 * No file the jail made keeps a set-ID bit (chown first, then chmod), nor a POSIX ACL. A file
 * of the jail with several links keeps its owner, without set-ID bits or write for group and
 * others; symlinks and special files are left as they are. The walk visits every entry at any
 * depth, with no budget of entries (an agent could make entries enough to use one up before
 * the buyer's files were met), keeps in memory only the subdirectory names of the directories
 * on its path, and does not leave the root's mount. Refuses (-1, ESTALE)
 * when `root` is no longer the directory the grant was made on. Returns the number of entries
 * changed; -1 with `err` naming how many and the first when some entry could not be reached
 * or changed (what could be was given back). Sorts `rec`'s tables. */
long jb_workspace_restore(const char *root, unsigned gid, unsigned jail_uid,
                          struct jb_workspace_grant *rec, jb_error *err);

/* Writes `rec` to the file `fd` from offset 0 (a memfd the worker's keeper holds across a
 * restart). 0, or -1 (errno). */
int jb_workspace_grant_save(int fd, const struct jb_workspace_grant *rec);

/* Reads into *rec (new; jb_workspace_grant_free) what jb_workspace_grant_save wrote to `fd`.
 * On a short or inconsistent file *rec is left empty and invalid (nothing to restore). */
void jb_workspace_grant_load(int fd, struct jb_workspace_grant *rec);

void jb_workspace_grant_free(struct jb_workspace_grant *rec);

#endif
