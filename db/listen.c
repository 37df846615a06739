/* listen.c — the LISTEN thread (see listen.h). */
#define _GNU_SOURCE
#include "db/listen.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"
#include "lib/metrics.h"

struct jb_listener {
  pthread_t thread;
  int stop_fd; /* eventfd: written once to stop */
  char *conninfo;
  jb_listen_fn on_notify;
  jb_listen_up_fn on_up;
  void *ctx;
};

#define HEARTBEAT_MS 1000
#define HUNG_MS 2000

/* Waits `ms` or until stopped; true when stopped. */
static bool wait_or_stop(struct jb_listener *l, int ms) {
  struct pollfd p = {.fd = l->stop_fd, .events = POLLIN};
  return poll(&p, 1, ms) > 0;
}

static void *run(void *arg) {
  struct jb_listener *l = arg;
  int backoff = 200;
  for (;;) {
    const char *const keys[] = {"dbname", "connect_timeout", "application_name", NULL};
    const char *const vals[] = {l->conninfo, "5", "jailboxd-listen", NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    PGresult *r = NULL;
    if (PQstatus(c) == CONNECTION_OK)
      r = PQexec(c, "LISTEN jb_change; LISTEN jb_event; LISTEN jb_op; LISTEN jb_key");
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
      PQclear(r);
      PQfinish(c);
      if (wait_or_stop(l, backoff)) return NULL;
      /* at most a second apart: a database back from a restart is heard within a second
       * (calls waiting meanwhile read their ops every FALLBACK_MS) */
      backoff = backoff < 1000 ? backoff * 2 : 1000;
      continue;
    }
    PQclear(r);
    backoff = 200;
    l->on_up(l->ctx, true);
    jb_log(JB_LOG_DEBUG, "listening for changes", NULL);
    bool stopped = false;
    /* heartbeat: a query every HEARTBEAT_MS; no answer within HUNG_MS means the connection
     * (or the server behind it) hangs, and notifications may be missing */
    bool pending = false;
    long long sent_at = 0, last_ok = jb_now_ms();
    while (!stopped) {
      long long t = jb_now_ms();
      if (!pending && t - last_ok >= HEARTBEAT_MS) {
        if (!PQsendQuery(c, "SELECT 1")) break;
        pending = true;
        sent_at = t;
      }
      if (pending && t - sent_at > HUNG_MS) {
        jb_log(JB_LOG_WARN, "change listener got no answer in time; reconnecting", NULL);
        break;
      }
      struct pollfd p[2] = {{.fd = PQsocket(c), .events = POLLIN},
                            {.fd = l->stop_fd, .events = POLLIN}};
      int n = poll(p, 2, 250);
      if (n < 0 && errno != EINTR) break;
      if (p[1].revents) {
        stopped = true;
        break;
      }
      if (!PQconsumeInput(c) || PQstatus(c) != CONNECTION_OK) break;
      while (pending && !PQisBusy(c)) {
        PGresult *hr = PQgetResult(c);
        if (!hr) {
          pending = false;
          last_ok = jb_now_ms();
          break;
        }
        PQclear(hr);
      }
      PGnotify *nt;
      while ((nt = PQnotifies(c)) != NULL) {
        l->on_notify(l->ctx, nt->relname, nt->extra ? nt->extra : "");
        PQfreemem(nt);
      }
    }
    l->on_up(l->ctx, false);
    PQfinish(c);
    if (stopped) return NULL;
    jb_log(JB_LOG_WARN, "change listener lost its database connection; retrying", NULL);
    if (wait_or_stop(l, backoff)) return NULL;
  }
}

int jb_listener_start(struct jb_listener **out, const char *conninfo, jb_listen_fn on_notify,
                      jb_listen_up_fn on_up, void *ctx, jb_error *err) {
  struct jb_listener *l = calloc(1, sizeof *l);
  if (!l) return jb_fail(err, ENOMEM, "out of memory");
  l->conninfo = strdup(conninfo);
  l->stop_fd = eventfd(0, EFD_CLOEXEC);
  l->on_notify = on_notify;
  l->on_up = on_up;
  l->ctx = ctx;
  if (!l->conninfo || l->stop_fd < 0) {
    int e = errno;
    free(l->conninfo);
    if (l->stop_fd >= 0) close(l->stop_fd);
    free(l);
    return jb_fail_errno(err, e ? e : ENOMEM, "listener");
  }
  int rc = pthread_create(&l->thread, NULL, run, l);
  if (rc) {
    free(l->conninfo);
    close(l->stop_fd);
    free(l);
    return jb_fail_errno(err, rc, "start the change listener thread");
  }
  *out = l;
  return 0;
}

void jb_listener_stop(struct jb_listener *l) {
  if (!l) return;
  uint64_t one = 1;
  ssize_t w = write(l->stop_fd, &one, sizeof one);
  (void)w;
  pthread_join(l->thread, NULL);
  close(l->stop_fd);
  free(l->conninfo);
  free(l);
}
