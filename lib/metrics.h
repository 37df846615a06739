/* metrics.h — process-local metrics and the Prometheus text exposition format 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/): cumulative histograms
 * with fixed bucket bounds that any thread may observe into, and writers for HELP/TYPE
 * lines, samples and histograms. The /metrics handler (api/rest/metrics.c) puts the page
 * together; cluster-wide figures come from PostgreSQL (db/metrics.h). */
#ifndef JB_METRICS_H
#define JB_METRICS_H

#include <stdatomic.h>
#include <stdio.h>

#define JB_HIST_MAX_BUCKETS 16

/* A histogram of seconds. `bounds` are the upper bounds (le) in ascending order, `n` of
 * them (at most JB_HIST_MAX_BUCKETS); +Inf is implied. Define with JB_HISTOGRAM. */
struct jb_histogram {
  const double *bounds;
  int n;
  atomic_ulong counts[JB_HIST_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last: +Inf */
  atomic_ullong sum_ns; /* sum of observations, ns */
};
#define JB_HISTOGRAM(name, ...)                        \
  static const double name##_bounds[] = {__VA_ARGS__}; \
  struct jb_histogram name = {name##_bounds, sizeof name##_bounds / sizeof(double), {0}, 0}

/* Time of audit appends (db/audit_store.c: jb_audit_append and jb_audit_seal, signing and
 * the database transaction included). */
extern struct jb_histogram jb_metric_audit_append;

/* Audit appends of one session stored together, with one statement and one commit
 * (db/audit_store.c, group commit): batches of two or more, and the entries in them. */
extern atomic_ulong jb_metric_audit_batches, jb_metric_audit_batched;

/* Agent tool calls that reached a worker, by the way they went: relayed to a worker of this
 * process by the socket's service thread (api/socket/socket.c, sandbox/proto/direct.h), or
 * stored as a queued/pending op row (api/core/op_worker.c, op_supervise.c). */
extern atomic_ulong jb_metric_ops_direct, jb_metric_ops_queued;

/* CLOCK_MONOTONIC now, ns. */
long long jb_metrics_now_ns(void);

/* CLOCK_MONOTONIC now, ms: the clock of every timeout and interval in the project. */
long long jb_now_ms(void);

/* Records one observation of `ns` nanoseconds. Thread-safe, lock-free. */
void jb_histogram_observe(struct jb_histogram *h, long long ns);

/* "# HELP name help\n# TYPE name type\n". */
void jb_prom_header(FILE *out, const char *name, const char *type, const char *help);

/* A sample `name{labels} value`. `labels` is NULL or pairs of key, value strings ended by
 * NULL; values are escaped (backslash, double quote, newline). */
void jb_prom_sample(FILE *out, const char *name, double value, ...) __attribute__((sentinel));

/* A whole histogram `name` (HELP/TYPE included) from a jb_histogram. */
void jb_prom_histogram(FILE *out, const char *name, const char *help, struct jb_histogram *h);

/* A whole histogram from figures counted elsewhere: `bucket_counts` cumulative, one per
 * bound plus the +Inf one (== count), `sum` in seconds. */
void jb_prom_histogram_values(FILE *out, const char *name, const char *help, const double *bounds,
                              int n, const long long *bucket_counts, double sum);

#endif
