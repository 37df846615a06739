/* memcg.c — a container's memory cgroup on the host: its counters and the kernel's OOM
 * notification (see memcg.h). */
#define _GNU_SOURCE
#include "sandbox/worker/memcg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

int jb_memcg_path_parse(const char *text, char *out, size_t size, bool *v2) {
  const char *v2_path = NULL;
  size_t v2_len = 0;
  for (const char *line = text; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    const char *c1 = memchr(line, ':', len);
    const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
    if (c2) {
      const char *ctl = c1 + 1, *path = c2 + 1;
      size_t ctl_len = (size_t)(c2 - ctl), path_len = len - (size_t)(path - line);
      if (ctl_len == 0 && c1 - line == 1 && line[0] == '0') {
        v2_path = path;
        v2_len = path_len;
      }
      /* v1: the comma-separated controllers of the hierarchy include "memory" */
      for (const char *t = ctl; t < c2;) {
        const char *comma = memchr(t, ',', (size_t)(c2 - t));
        size_t tl = comma ? (size_t)(comma - t) : (size_t)(c2 - t);
        if (tl == 6 && !memcmp(t, "memory", 6)) {
          if (path_len + 1 > size || path[0] != '/') return -1;
          memcpy(out, path, path_len);
          out[path_len] = '\0';
          *v2 = false;
          return 0;
        }
        t += tl + 1;
      }
    }
    line = end ? end + 1 : NULL;
  }
  if (!v2_path || v2_len + 1 > size || v2_path[0] != '/') return -1;
  memcpy(out, v2_path, v2_len);
  out[v2_len] = '\0';
  *v2 = true;
  return 0;
}

void jb_memcg_counts_parse(const char *text, bool v2, struct jb_memcg_counts *c) {
  for (const char *line = text; line && *line;) {
    char key[32];
    long long v;
    if (sscanf(line, "%31s %lld", key, &v) == 2) {
      if (!strcmp(key, "oom_kill"))
        c->oom_kill += v;
      else if (!strcmp(key, v2 ? "oom" : "under_oom"))
        c->oom += v;
    }
    line = strchr(line, '\n');
    if (line) line++;
  }
}

int jb_memcg_open(pid_t pid, const char *root, struct jb_memcg *m, jb_error *err) {
  m->dirfd = -1;
  char file[64], text[4096];
  snprintf(file, sizeof file, "/proc/%d/cgroup", (int)pid);
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return jb_fail_errno(err, errno, "memory cgroup: open %s", file);
  ssize_t n = read(fd, text, sizeof text - 1);
  int e = errno;
  close(fd);
  if (n < 0) return jb_fail_errno(err, e, "memory cgroup: read %s", file);
  text[n] = '\0';
  char path[1024], dir[1200];
  if (jb_memcg_path_parse(text, path, sizeof path, &m->v2) < 0)
    return jb_fail(err, ENOENT, "memory cgroup: none in %s", file);
  snprintf(dir, sizeof dir, "%s%s%s", root, m->v2 ? "" : "/memory", path);
  m->dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (m->dirfd < 0) return jb_fail_errno(err, errno, "memory cgroup: open %s", dir);
  return 0;
}

