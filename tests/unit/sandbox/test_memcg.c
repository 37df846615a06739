/* test_memcg.c — a container's memory cgroup (sandbox/worker/memcg.h): the path found in
 * /proc/PID/cgroup text of both hierarchies, the OOM counters of both file formats, the
 * cgroup of this very process read for real, and (as root, where a memory cgroup can be made)
 * the kernel's OOM notification for a child killed over a scratch cgroup's limit, taken
 * directly and by a session's watch (sandbox/worker/oomwatch.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/metrics.h"
#include "sandbox/worker/memcg.h"
#include "sandbox/worker/oomwatch.h"

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

/* ---- the OOM notification, for real ---------------------------------------------------- */

/* A scratch memory cgroup made for a test: `dir` under the first hierarchy where one can be
 * made (v1: /sys/fs/cgroup/memory; v2: /sys/fs/cgroup with the memory controller given to
 * its children). */
struct scratch {
  char dir[256];
  bool v2;
};

static bool put(const char *dir, const char *file, const char *text) {
  char p[400];
  snprintf(p, sizeof p, "%s/%s", dir, file);
  int fd = open(p, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  close(fd);
  return ok;
}

static bool has_word(const char *file, const char *word) {
  char text[512];
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  for (char *t = strtok(text, " \n"); t; t = strtok(NULL, " \n"))
    if (!strcmp(t, word)) return true;
  return false;
}

/* Makes the scratch cgroup with a memory limit of `mib` MiB and no swap above it; false (and
 * says why) when this host or user cannot. */
static bool scratch_make(struct scratch *sc, int mib) {
  char limit[32];
  snprintf(limit, sizeof limit, "%d", mib << 20);
  if (geteuid() != 0) return printf("# not root: no scratch cgroup\n"), false;
  if (access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) == 0) {
    sc->v2 = false;
    snprintf(sc->dir, sizeof sc->dir, "/sys/fs/cgroup/memory/jb-oomtest-%d", (int)getpid());
  } else if (has_word("/sys/fs/cgroup/cgroup.subtree_control", "memory")) {
    sc->v2 = true;
    snprintf(sc->dir, sizeof sc->dir, "/sys/fs/cgroup/jb-oomtest-%d", (int)getpid());
  } else {
    return printf("# no writable memory cgroup hierarchy\n"), false;
  }
  if (mkdir(sc->dir, 0755) < 0) return printf("# mkdir %s: %s\n", sc->dir, strerror(errno)), false;
  bool ok =
      sc->v2 ? put(sc->dir, "memory.max", limit) : put(sc->dir, "memory.limit_in_bytes", limit);
  /* with swap the hog would be swapped rather than killed: none beyond the limit */
  if (sc->v2)
    put(sc->dir, "memory.swap.max", "0");
  else
    put(sc->dir, "memory.memsw.limit_in_bytes", limit);
  if (!ok) {
    printf("# cannot set the limit in %s\n", sc->dir);
    rmdir(sc->dir);
  }
  return ok;
}

/* Removes the (empty) scratch cgroup; the kernel may take a moment to let it go. */
static void scratch_remove(struct scratch *sc) {
  for (int i = 0; i < 100 && rmdir(sc->dir) < 0 && errno == EBUSY; i++) usleep(10000);
}

/* A child that allocates and touches 1 MiB at a time, up to 1 GiB, once told to go on `go`. */
static pid_t hog(int go[2]) {
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(2);
    for (int i = 0; i < 1024; i++) {
      char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) _exit(3);
      memset(p, 1, 1 << 20);
    }
    _exit(0);
  }
  close(go[0]);
  return pid;
}

/* Waits at most `ms` for `n` to have a notification. */
static bool notified(const struct jb_memcg_notify *n, int ms) {
  struct pollfd p = {.fd = n->fd, .events = n->events};
  return poll(&p, 1, ms) > 0;
}

/* A child over the limit of a scratch cgroup is OOM-killed: the notification comes, both taken
 * directly (jb_memcg_notify_*) and by a session's watch (oomwatch.h), whose counters read when
 * it came show the kill; the cgroup's removal ends the registration. */
