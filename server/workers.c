/* workers.c — starting, restarting, adopting and stopping jailbox-worker processes from
 * jailboxd (see workers.h). */
#define _GNU_SOURCE
#include "server/workers.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"
#include "lib/metrics.h"

struct slot {
  char id[512];
  char pidfile[PATH_MAX];
  char ops_socket[108]; /* sandbox/proto/direct.h; "" when the path would not fit a sockaddr_un */
  pid_t pid; /* 0: not running */
  bool adopted; /* not our child: watched through its pid file's lock */
  long long started_ms, next_start_ms;
  long backoff_ms;
  int quick_ready; /* deaths in a row of a worker that was ready and ran under READY_RUN_MS */
};

/* A worker that said it was ready (its ready file names its pid) and then died is started
 * again at once: it failed at its work, not at its start, and its sessions wait for the next
 * one. Only when that happens more than READY_AGAIN_MAX times in a row, each within
 * READY_RUN_MS of its start, does the growing pause apply to it. */
#define READY_RUN_MS 10000
#define READY_AGAIN_MAX 8

struct jb_workers {
  char bin[PATH_MAX];
  char conninfo[4096];
  char key_file[PATH_MAX];
  size_t n;
  struct slot *slots;
  pthread_t thread;
  bool thread_started;
  atomic_bool stopping;
  pthread_mutex_t lock;
};

/* The pid in a locked pid file, or 0 when no live worker holds it. */
static pid_t locked_pid(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  pid_t pid = 0;
  if (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK) {
    char buf[32] = "";
    ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
    if (r > 0) pid = (pid_t)atoi(buf);
  }
  close(fd);
  return pid;
}

/* Whether the worker `pid` of pid file `pidfile` said it was ready: "<pidfile>.ready" holds its
 * pid (sandbox/worker/main.c mark_ready). */
static bool said_ready(const char *pidfile, pid_t pid) {
  char path[PATH_MAX + 8], buf[32] = "";
  snprintf(path, sizeof path, "%s.ready", pidfile);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
  close(fd);
  return r > 0 && (pid_t)atoi(buf) == pid;
}

static void env_free(char **env) {
  for (size_t i = 0; env && env[i]; i++) free(env[i]);
  free(env);
}

/* The worker's environment: jailboxd's own without the five variables it sets for the worker,
 * then those five. New (env_free), or NULL when out of memory. It is made before the fork:
 * after a fork in a process with threads only async-signal-safe calls may run (another
 * thread may have held the allocator's lock at that instant, and setenv or malloc in the
 * child would wait on it for ever). */
static char **worker_env(const struct jb_workers *w, const struct slot *s) {
  static const char *const names[] = {"JAILBOX_DATABASE_URL", "JAILBOX_WORKER_ID",
                                      "JAILBOX_WORKER_PIDFILE", "JAILBOX_WORKER_OPS_SOCKET",
                                      "JAILBOX_SIGNING_KEY_FILE"};
  const char *vals[] = {w->conninfo, s->id, s->pidfile, s->ops_socket, w->key_file};
  size_t n = 0, k = 0, set = sizeof names / sizeof names[0];
  while (environ[n]) n++;
  char **env = calloc(n + set + 1, sizeof *env);
  if (!env) return NULL;
  for (size_t i = 0; i < n; i++) {
    bool replaced = false;
    for (size_t j = 0; j < set; j++) {
      size_t l = strlen(names[j]);
      replaced |= strncmp(environ[i], names[j], l) == 0 && environ[i][l] == '=';
    }
    if (!replaced && !(env[k++] = strdup(environ[i]))) goto oom;
  }
  for (size_t j = 0; j < set; j++)
    if (asprintf(&env[k++], "%s=%s", names[j], vals[j]) < 0) {
      env[k - 1] = NULL;
      goto oom;
    }
  return env;
oom:
  env_free(env);
  return NULL;
}

