/* escape.c — SQL of escape aborts, security alerts and the end-of-session sweeps (see
 * escape.h). Lock order as every chain writer: the session row first. */
#include "db/escape.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/audit_store.h"
#include "db/db.h"
#include "db/escape_rollback.h"
#include "db/events.h"
#include "db/ops.h"
#include "db/sessions.h"

/* Copies at most `max` bytes of `in` into `out` (max + 1 bytes), cut at a UTF-8 character
 * boundary; bytes that are not UTF-8, and control characters, become '?'. */
static void clip_utf8(const char *in, char *out, size_t max) {
  size_t o = 0;
  const unsigned char *p = (const unsigned char *)(in ? in : "");
  while (*p && o < max) {
    size_t n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
    bool ok = n > 0;
    for (size_t k = 1; ok && k < n; k++) ok = (p[k] & 0xC0) == 0x80;
    if (!ok || (n == 1 && (*p < 0x20 || *p == 0x7f))) {
      out[o++] = '?';
      p++;
      continue;
    }
    if (o + n > max) break;
    memcpy(out + o, p, n);
    o += n;
    p += n;
  }
  out[o] = '\0';
}

static long long col_ll(PGresult *r, int row, int col) {
  return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* Inserts the alert row and the agent's history entry; returns the alert id or -1. */
static long long record_alert(PGconn *c, const char *job_id, const char *kind, bool escape,
                              const char *detail, long long seq, long penalty, jb_error *err) {
  char sq[24], pen[24];
  snprintf(sq, sizeof sq, "%lld", seq);
  snprintf(pen, sizeof pen, "%ld", penalty);
  const char *p[6] = {job_id, kind, escape ? "true" : "false", detail, sq, pen};
  PGresult *r =
      jb_db_exec(c,
                 "WITH a AS (INSERT INTO security_alerts (job_id, kind, escape, detail, seq)"
                 "   VALUES ($1, $2, $3::boolean, $4, $5::bigint) RETURNING id),"
                 " s AS (SELECT agent_id FROM sessions WHERE job_id = $1),"
                 " t AS (UPDATE agents g SET trust_score = greatest(0, g.trust_score - $6::int),"
                 "   updated_at = now() FROM s WHERE g.agent_id = s.agent_id AND $6::int > 0"
                 "   RETURNING g.trust_score),"
                 " h AS (INSERT INTO agent_events (agent_id, job_id, kind, score_delta, detail)"
                 "   SELECT s.agent_id, $1, CASE WHEN $3::boolean THEN 'escape_detected' ELSE "
                 "'security_alert' END,"
                 "     -$6::int, jsonb_build_object('kind', $2::text, 'detail', $4::text, 'seq', "
                 "$5::bigint) FROM s)"
                 " SELECT (SELECT id FROM a), (SELECT trust_score FROM t)",
                 6, p, PGRES_TUPLES_OK, NULL, err, "record security alert");
  if (!r) return -1;
  long long id = col_ll(r, 0, 0);
  PQclear(r);
  return id;
}

int jb_db_escape_abort(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                       const char *kind, const char *detail, long penalty,
                       struct jb_escape_out *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  char d[JB_ALERT_DETAIL_MAX + 1];
  clip_utf8(detail, d, JB_ALERT_DETAIL_MAX);
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(
      c,
      "WITH old AS (SELECT state FROM sessions WHERE job_id = $1 FOR UPDATE)"
      " UPDATE sessions s SET state = 'aborted', state_reason = 'escape_detected',"
      "   updated_at = now(), ended_at = now()"
      " FROM old WHERE s.job_id = $1 AND old.state IN ('created', 'prescanning', 'awaiting_agent',"
      "   'active', 'paused', 'done') RETURNING old.state",
      1, p, PGRES_TUPLES_OK, NULL, err, "escape abort");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    int rc = jb_db_session_state(c, job_id, out->previous, err);
    return rc == JB_OK ? JB_ERR_CONFLICT : rc;
  }
  snprintf(out->previous, sizeof out->previous, "%s", PQgetvalue(r, 0, 0));
  PQclear(r);
  r = jb_db_exec(c,
                 "UPDATE tokens SET revoked_at = now()"
                 " WHERE job_id = $1 AND role <> 'buyer' AND revoked_at IS NULL",
                 1, p, PGRES_COMMAND_OK, NULL, err, "revoke agent tokens");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  r = jb_db_exec(c,
                 "WITH t AS (INSERT INTO launch_jobs (job_id, kind) VALUES ($1, 'teardown'))"
                 " INSERT INTO seals_pending (job_id) VALUES ($1) ON CONFLICT DO NOTHING",
                 1, p, PGRES_COMMAND_OK, NULL, err, "queue teardown");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  json_t *det =
      json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "from", out->previous, "to", "aborted", "actor",
                "system", "reason", "escape_detected", "kind", kind, "detail", d);
  struct jb_audit_head h;
  int arc = det ? jb_audit_append(c, keys, job_id, "abort", NULL, det, &h, err)
                : jb_fail(err, ENOMEM, "out of memory");
  json_decref(det);
  if (arc != JB_OK) return JB_ERR_FAIL;
  out->seq = (long long)h.seq;
  out->alert_id = record_alert(c, job_id, kind, true, d, out->seq, penalty, err);
  if (out->alert_id < 0) return JB_ERR_FAIL;
  r = jb_db_exec(
      c, "SELECT a.trust_score FROM agents a JOIN sessions s USING (agent_id) WHERE s.job_id = $1",
      1, p, PGRES_TUPLES_OK, NULL, err, "read trust score");
  if (!r) return JB_ERR_FAIL;
  out->trust_score = PQntuples(r) == 1 ? (long)col_ll(r, 0, 0) : 0;
  PQclear(r);
  if (jb_tx_commit(&tx, err) < 0) return JB_ERR_FAIL;
  return JB_OK;
}

