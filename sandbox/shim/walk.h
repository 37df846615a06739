/* walk.h — the resolver and helpers that the shim's op files share (walk.c owns them;
 * fileops.c, treeops.c and searchops.c use them): a path walked from the workspace root's descriptor one
 * component at a time, never handing a symlink to the kernel to follow, the exclusion check on
 * the symlink-free path reached, and the error constructors. Internal to jailbox-shim. */
#ifndef JB_SANDBOX_SHIM_WALK_H
#define JB_SANDBOX_SHIM_WALK_H

#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "lib/pathcheck.h"
#include "sandbox/shim/fileops.h"

#define MAX_DEPTH 256 /* directories deep one walk may go */
#define HASH_MAX (256LL * 1024 * 1024) /* bytes hashed by stat, move and expectSha256 at most */

/* A walk in progress: the stack of directories from the root (fds[0], not owned) down. */
struct walk {
  int fds[MAX_DEPTH + 1];
  int depth;
  char canon[JB_PATH_MAX + 1]; /* the directories' own names from the root: "a/b" ("" = root) */
};

extern int fo_root_fd; /* the workspace root, O_PATH (jb_fileops_init) */
extern dev_t fo_root_dev; /* its st_dev: a directory with another one is a mount point */
extern const json_t *fo_exclude; /* the current request's exclusion globs (borrowed) or NULL */

