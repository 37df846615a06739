/* test_memcg.c — a container's memory cgroup (sandbox/worker/memcg.h): the path found in
 * /proc/PID/cgroup text of both hierarchies, the OOM counters of both file formats, and the
 * cgroup of this very process read for real. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/worker/memcg.h"

static void path_v1_and_v2(void **state) {
  (void)state;
  char p[256];
  bool v2 = true;
  const char *v1 =
      "12:pids:/docker/abc\n"
      "9:memory:/docker/41394c206ffd\n"
      "1:name=systemd:/docker/abc\n"
      "0::/system.slice/containerd.service\n";
  assert_int_equal(jb_memcg_path_parse(v1, p, sizeof p, &v2), 0);
  assert_string_equal(p, "/docker/41394c206ffd");
  assert_false(v2);
  /* memory among other controllers of one hierarchy */
  assert_int_equal(jb_memcg_path_parse("4:cpu,memory,blkio:/x/y\n", p, sizeof p, &v2), 0);
  assert_string_equal(p, "/x/y");
  /* "memoryx" is not "memory" */
  assert_int_equal(jb_memcg_path_parse("4:memoryx:/no\n", p, sizeof p, &v2), -1);
  /* v2 only */
  assert_int_equal(jb_memcg_path_parse("0::/system.slice/docker-41394c.scope\n", p, sizeof p, &v2),
                   0);
  assert_string_equal(p, "/system.slice/docker-41394c.scope");
  assert_true(v2);
  /* too long for the buffer; nothing at all */
  assert_int_equal(jb_memcg_path_parse("0::/0123456789\n", p, 8, &v2), -1);
  assert_int_equal(jb_memcg_path_parse("", p, sizeof p, &v2), -1);
}

static void counts_both_formats(void **state) {
  (void)state;
  struct jb_memcg_counts c = {0};
  jb_memcg_counts_parse("low 0\nhigh 0\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n", true, &c);
  assert_int_equal(c.oom_kill, 1);
  assert_int_equal(c.oom, 2);
  assert_true(jb_memcg_oom(&c));
  c = (struct jb_memcg_counts){0};
  jb_memcg_counts_parse("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", false, &c);
  assert_false(jb_memcg_oom(&c));
  jb_memcg_counts_parse("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", false, &c);
  assert_int_equal(c.oom_kill, 3);
  assert_true(jb_memcg_oom(&c));
  /* v1's file has no "oom" line to count; v2's "oom_group_kill" is not oom_kill */
  c = (struct jb_memcg_counts){0};
  jb_memcg_counts_parse("oom 5\noom_group_kill 4\n", false, &c);
  assert_false(jb_memcg_oom(&c));
}

/* This process's own memory cgroup, where the host has one mounted at /sys/fs/cgroup. */
static void own_cgroup(void **state) {
  (void)state;
  struct jb_memcg m;
  jb_error err = {0};
  if (jb_memcg_open(getpid(), "/sys/fs/cgroup", &m, &err) < 0) {
    printf("# no memory cgroup here: %s\n", err.msg);
    skip();
  }
  struct jb_memcg_counts c;
  int rc = jb_memcg_read(&m, &c, &err);
  /* the root cgroup of v1 has memory.oom_control; v2's root has no memory.events */
  if (rc < 0) printf("# %s\n", err.msg);
  assert_true(rc == 0 || m.v2);
  assert_true(c.oom_kill >= 0);
  jb_memcg_close(&m);
  assert_int_equal(m.dirfd, -1);
  assert_int_equal(jb_memcg_read(&m, &c, &err), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(path_v1_and_v2),
      cmocka_unit_test(counts_both_formats),
      cmocka_unit_test(own_cgroup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
