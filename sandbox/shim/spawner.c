/* spawner.c — the spawner (see spawner.h): its request loop, the jail it builds per command
 * (bwrap with new pid/ipc/uts/mount namespaces, the image's /usr, /bin, /lib* and a few /etc
 * files read-only, the workspace read-only unless writable, its own /tmp, the exec filter,
 * setpriv to uid 65534 with no capabilities and no_new_privs, then the helper of
 * exec_helper.c), the limits (wall clock, output caps, RLIMIT_FSIZE, RLIMIT_NPROC), and
 * signals to a command's whole tree. */
#define _GNU_SOURCE
#include "sandbox/shim/spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/buf.h"
#include "lib/line.h"
#include "lib/pathcheck.h"
#include "sandbox/proto/shim.h"
#include "sandbox/shim/memwatch.h"
#include "sandbox/shim/overlay.h"
#include "sandbox/shim/proctree.h"

#define BWRAP "/usr/bin/bwrap"
#define SETPRIV "/usr/bin/setpriv"
#define WORKSPACE "/workspace"

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the channel -------------------------------------------------------------------------- */

static int chan_fd = -1;
static bool chan_dead;

/* Sends `o` (stolen) as one line; a channel that cannot take it within 30 s is given up. */
static void send_obj(json_t *o) {
  if (!o) return;
  if (!chan_dead) {
    jb_error err = {0};
    if (jb_line_write_json(chan_fd, o, JB_SPAWNER_MAX_LINE, 30000, &err) < 0) chan_dead = true;
  }
  json_decref(o);
}

static void send_error(json_t *id, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void send_error(json_t *id, const char *code, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  send_obj(json_pack("{s:O, s:b, s:{s:s, s:s}}", "id", id ? id : json_null(), "ok", 0, "error",
                     "code", code, "message", msg));
}

/* ---- children and SIGCHLD ----------------------------------------------------------------- */

static int sig_pipe[2] = {-1, -1};

static void on_sigchld(int sig) {
  (void)sig;
  int e = errno;
  if (write(sig_pipe[1], "c", 1) < 0) {} /* a full pipe already wakes the loop */
  errno = e;
}

/* ---- one command -------------------------------------------------------------------------- */

struct cmd {
  bool running; /* cur: a command runs in it; warm: the jail is built (or being built) */
  json_t *id;
  pid_t bwrap; /* our child */
  int ctl; /* our end of the helper's socket (-1: closed): its ready byte, then the request */
  bool ready; /* the helper said it waits for its command */
  bool writable; /* the workspace is bound read-write */
  long long tmp; /* the size of its /tmp */
  long long forked, ready_at; /* when bwrap was started, when the helper said ready */
  long long handed; /* when the command was handed over */
  long long cmd_ended; /* when the helper said the command ended (0: not yet) */
  bool was_warm; /* the jail was built before its request came */
  pid_t init; /* the jail's pid 1, as this pid namespace numbers it (0: not known yet) */
  int fd[2]; /* read ends of stdout, stderr (-1: ended) */
  int status_fd; /* bwrap --json-status-fd, read end (-1: ended) */
  char status_buf[1024];
  size_t status_len;
  long long seq;
  long long max_out;
  long long bytes[2];
  bool trunc[2];
  long long start, deadline;
  const char *killed_by; /* NULL, "timeout", "signal", "memory" */
  struct jb_memcg mem; /* the jail's memory cgroup (usage_fd -1: not watched) */
  long long mem_limit, mem_peak, mem_next; /* bytes (0: none), bytes seen at most, next read */
  bool exited;
  long long exited_at;
  int wstatus;
  long long drain_until; /* after bwrap ended: how long the pipes may still be read */
};

/* cur: the jail whose command runs; warm: the next jail, built ahead, its helper waiting. */
#define JAIL_NONE                                                                        \
  {                                                                                      \
    .fd = {-1, -1}, .status_fd = -1, .ctl = -1, .mem = {.usage_fd = -1, .procs_fd = -1 } \
  }
static struct cmd cur = JAIL_NONE;
static struct cmd warm = JAIL_NONE;
/* no jail is built ahead (the worker asked: its session is paused) until a `warm` op */
static bool cool;
/* what jails are built from, and the kind of the last command's (the next is built alike) */
static const unsigned char *jail_bpf;
static size_t jail_bpf_len;
static const char *jail_self;
static bool last_writable;
static long long last_tmp = JB_SPAWNER_DEFAULT_TMP;

/* The jail's pid 1 from bwrap's JSON status ({"child-pid": N, …}). */
static void read_status(struct cmd *c) {
  if (c->status_fd < 0) return;
  ssize_t n =
      read(c->status_fd, c->status_buf + c->status_len, sizeof c->status_buf - 1 - c->status_len);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    close(c->status_fd);
    c->status_fd = -1;
    return;
  }
  c->status_len += (size_t)n;
  c->status_buf[c->status_len] = '\0';
  if (!c->init) {
    const char *p = strstr(c->status_buf, "\"child-pid\"");
    if (p && (p = strchr(p, ':'))) c->init = (pid_t)strtol(p + 1, NULL, 10);
  }
  if (c->status_len >= sizeof c->status_buf - 1) c->status_len = 0; /* only the first matters */
}

/* Waits up to 1 s for the status line of jail `c` to name its pid 1. */
static void await_init(struct cmd *c) {
  struct pollfd pf = {.fd = c->status_fd, .events = POLLIN};
  for (int i = 0; i < 50 && !c->init && c->status_fd >= 0; i++)
    if (poll(&pf, 1, 20) > 0) read_status(c);
}

/* Sends `sig` to the running command's whole tree. SIGKILL goes to the jail's pid 1 (whose end
 * ends the pid namespace and every process in it) and to bwrap (--die-with-parent takes the
 * pid 1 along): both run as root, which this process is. Stop and continue go to every
 * descendant of the jail's pid 1 — inside the jail's pid namespace an orphan is adopted by its
 * pid 1, so they are every process of the command — found from /proc's parent links in passes
 * until a pass finds no new one. They run as uid 65534 and this process holds no CAP_KILL (the
 * container's set has none: sandbox/WALLS.md, "One launch"), so the signals are sent by a child
 * that first becomes uid 65534 (an unprivileged sender may signal its own uid's processes).
 * The jail's pid 1 (bwrap's reaper, root) is not stopped: bwrap ends when it is. 0, or -1. */
