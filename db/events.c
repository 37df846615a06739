/* events.c — cross-process session events over NOTIFY jb_event (see events.h). */
#include "db/events.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "db/db.h"

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

int jb_db_notify_event(PGconn *c, const char *job_id, const char *event, json_t *payload, jb_error *err) {
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

int jb_event_parse(const char *text, json_t **doc, const char **job, const char **event, json_t **payload) {
  json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
  if (!o) return -1;
  json_t *j = json_object_get(o, "job"), *e = json_object_get(o, "event"), *p = json_object_get(o, "payload");
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
