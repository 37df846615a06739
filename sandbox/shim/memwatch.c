/* memwatch.c — the jails' memory cgroups (see memwatch.h): made under gVisor's memory hierarchy
 * at /sys/fs/cgroup/memory, one per jail, named jailbox-jail-N; read through
 * memory.usage_in_bytes; removed when the jail has ended. */
#define _GNU_SOURCE
#include "sandbox/shim/memwatch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MEMCG_ROOT "/sys/fs/cgroup/memory"

static int verdict; /* 0: not checked yet, 1: available, -1: not */
static char verdict_why[200];
static unsigned long long next_n;
/* cgroups whose removal failed (a process of the jail had not ended yet): tried again later */
enum { LEFT_MAX = 16 };
static char left[LEFT_MAX][96];

static void memcg_none(struct jb_memcg *m) {
  m->path[0] = '\0';
  m->usage_fd = m->procs_fd = -1;
}

int jb_memwatch_create(struct jb_memcg *m) {
  memcg_none(m);
  char p[sizeof m->path + 32];
  snprintf(m->path, sizeof m->path, MEMCG_ROOT "/jailbox-jail-%d-%llu", (int)getpid(), next_n++);
  if (mkdir(m->path, 0700) < 0) {
    int e = errno;
    memcg_none(m);
    errno = e;
    return -1;
  }
  snprintf(p, sizeof p, "%s/memory.usage_in_bytes", m->path);
  m->usage_fd = open(p, O_RDONLY | O_CLOEXEC);
  snprintf(p, sizeof p, "%s/cgroup.procs", m->path);
  m->procs_fd = m->usage_fd < 0 ? -1 : open(p, O_WRONLY | O_CLOEXEC);
  if (m->procs_fd < 0) {
    int e = errno;
    jb_memwatch_release(m);
    errno = e;
    return -1;
  }
  return 0;
}

int jb_memwatch_join(const struct jb_memcg *m) {
  char num[24], *q = num + sizeof num;
  long pid = syscall(SYS_getpid);
  do {
    *--q = (char)('0' + pid % 10);
    pid /= 10;
  } while (pid > 0);
  size_t n = (size_t)(num + sizeof num - q);
  return write(m->procs_fd, q, n) == (ssize_t)n ? 0 : -1;
}

long long jb_memwatch_usage(const struct jb_memcg *m) {
  if (m->usage_fd < 0) return -1;
  char buf[32];
  ssize_t n = pread(m->usage_fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *end;
  long long v = strtoll(buf, &end, 10);
  return end == buf || v < 0 ? -1 : v;
}

/* Forgets leftover slot `i` once its cgroup is gone (removed now, or already). */
static void sweep_one(int i) {
  if (left[i][0] && (rmdir(left[i]) == 0 || errno == ENOENT)) left[i][0] = '\0';
}

void jb_memwatch_sweep(void) {
  for (int i = 0; i < LEFT_MAX; i++) sweep_one(i);
}

bool jb_memwatch_settle(int wait_ms, char *why, size_t len) {
  for (int waited = 0;; waited += 10) {
    jb_memwatch_sweep();
    int i = 0;
    while (i < LEFT_MAX && !left[i][0]) i++;
    if (i == LEFT_MAX) return true;
    if (waited >= wait_ms) {
      snprintf(why, len, "an ended jail's processes are still ending (%s not empty)", left[i]);
      return false;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

void jb_memwatch_release(struct jb_memcg *m) {
  if (m->usage_fd >= 0) close(m->usage_fd);
  if (m->procs_fd >= 0) close(m->procs_fd);
  if (m->path[0] && rmdir(m->path) < 0 && errno != ENOENT) {
    int i = 0;
    while (i < LEFT_MAX && left[i][0]) i++;
    if (i == LEFT_MAX) { /* full: the oldest is tried once more and its slot taken */
      i = 0;
      (void)rmdir(left[0]);
    }
    snprintf(left[i], sizeof left[i], "%s", m->path);
  }
  memcg_none(m);
}

bool jb_memwatch_available(char *why, size_t len) {
  if (!verdict) {
    struct jb_memcg m;
    struct stat st;
    if (stat(MEMCG_ROOT "/memory.usage_in_bytes", &st) < 0) {
      snprintf(verdict_why, sizeof verdict_why, "no memory cgroup hierarchy at " MEMCG_ROOT ": %s",
               strerror(errno));
    } else if (jb_memwatch_create(&m) < 0) {
      snprintf(verdict_why, sizeof verdict_why,
               "a memory cgroup cannot be made under " MEMCG_ROOT ": %s", strerror(errno));
    } else {
      long long u = jb_memwatch_usage(&m);
      if (u < 0)
        snprintf(verdict_why, sizeof verdict_why, "a memory cgroup's usage cannot be read");
      jb_memwatch_release(&m);
      if (u >= 0) verdict = 1;
    }
    if (verdict != 1) verdict = -1;
  }
  if (why && len) snprintf(why, len, "%s", verdict == 1 ? "" : verdict_why);
  return verdict == 1;
}
