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
#include "sandbox/proto/direct.h"
#include "sandbox/worker/worker.h"

#define DIRECT_CONNS_MAX 1024 /* connections served at once (jailboxd keeps one per handler thread, JAILBOX_WS_WORKERS at most 256, per instance) */
#define DIRECT_STACK (1024 * 1024) /* bytes of stack of a connection's thread */

/* One connection of jailboxd, owned by its thread. */
struct direct_conn {
  struct jb_worker *w;
  int fd;
};

/* Answers request line `line` (`n` bytes) on `fd`. */
static void direct_answer(struct jb_worker *w, int fd, const char *line, size_t n) {
  jb_error err = {0};
  json_t *req = jb_json_parse_object(line, n, JB_DIRECT_MAX_DEPTH, &err);
  long long head = 0;
  json_t *da = req ? relay_direct(w, req, &head) : relay_not_run("", err.msg);
  json_t *rid = json_object_get(req, "id"); /* echoed: the caller matches answer to request */
  if (da && json_is_integer(rid)) json_object_set(da, "id", rid);
  worker_send_line(fd, da);
  /* the answer is out: now its head's announcement */
  if (head > 0) heads_committed(w, json_string_value(json_object_get(req, "jobId")), head);
  json_decref(req);
}

/* A connection's thread (arg: its struct direct_conn, freed here): lines up to
 * JB_DIRECT_MAX_LINE bytes; a longer one ends the connection. */
static void *direct_conn_main(void *arg) {
  struct direct_conn *conn = arg;
  struct jb_worker *w = conn->w;
  int fd = conn->fd;
  free(conn);
  size_t cap = 65536, len = 0;
  char *buf = malloc(cap);
  while (buf && !atomic_load(&w->stopping)) {
    char *nl = memchr(buf, '\n', len);
    if (!nl) {
      if (len == cap) {
        if (cap >= JB_DIRECT_MAX_LINE) break; /* over the limit: the connection ends */
        size_t ncap = cap * 4 > JB_DIRECT_MAX_LINE ? JB_DIRECT_MAX_LINE : cap * 4;
        char *nb = realloc(buf, ncap);
        if (!nb) break;
        buf = nb;
        cap = ncap;
      }
      struct pollfd pf = {.fd = fd, .events = POLLIN};
      if (poll(&pf, 1, 1000) == 0) continue;
      ssize_t r = recv(fd, buf + len, cap - len, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      len += (size_t)r;
      continue;
    }
    size_t n = (size_t)(nl - buf);
    direct_answer(w, fd, buf, n);
    memmove(buf, nl + 1, len - n - 1);
    len -= n + 1;
  }
  free(buf);
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
