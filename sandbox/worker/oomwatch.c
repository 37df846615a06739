/* oomwatch.c — a session's OOM watch: its thread, its record, and the wait for a notification
 * not yet recorded when the sandbox ends (see oomwatch.h). */
#define _GNU_SOURCE
#include "sandbox/worker/oomwatch.h"

#include <errno.h>
#include <signal.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lib/metrics.h"

/* after a v1 notification whose kill is not counted yet (the kernel notifies before it
 * kills), the counters are read again every FOLLOW_MS, FOLLOW_READS times at most */
#define FOLLOW_MS 5
#define FOLLOW_READS 40

struct jb_oomwatch {
  struct jb_memcg m;
  struct jb_memcg_notify n; /* fd -1: sampling */
  int wake; /* eventfd: jb_oomwatch_stop */
  pthread_t thread;
  bool threaded;
  pthread_mutex_t lock; /* guards the taking of a notification, done and rec */
  bool done; /* the cgroup is gone (or unreadable): nothing more will be notified */
  struct jb_oom_record rec;
};

bool jb_oom_ended_it(bool seen, const struct jb_oom_record *rec, long long ended_ms, long long code,
                     bool docker_oom) {
  /* the filter's kill is the one end an OOM never explains; any other code is seen after an
   * OOM under runsc (137, or 1 when the process killed was the shim's child) */
  bool not_filter = code != 128 + SIGSYS;
  bool memcg = seen && ended_ms - rec->last_ms <= JB_OOM_END_WINDOW_MS;
  return not_filter && (memcg || (docker_oom && !rec->notified));
}

const char *jb_oom_source_name(enum jb_oom_source s) {
  return s == JB_OOM_EVENT ? "event" : s == JB_OOM_SAMPLE ? "sample" : "none";
}

static long long max_ll(long long a, long long b) { return a > b ? a : b; }

/* Adds what was read (`counts`, when `counted`) and whether it says OOM to w->rec (locked). */
static void record(struct jb_oomwatch *w, bool oom, const struct jb_memcg_counts *counts,
                   bool counted, enum jb_oom_source how) {
  bool grew =
      counted && (counts->oom_kill > w->rec.counts.oom_kill || counts->oom > w->rec.counts.oom);
  if (oom && (grew || !counted || !w->rec.last_ms)) w->rec.last_ms = jb_now_ms();
  if (counted) {
    w->rec.counts.oom_kill = max_ll(w->rec.counts.oom_kill, counts->oom_kill);
    w->rec.counts.oom = max_ll(w->rec.counts.oom, counts->oom);
    w->rec.counted = true;
  }
  if (oom && w->rec.source == JB_OOM_NONE) {
    w->rec.source = how;
    w->rec.at_ms = jb_now_ms();
  }
}

/* Takes what is pending on the notification (`notified`; else reads the counters again) and
 * records it; gone or failing, the watch is done (w->lock held). */
static struct jb_memcg_note take_locked(struct jb_oomwatch *w, bool notified) {
  struct jb_memcg_note note = {0};
  bool ok;
  if (notified) {
    ok = jb_memcg_notify_take(&w->m, &w->n, &note, NULL) == 0;
  } else {
    jb_error err = {0};
    ok = jb_memcg_read(&w->m, &note.counts, &err) == 0;
    if (!ok && (err.code == ENOENT || err.code == ENODEV)) ok = note.gone = true;
  }
  record(w, note.oom, &note.counts, ok && !note.gone, JB_OOM_EVENT);
  /* gone: nothing more will be notified; a failure other than that would repeat */
  if (!ok || note.gone) w->done = true;
  return note;
}