static int signal_tree(int sig) {
  if (!cur.running) return -1;
  if (!cur.init) await_init(&cur); /* the status line has not been read yet: look for it now */
  if (sig == SIGKILL) {
    if (cur.init > 0) kill(cur.init, SIGKILL);
    kill(cur.bwrap, SIGKILL);
    return 0;
  }
  if (cur.init <= 0) return -1;
  return jb_proctree_signal(cur.init, sig);
}

/* ---- the jail's arguments ------------------------------------------------------------------ */

struct args {
  char **v;
  size_t n, cap;
};

static void add(struct args *a, const char *s) {
  if (a->n + 2 > a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 128;
    char **v = realloc(a->v, cap * sizeof *v);
    if (!v) abort(); /* the spawner cannot go on without memory */
    a->v = v;
    a->cap = cap;
  }
  a->v[a->n++] = strdup(s);
  if (!a->v[a->n - 1]) abort();
  a->v[a->n] = NULL;
}

static void addv(struct args *a, const char *const *list) {
  for (; *list; list++) add(a, *list);
}

static void args_free(struct args *a) {
  for (size_t i = 0; i < a->n; i++) free(a->v[i]);
  free(a->v);
  memset(a, 0, sizeof *a);
}

/* `path` of the image into the jail read-only: a symlink as the same symlink, a directory or
 * file bound; absent: nothing. */
static void bind_image_path(struct args *a, const char *path) {
  struct stat st;
  if (lstat(path, &st) < 0) return;
  if (S_ISLNK(st.st_mode)) {
    char t[PATH_MAX];
    ssize_t n = readlink(path, t, sizeof t - 1);
    if (n <= 0) return;
    t[n] = '\0';
    addv(a, (const char *const[]){"--symlink", t, path, NULL});
  } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
    addv(a, (const char *const[]){"--ro-bind", path, path, NULL});
  }
}

/* Top-level directories of the image a command sees (read-only), and the /etc files. */
static const char *const image_dirs[] = {"/usr",   "/bin",   "/sbin",   "/lib",
                                         "/lib32", "/lib64", "/libx32", NULL};
static const char *const etc_files[] = {"/etc/passwd",
                                        "/etc/group",
                                        "/etc/hosts",
                                        "/etc/nsswitch.conf",
                                        "/etc/ld.so.cache",
                                        "/etc/ld.so.conf",
                                        "/etc/ld.so.conf.d",
                                        "/etc/alternatives",
                                        "/etc/localtime",
                                        "/etc/timezone",
                                        "/etc/gitconfig",
                                        "/etc/python3",
                                        "/etc/python3.11",
                                        "/etc/mime.types",
                                        "/etc/protocols",
                                        "/etc/services",
                                        NULL};

/* What the jail binds, as the hello reports it (new reference). */
static json_t *describe_binds(void) {
  json_t *a = json_array();
  struct stat st;
  for (const char *const *p = image_dirs; *p; p++)
    if (lstat(*p, &st) == 0) json_array_append_new(a, json_string(*p));
  for (const char *const *p = etc_files; *p; p++)
    if (lstat(*p, &st) == 0) json_array_append_new(a, json_string(*p));
  return a;
}

struct request {
  json_t *id;
  json_t *argv, *env;
  char cwd[JB_PATH_MAX + sizeof WORKSPACE + 2];
  unsigned char *stdin_data;
  size_t stdin_len;
  long long timeout_ms, max_out, fsize, nproc, tmp, memory; /* memory: bytes, 0 none */
  bool writable;
  char overlay[JB_CS_ID_MAX + 1]; /* "": the workspace itself */
};

/* A command's jail: bwrap, setpriv, then the helper, which waits on descriptor HELPER_FD for
 * its command (jb_exec_helper). The same for every command; what differs per request — argv,
 * environment, cwd, stdin, the rlimits — is handed to the helper. `writable`: the workspace
 * read-write; `tmp`: the size of /tmp in bytes; `ws`: what is bound as /workspace. */
#define HELPER_FD 5
static void jail_args(struct args *a, bool writable, long long tmp, const char *self,
                      const char *ws) {
  add(a, BWRAP);
  static const char *const ns[] = {"--unshare-pid",
                                   "--unshare-ipc",
                                   "--unshare-uts",
                                   "--unshare-cgroup-try",
                                   "--die-with-parent",
                                   "--new-session",
                                   NULL};
  addv(a, ns);
  /* directories bwrap would make 0700 (not traversable by uid 65534) */
  for (const char *const *p = image_dirs; *p; p++) {
    struct stat st;
    if (lstat(*p, &st) == 0 && S_ISDIR(st.st_mode))
      addv(a, (const char *const[]){"--perms", "0755", "--dir", *p, NULL});
    bind_image_path(a, *p);
  }
  addv(a, (const char *const[]){"--perms", "0755", "--dir", "/etc", NULL});
  for (const char *const *p = etc_files; *p; p++) bind_image_path(a, *p);
  /* the helper, at its own path */
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", self);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) {
    *slash = '\0';
    /* every parent of the helper, 0755 */
    for (char *q = dir + 1;; q++) {
      if (*q == '/' || *q == '\0') {
        char c = *q;
        *q = '\0';
        struct stat st;
        bool exists_in_image_dir = false;
        for (const char *const *p = image_dirs; *p; p++)
          if (strncmp(dir, *p, strlen(*p)) == 0 && (dir[strlen(*p)] == '/' || !dir[strlen(*p)]))
            exists_in_image_dir = true;
        if (!exists_in_image_dir && stat(dir, &st) == 0)
          addv(a, (const char *const[]){"--perms", "0755", "--dir", dir, NULL});
        *q = c;
        if (!c) break;
      }
    }
  }
  addv(a, (const char *const[]){"--ro-bind", self, self, NULL});
  addv(a, (const char *const[]){writable ? "--bind" : "--ro-bind", ws, WORKSPACE, NULL});
  char size[32];
  snprintf(size, sizeof size, "%lld", tmp);
  addv(a, (const char *const[]){"--perms",
                                "1777",
                                "--size",
                                size,
                                "--tmpfs",
                                "/tmp",
                                "--proc",
                                "/proc",
                                "--dev",
                                "/dev",
                                "--remount-ro",
                                "/",
                                "--chdir",
                                WORKSPACE,
                                "--clearenv",
                                "--setenv",
                                "PATH",
                                "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
                                "--setenv",
                                "HOME",
                                "/tmp",
                                "--setenv",
                                "LANG",
                                "C.UTF-8",
                                "--setenv",
                                "TERM",
                                "dumb",
                                "--cap-drop",
                                "ALL",
                                "--cap-add",
                                "CAP_SETUID",
                                "--cap-add",
                                "CAP_SETGID",
                                "--cap-add",
                                "CAP_SETPCAP",
                                "--seccomp",
                                "3",
                                "--json-status-fd",
                                "4",
                                NULL});
  static const char *const drop[] = {SETPRIV,
                                     "--reuid",
                                     "65534",
                                     "--regid",
                                     "65534",
                                     "--clear-groups",
                                     "--inh-caps=-all",
                                     "--bounding-set=-all",
                                     "--no-new-privs",
                                     "--",
                                     NULL};
  addv(a, drop);
  add(a, self);
  add(a, "--exec");
  char fdarg[16];
  snprintf(fdarg, sizeof fdarg, "%d", HELPER_FD);
  add(a, fdarg);
}

