/* shim.c — jailbox-shim, the one program inside Wall 3. Two modes:
 *
 *  jailbox-shim --launch -- PROGRAM ARGS…   (container entry point, runs before the jail)
 *      Reads the Wall 3 syscall filter from stdin (a "JBSECCOMP <bytes>\n" header, then that
 *      many bytes of classic BPF). With JB_SHIM_SOCKET=PATH in its environment, connects to
 *      the worker's per-session Unix socket PATH (a host socket bind-mounted into the container; needs runsc --host-uds=open)
 *      and puts the connection on stdin and stdout, so that the jailed shim speaks its line
 *      protocol there instead of over the Docker attach stream; it first tells the worker on
 *      the attach stream's stdout which channel the shim will use (one "channel" event line,
 *      sandbox/proto/PROTOCOL.md). Then places the filter in a memfd at descriptor 3, closes every
 *      other descriptor above 2, and executes PROGRAM (bwrap … --seccomp 3 … setpriv … shim).
 *      With JB_SHIM_SPAWNER=1 a second filter block follows on stdin (the exec filter) and the
 *      launcher connects twice; it then forks: the child takes the path above, the parent
 *      stays as the spawner on the second connection (spawner.c) and ends with the shim.
 *
 *  jailbox-shim --exec FD   (inside a command's jail)
 *      The helper every command of exec starts through: it says ready on socket FD and waits
 *      there for its command from the spawner (spawner.c).
 *
 *  jailbox-shim                             (inside the jail)
 *      Serves the line protocol of sandbox/proto/PROTOCOL.md on stdin/stdout: one JSON object per
 *      line, requests answered in order. Announces itself with a "ready" event.
 *
 * Linked statically (libc, jansson) so that the jail needs no library for it. Built a second
 * time as jailbox-shim-test with JB_SHIM_TEST_OPS, which adds the "test.*" ops the wall tests
 * use to attack the jail from inside; the production binary has none of them. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/line.h"
#include "sandbox/shim/fileops.h"
#include "sandbox/shim/spawner.h"
#include "sandbox/proto/shim.h"

#ifdef JB_SHIM_TEST_OPS
#include "sandbox/shim/testops.h"
#endif

/* ---- I/O helpers ---------------------------------------------------------------------- */

/* Writes all `len` bytes to `fd`. 0, or -1 (errno). */
static int write_all(int fd, const char *buf, size_t len) {
  jb_error err;
  if (jb_line_write_all(fd, buf, len, -1, &err) == 0) return 0;
  errno = err.code;
  return -1;
}

static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void diag(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  (void)write_all(2, buf, (size_t)n);
}

