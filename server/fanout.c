/* fanout.c — Redis pub/sub transport of the event bus (see fanout.h). */
#define _GNU_SOURCE
#include "server/fanout.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "lib/json.h"
#include "db/events.h"
#include "lib/log.h"
#include "lib/metrics.h"

#define CHANNEL_PREFIX "jailbox:session:"
#define PATTERN CHANNEL_PREFIX "*"
#define MAX_MESSAGE (4 * 1024 * 1024) /* bytes; a larger message is dropped unread */
#define CONNECT_TIMEOUT_MS 1000
#define COMMAND_TIMEOUT_MS 500
#define HEARTBEAT_MS 1000
#define HUNG_MS 2000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000

struct jb_fanout {
  struct jb_bus *bus;
  struct jb_redis_addr addr;
  jb_bus_transport_fn fallback;
  void (*on_subscribed)(void *ctx);
  void *fallback_ctx;
  pthread_t thread;
  int stop_fd; /* eventfd: written once to stop */
  atomic_bool sub_up;
  atomic_long published, received, refused, connects;
  pthread_mutex_t pub_lock; /* guards pub, pub_gen, pub_retry_at, pub_backoff */
  redisContext *pub;
  long pub_gen; /* `connects` when pub was made: a newer subscription means Redis
                             * came back, and a publisher connection older than it is stale */
  long long pub_retry_at;
  long pub_backoff;
};

/* ---------- URL ---------- */

/* "[user]:password" or "password" between `p` and `at` into out->user, out->password. */
static int creds(const char *p, const char *at, struct jb_redis_addr *out, jb_error *err) {
  const char *colon = memchr(p, ':', (size_t)(at - p));
  size_t ulen = colon ? (size_t)(colon - p) : 0;
  const char *pw = colon ? colon + 1 : p;
  size_t plen = (size_t)(at - pw);
  if (ulen >= sizeof out->user || plen >= sizeof out->password)
    return jb_fail(err, EINVAL, "Redis URL credentials too long");
  memcpy(out->user, p, ulen);
  out->user[ulen] = '\0';
  memcpy(out->password, pw, plen);
  out->password[plen] = '\0';
  return 0;
}

int jb_redis_url_parse(const char *url, struct jb_redis_addr *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  out->port = 6379;
  if (!url || !url[0]) return jb_fail(err, EINVAL, "empty Redis URL");
  if (strlen(url) > 1024) return jb_fail(err, EINVAL, "Redis URL longer than 1024 bytes");
  for (const char *p = url; *p; p++)
    if ((unsigned char)*p <= 0x20 || *p == 0x7f)
      return jb_fail(err, EINVAL, "Redis URL has a space or control character");
  if (strncmp(url, "unix://", 7) == 0) {
    const char *path = url + 7;
    const char *slash = strchr(path, '/');
    const char *at = path[0] != '/' && slash ? memrchr(path, '@', (size_t)(slash - path)) : NULL;
    if (at && creds(path, at, out, err) < 0) return -1;
    if (at) path = at + 1;
    if (path[0] != '/') return jb_fail(err, EINVAL, "unix:// Redis URL needs an absolute path");
    if (strlen(path) >= sizeof out->path) return jb_fail(err, EINVAL, "Redis socket path too long");
    snprintf(out->path, sizeof out->path, "%s", path);
    return 0;
  }
  if (strncmp(url, "redis://", 8) != 0)
    return jb_fail(err, EINVAL, "Redis URL must start with redis:// or unix://");
  const char *p = url + 8;
  const char *end = p + strcspn(p, "/?#"); /* authority ends here */
  const char *at = memrchr(p, '@', (size_t)(end - p));
  if (at) {
    if (creds(p, at, out, err) < 0) return -1;
    p = at + 1;
  }
  const char *hend;
  if (*p == '[') {
    hend = memchr(p, ']', (size_t)(end - p));
    if (!hend) return jb_fail(err, EINVAL, "Redis URL: unclosed '[' in the host");
    if ((size_t)(hend - p - 1) >= sizeof out->host || hend == p + 1)
      return jb_fail(err, EINVAL, "Redis URL: bad IPv6 host");
    memcpy(out->host, p + 1, (size_t)(hend - p - 1));
    hend++;
  } else {
    hend = p + strcspn(p, ":/?#");
    if (hend > end) hend = end;
    if (hend == p) return jb_fail(err, EINVAL, "Redis URL has no host");
    if ((size_t)(hend - p) >= sizeof out->host)
      return jb_fail(err, EINVAL, "Redis URL host too long");
    memcpy(out->host, p, (size_t)(hend - p));
  }
  if (hend < end && *hend == ':') {
    char *e;
    errno = 0;
    long port = strtol(hend + 1, &e, 10);
    if (errno || e == hend + 1 || e != end || port < 1 || port > 65535)
      return jb_fail(err, EINVAL, "Redis URL: port must be 1..65535");
    out->port = (int)port;
  } else if (hend != end) {
    return jb_fail(err, EINVAL, "Redis URL: unexpected text after the host");
  }
  if (*end == '?' || *end == '#')
    return jb_fail(err, EINVAL, "Redis URL: no query or fragment is accepted");
  if (*end == '/') {
    const char *db = end + 1;
    for (const char *q = db; *q; q++)
      if (*q < '0' || *q > '9') return jb_fail(err, EINVAL, "Redis URL: database must be a number");
  }
  return 0;
}

