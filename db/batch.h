/* batch.h — SQL of an agent's batch (migration 047): a write, edit, mkdir, move or delete
 * held 'staged' under a name (args.changeset), the staged ops of an open batch read, and the
 * batch committed as one op of tool 'changeset' with a changeset_files row per path. The
 * buyer's decision on it is db/changeset_decide.h's. */
#ifndef JB_DB_BATCH_H
#define JB_DB_BATCH_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "lib/err.h"

/* A staged op to store. */
struct jb_db_stage {
  const char *tool, *path; /* path: the op's (a move's source) */
  const char *dest; /* a move's destination, else NULL */
  const char *name; /* the batch's name (also in args.changeset) */
  const char *args_json; /* the worker's arguments, args.changeset among them */
  const char *diff_json; /* the diff preview shown in the batch's rows, or NULL */
  const char *expect_json; /* {mode, exclude, flagged} decided on, or NULL (as
                            * db/ops.h jb_db_op_create_decided) */
};

/* Stores op `s` of session `job_id` as 'staged', in one transaction holding the session row:
 * only while the session is active or paused, and only when no staged op of the open batch
 * `s->name` (staged, not committed: parent_op_id null) names `s->path` or `s->dest` (as its
 * path or a move's destination). JB_OK with *op_id; JB_ERR_EXISTS with *first the op that
 * names the path already; JB_ERR_CONFLICT with `state` the session's state (empty: the
 * settings are not `expect_json`); JB_ERR_NOT_FOUND no session; JB_ERR_FAIL (`err`). */
int jb_db_op_stage(PGconn *c, const char *job_id, const struct jb_db_stage *s, long long *op_id,
                   long long *first, char state[20], jb_error *err);

/* The staged ops of open batch `name` of session `job_id` in op_id order, as a JSON array
 * text (new) of {opId, tool, path, args, diff}. JB_OK (an empty batch: "[]") or JB_ERR_FAIL. */
int jb_db_batch_members(PGconn *c, const char *job_id, const char *name, char **json_out,
                        jb_error *err);

/* Commits open batch `name` of session `job_id`: one op of tool 'changeset' (path ".", args
 * `args_json`), one changeset_files row per member of `rows_json` (a JSON array of rows as
 * db/changesets.h takes them, with "memberOpId"), each member's parent_op_id set to the new
 * op; `members` the members' op ids as a PostgreSQL bigint[] literal in op_id order ("{4,7}"),
 * which must still be the batch's staged ops. `approve`: the op stored done at once (decision
 * 'auto', result {ok, result:{approved, rejected:0}}), every row and member approved (the
 * worker then runs the members); else the op pending for the buyer. One transaction holding
 * the session row. JB_OK with *op_id and *op_json (new: the op as db/op_decide.h JB_DB_OP_JSON);
 * JB_ERR_CONFLICT with `state` the session's state when it is not active or paused, or empty
 * when the batch's members changed meanwhile (read them again); JB_ERR_FAIL. */
int jb_db_batch_commit(PGconn *c, const char *job_id, const char *name, const char *members,
                       const char *args_json, const char *rows_json, bool approve, long long *op_id,
                       char **op_json, char state[20], jb_error *err);

/* The outcome of committed batch `op_id`: a JSON text (new) {state (the changeset op's),
 * session (the session's state), members: [{opId, path, tool, state, error?}] in op_id
 * order}, and *finished whether every member has ended (done, failed, rejected) or the
 * changeset op is rejected or failed. JB_OK, JB_ERR_NOT_FOUND, JB_ERR_FAIL. */
int jb_db_batch_outcome(PGconn *c, const char *job_id, long long op_id, char **json_out,
                        bool *finished, jb_error *err);

#endif
