/* test_pool.c — the handler pool (server/pool.c): calls run in the order they came, a call
 * that says it waits gets a stand-in so queued calls still run, the spare threads end once
 * the waits are over, and a stop lets go of what is still queued. Real threads; the bounds on
 * times are generous for a loaded machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "server/pool.h"

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Polls `fn` until it holds or `ms` pass; whether it held. */
static bool within(long ms, bool (*fn)(void *), void *arg) {
  long long end = now_ms() + ms;
  while (!fn(arg)) {
    if (now_ms() > end) return false;
    nap(5);
  }
  return true;
}

/* ---- order ---- */

struct order {
  pthread_mutex_t lock;
  int seen[16];
  int n;
  atomic_int not_run;
};

struct order_call {
  struct order *o;
  int k;
};

static struct order_call order_calls[16];

static void order_fn(void *arg, bool run) {
  struct order_call *c = arg;
  if (!run) {
    atomic_fetch_add(&c->o->not_run, 1);
    return;
  }
  pthread_mutex_lock(&c->o->lock);
  c->o->seen[c->o->n++] = c->k;
  pthread_mutex_unlock(&c->o->lock);
}

static bool all_seen(void *arg) {
  struct order *o = arg;
  pthread_mutex_lock(&o->lock);
  bool done = o->n == 16;
  pthread_mutex_unlock(&o->lock);
  return done;
}

static void one_thread_runs_in_order(void **state) {
  (void)state;
  struct order o = {.lock = PTHREAD_MUTEX_INITIALIZER};
  struct jb_pool *p;
  jb_error err = {0};
  assert_int_equal(jb_pool_start(&p, 1, 100, &err), 0);
  for (int i = 0; i < 16; i++) {
    order_calls[i] = (struct order_call){&o, i};
    assert_int_equal(jb_pool_submit(p, order_fn, &order_calls[i]), 0);
  }
  assert_true(within(5000, all_seen, &o));
  for (int i = 0; i < 16; i++) assert_int_equal(o.seen[i], i);
  assert_int_equal(jb_pool_threads(p, NULL), 1);
  jb_pool_stop(p);
  assert_int_equal(atomic_load(&o.not_run), 0);
}

/* ---- waits ---- */

struct gate {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool open;
  atomic_int waiting, passed, quick, begun_false;
};

static struct gate g = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* A call that says it waits, then waits for the gate. `arg` non-NULL: it does not say when
 * its wait is over (the pool must count it over when the call returns). */
static void waiting_fn(void *arg, bool run) {
  if (!run) return;
  if (!jb_pool_block_begin()) atomic_fetch_add(&g.begun_false, 1);
  assert_true(jb_pool_block_begin()); /* a second begin counts nothing */
  atomic_fetch_add(&g.waiting, 1);
  pthread_mutex_lock(&g.lock);
  while (!g.open) pthread_cond_wait(&g.cond, &g.lock);
  pthread_mutex_unlock(&g.lock);
  atomic_fetch_add(&g.passed, 1);
  if (!arg) jb_pool_block_end();
}

static void quick_fn(void *arg, bool run) {
  (void)arg;
  if (run) atomic_fetch_add(&g.quick, 1);
}

static bool n_waiting(void *arg) { return atomic_load(&g.waiting) == *(int *)arg; }
static bool n_quick(void *arg) { return atomic_load(&g.quick) == *(int *)arg; }

struct threads_is {
  struct jb_pool *p;
  long n, blocked;
};

static bool threads_are(void *arg) {
  struct threads_is *t = arg;
  long b;
  long n = jb_pool_threads(t->p, &b);
  return n == t->n && b == t->blocked;
}

