/* exec_effects.h — what a writable command did to its session's workspace (exec_effects.c):
 * the walk before it, the walk after and the changes between them (with what the file tools
 * refuse removed and the landing check applied), the change list kept beside the op and
 * summarised in its entry, and the hold on a session's writable commands. Called by exec_op.c
 * (the exec op), which is above it. */
#ifndef JB_SANDBOX_WORKER_EXEC_EFFECTS_H
#define JB_SANDBOX_WORKER_EXEC_EFFECTS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandbox/worker/landing.h"
#include "sandbox/worker/worker.h"
#include "sandbox/worker/workspace_scan.h"

/* What is kept of `changes` (borrowed: the list jb_scan_changes made, marked by the removal of
 * what the file tools refuse; `total` all the changes counted) beside the op, ops.changes
 * (new; NULL when out of memory): {total, listed, truncated, counts {added, deleted, modified,
 * mode, flagged, removed} (of the listed ones), sha256, list} — `list` the first changes in
 * path order, at most CHANGES_MAX of them and CHANGES_KEPT_BYTES of canonical bytes, `sha256`
 * the hex SHA-256 of the canonical bytes of `list` (canonical_json), so that its audit entry,
 * which holds all but `list`, certifies the list a reader gets. */
json_t *exec_changes_kept(json_t *changes, size_t total);

/* `kept` (exec_changes_kept) without its list (new): what the audit entry holds. */
json_t *exec_changes_summary(json_t *kept);

/* The first 1,000 changes of `kept`'s list, for the agent's result (new). */
json_t *exec_changes_for_result(json_t *kept);

/* Before a writable command of session s: the walk of its workspace into *before (the hashes
 * of the walk after its last writable command reused for files unchanged since) and the
 * pre-image of the entries the landing check covers into *pre. 0, or -1 with `err`. */
int exec_effects_before(struct jb_worker *w, struct jb_session *s, struct jb_scan_snapshot *before,
                        struct jb_git_place *places, struct jb_preimage **pre, jb_error *err);

/* Holds the writable commands of session `job` until the buyer decides (migration 041): its
 * effects were not checked whole, for `why`. */
void exec_hold_writable(struct jb_worker *w, const char *job, const char *why);

/* Whether session `job`'s writable commands are held (incomplete effects the buyer has not
 * cleared), read on `c`: 1 with the reason in `why`, 0, or -1 (then none runs either). */
int exec_writable_held(PGconn *c, const char *job, char *why, size_t wsize);

/* What a writable command changed in session s's workspace against `before` (taken just before
 * it ran, with the pre-image `pre`): the changes (new; NULL when the walk after failed), their
 * count in *total, and in *incomplete whether the walks were not whole (entries, depth, time,
 * bytes to hash) or the pre-image was not kept whole — then what it did past them is not
 * seen. What it left that the file tools refuse is removed (never through a link) and marked
 * `removed` in the changes: a symbolic link that leads out of the workspace, resolved against
 * the tree as it now is (links_out), a fifo, socket or device, and a second name for a file —
 * of the names of one file, one that was there before is kept, else the first new one by path.
 * The names that were there before are never touched. Then the landing check
 * (sandbox/worker/landing.h): what it left at a path the scanner's path rules cover is undone
 * (removed, or restored from the pre-image). Any of these, or an incomplete walk, is
 * JB_SIG_DENIED_PATH, raised here at once as a security alert with the first one in `what`
 * (the command ran inside the walls, so nothing escaped — what it left would only mislead a
 * tool on the host later); *sig stays -1 for the caller. The walk after is kept for the next
 * command's hashes. */
json_t *exec_workspace_effects(struct jb_worker *w, struct jb_session *s,
                               const struct jb_scan_snapshot *before, const struct jb_preimage *pre,
                               size_t *total, bool *incomplete, bool *swept_out, int *sig,
                               char *what, size_t wsize);

#endif