/* Reads exactly `len` bytes from `fd`. 0, or -1 (errno; EPIPE on early end of input). */
static int read_exact(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EPIPE;
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* ---- launch mode ---------------------------------------------------------------------- */

/* Reads a filter header "MAGIC <bytes>\n" byte by byte (nothing past it may be consumed: what
 * follows on stdin belongs to the jailed shim). Returns the announced size (0 allowed when
 * `allow_empty`), or -1. */
static long read_filter_header(const char *magic, bool allow_empty) {
  char line[64];
  size_t n = 0;
  for (;;) {
    if (n == sizeof line - 1) return -1;
    if (read_exact(0, &line[n], 1) < 0) return -1;
    if (line[n] == '\n') break;
    n++;
  }
  line[n] = '\0';
  size_t ml = strlen(magic);
  if (strncmp(line, magic, ml) != 0 || line[ml] != ' ') return -1;
  char *end = NULL;
  errno = 0;
  long v = strtol(line + ml + 1, &end, 10);
  if (errno || *end || v < (allow_empty ? 0 : 1) || v > JB_SHIM_FILTER_MAX || v % 8 != 0) return -1;
  return v;
}

/* Reads a filter block (header and BPF) from stdin into a new allocation: its size, 0 for an
 * empty block, or -1 (diagnosed). */
static long read_filter_block(const char *magic, bool allow_empty, unsigned char **out) {
  *out = NULL;
  long size = read_filter_header(magic, allow_empty);
  if (size < 0) {
    diag("jailbox-shim: launch: bad or missing %s header on stdin", magic);
    return -1;
  }
  if (size == 0) return 0;
  unsigned char *bpf = malloc((size_t)size);
  if (!bpf || read_exact(0, bpf, (size_t)size) < 0) {
    diag("jailbox-shim: launch: reading %ld bytes of %s: %s", size, magic, strerror(errno));
    free(bpf);
    return -1;
  }
  *out = bpf;
  return size;
}

/* Connects a stream socket to the Unix socket `path`: the descriptor (O_CLOEXEC), or -1 with
 * errno. */
static int connect_unix(const char *path) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(a.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* Connects to the Unix socket `path` and moves the connection onto stdin and stdout; with
 * `spawner`, connects a second time for the spawner's channel (*spawner_fd, O_CLOEXEC; -1 when
 * that connect failed). Before that, one line on the current stdout (the attach stream) tells
 * the worker which channel the shim will use: {"event":"channel","channel":"socket",
 * "spawner":true|false[,"spawnerError":"…"]} or, when the first connect failed (a runtime
 * without --host-uds=open refuses it), {"event":"channel","channel":"attach","error":"…"}: the
 * shim then stays on the attach stream, and there is no spawner. Returns 0 either way, -1 when
 * stdout cannot be written or the descriptors cannot be moved. */
static int take_socket(const char *path, bool spawner, int *spawner_fd) {
  char msg[400];
  *spawner_fd = -1;
  /* strerror's text is plain ASCII without quotes or backslashes: no JSON escaping needed */
  const char *shown = strchr(path, '"') || strchr(path, '\\') ? "(path)" : path;
  int fd = connect_unix(path);
  if (fd < 0) {
    int n =
        snprintf(msg, sizeof msg,
                 "{\"event\":\"channel\",\"channel\":\"attach\",\"error\":\"connect %s: %s\"}\n",
                 shown, strerror(errno));
    return write_all(1, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)) < 0 ? -1 : 0;
  }
  int n;
  if (!spawner) {
    n = snprintf(msg, sizeof msg, "{\"event\":\"channel\",\"channel\":\"socket\"}\n");
  } else {
    *spawner_fd = connect_unix(path);
    if (*spawner_fd >= 0)
      n = snprintf(msg, sizeof msg,
                   "{\"event\":\"channel\",\"channel\":\"socket\",\"spawner\":true}\n");
    else
      n = snprintf(msg, sizeof msg,
                   "{\"event\":\"channel\",\"channel\":\"socket\",\"spawner\":false,"
                   "\"spawnerError\":\"connect %s: %s\"}\n",
                   shown, strerror(errno));
  }
  if (write_all(1, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)) < 0) return -1;
  /* dup2 leaves the new descriptors without FD_CLOEXEC: they are the shim's stdio */
  if (dup2(fd, 0) < 0 || dup2(fd, 1) < 0) return -1;
  close(fd);
  return 0;
}

/* The jailed path: the Wall 3 filter at descriptor 3, nothing else above 2, then PROGRAM. */
static int exec_jail(char **prog, const unsigned char *bpf, long size) {
  /* nothing but stdio may reach the jail: close what the runtime may have left open */
  if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0) {
    for (int fd = 3; fd < 1024; fd++) close(fd);
  }
  int fd = memfd_create("jailbox-wall3-filter", 0); /* no CLOEXEC: bwrap reads it */
  if (fd < 0 || write_all(fd, (const char *)bpf, (size_t)size) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
    diag("jailbox-shim: launch: filter memfd: %s", strerror(errno));
    return 125;
  }
  if (fd != JB_SHIM_FILTER_FD) {
    if (dup2(fd, JB_SHIM_FILTER_FD) < 0) {
      diag("jailbox-shim: launch: dup2: %s", strerror(errno));
      return 125;
    }
    close(fd);
  }
  execv(prog[0], prog);
  diag("jailbox-shim: launch: exec %s: %s", prog[0], strerror(errno));
  return 127;
}

