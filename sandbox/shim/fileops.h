/* fileops.h — the shim's file operations inside /workspace (sandbox/proto/PROTOCOL.md):
 * read, read_many, write, stat, list, mkdir, move, delete, find, search, with the path rules
 * enforced at open time. Built into jailbox-shim only. */
#ifndef JB_SANDBOX_FILEOPS_H
#define JB_SANDBOX_FILEOPS_H

#include <jansson.h>
#include <stdbool.h>

#define JB_FILE_MAX (1024 * 1024) /* bytes of one read answer or one write */
#define JB_LIST_MAX 10000 /* entries of one list answer */

/* Why an op failed: a protocol error code (denied, not_found, too_large, bad_request,
 * internal), an errno value and a message. */
struct jb_fileop_error {
  const char *code;
  const char *escape; /* the escape signal kind (lib/escape_policy.h) when the refused path
                         tried to leave the workspace: "symlink_escape", "hard_link",
                         "path_traversal", "absolute_path"; NULL otherwise */
  int errnum;
  char message[256];
};

/* Opens the workspace root (`root`; jb_fileop opens "/workspace" on its first call unless this
 * was called first — the unit tests give a temporary directory; a second call replaces the
 * root) once, O_PATH|O_DIRECTORY|
 * O_NOFOLLOW|O_CLOEXEC, and probes openat2 (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
 * RESOLVE_NO_MAGICLINKS); without it (gVisor: ENOSYS, or EPERM from a seccomp profile) every
 * open walks the path component by component with O_NOFOLLOW. 0 or -1 (errno). */
int jb_fileops_init(const char *root);

/* Whether openat2 is used (after jb_fileops_init). */
int jb_fileops_have_openat2(void);

/* With `on`, the descriptors an op is done with are closed by jb_fileops_close_deferred
 * (after the answer is written: one system call less before it, per descriptor, each a trap
 * into gVisor's Sentry) rather than at once; at most 64 wait, more are closed at once.
 * Either way, what waits is closed first. */
void jb_fileops_defer_closes(bool on);

/* Closes the descriptors that wait (jb_fileops_defer_closes). */
void jb_fileops_close_deferred(void);

/* Whether `op` names a file op that jb_fileop runs. */
bool jb_fileop_known(const char *op);

/* Runs file op `op` (jb_fileop_known) with the request `req` (borrowed). Returns the result
 * object (new reference), or NULL with *e filled. */
json_t *jb_fileop(const char *op, json_t *req, struct jb_fileop_error *e);

#endif
