/* app.h — the state a jailboxd process shares with its request handlers. Nothing here is
 * state another instance needs: sessions, ops, chains and jobs live in PostgreSQL. */
#ifndef JB_APP_H
#define JB_APP_H

#include <stdatomic.h>
#include <stddef.h>

#include "db/db.h"
#include "db/signer.h"
#include "server/bus.h"
#include "server/config.h"
#include "server/http.h"

struct jb_cache; /* session read cache (server/cache.h) */
struct jb_opwait; /* waiting op calls (server/opwait.h) */
struct jb_socket; /* the Socket.IO endpoint (api/agent/socket.h) */
struct jb_sweeper; /* expiry of sessions (api/agent/escape.h) */
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
  struct jb_socket *sock; /* for /metrics; NULL until started */
  _Atomic int http_port; /* the bound HTTP port (the console's origin); 0 until bound */
  struct jb_sweeper *sweeper; /* NULL until started */
  struct jb_fanout *fanout; /* for /metrics; NULL without JAILBOX_REDIS_URL */
  struct jb_workers *workers; /* for direct op hand-over (sandbox/proto/direct.h); NULL until
                                   started, or with JAILBOX_WORKERS=0; read with __atomic_load_n */
};

#endif