/* ---------- the reply reader's limits ---------- */

static redisReplyObjectFunctions limited_fns;
static void *(*hiredis_create_array)(const redisReadTask *, int);
static pthread_once_t limited_once = PTHREAD_ONCE_INIT;

static void *create_array_limited(const redisReadTask *task, int elements) {
  if (task->parent || elements > JB_REDIS_MAX_ELEMENTS)
    return NULL; /* reader: error, nothing kept */
  return hiredis_create_array(task, elements);
}

static void limited_init(void) {
  /* hiredis keeps its own reply functions private: take them from a reader it made */
  redisReader *t = redisReaderCreate();
  if (!t) abort();
  limited_fns = *t->fn;
  redisReaderFree(t);
  hiredis_create_array = limited_fns.createArray;
  limited_fns.createArray = create_array_limited;
}

void jb_redis_reader_limit(struct redisReader *r) {
  pthread_once(&limited_once, limited_init);
  r->fn = &limited_fns;
}

/* ---------- connections ---------- */

/* A connected stream socket to `a`, opened SOCK_CLOEXEC (hiredis 0.14 opens its own without
 * it, and jailboxd forks workers), within `timeout_ms`; blocking mode on return. The fd, or
 * -1 with `why` set. */
static int connect_cloexec(const struct jb_redis_addr *a, int timeout_ms, char *why,
                           size_t whylen) {
  struct addrinfo *res = NULL, *ai;
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  struct addrinfo unix_ai = {.ai_family = AF_UNIX,
                             .ai_socktype = SOCK_STREAM,
                             .ai_addr = (struct sockaddr *)&sun,
                             .ai_addrlen = sizeof sun};
  if (a->path[0]) {
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", a->path);
    res = &unix_ai;
  } else {
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    char port[8];
    snprintf(port, sizeof port, "%d", a->port);
    int rc = getaddrinfo(a->host, port, &hints, &res);
    if (rc) {
      snprintf(why, whylen, "%s: %s", a->host, gai_strerror(rc));
      return -1;
    }
  }
  int fd = -1;
  for (ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc < 0 && (errno == EINPROGRESS || errno == EAGAIN)) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      rc = poll(&p, 1, timeout_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
                   soerr == 0
               ? 0
               : -1;
      if (rc < 0) errno = soerr ? soerr : ETIMEDOUT;
    }
    if (rc == 0) break;
    snprintf(why, whylen, "connect: %s", strerror(errno));
    close(fd);
    fd = -1;
  }
  if (res != &unix_ai) freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    if (!a->path[0]) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  }
  return fd;
}

