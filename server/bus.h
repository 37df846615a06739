/* bus.h — the event bus: session events (state changes, approval requests, audit heads …)
 * published by whoever causes them and delivered to every subscriber in this process.
 * A cross-instance transport (server/fanout.h: Redis pub/sub) may be set behind
 * jb_bus_publish: the event then goes out on the transport and comes back through
 * jb_bus_deliver on every instance, this one included, so that each instance hands it to the
 * sockets it holds and no socket gets it twice. */
#ifndef JB_BUS_H
#define JB_BUS_H

#include <jansson.h>

struct jb_bus;

/* A subscriber. Runs on the publishing thread; must not block for long. `payload` is
 * borrowed (json_incref it to keep it). `event` is the wire name, e.g. "jailbox:state". */
typedef void (*jb_bus_fn)(void *ctx, const char *job_id, const char *event, json_t *payload);

/* A transport. Takes (`job_id`, `event`, `payload` borrowed) out of the process. Returns 0
 * when it took the event (it will reach jb_bus_deliver on every instance, this one
 * included), -1 when it could not (the bus then delivers it in this process only). */
typedef int (*jb_bus_transport_fn)(void *ctx, const char *job_id, const char *event,
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

/* Publishes an event caused in this process: through the transport when one is set and
 * takes it, else straight to this process's subscribers.
 * `payload` is a *stolen* reference. Thread-safe. */
void jb_bus_publish(struct jb_bus *bus, const char *job_id, const char *event, json_t *payload);

/* Delivers (`job_id`, `event`, `payload`) to every subscriber of this process, in
 * subscription order, never to the transport: for events that arrive from a transport
 * (Redis, NOTIFY jb_event). `payload` is a *stolen* reference. Thread-safe. */
void jb_bus_deliver(struct jb_bus *bus, const char *job_id, const char *event, json_t *payload);

#endif
