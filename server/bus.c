/* bus.c — in-process event bus with an optional cross-instance transport, and the wire names
 * of session events (see bus.h). */
#include "server/bus.h"

#include <pthread.h>
#include <stdlib.h>

#define MAX_SUBS 16

static const char *const wire_names[JB_EVENT_KINDS] = {
    [JB_EVENT_STATE] = "jailbox:state",
    [JB_EVENT_MODE] = "jailbox:mode",
    [JB_EVENT_OP] = "jailbox:op",
    [JB_EVENT_APPROVAL_REQUEST] = "jailbox:approval_request",
    [JB_EVENT_SECURITY_ALERT] = "jailbox:security_alert",
    [JB_EVENT_PRE_SCAN] = "jailbox:pre_scan",
    [JB_EVENT_AUDIT_HEAD] = "jailbox:audit_head",
    [JB_EVENT_EXEC_OUTPUT] = "jailbox:exec_output",
    [JB_EVENT_RULE] = "jailbox:rule",
    [JB_EVENT_ROLLBACK] = "jailbox:rollback",
};

const char *jb_event_wire_name(enum jb_event_kind kind) {
  return (unsigned)kind < JB_EVENT_KINDS ? wire_names[kind] : NULL;
}

struct jb_bus {
  pthread_rwlock_t lock;
  int n;
  struct {
    jb_bus_fn fn;
    void *ctx;
  } subs[MAX_SUBS];
  jb_bus_transport_fn transport;
  void *transport_ctx;
};

struct jb_bus *jb_bus_new(void) {
  struct jb_bus *b = calloc(1, sizeof *b);
  if (b) pthread_rwlock_init(&b->lock, NULL);
  return b;
}

void jb_bus_free(struct jb_bus *bus) {
  if (!bus) return;
  pthread_rwlock_destroy(&bus->lock);
  free(bus);
}

int jb_bus_subscribe(struct jb_bus *bus, jb_bus_fn fn, void *ctx) {
  pthread_rwlock_wrlock(&bus->lock);
  int rc = -1;
  if (bus->n < MAX_SUBS) {
    bus->subs[bus->n].fn = fn;
    bus->subs[bus->n].ctx = ctx;
    bus->n++;
    rc = 0;
  }
  pthread_rwlock_unlock(&bus->lock);
  return rc;
}

void jb_bus_set_transport(struct jb_bus *bus, jb_bus_transport_fn fn, void *ctx) {
  pthread_rwlock_wrlock(&bus->lock);
  bus->transport = fn;
  bus->transport_ctx = ctx;
  pthread_rwlock_unlock(&bus->lock);
}

void jb_bus_deliver(struct jb_bus *bus, const char *job_id, enum jb_event_kind kind,
                    json_t *payload) {
  if (bus && payload) {
    pthread_rwlock_rdlock(&bus->lock);
    for (int i = 0; i < bus->n; i++) bus->subs[i].fn(bus->subs[i].ctx, job_id, kind, payload);
    pthread_rwlock_unlock(&bus->lock);
  }
  json_decref(payload);
}

void jb_bus_publish(struct jb_bus *bus, const char *job_id, enum jb_event_kind kind,
                    json_t *payload) {
  if (!bus || !payload) {
    json_decref(payload);
    return;
  }
  /* the read lock is held through the transport call so that jb_bus_set_transport (write
   * lock) cannot free the transport's context under it */
  pthread_rwlock_rdlock(&bus->lock);
  int taken = bus->transport ? bus->transport(bus->transport_ctx, job_id, kind, payload) : -1;
  pthread_rwlock_unlock(&bus->lock);
  if (taken == 0)
    json_decref(payload);
  else
    jb_bus_deliver(bus, job_id, kind, payload);
}

void jb_bus_publish_list(struct jb_bus *bus, const char *job_id, struct jb_event_list *l) {
  for (size_t i = 0; i < l->n; i++) jb_bus_publish(bus, job_id, l->ev[i].kind, l->ev[i].payload);
  l->n = 0;
}