static int launch(int argc, char **argv) {
  if (argc < 4 || strcmp(argv[2], "--") != 0) {
    diag("jailbox-shim: usage: [" JB_SHIM_SOCKET_ENV "=PATH] [" JB_SHIM_SPAWNER_ENV
         "=1] jailbox-shim --launch -- PROGRAM [ARGS...]");
    return 125;
  }
  char **prog = &argv[3];
  /* environment variables rather than arguments: an older launcher ignores them and the
   * shim stays on the attach stream, without exec (the worker then says so in the contract) */
  const char *sock = getenv(JB_SHIM_SOCKET_ENV);
  if (sock && !sock[0]) sock = NULL;
  const char *sp = getenv(JB_SHIM_SPAWNER_ENV);
  bool want_spawner = sp && strcmp(sp, "1") == 0;
  unsigned char *bpf = NULL, *xbpf = NULL;
  long size = read_filter_block(JB_SHIM_FILTER_MAGIC, false, &bpf);
  if (size < 0) return 125;
  long xsize = 0;
  if (want_spawner && (xsize = read_filter_block(JB_SHIM_EXEC_FILTER_MAGIC, true, &xbpf)) < 0)
    return 125;
  int spawner_fd = -1;
  if (sock && take_socket(sock, want_spawner && xsize > 0, &spawner_fd) < 0) {
    diag("jailbox-shim: launch: shim channel %s: %s", sock, strerror(errno));
    return 125;
  }
  if (spawner_fd < 0) return exec_jail(prog, bpf, size);
  /* the spawner stays: the child takes today's path into the jail, this process serves the
   * spawner's channel until the shim's bwrap ends, and ends with its status */
  pid_t pid = fork();
  if (pid < 0) {
    diag("jailbox-shim: launch: fork: %s", strerror(errno));
    return 125;
  }
  if (pid == 0) return exec_jail(prog, bpf, size); /* closes the spawner's descriptor */
  free(bpf);
  /* the shim's channel is the child's alone: its end must close when the shim ends */
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
    close(null);
  } else {
    close(0);
    close(1);
  }
  const char *self = argv[0][0] == '/' ? argv[0] : "/opt/jailbox/bin/jailbox-shim";
  int rc = jb_spawner_run(spawner_fd, xbpf, (size_t)xsize, pid, self);
  free(xbpf);
  return rc;
}

/* ---- status --------------------------------------------------------------------------- */

