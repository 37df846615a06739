/* events.c — cross-process session events over NOTIFY jb_event (see events.h). */
#include "db/events.h"

#include <errno.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"
#include "lib/audit.h"

#define MAX_PAYLOAD JB_EVENT_MAX_BYTES

size_t jb_db_event_size(const char *job_id, const char *event, json_t *payload) {
  char *text = jb_event_encode(job_id, event, payload);
  size_t n = text ? strlen(text) : 0;
  free(text);
  return n;
}

char *jb_event_encode(const char *job_id, const char *event, json_t *payload) {
  json_t *pl = payload ? json_incref(payload) : json_object();
  json_t *o = json_pack("{s:s,s:s,s:o}", "job", job_id, "event", event, "payload", pl);
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return text;
}

int jb_db_notify_event(PGconn *c, const char *job_id, const char *event, json_t *payload,
                       jb_error *err) {
  char *text = jb_event_encode(job_id, event, payload);
  if (text && strlen(text) > MAX_PAYLOAD) {
    free(text);
    json_t *cut = json_pack("{s:b}", "truncated", 1);
    text = cut ? jb_event_encode(job_id, event, cut) : NULL;
    json_decref(cut);
  }
  if (!text) return jb_fail(err, ENOMEM, "out of memory");
  const char *p[1] = {text};
  PGresult *r = jb_db_exec(c, "SELECT pg_notify('jb_event', $1)", 1, p, PGRES_TUPLES_OK, NULL, err,
                           "notify event");
  free(text);
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_event_parse(const char *text, json_t **doc, const char **job, const char **event,
                   json_t **payload) {
  json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
  if (!o) return -1;
  json_t *j = json_object_get(o, "job"), *e = json_object_get(o, "event"),
         *p = json_object_get(o, "payload");
  if (!json_is_string(j) || !json_is_string(e) || !json_is_object(p) ||
      strncmp(json_string_value(e), "jailbox:", 8) != 0) {
    json_decref(o);
    return -1;
  }
  *doc = o;
  *job = json_string_value(j);
  *event = json_string_value(e);
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
  int rc = jb_db_notify_event(c, job_id, "jailbox:audit_head", hj, err);
  json_decref(hj);
  return rc;
}
