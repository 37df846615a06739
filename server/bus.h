/* bus.h — the event bus: session events (state changes, approval requests, audit heads …)
 * published by whoever causes them and delivered to every subscriber in this process.
 * The cross-instance transport (Redis) plugs in behind the same two calls later. */
#ifndef JB_BUS_H
#define JB_BUS_H

#include <jansson.h>

struct jb_bus;

/* A subscriber. Runs on the publishing thread; must not block for long. `payload` is
 * borrowed (json_incref it to keep it). `event` is the wire name, e.g. "jailbox:state". */
typedef void (*jb_bus_fn)(void *ctx, const char *job_id, const char *event, json_t *payload);

/* Returns a new, empty bus (free with jb_bus_free), NULL on OOM. */
struct jb_bus *jb_bus_new(void);
void jb_bus_free(struct jb_bus *bus);

/* Adds a subscriber; at most 16. Returns 0, or -1 when full or on OOM. Thread-safe. */
int jb_bus_subscribe(struct jb_bus *bus, jb_bus_fn fn, void *ctx);

/* Delivers (`job_id`, `event`, `payload`) to every subscriber, in subscription order.
 * `payload` is a *stolen* reference. Thread-safe. */
void jb_bus_publish(struct jb_bus *bus, const char *job_id, const char *event, json_t *payload);

#endif