/* ---- requests ----------------------------------------------------------------------------- */

/* A non-negative integer field, `dflt` when absent; -1 when present but not one in [lo, hi]. */
static long long int_field(const json_t *o, const char *key, long long dflt, long long lo,
                           long long hi) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) return dflt;
  if (!json_is_integer(v)) return -1;
  long long x = json_integer_value(v);
  return x < lo || x > hi ? -1 : x;
}

/* The checked cwd: `rel` (workspace-relative; "" or "." the root) walked from /workspace
 * one directory at a time without following a symlink. 0, or -1 with a message in `why`. */
static int check_cwd(const char *rel, char *out, size_t outlen, char *why, size_t whylen) {
  if (!rel || !rel[0] || strcmp(rel, ".") == 0) {
    snprintf(out, outlen, "%s", WORKSPACE);
    return 0;
  }
  enum jb_path_verdict v = jb_path_check(rel, strlen(rel), 0);
  if (v != JB_PATH_OK) {
    snprintf(why, whylen, "cwd: %s", jb_path_verdict_text(v));
    return -1;
  }
  int fd = open(WORKSPACE, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    snprintf(why, whylen, "cwd: the workspace cannot be opened: %s", strerror(errno));
    return -1;
  }
  const char *p = rel;
  while (*p) {
    size_t n = strcspn(p, "/");
    char name[JB_PATH_NAME_MAX + 1];
    memcpy(name, p, n);
    name[n] = '\0';
    int next = openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    close(fd);
    if (next < 0) {
      snprintf(why, whylen, "cwd: '%s' is not a directory inside the workspace (%s)", name,
               e == ELOOP || e == ENOTDIR ? "a symlink or not a directory" : strerror(e));
      return -1;
    }
    fd = next;
    p += n;
    if (*p == '/') p++;
  }
  close(fd);
  snprintf(out, outlen, "%s/%s", WORKSPACE, rel);
  return 0;
}

/* The most processes of uid 65534 a command may have: the container's RLIMIT_NPROC less
 * JB_SPAWNER_NPROC_KEEP (the shim and the helper count too). */
static long long nproc_limit(void) {
  struct rlimit nl;
  long long m = getrlimit(RLIMIT_NPROC, &nl) == 0 && nl.rlim_max != RLIM_INFINITY
                    ? (long long)nl.rlim_max - JB_SPAWNER_NPROC_KEEP
                    : 4096;
  return m < 2 ? 2 : m;
}