/* Copies the value of "Key:\t…" from /proc/self/status into `out`; false when absent. */
static bool proc_status_field(const char *text, const char *key, char *out, size_t len) {
  size_t kl = strlen(key);
  for (const char *p = text; p && *p;) {
    if (strncmp(p, key, kl) == 0 && p[kl] == ':') {
      const char *v = p + kl + 1;
      while (*v == ' ' || *v == '\t') v++;
      size_t n = strcspn(v, "\n");
      if (n >= len) n = len - 1;
      memcpy(out, v, n);
      out[n] = '\0';
      return true;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  return false;
}

/* Reads a small file (≤ `max` bytes) into a new NUL-terminated buffer, or NULL. */
static char *slurp(const char *path, size_t max) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  char *buf = malloc(max + 1);
  size_t n = 0;
  while (buf && n < max) {
    ssize_t r = read(fd, buf + n, max - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (buf) buf[n] = '\0';
  return buf;
}

static json_t *status_caps(const char *st) {
  static const char *const keys[][2] = {{"CapInh", "inheritable"},
                                        {"CapPrm", "permitted"},
                                        {"CapEff", "effective"},
                                        {"CapBnd", "bounding"},
                                        {"CapAmb", "ambient"}};
  json_t *o = json_object();
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    char v[64];
    if (st && proc_status_field(st, keys[i][0], v, sizeof v))
      json_object_set_new(o, keys[i][1], json_string(v));
    else
      json_object_set_new(o, keys[i][1], json_null());
  }
  /* the kernel's own answer as well, in case /proc is not what it seems */
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct d[2];
  memset(d, 0, sizeof d);
  if (syscall(SYS_capget, &h, d) == 0) {
    char v[32];
    snprintf(v, sizeof v, "%08x%08x", d[1].effective, d[0].effective);
    json_object_set_new(o, "effectiveCapget", json_string(v));
    snprintf(v, sizeof v, "%08x%08x", d[1].permitted, d[0].permitted);
    json_object_set_new(o, "permittedCapget", json_string(v));
  }
  return o;
}

static json_t *status_namespaces(void) {
  static const char *const ns[] = {"cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts"};
  json_t *o = json_object();
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    char path[64], target[128];
    snprintf(path, sizeof path, "/proc/self/ns/%s", ns[i]);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    /* "ipc:[4026531839]" -> 4026531839 */
    char *lb = strchr(target, '[');
    json_object_set_new(o, ns[i],
                        lb ? json_integer(strtoll(lb + 1, NULL, 10)) : json_string(target));
  }
  return o;
}

static json_t *status_fds(void) {
  json_t *a = json_array();
  DIR *d = opendir("/proc/self/fd");
  if (!d) return a;
  int self = dirfd(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    int fd = atoi(e->d_name);
    if (fd == self) continue;
    char target[PATH_MAX];
    ssize_t n = readlinkat(self, e->d_name, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    json_array_append_new(a, json_pack("{s:i, s:s}", "fd", fd, "target", target));
  }
  closedir(d);
  return a;
}

static json_t *status_pids(void) {
  json_t *a = json_array();
  DIR *d = opendir("/proc");
  if (!d) return a;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
      json_array_append_new(a, json_integer(atoll(e->d_name)));
  closedir(d);
  return a;
}

static json_t *status_netdevs(void) {
  json_t *a = json_array();
  char *t = slurp("/proc/net/dev", 65536);
  if (!t) return a;
  /* two header lines, then "  name: counters…" */
  char *line = t;
  for (int i = 0; line && *line; i++) {
    char *next = strchr(line, '\n');
    if (next) *next++ = '\0';
    char *colon = strchr(line, ':');
    if (i >= 2 && colon) {
      *colon = '\0';
      while (*line == ' ') line++;
      json_array_append_new(a, json_string(line));
    }
    line = next;
  }
  free(t);
  return a;
}

/* Mount points with their per-mount options ("ro"/"rw", …) and filesystem type. */
static json_t *status_mounts(void) {
  json_t *a = json_array();
  char *t = slurp("/proc/self/mountinfo", 1 << 20);
  if (!t) return a;
  for (char *line = t; line && *line;) {
    char *next = strchr(line, '\n');
    if (next) *next++ = '\0';
    /* id parent major:minor root mountpoint options [optional…] - fstype source superopts */
    char *tok[32];
    int nt = 0;
    char *save = NULL;
    for (char *x = strtok_r(line, " ", &save); x && nt < 32; x = strtok_r(NULL, " ", &save))
      tok[nt++] = x;
    const char *fstype = "?";
    for (int i = 6; i + 1 < nt; i++)
      if (strcmp(tok[i], "-") == 0) {
        fstype = tok[i + 1];
        break;
      }
    if (nt >= 6)
      json_array_append_new(
          a, json_pack("{s:s, s:s, s:s}", "path", tok[4], "options", tok[5], "type", fstype));
    line = next;
  }
  free(t);
  return a;
}

/* Whether openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) works here.
 * gVisor (2024-07) does not implement it (ENOSYS), and its seccomp layer answers EPERM for a
 * profile entry naming it; the file operations then walk paths component by component with
 * O_NOFOLLOW instead. */
static json_t *status_openat2(void) {
  struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  long fd = syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof how);
  int e = fd < 0 ? errno : 0;
  if (fd >= 0) close((int)fd);
  return json_pack("{s:b, s:i}", "available", fd >= 0, "errno", e);
}

static json_t *op_status(void) {
  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  getresuid(&ru, &eu, &su);
  getresgid(&rg, &eg, &sg);
  gid_t groups[64];
  int ng = getgroups(64, groups);
  json_t *g = json_array();
  for (int i = 0; i < ng; i++) json_array_append_new(g, json_integer(groups[i]));
  char *st = slurp("/proc/self/status", 65536);
  char v[64];
  json_t *nnp_proc =
      st && proc_status_field(st, "NoNewPrivs", v, sizeof v) ? json_integer(atoi(v)) : json_null();
  json_t *sc_proc =
      st && proc_status_field(st, "Seccomp", v, sizeof v) ? json_integer(atoi(v)) : json_null();
  struct utsname u;
  uname(&u);
  struct stat sb;
  json_t *o = json_pack(
      "{s:{s:i, s:i, s:i}, s:{s:i, s:i, s:i}, s:o, s:o, s:i, s:o, s:i, s:o, s:o, s:i, s:i,"
      " s:o, s:o, s:o, s:o, s:s, s:s, s:b, s:b}",
      "uid", "real", (int)ru, "effective", (int)eu, "saved", (int)su, "gid", "real", (int)rg,
      "effective", (int)eg, "saved", (int)sg, "groups", g, "capabilities", status_caps(st),
      "noNewPrivs", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0), "noNewPrivsProc", nnp_proc, "seccomp",
      prctl(PR_GET_SECCOMP, 0, 0, 0, 0), "seccompProc", sc_proc, "namespaces", status_namespaces(),
      "pid", (int)getpid(), "ppid", (int)getppid(), "fds", status_fds(), "pids", status_pids(),
      "netdevs", status_netdevs(), "mounts", status_mounts(), "hostname", u.nodename, "kernel",
      u.release, "sysPresent", stat("/sys", &sb) == 0, "workspacePresent",
      stat("/workspace", &sb) == 0);
  json_object_set_new(o, "openat2", status_openat2());
  free(st);
  return o;
}

