/* hostfs.h — reaching the workspace on the worker's host without following what the agent
 * planted: directories opened beneath the workspace root with openat2 RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS (no symbolic link anywhere on the way, nothing outside the root), files
 * opened O_NOFOLLOW from their parent's descriptor, trees removed without following a link.
 * Used by the landing check (landing.c), the pre-image store's reads (preimage_take.c) and
 * rollback (rollback.c). */
#ifndef JB_SANDBOX_HOSTFS_H
#define JB_SANDBOX_HOSTFS_H

#include <stddef.h>

#define JB_HOSTFS_TREE_DEPTH_MAX 256 /* directory levels jb_hostfs_remove_tree goes down */

/* The directory `dir` (relative; "" the root) opened beneath `rootfd` with no symbolic link
 * anywhere on the way (openat2(2) RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS, O_DIRECTORY | O_CLOEXEC): a new fd, or -1 (errno; ELOOP or EXDEV when
 * a link or a way out lies on it). */
int jb_hostfs_open_dir(int rootfd, const char *dir);

/* Splits `path` into its directory (into `dir`, `dsize` bytes; "" when it has none) and its
 * name (returned, a pointer into `path`). NULL when the directory does not fit. */
const char *jb_hostfs_split(const char *path, char *dir, size_t dsize);

/* The parent directory of `path` opened as jb_hostfs_open_dir does, its last name in *name (a
 * pointer into `path`): a new fd, or -1 (errno). */
int jb_hostfs_open_parent(int rootfd, const char *path, const char **name);

/* Reads at most `max` bytes of regular file `name` of `dfd` (opened O_NOFOLLOW: never through
 * a link) into *data (new, free()) and *len. 0; 1 when it has more than `max` bytes (or grew
 * past them while read); -1 when it cannot be read or is not a regular file. */
int jb_hostfs_read_file(int dfd, const char *name, size_t max, char **data, size_t *len);

/* Removes entry `name` of `dfd` and, when it is a directory, everything under it (at most
 * JB_HOSTFS_TREE_DEPTH_MAX levels below `depth`), never following a link: each directory is
 * opened O_NOFOLLOW from its parent's descriptor. 0 (also when it was not there), or -1. */
int jb_hostfs_remove_tree(int dfd, const char *name, int depth);

#endif
