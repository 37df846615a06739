/* events.h — session events as the database layer knows them: their kinds (enum
 * jb_event_kind; the wire names "jailbox:…" that clients see live in server/bus.h), a short
 * list for functions that make several in one transaction (struct jb_event_list, handed back
 * to the caller, who publishes it once the transaction has committed), the envelope that
 * carries an event between processes, and NOTIFY jb_event — the transport between a process
 * and every jailboxd instance when Redis cannot carry it (the worker, which has no bus, and
 * jailboxd's bus while Redis is down or not set: server/bus.h, server/fanout.h).
 *
 * One publication path: an event is published after the commit that makes it true, never
 * inside the transaction — so one that rolled back is never published, and no commit waits
 * on PostgreSQL's NOTIFY lock (a NOTIFY inside a transaction makes every notifying commit of
 * the cluster go one at a time, migration 006). jb_db_notify_event refuses to run inside an
 * open transaction. A process that dies between its commit and its publication loses that
 * event; every (re)connecting socket is sent the session's state, pending approvals and
 * audit head from the database (api/socket/socket.c), and audit heads carry a seq a buyer can
 * read the chain up to. NOTIFY jb_op and jb_change (migrations 004, 009) are not session
 * events: they wake waiting calls and workers and drop cached rows, and stay in the
 * transactions whose commits they announce.
 *
 * Envelope: {"job": id, "kind": key (jb_event_kind_key), "payload": object}, at most
 * JB_EVENT_MAX_BYTES serialized (PostgreSQL's NOTIFY limit is 8,000). */
#ifndef JB_DB_EVENTS_H
#define JB_DB_EVENTS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>

#include "lib/err.h"

/* What an event says; api/events.md gives each payload. */
enum jb_event_kind {
  JB_EVENT_STATE, /* the session's state changed */
  JB_EVENT_MODE, /* its mode changed */
  JB_EVENT_OP, /* an op was decided or expired */
  JB_EVENT_APPROVAL_REQUEST, /* a supervised write waits for the buyer */
  JB_EVENT_SECURITY_ALERT, /* an escape signal or a flagged write */
  JB_EVENT_PRE_SCAN, /* the worker's pre-scan of the workspace */
  JB_EVENT_AUDIT_HEAD, /* the chain's new head {seq, hash, signature, keyId} */
  JB_EVENT_EXEC_OUTPUT, /* output of a running exec {opId, stream, data, seq} (buyers only) */
  JB_EVENT_RULE, /* an approval rule was added, revoked or expired */
  JB_EVENT_ROLLBACK, /* a rollback ran {rollbackId, state, restored, conflicts} */
  JB_EVENT_KINDS /* how many kinds there are */
};

/* The envelope's key of `kind` ("state", "mode", "op", "approval_request",
 * "security_alert", "pre_scan", "audit_head", "exec_output", "rule",
 * "rollback"); NULL when out of range. */
const char *jb_event_kind_key(enum jb_event_kind kind);

/* The kind whose key is `key`: 0 with *out, or -1 when `key` (may be NULL) is none. */
int jb_event_kind_parse(const char *key, enum jb_event_kind *out);

#define JB_EVENT_LIST_MAX 24 /* events one transaction makes at most */

/* Events made by one transaction, in order, each payload owned by the list. */
struct jb_event_list {
  size_t n;
  struct {
    enum jb_event_kind kind;
    json_t *payload;
  } ev[JB_EVENT_LIST_MAX];
};

/* Appends (`kind`, `payload` stolen) to `l`. Returns 0, or -1 (payload NULL: out of memory,
 * or the list is full; the payload is released). */
int jb_event_list_add(struct jb_event_list *l, enum jb_event_kind kind, json_t *payload);

/* Releases every payload of `l` and empties it. */
void jb_event_list_clear(struct jb_event_list *l);

/* The envelope of (`job_id`, `kind`, `payload` borrowed, NULL: {}) as compact JSON text — the
 * form both NOTIFY jb_event and the Redis fan-out (server/fanout.h) carry. Returns a new
 * string (free it), NULL on OOM or a kind out of range. */
char *jb_event_encode(const char *job_id, enum jb_event_kind kind, json_t *payload);

#define JB_EVENT_MAX_BYTES 7900 /* bytes of one serialized event at most */

/* The bytes the event (`job_id`, `kind`, `payload` borrowed) takes serialized, to be compared
 * with JB_EVENT_MAX_BYTES; 0 on allocation failure. */
size_t jb_db_event_size(const char *job_id, enum jb_event_kind kind, json_t *payload);

/* Announces (`job_id`, `kind`, `payload` borrowed) on jb_event, after the commit that made it
 * true: `c` must be idle (not in a transaction; JB_ERR_FAIL with EBUSY otherwise, nothing
 * sent). The notification is a transaction of its own, committed without waiting for the WAL
 * flush (it changes no data; a crash loses at most the notification). An event too large for
 * one notification is sent with {"truncated": true} as its payload. JB_OK or JB_ERR_FAIL. */
int jb_db_notify_event(PGconn *c, const char *job_id, enum jb_event_kind kind, json_t *payload,
                       jb_error *err);

/* Parses an event envelope (a jb_event payload or a Redis fan-out message): a JSON object
 * without duplicate keys, "job" a string, "kind" a known key, "payload" an object. Returns 0
 * with *job (borrowed from *doc), *kind and *payload (borrowed) set and *doc a new reference
 * to release, or -1 when malformed. */
int jb_event_parse(const char *text, json_t **doc, const char **job, enum jb_event_kind *kind,
                   json_t **payload);

/* Announces the newest audit head of session `job_id` as it is committed now — the
 * JB_EVENT_AUDIT_HEAD payload {seq, hash, signature, keyId} (lib/audit.h jb_audit_head_json)
 * — on jb_event, when its seq is over `after`; for heads an op committed without announcing
 * them (the worker's reads, lists and stats handed over directly, sandbox/proto/direct.h).
 * `c` must be idle: the event goes out at once. *seq receives the newest head's seq (0:
 * no entry yet, or no such session); nothing is sent when it is not over `after`. Two
 * statements: a head committed between them is announced by its own writer or by the next
 * call, and may reach a listener before this one (each socket is handed heads in order,
 * server/ws.h jb_ws_broadcast_seq). JB_OK, or JB_ERR_FAIL with `err`. */
int jb_db_announce_audit_head(PGconn *c, const char *job_id, long long after, long long *seq,
                              jb_error *err);

#endif