/* ---- serve mode ----------------------------------------------------------------------- */

static void respond(json_t *resp) {
  size_t n = 0;
  char *line = resp ? jb_line_encode(resp, 0, &n, NULL) : NULL;
  if (line && n > JB_SHIM_MAX_LINE) {
    /* the worker takes a longer line for a protocol violation: the op's answer is refused
     * instead (every op budgets its answer below this; this is the last guard) */
    free(line);
    json_t *id = json_incref(json_object_get(resp, "id"));
    json_decref(resp);
    resp = json_pack("{s:o, s:b, s:{s:s, s:s}}", "id", id ? id : json_null(), "ok", 0, "error",
                     "code", "too_large", "message",
                     "the answer is over one protocol line: ask for less at once");
    line = resp ? jb_line_encode(resp, 0, &n, NULL) : NULL;
  }
  json_decref(resp);
  if (!line) {
    static const char oom[] =
        "{\"id\":null,\"ok\":false,\"error\":{\"code\":\"internal\",\"message\":\"out of "
        "memory\"}}\n";
    (void)write_all(1, oom, sizeof oom - 1);
    return;
  }
  /* the answer and its newline in one write where possible */
  if (write_all(1, line, n) < 0) {
    free(line);
    _exit(0); /* the worker is gone */
  }
  free(line);
}

static json_t *error_reply(json_t *id, const char *code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static json_t *error_reply(json_t *id, const char *code, int errnum, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_t *m = json_string(msg);
  if (!m) { /* it quotes a name that is not UTF-8 (or cut one): JSON takes UTF-8 only, and
             * without it the answer would go with no id, the worker waiting for it in vain */
    for (char *c = msg; *c; c++)
      if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e) *c = '?';
    m = json_string(msg);
  }
  json_t *e = json_pack("{s:s, s:o}", "code", code, "message", m);
  if (errnum) json_object_set_new(e, "errno", json_integer(errnum));
  return json_pack("{s:O, s:b, s:o}", "id", id ? id : json_null(), "ok", 0, "error", e);
}