/* Connects and authenticates; NULL on failure, with `why` (the caller retries). */
static redisContext *redis_connect(const struct jb_redis_addr *a, char *why, size_t whylen) {
  int fd = connect_cloexec(a, CONNECT_TIMEOUT_MS, why, whylen);
  if (fd < 0) return NULL;
  redisContext *c = redisConnectFd(fd);
  if (!c || c->err) {
    snprintf(why, whylen, "%s", c ? c->errstr : "out of memory");
    if (c)
      redisFree(c); /* closes fd */
    else
      close(fd);
    return NULL;
  }
  jb_redis_reader_limit(c->reader);
  struct timeval ct = {COMMAND_TIMEOUT_MS / 1000, (COMMAND_TIMEOUT_MS % 1000) * 1000};
  redisSetTimeout(c, ct);
  if (a->password[0]) {
    redisReply *r = a->user[0] ? redisCommand(c, "AUTH %s %s", a->user, a->password)
                               : redisCommand(c, "AUTH %s", a->password);
    bool ok = r && r->type == REDIS_REPLY_STATUS;
    snprintf(why, whylen, "AUTH: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
    if (r) freeReplyObject(r);
    if (!ok) {
      redisFree(c);
      return NULL;
    }
  }
  return c;
}

static bool wait_or_stop(struct jb_fanout *f, long ms) {
  struct pollfd p = {.fd = f->stop_fd, .events = POLLIN};
  return poll(&p, 1, (int)ms) > 0;
}

/* Writes what hiredis has buffered. 0, or -1 when the connection failed. */
static int flush(redisContext *c) {
  int done = 0;
  while (!done)
    if (redisBufferWrite(c, &done) != REDIS_OK) return -1;
  return 0;
}

/* One reply of the subscription. Returns 1 for the PSUBSCRIBE confirmation, 2 for a PONG,
 * 0 for anything else (a message, delivered here). */
static int on_reply(struct jb_fanout *f, redisReply *r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != REDIS_REPLY_STRING)
    return 0;
  const char *type = r->element[0]->str;
  if (!strcmp(type, "psubscribe")) return 1;
  if (!strcmp(type, "pong")) return 2;
  if (strcmp(type, "pmessage") || r->elements != 4 || r->element[2]->type != REDIS_REPLY_STRING ||
      r->element[3]->type != REDIS_REPLY_STRING)
    return 0;
  const char *channel = r->element[2]->str;
  redisReply *m = r->element[3];
  json_t *doc, *payload;
  const char *job;
  enum jb_event_kind kind;
  if (jb_fanout_accept(channel, m->str, m->len, &doc, &job, &kind, &payload) < 0) {
    jb_log(JB_LOG_WARN, "event on Redis ignored (malformed, oversized or on the wrong channel)",
           "channel", channel, NULL);
    return 0;
  }
  atomic_fetch_add(&f->received, 1);
  jb_bus_deliver(f->bus, job, kind, json_incref(payload));
  json_decref(doc);
  return 0;
}

int jb_fanout_accept(const char *channel, const char *msg, size_t len, json_t **doc,
                     const char **job, enum jb_event_kind *kind, json_t **payload) {
  size_t plen = strlen(CHANNEL_PREFIX);
  if (!channel || strncmp(channel, CHANNEL_PREFIX, plen) != 0) return -1;
  if (len > MAX_MESSAGE || memchr(msg, '\0', len)) return -1;
  if (jb_json_depth(msg, len, JB_JSON_MAX_DEPTH) > JB_JSON_MAX_DEPTH) return -1;
  char *text = malloc(len + 1); /* not strndup: msg need not be NUL-terminated at all */
  if (!text) return -1;
  memcpy(text, msg, len);
  text[len] = '\0';
  int rc = jb_event_parse(text, doc, job, kind, payload);
  free(text);
  if (rc < 0) return -1;
  /* the channel names the session: an envelope for another session is not delivered */
  if (strcmp(channel + plen, *job) != 0) {
    json_decref(*doc);
    *doc = NULL;
    return -1;
  }
  return 0;
}

