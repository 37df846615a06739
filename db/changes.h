/* changes.h — the change summary of a session: every change its agent made — files written
 * or edited with the SHA-256 before and after, directories made, entries moved and deleted —
 * read from the session's completed ops. Kept after the
 * session ends (accepted, aborted or failed), like the ops themselves. */
#ifndef JB_DB_CHANGES_H
#define JB_DB_CHANGES_H

#include <libpq-fe.h>

#include "lib/err.h"

/* As JSON text (new): {"jobId", "changes": [{tool, path, opId, at (ISO 8601 UTC, when it was
 * done), …}]} in op order, at most 10,000, every successful op that changed the workspace;
 * by tool: write and edit {sha256Before (hex, null for a new file), sha256After (hex), size
 * (bytes)} (a file written twice appears twice); mkdir {type: "dir"} (only when it created a
 * directory); move {from, to, type, sha256 (of a moved file)}; delete {type, deleted (entries
 * removed), recursive}; exec, a writable command that changed something, {argv, effects (its
 * change list as kept beside the op, ops.changes: at most EXEC_CHANGES_KEPT entries and bytes,
 * sandbox/worker/exec_op.c), effectsTotal, effectsTruncated, effectsSummary (what its audit
 * entry holds: total, listed, truncated, counts, sha256 of the list's canonical bytes)};
 * an exec stored before migration 042 {argv, effects (its result's changes), effectsTotal}. sha256Before is the shim's hash of the file it replaced (the write's
 * result previousSha256), else the hash the buyer approved against (expectSha256).
 * JB_OK, JB_ERR_NOT_FOUND (no session), JB_ERR_FAIL. */
int jb_db_changes_list(PGconn *c, const char *job_id, char **json_out, jb_error *err);

#endif