static json_t *ok_reply(json_t *id, json_t *result) {
  return json_pack("{s:O, s:b, s:o}", "id", id, "ok", 1, "result", result ? result : json_object());
}

/* ---- the journal of changing ops ---------------------------------------------------------- */

/* The answers to the last JOURNAL_MAX requests that named an op ("opId") of a changing kind,
 * kept in this process: a worker that died after the change and before its commit runs the op
 * again under the same id, and gets the answer the change had instead of a second change
 * (sandbox/proto/PROTOCOL.md, "Exactly once"). The shim outlives its worker (the worker's
 * descriptor keeper holds its channel), so the journal does. */
#define JOURNAL_MAX 256
static struct {
  long long op_id; /* 0: empty */
  json_t *answer; /* {ok, result | error} */
} journal[JOURNAL_MAX];
static size_t journal_next;

static bool op_changes(const char *op) {
  return !strcmp(op, "write") || !strcmp(op, "mkdir") || !strcmp(op, "move") ||
         !strcmp(op, "delete");
}

static json_t *journal_find(long long op_id) {
  for (size_t i = 0; i < JOURNAL_MAX; i++)
    if (journal[i].op_id == op_id && journal[i].answer) return journal[i].answer;
  return NULL;
}

/* Keeps `reply` (borrowed; its id is not kept) as op `op_id`'s answer. */
static void journal_keep(long long op_id, const json_t *reply) {
  json_t *a = json_copy((json_t *)reply);
  if (!a) return;
  json_object_del(a, "id");
  size_t i = journal_next++ % JOURNAL_MAX;
  json_decref(journal[i].answer);
  journal[i].op_id = op_id;
  journal[i].answer = a;
}

static json_t *dispatch_op(json_t *req);

static json_t *dispatch(json_t *req) {
  json_t *id = json_object_get(req, "id");
  const char *op = json_string_value(json_object_get(req, "op"));
  json_t *opid = json_object_get(req, "opId");
  bool named = json_is_integer(opid) && json_integer_value(opid) > 0;
  if (json_is_integer(id) && json_integer_value(id) >= 0 && op && !strcmp(op, "recall")) {
    if (!named)
      return error_reply(id, "bad_request", EINVAL, "field 'opId' must be a positive integer");
    json_t *a = journal_find(json_integer_value(opid));
    return ok_reply(
        id, a ? json_pack("{s:b, s:O}", "found", 1, "answer", a) : json_pack("{s:b}", "found", 0));
  }
  if (!named || !op || !op_changes(op) || !json_is_integer(id)) return dispatch_op(req);
  json_t *done = journal_find(json_integer_value(opid));
  if (done) { /* ran already: the same answer, nothing changed again */
    json_t *r = json_copy(done);
    if (r) {
      json_object_set(r, "id", id);
      json_object_set_new(r, "replayed", json_true());
    }
    return r;
  }
  json_t *r = dispatch_op(req);
  if (r) journal_keep(json_integer_value(opid), r);
  return r;
}

static json_t *dispatch_op(json_t *req) {
  json_t *id = json_object_get(req, "id");
  if (!json_is_integer(id) || json_integer_value(id) < 0)
    return error_reply(NULL, "bad_request", EINVAL, "field 'id' must be a non-negative integer");
  const char *op = json_string_value(json_object_get(req, "op"));
  if (!op) return error_reply(id, "bad_request", EINVAL, "field 'op' must be a string");
  if (strcmp(op, "ping") == 0) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ok_reply(id, json_pack("{s:b, s:I}", "pong", 1, "monotonicNs",
                                  (json_int_t)ts.tv_sec * 1000000000 + ts.tv_nsec));
  }
  if (strcmp(op, "status") == 0) return ok_reply(id, op_status());
  if (jb_fileop_known(op)) {
    struct jb_fileop_error fe = {0};
    json_t *r = jb_fileop(op, req, &fe);
    if (r) return ok_reply(id, r);
    json_t *rep = error_reply(id, fe.code ? fe.code : "internal", fe.errnum, "%s", fe.message);
    if (rep && fe.escape)
      json_object_set_new(json_object_get(rep, "error"), "escape", json_string(fe.escape));
    return rep;
  }
