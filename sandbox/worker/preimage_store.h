/* preimage_store.h — the pre-image store: what a path of a workspace held before an op changed
 * it. A regular file's content is a blob, content-addressed under the store's directory:
 * <dir>/<jobId>/objects/<sha256[0:2]>/<sha256>, mode 0400, written as a temporary file that is
 * fsynced, renamed into place and its directory fsynced (a blob is whole or absent); a blob
 * already there is not written again and adds 0 bytes. Reads hash the blob again and refuse
 * one that no longer matches its name. The other kinds of pre-image (absent, a directory and
 * its mode, a link and its target) are facts with no blob. Paths of the workspace are read on
 * the host beneath its root without following any link (hostfs.h). */
#ifndef JB_SANDBOX_PREIMAGE_STORE_H
#define JB_SANDBOX_PREIMAGE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "lib/err.h"

#define JB_PSTORE_TARGET_MAX 4096 /* bytes of a link's target kept at most */

#define JB_PSTORE_BLOCK 4096 /* bytes a new blob counts at least, and its unit */

/* What a new blob of `size` bytes counts against a session's budget: its size rounded up to
 * JB_PSTORE_BLOCK, at least one block — what it takes on disk (a block, an inode), so that many
 * small distinct files (each a blob of a few bytes) cannot fill the disk while the budget counts
 * a few bytes each. */
long long jb_pstore_cost(long long size);

/* What a path held. */
enum jb_pstore_kind { JB_PSTORE_ABSENT, JB_PSTORE_FILE, JB_PSTORE_DIR, JB_PSTORE_LINK };

/* One path's pre-image (or what an op left there). */
struct jb_pstore_item {
  enum jb_pstore_kind kind;
  char sha256[65]; /* kind file: the blob's name (hex); "" otherwise */
  mode_t mode; /* st_mode & 07777 (file, dir) */
  char target[JB_PSTORE_TARGET_MAX + 1]; /* kind link */
  long long bytes; /* bytes this item's blob added to the store (0: it was there already) */
  long long size; /* kind file: its size in bytes */
};

/* The kind's name as the preimages table spells it: "absent", "file", "dir", "link". */
const char *jb_pstore_kind_name(enum jb_pstore_kind k);

/* Whether `job` can name a directory of the store: 1 to 128 bytes of [A-Za-z0-9._-], not "."
 * or "..". */
bool jb_pstore_job_ok(const char *job);

/* The store's base directory `dir` (made when missing and `make`, 0700) opened O_DIRECTORY |
 * O_NOFOLLOW, once checked to belong to this process's effective user and to be writable by no
 * one else — another user who could rename its entries could swap a job's folder for a link
 * and have blobs written where it chose. Every blob is reached from it, level by level, never
 * through a link. A new fd, or -1 with `err` (EPERM: not this user's own, or writable by
 * others). */
int jb_pstore_open_base(const char *dir, bool make, jb_error *err);

/* Copies the regular file open on `fd` (read from its current offset to its end) into the
 * store of `job` under `dir` (made when missing, 0700), hashing it on the way (SHA-256, FIPS
 * 180-4). The blob's name goes to `sha256` (65 bytes), the bytes it added to *added
 * (jb_pstore_cost of its size; 0 when the blob was there already), its size to *size. 0, or -1 with `err`. */
int jb_pstore_put_fd(const char *dir, const char *job, int fd, char sha256[65], long long *added,
                     long long *size, jb_error *err);

/* Copies blob `sha256` of `job`'s store to `out` (written from its current offset), hashing it
 * again on the way: -1 with `err` (code EBADMSG) when it no longer matches its name (nothing
 * of it should then be used), ENOENT when it is gone. 0 on success. */
int jb_pstore_copy_out(const char *dir, const char *job, const char *sha256, int out,
                       jb_error *err);

/* Removes blob `sha256` of `job`'s store (one an op added but did not keep). 0, or -1. */
int jb_pstore_remove(const char *dir, const char *job, const char *sha256);

/* Removes the whole store of `job` (its directory and every blob in it). 0 (also when there
 * was none), or -1 with `err`. */
int jb_pstore_drop(const char *dir, const char *job, jb_error *err);

/* What `path` (relative to the workspace root open on `rootfd`) holds now, into `out`: a
 * regular file is copied into the store (kind file, its sha256, mode, the bytes it added), a
 * directory's mode, a link's target, or absent (ENOENT on the last name; a missing directory
 * on the way is absent too). The path is reached beneath the root with no link on the way
 * (hostfs.h) and the last name is never followed. With `store_dir` NULL a file is hashed, not
 * kept (what an op left). A file over `max_size` bytes (< 0: no bound) is not copied: EFBIG.
 * 0; -1 with `err`: a link or a way out on the way (ELOOP, EXDEV), a special file (EINVAL),
 * EFBIG, a path — or, with `store_dir`, a link's target — that is not UTF-8 (EILSEQ: a row
 * cannot hold it), or a failure to read or store it. */
int jb_pstore_take(const char *store_dir, const char *job, int rootfd, const char *path,
                   long long max_size, struct jb_pstore_item *out, jb_error *err);

#endif