static void spawn(struct jb_workers *w, struct slot *s) {
  char **env = worker_env(w, s);
  pid_t pid = env ? fork() : -1;
  if (pid < 0) {
    jb_log(JB_LOG_ERROR, "cannot start a worker", "worker", s->id, "error",
           strerror(env ? errno : ENOMEM), NULL);
    env_free(env);
    return;
  }
  if (pid == 0) {
    /* jailboxd blocks SIGTERM/SIGINT for sigwait; the worker needs them back */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    setsid(); /* a terminal's Ctrl-C reaches jailboxd, which then stops the worker in order */
    syscall(SYS_close_range, 3U, ~0U, 0U);
    char *const argv[] = {w->bin, NULL};
    execve(w->bin, argv, env);
    _exit(127);
  }
  env_free(env);
  s->pid = pid;
  s->adopted = false;
  s->started_ms = jb_now_ms();
  char p[16];
  snprintf(p, sizeof p, "%d", (int)pid);
  jb_log(JB_LOG_INFO, "worker started", "worker", s->id, "pid", p, "bin", w->bin, NULL);
}

static void *monitor(void *arg) {
  struct jb_workers *w = arg;
  while (!atomic_load(&w->stopping)) {
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->n; i++) {
      struct slot *s = &w->slots[i];
      if (s->pid > 0) {
        bool gone = false;
        int st = 0;
        if (s->adopted)
          gone = locked_pid(s->pidfile) != s->pid;
        else
          gone = waitpid(s->pid, &st, WNOHANG) == s->pid;
        if (!gone) continue;
        char how[48];
        if (s->adopted)
          snprintf(how, sizeof how, "gone");
        else if (WIFSIGNALED(st))
          snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(st));
        else
          snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(st));
        long long ran = jb_now_ms() - s->started_ms;
        bool ready = said_ready(s->pidfile, s->pid);
        s->quick_ready = ready && ran < READY_RUN_MS ? s->quick_ready + 1 : 0;
        /* a worker that ran a minute had a good run: the pause starts again from its least */
        if (ran > 60000) s->backoff_ms = 0;
        s->backoff_ms =
            s->backoff_ms ? (s->backoff_ms * 2 > 30000 ? 30000 : s->backoff_ms * 2) : 1000;
        s->next_start_ms = jb_now_ms() + s->backoff_ms;
        /* a clean exit is a drain (SIGTERM: an upgrade of the binary), and a worker that was
         * ready died at its work: its sessions wait for the next worker, which starts now */
        if ((!s->adopted && WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
            (ready && s->quick_ready <= READY_AGAIN_MAX)) {
          s->backoff_ms = 0;
          s->next_start_ms = jb_now_ms();
        }
        s->pid = 0;
        char b[24];
        snprintf(b, sizeof b, "%ld", s->backoff_ms);
        jb_log(JB_LOG_WARN, "worker exited; restarting", "worker", s->id, "how", how, "afterMs", b,
               "wasReady", ready ? "true" : "false", NULL);
      } else if (jb_now_ms() >= s->next_start_ms) {
        pid_t other = locked_pid(s->pidfile);
        if (other > 0) {
          s->pid = other;
          s->adopted = true;
          s->started_ms = jb_now_ms();
          continue;
        }
        spawn(w, s);
      }
    }
    pthread_mutex_unlock(&w->lock);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

