/* test_keeper.c — the descriptor keeper's socket against a process of another uid (run as
 * root: the stranger is uid 65534): a socket planted at the keeper's path gets no session
 * channel from keeper_put and hands no forged one to keeper_get; a lock file planted as a
 * link or under another owner keeps no keeper going. This binary is also the keeper that
 * keeper_put starts ("--keeper PATH"). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/worker/worker.h"

/* keeper.c logs through the worker's slog; nothing to log here */
void slog(struct jb_worker *w, enum jb_log_level lvl, const char *job, const char *msg, ...) {
  (void)w, (void)lvl, (void)job, (void)msg;
}

#define STRANGER 65534

static char dir[64];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/jbkeep-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  return chmod(dir, 0777); /* a shared directory, as /tmp is (TMPDIR is the default) */
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* A stranger (uid 65534) listening at `path`: answers one connection, for PUT "OK" (it
 * writes to `report` how many descriptors came with it), for GET one entry with a forged
 * channel then "END". Its pid; `ready` is written when it listens. */
static pid_t stranger(const char *path, int report) {
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(ready[0]);
    if (setresgid(STRANGER, STRANGER, STRANGER) < 0 || setresuid(STRANGER, STRANGER, STRANGER) < 0)
      _exit(3);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int l = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    umask(0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 4) < 0) _exit(4);
    (void)!write(ready[1], "r", 1);
    struct pollfd pf = {.fd = l, .events = POLLIN};
    int got = 0;
    if (poll(&pf, 1, 3000) == 1) {
      int c = accept(l, NULL, NULL);
      char text[600];
      union {
        char buf[CMSG_SPACE(sizeof(int) * 3)];
        struct cmsghdr align;
      } u;
      struct iovec iov = {.iov_base = text, .iov_len = sizeof text - 1};
      struct msghdr m = {
          .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
      ssize_t r = c >= 0 ? recvmsg(c, &m, 0) : -1;
      if (r > 0) {
        text[r] = '\0';
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
          if (h->cmsg_type == SCM_RIGHTS) got += (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        if (!strncmp(text, "GET", 3)) {
          int fake[2];
          socketpair(AF_UNIX, SOCK_STREAM, 0, fake);
          union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
          } v = {0};
          const char *ent = "ENT job-of-another fake 100";
          struct iovec io = {.iov_base = (void *)ent, .iov_len = strlen(ent)};
          struct msghdr mm = {.msg_iov = &io,
                              .msg_iovlen = 1,
                              .msg_control = v.buf,
                              .msg_controllen = sizeof v.buf};
          struct cmsghdr *h = CMSG_FIRSTHDR(&mm);
          h->cmsg_level = SOL_SOCKET;
          h->cmsg_type = SCM_RIGHTS;
          h->cmsg_len = CMSG_LEN(sizeof(int));
          memcpy(CMSG_DATA(h), &fake[0], sizeof(int));
          sendmsg(c, &mm, 0);
          send(c, "END", 3, 0);
        } else {
          send(c, "OK", 2, 0);
        }
      }
    }
    (void)!write(report, &got, sizeof got);
    _exit(0);
  }
  close(ready[1]);
  char r;
  assert_int_equal(read(ready[0], &r, 1), 1);
  close(ready[0]);
  return pid;
}

static void put_to_a_stranger(void **state) {
  (void)state;
  struct jb_worker w = {0};
  snprintf(w.keeper_path, sizeof w.keeper_path, "%s/jbk-put.s", dir);
  int rep[2];
  assert_int_equal(pipe(rep), 0);
  pid_t pid = stranger(w.keeper_path, rep[1]);
  close(rep[1]);
  int sp[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  jb_error err = {0};
  /* refused by the stranger, the worker starts its own keeper (this binary), which takes the
   * path over as root may; either way the stranger gets nothing */
  (void)keeper_put(&w, "job-1", "cid-1", sp[0], -1, -1, &err);
  keeper_del(&w, "job-1");
  kill(pid, SIGKILL);
  int got = -1;
  assert_int_equal(read(rep[0], &got, sizeof got), (ssize_t)sizeof got);
  waitpid(pid, NULL, 0);
  assert_int_equal(got, 0); /* the session's channel did not reach another uid */
  close(rep[0]), close(sp[0]), close(sp[1]);
}

static void get_from_a_stranger(void **state) {
  (void)state;
  struct jb_worker w = {0};
  snprintf(w.keeper_path, sizeof w.keeper_path, "%s/jbk-get.s", dir);
  int rep[2];
  assert_int_equal(pipe(rep), 0);
  pid_t pid = stranger(w.keeper_path, rep[1]);
  close(rep[1]);
  struct jb_kept *kept = NULL;
  size_t n = 99;
  jb_error err = {0};
  int rc = keeper_get(&w, &kept, &n, &err);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(rep[0]);
  assert_int_equal(rc, -1);
  assert_int_equal(n, 0); /* no forged channel to re-adopt */
  assert_null(kept);
  kept_free(kept, n);
}

/* keeper_main at `path` in a child: whether it still runs after 300 ms (it serves). */
static bool keeper_serves(const char *path) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(keeper_main(path));
  usleep(300 * 1000);
  bool running = waitpid(pid, NULL, WNOHANG) == 0;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return running;
}

static void planted_lock_files(void **state) {
  (void)state;
  char path[128], lock[160], target[160];
  /* a link: followed, the keeper would make (and lock) a file wherever it points */
  snprintf(path, sizeof path, "%s/jbk-link.s", dir);
  snprintf(lock, sizeof lock, "%s.lock", path);
  snprintf(target, sizeof target, "%s/elsewhere", dir);
  assert_int_equal(symlink(target, lock), 0);
  assert_false(keeper_serves(path));
  struct stat st;
  assert_int_equal(lstat(target, &st), -1);
  /* another uid's lock file: its owner could hold the lock and listen at the path itself */
  snprintf(path, sizeof path, "%s/jbk-owner.s", dir);
  snprintf(lock, sizeof lock, "%s.lock", path);
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  assert_true(fd >= 0);
  assert_int_equal(fchown(fd, STRANGER, STRANGER), 0);
  close(fd);
  assert_false(keeper_serves(path));
  /* ours: it serves */
  snprintf(path, sizeof path, "%s/jbk-ours.s", dir);
  assert_true(keeper_serves(path));
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--keeper")) return keeper_main(argv[2]);
  if (geteuid() != 0) {
    printf("test_keeper: needs root (a stranger of another uid); skipped\n");
    return 0;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(put_to_a_stranger, setup, teardown),
      cmocka_unit_test_setup_teardown(get_from_a_stranger, setup, teardown),
      cmocka_unit_test_setup_teardown(planted_lock_files, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