int jb_db_session_finish(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                         const char *previous, struct jb_finish_out *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT s.state, s.state_reason, EXISTS (SELECT 1 FROM audit_heads h"
                           "   JOIN audit_entries a ON a.job_id = h.job_id AND a.seq = h.seq"
                           "  WHERE h.job_id = s.job_id AND a.operation = 'seal')"
                           " FROM sessions s WHERE s.job_id = $1 FOR UPDATE",
                           1, p, PGRES_TUPLES_OK, NULL, err, "lock session");
  if (!r) goto clear_events;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  char state[20], reason[200];
  snprintf(state, sizeof state, "%s", PQgetvalue(r, 0, 0));
  snprintf(reason, sizeof reason, "%s", PQgetvalue(r, 0, 1));
  bool has_reason = !PQgetisnull(r, 0, 1);
  bool sealed = strcmp(PQgetvalue(r, 0, 2), "t") == 0;
  PQclear(r);
  if (jb_state_is_live(state)) return JB_ERR_CONFLICT;
  /* a rollback on escape goes first: its entry belongs in the chain the seal closes */
  int gate = sealed ? 0 : jb_db_escape_rollback_gate(c, keys, job_id, err);
  if (gate < 0) goto clear_events;
  if (gate == 1) {
    out->rollback_pending = true;
    return jb_tx_commit(&tx, err) < 0 ? JB_ERR_FAIL : JB_OK;
  }
  /* only a chain an escape left to be sealed is ever sealed here */
  r = jb_db_exec(c, "DELETE FROM seals_pending WHERE job_id = $1", 1, p, PGRES_COMMAND_OK, NULL,
                 err, "take pending seal");
  if (!r) goto clear_events;
  bool pending = strcmp(PQcmdTuples(r), "1") == 0;
  PQclear(r);
  if (sealed || !pending) {
    if (jb_tx_commit(&tx, err) < 0) goto clear_events;
    return JB_OK;
  }
  if (jb_db_session_end_ops(c, keys, job_id, state, has_reason ? reason : NULL, &out->rejected_ops,
                            &out->failed_ops, err) != JB_OK)
    goto clear_events;
  if (jb_audit_seal(c, keys, job_id, &out->head, err) != JB_OK) goto clear_events;
  out->sealed_now = true;
  /* handed back in this order, for the caller to publish once this has committed */
  struct jb_event_list *evs = &out->events;
  int erc = jb_event_list_add(
      evs, JB_EVENT_STATE,
      json_pack("{s:s,s:s,s:s?,s:s?,s:s,s:I,s:I}", "jobId", job_id, "state", state, "previous",
                previous, "reason", has_reason ? reason : NULL, "actor", "system", "rejectedOps",
                (json_int_t)out->rejected_ops, "failedOps", (json_int_t)out->failed_ops));
  r = jb_db_exec(c,
                 "SELECT kind, detail, seq FROM security_alerts WHERE job_id = $1 AND escape"
                 " ORDER BY id LIMIT 20",
                 1, p, PGRES_TUPLES_OK, NULL, err, "read escape alerts");
  if (!r) goto clear_events;
  for (int i = 0; erc == 0 && i < PQntuples(r); i++)
    erc = jb_event_list_add(
        evs, JB_EVENT_SECURITY_ALERT,
        json_pack("{s:s,s:s,s:s,s:I,s:b}", "jobId", job_id, "kind", PQgetvalue(r, i, 0), "detail",
                  PQgetvalue(r, i, 1), "seq", (json_int_t)col_ll(r, i, 2), "escape", 1));
  PQclear(r);
  if (erc == 0) erc = jb_event_list_add(evs, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&out->head));
  if (erc != 0) {
    jb_fail(err, ENOMEM, "out of memory");
    goto clear_events;
  }
  if (jb_tx_commit(&tx, err) < 0) goto clear_events;
  return JB_OK;
