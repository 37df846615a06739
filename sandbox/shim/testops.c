/* testops.c — the test-only attacks of jailbox-shim-test (see testops.h). Every
 * dangerous call runs in a forked child so that a kill by the syscall filter is observed by
 * the shim (and reported) instead of ending the session. */
#define _GNU_SOURCE
#include "sandbox/shim/testops.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *errname(int e) {
  const char *n = strerrorname_np(e);
  return n ? n : "?";
}

/* The call named `what`, with arguments that do nothing harmful if it were allowed.
 * Returns the raw result (-1 with errno on failure). */
static long attempt(const char *what) {
  if (!strcmp(what, "mount")) return mount("none", "/tmp", "tmpfs", 0, NULL);
  if (!strcmp(what, "umount2")) return umount2("/tmp", MNT_DETACH);
  if (!strcmp(what, "pivot_root")) return syscall(SYS_pivot_root, "/tmp", "/tmp");
  if (!strcmp(what, "chroot")) return chroot("/tmp");
  if (!strcmp(what, "unshare")) return unshare(CLONE_NEWNS);
  if (!strcmp(what, "unshare_user")) return unshare(CLONE_NEWUSER);
  if (!strcmp(what, "setns")) return syscall(SYS_setns, 0, 0);
  if (!strcmp(what, "clone_newuser")) {
    long r = syscall(SYS_clone, (unsigned long)(CLONE_NEWUSER | SIGCHLD), NULL, NULL, NULL, 0);
    if (r == 0) _exit(0);
    if (r > 0) waitpid((pid_t)r, NULL, 0);
    return r > 0 ? 0 : r;
  }
  if (!strcmp(what, "fork")) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    if (p > 0) waitpid(p, NULL, 0);
    return p > 0 ? 0 : -1;
  }
  if (!strcmp(what, "ptrace")) return ptrace(PTRACE_TRACEME, 0, NULL, NULL);
  if (!strcmp(what, "kexec_load")) return syscall(SYS_kexec_load, 0UL, 0UL, NULL, 0UL);
  if (!strcmp(what, "bpf")) return syscall(SYS_bpf, 0, NULL, 0);
  if (!strcmp(what, "keyctl")) return syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3, 0);
  if (!strcmp(what, "add_key")) return syscall(SYS_add_key, "user", "jb", "x", 1, -3);
  if (!strcmp(what, "init_module")) return syscall(SYS_init_module, NULL, 0UL, "");
  if (!strcmp(what, "reboot")) return syscall(SYS_reboot, 0, 0, 0, NULL);
  if (!strcmp(what, "perf_event_open")) return syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0UL);
  if (!strcmp(what, "userfaultfd")) return syscall(SYS_userfaultfd, 0);
  if (!strcmp(what, "open_by_handle_at")) return syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0);
  if (!strcmp(what, "io_uring_setup")) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    long r = syscall(SYS_io_uring_setup, 1, &p);
    if (r >= 0) close((int)r);
    return r;
  }
  if (!strcmp(what, "ioctl_tiocsti")) return syscall(SYS_ioctl, 0, (unsigned long)TIOCSTI, "x");
  if (!strcmp(what, "ioctl_tiocsti_high"))
    return syscall(SYS_ioctl, 0, (unsigned long)TIOCSTI | 0xdead00000000UL, "x");
  if (!strcmp(what, "ioctl_fionread")) { /* an ordinary ioctl: must pass the filter */
    /* on a pipe of its own: stdin may be a host socket (the shim channel), for which gVisor
     * answers FIONREAD with an error of its own, not the filter's */
    int n, p[2];
    if (pipe2(p, O_CLOEXEC) < 0) return -1;
    long r = syscall(SYS_ioctl, p[0], (unsigned long)FIONREAD, &n);
    close(p[0]);
    close(p[1]);
    return r;
  }
  if (!strcmp(what, "connect_stdin")) { /* connect(2) on a socket the jail already holds */
    struct sockaddr_un a = {.sun_family = AF_UNIX, .sun_path = "/workspace/host.sock"};
    return connect(0, (struct sockaddr *)&a, sizeof a);
  }
  if (!strcmp(what, "socketpair")) {
    int sv[2];
    long r = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
    if (r == 0) close(sv[0]), close(sv[1]);
    return r;
  }
  if (!strcmp(what, "getpid")) return syscall(SYS_getpid);
  errno = ENOSYS;
  return -2;
}

