/* routes.c — the route table of jailboxd: every path it serves, kept in step with
 * api/openapi.yaml. */
#include "api/handlers.h"

static const struct jb_route routes[] = {
    {"GET", "/healthz", jb_api_healthz},
    {"GET", "/readyz", jb_api_readyz},
};

const struct jb_route *jb_api_routes(size_t *n) {
  *n = sizeof routes / sizeof routes[0];
  return routes;
}
