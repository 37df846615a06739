/* metrics.h — cluster-wide figures for /metrics, read from PostgreSQL at scrape time (every
 * instance sees the same numbers: they describe the cluster, not the instance). The op
 * figures are counters kept by triggers in each op's own transaction (migration 030), read
 * without a scan of ops. */
#ifndef JB_DB_METRICS_H
#define JB_DB_METRICS_H

#include <jansson.h>
#include <libpq-fe.h>

#include "lib/err.h"

/* Bucket upper bounds, seconds, of the two histograms computed here. */
extern const double jb_db_approval_wait_bounds[];
extern const int jb_db_approval_wait_n;
extern const double jb_db_launch_bounds[];
extern const int jb_db_launch_n;

/* Folds the op changes recorded since the last fold into the op counters (migration 030:
 * op_count_changes into op_counts and op_wait_counts), in its own transaction on `c`
 * (which must have none open), committed without waiting for the WAL flush (a fold lost in
 * a crash is lost with the deletion of its changes: the counts stay right). When another
 * connection is folding this one does nothing. *folded (may be NULL): the changes folded.
 * JB_OK, or JB_ERR_FAIL with `err`. */
int jb_db_op_counts_fold(PGconn *c, long long *folded, jb_error *err);

/* Folds (jb_db_op_counts_fold; its failure is ignored), then reads, in one snapshot
 * (REPEATABLE READ, read only). No figure scans ops: the op figures are the counters of
 * migration 030 plus the changes not folded yet.
 *   "sessions": {state: count}                       sessions by state
 *   "ops": [[tool, state, count], …]                  ops by tool and state (the decision)
 *   "approvalWait": {"buckets": [cumulative…, +Inf], "sum": s}   ops a buyer decided:
 *                                                     decided_at − created_at
 *   "launch": {"buckets": […], "sum": s}              finished launch jobs: finished_at − created_at
 *   "launchFailed": n                                 failed launch jobs
 *   "probe": {"recordedAt": epoch s, "walls": {wall: true|false}} or null: the newest wall probe
 *                                                     recorded in a session contract
 * On success *out is a new object. JB_OK, or JB_ERR_FAIL with `err`. */
int jb_db_metrics(PGconn *c, json_t **out, jb_error *err);

#endif
