/* bus.h — the event bus, the one publication path of session events (state changes,
 * approval requests, audit heads …; db/events.h enum jb_event_kind) to the sockets of every
 * instance, and the one place the wire names "jailbox:…" of those events are kept
 * (jb_event_wire_name; api/events.md is the contract).
 *
 * An event is published by the process that committed what it says, after that commit
 * returned — never inside the transaction (db/events.h says why): jailboxd with
 * jb_bus_publish, jailbox-worker (which has no bus) with db/events.h jb_db_notify_event.
 * A cross-instance transport (server/fanout.h: Redis pub/sub) may be set behind
 * jb_bus_publish: the event then goes out on the transport and comes back through
 * jb_bus_deliver on every instance, this one included, so that each instance hands it to the
 * sockets it holds and no socket gets it twice. Without one (no Redis: one instance) it is
 * delivered in this process. Events that arrive over NOTIFY jb_event (the worker's, and
 * jailboxd's own while Redis is down) are delivered by every instance to its own sockets and
 * never republished (api/main.c). */
#ifndef JB_BUS_H
#define JB_BUS_H

#include <jansson.h>

#include "db/events.h"

struct jb_bus;

/* The Socket.IO event name clients get for `kind` ("jailbox:state", "jailbox:mode",
 * "jailbox:op", "jailbox:approval_request", "jailbox:security_alert", "jailbox:pre_scan",
 * "jailbox:audit_head", "jailbox:exec_output", "jailbox:rule", "jailbox:rollback"); NULL when out of range. */
const char *jb_event_wire_name(enum jb_event_kind kind);

/* The event sent besides jailbox:state when a session is aborted, {jobId, reason, actor}. */
#define JB_WIRE_ABORT "jailbox:abort"

/* A subscriber. Runs on the publishing (or delivering) thread; must not block for long.
 * `payload` is borrowed (json_incref it to keep it). */
typedef void (*jb_bus_fn)(void *ctx, const char *job_id, enum jb_event_kind kind, json_t *payload);

/* A transport. Takes (`job_id`, `kind`, `payload` borrowed) out of the process. Returns 0
 * when it took the event (it will reach jb_bus_deliver on every instance, this one
 * included), -1 when it could not (the bus then delivers it in this process only). */
typedef int (*jb_bus_transport_fn)(void *ctx, const char *job_id, enum jb_event_kind kind,
                                   json_t *payload);

/* Returns a new, empty bus (free with jb_bus_free), NULL on OOM. */
struct jb_bus *jb_bus_new(void);
void jb_bus_free(struct jb_bus *bus);

/* Adds a subscriber; at most 16. Returns 0, or -1 when full or on OOM. Thread-safe. */
int jb_bus_subscribe(struct jb_bus *bus, jb_bus_fn fn, void *ctx);

/* Sets the cross-instance transport (`fn` NULL: none; `ctx` is passed to it). Thread-safe:
 * it waits for publishes that are using the previous transport, so its context may be freed
 * once this returns. */
void jb_bus_set_transport(struct jb_bus *bus, jb_bus_transport_fn fn, void *ctx);

/* Publishes an event this process committed (call it after the commit returned): through
 * the transport when one is set and takes it, else straight to this process's subscribers.
 * `payload` is a *stolen* reference (NULL: nothing is published). Thread-safe. */
void jb_bus_publish(struct jb_bus *bus, const char *job_id, enum jb_event_kind kind,
                    json_t *payload);

/* jb_bus_publish of every event of `l`, in order; empties `l`. */
void jb_bus_publish_list(struct jb_bus *bus, const char *job_id, struct jb_event_list *l);

/* Delivers (`job_id`, `kind`, `payload`) to every subscriber of this process, in
 * subscription order, never to the transport: for events that arrive from a transport
 * (Redis, NOTIFY jb_event). `payload` is a *stolen* reference. Thread-safe. */
void jb_bus_deliver(struct jb_bus *bus, const char *job_id, enum jb_event_kind kind,
                    json_t *payload);

#endif
