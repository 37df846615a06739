/* keeper.c — the descriptor keeper: a small process, one per worker id, that holds a copy of
 * each session's shim channel (the connected Unix socket the launcher made, the spawner's
 * channel, and a memfd with the workspace grant) so that the shim never sees its channel end
 * when the worker dies or is upgraded. A worker that starts under the same id takes copies back
 * (SCM_RIGHTS) and re-adopts the sessions (launch.c). The keeper runs nothing and reads no
 * line of any shim: it only holds descriptors until the worker drops them.
 *
 * Its socket is "<JAILBOX_SHIM_SOCKET_DIR>/jbk-<16 hex of SHA-256(worker id)>.s" (SOCK_SEQPACKET,
 * mode 0600; each side checks the other's uid (SO_PEERCRED) is its own, so a socket planted at
 * the path by another uid gets no descriptor and hands none). Messages, one packet each, text then
 * descriptors in the same packet:
 *   "PUT <job> <cid> <c><s><g>"  c/s/g are 1 or 0: which of conn, spawner, grant follow, in
 *                                 that order (a PUT replaces the job's entry)
 *   "DEL <job>"                   closes the job's descriptors
 *   "GET"                         answered by one "ENT <job> <cid> <c><s><g>" per entry with
 *                                 copies of its descriptors, then "END"
 * An entry whose shim channel has hung up (its container gone) is let go within a second. The
 * keeper exits once it holds nothing and nobody has talked to it for 30 s. One keeper per
 * path: it holds a lock on "<path>.lock" for its life. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/metrics.h"
#include "sandbox/worker/worker.h"

#define KEEPER_MSG 600
#define KEEPER_IDLE_MS 30000
#define KEEPER_MAX 1024
#define KEEPER_CLIENTS 32

/* ---- packets ------------------------------------------------------------------------------ */

/* Sends `text` with the descriptors of fds[0..n) that are >= 0. 0 or -1. */
static int send_packet(int sock, const char *text, const int fds[3]) {
  int list[3], n = 0;
  for (int i = 0; i < 3; i++)
    if (fds && fds[i] >= 0) list[n++] = fds[i];
  struct iovec iov = {.iov_base = (void *)text, .iov_len = strlen(text)};
  union {
    char buf[CMSG_SPACE(sizeof(int) * 3)];
    struct cmsghdr align;
  } u;
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  if (n > 0) {
    memset(&u, 0, sizeof u);
    m.msg_control = u.buf;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(c), list, sizeof(int) * (size_t)n);
  }
  return sendmsg(sock, &m, MSG_NOSIGNAL) == (ssize_t)iov.iov_len ? 0 : -1;
}

/* Receives one packet into `text` (KEEPER_MSG bytes, terminated) and up to 3 descriptors
 * (O_CLOEXEC) into fds (-1 for the rest), *nfds their count. The length, 0 at the end, -1. */
static ssize_t recv_packet(int sock, char *text, int fds[3], int *nfds, int timeout_ms) {
  for (int i = 0; i < 3; i++) fds[i] = -1;
  *nfds = 0;
  if (timeout_ms >= 0) {
    struct pollfd pf = {.fd = sock, .events = POLLIN};
    if (poll(&pf, 1, timeout_ms) <= 0) return -1;
  }
  struct iovec iov = {.iov_base = text, .iov_len = KEEPER_MSG - 1};
  union {
    char buf[CMSG_SPACE(sizeof(int) * 3)];
    struct cmsghdr align;
  } u;
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  ssize_t r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  if (r < 0) return -1;
  text[r] = '\0';
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int got[3];
    for (size_t i = 0; i < k; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (*nfds < 3)
        got[(*nfds)++] = fd;
      else
        close(fd);
    }
    for (int i = 0; i < *nfds; i++) fds[i] = got[i];
  }
  if (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) {
    for (int i = 0; i < 3; i++)
      if (fds[i] >= 0) close(fds[i]);
    *nfds = 0;
    return -1;
  }
  return r;
}

/* Spreads the descriptors received in order over the flags "<c><s><g>" of `flags`. */
static void place_fds(const char *flags, const int got[3], int nfds, int out[3]) {
  int k = 0;
  for (int i = 0; i < 3; i++) out[i] = (flags[i] == '1' && k < nfds) ? got[k++] : -1;
  for (; k < nfds; k++) close(got[k]);
}