/* Parses an exec request into `rq`. 0, or -1 after answering it with bad_request. */
static int parse_exec(const json_t *req, struct request *rq) {
  json_t *id = rq->id;
  json_t *argv = json_object_get(req, "argv");
  if (!json_is_array(argv) || json_array_size(argv) < 1 ||
      json_array_size(argv) > JB_SPAWNER_MAX_ARGV) {
    send_error(id, "bad_request", "argv must be an array of 1 to %d strings", JB_SPAWNER_MAX_ARGV);
    return -1;
  }
  size_t total = 0, i;
  json_t *v;
  json_array_foreach (argv, i, v) {
    if (!json_is_string(v) || (i == 0 && !json_string_length(v))) {
      send_error(id, "bad_request", "argv[%zu] must be a string (argv[0] not empty)", i);
      return -1;
    }
    total += json_string_length(v) + 1;
  }
  if (total > JB_SPAWNER_MAX_ARGV_BYTES) {
    send_error(id, "bad_request", "argv is over %d bytes", JB_SPAWNER_MAX_ARGV_BYTES);
    return -1;
  }
  rq->argv = argv;
  json_t *env = json_object_get(req, "env");
  if (env && !json_is_null(env)) {
    if (!json_is_object(env) || json_object_size(env) > JB_SPAWNER_MAX_ENV) {
      send_error(id, "bad_request", "env must be an object of at most %d strings",
                 JB_SPAWNER_MAX_ENV);
      return -1;
    }
    const char *k;
    json_object_foreach (env, k, v) {
      /* LD_* would reach the dynamic loader of every program of the command: refused here
       * too, whatever the caller checked */
      if (!k[0] || strchr(k, '=') || strncmp(k, "LD_", 3) == 0 || !json_is_string(v)) {
        send_error(id, "bad_request", "env: '%.64s' is not an allowed name with a string value", k);
        return -1;
      }
      total += strlen(k) + json_string_length(v) + 2;
    }
    if (total > JB_SPAWNER_MAX_ARGV_BYTES) {
      send_error(id, "bad_request", "argv and env are over %d bytes", JB_SPAWNER_MAX_ARGV_BYTES);
      return -1;
    }
    rq->env = env;
  }
  char why[300];
  json_t *cwd = json_object_get(req, "cwd");
  if (cwd && !json_is_null(cwd) && !json_is_string(cwd)) {
    send_error(id, "bad_request", "cwd must be a string");
    return -1;
  }
  if (check_cwd(json_string_value(cwd), rq->cwd, sizeof rq->cwd, why, sizeof why) < 0) {
    send_error(id, "bad_cwd", "%s", why);
    return -1;
  }
  json_t *in = json_object_get(req, "stdin");
  if (in && !json_is_null(in)) {
    const char *b64 = json_string_value(in);
    size_t max = JB_SPAWNER_MAX_STDIN;
    rq->stdin_data = malloc(max + 1);
    if (!b64 || !rq->stdin_data ||
        sodium_base642bin(rq->stdin_data, max, b64, strlen(b64), NULL, &rq->stdin_len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0) {
      send_error(id, "bad_request", "stdin must be base64 of at most %d bytes",
                 JB_SPAWNER_MAX_STDIN);
      return -1;
    }
  }
  rq->timeout_ms = int_field(req, "timeoutMs", 120000, 1, JB_SPAWNER_MAX_TIMEOUT_MS);
  rq->max_out = int_field(req, "maxOutputBytes", 1024 * 1024, 0, JB_SPAWNER_MAX_OUTPUT);
  json_t *wr = json_object_get(req, "writable");
  json_t *lim = json_object_get(req, "limits");
  long long nproc_max = nproc_limit();
  rq->fsize = int_field(lim, "fsizeBytes", JB_SPAWNER_DEFAULT_FSIZE, 0, 1LL << 50);
  rq->nproc = int_field(lim, "nproc", nproc_max, 1, nproc_max);
  rq->tmp = int_field(lim, "tmpBytes", JB_SPAWNER_DEFAULT_TMP, 1024 * 1024, 1LL << 34);
  rq->memory = int_field(lim, "memoryBytes", 0, 0, 1LL << 50);
  if (rq->timeout_ms < 0 || rq->max_out < 0 || (wr && !json_is_boolean(wr)) ||
      (lim && !json_is_null(lim) && !json_is_object(lim)) || rq->fsize < 0 || rq->nproc < 0 ||
      rq->tmp < 0 || rq->memory < 0) {
    send_error(id, "bad_request",
               "timeoutMs (1..%ld), maxOutputBytes (0..%ld), writable (boolean) or limits "
               "{fsizeBytes, nproc (1..%lld), tmpBytes, memoryBytes} out of range",
               JB_SPAWNER_MAX_TIMEOUT_MS, JB_SPAWNER_MAX_OUTPUT, nproc_max);
    return -1;
  }
  rq->writable = json_is_true(wr);
  if (jb_cs_exec_field(req, rq->writable, rq->overlay, why, sizeof why) < 0) {
    send_error(id, "bad_request", "%s", why);
    return -1;
  }
  return 0;
}

/* Closes jail `j`'s descriptors and lets go of its memory cgroup (removed once it is empty). */
static void jail_close_fds(struct cmd *j) {
  jb_memwatch_release(&j->mem);
  int *fds[] = {&j->fd[0], &j->fd[1], &j->status_fd, &j->ctl};
  for (size_t k = 0; k < sizeof fds / sizeof fds[0]; k++)
    if (*fds[k] >= 0) {
      close(*fds[k]);
      *fds[k] = -1;
    }
}

static void jail_reset(struct cmd *j) { *j = (struct cmd)JAIL_NONE; }

/* Starts building a jail into `j` (bwrap → filter → setpriv → the helper, ready on its socket
 * for its command) in a network namespace of its own made by clone (lo only; bwrap's
 * --unshare-net fails in gVisor): fds 0 /dev/null, 1-2 output, 3 the filter, 4 bwrap's status,
 * HELPER_FD the helper's; RLIMIT_NPROC at a command's most; in a memory cgroup of its own where
 * jb_memwatch_available (a jail that cannot join it fails). 0, or -1 with errno (no fallback). */
static int jail_build(struct cmd *j, bool writable, long long tmp, const unsigned char *bpf,
                      size_t bpf_len, const char *self, const char *ws) {
  jail_reset(j);
  int out[2] = {-1, -1}, errp[2] = {-1, -1}, st[2] = {-1, -1}, sp[2] = {-1, -1};
  int filt = jb_memfd_with("jailbox-exec-filter", bpf, bpf_len);
  struct args a = {0};
  int e = 0;
  if (filt < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 ||
      pipe2(st, O_CLOEXEC) < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0 ||
      (jb_memwatch_available(NULL, 0) && jb_memwatch_create(&j->mem) < 0)) {
    e = errno;
    goto fail;
  }
  jail_args(&a, writable, tmp, self, ws);
  long long nproc = nproc_limit();
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  long long t0 = now_ms();
  pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) {
    /* the child: its memory cgroup, descriptors 0-5, the limit, default signals, then bwrap */
    if (j->mem.procs_fd >= 0 && jb_memwatch_join(&j->mem) < 0) _exit(125);
    for (int s = 1; s < NSIG; s++)
      if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int want[6] = {null, out[1], errp[1], filt, st[1], sp[1]};
    /* move them above 5 first, so that no dup2 overwrites another */
    for (int k = 0; k < 6; k++) {
      int d = want[k] < 0 ? -1 : fcntl(want[k], F_DUPFD_CLOEXEC, 10);
      if (d < 0) _exit(125);
      want[k] = d;
    }
    for (int k = 0; k < 6; k++)
      if (dup2(want[k], k) < 0) _exit(125); /* dup2 clears FD_CLOEXEC */
    if (syscall(SYS_close_range, 6U, ~0U, 0U) < 0)
      for (int fd = 6; fd < 1024; fd++) close(fd);
    struct rlimit np = {(rlim_t)nproc, (rlim_t)nproc};
    if (setrlimit(RLIMIT_NPROC, &np) < 0) _exit(125);
    execv(BWRAP, a.v);
    _exit(127);
  }
  e = errno;
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (pid < 0) goto fail;
  args_free(&a);
  if (j->mem.procs_fd >= 0) close(j->mem.procs_fd);
  j->mem.procs_fd = -1;
  close(filt);
  close(out[1]);
  close(errp[1]);
  close(st[1]);
  close(sp[1]);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(errp[0], F_SETFL, O_NONBLOCK);
  fcntl(st[0], F_SETFL, O_NONBLOCK);
  j->running = true;
  j->bwrap = pid;
  j->fd[0] = out[0];
  j->fd[1] = errp[0];
  j->status_fd = st[0];
  j->ctl = sp[0];
  j->writable = writable;
  j->tmp = tmp;
  j->forked = t0;
  return 0;
fail:
  args_free(&a);
  jb_memwatch_release(&j->mem);
  int fds[] = {filt, out[0], out[1], errp[0], errp[1], st[0], st[1], sp[0], sp[1]};
  for (size_t k = 0; k < sizeof fds / sizeof fds[0]; k++)
    if (fds[k] >= 0) close(fds[k]);
  errno = e;
  return -1;
}

