/* grant_mask.h — a workspace's tree hash during its session, without the bits the launch's
 * grant added (workspace_access.h): the jail's group read and write (and search and set-group-ID
 * on folders) that the worker gives every entry at launch and takes back at the end are not the
 * buyer's tree, so a hash taken mid-session (a changeset's, a rollback's) compares equal to the
 * pre-scan's, which is taken before the grant. */
#ifndef JB_SANDBOX_GRANT_MASK_H
#define JB_SANDBOX_GRANT_MASK_H

#include <stdbool.h>
#include <sys/stat.h>

#include "sandbox/worker/workspace_access.h"

/* The grant's tables, sorted for lookups (a copy: the session's own are not touched). */
struct jb_grant_mask {
  struct jb_grant_entry *v; /* by (dev, ino) */
  size_t n;
  struct jb_grant_place *p; /* by (dir_dev, dir_ino, name) */
  size_t np;
  char *names;
};

/* A copy of `g`'s tables sorted into `m` (empty when `g` is NULL or invalid). 0, or -1 when
 * out of memory (then `m` is empty). */
int jb_grant_mask_init(struct jb_grant_mask *m, const struct jb_workspace_grant *g);

/* The tree hash's mode_of (lib/treehash.h; ctx: a struct jb_grant_mask): the entry's bits less
 * those the grant added — to its inode when the grant changed that inode and it is still the
 * same owner's, else to the entry that stood at that place (directory and name) at launch, for
 * a file written there since (a rewrite, a restore) — and as they are anywhere else. */
unsigned jb_grant_mask_mode(void *ctx, const struct stat *dir, const char *name,
                            const struct stat *st);

void jb_grant_mask_free(struct jb_grant_mask *m);

#endif
