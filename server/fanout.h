/* fanout.h — cross-instance session events over Redis pub/sub (hiredis): the transport
 * behind the event bus (server/bus.h) when JAILBOX_REDIS_URL is set.
 *
 * An event published on any instance goes out as PUBLISH on the session's channel
 * "jailbox:session:<jobId>" carrying the envelope of db/events.h ({"job","kind","payload"});
 * every instance holds one PSUBSCRIBE "jailbox:session:*" connection and hands what arrives
 * to its own bus with jb_bus_deliver, so the instance that holds a socket delivers to it and
 * no socket gets an event twice. The publishing instance gets its own events back the same
 * way (one path for every socket). Events the worker publishes (NOTIFY jb_event after its
 * commits) do not come here: every instance LISTENs and delivers those to its own sockets
 * only.
 *
 * Failure: a PUBLISH that fails, or any publish while this instance's own subscription is
 * down, is refused (-1) and the bus falls back (main.c: NOTIFY jb_event outside any
 * transaction, which every instance also delivers exactly once). Both connections reconnect by themselves with backoff
 * (100 ms doubling to 2 s); the subscription is checked with a PING every second and
 * redone when no answer comes within 2 s; each time it is made, `on_subscribed` runs (main.c
 * resends every socket of the instance its state and pending approvals, which covers what
 * other instances published on Redis before this one was subscribed again). Nothing here is
 * a source of truth: sessions, ops and decisions are in PostgreSQL, and a (re)connecting
 * socket is sent the current state and pending approvals from there (api/socket/socket.c).
 * Delivery is at most once per socket except in one case: a PUBLISH whose reply is lost
 * after Redis took it is carried again by the fallback (at least once, then).
 *
 * Redis protocol: RESP2 (https://redis.io/docs/reference/protocol-spec/), PUBLISH /
 * PSUBSCRIBE / PING / AUTH. */
#ifndef JB_FANOUT_H
#define JB_FANOUT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/bus.h"
#include "lib/err.h"

struct jb_fanout;

/* Where Redis is: TCP host and port, or a Unix socket path; optional AUTH credentials. */
struct jb_redis_addr {
  char host[256]; /* "" for a Unix socket */
  int port; /* 6379 by default */
  char path[108]; /* Unix socket path, "" for TCP */
  char user[128]; /* ACL user for AUTH, "" for none (password alone: AUTH <password>) */
  char password[256]; /* "" for no AUTH */
};

/* Parses `url`: redis://[[user]:password@]host[:port][/db] (host may be [v6]), or
 * unix://[[user]:password@]/path/to/redis.sock. The last '@' ends the credentials. Percent-escapes are not decoded; the /db part is accepted and
 * ignored (pub/sub channels are global to a Redis server). Returns 0, or -1 with `err`
 * naming what is wrong. */
int jb_redis_url_parse(const char *url, struct jb_redis_addr *out, jb_error *err);

/* Starts the fan-out for `bus` to the Redis at `url`: parses the URL (errors come back
 * here), starts the subscriber thread (which connects in the background: Redis need not be
 * up yet) and installs the transport on `bus`. While Redis refuses an event it goes to
 * `fallback` (same contract as a transport: 0 means every instance will deliver it; NULL:
 * this process only). `on_subscribed` (may be NULL) runs on the subscriber thread each time
 * the subscription is (re)made — events published while it was down may have been missed by
 * this instance's sockets, so it is the moment to resend them the state. Both get `ctx`.
 * On success *out is the fan-out (jb_fanout_stop). Returns 0, or -1 with `err` set. */
int jb_fanout_start(struct jb_fanout **out, const char *url, struct jb_bus *bus,
                    jb_bus_transport_fn fallback, void (*on_subscribed)(void *ctx), void *ctx,
                    jb_error *err);

/* Checks one message received on Redis: `channel` must be "jailbox:session:<jobId>" and
 * `msg` (`len` bytes, untrusted: whoever can publish on the Redis server can send it) an
 * envelope of db/events.h for that same job: at most 4 MiB, no NUL byte, JSON nested at most
 * JB_JSON_MAX_DEPTH deep, no duplicate key, a known kind, an object payload. Returns 0 with
 * *doc a new reference to release, *job and *payload borrowed from it and *kind, or -1
 * (nothing to release). */
int jb_fanout_accept(const char *channel, const char *msg, size_t len, json_t **doc,
                     const char **job, enum jb_event_kind *kind, json_t **payload);

/* True while this instance's subscription is live (events published now reach its sockets
 * through Redis). Thread-safe. */
bool jb_fanout_up(const struct jb_fanout *f);

/* Counters since start, for /metrics: events published on Redis, events received from it,
 * publishes refused (Redis down or failing: the fallback carried them), subscription
 * (re)connections. Any pointer may be NULL. Thread-safe. */
void jb_fanout_counts(const struct jb_fanout *f, long *published, long *received, long *refused,
                      long *connects);

/* Largest array reply taken from Redis: a pmessage has 4 elements and no reply we ask for
 * nests arrays. */
#define JB_REDIS_MAX_ELEMENTS 8

struct redisReader;

/* Limits what hiredis' reply reader `r` allocates for bytes from Redis (which whoever can
 * reach the Redis server controls): an array header stating more than JB_REDIS_MAX_ELEMENTS
 * elements, or an array inside another array, makes the reader fail with a protocol error
 * before anything is allocated for it. hiredis 0.14 (Debian 12) has no such limit of its own:
 * it callocs whatever count the header states (RESP2 allows 2^31 - 1), 8 bytes an element.
 * Call it once, right after the reader is made, before anything is fed. Thread-safe. */
void jb_redis_reader_limit(struct redisReader *r);

/* Removes the transport from the bus, stops the thread, closes both connections and frees
 * `f`. NULL is allowed. */
void jb_fanout_stop(struct jb_fanout *f);

#endif