clear_events: /* none is published: nothing was committed (rolled back by tx) */
  jb_event_list_clear(&out->events);
  return JB_ERR_FAIL;
}

int jb_db_signal_count(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                       const char *kind, const char *detail, long every, struct jb_count_out *out,
                       jb_error *err) {
  memset(out, 0, sizeof *out);
  char d[JB_ALERT_DETAIL_MAX + 1];
  clip_utf8(detail, d, JB_ALERT_DETAIL_MAX);
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  const char *p[2] = {job_id, kind};
  PGresult *r = jb_db_exec(c, "SELECT state FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p,
                           PGRES_TUPLES_OK, NULL, err, "lock session");
  if (!r) goto clear_events;
  int rows = PQntuples(r);
  bool live = rows == 1 && jb_state_is_live(PQgetvalue(r, 0, 0));
  PQclear(r);
  if (!live) return rows == 1 ? JB_ERR_CONFLICT : JB_ERR_NOT_FOUND;
  r = jb_db_exec(c,
                 "INSERT INTO signal_counts (job_id, kind, count) VALUES ($1, $2, 1)"
                 " ON CONFLICT (job_id, kind) DO UPDATE SET count = signal_counts.count + 1"
                 " RETURNING count",
                 2, p, PGRES_TUPLES_OK, NULL, err, "count signal");
  if (!r) goto clear_events;
  out->count = col_ll(r, 0, 0);
  PQclear(r);
  if (every > 0 && out->count % every == 0) {
    json_t *det =
        json_pack("{s:s,s:s,s:I}", "kind", kind, "detail", d, "count", (json_int_t)out->count);
    struct jb_audit_head h;
    int arc = det ? jb_audit_append(c, keys, job_id, "security_alert", NULL, det, &h, err)
                  : jb_fail(err, ENOMEM, "out of memory");
    json_decref(det);
    if (arc != JB_OK) goto clear_events;
    out->seq = (long long)h.seq;
    out->alerted = true;
    if (record_alert(c, job_id, kind, false, d, out->seq, 0, err) < 0) goto clear_events;
    if (jb_event_list_add(&out->events, JB_EVENT_SECURITY_ALERT,
                          json_pack("{s:s,s:s,s:s,s:I,s:b,s:I}", "jobId", job_id, "kind", kind,
                                    "detail", d, "seq", (json_int_t)out->seq, "escape", 0, "count",
                                    (json_int_t)out->count)) != 0 ||
        jb_event_list_add(&out->events, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&h)) != 0) {
      jb_fail(err, ENOMEM, "out of memory");
      goto clear_events;
    }
  }
  if (jb_tx_commit(&tx, err) < 0) goto clear_events;
  return JB_OK;
clear_events: /* none is published: nothing was committed (rolled back by tx) */
  jb_event_list_clear(&out->events);
  return JB_ERR_FAIL;
}

/* Column 0 of row 0 as a new string. */
static char *first_text(PGresult *r) {
  return strndup(PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0));
}

int jb_db_alerts_list(PGconn *c, const char *job_id, char **json_out, jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(
      c,
      "SELECT json_build_object('jobId', s.job_id, 'alerts', coalesce((SELECT json_agg("
      "   json_build_object('id', a.id, 'kind', a.kind, 'escape', a.escape, 'detail', a.detail,"
      "   'seq', a.seq, 'at', jb_ts(a.created_at)) ORDER BY a.id)"
      "   FROM (SELECT * FROM security_alerts WHERE job_id = s.job_id ORDER BY id LIMIT 1000) a),"
      "   '[]'::json))::text FROM sessions s WHERE s.job_id = $1",
      1, p, PGRES_TUPLES_OK, NULL, err, "list alerts");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_ERR_NOT_FOUND;
  if (PQntuples(r) == 1) {
    *json_out = first_text(r);
    rc = *json_out ? JB_OK : jb_fail(err, ENOMEM, "out of memory");
  }
  PQclear(r);
  return rc;
}