static void waits_get_stand_ins_and_spares_end(void **state) {
  (void)state;
  struct jb_pool *p;
  jb_error err = {0};
  assert_int_equal(jb_pool_start(&p, 2, 100, &err), 0);
  /* eight calls wait, two of them without saying when their wait ends */
  static int forget = 1;
  for (int i = 0; i < 8; i++)
    assert_int_equal(jb_pool_submit(p, waiting_fn, i < 2 ? &forget : NULL), 0);
  int eight = 8;
  assert_true(within(5000, n_waiting, &eight)); /* all eight run at once: none was queued */
  assert_true(within(5000, threads_are, &(struct threads_is){p, 10, 8}));
  /* calls queued behind them still run, on the two threads kept free */
  long long t0 = now_ms();
  for (int i = 0; i < 20; i++) assert_int_equal(jb_pool_submit(p, quick_fn, NULL), 0);
  int twenty = 20;
  assert_true(within(5000, n_quick, &twenty));
  print_message("# 20 quick calls behind 8 waiting ones: %lld ms\n", now_ms() - t0);
  assert_int_equal(atomic_load(&g.passed), 0);
  /* the waits end: the spare threads end with them */
  pthread_mutex_lock(&g.lock);
  g.open = true;
  pthread_cond_broadcast(&g.cond);
  pthread_mutex_unlock(&g.lock);
  assert_true(within(5000, threads_are, &(struct threads_is){p, 2, 0}));
  assert_int_equal(atomic_load(&g.passed), 8);
  assert_int_equal(atomic_load(&g.begun_false), 0);
  /* and the pool still works */
  assert_int_equal(jb_pool_submit(p, quick_fn, NULL), 0);
  int twentyone = 21;
  assert_true(within(5000, n_quick, &twentyone));
  jb_pool_stop(p);
}

static void begin_off_the_pool_counts_nothing(void **state) {
  (void)state;
  assert_true(jb_pool_block_begin());
  jb_pool_block_end();
  jb_pool_block_end(); /* nothing counted: nothing to do */
}

/* ---- the stop ---- */

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int held;

static void hold_fn(void *arg, bool run) {
  (void)arg;
  if (!run) return;
  atomic_store(&held, 1);
  pthread_mutex_lock(&hold_lock); /* until the test lets go */
  pthread_mutex_unlock(&hold_lock);
}

static bool is_held(void *arg) {
  (void)arg;
  return atomic_load(&held) == 1;
}

struct stopper {
  struct jb_pool *p;
  atomic_int started, done;
};

static void *stop_main(void *arg) {
  struct stopper *s = arg;
  atomic_store(&s->started, 1);
  jb_pool_stop(s->p);
  atomic_store(&s->done, 1);
  return NULL;
}

static void stop_waits_for_running_and_lets_go_of_queued(void **state) {
  (void)state;
  struct order o = {.lock = PTHREAD_MUTEX_INITIALIZER};
  struct jb_pool *p;
  jb_error err = {0};
  assert_int_equal(jb_pool_start(&p, 1, 3, &err), 0);
  pthread_mutex_lock(&hold_lock);
  assert_int_equal(jb_pool_submit(p, hold_fn, NULL), 0);
  assert_true(within(5000, is_held, NULL));
  for (int i = 0; i < 3; i++) {
    order_calls[i] = (struct order_call){&o, i};
    assert_int_equal(jb_pool_submit(p, order_fn, &order_calls[i]), 0);
  }
  assert_int_equal(jb_pool_submit(p, order_fn, &order_calls[3]), -1); /* the queue is full */
  struct stopper s = {.p = p};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, stop_main, &s), 0);
  while (!atomic_load(&s.started)) nap(5);
  nap(200);
  assert_int_equal(atomic_load(&s.done), 0); /* the running call is waited for */
  pthread_mutex_unlock(&hold_lock);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&s.done), 1);
  assert_int_equal(o.n, 0); /* nothing queued ran after the stop */
  assert_int_equal(atomic_load(&o.not_run), 3); /* each was let go */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_thread_runs_in_order),
      cmocka_unit_test(waits_get_stand_ins_and_spares_end),
      cmocka_unit_test(begin_off_the_pool_counts_nothing),
      cmocka_unit_test(stop_waits_for_running_and_lets_go_of_queued),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
