/* changes.h — the change summary of a session: every file its agent wrote, with
 * the SHA-256 before and after, read from the session's completed write ops. Kept after the
 * session ends (accepted, aborted or failed), like the ops themselves. */
#ifndef JB_DB_CHANGES_H
#define JB_DB_CHANGES_H

#include <libpq-fe.h>

#include "lib/err.h"

/* As JSON text (new): {"jobId", "changes": [{path, opId, sha256Before (hex, null for a new
 * file), sha256After (hex), size (bytes), at (ISO 8601 UTC, when it was written)}]} in op
 * order, every successful write (a file written twice appears twice), at most 10,000.
 * sha256Before is the shim's hash of the file it replaced (the write's result
 * previousSha256), else the hash the buyer approved against (expectSha256).
 * JB_OK, JB_ERR_NOT_FOUND (no session), JB_ERR_FAIL. */
int jb_db_changes_list(PGconn *c, const char *job_id, char **json_out, jb_error *err);

#endif