/* Serves one subscription until it fails (false) or stop is asked (true). */
static bool subscribed(struct jb_fanout *f, redisContext *c) {
  redisAppendCommand(c, "PSUBSCRIBE %s", PATTERN);
  if (flush(c) < 0) return false;
  bool ping_out = false;
  long long ping_at = jb_now_ms(), asked = jb_now_ms();
  bool confirmed = false;
  for (;;) {
    long long t = jb_now_ms();
    if (!confirmed && t - asked > HUNG_MS) return false;
    if (confirmed && !ping_out && t - ping_at >= HEARTBEAT_MS) {
      redisAppendCommand(c, "PING");
      if (flush(c) < 0) return false;
      ping_out = true;
      ping_at = t;
    }
    if (ping_out && t - ping_at > HUNG_MS) {
      jb_log(JB_LOG_WARN, "Redis subscription got no answer in time; reconnecting", NULL);
      return false;
    }
    struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = f->stop_fd, .events = POLLIN}};
    int n = poll(p, 2, 250);
    if (n < 0 && errno != EINTR) return false;
    if (p[1].revents) return true;
    if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (redisBufferRead(c) != REDIS_OK) return false;
    void *rv;
    for (;;) {
      if (redisGetReplyFromReader(c, &rv) != REDIS_OK) {
        jb_log(JB_LOG_WARN, "Redis reply refused; reconnecting", "detail", c->errstr, NULL);
        return false;
      }
      if (!rv) break;
      int k = on_reply(f, rv);
      freeReplyObject(rv);
      if (k == 1 && !confirmed) {
        confirmed = true;
        ping_at = jb_now_ms();
        atomic_store(&f->sub_up, true);
        atomic_fetch_add(&f->connects, 1);
        jb_log(JB_LOG_INFO, "Redis fan-out subscribed", "pattern", PATTERN, NULL);
        if (f->on_subscribed) f->on_subscribed(f->fallback_ctx);
      } else if (k == 2) {
        ping_out = false;
      }
    }
    /* what is left is one reply not yet whole: a message larger than any we accept is not
     * buffered to its end (hiredis would grow its buffer as long as bytes come) */
    if (c->reader->len - c->reader->pos > MAX_MESSAGE + 4096) {
      jb_log(JB_LOG_WARN, "Redis sent a reply larger than any event; reconnecting", NULL);
      return false;
    }
  }
}

static void *run(void *arg) {
  struct jb_fanout *f = arg;
  long backoff = BACKOFF_MIN_MS;
  bool warned = false;
  for (;;) {
    char why[256] = "";
    redisContext *c = redis_connect(&f->addr, why, sizeof why);
    if (c) {
      /* the subscription reads with poll; hiredis' own socket timeouts are not wanted here */
      struct timeval none = {0, 0};
      redisSetTimeout(c, none);
      bool stopped = subscribed(f, c);
      bool was_up = atomic_exchange(&f->sub_up, false);
      redisFree(c);
      if (stopped) return NULL;
      if (was_up) {
        backoff = BACKOFF_MIN_MS;
        warned = false;
        jb_log(JB_LOG_WARN, "Redis fan-out lost; events go over PostgreSQL until it is back", NULL);
      }
    } else if (!warned) {
      jb_log(JB_LOG_WARN, "Redis unreachable; events go over PostgreSQL until it is back", "detail",
             why, NULL);
      warned = true;
    }
    if (wait_or_stop(f, backoff)) return NULL;
    backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
  }
}

/* ---------- the transport ---------- */

