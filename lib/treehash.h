/* treehash.h — tree hash v1: one SHA-256 over a whole directory tree, byte for byte (every
 * entry's type, path, permission bits and content or link text), so that two states of a
 * workspace can be told equal or not from two digests, offline. The definition is in
 * api/audit.md ("Tree hash v1"); tests/node/lib/treehash.py is a reference implementation. */
#ifndef JB_TREEHASH_H
#define JB_TREEHASH_H

#include <sys/stat.h>

#include "lib/err.h"

#define JB_TREE_HASH_MAX_ENTRIES_DEFAULT 1000000L
#define JB_TREE_HASH_MAX_BYTES_DEFAULT (4LL << 30) /* 4 GiB */

/* The bounds of one tree hash. */
struct jb_tree_hash_limits {
  long max_entries; /* entries beneath the root, at most; <= 0: the default */
  long long max_bytes; /* bytes of regular-file content read and hashed in all, at most
                          (JAILBOX_TREE_HASH_MAX_BYTES); <= 0: the default */
  /* The permission bits an entry is hashed with (NULL: st->st_mode & 07777), given the stat of
   * the directory holding it, its name and its own stat — a caller that changed bits of the
   * tree for its own use takes them off here, so that the digest is the tree's own. */
  unsigned (*mode_of)(void *ctx, const struct stat *dir, const char *name, const struct stat *st);
  void *mode_ctx;
};

/* Tree hash v1 (api/audit.md) of the directory open as `rootfd` (borrowed; O_RDONLY or O_PATH,
 * with O_DIRECTORY) into `out_hex` (64 lower-case hex digits
 * and a NUL). `lim` may be NULL (the defaults). The walk goes through directory fds only
 * (openat with O_NOFOLLOW | O_DIRECTORY, fstatat with AT_SYMLINK_NOFOLLOW): no symbolic link is
 * followed; only regular files are opened (O_NOFOLLOW | O_NONBLOCK: a FIFO never blocks it);
 * directories nest 256 deep at most (one fd open a level). Memory: the records of all entries (about their paths'
 * length plus 80 bytes each) until the end.
 * Returns 0 with the digest; 1 when the hash is not computed, with `out_hex` empty and *why
 * one of these static strings: "too_many_entries", "too_large" (more than max_bytes of
 * content), "too_deep", "unreadable" (an entry the caller may not stat, open or read:
 * EACCES, EPERM), "changed" (an entry vanished or changed type while it was read);
 * -1 with `err` on any other failure (out of memory, I/O error). */
int jb_tree_hash_at(int rootfd, const struct jb_tree_hash_limits *lim, char out_hex[65],
                    const char **why, jb_error *err);

#endif
