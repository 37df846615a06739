/* events.h — session events that cross processes through PostgreSQL: a process without the
 * sockets (jailbox-worker) announces an event with NOTIFY on channel jb_event; every
 * jailboxd LISTENs there (db/listen.h) and delivers it on its own bus to the session's
 * sockets. Payload: {"job": id, "event": wire name, "payload": object}, at most 7,900 bytes
 * (PostgreSQL's NOTIFY limit is 8,000). */
#ifndef JB_DB_EVENTS_H
#define JB_DB_EVENTS_H

#include <jansson.h>
#include <libpq-fe.h>

#include "lib/err.h"

/* The envelope {"job","event","payload"} of a session event as compact JSON text — the
 * form both NOTIFY jb_event and the Redis fan-out (server/fanout.h) carry. `payload` is
 * borrowed (NULL: {}). Returns a new string (free it), NULL on OOM. */
char *jb_event_encode(const char *job_id, const char *event, json_t *payload);

#define JB_EVENT_MAX_BYTES 7900 /* bytes of one serialized event at most */

/* The bytes the event (`job_id`, `event`, `payload` borrowed) takes serialized for
 * jb_db_notify_event, to be compared with JB_EVENT_MAX_BYTES; 0 on allocation failure. */
size_t jb_db_event_size(const char *job_id, const char *event, json_t *payload);

/* Announces (`job_id`, `event`, `payload` borrowed) on jb_event. Inside an open transaction
 * it is delivered when that commits (and never if it rolls back). An event too large for one
 * notification is sent with {"truncated": true} as its payload. JB_OK or JB_ERR_FAIL. */
int jb_db_notify_event(PGconn *c, const char *job_id, const char *event, json_t *payload,
                       jb_error *err);

/* Parses an event envelope (a jb_event payload or a Redis fan-out message). Returns 0 with *job (borrowed from *doc), *event (borrowed) and
 * *payload (borrowed) set and *doc a new reference to release, or -1 when malformed. */
int jb_event_parse(const char *text, json_t **doc, const char **job, const char **event,
                   json_t **payload);

/* Announces the newest audit head of session `job_id` as it is committed now —
 * jailbox:audit_head {seq, hash, signature, keyId} (lib/audit.h jb_audit_head_json) — on
 * jb_event, when its seq is over `after`; for heads an op committed without announcing them
 * (the worker's reads, lists and stats handed over directly, sandbox/proto/direct.h). Outside any
 * transaction (`c` idle): the event goes out at once. *seq receives the newest head's seq (0:
 * no entry yet, or no such session); nothing is sent when it is not over `after`. Two
 * statements: a head committed between them is announced by its own writer or by the next
 * call, and may reach a listener before this one (each socket is handed heads in order,
 * server/ws.h jb_ws_broadcast_seq). JB_OK, or JB_ERR_FAIL with `err`. */
int jb_db_announce_audit_head(PGconn *c, const char *job_id, long long after, long long *seq,
                              jb_error *err);

#endif
