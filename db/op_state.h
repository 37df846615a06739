/* op_state.h — the states of an op (the ops.state column) and their stored names: the
 * vocabulary every file of db/ that reads or writes an op's state shares, below all of them. */
#ifndef JB_DB_OP_STATE_H
#define JB_DB_OP_STATE_H

/* An op's state: the ops.state column (migration 001 CHECK), named by the lower-case names. */
enum jb_op_state {
  JB_OP_UNKNOWN = -1, /* no name, or a name that is none of these */
  JB_OP_PENDING, /* a write of a supervised session, waiting for the buyer */
  JB_OP_APPROVED, /* queued for the worker that holds the session (decision approved or auto) */
  JB_OP_REJECTED, /* the buyer said no */
  JB_OP_DONE, /* ran: its result and audit entry are stored */
  JB_OP_FAILED, /* ran and failed, or ended unrun (session ended, approval timeout) */
  JB_OP_RUNNING, /* an exec whose command runs now (claimed, and marked so in its own commit) */
  JB_OP_STAGED, /* a member of an agent's batch (args.changeset): held until commit_changeset
                 * and the buyer's decision on it; never claimed (migration 047) */
};

/* The column's text of `st` ("pending"; static), or NULL for JB_OP_UNKNOWN and any value
 * outside the enum. */
const char *jb_op_state_name(enum jb_op_state st);

/* The state named `name` (nullable; compared exactly), or JB_OP_UNKNOWN. */
enum jb_op_state jb_op_state_from_name(const char *name);

#endif
