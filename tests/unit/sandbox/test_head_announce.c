/* test_head_announce.c — the schedule of the worker's audit-head announcements
 * (sandbox/worker/head_announce.c): a session's heads at most once an interval and the newest, no
 * session starved by others that keep reading while the announcer is behind, a failed
 * announcement tried again, and a stop that gives up at the first failure instead of waiting
 * out the database once per session. Simulated time (ms). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/worker/head_announce.h"

static struct jb_head_schedule *fresh(long long interval_ms) {
  struct jb_head_schedule *s = malloc(sizeof *s);
  assert_non_null(s);
  jb_head_schedule_init(s, interval_ms);
  return s;
}

static void once_an_interval_the_newest(void **state) {
  (void)state;
  struct jb_head_schedule *s = fresh(100);
  char job[129];
  long long after, wake;
  assert_false(jb_head_next(s, 0, false, job, &after, &wake));
  assert_int_equal(wake, 1000); /* nothing waits */
  /* a first head: at once */
  assert_int_equal(jb_head_committed(s, "job-a", 5, 0), 0);
  assert_true(jb_head_next(s, 0, false, job, &after, &wake));
  assert_string_equal(job, "job-a");
  assert_int_equal(after, 0);
  jb_head_done(s, "job-a", true, 5, false);
  /* more heads within the interval: one announcement when it is up, after head 5 */
  assert_int_equal(jb_head_committed(s, "job-a", 6, 10), 0);
  assert_int_equal(jb_head_committed(s, "job-a", 7, 20), 1); /* already waiting: no wake */
  assert_false(jb_head_next(s, 30, false, job, &after, &wake));
  assert_int_equal(wake, 100);
  assert_true(jb_head_next(s, 100, false, job, &after, &wake));
  assert_int_equal(after, 5);
  jb_head_done(s, "job-a", true, 7, false);
  assert_false(jb_head_next(s, 300, false, job, &after, &wake));
  /* a failed one is tried again an interval later */
  assert_int_equal(jb_head_committed(s, "job-a", 8, 400), 0);
  assert_true(jb_head_next(s, 400, false, job, &after, &wake));
  jb_head_done(s, "job-a", false, 0, false);
  assert_false(jb_head_next(s, 450, false, job, &after, &wake));
  assert_int_equal(wake, 500);
  assert_true(jb_head_next(s, 500, false, job, &after, &wake));
  assert_int_equal(after, 7);
  free(s);
}

/* Sessions whose agents read in a loop, an announcer that takes 40 ms an announcement: five
 * sessions need 200 ms a round, over the 100 ms interval. Each session must still be announced
 * every round or so — not the first sessions over and over and the last never. */
static void none_starves(void **state) {
  (void)state;
  struct jb_head_schedule *s = fresh(100);
  enum { N = 5, COST = 40 };
  long long last[N], seq = 0, now = 0;
  char job[129];
  for (int i = 0; i < N; i++) last[i] = -1;
  while (now < 3000) {
    for (int i = 0; i < N; i++) { /* every session committed a head since the last turn */
      char name[16];
      snprintf(name, sizeof name, "job-%d", i);
      assert_in_range(jb_head_committed(s, name, ++seq, now), 0, 1);
    }
    long long after, wake;
    if (!jb_head_next(s, now, false, job, &after, &wake)) {
      now = wake;
      continue;
    }
    now += COST;
    jb_head_done(s, job, true, seq, false);
    int i = atoi(job + 4);
    if (last[i] >= 0) assert_true(now - last[i] <= N * COST + 100);
    last[i] = now;
  }
  for (int i = 0; i < N; i++) {
    char m[64];
    snprintf(m, sizeof m, "job-%d last announced at %lld", i, last[i]);
    if (last[i] < 3000 - N * COST - 100) fail_msg("%s", m);
  }
  free(s);
}

/* Stopping: every waiting session is due at once; the first failure gives up the rest. */
static void stop_gives_up_at_the_first_failure(void **state) {
  (void)state;
  struct jb_head_schedule *s = fresh(100);
  char job[129];
  long long after, wake;
  for (int i = 0; i < 50; i++) {
    char name[16];
    snprintf(name, sizeof name, "job-%d", i);
    assert_int_equal(jb_head_committed(s, name, i + 1, 0), 0);
    assert_true(jb_head_next(s, 0, false, job, &after, &wake));
    jb_head_done(s, job, true, i + 1, false);
    assert_int_equal(jb_head_committed(s, name, i + 100, 10), 0); /* waits for the interval */
  }
  assert_false(jb_head_next(s, 20, false, job, &after, &wake));
  /* stopping: due now, all of them */
  assert_true(jb_head_next(s, 20, true, job, &after, &wake));
  jb_head_done(s, job, true, 0, true);
  assert_true(jb_head_next(s, 20, true, job, &after, &wake));
  /* the database fails: nothing more is tried (each try could wait out a connect timeout) */
  jb_head_done(s, job, false, 0, true);
  assert_false(jb_head_next(s, 20, true, job, &after, &wake));
  free(s);
}

/* The table: a session waiting is never dropped for another; one that is not makes room. */
static void slots(void **state) {
  (void)state;
  struct jb_head_schedule *s = fresh(100);
  char name[32], job[129];
  long long after, wake;
  for (int i = 0; i < JB_HEAD_SLOTS; i++) {
    snprintf(name, sizeof name, "job-%d", i);
    assert_int_equal(jb_head_committed(s, name, 1, i), 0);
  }
  assert_int_equal(jb_head_committed(s, "job-new", 1, 2000), -1);
  assert_int_equal(jb_head_committed(s, "job-7", 2, 2000), 1); /* a known one still counts */
  assert_true(jb_head_next(s, 2000, false, job, &after, &wake));
  assert_string_equal(job, "job-0"); /* made due first */
  jb_head_done(s, job, true, 1, false);
  assert_int_equal(jb_head_committed(s, "job-new", 1, 2001), 0); /* took job-0's slot */
  int handed = 0;
  while (jb_head_next(s, 2001, false, job, &after, &wake)) {
    assert_string_not_equal(job, "job-0");
    if (!strcmp(job, "job-new")) assert_int_equal(after, 0);
    handed++;
    jb_head_done(s, job, true, 1, false);
  }
  assert_int_equal(handed, JB_HEAD_SLOTS); /* the 1,023 left and the new one, each once */
  free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(once_an_interval_the_newest),
      cmocka_unit_test(none_starves),
      cmocka_unit_test(stop_gives_up_at_the_first_failure),
      cmocka_unit_test(slots),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
