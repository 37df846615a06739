/* test_exec_filter.c — exec's syscall filter (sandbox/worker/filter.c) installed in a forked
 * child on this host's kernel: each rule class does what the table says (kill for the
 * escape-shaped, EPERM for the uncommon and for socket families beyond the local ones, ENOSYS
 * for clone3), and what commands need stays allowed. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/worker/filter.h"

enum probe { P_GETPID, P_UNIX, P_INET6, P_NETLINK, P_UNSHARE, P_MOUNT, P_CLONE3, P_CHROOT };

/* Runs `p` in a child under the exec filter: its exit code (the errno seen, 0 for success) or
 * 1000 + the signal that killed it. */
static int run(enum probe p) {
  unsigned char *bpf = NULL;
  size_t len = 0;
  jb_error err = {0};
  assert_int_equal(jb_exec_filter_compile(&bpf, &len, NULL, &err), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct sock_fprog prog = {.len = (unsigned short)(len / sizeof(struct sock_filter)),
                              .filter = (struct sock_filter *)bpf};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
      _exit(200);
    long r = 0;
    switch (p) {
      case P_GETPID:
        r = getpid() > 0 ? 0 : -1;
        break;
      case P_UNIX:
        r = socket(AF_UNIX, SOCK_STREAM, 0);
        break;
      case P_INET6:
        r = socket(AF_INET6, SOCK_STREAM, 0);
        break;
      case P_NETLINK:
        r = socket(AF_NETLINK, SOCK_RAW, 0);
        break;
      case P_UNSHARE:
        r = unshare(CLONE_NEWUSER);
        break;
      case P_MOUNT:
        r = syscall(SYS_mount, "none", "/", "tmpfs", 0, NULL);
        break;
      case P_CLONE3:
        r = syscall(SYS_clone3, NULL, 0);
        break;
      case P_CHROOT:
        r = chroot("/");
        break;
    }
    _exit(r < 0 ? errno : 0);
  }
  free(bpf);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return WIFSIGNALED(st) ? 1000 + WTERMSIG(st) : WEXITSTATUS(st);
}

static void allowed(void **state) {
  (void)state;
  assert_int_equal(run(P_GETPID), 0);
  assert_int_equal(run(P_UNIX), 0);
  int r = run(P_INET6); /* allowed by the filter; a host without IPv6 may say EAFNOSUPPORT */
  assert_true(r == 0 || r == EAFNOSUPPORT);
}

static void escape_shaped_kill(void **state) {
  (void)state;
  assert_int_equal(run(P_UNSHARE), 1000 + SIGSYS);
  assert_int_equal(run(P_MOUNT), 1000 + SIGSYS);
}

static void uncommon_fail(void **state) {
  (void)state;
  assert_int_equal(run(P_NETLINK), EPERM);
  assert_int_equal(run(P_CHROOT), EPERM);
  assert_int_equal(run(P_CLONE3), ENOSYS);
}

static void described(void **state) {
  (void)state;
  json_t *d = jb_exec_filter_describe();
  assert_non_null(d);
  assert_string_equal(json_string_value(json_object_get(d, "default")), "allow");
  assert_true(json_array_size(json_object_get(d, "kill")) >= 25);
  json_decref(d);
  struct jb_filter_info a = {0}, b = {0};
  unsigned char *x = NULL, *y = NULL;
  size_t xl = 0, yl = 0;
  jb_error err = {0};
  assert_int_equal(jb_exec_filter_compile(&x, &xl, &a, &err), 0);
  assert_int_equal(jb_filter_compile(&y, &yl, &b, &err), 0);
  assert_true(a.kill_rules > 0 && a.errno_rules > 0);
  assert_true(xl != yl || memcmp(x, y, xl) != 0); /* distinct from the shim's */
  free(x);
  free(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(allowed),
      cmocka_unit_test(escape_shaped_kill),
      cmocka_unit_test(uncommon_fail),
      cmocka_unit_test(described),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
