/* changeset.h — a supervised writable command's effects held for the buyer (sandbox/WALLS.md,
 * "Changesets"; migration 045). The command runs on an overlay of the workspace; when it ends
 * the worker reads what the overlay's upper holds (the spawner's cs_manifest and cs_read),
 * compares each path with the workspace on the host, keeps both sides' contents in the
 * session's blob store (preimage_store.h), diffs text files (lib/diff.h), runs the content
 * scanner and the landing rules on every path, and stores one pending op of tool `changeset`
 * with a row per path (db/changesets.h). Once the buyer approved some or all of its rows, the
 * worker applies them on the host (changeset_apply.c). */
#ifndef JB_SANDBOX_CHANGESET_H
#define JB_SANDBOX_CHANGESET_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

#include "db/ops.h"
#include "lib/err.h"
#include "sandbox/worker/exec.h"

struct jb_worker;
struct jb_session;

#define JB_CS_FILES_MAX 10000 /* paths a changeset holds at most (the manifest's bound too) */
#define JB_CS_DIFF_SIDE_MAX (1024 * 1024) /* bytes of a side a diff is made of at most */
#define JB_CS_DIFF_TEXT_MAX (64 * 1024) /* bytes of a file's diff text kept at most */
#define JB_CS_SCAN_MAX (8 * 1024 * 1024) /* bytes of a file the scanner reads; larger: refused */
#define JB_CS_LISTED 100 /* files named in the approval request */

/* What the build of one command's changeset collects. */
struct jb_cs_build {
  struct jb_worker *w;
  struct jb_session *s;
  const char *job;
  long long exec_op_id;
  bool built; /* the upper was read */
  json_t *rows; /* new: the rows in path order (db/changesets.h's shape) */
  long long bytes; /* bytes of new blobs the contents added to the store */
  char code[24]; /* when not built: too_large, bad_name, preimage_budget, internal */
  char why[300];
};

/* The on_overlay callback of jb_exec_request (ctx: a struct jb_cs_build): reads the upper's
 * manifest and contents and builds b->rows, or sets b->code and b->why. */
void changeset_on_overlay(void *ctx, struct jb_exec_overlay *ov, const json_t *result);

/* Stores the changeset `b` built for exec op `exec_op_id` (path `path`) as a pending op
 * (db/changesets.h) and announces it to the buyer (jailbox:approval_request, with `argv`
 * borrowed); returns the exec result's `changeset` member (new): {opId, state "pending",
 * files, approvable, changesetSha256}, {state "empty", files 0} when the command changed
 * nothing, or {state "refused", code, error} when it could not be built or stored. */
json_t *changeset_store(struct jb_cs_build *b, const char *path, const json_t *argv);

/* Frees what `b` holds. */
void changeset_build_free(struct jb_cs_build *b);

/* Applies claimed changeset op `op` of `job` (its transaction open on `c`, holding the session
 * row): each approved row, parents before children and deletions deepest first, checked
 * against the path as it was when the command ran (a path changed since is a conflict, left
 * alone) and written atomically beneath the workspace root (rollback_restore.h); the pre-image
 * of each applied row kept for rollback within JAILBOX_PREIMAGE_MAX_BYTES (over it nothing is
 * applied: preimage_budget); the outcomes, the op's result {applied, conflicts, failed,
 * rejected, treeBefore, treeAfter} and its audit entry committed together. JB_OK or
 * JB_ERR_FAIL / JB_ERR_CONFLICT as jb_db_op_complete. */
int changeset_apply_run(struct jb_worker *w, PGconn *c, const char *job, struct jb_op_claim *op,
                        jb_error *err);

#endif
