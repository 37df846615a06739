/* app.c — the process's WebSocket endpoint as the doors see it (see app.h): one pointer under
 * a lock, so that a door's call never meets an endpoint being stopped. */
#include "server/app.h"

#include <pthread.h>

#include "server/ws.h"

static pthread_rwlock_t ws_lock = PTHREAD_RWLOCK_INITIALIZER; /* guards every app->ws */

void jb_app_set_ws(struct jb_app *app, struct jb_ws *ws) {
  pthread_rwlock_wrlock(&ws_lock);
  app->ws = ws;
  pthread_rwlock_unlock(&ws_lock);
}

int jb_app_run(struct jb_app *app, void (*fn)(void *arg, bool run), void *arg) {
  pthread_rwlock_rdlock(&ws_lock);
  int rc = app->ws ? jb_ws_run(app->ws, fn, arg) : -1;
  pthread_rwlock_unlock(&ws_lock);
  return rc;
}

int jb_app_ws_port(struct jb_app *app) {
  pthread_rwlock_rdlock(&ws_lock);
  int port = app->ws ? jb_ws_port(app->ws) : 0;
  pthread_rwlock_unlock(&ws_lock);
  return port;
}

long jb_app_ws_count_role(struct jb_app *app, unsigned role_bit) {
  pthread_rwlock_rdlock(&ws_lock);
  long n = app->ws ? jb_ws_count_role(app->ws, role_bit) : 0;
  pthread_rwlock_unlock(&ws_lock);
  return n;
}
