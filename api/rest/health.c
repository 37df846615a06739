/* health.c — GET /healthz (the process answers) and GET /readyz (the database is reachable,
 * every migration is applied, the instance is not draining and its signing key is not
 * retired), and the database answers the
 * other REST handlers share (unavailable; a connection for a session's buyer or service). */
#include <jansson.h>

#include "api/core/auth.h"
#include "api/rest/handlers.h"
#include "lib/log.h"
#include "db/migrate.h"

PGconn *jb_rest_session_conn(struct jb_app *app, const struct jb_http_req *req,
                             struct jb_http_resp *resp) {
  struct jb_principal who;
  return jb_rest_authed_conn(app, req, req->params[0], JB_ROLE_SERVICE | JB_ROLE_BUYER, &who, resp);
}

void jb_api_healthz(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  jb_resp_json(resp, 200, json_pack("{s:s}", "status", "ok"));
}

void jb_api_readyz(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  if (atomic_load(&app->draining)) {
    jb_resp_error(resp, 503, "draining", "instance is shutting down");
    return;
  }
  char why[640];
  if (jb_signer_retired(why, sizeof why)) { /* it could serve no write */
    jb_resp_error(resp, 503, "key_retired", "%s", why);
    return;
  }
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    jb_db_unavailable(resp, &err);
    return;
  }
  long pending = 0;
  int rc = jb_migrations_pending(c, jb_migrations, jb_migrations_count, &pending, &err);
  jb_db_release(app->db, c);
  if (rc < 0) {
    jb_db_unavailable(resp, &err);
    return;
  }
  if (pending > 0) {
    jb_resp_error(resp, 503, "migrations_pending", "%ld migration(s) not applied", pending);
    return;
  }
  jb_resp_json(
      resp, 200,
      json_pack("{s:s,s:I}", "status", "ready", "migrations", (json_int_t)jb_migrations_count));
}
