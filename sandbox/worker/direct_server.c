/* direct_server.c — the ops socket (JAILBOX_WORKER_OPS_SOCKET, mode 0600) on which jailboxd
 * hands reads, lists and stats straight to this worker (sandbox/proto/direct.h).
 *
 * The accepting thread (direct_server_main) takes every connection, up to DIRECT_CONNS_MAX
 * held at once, into one epoll set, each armed for one event at a time (EPOLLONESHOT). A pool
 * of DIRECT_THREADS threads waits on the set: the thread that gets a connection's event reads
 * its request lines, runs each (relay.c), answers with the request's id, passes the audit head
 * the op committed to the announcer (heads.c), and arms the connection again. A request that
 * comes while every thread is busy stays in the set, ready, until a thread is free: load
 * delays a request and never refuses it. Connections past DIRECT_CONNS_MAX wait unaccepted in
 * the listen backlog the same way. An idle connection holds no thread and no buffer. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/line.h"
#include "sandbox/proto/direct.h"
#include "sandbox/worker/worker.h"

/* Threads that run requests. A request holds one of the worker's 8 pooled database
 * connections from before it runs in the shim until it commits, and a session's requests run
 * one at a time in its shim: more than twice the pool would only wait for a connection.
 * Twice keeps a request read and parsed for each connection that comes free. */
#define DIRECT_THREADS 16
/* Connections held at once (jailboxd's relay keeps at most 64 per instance,
 * api/socket/socket.c); more wait in the listen backlog until one ends. */
#define DIRECT_CONNS_MAX 1024
#define DIRECT_STACK (1024 * 1024) /* bytes of stack of a pool thread */
#define DIRECT_WRITE_MS 30000 /* an answer must be taken within this, or the connection ends */

/* One connection of jailboxd, owned by the set; handled by one pool thread at a time. */
struct direct_conn {
  int fd; /* non-blocking */
  struct jb_line_reader r;
  struct direct_conn *prev, *next; /* in the server's list */
};

/* The server's state: the epoll set and its connections. */
struct direct_server {
  struct jb_worker *w;
  int ep;
  pthread_mutex_t lock; /* guards the list (not the connections: the set hands each to one
                         * thread at a time) */
  struct direct_conn *conns;
};

static const struct jb_line_opts request_lines = {.max_line = JB_DIRECT_MAX_LINE - 1,
                                                  .over = JB_LINE_FAIL};

/* Answers request `req` (borrowed; NULL: the line was not an acceptable object, `why` says
 * what was wrong) on `fd`. False when the answer could not be written. */
static bool direct_answer(struct jb_worker *w, int fd, json_t *req, const char *why) {
  long long head = 0;
  json_t *da = req ? relay_direct(w, req, &head) : relay_not_run("", why);
  json_t *rid = json_object_get(req, "id"); /* echoed: the caller matches answer to request */
  if (da && json_is_integer(rid)) json_object_set(da, "id", rid);
  jb_error err = {0};
  int rc = da ? jb_line_write_json(fd, da, 0, DIRECT_WRITE_MS, &err) : -1;
  json_decref(da);
  /* the answer is out: now its head's announcement */
  if (head > 0) heads_committed(w, json_string_value(json_object_get(req, "jobId")), head);
  return rc == 0;
}

static void conn_close(struct direct_server *ds, struct direct_conn *c) {
  epoll_ctl(ds->ep, EPOLL_CTL_DEL, c->fd, NULL);
  pthread_mutex_lock(&ds->lock);
  if (c->prev)
    c->prev->next = c->next;
  else
    ds->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  pthread_mutex_unlock(&ds->lock);
  jb_line_free(&c->r);
  close(c->fd);
  free(c);
  atomic_fetch_sub(&ds->w->direct_conns, 1);
}

/* Serves connection `c`, whose input came: every complete request it holds or sends now,
 * then arms it again — or ends it (its end of input, a line over the limit, an answer that
 * could not be written). Request lines are JB_DIRECT_MAX_LINE bytes at most with their
 * newline (lib/line.h). */
