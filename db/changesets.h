/* changesets.h — SQL of jailbox-worker for changesets (migration 045): the changeset op a
 * command run on an overlay leaves for the buyer, with one changeset_files row per path; the
 * approved rows read back for applying; each row's outcome. */
#ifndef JB_DB_CHANGESETS_H
#define JB_DB_CHANGESETS_H

#include <jansson.h>
#include <libpq-fe.h>

#include "lib/err.h"

/* Inserts, in one transaction of its own, op `tool='changeset'` of session `job_id`, state
 * pending, parent_op_id `exec_op_id`, `path`, args `args` (borrowed: {execOpId,
 * changesetSha256, files, approvable, bytes}) and its rows `rows` (borrowed; a JSON array in
 * idx order of {path, change, oldType, newType, oldSha256, newSha256, oldMode, newMode,
 * oldTarget, newTarget, size, oldSize, binary, diff, approvable, why, flags}) — only while the
 * session is active or paused; args.bytes (the new contents' blobs) is added to the session's
 * pre-image bytes (sessions.preimage_bytes: JAILBOX_PREIMAGE_MAX_BYTES bounds both). JB_OK with *op_id; JB_ERR_CONFLICT (the session ended);
 * JB_ERR_FAIL. */
int jb_db_changeset_insert(PGconn *c, const char *job_id, long long exec_op_id, const char *path,
                           json_t *args, json_t *rows, long long *op_id, jb_error *err);

/* The rows of changeset op `op_id` of `job_id` the buyer approved, in idx order, as a JSON
 * array (new) of {idx, path, change, oldType, newType, oldSha256, newSha256, oldMode, newMode,
 * oldTarget, newTarget, size, oldBytes}, and the number of rows not approved into *rejected —
 * in the caller's transaction. NULL with `err`. */
json_t *jb_db_changeset_approved(PGconn *c, const char *job_id, long long op_id,
                                 long long *rejected, jb_error *err);

/* Stores `outcomes` (borrowed; [{idx, outcome: applied|conflict|failed, detail?}]) on the
 * rows of changeset op `op_id`, in the caller's open transaction. JB_OK or JB_ERR_FAIL (the
 * transaction is then aborted). */
int jb_db_changeset_outcomes(PGconn *c, long long op_id, json_t *outcomes, jb_error *err);

#endif