/* Fills *e with `code`, `errnum` and the formatted message (escape cleared). Returns -1. */
int fo_fail(struct jb_fileop_error *e, const char *code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* An errno from an open, stat or change as a protocol error about `what`. Returns -1. */
int fo_fail_errno(struct jb_fileop_error *e, int errnum, const char *what);

/* Resolves `path` (syntactically checked) to its directory and last component: see walk.c.
 * With `follow`, symlinks that stay inside are followed; without, any symlink before the last
 * component is refused. 0 with `w` open, or -1 with *e and nothing open. */
int fo_resolve(const char *path, bool follow, bool probe_last, struct walk *w,
               char last[JB_PATH_NAME_MAX + 1], struct jb_fileop_error *e);

/* fo_resolve, then the exclusion check on the symlink-free path reached, written to `canon`
 * (JB_PATH_MAX + 1 bytes). 0 with `w` open, or -1 with *e (`excluded`) and nothing open. */
int fo_resolve_allowed(const char *path, bool follow, bool probe_last, struct walk *w,
                       char last[JB_PATH_NAME_MAX + 1], char *canon, struct jb_fileop_error *e);

/* The folders fo_resolve_create made: their symlink-free paths (new array, or NULL when none)
 * and, for each, the walk depth of the directory it was made in. */
struct fo_made {
  json_t *names;
  int at[MAX_DEPTH];
};

/* fo_resolve_allowed for a write or a move's destination that may make its missing parent
 * folders. When the path's resolution fails only because a folder on it does not exist and
 * `allowed` is an array (the symlink-free paths of the folders the request may make, as
 * jailboxd checked and showed them), the path is walked again and each missing folder is made
 * with mkdirat(0755) in its parent's descriptor, then opened O_NOFOLLOW — only when it is in
 * `allowed`, not excluded, and its parent is on the workspace's file system; a folder that
 * appears meanwhile is used as it is. A symlink on the way is refused (never followed), a file
 * where a folder is expected is not_found. 0 with `w` open and *made filled (fo_unmake undoes
 * it; fo_made_clear frees it), or -1 with *e, nothing open and nothing made. */
int fo_resolve_create(const char *path, const json_t *allowed, struct walk *w,
                      char last[JB_PATH_NAME_MAX + 1], char *canon, struct fo_made *made,
                      struct jb_fileop_error *e);

/* Removes the folders of `made` (deepest first) while `w` is still open, and clears it. */
void fo_unmake(const struct walk *w, struct fo_made *made);

/* Frees made->names. */
void fo_made_clear(struct fo_made *made);

/* Closes (or defers the close of) the walk's directories. */
void fo_walk_close(struct walk *w);

/* The descriptor of the walk's current directory (borrowed). */
int fo_walk_dir(const struct walk *w);

/* The symlink-free path of `last` in the walk's directory into `out` (JB_PATH_MAX + 1). 0/-1. */
int fo_final_canon(const struct walk *w, const char *last, char *out);

/* Whether root-relative, symlink-free `canon` is excluded by the request's globs. */
bool fo_canon_excluded(const char *canon);

/* Whether the symlink `name` in the walk's directory leads out of the workspace. */
bool fo_link_leads_out(const struct walk *w, const char *name);

/* Whether root-relative `rel`, symlinks followed, reaches something inside that is not
 * excluded; *out (may be NULL) is set when it leads out. */
bool fo_resolves_inside(const char *rel, bool *out);

/* Opens directory `name` under `dir` for reading without following a symlink (O_PATH pin,
 * then "."); -1 with errno. The descriptor is the caller's. */
int fo_open_dir_readable(int dir, const char *name);

/* Refuses (-1 with *e) what is not a regular file with one link; hard_link escape for more. */
int fo_check_regular(const struct stat *st, const char *path, struct jb_fileop_error *e);

/* The request's string argument `key` (default `def` when absent and `def` is non-NULL),
 * checked by jb_path_check ("." allowed only with a default). NULL with *e. */
const char *fo_arg_path_key(json_t *req, const char *key, const char *def,
                            struct jb_fileop_error *e);

/* fo_arg_path_key for "path". */
const char *fo_arg_path(json_t *req, const char *def, struct jb_fileop_error *e);

/* "file", "dir", "symlink" or "other". */
const char *fo_type_name(mode_t m);

/* SHA-256 (hex) of the open regular file `fd`, optionally keeping its bytes (≤ JB_FILE_MAX):
 * see walk.c. 0 or -1 (errno; EFBIG over HASH_MAX). */
int fo_hash_fd(int fd, char hex[65], unsigned char **keep, size_t *keep_len);

#define FO_ANSWER_MAX (1024 * 1024) /* bytes of the names or lines of one list, find, search */

/* Bytes `n` bytes take inside a JSON string (jansson's escapes, without JSON_ENSURE_ASCII). */
size_t fo_json_escaped_len(const unsigned char *buf, size_t n);

/* Sets {content, encoding} of `n` bytes on `o` (utf-8 text or base64). `o`, or NULL (o freed). */
json_t *fo_content_json(const unsigned char *buf, size_t n, json_t *o);

/* Closes `fd` now or after the answer (jb_fileops_defer_closes). */
void fo_close_later(int fd);

#define FO_NAMES_MAX 1000000 /* names of one directory read at most */

/* The names of a directory, without "." and "..", sorted bytewise. */
struct fo_names {
  char **v;
  size_t n;
};

/* Reads every name of `d` (at most FO_NAMES_MAX) into *out, sorted. 0, or -1 when not all could
 * be kept (out of memory, too many): *out then holds those that were, sorted. */
int fo_read_names(DIR *d, struct fo_names *out);

/* Frees what fo_read_names kept. */
void fo_names_free(struct fo_names *names);

/* The ops of treeops.c and searchops.c: the request `req` (borrowed), a new result or NULL
 * with *e. Arguments and results: sandbox/proto/PROTOCOL.md. */
json_t *fo_op_mkdir(json_t *req, struct jb_fileop_error *e);
json_t *fo_op_move(json_t *req, struct jb_fileop_error *e);

#define JB_TREE_NAMES_MAX 10000 /* entries of a tree whose landing is checked (stat's tree) */
#define JB_TREE_NAMES_BYTES (256 * 1024) /* bytes of their names */

/* The names of the directory `last` of `w` (whose symlink-free path is `canon`) as they would
 * land elsewhere: {entries: [each path below it, a directory's with "/" after it, depth first
 * in name order], sha256: hex SHA-256 over the entries each followed by a NUL byte} (new), or
 * JSON null when `last` is no directory. Walked as a directory's move walks it (no symlink
 * followed, nothing excluded, no link leading out, no mount point; hard-linked and special
 * files named). NULL with *e: `too_large` past JB_TREE_NAMES_MAX entries or
 * JB_TREE_NAMES_BYTES bytes of names, `denied` for a name that is not UTF-8, and the move's
 * refusals. */
json_t *fo_tree_names(const struct walk *w, const char *last, const char *canon,
                      struct jb_fileop_error *e);
json_t *fo_op_delete(json_t *req, struct jb_fileop_error *e);
json_t *fo_op_find(json_t *req, struct jb_fileop_error *e);
json_t *fo_op_search(json_t *req, struct jb_fileop_error *e);

#endif