static json_t *op_syscall(const json_t *req, jb_error *err) {
  const char *what = json_string_value(json_object_get(req, "name"));
  if (!what) return jb_fail(err, EINVAL, "field 'name' is required"), NULL;
  pid_t p = fork();
  if (p < 0) return jb_fail_errno(err, errno, "fork"), NULL;
  if (p == 0) {
    long r = attempt(what);
    if (r == -2) _exit(254);
    _exit(r < 0 ? (errno & 0xff) : 0);
  }
  int st = 0;
  while (waitpid(p, &st, 0) < 0 && errno == EINTR) {}
  if (WIFSIGNALED(st))
    return json_pack("{s:s, s:s, s:i, s:s}", "name", what, "outcome", "killed", "signal",
                     WTERMSIG(st), "signalName",
                     sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
  int code = WEXITSTATUS(st);
  if (code == 254) return jb_fail(err, EINVAL, "unknown syscall test '%.64s'", what), NULL;
  if (code == 0) return json_pack("{s:s, s:s}", "name", what, "outcome", "allowed");
  return json_pack("{s:s, s:s, s:i, s:s}", "name", what, "outcome", "failed", "errno", code,
                   "errnoName", errname(code));
}

static json_t *op_write(const json_t *req, jb_error *err) {
  const char *path = json_string_value(json_object_get(req, "path"));
  if (!path) return jb_fail(err, EINVAL, "field 'path' is required"), NULL;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    int e = errno;
    return json_pack("{s:b, s:i, s:s}", "written", 0, "errno", e, "errnoName", errname(e));
  }
  ssize_t n = write(fd, "x", 1);
  int e = n == 1 ? 0 : errno;
  close(fd);
  unlink(path);
  return json_pack("{s:b, s:i, s:s}", "written", n == 1, "errno", e, "errnoName",
                   e ? errname(e) : "");
}

/* connect(2) to the Unix socket `path`: a socket file a buyer left in the workspace, which
 * runsc --host-uds=open would let a sandboxed process reach. */
static json_t *connect_unix(const char *path, jb_error *err) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) return jb_fail(err, EINVAL, "'path' is too long"), NULL;
  memcpy(a.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    return json_pack("{s:b, s:s, s:i, s:s}", "connected", 0, "stage", "socket", "errno", e,
                     "errnoName", errname(e));
  }
  int e = connect(fd, (struct sockaddr *)&a, sizeof a) < 0 ? errno : 0;
  close(fd);
  return json_pack("{s:b, s:s, s:i, s:s}", "connected", e == 0, "stage", "connect", "errno", e,
                   "errnoName", e ? errname(e) : "");
}

static json_t *op_connect(const json_t *req, jb_error *err) {
  const char *upath = json_string_value(json_object_get(req, "path"));
  if (upath) return connect_unix(upath, err);
  const char *host = json_string_value(json_object_get(req, "host"));
  json_int_t port = json_integer_value(json_object_get(req, "port"));
  json_int_t tmo = json_integer_value(json_object_get(req, "timeoutMs"));
  if (!host || port <= 0 || port > 65535)
    return jb_fail(err, EINVAL, "fields 'host' and 'port' are required"), NULL;
  if (tmo <= 0) tmo = 2000;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
    return jb_fail(err, EINVAL, "'host' must be an IPv4 address"), NULL;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    return json_pack("{s:b, s:s, s:i, s:s}", "connected", 0, "stage", "socket", "errno", e,
                     "errnoName", errname(e));
  }
  int e = 0;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    e = errno;
    if (e == EINPROGRESS) {
      struct pollfd pf = {.fd = fd, .events = POLLOUT};
      int pr = poll(&pf, 1, (int)tmo);
      if (pr == 0)
        e = ETIMEDOUT;
      else {
        socklen_t l = sizeof e;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
      }
    }
  }
  close(fd);
  return json_pack("{s:b, s:s, s:i, s:s}", "connected", e == 0, "stage", "connect", "errno", e,
                   "errnoName", e ? errname(e) : "");
}

static json_t *op_forkbomb(const json_t *req, jb_error *err) {
  json_int_t max = json_integer_value(json_object_get(req, "max"));
  if (max <= 0 || max > 100000) max = 4096;
  pid_t *kids = calloc((size_t)max, sizeof *kids);
  if (!kids) return jb_fail(err, ENOMEM, "out of memory"), NULL;
  json_int_t n = 0;
  int e = 0;
  while (n < max) {
    pid_t p = fork();
    if (p < 0) {
      e = errno;
      break;
    }
    if (p == 0) {
      for (;;) pause();
    }
    kids[n++] = p;
  }
  for (json_int_t i = 0; i < n; i++) kill(kids[i], SIGKILL);
  for (json_int_t i = 0; i < n; i++)
    while (waitpid(kids[i], NULL, 0) < 0 && errno == EINTR) {}
  free(kids);
  return json_pack("{s:I, s:b, s:i, s:s}", "forked", n, "stopped", e != 0, "errno", e, "errnoName",
                   e ? errname(e) : "");
}

static json_t *op_memhog(const json_t *req, jb_error *err) {
  json_int_t mib = json_integer_value(json_object_get(req, "mib"));
  if (mib <= 0) return jb_fail(err, EINVAL, "field 'mib' is required"), NULL;
  json_int_t got = 0;
  for (; got < mib; got++) {
    char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) break;
    for (size_t i = 0; i < 1 << 20; i += 4096) p[i] = (char)i | 1; /* touch every page */
  }
  return json_pack("{s:I}", "allocatedMiB", got); /* the memory is kept: a hog holds on */
}

/* The shim itself misbehaving, for the escape signals (not in a child: the point
 * is that the shim ends or its channel breaks). how: "sigsys" (a call the Wall 3 filter
 * kills, made by the shim), "exit" (status `code`); emit: "malformed" (a line that is not
 * JSON), "oversized" (a line over JB_SHIM_MAX_LINE) written straight to stdout. */
