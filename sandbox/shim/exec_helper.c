/* exec_helper.c — the helper every command of exec starts through, `jailbox-shim --exec FD`
 * (see spawner.h jb_exec_helper): inside the command's jail, after setpriv, it takes the
 * command the spawner hands over (spawner.c hand_over), applies its limits, environment and
 * cwd, and runs it as its child. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/proto/shim.h"
#include "sandbox/shim/spawner.h"

extern char **environ;

/* Reads exactly `n` bytes from `fd`. 0, or -1 (end or error). */
static int read_full(int fd, void *p, size_t n) {
  char *q = p;
  while (n > 0) {
    ssize_t r = read(fd, q, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    q += r;
    n -= (size_t)r;
  }
  return 0;
}

/* The next NUL-terminated string of the request at *pos (below end), or NULL. */
static char *next_str(char *buf, size_t end, size_t *pos) {
  if (*pos >= end) return NULL;
  char *s = buf + *pos;
  char *z = memchr(s, '\0', end - *pos);
  if (!z) return NULL;
  *pos = (size_t)(z - buf) + 1;
  return s;
}

/* Says `what` went wrong on stderr (the command's result shows it) and returns 125. */
static int helper_fail(const char *what) {
  fprintf(stderr, "jailbox-shim --exec: %s\n", what);
  return 125;
}

int jb_exec_helper(int argc, char **argv) {
  if (argc != 3) return helper_fail("usage: --exec FD");
  char *endp;
  long cfd = strtol(argv[2], &endp, 10);
  if (*endp || cfd < 3 || cfd > 1000) return helper_fail("usage: --exec FD");
  int ctl = (int)cfd;
  /* nothing of bwrap's or setpriv's stays open but the socket the request comes on */
  if (syscall(SYS_close_range, 3U, (unsigned)ctl - 1, 0U) < 0)
    for (int fd = 3; fd < ctl; fd++) close(fd);
  if (syscall(SYS_close_range, (unsigned)ctl + 1, ~0U, 0U) < 0)
    for (int fd = ctl + 1; fd < 1024; fd++) close(fd);
  if (write(ctl, "r", 1) != 1) return 125; /* ready: the spawner hands the command over */
  uint32_t len = 0;
  char cbuf[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {.iov_base = &len, .iov_len = sizeof len};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  ssize_t got;
  while ((got = recvmsg(ctl, &mh, MSG_WAITALL | MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {}
  if (got == 0) return 125; /* discarded before a command came */
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  int in = -1;
  if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
      cm->cmsg_len == CMSG_LEN(sizeof(int)))
    memcpy(&in, CMSG_DATA(cm), sizeof in);
  if (got != (ssize_t)sizeof len || in < 0 || len == 0 || len > JB_HELPER_REQUEST_MAX)
    return helper_fail("bad request from the spawner");
  char *buf = malloc(len);
  if (!buf || read_full(ctl, buf, len) < 0) return helper_fail("the request was cut short");
  fcntl(ctl, F_SETFD, FD_CLOEXEC); /* kept to say when the command ended; not the command's */
  if (dup2(in, 0) < 0) return helper_fail("stdin");
  close(in);
  size_t pos = 0;
  char *cwd = next_str(buf, len, &pos), *fs = next_str(buf, len, &pos),
       *np = next_str(buf, len, &pos), *ac = next_str(buf, len, &pos);
  if (!cwd || !fs || !np || !ac) return helper_fail("bad request from the spawner");
  long n = strtol(ac, NULL, 10);
  if (n < 1 || n > JB_SPAWNER_MAX_ARGV) return helper_fail("bad argv from the spawner");
  char **cargv = calloc((size_t)n + 1, sizeof *cargv);
  if (!cargv) return helper_fail("out of memory");
  for (long k = 0; k < n; k++)
    if (!(cargv[k] = next_str(buf, len, &pos))) return helper_fail("bad argv from the spawner");
  char *ec = next_str(buf, len, &pos);
  long ne = ec ? strtol(ec, NULL, 10) : -1;
  if (ne < 0 || ne > JB_SPAWNER_MAX_ENV) return helper_fail("bad env from the spawner");
  for (long k = 0; k < ne; k++) {
    char *kv = next_str(buf, len, &pos);
    if (!kv || !strchr(kv, '=') || putenv(kv) != 0) return helper_fail("bad env from the spawner");
  }
  /* the request's limits, hard and soft: this process (uid 65534, no capability) can lower
   * them only, and neither it nor the command can raise them again */
  struct rlimit fl = {(rlim_t)strtoll(fs, NULL, 10), (rlim_t)strtoll(fs, NULL, 10)};
  struct rlimit pl = {(rlim_t)strtoll(np, NULL, 10), (rlim_t)strtoll(np, NULL, 10)};
  if (setrlimit(RLIMIT_FSIZE, &fl) < 0 || setrlimit(RLIMIT_NPROC, &pl) < 0)
    return helper_fail("cannot set the command's limits");
  if (chdir(cwd) < 0) {
    fprintf(stderr, "jailbox-shim --exec: cwd %s: %s\n", cwd, strerror(errno));
    return 125;
  }
  /* The command runs in a process group of its own below this process, which stays as its
   * parent in the same session. bwrap's --new-session made this process a session leader
   * whose parent is outside the session, so a group it led would be orphaned from its start,
   * and gVisor sends SIGHUP and SIGCONT to an orphaned group with a stopped member whenever
   * one of its members exits (Linux only when the group becomes orphaned): a pause of the
   * command's tree would end it. With this parent in the session the group is not orphaned. */
  /* posix_spawn: a vfork-style clone (the address space is not copied, which gVisor makes
   * costly) that puts the child in a group of its own and executes PROGRAM searched in PATH */
  posix_spawnattr_t at;
  pid_t pid;
  int e = posix_spawnattr_init(&at);
  if (!e) e = posix_spawnattr_setpgroup(&at, 0);
  if (!e) e = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  if (!e) e = posix_spawnp(&pid, cargv[0], NULL, &at, cargv, environ);
  posix_spawnattr_destroy(&at);
  if (e) {
    fprintf(stderr, "%s: %s\n", cargv[0], strerror(e));
    if (write(ctl, "x", 1) < 0) {}
    return e == ENOENT ? 127 : 126;
  }
  /* the command's output ends with the command: hold none of its streams */
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd <= 2; fd++)
    if (null >= 0 && null != fd) dup2(null, fd);
  int ws;
  pid_t w;
  while ((w = waitpid(pid, &ws, 0)) < 0 && errno == EINTR) {}
  if (write(ctl, "x", 1) < 0) {} /* the end of the command, for the spawner's timings */
  if (w != pid) return 125;
  /* as bwrap reports it: the exit code, or 128 + the signal */
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

int jb_memfd_with(const char *name, const void *p, size_t len) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -1;
  const char *q = p;
  while (len > 0) {
    ssize_t w = write(fd, q, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      close(fd);
      return -1;
    }
    q += w;
    len -= (size_t)w;
  }
  if (lseek(fd, 0, SEEK_SET) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}