/* Reads the helper's ready byte of jail `j` when it is there (waiting up to `wait_ms`). true
 * when the helper waits for its command; false when it has not said so (yet, or it never will:
 * its socket ended, then ctl is closed). */
static bool jail_ready(struct cmd *j, int wait_ms) {
  if (j->ready) return true;
  if (j->ctl < 0) return false;
  struct pollfd pf = {.fd = j->ctl, .events = POLLIN};
  long long until = now_ms() + wait_ms;
  for (;;) {
    long long left = until - now_ms();
    int pr = poll(&pf, 1, left > 0 ? (int)left : 0);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return false;
    char c;
    ssize_t n = read(j->ctl, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n == 1 && c == 'r') {
      j->ready = true;
      j->ready_at = now_ms();
      return true;
    }
    close(j->ctl); /* the helper is gone (bwrap or setpriv failed, or it was killed) */
    j->ctl = -1;
    return false;
  }
}

/* Kills the jail built ahead and forgets it; its bwrap is reaped (up to 2 s). */
static void warm_discard(void) {
  if (!warm.running) return;
  if (!warm.init) await_init(&warm);
  if (warm.init > 0) kill(warm.init, SIGKILL);
  kill(warm.bwrap, SIGKILL);
  for (int i = 0; i < 200; i++) {
    int ws;
    pid_t p = waitpid(warm.bwrap, &ws, WNOHANG);
    if (p == warm.bwrap || (p < 0 && errno == ECHILD)) break;
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  jail_close_fds(&warm);
  jail_reset(&warm);
}

/* Whether the jail built ahead can take a command: its helper has said ready, or may still,
 * and has not gone since. A waiting helper writes nothing after its ready byte, so its socket
 * readable (its end) means the helper is gone though its bwrap may not have ended yet. */
static bool warm_alive(void) {
  if (!warm.running || warm.ctl < 0) return false;
  if (!warm.ready) return jail_ready(&warm, 0) || warm.ctl >= 0;
  struct pollfd pf = {.fd = warm.ctl, .events = POLLIN};
  return poll(&pf, 1, 0) == 0;
}

/* Builds the next jail ahead, of the kind the last command had, unless one is there, a command
 * runs, or the worker asked for none. */
static void warm_up(bool writable, long long tmp, const unsigned char *bpf, size_t bpf_len,
                    const char *self) {
  if (cool || warm.running || cur.running || !bpf_len) return;
  if (jail_build(&warm, writable, tmp, bpf, bpf_len, self, WORKSPACE) < 0) jail_reset(&warm);
}

/* The request for the helper (jb_exec_helper): NUL-terminated strings — cwd, RLIMIT_FSIZE,
 * RLIMIT_NPROC, the count of argv, argv, the count of env, NAME=VALUE each — after a 4-byte
 * length; the stdin memfd rides on the length as SCM_RIGHTS. 0, or -1 with errno. */
static int hand_over(int ctl, const struct request *rq, int stdin_fd) {
  struct jb_buf b;
  jb_buf_init(&b, JB_HELPER_REQUEST_MAX);
  int bad = 0;
  /* each string with its NUL */
#define PUT(str) (bad |= jb_buf_append(&b, (str), strlen(str) + 1))
  char num[32];
  PUT(rq->cwd);
  snprintf(num, sizeof num, "%lld", rq->fsize);
  PUT(num);
  snprintf(num, sizeof num, "%lld", rq->nproc);
  PUT(num);
  snprintf(num, sizeof num, "%zu", json_array_size(rq->argv));
  PUT(num);
  size_t i;
  json_t *v;
  json_array_foreach (rq->argv, i, v) PUT(json_string_value(v));
  snprintf(num, sizeof num, "%zu", rq->env ? json_object_size(rq->env) : 0);
  PUT(num);
  const char *k;
  json_object_foreach (rq->env, k, v) {
    bad |= jb_buf_appendf(&b, "%s=%s", k, json_string_value(v));
    bad |= jb_buf_append(&b, "", 1);
  }
#undef PUT
  if (bad) { /* parse_exec keeps argv and env within JB_HELPER_REQUEST_MAX */
    jb_buf_free(&b);
    errno = EMSGSIZE;
    return -1;
  }
  uint32_t len = (uint32_t)b.len;
  char cbuf[CMSG_SPACE(sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  struct iovec iov = {.iov_base = &len, .iov_len = sizeof len};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &stdin_fd, sizeof(int));
  ssize_t w;
  while ((w = sendmsg(ctl, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR) {}
  int rc = w == (ssize_t)sizeof len ? 0 : -1;
  for (size_t off = 0; rc == 0 && off < b.len;) {
    w = send(ctl, b.data + off, b.len - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      rc = -1;
      break;
    }
    off += (size_t)w;
  }
  jb_buf_free(&b);
  return rc;
}

/* Starts the command of `rq` in the jail built ahead when it is of the request's kind (the
 * workspace's mode and /tmp's size), else in one built now (the one ahead is discarded). 0, or
 * -1 after answering with an error (its overlay discarded). A jail whose helper never says ready
 * (bwrap or setpriv failed) runs as the command all the same: its end and stderr the result. */
static int start(struct request *rq, const unsigned char *bpf, size_t bpf_len, const char *self) {
  long long t_req = now_ms();
  int in = jb_memfd_with("jailbox-exec-stdin", rq->stdin_data ? (void *)rq->stdin_data : "",
                         rq->stdin_len);
  if (in < 0) {
    send_error(rq->id, "internal", "cannot set up the command's stdin: %s", strerror(errno));
    return -1;
  }
  char ws[PATH_MAX] = WORKSPACE, why[400];
  if (rq->overlay[0] &&
      jb_cs_mount(JB_CS_ROOT, rq->overlay, WORKSPACE, ws, sizeof ws, why, sizeof why) < 0) {
    send_error(rq->id, "overlay", "the command's overlay: %s", why);
    close(in);
    return -1;
  }
  bool was_warm = warm.running && warm.writable == rq->writable && warm.tmp == rq->tmp &&
                  !rq->overlay[0] && warm_alive();
  for (int attempt = 0;; attempt++) {
    if (was_warm) {
      cur = warm;
      jail_reset(&warm);
    } else {
      warm_discard();
      if (jail_build(&cur, rq->writable, rq->tmp, bpf, bpf_len, self, ws) < 0) {
        send_error(rq->id, "internal", "cannot start the command's jail: %s", strerror(errno));
        jail_reset(&cur);
        if (rq->overlay[0]) (void)jb_cs_discard(JB_CS_ROOT, rq->overlay, why, sizeof why);
        close(in);
        return -1;
      }
    }
    cur.was_warm = was_warm;
    /* the helper says ready once bwrap, the filter and setpriv are through */
    bool ready = jail_ready(&cur, 30000);
    if (ready && hand_over(cur.ctl, rq, in) == 0) break;
    if (ready) { /* the helper went away between its ready and the request */
      close(cur.ctl);
      cur.ctl = -1;
    }
    if (!was_warm || attempt > 0) break; /* a jail built for it: its end tells why */
    /* the jail ahead died unseen: it is killed, and the command gets a jail built for it */
    warm = cur;
    jail_reset(&cur);
    warm_discard();
    was_warm = false;
  }
  close(in);
  if (cur.ctl >= 0) fcntl(cur.ctl, F_SETFL, O_NONBLOCK); /* the helper's word on the end */
  cur.id = json_incref(rq->id);
  cur.max_out = rq->max_out;
  cur.handed = now_ms();
  cur.start = t_req;
  cur.deadline = cur.handed + rq->timeout_ms;
  cur.mem_limit = rq->memory;
  return 0;
}

/* Reads what stream `k` has (one read): counted, and sent while under the cap. */
static void pump_output(int k) {
  unsigned char buf[JB_SPAWNER_CHUNK];
  ssize_t n = read(cur.fd[k], buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    close(cur.fd[k]);
    cur.fd[k] = -1;
    return;
  }
  long long before = cur.bytes[k];
  cur.bytes[k] += n;
  if (before >= cur.max_out) {
    cur.trunc[k] = true;
    return;
  }
  size_t send = (size_t)n;
  if (before + n > cur.max_out) {
    send = (size_t)(cur.max_out - before);
    cur.trunc[k] = true;
  }
  if (!send) return;
  char b64[sodium_base64_ENCODED_LEN(JB_SPAWNER_CHUNK, sodium_base64_VARIANT_ORIGINAL)];
  sodium_bin2base64(b64, sizeof b64, buf, send, sodium_base64_VARIANT_ORIGINAL);
  send_obj(json_pack("{s:O, s:s, s:I, s:s}", "exec", cur.id, "stream", k ? "stderr" : "stdout",
                     "seq", (json_int_t)cur.seq++, "data", b64));
}

/* The command ended and its output is read: the result line. bwrap reports the command's
 * end as an exit code: its own, or 128 + the signal that killed it. */
static void finish(void) {
  int code = WIFEXITED(cur.wstatus) ? WEXITSTATUS(cur.wstatus) : 128 + WTERMSIG(cur.wstatus);
  json_t *exit_code = json_null(), *sig = json_null();
  const char *by = cur.killed_by;
  bool oom = by && strcmp(by, "memory") == 0;
  if (by) {
    sig = json_string("SIGKILL");
  } else if (code > 128 && code < 128 + 32) {
    sig = json_string(jb_signame(code - 128));
    if (code - 128 == SIGSYS) by = "seccomp";
  } else {
    exit_code = json_integer(code);
  }
  json_t *r =
      json_pack("{s:o, s:o, s:b, s:I, s:I, s:I, s:b, s:b, s:b, s:s?, s:n}", "exitCode", exit_code,
                "signal", sig, "timedOut", by && strcmp(by, "timeout") == 0, "durationMs",
                (json_int_t)(now_ms() - cur.start), "stdoutBytes", (json_int_t)cur.bytes[0],
                "stderrBytes", (json_int_t)cur.bytes[1], "stdoutTruncated", cur.trunc[0],
                "stderrTruncated", cur.trunc[1], "oom", oom, "killedBy", by, "seccompSyscall");
  if (r && !by) json_object_set_new(r, "killedBy", json_null());
  /* the memory the jail held at most when read (every JB_MEMWATCH_INTERVAL_MS), and its limit */
  if (r && cur.mem.usage_fd >= 0)
    json_object_set_new(r, "memory",
                        json_pack("{s:I, s:I}", "peakBytes", (json_int_t)cur.mem_peak, "limitBytes",
                                  (json_int_t)cur.mem_limit));
  /* where the time went: waiting for the jail (0 when it was built ahead and ready), building
   * it (bwrap to the helper's ready), the command (hand-over to the helper's word that it
   * ended: fork, exec, the run), the jail's end (to bwrap's end: the helper's, the pid
   * namespace's), the output's drain after it; -1: not seen */
  long long now = now_ms();
  if (r)
    json_object_set_new(
        r, "timingsMs",
        json_pack("{s:b, s:I, s:I, s:I, s:I, s:I}", "warm", cur.was_warm, "jailWait",
                  (json_int_t)(cur.handed - cur.start), "jailBuild",
                  (json_int_t)(cur.ready_at ? cur.ready_at - cur.forked : -1), "command",
                  (json_int_t)(cur.cmd_ended ? cur.cmd_ended - cur.handed : -1), "jailEnd",
                  (json_int_t)(cur.cmd_ended ? cur.exited_at - cur.cmd_ended : -1), "drain",
                  (json_int_t)(now - cur.exited_at)));
  send_obj(json_pack("{s:O, s:b, s:o}", "id", cur.id, "ok", 1, "result", r));
  jail_close_fds(&cur);
  json_decref(cur.id);
  jail_reset(&cur);
  jb_memwatch_sweep();
  /* the next command's jail, built now so that its request only hands the command over */
  warm_up(last_writable, last_tmp, jail_bpf, jail_bpf_len, jail_self);
}

static void handle(json_t *req, const unsigned char *bpf, size_t bpf_len, const char *self) {
  json_t *id = json_object_get(req, "id");
  if (!json_is_integer(id) || json_integer_value(id) < 0) {
    send_error(NULL, "bad_request", "field 'id' must be a non-negative integer");
    return;
  }
  const char *op = json_string_value(json_object_get(req, "op"));
  if (op && strcmp(op, "exec") == 0) {
    if (cur.running) {
      send_error(id, "busy", "a command is running (one at a time)");
      return;
    }
    if (!bpf_len) {
      send_error(id, "unavailable", "no exec filter was handed over at launch");
      return;
    }
    struct request rq = {.id = id, .env = NULL};
    if (parse_exec(req, &rq) == 0) {
      last_writable = rq.writable;
      last_tmp = rq.tmp;
      (void)start(&rq, bpf, bpf_len, self);
    }
    free(rq.stdin_data);
    return;
  }
  if (op && (strcmp(op, "discard") == 0 || strcmp(op, "warm") == 0)) {
    /* discard: the jail built ahead is killed and none is built until `warm` (a paused
     * session keeps no process it does not need); warm: jails are built ahead again */
    bool discard = op[0] == 'd';
    cool = discard;
    if (discard)
      warm_discard();
    else
      warm_up(last_writable, last_tmp, bpf, bpf_len, self);
    send_obj(json_pack("{s:O, s:b, s:{s:b}}", "id", id, "ok", 1, "result", "warm", warm.running));
    return;
  }
  if (op && strcmp(op, "signal") == 0) {
    const char *what = json_string_value(json_object_get(req, "what"));
    int sig = !what                       ? 0
              : strcmp(what, "kill") == 0 ? SIGKILL
              : strcmp(what, "stop") == 0 ? SIGSTOP
              : strcmp(what, "cont") == 0 ? SIGCONT
                                          : 0;
    if (!sig) {
      send_error(id, "bad_request", "what must be kill, stop or cont");
      return;
    }
    if (!cur.running || cur.exited) {
      send_error(id, "not_running", "no command is running");
      return;
    }
    if (sig == SIGKILL && !cur.killed_by) cur.killed_by = "signal";
    if (signal_tree(sig) < 0) {
      send_error(id, "internal", "the command's processes could not be found");
      return;
    }
    send_obj(json_pack("{s:O, s:b, s:{s:s}}", "id", id, "ok", 1, "result", "signalled", what));
    return;
  }
  if (op && strncmp(op, "cs_", 3) == 0) { /* an overlay's manifest, a file of it, its discard */
    char why[400] = "a command is running";
    const char *code = "busy";
    json_t *res = NULL;
    if (!cur.running && jb_memwatch_settle(2000, why, sizeof why)) /* no jail's process left */
      res = jb_cs_request(JB_CS_ROOT, op, req, &code, why, sizeof why);
    if (!res) send_error(id, code, "%s", why);
    if (res) send_obj(json_pack("{s:O, s:b, s:o}", "id", id, "ok", 1, "result", res));
    return;
  }
  send_error(id, "unknown_op", "unknown op '%.64s'", op ? op : "");
}

/* Reads the running command's memory when it is due and kills its jail (killedBy "memory", the
 * result's oom) once the jail holds more than the command's limit. */
static void watch_memory(void) {
  if (!cur.running || cur.exited || cur.killed_by || cur.mem_limit <= 0 || cur.mem.usage_fd < 0 ||
      now_ms() < cur.mem_next)
    return;
  cur.mem_next = now_ms() + JB_MEMWATCH_INTERVAL_MS;
  long long used = jb_memwatch_usage(&cur.mem);
  if (used > cur.mem_peak) cur.mem_peak = used;
  if (used <= cur.mem_limit) return;
  cur.killed_by = "memory";
  signal_tree(SIGKILL);
}

/* How long the loop may wait for an event, ms (-1: no limit): until the running command's
 * deadline or its memory's next read, or (once it ended) its output's drain; 1 s at most. */
static int loop_wait(void) {
  if (!cur.running) return -1;
  long long until = cur.exited ? cur.drain_until : cur.deadline;
  if (!cur.exited && cur.mem_limit > 0 && cur.mem.usage_fd >= 0 && cur.mem_next < until)
    until = cur.mem_next;
  long long wait = until - now_ms();
  return wait < 0 ? 0 : wait > 1000 ? 1000 : (int)wait;
}

/* The channel `chan` made non-blocking, the overlays an earlier spawner of this container left
 * discarded, and the spawner's hello: protocol, pid, filter, binds, image facts, the memory
 * watch (or why not). */
static void greet(int chan, size_t bpf_len) {
  fcntl(chan, F_SETFL, fcntl(chan, F_GETFL) | O_NONBLOCK);
  jb_cs_sweep(JB_CS_ROOT);
  char why[200];
  bool mem = jb_memwatch_available(why, sizeof why);
  send_obj(json_pack("{s:s, s:i, s:i, s:b, s:o, s:o*, s:{s:s?, s:i, s:s?}}", "hello", "spawner",
                     "protocol", JB_SPAWNER_PROTOCOL, "pid", (int)getpid(), "filter", bpf_len > 0,
                     "binds", describe_binds(), "image", jb_image_facts(), "memory", "watch",
                     mem ? "cgroup" : NULL, "intervalMs", JB_MEMWATCH_INTERVAL_MS, "reason",
                     mem ? NULL : why));
}

int jb_spawner_run(int chan, const unsigned char *bpf, size_t bpf_len, pid_t shim_pid,
                   const char *self) {
  chan_fd = chan;
  jail_bpf = bpf;
  jail_bpf_len = bpf_len;
  jail_self = self;
  signal(SIGPIPE, SIG_IGN);
  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) return 125;
  struct sigaction sa = {.sa_handler = on_sigchld, .sa_flags = SA_RESTART | SA_NOCLDSTOP};
  sigaction(SIGCHLD, &sa, NULL);
  greet(chan, bpf_len);
  /* the first command's jail, built ahead (read-only workspace, the default /tmp) */
  warm_up(false, JB_SPAWNER_DEFAULT_TMP, bpf, bpf_len, self);
  struct jb_line_reader r;
  jb_line_init(
      &r, &(struct jb_line_opts){
              .max_line = JB_SPAWNER_MAX_LINE, .over = JB_LINE_SKIP_WHOLE, .skip_empty = true});
  int shim_status = -1;
  bool chan_open = true;
  for (;;) {
    /* children that ended */
    char drain[64];
    while (read(sig_pipe[0], drain, sizeof drain) > 0) {}
    for (;;) {
      int ws;
      pid_t p = waitpid(-1, &ws, WNOHANG);
      if (p <= 0) break;
      if (p == shim_pid) shim_status = ws;
      if (warm.running && p == warm.bwrap) { /* the jail built ahead ended: none is ahead now */
        jail_close_fds(&warm);
        jail_reset(&warm);
      }
      if (cur.running && p == cur.bwrap) {
        cur.exited = true;
        cur.exited_at = now_ms();
        cur.wstatus = ws;
        /* the jail's processes are gone with its pid 1; what they wrote is still in the pipes */
        cur.drain_until = now_ms() + 2000;
      }
    }
    if (shim_status >= 0) {
      if (cur.running && !cur.exited) signal_tree(SIGKILL);
      warm_discard();
      break;
    }
    watch_memory();
    if (cur.running && !cur.exited && now_ms() >= cur.deadline && !cur.killed_by) {
      cur.killed_by = "timeout";
      signal_tree(SIGKILL);
    }
    if (cur.running && cur.exited &&
        ((cur.fd[0] < 0 && cur.fd[1] < 0) || now_ms() >= cur.drain_until))
      finish();
    /* requests */
    while (chan_open) {
      json_t *req = NULL;
      jb_error err = {0};
      int rc = jb_line_next_object(&r, JB_SHIM_MAX_DEPTH, &req, &err);
      if (rc == JB_LINE_OK) {
        handle(req, bpf, bpf_len, self);
        json_decref(req);
        continue;
      }
      if (rc == JB_LINE_BAD_JSON) {
        send_error(NULL, "bad_request", "%s", err.msg);
        continue;
      }
      if (rc == JB_LINE_TOO_LONG) {
        send_error(NULL, "too_large", "request line over %d bytes", JB_SPAWNER_MAX_LINE);
        continue;
      }
      if (rc == JB_LINE_AGAIN) {
        ssize_t got = jb_line_read(&r, chan, &err);
        if (got > 0) continue;
        if (got < 0 && (err.code == EAGAIN || err.code == EWOULDBLOCK || err.code == EINTR)) break;
        if (got == 0) continue; /* JB_LINE_END next */
      }
      /* the end of the channel (or no memory): the worker is gone; nothing more will come */
      chan_open = false;
      cool = true;
      warm_discard();
      if (cur.running && !cur.exited) {
        cur.killed_by = "signal";
        signal_tree(SIGKILL);
      }
    }
    if (chan_dead && cur.running && !cur.exited) {
      cur.killed_by = "signal";
      signal_tree(SIGKILL);
    }
    struct pollfd pf[8] = {{.fd = sig_pipe[0], .events = POLLIN},
                           {.fd = chan_open ? chan : -1, .events = POLLIN},
                           {.fd = cur.running ? cur.fd[0] : -1, .events = POLLIN},
                           {.fd = cur.running ? cur.fd[1] : -1, .events = POLLIN},
                           {.fd = cur.running ? cur.status_fd : -1, .events = POLLIN},
                           {.fd = warm.running ? warm.status_fd : -1, .events = POLLIN},
                           {.fd = warm.running && !warm.ready ? warm.ctl : -1, .events = POLLIN},
                           {.fd = cur.running ? cur.ctl : -1, .events = POLLIN}};
    int pr = poll(pf, 8, loop_wait());
    if (pr < 0 && errno != EINTR) break;
    if (pr <= 0) continue;
    if (pf[2].revents) pump_output(0);
    if (pf[3].revents) pump_output(1);
    if (pf[4].revents) read_status(&cur);
    if (pf[5].revents) read_status(&warm);
    if (pf[6].revents) jail_ready(&warm, 0);
    if (pf[7].revents) { /* the helper's byte when its command ended, or the socket's end */
      char c;
      ssize_t n = read(cur.ctl, &c, 1);
      if (n == 1 && !cur.cmd_ended) cur.cmd_ended = now_ms();
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        close(cur.ctl);
        cur.ctl = -1;
      }
    }
  }
  jb_line_free(&r);
  /* a command still running dies with its pid 1; wait for its bwrap a moment */
  if (cur.running && !cur.exited) {
    for (int i = 0; i < 100; i++) {
      int ws;
      if (waitpid(cur.bwrap, &ws, WNOHANG) == cur.bwrap) break;
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, NULL);
    }
  }
  if (shim_status < 0) return 125;
  return WIFEXITED(shim_status) ? WEXITSTATUS(shim_status) : 128 + WTERMSIG(shim_status);
}