int jb_db_sessions_expired(PGconn *c, long lifetime_s, long idle_s, char **json_out,
                           jb_error *err) {
  char l[24], i[24];
  snprintf(l, sizeof l, "%ld", lifetime_s);
  snprintf(i, sizeof i, "%ld", idle_s);
  char g[24];
  snprintf(g, sizeof g, "%d", 2 * JB_OP_RUNNING_GRACE_S);
  const char *p[3] = {l, i, g};
  /* A running op stops counting as activity once it is overdue by twice the grace its
   * worker has to reap it (db/ops.h): a lost outcome does not keep the session forever.
   * The last activity is the newest audit entry (two primary-key probes), not the newest op:
   * that was a max() over every op row of every live session, twice a second — 12 ms of
   * server time at 30,000 ops in one session, and growing with it. An op ends in an entry
   * (done, failed, rejected, expired; a refusal has an entry and no op row); until it ends it
   * is pending or queued, which the NOT EXISTS counts as activity. */
  PGresult *r = jb_db_exec(
      c,
      "WITH live AS (SELECT s.job_id, s.state, s.created_at, s.updated_at, s.lease_until,"
      "   make_interval(secs => coalesce((s.limits->>'timeoutSec')::bigint, $1::bigint)) AS life,"
      "   make_interval(secs => coalesce((s.limits->>'idleTimeoutSec')::bigint, $2::bigint)) AS "
      "idle"
      "   FROM sessions s WHERE s.state IN ('created', 'prescanning', 'awaiting_agent', 'active',"
      "   'paused', 'done')),"
      " due AS (SELECT l.job_id, CASE WHEN now() >= l.created_at + l.life THEN 'lifetime_exceeded'"
      "   WHEN l.state IN ('awaiting_agent', 'active')"
      "    AND NOT EXISTS (SELECT 1 FROM ops o WHERE o.job_id = l.job_id AND (o.state IN "
      "('pending', 'approved') OR (o.state = 'running' AND NOT " JB_DB_OP_OVERDUE("o", "$3::bigint")
      ")))"
      "    AND now() >= greatest(l.updated_at, (SELECT e.created_at FROM audit_heads h"
      "      JOIN audit_entries e ON e.job_id = h.job_id AND e.seq = h.seq WHERE h.job_id = "
      "l.job_id))"
      "      + l.idle THEN 'idle_timeout'"
      "   WHEN l.lease_until IS NOT NULL AND now() >= l.lease_until THEN 'worker_unavailable'"
      "   END AS reason"
      "   FROM live l)"
      " SELECT coalesce(json_agg(json_build_object('jobId', job_id, 'reason', reason)), '[]')::text"
      " FROM (SELECT * FROM due WHERE reason IS NOT NULL LIMIT 100) d",
      3, p, PGRES_TUPLES_OK, NULL, err, "find expired sessions");
  if (!r) return JB_ERR_FAIL;
  *json_out = first_text(r);
  PQclear(r);
  return *json_out ? JB_OK : jb_fail(err, ENOMEM, "out of memory");
}

int jb_db_sessions_unsealed(PGconn *c, long grace_s, long window_s, char **json_out,
                            jb_error *err) {
  char g[24], w[24];
  snprintf(g, sizeof g, "%ld", grace_s);
  snprintf(w, sizeof w, "%ld", window_s);
  const char *p[2] = {g, w};
  PGresult *r = jb_db_exec(
      c,
      "SELECT coalesce(json_agg(job_id), '[]')::text FROM (SELECT job_id FROM seals_pending p"
      " WHERE since <= now() - make_interval(secs => $1::bigint)"
      "   AND ($2::bigint = 0 OR since > now() - make_interval(secs => $2::bigint))"
      /* not while the rollback on escape it waits for runs, within its time */
      "   AND NOT (p.rollback_until > now() AND EXISTS (SELECT 1 FROM launch_jobs l"
      "    WHERE l.id = p.rollback_id AND l.state IN ('queued', 'claimed')))"
      " ORDER BY since LIMIT 100) u",
      2, p, PGRES_TUPLES_OK, NULL, err, "find unsealed sessions");
  if (!r) return JB_ERR_FAIL;
  *json_out = first_text(r);
  PQclear(r);
  return *json_out ? JB_OK : jb_fail(err, ENOMEM, "out of memory");
}

int jb_db_kill_notice(PGconn *c, const char *job_id, jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c, "SELECT pg_notify('jb_kill', $1)", 1, p, PGRES_TUPLES_OK, NULL, err,
                           "kill notice");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_db_teardown_pending(PGconn *c, const char *job_id, jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT EXISTS (SELECT 1 FROM launch_jobs WHERE job_id = $1"
                           " AND kind = 'teardown' AND state IN ('queued', 'claimed'))",
                           1, p, PGRES_TUPLES_OK, NULL, err, "read teardown");
  if (!r) return -1;
  int v = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
  PQclear(r);
  return v;
}
