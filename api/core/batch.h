/* batch.h — an agent's batch: the ops it staged under one name (`changeset` argument of write,
 * edit, mkdir, move, delete; api/core/op_stage.c) committed as one changeset for one review
 * (the MCP tool commit_changeset), the rows that changeset shows, and the call's wait for the
 * members to run. The decision on it is api/core/changeset.c's, as for a command's. */
#ifndef JB_API_CORE_BATCH_H
#define JB_API_CORE_BATCH_H

#include <jansson.h>
#include <stdbool.h>

#include "api/core/ops.h"

struct jb_app;
struct jb_progress;

#define JB_BATCH_TOOL "commit_changeset" /* the MCP tool that commits a batch */
#define JB_BATCH_LISTED_MAX 100 /* files an approval request names (then filesTruncated) */

/* Whether `v` is a batch's name: a string of 1 to 64 ASCII letters, digits, '.', '_', '-'. */
bool jb_batch_name_ok(const json_t *v);

/* The changeset rows of a batch's members (`members`, borrowed: [{opId, tool, path, args,
 * diff}] in op_id order, as db/batch.h jb_db_batch_members reads them; args the worker's, with
 * expectSha256 / expectCurrent as the supervise stage set them): new array, in member order, of
 * {path, change, oldType, newType, oldSha256?, newSha256?, size?, diff, approvable, memberOpId}:
 *   write   added (the path was absent when staged) or modified, new type file, newSha256
 *           the SHA-256 of its content, size its bytes;
 *   edit    modified, file to file;
 *   mkdir   added, new type dir;
 *   delete  deleted, new type absent (old type file, dir, link or special);
 *   move    two rows with the same memberOpId: the source deleted, the destination added (or
 *           modified when it replaces a file), its new hash the source's.
 * oldSha256 where the stage read it. diff: the member's stored preview, or null. approvable:
 * true (a member the scanner or a rule refuses is never staged). NULL on allocation failure
 * or a member that is not an object of those tools. */
json_t *jb_batch_rows(const json_t *members);

/* changesetSha256 of rows (borrowed; as jb_batch_rows makes them): lowercase hex SHA-256
 * (65 bytes with the NUL) over one line per row, the compact JSON with sorted keys of {path,
 * change, oldSha256, newSha256, oldMode, newMode, newTarget} (absent: null) followed by "\n" —
 * the digest of a command's changeset (api/audit.md "Changesets"). */
void jb_batch_digest(const json_t *rows, char hex[65]);

/* The MCP tool commit_changeset of session `job`: `args` (borrowed) {changeset: NAME}. The
 * open batch NAME (its staged ops) becomes one op of tool "changeset" with args {batch,
 * members, files, approvable, changesetSha256} and its rows (db/batch.h jb_db_batch_commit):
 * pending and announced (jailbox:approval_request {jobId, opId, tool: "changeset", path: ".",
 * batch, changesetSha256, total, approvableCount, files: [{path, change, approvable}] (the
 * first JB_BATCH_LISTED_MAX), filesTruncated, askedBy: "mode"}) in a supervised session,
 * approved at once (decision auto) otherwise. The call then waits until every member has
 * ended (run, failed, rejected) or the session ended — with `progress` (borrowed; may be off)
 * told what it waits for every interval —, and answers the CallToolResult with
 * structuredContent {changeset: {opId, batch, state: applied|rejected|failed|undecided,
 * applied, rejected, failed, members: [{opId, path, tool, state, error?}]}} (isError false):
 * `failed` when a member failed (a target changed since it was staged fails `changed`),
 * `rejected` when the buyer rejected the changeset. Errors (NULL, *e): invalid arguments, an
 * empty or unknown batch (-32602 bad_request), the session not active or paused (denied),
 * the database (unavailable). */
json_t *jb_batch_commit(struct jb_app *app, const char *job, json_t *args,
                        struct jb_progress *progress, struct jb_mcp_error *e);

#endif
