/* metrics.c — cluster-wide figures for /metrics (see metrics.h). */
#include "db/metrics.h"

#include <errno.h>
#include <string.h>
#include <stdlib.h>

#include "db/db.h"
#include "lib/json.h"

const double jb_db_approval_wait_bounds[] = {0.1, 0.5, 1, 2.5, 5, 15, 30, 60, 300, 900, 3600};
const int jb_db_approval_wait_n = sizeof jb_db_approval_wait_bounds / sizeof(double);
const double jb_db_launch_bounds[] = {0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120};
const int jb_db_launch_n = sizeof jb_db_launch_bounds / sizeof(double);

/* Cumulative bucket counts of `t` (seconds) against $1 (the bounds as float8[]), as a JSON
 * array ending with the total, and the sum. The bounds are a parameter so that the SQL and
 * the C table cannot drift apart. */
#define HIST_SQL(source)                                                     \
  "SELECT coalesce((SELECT json_agg(n ORDER BY i) FROM ("                    \
  "  SELECT i, (SELECT count(*) FROM s WHERE s.t <= b.b) AS n"               \
  "  FROM unnest($1::float8[]) WITH ORDINALITY AS b(b, i)) q), '[]')::text," \
  " (SELECT count(*) FROM s), (SELECT coalesce(sum(t), 0) FROM s)"

static const char SQL_LAUNCH[] =
    "WITH s AS (SELECT extract(epoch FROM finished_at - created_at)::float8 AS t FROM launch_jobs"
    " WHERE kind = 'launch' AND state = 'done' AND finished_at IS NOT NULL) " HIST_SQL(s);

static char *bounds_text(const double *b, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_real(b[i]));
  char *t = json_dumps(a, JSON_COMPACT | JSON_REAL_PRECISION(10));
  json_decref(a);
  if (!t) return NULL;
  /* a JSON array [..] as a PostgreSQL array literal {..} */
  t[0] = '{';
  t[strlen(t) - 1] = '}';
  return t;
}

static json_t *histogram(PGconn *c, const char *sql, const double *bounds, int n, jb_error *err) {
  char *bt = bounds_text(bounds, n);
  if (!bt) {
    jb_fail(err, ENOMEM, "out of memory");
    return NULL;
  }
  const char *p[1] = {bt};
  PGresult *r = jb_db_exec(c, sql, 1, p, PGRES_TUPLES_OK, NULL, err, "metrics histogram");
  free(bt);
  if (!r) return NULL;
  json_t *buckets = json_loads(PQgetvalue(r, 0, 0), 0, NULL);
  if (buckets) json_array_append_new(buckets, json_integer(strtoll(PQgetvalue(r, 0, 1), NULL, 10)));
  json_t *o =
      buckets ? json_pack("{s:o,s:f}", "buckets", buckets, "sum", strtod(PQgetvalue(r, 0, 2), NULL))
              : NULL;
  PQclear(r);
  if (!o) jb_fail(err, ENOMEM, "out of memory");
  return o;
}

/* The approval wait histogram from op_wait_counts and the changes not folded yet, checked
 * against the bounds the counters were made with (jb_approval_wait_bounds(), migration 030). */
static json_t *approval_wait(PGconn *c, jb_error *err) {
  char *bt = bounds_text(jb_db_approval_wait_bounds, jb_db_approval_wait_n);
  if (!bt) {
    jb_fail(err, ENOMEM, "out of memory");
    return NULL;
  }
  const char *p[1] = {bt};
  PGresult *r = jb_db_exec(
      c,
      "WITH b AS (SELECT bucket, n, sum_s FROM op_wait_counts"
      "   UNION ALL SELECT jb_approval_wait_bucket(wait_s), 1, wait_s FROM op_count_changes"
      "   WHERE wait_s IS NOT NULL),"
      " k AS (SELECT i::int AS i FROM generate_series(1, cardinality($1::float8[]) + 1) i)"
      " SELECT (SELECT json_agg((SELECT coalesce(sum(n), 0) FROM b WHERE b.bucket <= k.i)"
      "   ORDER BY k.i) FROM k)::text, (SELECT coalesce(sum(sum_s), 0) FROM b),"
      "  jb_approval_wait_bounds() = $1::float8[]",
      1, p, PGRES_TUPLES_OK, NULL, err, "metrics: approval wait");
  free(bt);
  if (!r) return NULL;
  if (strcmp(PQgetvalue(r, 0, 2), "t") != 0) {
    PQclear(r);
    jb_fail(err, EINVAL,
            "metrics: the approval wait bounds of the database (jb_approval_wait_bounds()) are "
            "not those of this build");
    return NULL;
  }
  json_t *buckets = json_loads(PQgetvalue(r, 0, 0), 0, NULL);
  json_t *o =
      buckets ? json_pack("{s:o,s:f}", "buckets", buckets, "sum", strtod(PQgetvalue(r, 0, 1), NULL))
              : NULL;
  PQclear(r);
  if (!o) jb_fail(err, ENOMEM, "out of memory");
  return o;
}

