/* direct_server.c — the ops socket (JAILBOX_WORKER_OPS_SOCKET, mode 0600) on which jailboxd
 * hands reads, lists and stats straight to this worker (sandbox/proto/direct.h): one thread per
 * connection reads request lines, runs each (relay.c), answers with the request's id, and then
 * passes the audit head the op committed to the announcer (heads.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/line.h"
#include "sandbox/proto/direct.h"
#include "sandbox/worker/worker.h"

#define DIRECT_CONNS_MAX \
  1024 /* connections served at once (jailboxd keeps one per handler thread, JAILBOX_WS_WORKERS at most 256, per instance) */
#define DIRECT_STACK (1024 * 1024) /* bytes of stack of a connection's thread */

/* One connection of jailboxd, owned by its thread. */
struct direct_conn {
  struct jb_worker *w;
  int fd;
};

/* Answers request `req` (borrowed; NULL: the line was not an acceptable object, `why` says
 * what was wrong) on `fd`. */
static void direct_answer(struct jb_worker *w, int fd, json_t *req, const char *why) {
  long long head = 0;
  json_t *da = req ? relay_direct(w, req, &head) : relay_not_run("", why);
  json_t *rid = json_object_get(req, "id"); /* echoed: the caller matches answer to request */
  if (da && json_is_integer(rid)) json_object_set(da, "id", rid);
  worker_send_line(fd, da); /* takes da */
  /* the answer is out: now its head's announcement */
  if (head > 0) heads_committed(w, json_string_value(json_object_get(req, "jobId")), head);
}

/* A connection's thread (arg: its struct direct_conn, freed here): request lines of up to
 * JB_DIRECT_MAX_LINE bytes with their newline (lib/line.h); a longer one ends the connection. */
static void *direct_conn_main(void *arg) {
  struct direct_conn *conn = arg;
  struct jb_worker *w = conn->w;
  int fd = conn->fd;
  free(conn);
  struct jb_line_reader r;
  jb_line_init(&r,
               &(struct jb_line_opts){.max_line = JB_DIRECT_MAX_LINE - 1, .over = JB_LINE_FAIL});
  while (!atomic_load(&w->stopping)) {
    json_t *req = NULL;
    jb_error err = {0};
    int rc = jb_line_next_object(&r, JB_DIRECT_MAX_DEPTH, &req, &err);
    if (rc == JB_LINE_OK || rc == JB_LINE_BAD_JSON) {
      direct_answer(w, fd, req, err.msg);
      json_decref(req);
      continue;
    }
    if (rc != JB_LINE_AGAIN) break; /* over the limit, out of memory, or the end */
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 1000) == 0) continue;
    if (jb_line_read(&r, fd, &err) <= 0 && err.code != EAGAIN && err.code != EINTR) break;
  }
  jb_line_free(&r);
  close(fd);
  atomic_fetch_sub(&w->direct_conns, 1);
  return NULL;
}

/* Starts a detached thread for connection `fd` (taken). False when none could be started
 * (the fd is closed then). */
static bool direct_conn_start(struct jb_worker *w, int fd) {
  struct direct_conn *conn = malloc(sizeof *conn);
  if (!conn) {
    close(fd);
    return false;
  }
  *conn = (struct direct_conn){.w = w, .fd = fd};
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&at, DIRECT_STACK);
  int rc = pthread_create(&t, &at, direct_conn_main, conn);
  pthread_attr_destroy(&at);
  if (rc != 0) {
    free(conn);
    close(fd);
  }
  return rc == 0;
}

void *direct_server_main(void *arg) {
  struct jb_worker *w = arg;
  while (!atomic_load(&w->stopping)) {
    struct pollfd pf = {.fd = w->ops_fd, .events = POLLIN};
    if (poll(&pf, 1, 500) <= 0) continue;
    int fd = accept4(w->ops_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    /* past the limit, or without a thread: closed, and jailboxd takes the queued path */
    if (atomic_fetch_add(&w->direct_conns, 1) >= DIRECT_CONNS_MAX) {
      atomic_fetch_sub(&w->direct_conns, 1);
      close(fd);
    } else if (!direct_conn_start(w, fd)) {
      atomic_fetch_sub(&w->direct_conns, 1);
    }
  }
  return NULL;
}
