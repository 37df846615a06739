/* app.h — the state a jailboxd process shares with its request handlers. */
#ifndef JB_APP_H
#define JB_APP_H

#include <stdatomic.h>
#include <stddef.h>

#include "db/db.h"
#include "server/config.h"
#include "server/http.h"

struct jb_app {
  const struct jb_config *cfg;  /* borrowed, lives as long as the process */
  struct jb_db *db;             /* connection pool */
  atomic_bool draining;         /* set on SIGTERM: /readyz answers 503 */
};

/* The route table served by jailboxd (api/routes.c); *n receives its length. */
const struct jb_route *jb_api_routes(size_t *n);

#endif