int jb_workers_start(struct jb_workers **out, long n, const char *bin, const char *state_dir,
                     const char *conninfo, const char *signing_key_file, jb_error *err) {
  *out = NULL;
  struct jb_workers *w = calloc(1, sizeof *w);
  if (!w || !(w->slots = calloc((size_t)n, sizeof *w->slots))) {
    free(w);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  w->n = (size_t)n;
  if (bin && bin[0]) {
    snprintf(w->bin, sizeof w->bin, "%s", bin);
  } else {
    char self[PATH_MAX];
    ssize_t r = readlink("/proc/self/exe", self, sizeof self - 1);
    if (r <= 0) {
      free(w->slots);
      free(w);
      return jb_fail_errno(err, errno, "cannot find jailboxd's own path");
    }
    self[r] = '\0';
    snprintf(w->bin, sizeof w->bin, "%s/jailbox-worker", dirname(self));
  }
  if (access(w->bin, X_OK) < 0) {
    int e = errno;
    jb_fail_errno(err, e, "worker binary %s (set JAILBOX_WORKER_BIN, or JAILBOX_WORKERS=0)",
                  w->bin);
    free(w->slots);
    free(w);
    return -1;
  }
  snprintf(w->conninfo, sizeof w->conninfo, "%s", conninfo);
  snprintf(w->key_file, sizeof w->key_file, "%s", signing_key_file ? signing_key_file : "");
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  char abs_state[PATH_MAX];
  if (!realpath(state_dir, abs_state)) snprintf(abs_state, sizeof abs_state, "%s", state_dir);
  for (size_t i = 0; i < w->n; i++) {
    /* stable across restarts, distinct between jailboxd instances sharing a host or a database */
    snprintf(w->slots[i].id, sizeof w->slots[i].id, "%s:%s#%zu", host, abs_state, i);
    snprintf(w->slots[i].pidfile, sizeof w->slots[i].pidfile, "%s/worker-%zu.pid", abs_state, i);
    char ops[PATH_MAX];
    snprintf(ops, sizeof ops, "%s/worker-%zu.ops", abs_state, i);
    if (strlen(ops) < sizeof w->slots[i].ops_socket)
      memcpy(w->slots[i].ops_socket, ops, strlen(ops) + 1);
    else
      jb_log(JB_LOG_WARN,
             "state directory path too long for the worker's ops socket: ops take the queued path",
             "worker", w->slots[i].id, NULL);
  }
  pthread_mutex_init(&w->lock, NULL);
  /* the first start happens here, so that the log shows it before "listening" */
  for (size_t i = 0; i < w->n; i++) {
    struct slot *s = &w->slots[i];
    pid_t other = locked_pid(s->pidfile);
    if (other > 0) {
      s->pid = other;
      s->adopted = true;
      s->started_ms = jb_now_ms();
      char p[16];
      snprintf(p, sizeof p, "%d", (int)other);
      jb_log(JB_LOG_INFO, "worker adopted (left running by an earlier jailboxd)", "worker", s->id,
             "pid", p, NULL);
    } else {
      spawn(w, s);
    }
  }
  w->thread_started = pthread_create(&w->thread, NULL, monitor, w) == 0;
  if (!w->thread_started) {
    jb_workers_stop(w, 5000);
    return jb_fail(err, EAGAIN, "cannot start the worker supervisor thread");
  }
  *out = w;
  return 0;
}

void jb_workers_stop(struct jb_workers *w, long grace_ms) {
  if (!w) return;
  atomic_store(&w->stopping, true);
  if (w->thread_started) pthread_join(w->thread, NULL);
  /* SIGINT: the worker ends its sessions (SIGTERM would leave them for a next worker) */
  for (size_t i = 0; i < w->n; i++)
    if (w->slots[i].pid > 0) kill(w->slots[i].pid, SIGINT);
  long long deadline = jb_now_ms() + grace_ms;
  for (size_t i = 0; i < w->n; i++) {
    struct slot *s = &w->slots[i];
    while (s->pid > 0) {
      bool gone =
          s->adopted ? locked_pid(s->pidfile) != s->pid : waitpid(s->pid, NULL, WNOHANG) == s->pid;
      if (gone) {
        s->pid = 0;
        break;
      }
      if (jb_now_ms() > deadline) {
        jb_log(JB_LOG_WARN, "worker did not stop in time; killing it", "worker", s->id, NULL);
        kill(s->pid, SIGKILL);
        if (!s->adopted) waitpid(s->pid, NULL, 0);
        s->pid = 0;
        break;
      }
      struct timespec ts = {0, 50 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  jb_log(JB_LOG_INFO, "workers stopped", NULL);
  pthread_mutex_destroy(&w->lock);
  free(w->slots);
  free(w);
}

const char *jb_workers_ops_socket(const struct jb_workers *w, const char *worker_id) {
  if (!w || !worker_id) return NULL;
  for (size_t i = 0; i < w->n; i++) /* ids and paths are fixed at start: no lock needed */
    if (strcmp(w->slots[i].id, worker_id) == 0)
      return w->slots[i].ops_socket[0] ? w->slots[i].ops_socket : NULL;
  return NULL;
}