/* ---- the keeper process -------------------------------------------------------------------- */

struct entry {
  char job[129], cid[80];
  int fd[3];
};

static void entry_close(struct entry *e) {
  for (int i = 0; i < 3; i++)
    if (e->fd[i] >= 0) close(e->fd[i]);
}

static int find(struct entry *v, size_t n, const char *job) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i].job, job)) return (int)i;
  return -1;
}

/* Lets go of every entry whose shim channel has hung up (its sandbox is gone: the container
 * was removed while no worker ran to say DEL): what it held can serve nobody, and a keeper
 * holding only such entries would never reach its idle end. An entry without a channel, or
 * with one still connected, stays. */
static void drop_hung_up(struct entry *v, size_t *n) {
  static struct pollfd pf[KEEPER_MAX];
  size_t m = 0;
  for (size_t i = 0; i < *n; i++)
    pf[m++] = (struct pollfd){.fd = v[i].fd[0], .events = POLLRDHUP}; /* fd -1: ignored */
  if (m == 0 || poll(pf, m, 0) <= 0) return;
  for (size_t i = *n; i-- > 0;) {
    if (!(pf[i].revents & (POLLHUP | POLLERR))) continue;
    entry_close(&v[i]);
    v[i] = v[--*n];
  }
}

/* One request on `c`; false when the peer is gone. */
static bool serve_one(int c, struct entry *v, size_t *n) {
  char text[KEEPER_MSG];
  int got[3], nfds;
  if (recv_packet(c, text, got, &nfds, -1) <= 0) return false;
  char job[129] = "", cid[80] = "", flags[4] = "000";
  if (!strncmp(text, "PUT ", 4) && sscanf(text + 4, "%128s %79s %3s", job, cid, flags) == 3) {
    int i = find(v, *n, job);
    bool existing = i >= 0;
    if (!existing && *n < KEEPER_MAX) i = (int)(*n)++;
    if (i < 0) {
      for (int k = 0; k < nfds; k++) close(got[k]);
      return send_packet(c, "FULL", NULL) == 0;
    }
    if (existing) entry_close(&v[i]);
    snprintf(v[i].job, sizeof v[i].job, "%s", job);
    snprintf(v[i].cid, sizeof v[i].cid, "%s", cid);
    place_fds(flags, got, nfds, v[i].fd);
    return send_packet(c, "OK", NULL) == 0;
  }
  for (int k = 0; k < nfds; k++) close(got[k]);
  if (!strncmp(text, "DEL ", 4) && sscanf(text + 4, "%128s", job) == 1) {
    int i = find(v, *n, job);
    if (i >= 0) {
      entry_close(&v[i]);
      v[i] = v[--(*n)];
    }
    return send_packet(c, "OK", NULL) == 0;
  }
  if (!strcmp(text, "GET")) {
    for (size_t i = 0; i < *n; i++) {
      char msg[KEEPER_MSG];
      snprintf(msg, sizeof msg, "ENT %s %s %c%c%c", v[i].job, v[i].cid, v[i].fd[0] >= 0 ? '1' : '0',
               v[i].fd[1] >= 0 ? '1' : '0', v[i].fd[2] >= 0 ? '1' : '0');
      if (send_packet(c, msg, v[i].fd) < 0) return false;
    }
    return send_packet(c, "END", NULL) == 0;
  }
  return send_packet(c, "BAD", NULL) == 0;
}

