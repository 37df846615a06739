/* changeset_decide.h — the buyer's side of a changeset (an op of tool 'changeset' and its
 * changeset_files rows, migration 045): the rows a decision is checked against, the decision
 * stored per row with the op's in one transaction (and its audit entry), and a page of the
 * files as GET …/ops/:opId/changeset shows them. The worker's side (the rows' insert, the
 * apply) is db/changesets.h. */
#ifndef JB_DB_CHANGESET_DECIDE_H
#define JB_DB_CHANGESET_DECIDE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/audit.h"
#include "lib/err.h"

struct jb_keyring;

/* One changeset_files row as a decision needs it. */
struct jb_cs_row {
  int idx; /* 0..n-1, the manifest's order */
  char *path; /* owned; relative to the workspace root */
  char change[12]; /* added, modified, deleted, mode, type */
  char old_type[10]; /* file, dir, link, absent, special; "" when null */
  char new_type[10];
  bool approvable;
  long long member; /* a batch's row: the member op that makes it (a move's two rows share
                     * it, and are approved together); 0 for a command's changeset */
};

/* An op and, when it is a changeset, its rows (every one, in idx order). */
struct jb_cs_facts {
  char tool[16]; /* the op's tool */
  char state[20]; /* the op's state */
  char sha256[65]; /* args.changesetSha256 ("" when absent) */
  struct jb_cs_row *rows; /* owned; NULL unless tool is "changeset" */
  size_t n;
};

/* Reads op `op_id` of `job_id` into `out` (zeroed first; release with jb_cs_facts_clear): its
 * tool and state, and for a changeset its digest and rows. JB_OK; JB_ERR_NOT_FOUND (no such
 * op in that session); JB_ERR_FAIL. */
int jb_db_changeset_facts(PGconn *c, const char *job_id, long long op_id, struct jb_cs_facts *out,
                          jb_error *err);

void jb_cs_facts_clear(struct jb_cs_facts *f);

/* The decision on changeset `op_id` (pending, of a live session), in one transaction with
 * the session row locked first: the op approved (when `approve`) or rejected, the decision
 * 'approved' for rows[i] where approved[i] (`rows`, n of them, as jb_db_changeset_facts read
 * them) and 'rejected' for every other row (a rejection: every row), and the
 * decision's audit entry, operation "changeset", path the op's, details {opId, decision,
 * decidedBy (`by`: "buyer" or "service"), ok (approve), reason?, changesetSha256, approved,
 * rejected, approvedSha256 (`approved_sha`, 64 hex)}. The op must still hold `sha256` as its
 * args.changesetSha256. On JB_OK *json_out is the op as JB_DB_OP_JSON text (new) and *head
 * the new chain head. JB_ERR_NOT_FOUND; JB_ERR_CONFLICT (not pending or the session ended:
 * `state`, 20 bytes, gets the op's state, or the session's for a pending op; the chain
 * sealed); JB_ERR_FAIL. */
int jb_db_changeset_decide(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                           long long op_id, bool approve, const struct jb_cs_row *rows,
                           const bool *approved, size_t n, const char *sha256,
                           const char *approved_sha, const char *reason, const char *by,
                           char **json_out, char state[20], struct jb_audit_head *head,
                           jb_error *err);

/* A page of changeset `op_id` of `job_id` as JSON text (new): {opId, execOpId, state,
 * changesetSha256, total, approvable, files: [{idx, path, change, oldType, newType, oldSha256,
 * newSha256, oldMode, newMode, oldTarget, newTarget, size, oldSize, binary, diff, approvable,
 * why, flags, decision, outcome, detail}], next}: the rows with idx > `after` (-1: from the
 * first), at most `limit`; next the last idx listed when more follow, else null. JB_OK;
 * JB_ERR_NOT_FOUND (no such op, or not a changeset); JB_ERR_FAIL. */
int jb_db_changeset_page(PGconn *c, const char *job_id, long long op_id, long long after, int limit,
                         char **json_out, jb_error *err);

#endif
