/* pool.c — threads running queued calls, with stand-ins for the ones that wait (see pool.h).
 *
 * Counts, under `lock`: `threads` live, `blocked` of them in a counted wait. A wait that
 * leaves fewer than `base` threads free starts one more; a thread that finds no call queued
 * while more than `base` are free ends. Every thread is joinable: one that ends puts its node
 * on `ended`, and the next jb_pool_block_begin or the stop joins it, so no thread is left
 * unjoined and nothing of the pool is freed while a thread still runs. */
#define _GNU_SOURCE
#include "server/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct pool_call {
  struct pool_call *next;
  jb_pool_fn *fn;
  void *arg;
};

struct pool_thread {
  struct pool_thread *next;
  struct jb_pool *pool;
  pthread_t tid; /* set by the thread itself, before it can be on `ended` */
};

struct jb_pool {
  pthread_mutex_t lock;
  pthread_cond_t work; /* a call queued, the stop, or a thread to spare */
  pthread_cond_t gone; /* a thread ended */
  struct pool_call *head, *tail;
  long queued, max_queued;
  long base, threads, blocked;
  bool stop;
  struct pool_thread *ended;
};

static __thread struct jb_pool *tl_pool; /* the pool of the thread running this, if any */
static __thread bool tl_blocked; /* this thread is in a counted wait */

static bool spare(const struct jb_pool *p) { return p->threads - p->blocked > p->base; }

static void *pool_main(void *arg) {
  struct pool_thread *self = arg;
  struct jb_pool *p = self->pool;
  tl_pool = p;
  pthread_mutex_lock(&p->lock);
  self->tid = pthread_self();
  for (;;) {
    while (!p->stop && !p->head && !spare(p)) pthread_cond_wait(&p->work, &p->lock);
    if (p->stop || !p->head) break; /* stopping, or a thread to spare with nothing to do */
    struct pool_call *c = p->head;
    p->head = c->next;
    if (!p->head) p->tail = NULL;
    p->queued--;
    pthread_mutex_unlock(&p->lock);
    c->fn(c->arg, true);
    free(c);
    if (tl_blocked) jb_pool_block_end(); /* a call that did not say its wait was over */
    pthread_mutex_lock(&p->lock);
  }
  p->threads--;
  self->next = p->ended;
  p->ended = self;
  pthread_cond_broadcast(&p->gone);
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* Starts one thread; the caller has counted it in p->threads. 0, or an errno value. */
static int start_thread(struct jb_pool *p) {
  struct pool_thread *t = calloc(1, sizeof *t);
  if (!t) return ENOMEM;
  t->pool = p;
  pthread_t tid;
  int rc = pthread_create(&tid, NULL, pool_main, t);
  if (rc) free(t);
  return rc;
}

/* Joins and frees the threads that have ended. Not under the lock. */
static void reap(struct jb_pool *p) {
  pthread_mutex_lock(&p->lock);
  struct pool_thread *t = p->ended;
  p->ended = NULL;
  pthread_mutex_unlock(&p->lock);
  while (t) {
    struct pool_thread *n = t->next;
    pthread_join(t->tid, NULL);
    free(t);
    t = n;
  }
}

int jb_pool_start(struct jb_pool **out, long threads, long max_queued, jb_error *err) {
  *out = NULL;
  if (threads < 1) threads = 1;
  struct jb_pool *p = calloc(1, sizeof *p);
  if (!p) return jb_fail(err, ENOMEM, "out of memory");
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->gone, NULL);
  p->base = threads;
  p->max_queued = max_queued;
  for (long i = 0; i < threads; i++) {
    pthread_mutex_lock(&p->lock);
    p->threads++;
    pthread_mutex_unlock(&p->lock);
    int rc = start_thread(p);
    if (rc) {
      pthread_mutex_lock(&p->lock);
      p->threads--;
      pthread_mutex_unlock(&p->lock);
      jb_pool_stop(p);
      return jb_fail_errno(err, rc, "start a handler thread");
    }
  }
  *out = p;
  return 0;
}

int jb_pool_submit(struct jb_pool *p, jb_pool_fn *fn, void *arg) {
  struct pool_call *c = malloc(sizeof *c);
  if (!c) return -1;
  c->next = NULL;
  c->fn = fn;
  c->arg = arg;
  pthread_mutex_lock(&p->lock);
  if (p->stop || p->queued >= p->max_queued) {
    pthread_mutex_unlock(&p->lock);
    free(c);
    return -1;
  }
  if (p->tail)
    p->tail->next = c;
  else
    p->head = c;
  p->tail = c;
  p->queued++;
  pthread_cond_signal(&p->work);
  pthread_mutex_unlock(&p->lock);
  return 0;
}

bool jb_pool_block_begin(void) {
  struct jb_pool *p = tl_pool;
  if (!p || tl_blocked) return true;
  reap(p);
  pthread_mutex_lock(&p->lock);
  p->blocked++;
  bool more = !p->stop && p->threads - p->blocked < p->base;
  if (more && p->threads - p->base >= JB_POOL_MAX_SPARE) {
    p->blocked--;
    pthread_mutex_unlock(&p->lock);
    return false;
  }
  if (more) p->threads++;
  pthread_mutex_unlock(&p->lock);
  int rc = more ? start_thread(p) : 0;
  if (rc) {
    pthread_mutex_lock(&p->lock);
    p->threads--;
    p->blocked--;
    pthread_mutex_unlock(&p->lock);
    return false;
  }
  tl_blocked = true;
  return true;
}

bool jb_pool_blocking(void) { return tl_blocked; }

void jb_pool_block_end(void) {
  struct jb_pool *p = tl_pool;
  if (!p || !tl_blocked) return;
  tl_blocked = false;
  pthread_mutex_lock(&p->lock);
  p->blocked--;
  if (spare(p)) pthread_cond_broadcast(&p->work); /* an idle one may end */
  pthread_mutex_unlock(&p->lock);
}

long jb_pool_threads(struct jb_pool *p, long *blocked) {
  if (blocked) *blocked = 0;
  if (!p) return 0;
  pthread_mutex_lock(&p->lock);
  long n = p->threads;
  if (blocked) *blocked = p->blocked;
  pthread_mutex_unlock(&p->lock);
  return n;
}

void jb_pool_stop(struct jb_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  p->stop = true;
  pthread_cond_broadcast(&p->work);
  while (p->threads > 0) pthread_cond_wait(&p->gone, &p->lock);
  struct pool_call *c = p->head;
  p->head = p->tail = NULL;
  p->queued = 0;
  pthread_mutex_unlock(&p->lock);
  reap(p);
  while (c) {
    struct pool_call *n = c->next;
    c->fn(c->arg, false);
    free(c);
    c = n;
  }
  pthread_cond_destroy(&p->gone);
  pthread_cond_destroy(&p->work);
  pthread_mutex_destroy(&p->lock);
  free(p);
}