int jb_memcg_read(const struct jb_memcg *m, struct jb_memcg_counts *c, jb_error *err) {
  *c = (struct jb_memcg_counts){0};
  if (m->dirfd < 0) return jb_fail(err, ENOENT, "memory cgroup: not open");
  const char *name = m->v2 ? "memory.events" : "memory.oom_control";
  int fd = openat(m->dirfd, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return jb_fail_errno(err, errno, "memory cgroup: open %s", name);
  char text[1024];
  ssize_t n = read(fd, text, sizeof text - 1);
  int e = errno;
  close(fd);
  if (n < 0) return jb_fail_errno(err, e, "memory cgroup: read %s", name);
  text[n] = '\0';
  jb_memcg_counts_parse(text, m->v2, c);
  return 0;
}

bool jb_memcg_oom(const struct jb_memcg_counts *c) { return c->oom_kill > 0 || c->oom > 0; }

void jb_memcg_close(struct jb_memcg *m) {
  if (m->dirfd >= 0) close(m->dirfd);
  m->dirfd = -1;
}

/* ---- OOM notification ------------------------------------------------------------------ */

int jb_memcg_notify_open(const struct jb_memcg *m, struct jb_memcg_notify *n, jb_error *err) {
  *n = (struct jb_memcg_notify){.fd = -1, .v2 = m->v2};
  if (m->dirfd < 0) return jb_fail(err, ENOENT, "memory cgroup: not open");
  if (m->v2) {
    n->fd = openat(m->dirfd, "memory.events", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (n->fd < 0) return jb_fail_errno(err, errno, "memory cgroup: open memory.events");
    n->events = POLLPRI;
    return 0;
  }
  int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) return jb_fail_errno(err, errno, "memory cgroup: eventfd");
  int cfd = openat(m->dirfd, "memory.oom_control", O_RDONLY | O_CLOEXEC);
  int e = errno;
  int ctl = cfd < 0 ? -1 : openat(m->dirfd, "cgroup.event_control", O_WRONLY | O_CLOEXEC);
  if (cfd >= 0 && ctl < 0) e = errno;
  int rc = -1;
  if (ctl >= 0) {
    char line[32];
    int len = snprintf(line, sizeof line, "%d %d", efd, cfd);
    rc = write(ctl, line, (size_t)len) == len ? 0 : -1;
    if (rc < 0) e = errno;
  }
  /* the kernel keeps what it needs (the eventfd's context); the files can go */
  if (ctl >= 0) close(ctl);
  if (cfd >= 0) close(cfd);
  if (rc < 0) {
    close(efd);
    return jb_fail_errno(err, e, "memory cgroup: register an OOM notification (%s)",
                         cfd < 0   ? "memory.oom_control"
                         : ctl < 0 ? "cgroup.event_control"
                                   : "write");
  }
  n->fd = efd;
  n->events = POLLIN;
  return 0;
}

bool jb_memcg_notify_pending(const struct jb_memcg_notify *n) {
  if (n->fd < 0) return false;
  struct pollfd p = {.fd = n->fd, .events = n->events};
  return poll(&p, 1, 0) > 0 && (p.revents & (n->events | POLLERR));
}

static bool cgroup_gone(int e) { return e == ENOENT || e == ENODEV; }

int jb_memcg_notify_take(const struct jb_memcg *m, struct jb_memcg_notify *n,
                         struct jb_memcg_note *note, jb_error *err) {
  *note = (struct jb_memcg_note){0};
  if (n->fd < 0) return jb_fail(err, ENOENT, "memory cgroup: no notification open");
  if (n->v2) {
    char text[1024];
    ssize_t got = pread(n->fd, text, sizeof text - 1, 0);
    if (got < 0) {
      if (cgroup_gone(errno)) return note->gone = true, 0;
      return jb_fail_errno(err, errno, "memory cgroup: read memory.events");
    }
    text[got] = '\0';
    jb_memcg_counts_parse(text, true, &note->counts);
    note->oom = jb_memcg_oom(&note->counts);
    return 0;
  }
  uint64_t count = 0;
  if (read(n->fd, &count, sizeof count) != (ssize_t)sizeof count && errno != EAGAIN)
    return jb_fail_errno(err, errno, "memory cgroup: read the OOM eventfd");
  jb_error rerr = {0};
  if (jb_memcg_read(m, &note->counts, &rerr) < 0) {
    if (!cgroup_gone(rerr.code)) return jb_fail(err, rerr.code, "%s", rerr.msg);
    /* the removal adds one; anything more was an OOM notified before it */
    note->gone = true;
    note->oom = count >= 2;
    return 0;
  }
  /* the cgroup is there, so what was counted came from OOMs (the removal's comes after its
   * files are gone) */
  note->oom = count >= 1 || jb_memcg_oom(&note->counts);
  return 0;
}

void jb_memcg_notify_close(struct jb_memcg_notify *n) {
  if (n->fd >= 0) close(n->fd);
  n->fd = -1;
}