int keeper_main(const char *path) {
  signal(SIGPIPE, SIG_IGN);
  signal(SIGTERM, SIG_IGN); /* a worker's stop must not end the sessions' channels */
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) return 2;
  memcpy(a.sun_path, path, strlen(path) + 1);
  /* one keeper per path: the lock on "<path>.lock" is held for the keeper's life (two
   * started at once: the second leaves) */
  char lock[4200];
  snprintf(lock, sizeof lock, "%s.lock", path);
  /* the lock file must be ours: not a link to elsewhere, not another uid's (whose flock would
   * keep every keeper out while its owner listens at the path) */
  int lk = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lk < 0) return 1;
  struct stat lst;
  if (fstat(lk, &lst) < 0 || !S_ISREG(lst.st_mode) || lst.st_uid != geteuid()) {
    close(lk);
    return 1;
  }
  if (flock(lk, LOCK_EX | LOCK_NB) < 0) return 0;
  int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  mode_t old = umask(0177);
  /* a socket file left by a keeper that died: nothing listens on it */
  unlink(path);
  int rc = lfd < 0 ? -1 : bind(lfd, (struct sockaddr *)&a, sizeof a);
  umask(old);
  if (rc < 0 || listen(lfd, 16) < 0) return 1;
  static struct entry v[KEEPER_MAX];
  size_t n = 0;
  int clients[KEEPER_CLIENTS];
  size_t nc = 0;
  long long last = jb_now_ms(), swept = last;
  uid_t me = geteuid();
  for (;;) {
    struct pollfd pf[KEEPER_CLIENTS + 1];
    pf[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
    for (size_t i = 0; i < nc; i++) pf[i + 1] = (struct pollfd){.fd = clients[i], .events = POLLIN};
    int pr = poll(pf, nc + 1, 1000);
    if (pr < 0 && errno != EINTR) break;
    if (pr > 0 && (pf[0].revents & POLLIN)) {
      int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
      struct ucred cr;
      socklen_t cl = sizeof cr;
      if (c >= 0 && (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || cr.uid != me ||
                     nc >= KEEPER_CLIENTS)) {
        close(c);
        c = -1;
      }
      if (c >= 0) clients[nc++] = c;
      last = jb_now_ms();
    }
    for (size_t i = nc; i-- > 0;) {
      if (pr <= 0 || !pf[i + 1].revents) continue;
      if (!serve_one(clients[i], v, &n)) {
        close(clients[i]);
        clients[i] = clients[--nc];
      }
      last = jb_now_ms();
    }
    if (jb_now_ms() - swept >= 1000) {
      drop_hung_up(v, &n);
      swept = jb_now_ms();
    }
    if (n == 0 && nc == 0 && jb_now_ms() - last > KEEPER_IDLE_MS) break;
  }
  /* only reached with nothing held; the socket goes before the lock is let go (the lock
   * file stays: a keeper starting meanwhile may hold it open) */
  unlink(path);
  close(lfd);
  close(lk);
  return 0;
}

/* ---- the worker's side --------------------------------------------------------------------- */

/* A connection to the keeper, or -1 (errno; EPERM: what listens at `path` runs under another
 * uid, and is not our keeper). */
static int keeper_connect(const char *path) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (!path[0] || strlen(path) >= sizeof a.sun_path) return -1;
  memcpy(a.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    close(fd);
    return -1;
  }
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || cr.uid != geteuid()) {
    close(fd);
    errno = EPERM;
    return -1;
  }
  return fd;
}

/* Starts a keeper at `path`: this program again with --keeper, in a session of its own (a
 * signal to the worker's process group does not reach it), nothing of ours inherited. */
static void keeper_spawn(const char *path) {
  char self[4096];
  ssize_t r = readlink("/proc/self/exe", self, sizeof self - 1);
  if (r <= 0) return;
  self[r] = '\0';
  pid_t pid = fork();
  if (pid < 0) return;
  if (pid == 0) {
    setsid();
    if (fork() != 0) _exit(0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
    }
    syscall(SYS_close_range, 3U, ~0U, 0U);
    char *const argv[] = {self, "--keeper", (char *)path, NULL};
    execv(self, argv);
    _exit(127);
  }
  waitpid(pid, NULL, 0);
}

