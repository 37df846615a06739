/* test_opwait.c — the op wake-ups of jailboxd (server/opwait.c) and the jb_op notification
 * payload they read (db/ops.c, migration 009): who is woken by what, that a notification
 * between registering and waiting is not lost, and the slow safety net. Real threads, real
 * condition variables; times are bounds generous enough for a loaded machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db/ops.h"
#include "server/opwait.h"

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void notice_parse(void **state) {
  (void)state;
  long long id;
  char st[20];
  const char *job;
  assert_int_equal(jb_op_notice_parse("42 done job-1", &id, st, &job), 0);
  assert_int_equal(id, 42);
  assert_string_equal(st, "done");
  assert_string_equal(job, "job-1");
  assert_int_equal(jb_op_notice_parse("0 active a b c", &id, st, &job), 0);
  assert_int_equal(id, 0);
  assert_string_equal(job, "a b c"); /* the job id is the rest, spaces and all */
  const char *bad[] = {"",
                       "42",
                       "42 done",
                       "42 done ",
                       "x done j",
                       "-1 done j",
                       "42  j",
                       "42 averyveryverylongstatename j",
                       "99999999999999999999 done j",
                       NULL};
  for (int i = 0; bad[i]; i++) assert_int_equal(jb_op_notice_parse(bad[i], &id, st, &job), -1);
}

static void wakes_the_right_ticket(void **state) {
  (void)state;
  struct jb_opwait *w = jb_opwait_new();
  assert_non_null(w);
  jb_opwait_set_up(w, true);
  struct jb_opwait_ticket a, b, c;
  jb_opwait_register(w, &a, "job-1", 7);
  jb_opwait_register(w, &b, "job-1", 8);
  jb_opwait_register(w, &c, "job-2", 7);
  jb_opwait_set_up(w, true); /* a change of the connection wakes everyone: clear it */
  jb_opwait_wait(w, &a, 0, 0), jb_opwait_wait(w, &b, 0, 0), jb_opwait_wait(w, &c, 0, 0);
  /* a finished op wakes its own call only; the same op id of another session does not */
  assert_int_equal(jb_opwait_notify_payload(w, "7 done job-1"), 0);
  assert_true(jb_opwait_wait(w, &a, 0, 0));
  assert_false(jb_opwait_wait(w, &b, 0, 0));
  assert_false(jb_opwait_wait(w, &c, 0, 0));
  /* an op being queued is the worker's business */
  assert_int_equal(jb_opwait_notify_payload(w, "8 approved job-1"), 0);
  assert_false(jb_opwait_wait(w, &b, 0, 0));
  /* a change of the session's state wakes every call of the session */
  assert_int_equal(jb_opwait_notify_payload(w, "0 aborted job-1"), 0);
  assert_true(jb_opwait_wait(w, &a, 0, 0));
  assert_true(jb_opwait_wait(w, &b, 0, 0));
  assert_false(jb_opwait_wait(w, &c, 0, 0));
  assert_int_equal(jb_opwait_notify_payload(w, "garbage"), -1);
  /* not stored yet (-1): any finished op of the session fires it, until it is named */
  struct jb_opwait_ticket d;
  jb_opwait_register(w, &d, "job-2", -1);
  jb_opwait_notify(w, "job-2", 99);
  assert_true(jb_opwait_wait(w, &d, 0, 0));
  jb_opwait_set_op(w, &d, 100);
  jb_opwait_notify(w, "job-2", 99);
  assert_false(jb_opwait_wait(w, &d, 0, 0));
  jb_opwait_notify(w, "job-2", 100);
  assert_true(jb_opwait_wait(w, &d, 0, 0));
  jb_opwait_unregister(w, &a);
  jb_opwait_unregister(w, &b);
  jb_opwait_unregister(w, &c);
  jb_opwait_unregister(w, &d);
  /* unregistered: nothing points at the old tickets any more */
  jb_opwait_notify(w, "job-1", 0);
  jb_opwait_free(w);
}

struct later {
  struct jb_opwait *w;
  int delay_ms;
};
static void *notify_later(void *arg) {
  struct later *l = arg;
  usleep((useconds_t)l->delay_ms * 1000);
  jb_opwait_notify_payload(l->w, "5 done job-x");
  return NULL;
}

static void wakes_at_once_and_falls_back(void **state) {
  (void)state;
  struct jb_opwait *w = jb_opwait_new();
  struct jb_opwait_ticket t;
  jb_opwait_register(w, &t, "job-x", 5);
  jb_opwait_set_up(w, true);
  jb_opwait_wait(w, &t, 0, 0);
  /* a notification from another thread ends a 10 s wait at once */
  struct later l = {w, 50};
  pthread_t th;
  pthread_create(&th, NULL, notify_later, &l);
  long long t0 = now_ms();
  assert_true(jb_opwait_wait(w, &t, 10000, 20));
  long long took = now_ms() - t0;
  pthread_join(th, NULL);
  assert_true(took >= 40 && took < 5000);
  /* a notification that came before the wait is not lost */
  jb_opwait_notify(w, "job-x", 5);
  t0 = now_ms();
  assert_true(jb_opwait_wait(w, &t, 10000, 20));
  assert_true(now_ms() - t0 < 1000);
  /* the safety net: no notification, the wait ends after its timeout */
  t0 = now_ms();
  assert_false(jb_opwait_wait(w, &t, 200, 20));
  took = now_ms() - t0;
  assert_true(took >= 190 && took < 5000);
  /* while the LISTEN connection is down, waits are cut to the fallback interval */
  jb_opwait_set_up(w, false);
  jb_opwait_wait(w, &t, 0, 0);
  t0 = now_ms();
  assert_false(jb_opwait_wait(w, &t, 10000, 30));
  took = now_ms() - t0;
  assert_true(took >= 25 && took < 5000);
  jb_opwait_unregister(w, &t);
  jb_opwait_free(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(notice_parse),
      cmocka_unit_test(wakes_the_right_ticket),
      cmocka_unit_test(wakes_at_once_and_falls_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
