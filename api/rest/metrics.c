/* metrics.c — GET /metrics: the Prometheus text exposition (format 0.0.4) of this instance
 * and of the cluster. Readers: a service-role bearer token (the platform's, or one given to
 * Prometheus with `authorization: credentials_file`); anything else gets the usual 401/403.
 * The page is not public: the load balancer does not route /metrics (deploy/nginx), and a
 * scrape goes to each instance directly.
 *
 * Instance series (this process): open sockets by role, audit append time, Redis fan-out
 * state and counters, HTTP draining. Cluster series (PostgreSQL, the same on every instance;
 * aggregate them with max(), not sum()): sessions by state, ops by tool and state (the
 * decision), approval wait and launch time histograms, the newest wall probe. The op series
 * are counters kept in each op's own transaction (migration 030), not a count of ops at
 * each scrape. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/auth.h"
#include "api/rest/handlers.h"
#include "db/metrics.h"
#include "server/fanout.h"
#include "lib/log.h"
#include "lib/metrics.h"

static void cluster(FILE *out, json_t *m) {
  static const char *const states[] = {"created", "prescanning", "awaiting_agent", "active",
                                       "paused",  "done",        "accepted",       "aborted",
                                       "failed",  NULL};
  json_t *sessions = json_object_get(m, "sessions");
  jb_prom_header(out, "jailbox_sessions", "gauge",
                 "Sessions by state (cluster-wide, from PostgreSQL).");
  for (int i = 0; states[i]; i++)
    jb_prom_sample(out, "jailbox_sessions",
                   (double)json_integer_value(json_object_get(sessions, states[i])), "state",
                   states[i], NULL);

  jb_prom_header(out, "jailbox_ops", "gauge",
                 "Ops by tool and state: pending, approved, running, rejected (the buyer's "
                 "decision), done, failed (cluster-wide; a gauge of ops now in each state, kept "
                 "by the op's own transaction in PostgreSQL, exact at the scrape's snapshot).");
  size_t i;
  json_t *row;
  json_array_foreach (json_object_get(m, "ops"), i, row)
    jb_prom_sample(out, "jailbox_ops", (double)json_integer_value(json_array_get(row, 2)), "tool",
                   json_string_value(json_array_get(row, 0)), "state",
                   json_string_value(json_array_get(row, 1)), NULL);

  struct {
    const char *key, *name, *help;
    const double *bounds;
    int n;
  } hists[] = {
      {"approvalWait", "jailbox_approval_wait_seconds",
       "From an op's creation to its decision (the buyer's, a rule's, the timeout's, or the "
       "mode's at once), for every decided op (cluster-wide; counted when the op is decided).",
       jb_db_approval_wait_bounds, jb_db_approval_wait_n},
      {"launch", "jailbox_launch_seconds",
       "From a launch job's creation to its end (walls up, shim ready) for finished launches "
       "(cluster-wide).",
       jb_db_launch_bounds, jb_db_launch_n},
  };
  for (size_t h = 0; h < sizeof hists / sizeof hists[0]; h++) {
    json_t *o = json_object_get(m, hists[h].key), *b = json_object_get(o, "buckets");
    long long cum[32] = {0};
    for (int k = 0; k <= hists[h].n && k < 32; k++)
      cum[k] = json_integer_value(json_array_get(b, (size_t)k));
    jb_prom_histogram_values(out, hists[h].name, hists[h].help, hists[h].bounds, hists[h].n, cum,
                             json_real_value(json_object_get(o, "sum")));
  }
  jb_prom_header(out, "jailbox_launch_failures", "gauge",
                 "Launch jobs that failed (cluster-wide).");
  jb_prom_sample(out, "jailbox_launch_failures",
                 (double)json_integer_value(json_object_get(m, "launchFailed")), NULL);

  json_t *probe = json_object_get(m, "probe");
  jb_prom_header(
      out, "jailbox_wall_probe_up", "gauge",
      "The newest wall probe recorded in a session contract: 1 when the wall came up, 0 when not.");
  const char *wall;
  json_t *up;
  json_object_foreach (json_object_get(probe, "walls"), wall, up)
    jb_prom_sample(out, "jailbox_wall_probe_up", json_is_true(up) ? 1 : 0, "wall", wall, NULL);
  jb_prom_header(out, "jailbox_wall_probe_recorded_timestamp_seconds", "gauge",
                 "When the session holding that probe was last updated, Unix time.");
  if (json_is_object(probe))
    jb_prom_sample(out, "jailbox_wall_probe_recorded_timestamp_seconds",
                   json_real_value(json_object_get(probe, "recordedAt")), NULL);
}

static void instance(FILE *out, struct jb_app *app) {
  long buyers = jb_app_ws_count_role(app, JB_ROLE_BUYER);
  long agents = jb_app_ws_count_role(app, JB_ROLE_AGENT);
  jb_prom_header(out, "jailbox_sockets", "gauge",
                 "Connected Socket.IO clients of this instance by role.");
  jb_prom_sample(out, "jailbox_sockets", (double)buyers, "role", "buyer", NULL);
  jb_prom_sample(out, "jailbox_sockets", (double)agents, "role", "agent", NULL);
  jb_prom_histogram(
      out, "jailbox_audit_append_seconds",
      "Time of one audit append (signing and its database transaction) on this instance.",
      &jb_metric_audit_append);
  jb_prom_header(
      out, "jailbox_audit_append_batches_total", "counter",
      "Group commits on this instance: concurrent audit appends of one session stored with one"
      " statement and one commit (batches of two or more).");
  jb_prom_sample(out, "jailbox_audit_append_batches_total",
                 (double)atomic_load(&jb_metric_audit_batches), NULL);
  jb_prom_header(out, "jailbox_audit_append_batched_entries_total", "counter",
                 "Audit entries stored in those batches.");
  jb_prom_sample(out, "jailbox_audit_append_batched_entries_total",
                 (double)atomic_load(&jb_metric_audit_batched), NULL);
  jb_prom_header(
      out, "jailbox_ops_handled_total", "counter",
      "Agent tool calls this instance sent to a worker: path=direct (handed to a worker of this"
      " instance on its ops socket) or path=queued (stored as an op row for the worker holding the "
      "session).");
  jb_prom_sample(out, "jailbox_ops_handled_total", (double)atomic_load(&jb_metric_ops_direct),
                 "path", "direct", NULL);
  jb_prom_sample(out, "jailbox_ops_handled_total", (double)atomic_load(&jb_metric_ops_queued),
                 "path", "queued", NULL);
  jb_prom_header(out, "jailbox_draining", "gauge", "1 after SIGTERM while this instance drains.");
  jb_prom_sample(out, "jailbox_draining", atomic_load(&app->draining) ? 1 : 0, NULL);
  jb_prom_header(out, "jailbox_redis_configured", "gauge", "1 when JAILBOX_REDIS_URL is set.");
  jb_prom_sample(out, "jailbox_redis_configured", app->fanout ? 1 : 0, NULL);
  jb_prom_header(
      out, "jailbox_redis_up", "gauge",
      "1 while this instance's Redis subscription is live (events cross instances over Redis).");
  jb_prom_sample(out, "jailbox_redis_up", jb_fanout_up(app->fanout) ? 1 : 0, NULL);
  long pub, rec, ref, con;
  jb_fanout_counts(app->fanout, &pub, &rec, &ref, &con);
  jb_prom_header(out, "jailbox_redis_published_total", "counter",
                 "Events this instance published on Redis.");
  jb_prom_sample(out, "jailbox_redis_published_total", (double)pub, NULL);
  jb_prom_header(out, "jailbox_redis_received_total", "counter",
                 "Events this instance received from Redis.");
  jb_prom_sample(out, "jailbox_redis_received_total", (double)rec, NULL);
  jb_prom_header(
      out, "jailbox_redis_refused_total", "counter",
      "Events Redis could not carry (down or failing); they went over PostgreSQL NOTIFY instead.");
  jb_prom_sample(out, "jailbox_redis_refused_total", (double)ref, NULL);
  jb_prom_header(out, "jailbox_redis_subscriptions_total", "counter",
                 "Redis subscriptions made (1 + reconnections).");
  jb_prom_sample(out, "jailbox_redis_subscriptions_total", (double)con, NULL);
}

void jb_api_metrics(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  struct jb_principal who;
  PGconn *c = jb_rest_authed_conn(app, req, NULL, JB_ROLE_SERVICE, &who, resp);
  if (!c) return;
  jb_error err = {0};
  json_t *m = NULL;
  int rc = jb_db_metrics(c, &m, &err);
  jb_db_release(app->db, c);
  if (rc != JB_OK && err.code == EINVAL) { /* the schema's counters do not match this build */
    jb_log(JB_LOG_ERROR, "metrics", "detail", err.msg, NULL);
    jb_resp_error(resp, 500, "internal", "%s", err.msg);
    return;
  }
  if (rc != JB_OK) {
    jb_db_unavailable(resp, &err);
    return;
  }
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  if (!out) {
    json_decref(m);
    jb_resp_error(resp, 500, "internal", "out of memory");
    return;
  }
  instance(out, app);
  cluster(out, m);
  json_decref(m);
  if (fclose(out) != 0 || !text) {
    free(text);
    jb_resp_error(resp, 500, "internal", "out of memory");
    return;
  }
  resp->status = 200;
  resp->body = text;
  resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}
