/* overlay.h — the spawner's copy-on-write view of the workspace for one writable command
 * (sandbox/WALLS.md, "Changesets"; sandbox/proto/PROTOCOL.md, "The spawner"): an overlay whose
 * lower is /workspace and whose upper and work directories live on the container's tmpfs
 * JB_CS_ROOT (root only, never bound into a jail), the list of what the upper holds (metadata
 * only: lstat, one getxattr per directory, no content read, no link followed, every step
 * openat-relative and bounded), its regular files' content in bounded chunks, and its
 * removal. */
#ifndef JB_SANDBOX_SHIM_OVERLAY_H
#define JB_SANDBOX_SHIM_OVERLAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The tmpfs the worker gives the container (walls_launch.c), mode 0700. */
#define JB_CS_ROOT "/jailbox-cs"
/* An overlay's id: [A-Za-z0-9_-]{1,64}. */
#define JB_CS_ID_MAX 64
/* The deepest directory a manifest walks (the upper's root is depth 0); deeper: too_large. */
#define JB_CS_MAX_DEPTH 64
/* Entries a manifest lists by default and at most (a request's maxEntries). */
#define JB_CS_DEFAULT_ENTRIES 10000
#define JB_CS_MAX_ENTRIES 100000
/* The most bytes a manifest's entries may take as compact JSON (each entry measured as it is
 * sent, with its comma): the answer rides on one spawner line (JB_SPAWNER_MAX_LINE, 2 MiB),
 * which it must never pass. 10,000 entries of short names fit. */
#define JB_CS_MAX_BYTES (1024 * 1024)
/* The most bytes one cs_read answers (768 KiB: their base64, 1 MiB, stays well within a
 * spawner line). */
#define JB_CS_READ_MAX (768 * 1024)
/* The deepest directory a discard enters; a deeper one is moved up whole and removed by the
 * discard's next pass (so any depth is removed, with at most this many open directories). */
#define JB_CS_RM_DEPTH 256

/* Whether `id` is a valid overlay id. */
bool jb_cs_id_valid(const char *id);

/* Makes `root`/ID/{upper,work,merged} (ID must not exist: EEXIST) — upper with the owner and
 * mode of `lower`, so that the merged root is the workspace's — and mounts the overlay
 * lowerdir=`lower`,upperdir=…/upper,workdir=…/work on …/merged (nosuid, nodev). Writes the
 * merged path into `merged` (`mlen` bytes). 0, or -1 with errno and a message in `why` (what
 * it made is removed again, so the id is free). */
int jb_cs_mount(const char *root, const char *id, const char *lower, char *merged, size_t mlen,
                char *why, size_t wlen);

/* The entries of the upper directory open at `upper_fd` (borrowed; a directory fd), depth
 * first, as a new JSON array of {path (relative, "/"-separated), type ("file", "dir",
 * "symlink", "char", "block", "fifo", "socket"), mode (st_mode & 07777), size (bytes; 0 for
 * a dir or device), target (symlinks: the link's text, read, not followed), whiteout (a char
 * device 0:0: the lower's entry is deleted), opaque (a dir whose trusted.overlay.opaque is
 * "y": nothing of the lower under it shows)}. At most `max_entries` entries and
 * JB_CS_MAX_BYTES of JSON, JB_CS_MAX_DEPTH deep and JB_PATH_MAX bytes a path. NULL on failure
 * with `*code` ("too_large" over a bound, "bad_name" for a name or link text that is not
 * UTF-8, "internal" otherwise) and a message in `why` (which may quote a name as it is). */
json_t *jb_cs_manifest_at(int upper_fd, size_t max_entries, const char **code, char *why,
                          size_t wlen);

/* Up to `length` bytes (1 … JB_CS_READ_MAX) from byte `offset` (0 or more) of the regular file
 * `path` of the upper directory open at `upper_fd` (borrowed), read with pread, as a new JSON
 * object {data (the bytes, standard padded base64, RFC 4648 §4), size (the whole file's bytes,
 * from fstat), eof (true when the bytes reach the file's end)}; an offset at or past the end
 * gives data "" and eof true. `path` is as the manifest gives it: relative, "/"-separated, no
 * empty, "." or ".." component, at most JB_PATH_MAX bytes (lib/pathcheck.h). No link is
 * followed anywhere: each directory on the way is pinned O_PATH|O_DIRECTORY|O_NOFOLLOW from
 * its parent, the last name is lstat'ed and only a regular file opened
 * (O_RDONLY|O_NOFOLLOW|O_NONBLOCK), then fstat'ed again — a FIFO or a device is never opened,
 * so never blocks or acts. NULL on failure with `*code` — "bad_request" (the path's syntax, the
 * offset or length out of range), "not_found" (ENOENT on the way or at the end), "not_file"
 * (the name is a directory, symlink, FIFO, socket, device or whiteout, or something on the way
 * is not a directory, a symlink included), "internal" — and a message in `why` (`wlen` bytes;
 * it may quote the path as it is). */
json_t *jb_cs_read_at(int upper_fd, const char *path, long long offset, size_t length,
                      const char **code, char *why, size_t wlen);

/* Unmounts `root`/ID/merged (detached; not mounted is fine) and removes `root`/ID however
 * deep (no link followed, even one a running process swaps in; no other filesystem below entered, as the
 * overlay's own were its detach to fail: EXDEV). 0 (ID absent too), or -1 with a message in `why`. */
int jb_cs_discard(const char *root, const char *id, char *why, size_t wlen);

/* Discards every overlay left under `root` (a spawner that starts finds none of its own). */
void jb_cs_sweep(const char *root);

/* The `overlay` field of an exec request `req` into `out` (JB_CS_ID_MAX + 1 bytes; "" when
 * absent). It needs `writable`. 0, or -1 with a message in `why`. */
int jb_cs_exec_field(const json_t *req, bool writable, char *out, char *why, size_t wlen);

/* Serves spawner request `req` of op `op` ("cs_manifest" {overlay, maxEntries?} → {entries,
 * count}; "cs_read" {overlay, path, offset, length} → {data, size, eof} (jb_cs_read_at);
 * "cs_discard" {overlay} → {discarded: true}) on overlays under `root`. The result (new), or
 * NULL with `*code` (bad_request, not_found, not_file, too_large, bad_name, unknown_op,
 * internal) and `why` (printable ASCII). */
json_t *jb_cs_request(const char *root, const char *op, const json_t *req, const char **code,
                      char *why, size_t wlen);

#endif