static void conn_serve(struct direct_server *ds, struct direct_conn *c) {
  for (;;) {
    json_t *req = NULL;
    jb_error err = {0};
    int rc = jb_line_next_object(&c->r, JB_DIRECT_MAX_DEPTH, &req, &err);
    if (rc == JB_LINE_OK || rc == JB_LINE_BAD_JSON) {
      bool sent = direct_answer(ds->w, c->fd, req, err.msg);
      json_decref(req);
      if (!sent) break;
      continue;
    }
    if (rc != JB_LINE_AGAIN) break; /* over the limit, out of memory, or the end */
    ssize_t got = jb_line_read(&c->r, c->fd, &err);
    if (got > 0) continue;
    if (got < 0 && (err.code == EAGAIN || err.code == EWOULDBLOCK || err.code == EINTR)) {
      if (jb_line_held(&c->r) == 0) { /* idle: no buffer held */
        jb_line_free(&c->r);
        jb_line_init(&c->r, &request_lines);
      }
      struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.ptr = c};
      if (epoll_ctl(ds->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0) return;
    }
    break;
  }
  conn_close(ds, c);
}

/* A pool thread (arg: the server): connections whose input came, one at a time. */
static void *direct_pool_main(void *arg) {
  struct direct_server *ds = arg;
  while (!atomic_load(&ds->w->stopping)) {
    struct epoll_event ev;
    int n = epoll_wait(ds->ep, &ev, 1, 500);
    if (n == 1) conn_serve(ds, ev.data.ptr);
  }
  return NULL;
}

/* Takes accepted connection `fd` into the set. False when it could not (the fd is closed). */
static bool conn_add(struct direct_server *ds, int fd) {
  struct direct_conn *c = calloc(1, sizeof *c);
  if (!c) {
    close(fd);
    return false;
  }
  c->fd = fd;
  jb_line_init(&c->r, &request_lines);
  pthread_mutex_lock(&ds->lock);
  c->next = ds->conns;
  if (c->next) c->next->prev = c;
  ds->conns = c;
  pthread_mutex_unlock(&ds->lock);
  atomic_fetch_add(&ds->w->direct_conns, 1);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.ptr = c};
  if (epoll_ctl(ds->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
    conn_close(ds, c);
    return false;
  }
  return true;
}

void *direct_server_main(void *arg) {
  struct jb_worker *w = arg;
  struct direct_server ds = {.w = w, .lock = PTHREAD_MUTEX_INITIALIZER};
  ds.ep = epoll_create1(EPOLL_CLOEXEC);
  pthread_t pool[DIRECT_THREADS];
  int started = 0;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setstacksize(&at, DIRECT_STACK);
  while (ds.ep >= 0 && started < DIRECT_THREADS &&
         pthread_create(&pool[started], &at, direct_pool_main, &ds) == 0)
    started++;
  pthread_attr_destroy(&at);
  if (started == 0)
    slog(w, JB_LOG_ERROR, NULL, "the ops socket cannot be served (no epoll set or no thread)",
         NULL);
  while (started > 0 && !atomic_load(&w->stopping)) {
    /* full: the next connection waits in the listen backlog until one ends */
    bool full = atomic_load(&w->direct_conns) >= DIRECT_CONNS_MAX;
    struct pollfd pf = {.fd = w->ops_fd, .events = POLLIN};
    if (poll(&pf, full ? 0 : 1, full ? 50 : 500) <= 0) continue;
    int fd = accept4(w->ops_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) conn_add(&ds, fd);
  }
  /* each pool thread ends after the request it runs */
  for (int i = 0; i < started; i++) pthread_join(pool[i], NULL);
  while (ds.conns) conn_close(&ds, ds.conns);
  if (ds.ep >= 0) close(ds.ep);
  pthread_mutex_destroy(&ds.lock);
  return NULL;
}