static void oom_notified(void **state) {
  (void)state;
  struct scratch sc;
  if (!scratch_make(&sc, 32)) skip();
  int go[2];
  assert_int_equal(pipe2(go, O_CLOEXEC), 0);
  pid_t pid = hog(go);
  assert_true(pid > 0);
  char text[32];
  snprintf(text, sizeof text, "%d", (int)pid);
  assert_true(put(sc.dir, "cgroup.procs", text));
  /* the cgroup as the worker finds a container's: from the process */
  struct jb_memcg m, m2;
  jb_error err = {0};
  assert_int_equal(jb_memcg_open(pid, "/sys/fs/cgroup", &m, &err), 0);
  assert_int_equal(m.v2, sc.v2);
  assert_int_equal(jb_memcg_open(pid, "/sys/fs/cgroup", &m2, &err), 0);
  struct jb_memcg_notify n;
  assert_int_equal(jb_memcg_notify_open(&m, &n, &err), 0);
  assert_true(fcntl(n.fd, F_GETFD) & FD_CLOEXEC);
  struct jb_oomwatch *w;
  assert_int_equal(jb_oomwatch_start(&m2, &w, &err), 0);
  assert_int_equal(m2.dirfd, -1); /* the watch owns it */
  /* nothing yet */
  assert_false(jb_memcg_notify_pending(&n));
  struct jb_oom_record rec;
  assert_false(jb_oomwatch_seen(w, &rec));
  assert_true(rec.counted);
  assert_int_equal(rec.counts.oom_kill, 0);

  long long t0 = jb_now_ms();
  assert_int_equal(write(go[1], "x", 1), 1);
  close(go[1]);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  long long t_dead = jb_now_ms();
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGKILL);
  /* the notification is there; taken, it says OOM and the counters show the kill */
  assert_true(notified(&n, 5000));
  struct jb_memcg_note note;
  assert_int_equal(jb_memcg_notify_take(&m, &n, &note, &err), 0);
  assert_true(note.oom);
  assert_false(note.gone);
  assert_true(note.counts.oom_kill >= 1);
  /* the watch recorded it from the notification, with the kill counted (its thread, normally
   * before this process saw the child dead: printed) */
  assert_true(jb_oomwatch_seen(w, &rec));
  assert_int_equal(rec.source, JB_OOM_EVENT);
  printf(
      "# %s: OOM known from the notification %lld ms after the start, %lld ms before the "
      "child was seen dead; oom_kill %lld, oom %lld\n",
      sc.v2 ? "v2" : "v1", rec.at_ms - t0, t_dead - rec.at_ms, rec.counts.oom_kill, rec.counts.oom);
  assert_true(rec.at_ms >= t0);
  assert_true(rec.counts.oom_kill >= 1);
  /* when it was last newly seen (the end is judged by that), and that it was notified */
  assert_true(rec.last_ms >= rec.at_ms && rec.last_ms <= jb_now_ms());
  assert_true(rec.notified);
  /* read again: the time of the last OOM moves only when a counter grew meanwhile */
  struct jb_oom_record again;
  assert_true(jb_oomwatch_seen(w, &again));
  bool grew = again.counts.oom_kill > rec.counts.oom_kill || again.counts.oom > rec.counts.oom;
  assert_true(grew ? again.last_ms >= rec.last_ms : again.last_ms == rec.last_ms);

  /* the cgroup removed: v1 signals the eventfd once more; the next take finds it gone */
  scratch_remove(&sc);
  assert_int_equal(access(sc.dir, F_OK), -1);
  if (!sc.v2) assert_true(notified(&n, 5000));
  assert_int_equal(jb_memcg_notify_take(&m, &n, &note, &err), 0);
  assert_true(note.gone);
  /* the record stays for the session */
  assert_true(jb_oomwatch_seen(w, &rec));
  assert_int_equal(rec.source, JB_OOM_EVENT);
  jb_oomwatch_stop(w);
  jb_memcg_notify_close(&n);
  assert_int_equal(n.fd, -1);
  jb_memcg_close(&m);
}

