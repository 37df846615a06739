/* events.c — session event kinds, lists, the envelope and NOTIFY jb_event (see events.h). */
#include "db/events.h"

#include <errno.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"
#include "lib/audit.h"

#define MAX_PAYLOAD JB_EVENT_MAX_BYTES

static const char *const kind_keys[JB_EVENT_KINDS] = {
    [JB_EVENT_STATE] = "state",
    [JB_EVENT_MODE] = "mode",
    [JB_EVENT_OP] = "op",
    [JB_EVENT_APPROVAL_REQUEST] = "approval_request",
    [JB_EVENT_SECURITY_ALERT] = "security_alert",
    [JB_EVENT_PRE_SCAN] = "pre_scan",
    [JB_EVENT_AUDIT_HEAD] = "audit_head",
    [JB_EVENT_EXEC_OUTPUT] = "exec_output",
    [JB_EVENT_RULE] = "rule",
    [JB_EVENT_ROLLBACK] = "rollback",
};

const char *jb_event_kind_key(enum jb_event_kind kind) {
  return (unsigned)kind < JB_EVENT_KINDS ? kind_keys[kind] : NULL;
}

int jb_event_kind_parse(const char *key, enum jb_event_kind *out) {
  for (int k = 0; key && k < JB_EVENT_KINDS; k++)
    if (strcmp(key, kind_keys[k]) == 0) {
      *out = (enum jb_event_kind)k;
      return 0;
    }
  return -1;
}

int jb_event_list_add(struct jb_event_list *l, enum jb_event_kind kind, json_t *payload) {
  if (!payload || l->n >= JB_EVENT_LIST_MAX) {
    json_decref(payload);
    return -1;
  }
  l->ev[l->n].kind = kind;
  l->ev[l->n].payload = payload;
  l->n++;
  return 0;
}

void jb_event_list_clear(struct jb_event_list *l) {
  for (size_t i = 0; i < l->n; i++) json_decref(l->ev[i].payload);
  l->n = 0;
}

size_t jb_db_event_size(const char *job_id, enum jb_event_kind kind, json_t *payload) {
  char *text = jb_event_encode(job_id, kind, payload);
  size_t n = text ? strlen(text) : 0;
  free(text);
  return n;
}

char *jb_event_encode(const char *job_id, enum jb_event_kind kind, json_t *payload) {
  const char *key = jb_event_kind_key(kind);
  if (!key) return NULL;
  json_t *pl = payload ? json_incref(payload) : json_object();
  json_t *o = json_pack("{s:s,s:s,s:o}", "job", job_id, "kind", key, "payload", pl);
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return text;
}

int jb_db_notify_event(PGconn *c, const char *job_id, enum jb_event_kind kind, json_t *payload,
                       jb_error *err) {
  /* inside a transaction the event would go out with a commit that may yet roll back, and
   * that commit would wait on the cluster's NOTIFY lock */
  if (PQtransactionStatus(c) != PQTRANS_IDLE)
    return jb_fail(err, EBUSY, "a session event is published after the commit, not inside it");
  char *text = jb_event_encode(job_id, kind, payload);
  if (text && strlen(text) > MAX_PAYLOAD) {
    free(text);
    json_t *cut = json_pack("{s:b}", "truncated", 1);
    text = cut ? jb_event_encode(job_id, kind, cut) : NULL;
    json_decref(cut);
  }
  if (!text) return jb_fail(err, ENOMEM, "out of memory");
  const char *p[1] = {text};
  /* a transaction of its own that changes no data: its commit need not wait for the flush */
  const struct jb_db_step steps[4] = {
      JB_DB_STEP("BEGIN", 0, NULL, PGRES_COMMAND_OK, "begin"),
      JB_DB_STEP("SELECT set_config('synchronous_commit', 'off', true)", 0, NULL, PGRES_TUPLES_OK,
                 "asynchronous commit"),
      JB_DB_STEP("SELECT pg_notify('jb_event', $1)", 1, p, PGRES_TUPLES_OK, "notify event"),
      JB_DB_STEP("COMMIT", 0, NULL, PGRES_COMMAND_OK, "commit")};
  PGresult *r = jb_db_pipeline(c, steps, 4, err);
  free(text);
  if (!r) {
    jb_db_rollback(c);
    return JB_ERR_FAIL;
  }
  PQclear(r);
  return JB_OK;
}

int jb_event_parse(const char *text, json_t **doc, const char **job, enum jb_event_kind *kind,
                   json_t **payload) {
  json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
  if (!o) return -1;
  json_t *j = json_object_get(o, "job"), *p = json_object_get(o, "payload");
  enum jb_event_kind k;
  if (!json_is_string(j) || !json_is_object(p) ||
      jb_event_kind_parse(json_string_value(json_object_get(o, "kind")), &k) < 0) {
    json_decref(o);
    return -1;
  }
  *doc = o;
  *job = json_string_value(j);
  *kind = k;
  *payload = p;
  return 0;
}

int jb_db_announce_audit_head(PGconn *c, const char *job_id, long long after, long long *seq,
                              jb_error *err) {
  *seq = 0;
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(
      c,
      "SELECT h.seq, encode(e.hash, 'hex'), encode(e.signature, 'hex'), e.key_id"
      "  FROM audit_heads h JOIN audit_entries e ON e.job_id = h.job_id AND e.seq = h.seq"
      " WHERE h.job_id = $1",
      1, p, PGRES_TUPLES_OK, NULL, err, "read audit head");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_OK;
  }
  struct jb_audit_head h = {.seq = strtoll(PQgetvalue(r, 0, 0), NULL, 10)};
  size_t hl = 0, sl = 0;
  bool ok = sodium_hex2bin(h.hash, sizeof h.hash, PQgetvalue(r, 0, 1), (size_t)PQgetlength(r, 0, 1),
                           NULL, &hl, NULL) == 0 &&
            hl == sizeof h.hash &&
            sodium_hex2bin(h.signature, sizeof h.signature, PQgetvalue(r, 0, 2),
                           (size_t)PQgetlength(r, 0, 2), NULL, &sl, NULL) == 0 &&
            sl == sizeof h.signature && (size_t)PQgetlength(r, 0, 3) < sizeof h.key_id;
  if (ok) memcpy(h.key_id, PQgetvalue(r, 0, 3), (size_t)PQgetlength(r, 0, 3) + 1);
  PQclear(r);
  /* a row of the wrong shape is tampering, which the verifier reports: nothing to announce */
  if (!ok) return jb_fail(err, EPROTO, "the audit head of %s is malformed", job_id), JB_ERR_FAIL;
  *seq = h.seq;
  if (h.seq <= after) return JB_OK;
  json_t *hj = jb_audit_head_json(&h);
  if (!hj) return jb_fail(err, ENOMEM, "out of memory"), JB_ERR_FAIL;
  int rc = jb_db_notify_event(c, job_id, JB_EVENT_AUDIT_HEAD, hj, err);
  json_decref(hj);
  return rc;
}
