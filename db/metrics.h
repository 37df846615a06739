/* metrics.h — cluster-wide figures for /metrics, read from PostgreSQL at scrape time (every
 * instance sees the same numbers: they describe the cluster, not the instance). */
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

/* Reads, in one snapshot (REPEATABLE READ, read only):
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
