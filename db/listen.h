/* listen.h — a thread holding one PostgreSQL connection in LISTEN jb_change, jb_event, jb_op
 * and jb_key, handing every notification (channel, payload) to a callback: on jb_change the payload
 * is a job id ("" for service tokens), on jb_event an event (db/events.h), on jb_op an op's
 * progress (db/ops.h, migration 009), on jb_key the id of a key a rotation published
 * (db/audit_store.h jb_audit_key_rotate). It reconnects
 * by itself; the `up` callback says when it is listening (true) and when it lost the
 * connection (false), so that whatever relies on it can stop trusting its caches. */
#ifndef JB_LISTEN_H
#define JB_LISTEN_H

#include <stdbool.h>

#include "lib/err.h"

struct jb_listener;

typedef void (*jb_listen_fn)(void *ctx, const char *channel, const char *payload);
typedef void (*jb_listen_up_fn)(void *ctx, bool up);

/* Starts the thread on `conninfo` (libpq URL or key=value), channels jb_change, jb_event, jb_op, jb_key. Returns 0
 * and *out, or -1 with `err` (the thread could not be created; a database that cannot be
 * reached is retried, not an error). */
int jb_listener_start(struct jb_listener **out, const char *conninfo, jb_listen_fn on_notify,
                      jb_listen_up_fn on_up, void *ctx, jb_error *err);

/* Stops the thread, closes its connection and frees `l`. NULL allowed. */
void jb_listener_stop(struct jb_listener *l);

#endif