#ifdef JB_SHIM_TEST_OPS
  if (strncmp(op, "test.", 5) == 0) {
    jb_error err = {0};
    json_t *r = jb_shim_test_op(op + 5, req, &err);
    if (!r) return error_reply(id, "test_failed", err.code, "%s", err.msg);
    return ok_reply(id, r);
  }
#endif
  return error_reply(id, "unknown_op", ENOSYS, "unknown op '%.64s'", op);
}

/* Serves requests from stdin until its end. A request line over JB_SHIM_MAX_LINE bytes is
 * dropped whole and answered "too_large" once its newline came; empty lines are ignored. */
static int serve(void) {
  signal(SIGPIPE, SIG_IGN);
  struct jb_line_reader r;
  jb_line_init(&r,
               &(struct jb_line_opts){
                   .max_line = JB_SHIM_MAX_LINE, .over = JB_LINE_SKIP_WHOLE, .skip_empty = true});
  respond(json_pack("{s:s, s:i, s:i, s:b}", "event", "ready", "protocol", JB_SHIM_PROTOCOL, "pid",
                    (int)getpid(),
#ifdef JB_SHIM_TEST_OPS
                    "testOps", 1
#else
                    "testOps", 0
#endif
                    ));
  jb_fileops_defer_closes(true);
  int status = 0;
  for (;;) {
    jb_error err = {0};
    json_t *req = NULL;
    int rc = jb_line_next_object(&r, JB_SHIM_MAX_DEPTH, &req, &err);
    if (rc == JB_LINE_AGAIN) {
      ssize_t got = jb_line_read(&r, 0, &err);
      if (got >= 0) continue; /* a line may be complete; at the end of input: JB_LINE_END */
      if (err.code == ENOMEM)
        rc = JB_LINE_NOMEM;
      else
        break;
    }
    if (rc == JB_LINE_END) break;
    if (rc == JB_LINE_NOMEM) {
      diag("jailbox-shim: out of memory");
      status = 1;
      break;
    }
    if (rc == JB_LINE_TOO_LONG) {
      respond(
          error_reply(NULL, "too_large", EMSGSIZE, "request line over %d bytes", JB_SHIM_MAX_LINE));
      continue;
    }
    if (rc == JB_LINE_BAD_JSON) {
      respond(error_reply(NULL, "bad_request", EINVAL, "%s", err.msg));
      continue;
    }
#ifdef JB_SHIM_TEST_OPS
    int armed = jb_shim_test_malformed_now(json_string_value(json_object_get(req, "op")));
    if (armed == 1) {
      static const char bad[] = "{\"id\": 1, \"ok\": tru\n"; /* test.arm: not JSON */
      (void)write_all(1, bad, sizeof bad - 1);
      json_decref(req);
      continue;
    }
    if (armed == 2) { /* test.arm noresult: ok without the result */
      respond(json_pack("{s:O, s:b}", "id", json_object_get(req, "id"), "ok", 1));
      json_decref(req);
      continue;
    }
#endif
    respond(dispatch(req));
    json_decref(req);
    jb_fileops_close_deferred(); /* the answer is out: now what the op opened */
  }
  jb_line_free(&r);
  return status;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--launch") == 0) return launch(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "--exec") == 0) return jb_exec_helper(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
    printf("jailbox-shim protocol %d%s\n", JB_SHIM_PROTOCOL,
#ifdef JB_SHIM_TEST_OPS
           " (test ops)"
#else
           ""
#endif
    );
    return 0;
  }
  if (argc != 1) {
    diag("jailbox-shim: unexpected arguments (see sandbox/proto/PROTOCOL.md)");
    return 2;
  }
  return serve();
}
