/* app.h — the state a jailboxd process shares with its request handlers. Nothing here is
 * state another instance needs: sessions, ops, chains and jobs live in PostgreSQL. */
#ifndef JB_APP_H
#define JB_APP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "db/db.h"
#include "db/signer.h"
#include "server/bus.h"
#include "server/config.h"

struct jb_cache; /* session read cache (server/cache.h) */
struct jb_opwait; /* waiting op calls (server/opwait.h) */
struct jb_ws; /* the WebSocket endpoint (server/ws.h) */
struct jb_fanout; /* Redis fan-out of events (server/fanout.h) */
struct jb_workers; /* this process's jailbox-workers (server/workers.h) */

/* Draining: calls still waiting on their ops are answered, and statements still running in
 * the database are cancelled, this long (ms) before the shutdown grace runs out, so that the
 * answers reach the sockets before they close. */
#define JB_DRAIN_ANSWER_MS 1000

struct jb_app {
  const struct jb_config *cfg; /* borrowed, lives as long as the process */
  struct jb_db *db; /* connection pool */
  struct jb_bus *bus; /* session events */
  struct jb_cache *cache; /* read cache of GET /v1/jailbox/:jobId (server/cache.h); may be NULL */
  struct jb_signer *signer; /* the audit signing key (jb_signer_key: the one that signs now) */
  struct jb_opwait *opwait; /* agent calls waiting on their op (server/opwait.h); may be NULL */
  atomic_bool draining; /* set on SIGTERM: /readyz answers 503 */
  _Atomic long long
      drain_deadline_ms; /* CLOCK_MONOTONIC ms by which calls in flight must end; 0: none */
  _Atomic int http_port; /* the bound HTTP port (the console's origin); 0 until bound */
  struct jb_fanout *fanout; /* for /metrics; NULL without JAILBOX_REDIS_URL */
  struct jb_ws *ws; /* the WebSocket endpoint; NULL until started (read it through the
                       functions below) */
  struct jb_workers *workers; /* for direct op hand-over (sandbox/proto/direct.h); NULL until
                                   started, or with JAILBOX_WORKERS=0; read with __atomic_load_n */
};

/* The WebSocket endpoint of this process (server/ws.h) as every door sees it: set by whoever
 * starts it (`ws`), and NULL again before it stops (then waits for the calls below that are
 * using it). Any thread. */
void jb_app_set_ws(struct jb_app *app, struct jb_ws *ws);

/* Runs fn(arg, true) once on one of the endpoint's handler threads (server/ws.h jb_ws_run),
 * for a door's work that may block for long. Returns 0, or -1 when it cannot be queued (no
 * endpoint, full, stopping): fn is not called. A call still queued when the endpoint stops
 * gets fn(arg, false): free `arg`, do nothing else. */
int jb_app_run(struct jb_app *app, void (*fn)(void *arg, bool run), void *arg);

/* The endpoint's bound port, or 0 when it is not running. */
int jb_app_ws_port(struct jb_app *app);

/* The endpoint's connected sockets whose role has bit `role_bit` (0 when not running). */
long jb_app_ws_count_role(struct jb_app *app, unsigned role_bit);

#endif