static int publish(void *ctx, const char *job_id, enum jb_event_kind kind, json_t *payload) {
  struct jb_fanout *f = ctx;
  /* without our own subscription our own sockets would miss the event */
  if (!job_id || !job_id[0] || !atomic_load(&f->sub_up)) goto refuse;
  char *text = jb_event_encode(job_id, kind, payload);
  if (!text) goto refuse;
  char channel[160];
  snprintf(channel, sizeof channel, "%s%s", CHANNEL_PREFIX, job_id);
  int rc = -1;
  pthread_mutex_lock(&f->pub_lock);
  long gen = atomic_load(&f->connects);
  if (f->pub && f->pub_gen != gen) {
    redisFree(f->pub);
    f->pub = NULL;
    f->pub_retry_at = 0;
  }
  if (!f->pub && jb_now_ms() >= f->pub_retry_at) {
    char why[256];
    f->pub = redis_connect(&f->addr, why, sizeof why);
    f->pub_gen = gen;
    if (!f->pub) {
      f->pub_backoff = f->pub_backoff ? (f->pub_backoff * 2 < BACKOFF_MAX_MS ? f->pub_backoff * 2
                                                                             : BACKOFF_MAX_MS)
                                      : BACKOFF_MIN_MS;
      f->pub_retry_at = jb_now_ms() + f->pub_backoff;
    } else {
      f->pub_backoff = 0;
    }
  }
  if (f->pub) {
    redisReply *r = redisCommand(f->pub, "PUBLISH %s %b", channel, text, strlen(text));
    /* at least one receiver: our own subscription is among them */
    if (r && r->type == REDIS_REPLY_INTEGER && r->integer > 0) rc = 0;
    if (!r || r->type == REDIS_REPLY_ERROR || f->pub->err) {
      redisFree(f->pub);
      f->pub = NULL;
      f->pub_retry_at = jb_now_ms() + BACKOFF_MIN_MS;
    }
    if (r) freeReplyObject(r);
  }
  pthread_mutex_unlock(&f->pub_lock);
  free(text);
  if (rc == 0) {
    atomic_fetch_add(&f->published, 1);
    return 0;
  }
refuse:
  atomic_fetch_add(&f->refused, 1);
  return f->fallback ? f->fallback(f->fallback_ctx, job_id, kind, payload) : -1;
}

/* ---------- start / stop ---------- */

int jb_fanout_start(struct jb_fanout **out, const char *url, struct jb_bus *bus,
                    jb_bus_transport_fn fallback, void (*on_subscribed)(void *ctx), void *ctx,
                    jb_error *err) {
  struct jb_fanout *f = calloc(1, sizeof *f);
  if (!f) return jb_fail(err, ENOMEM, "out of memory");
  if (jb_redis_url_parse(url, &f->addr, err) < 0) {
    free(f);
    return jb_error_wrap(err, "JAILBOX_REDIS_URL");
  }
  f->bus = bus;
  f->fallback = fallback;
  f->on_subscribed = on_subscribed;
  f->fallback_ctx = ctx;
  atomic_init(&f->sub_up, false);
  atomic_init(&f->published, 0);
  atomic_init(&f->received, 0);
  atomic_init(&f->refused, 0);
  atomic_init(&f->connects, 0);
  pthread_mutex_init(&f->pub_lock, NULL);
  f->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (f->stop_fd < 0) {
    int e = errno;
    free(f);
    return jb_fail_errno(err, e, "eventfd");
  }
  int rc = pthread_create(&f->thread, NULL, run, f);
  if (rc) {
    close(f->stop_fd);
    free(f);
    return jb_fail_errno(err, rc, "Redis subscriber thread");
  }
  jb_bus_set_transport(bus, publish, f);
  *out = f;
  return 0;
}

bool jb_fanout_up(const struct jb_fanout *f) { return f && atomic_load(&f->sub_up); }

void jb_fanout_counts(const struct jb_fanout *f, long *published, long *received, long *refused,
                      long *connects) {
  if (published) *published = f ? atomic_load(&f->published) : 0;
  if (received) *received = f ? atomic_load(&f->received) : 0;
  if (refused) *refused = f ? atomic_load(&f->refused) : 0;
  if (connects) *connects = f ? atomic_load(&f->connects) : 0;
}

void jb_fanout_stop(struct jb_fanout *f) {
  if (!f) return;
  jb_bus_set_transport(f->bus, NULL, NULL);
  uint64_t one = 1;
  ssize_t w = write(f->stop_fd, &one, sizeof one);
  (void)w;
  pthread_join(f->thread, NULL);
  close(f->stop_fd);
  if (f->pub) redisFree(f->pub);
  pthread_mutex_destroy(&f->pub_lock);
  free(f);
}