/* How many descriptors this process has open. */
static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

/* A scratch cgroup whose process ends without OOM: no notification, nothing recorded, nothing
 * waited for at the end, and the stopped watch leaves no descriptor. */
static void no_oom_no_wait(void **state) {
  (void)state;
  struct scratch sc;
  if (!scratch_make(&sc, 64)) skip();
  int fds = open_fds();
  int go[2];
  assert_int_equal(pipe2(go, O_CLOEXEC), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    char c;
    _exit(read(go[0], &c, 1) == 1 ? 0 : 2);
  }
  close(go[0]);
  char text[32];
  snprintf(text, sizeof text, "%d", (int)pid);
  assert_true(put(sc.dir, "cgroup.procs", text));
  struct jb_memcg m;
  jb_error err = {0};
  assert_int_equal(jb_memcg_open(pid, "/sys/fs/cgroup", &m, &err), 0);
  struct jb_oomwatch *w;
  assert_int_equal(jb_oomwatch_start(&m, &w, &err), 0);
  assert_int_equal(write(go[1], "x", 1), 1);
  close(go[1]);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  long long t = jb_now_ms();
  struct jb_oom_record rec;
  assert_false(jb_oomwatch_seen(w, &rec));
  assert_true(jb_now_ms() - t < 100);
  assert_int_equal(rec.source, JB_OOM_NONE);
  assert_int_equal(rec.counts.oom_kill, 0);
  scratch_remove(&sc);
  /* after the removal the watch's thread ends by itself (v1: the eventfd's last signal) or on
   * the stop */
  t = jb_now_ms();
  assert_false(jb_oomwatch_seen(w, &rec));
  jb_oomwatch_stop(w);
  assert_true(jb_now_ms() - t < 2100);
  assert_int_equal(open_fds(), fds);
}

/* The end rule (jb_oom_ended_it): only an end by a signal other than SIGSYS, with an OOM seen
 * at most JB_OOM_END_WINDOW_MS before it — or Docker's flag without the notification. */
static void end_rule(void **state) {
  (void)state;
  struct jb_oom_record r = {.source = JB_OOM_EVENT, .last_ms = 100000, .notified = true};
  long long end = 100000 + 2000;
  assert_true(jb_oom_ended_it(true, &r, end, 137, false)); /* the kernel's kill */
  assert_true(jb_oom_ended_it(true, &r, end, -1, false)); /* the container gone */
  assert_false(jb_oom_ended_it(true, &r, end, 159, false)); /* 128 + SIGSYS: the filter */
  assert_false(jb_oom_ended_it(true, &r, end, 159, true));
  /* under runsc an OOM that killed the shim's child ends the container with 1 */
  assert_true(jb_oom_ended_it(true, &r, end, 1, false));
  assert_true(jb_oom_ended_it(true, &r, end, 0, false));
  /* an OOM longer ago excuses nothing; Docker's sticky flag neither, when notified */
  assert_true(jb_oom_ended_it(true, &r, 100000 + JB_OOM_END_WINDOW_MS, 137, false));
  assert_false(jb_oom_ended_it(true, &r, 100000 + JB_OOM_END_WINDOW_MS + 1, 137, true));
  assert_false(jb_oom_ended_it(false, &(struct jb_oom_record){.notified = true}, end, 137, true));
  /* without the notification Docker's flag decides, never for the filter's kill */
  struct jb_oom_record none = {0};
  assert_true(jb_oom_ended_it(false, &none, end, 137, true));
  assert_false(jb_oom_ended_it(false, &none, end, 159, true));
  assert_false(jb_oom_ended_it(false, &none, end, 137, false));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(path_v1_and_v2), cmocka_unit_test(counts_both_formats),
      cmocka_unit_test(own_cgroup),     cmocka_unit_test(oom_notified),
      cmocka_unit_test(no_oom_no_wait), cmocka_unit_test(end_rule),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