int keeper_init(struct jb_worker *w, jb_error *err) {
  w->keeper_path[0] = '\0';
  if (w->walls.shim_socket_off) return 0; /* the attach stream cannot be kept */
  unsigned char h[32];
  crypto_hash_sha256(h, (const unsigned char *)w->walls.worker_id, strlen(w->walls.worker_id));
  char hex[65];
  sodium_bin2hex(hex, sizeof hex, h, sizeof h);
  hex[16] = '\0';
  snprintf(w->keeper_path, sizeof w->keeper_path, "%s/jbk-%s.s", w->walls.shim_socket_dir, hex);
  for (int i = 0; i < 100; i++) {
    int fd = keeper_connect(w->keeper_path);
    if (fd >= 0) {
      close(fd);
      return 0;
    }
    if (i == 0) keeper_spawn(w->keeper_path);
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  int e = errno;
  w->keeper_path[0] = '\0';
  return jb_fail_errno(err, e, "the descriptor keeper did not come up");
}

/* One request and its one-packet answer ("OK"). */
static int keeper_ask(struct jb_worker *w, const char *text, const int fds[3], jb_error *err) {
  int fd = keeper_connect(w->keeper_path);
  if (fd < 0) {
    keeper_spawn(w->keeper_path); /* it exited meanwhile (idle), or died */
    for (int i = 0; i < 50 && fd < 0; i++) {
      struct timespec ts = {0, 20 * 1000000L};
      nanosleep(&ts, NULL);
      fd = keeper_connect(w->keeper_path);
    }
  }
  if (fd < 0) return jb_fail_errno(err, errno, "descriptor keeper %s", w->keeper_path);
  char ans[KEEPER_MSG];
  int got[3], nfds;
  int rc = send_packet(fd, text, fds) < 0 || recv_packet(fd, ans, got, &nfds, 5000) <= 0 ||
                   strcmp(ans, "OK")
               ? -1
               : 0;
  close(fd);
  return rc < 0 ? jb_fail(err, EIO, "descriptor keeper: no answer to %.3s", text) : 0;
}

int keeper_put(struct jb_worker *w, const char *job, const char *cid, int conn, int spawner,
               int grant, jb_error *err) {
  if (!w->keeper_path[0]) return 0;
  char text[KEEPER_MSG];
  snprintf(text, sizeof text, "PUT %s %s %c%c%c", job, cid[0] ? cid : "-", conn >= 0 ? '1' : '0',
           spawner >= 0 ? '1' : '0', grant >= 0 ? '1' : '0');
  int fds[3] = {conn, spawner, grant};
  return keeper_ask(w, text, fds, err);
}

void keeper_del(struct jb_worker *w, const char *job) {
  if (!w->keeper_path[0]) return;
  char text[KEEPER_MSG];
  snprintf(text, sizeof text, "DEL %s", job);
  jb_error err = {0};
  if (keeper_ask(w, text, NULL, &err) < 0)
    slog(w, JB_LOG_WARN, job, err.msg, "step", "drop kept channel", NULL);
}

int keeper_get(struct jb_worker *w, struct jb_kept **out, size_t *n, jb_error *err) {
  *out = NULL;
  *n = 0;
  if (!w->keeper_path[0]) return 0;
  int fd = keeper_connect(w->keeper_path);
  if (fd < 0) return jb_fail_errno(err, errno, "descriptor keeper %s", w->keeper_path);
  int rc = -1;
  if (send_packet(fd, "GET", NULL) < 0) goto out;
  for (;;) {
    char text[KEEPER_MSG];
    int got[3], nfds;
    if (recv_packet(fd, text, got, &nfds, 5000) <= 0) goto out;
    if (!strcmp(text, "END")) break;
    struct jb_kept k = {.fd = {-1, -1, -1}};
    char flags[4] = "000";
    if (strncmp(text, "ENT ", 4) || sscanf(text + 4, "%128s %79s %3s", k.job, k.cid, flags) != 3) {
      for (int i = 0; i < nfds; i++) close(got[i]);
      goto out;
    }
    if (!strcmp(k.cid, "-")) k.cid[0] = '\0';
    place_fds(flags, got, nfds, k.fd);
    struct jb_kept *more = realloc(*out, (*n + 1) * sizeof *more);
    if (!more) {
      for (int i = 0; i < 3; i++)
        if (k.fd[i] >= 0) close(k.fd[i]);
      goto out;
    }
    *out = more;
    (*out)[(*n)++] = k;
  }
  rc = 0;
out:
  close(fd);
  if (rc < 0) {
    kept_free(*out, *n);
    *out = NULL;
    *n = 0;
    return jb_fail(err, EIO, "descriptor keeper: bad answer to GET");
  }
  return 0;
}

void kept_free(struct jb_kept *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < 3; k++)
      if (list[i].fd[k] >= 0) close(list[i].fd[k]);
  free(list);
}