static json_t *op_die(const json_t *req, jb_error *err) {
  const char *how = json_string_value(json_object_get(req, "how"));
  if (how && !strcmp(how, "sigsys")) {
    ptrace(PTRACE_TRACEME, 0, NULL, NULL);
    jb_fail(err, EPERM, "ptrace was not killed by the filter");
    return NULL;
  }
  if (how && !strcmp(how, "exit")) _exit((int)json_integer_value(json_object_get(req, "code")));
  jb_fail(err, EINVAL, "'how' must be sigsys or exit");
  return NULL;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static json_t *op_emit(const json_t *req, jb_error *err) {
  const char *what = json_string_value(json_object_get(req, "what"));
  if (what && !strcmp(what, "malformed")) {
    static const char bad[] = "{\"id\": 1, \"ok\": tru\n";
    write_all(1, bad, sizeof bad - 1);
  } else if (what && !strcmp(what, "oversized")) {
    size_t n = 2 * 1024 * 1024 + 64;
    char *big = malloc(n + 1);
    if (!big) return jb_fail(err, ENOMEM, "out of memory"), NULL;
    memset(big, 'x', n);
    big[n] = '\n';
    write_all(1, big, n + 1);
    free(big);
  } else {
    jb_fail(err, EINVAL, "'what' must be malformed or oversized");
    return NULL;
  }
  return json_pack("{s:b}", "emitted", 1);
}

/* test.arm: the next read, list or stat — or, with `target`, the next request of that op (e.g.
 * "recall") — is answered with a malformed line ("malformed") or an answer without its result
 * ("noresult"); the shim serves one request at a time: no lock */
static int armed_kind; /* 0: not armed */
static char armed_op[32];

int jb_shim_test_malformed_now(const char *op) {
  if (!armed_kind || !op) return 0;
  if (armed_op[0] ? strcmp(op, armed_op) != 0
                  : strcmp(op, "read") && strcmp(op, "list") && strcmp(op, "stat"))
    return 0;
  int k = armed_kind;
  armed_kind = 0;
  return k;
}

static json_t *op_arm(const json_t *req, jb_error *err) {
  const char *what = json_string_value(json_object_get(req, "what"));
  const char *op = json_string_value(json_object_get(req, "target"));
  int kind = !what ? 0 : !strcmp(what, "malformed") ? 1 : !strcmp(what, "noresult") ? 2 : 0;
  if (!kind) {
    jb_fail(err, EINVAL, "'what' must be malformed or noresult");
    return NULL;
  }
  if (op && (!op[0] || strlen(op) >= sizeof armed_op)) {
    jb_fail(err, EINVAL, "'target' must name an op");
    return NULL;
  }
  snprintf(armed_op, sizeof armed_op, "%s", op ? op : "");
  armed_kind = kind;
  return json_pack("{s:b}", "armed", 1);
}

/* test.renameat2 {from, to, flags: noreplace|exchange|whiteout|none}: renameat2 of two
 * names directly under /workspace, to learn what the runtime's file systems support. */
static json_t *op_renameat2(const json_t *req, jb_error *err) {
  const char *from = json_string_value(json_object_get(req, "from"));
  const char *to = json_string_value(json_object_get(req, "to"));
  const char *fl = json_string_value(json_object_get(req, "flags"));
  if (!from || !to || !fl || strchr(from, '/') || strchr(to, '/')) {
    jb_fail(err, EINVAL, "renameat2 wants from, to (plain names) and flags");
    return NULL;
  }
  unsigned flags = !strcmp(fl, "noreplace")  ? 1u /* RENAME_NOREPLACE */
                   : !strcmp(fl, "exchange") ? 2u /* RENAME_EXCHANGE */
                   : !strcmp(fl, "whiteout") ? 4u /* RENAME_WHITEOUT */
                                             : 0u;
  int dir = open("/workspace", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) {
    jb_fail(err, errno, "open /workspace");
    return NULL;
  }
  long r = syscall(SYS_renameat2, dir, from, dir, to, flags);
  int e = r < 0 ? errno : 0;
  close(dir);
  return json_pack("{s:b, s:i, s:s}", "ok", r == 0, "errno", e, "errnoName", e ? errname(e) : "");
}

json_t *jb_shim_test_op(const char *name, const json_t *req, jb_error *err) {
  if (!strcmp(name, "die")) return op_die(req, err);
  if (!strcmp(name, "emit")) return op_emit(req, err);
  if (!strcmp(name, "arm")) return op_arm(req, err);
  if (!strcmp(name, "syscall")) return op_syscall(req, err);
  if (!strcmp(name, "write")) return op_write(req, err);
  if (!strcmp(name, "connect")) return op_connect(req, err);
  if (!strcmp(name, "forkbomb")) return op_forkbomb(req, err);
  if (!strcmp(name, "memhog")) return op_memhog(req, err);
  if (!strcmp(name, "renameat2")) return op_renameat2(req, err);
  jb_fail(err, ENOSYS, "unknown test op '%.64s'", name);
  return NULL;
}