static void *watch_main(void *arg) {
  struct jb_oomwatch *w = arg;
  int follow = 0;
  for (;;) {
    struct pollfd p[2] = {{.fd = w->wake, .events = POLLIN},
                          {.fd = w->n.fd, .events = w->n.events}};
    int r = poll(p, 2, follow > 0 ? FOLLOW_MS : -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || p[0].revents) break;
    bool notified = p[1].revents != 0;
    if (!notified) follow--;
    pthread_mutex_lock(&w->lock);
    struct jb_memcg_note note = {0};
    if (!w->done) note = take_locked(w, notified);
    bool done = w->done;
    pthread_mutex_unlock(&w->lock);
    if (done) break;
    if (notified && note.oom && !w->n.v2 && note.counts.oom_kill == 0) follow = FOLLOW_READS;
    if (note.counts.oom_kill > 0) follow = 0;
  }
  return NULL;
}

int jb_oomwatch_start(struct jb_memcg *m, struct jb_oomwatch **out, jb_error *err) {
  *out = NULL;
  struct jb_oomwatch *w = calloc(1, sizeof *w);
  if (!w) {
    jb_memcg_close(m);
    return jb_fail(err, ENOMEM, "OOM watch: out of memory");
  }
  w->m = *m;
  m->dirfd = -1;
  w->n.fd = -1;
  w->wake = -1;
  pthread_mutex_init(&w->lock, NULL);
  *out = w;
  if (w->m.dirfd < 0) return jb_fail(err, ENOENT, "OOM watch: no memory cgroup"), 1;
  if (jb_memcg_notify_open(&w->m, &w->n, err) < 0) return 1;
  w->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->wake < 0) {
    jb_fail_errno(err, errno, "OOM watch: eventfd");
    jb_memcg_notify_close(&w->n);
    return 1;
  }
  /* the thread holds a few KiB on its stack: a small one, for up to a thousand sessions */
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setstacksize(&at, 128 * 1024);
  int e = pthread_create(&w->thread, &at, watch_main, w);
  pthread_attr_destroy(&at);
  if (e != 0) {
    jb_fail_errno(err, e, "OOM watch: thread");
    jb_memcg_notify_close(&w->n);
    return 1;
  }
  w->threaded = true;
  return 0;
}

void jb_oomwatch_sample(struct jb_oomwatch *w) {
  if (!w || w->threaded || w->m.dirfd < 0) return;
  struct jb_memcg_counts c;
  if (jb_memcg_read(&w->m, &c, NULL) < 0) return;
  pthread_mutex_lock(&w->lock);
  record(w, jb_memcg_oom(&c), &c, true, JB_OOM_SAMPLE);
  pthread_mutex_unlock(&w->lock);
}

bool jb_oomwatch_seen(struct jb_oomwatch *w, struct jb_oom_record *rec) {
  *rec = (struct jb_oom_record){0};
  if (!w) return false;
  /* a notification the thread has not taken yet (it takes under the same lock, so one it is
   * taking is recorded before this looks) */
  pthread_mutex_lock(&w->lock);
  if (!w->done && jb_memcg_notify_pending(&w->n)) take_locked(w, true);
  pthread_mutex_unlock(&w->lock);
  /* the read once the sandbox ended: the cgroup may still be there */
  struct jb_memcg_counts c;
  bool counted = w->m.dirfd >= 0 && jb_memcg_read(&w->m, &c, NULL) == 0;
  pthread_mutex_lock(&w->lock);
  if (counted) record(w, jb_memcg_oom(&c), &c, true, JB_OOM_SAMPLE);
  *rec = w->rec;
  rec->notified = w->threaded;
  pthread_mutex_unlock(&w->lock);
  return rec->source != JB_OOM_NONE;
}

void jb_oomwatch_stop(struct jb_oomwatch *w) {
  if (!w) return;
  if (w->threaded) {
    uint64_t one = 1;
    while (write(w->wake, &one, sizeof one) < 0 && errno == EINTR) {}
    pthread_join(w->thread, NULL);
  }
  if (w->wake >= 0) close(w->wake);
  jb_memcg_notify_close(&w->n);
  jb_memcg_close(&w->m);
  pthread_mutex_destroy(&w->lock);
  free(w);
}
