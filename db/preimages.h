/* preimages.h — SQL of jailbox-worker for pre-images and rollback (migration 044): a session's
 * pre-image budget read under its row lock, an op's rows inserted in its settle transaction
 * (with the bytes they added to sessions.preimage_bytes), the rows a rollback restores, each
 * marked restored, the rollback's audit entry and its job's result, and the blobs' end (the
 * sessions whose pre-images go, sessions.preimages_gone_at). */
#ifndef JB_DB_PREIMAGES_H
#define JB_DB_PREIMAGES_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

#include "lib/audit.h"
#include "lib/err.h"
#include "lib/keyring.h"

/* Session `job_id`'s pre-image bytes so far (sessions.preimage_bytes) into *bytes, in the
 * caller's transaction (which holds the session row lock: jb_db_op_claim). JB_OK,
 * JB_ERR_NOT_FOUND, JB_ERR_FAIL. */
int jb_db_preimage_bytes(PGconn *c, const char *job_id, long long *bytes, jb_error *err);

/* Inserts `rows` (a JSON array of {path, kind, sha256?, mode?, target?, fromPath?, bytes,
 * afterKind?, afterSha256?, afterMode?}, borrowed), in order, for op `op_id` (0: none) or
 * rollback `rollback_id` (0: none) of session `job_id`, and adds the sum of their bytes to
 * sessions.preimage_bytes — in the caller's open transaction (committed with it). JB_OK or
 * JB_ERR_FAIL (the transaction is then aborted). */
int jb_db_preimages_insert(PGconn *c, const char *job_id, long long op_id, long long rollback_id,
                           json_t *rows, jb_error *err);

/* The rows rollback job `rollback_id` of `job_id` to op `to` (< 0: everything) restores:
 * those of ops (not of a rollback) with op_id > to and rolled_back_by NULL — or that job
 * itself (restored by an earlier run of it, killed half-way: `done` true) —, newest first (seq
 * descending), as a JSON array (new) of {seq, opId, path, kind, sha256, mode, target,
 * fromPath, afterKind, afterSha256, afterMode, done} (absent fields null). Also whether the
 * session's pre-images are gone (*gone) and whether its audit chain is sealed or its seal
 * pending (*sealed: an abort after the rollback was queued; nothing could record a restore) —
 * unless that seal waits for this very rollback (a rollback on escape: db/escape_rollback.h);
 * either way no row. NULL with `err` on failure. */
json_t *jb_db_rollback_rows(PGconn *c, const char *job_id, long long to, long long rollback_id,
                            bool *gone, bool *sealed, jb_error *err);

/* Marks row `seq` of `job_id` restored by rollback job `rollback_id` (committed at once: a
 * rollback killed after it does not restore the row again). JB_OK or JB_ERR_FAIL. */
int jb_db_preimage_mark(PGconn *c, const char *job_id, long long seq, long long rollback_id,
                        jb_error *err);

/* Ends rollback job `rollback_id` of `job_id`: appends the audit entry `rollback` with
 * `details` (borrowed; *head the new head, seq 0 when the chain is sealed: an ended session's
 * chain takes no entry — the result then says auditSeq null), stores `result` (borrowed; its
 * auditSeq set here) as the job's result, state done (`ok`) or failed with `error` (unless it
 * is no longer claimed: a rollback on escape whose time ran out was failed by the seal), all
 * in one transaction. JB_OK or JB_ERR_FAIL. */
int jb_db_rollback_finish(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                          long long rollback_id, json_t *details, json_t *result, bool ok,
                          const char *error, struct jb_audit_head *head, jb_error *err);

/* The sessions whose pre-images are due to go, as a JSON array of job ids (new): accepted, or
 * ended (done, aborted, failed) more than `retention_s` seconds ago, with preimages_gone_at
 * NULL and no rollback queued or claimed (it reads them; due again once it ended); at most
 * `max`. NULL with `err`. */
json_t *jb_db_preimages_due(PGconn *c, long retention_s, int max, jb_error *err);

/* Sets sessions.preimages_gone_at = now() for `job_id` (the blobs were dropped). JB_OK or
 * JB_ERR_FAIL. */
int jb_db_preimages_gone(PGconn *c, const char *job_id, jb_error *err);

/* Marks op `op_id` of `job_id` as having changed files with no pre-image kept (ops.changes
 * {"preimagesLost": true}: the shim had run it before a restarted worker could take them), in
 * the caller's open transaction: a rollback past it is refused not_restorable (db/rollback.h).
 * JB_OK or JB_ERR_FAIL. */
int jb_db_preimages_lost(PGconn *c, const char *job_id, long long op_id, jb_error *err);

#endif