int jb_db_op_counts_fold(PGconn *c, long long *folded, jb_error *err) {
  PGresult *r = jb_db_exec(c,
                           "SELECT jb_op_counts_fold()"
                           " WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL",
                           0, NULL, PGRES_TUPLES_OK, NULL, err, "fold op counts");
  if (!r) return JB_ERR_FAIL;
  if (folded) *folded = PQntuples(r) == 1 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
  PQclear(r);
  return JB_OK;
}

int jb_db_metrics(PGconn *c, json_t **out, jb_error *err) {
  /* folding is an optimisation of the next read: a failure here still lets the read go on */
  jb_error ferr = {0};
  (void)jb_db_op_counts_fold(c, NULL, &ferr);
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin_as(&tx, c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "metrics", err) < 0)
    return JB_ERR_FAIL;
  cleanup_json json_t *o = json_object();
  json_t *sessions = json_object(), *ops = json_array();
  json_object_set_new(o, "sessions", sessions);
  json_object_set_new(o, "ops", ops);
  PGresult *r = jb_db_exec(c, "SELECT state, count(*) FROM sessions GROUP BY state", 0, NULL,
                           PGRES_TUPLES_OK, NULL, err, "metrics: sessions");
  if (!r) return JB_ERR_FAIL;
  for (int i = 0; i < PQntuples(r); i++)
    json_object_set_new(sessions, PQgetvalue(r, i, 0),
                        json_integer(strtoll(PQgetvalue(r, i, 1), NULL, 10)));
  PQclear(r);
  /* the counters (migration 030) plus the changes not folded into them yet */
  r = jb_db_exec(c,
                 "SELECT tool, state, sum(n) FROM (SELECT tool, state, n FROM op_counts"
                 "  UNION ALL SELECT tool, to_state, 1 FROM op_count_changes"
                 "   WHERE to_state IS NOT NULL"
                 "  UNION ALL SELECT tool, from_state, -1 FROM op_count_changes"
                 "   WHERE from_state IS NOT NULL) x"
                 " GROUP BY tool, state HAVING sum(n) <> 0 ORDER BY 1, 2",
                 0, NULL, PGRES_TUPLES_OK, NULL, err, "metrics: ops");
  if (!r) return JB_ERR_FAIL;
  for (int i = 0; i < PQntuples(r); i++)
    json_array_append_new(ops, json_pack("[s,s,I]", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
                                         (json_int_t)strtoll(PQgetvalue(r, i, 2), NULL, 10)));
  PQclear(r);
  json_t *h = approval_wait(c, err);
  if (!h) return JB_ERR_FAIL;
  json_object_set_new(o, "approvalWait", h);
  h = histogram(c, SQL_LAUNCH, jb_db_launch_bounds, jb_db_launch_n, err);
  if (!h) return JB_ERR_FAIL;
  json_object_set_new(o, "launch", h);
  r = jb_db_exec(c, "SELECT count(*) FROM launch_jobs WHERE kind = 'launch' AND state = 'failed'",
                 0, NULL, PGRES_TUPLES_OK, NULL, err, "metrics: launch failures");
  if (!r) return JB_ERR_FAIL;
  json_object_set_new(o, "launchFailed", json_integer(strtoll(PQgetvalue(r, 0, 0), NULL, 10)));
  PQclear(r);
  r = jb_db_exec(c,
                 "SELECT (walls->'probe'->'walls')::text, extract(epoch FROM updated_at)::float8"
                 " FROM sessions WHERE jsonb_typeof(walls->'probe'->'walls') = 'object'"
                 " ORDER BY updated_at DESC LIMIT 1",
                 0, NULL, PGRES_TUPLES_OK, NULL, err, "metrics: wall probe");
  if (!r) return JB_ERR_FAIL;
  json_t *probe = json_null();
  if (PQntuples(r) == 1) {
    json_t *walls = json_loads(PQgetvalue(r, 0, 0), 0, NULL), *up = json_object();
    const char *k;
    json_t *v;
    json_object_foreach (walls, k, v)
      json_object_set_new(up, k, json_boolean(json_is_true(json_object_get(v, "up"))));
    json_decref(walls);
    json_decref(probe);
    probe = json_pack("{s:f,s:o}", "recordedAt", strtod(PQgetvalue(r, 0, 1), NULL), "walls", up);
  }
  PQclear(r);
  json_object_set_new(o, "probe", probe ? probe : json_null());
  if (jb_tx_commit(&tx, err) < 0) return JB_ERR_FAIL;
  *out = jb_steal_pointer(&o);
  return JB_OK;
}
