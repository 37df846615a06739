/* memcg.h — the memory cgroup of a session's container, read on the host: whether the
 * kernel's OOM killer acted in it, learnt from the kernel's own notification when it can be
 * had and from the counters. Docker's State.OOMKilled is not always set when a sandbox ends
 * for memory (under runsc the process killed may be one the runtime does not report); the
 * cgroup is the kernel's word. The cgroup goes with the container, often before a read made
 * after the container's end, so the notification (jb_memcg_notify_*) is read while the cgroup
 * still exists, at the moment of the OOM.
 *
 * Files: cgroup v2 memory.events (`oom`, `oom_kill`; a file-modified event on each change,
 * polled with POLLPRI); cgroup v1 memory.oom_control (`oom_kill`, `under_oom`; an eventfd
 * registered through cgroup.event_control is signalled on each OOM and once when the cgroup
 * is removed). Kernel documentation: Documentation/admin-guide/cgroup-v2.rst ("memory.events",
 * and "Core Interface Files" on modified events) and
 * Documentation/admin-guide/cgroup-v1/memory.rst ("OOM Control"). */
#ifndef JB_WORKER_MEMCG_H
#define JB_WORKER_MEMCG_H

#include <stdbool.h>
#include <sys/types.h>

#include "lib/err.h"

/* An open memory cgroup directory. dirfd -1: none. */
struct jb_memcg {
  int dirfd; /* O_PATH | O_DIRECTORY | O_CLOEXEC */
  bool v2;
};

/* What the counters said: oom_kill (processes the OOM killer killed in the cgroup), oom (v2:
 * times the limit could not be met; v1: under_oom when read). */
struct jb_memcg_counts {
  long long oom_kill, oom;
};

/* The memory cgroup path of a process from the text of /proc/PID/cgroup (`text`): the v1
 * line whose controllers include "memory" ("N:…memory…:/path"), else the v2 line
 * ("0::/path"). Writes the path (starting with '/') into out[size], *v2 whether it is v2.
 * 0, or -1 when no such line or it does not fit. */
int jb_memcg_path_parse(const char *text, char *out, size_t size, bool *v2);

/* Adds the counters in `text` (the content of memory.events for v2, memory.oom_control for
 * v1) to *c: v2 "oom N" and "oom_kill N"; v1 "oom_kill N" and "under_oom N" (as oom). */
void jb_memcg_counts_parse(const char *text, bool v2, struct jb_memcg_counts *c);

/* Opens the memory cgroup of host process `pid` under `root` (normally "/sys/fs/cgroup";
 * v1 adds "/memory"). 0 with *m open, or -1 with `err` (ENOENT: no memory cgroup). */
int jb_memcg_open(pid_t pid, const char *root, struct jb_memcg *m, jb_error *err);

/* Reads the counters of `m` into *c (zeroed first). 0, or -1 with `err` (the cgroup is gone:
 * ENOENT or ENODEV). */
int jb_memcg_read(const struct jb_memcg *m, struct jb_memcg_counts *c, jb_error *err);

/* Whether `c` shows the OOM killer at work (oom_kill > 0 or oom > 0). */
bool jb_memcg_oom(const struct jb_memcg_counts *c);

/* Closes `m` (dirfd -1 is fine). */
void jb_memcg_close(struct jb_memcg *m);

/* ---- OOM notification ------------------------------------------------------------------ */

/* A registration for the kernel's notification of an OOM in one memory cgroup, waited on
 * with poll(2) for `events` on `fd` (O_CLOEXEC, non-blocking; owned: jb_memcg_notify_close).
 * v1: an eventfd registered for memory.oom_control; the kernel adds 1 to its count each time
 * the cgroup (or an ancestor, whose OOM covers it) is under OOM, and 1 when the cgroup is
 * removed; `events` POLLIN. v2: memory.events itself, open; it polls POLLPRI after any of its
 * counters changed until it is read again, and POLLPRI|POLLERR for good once the cgroup is
 * removed. fd -1: none. */
struct jb_memcg_notify {
  int fd;
  short events;
  bool v2;
};

/* One notification taken: `gone` the cgroup is removed (nothing more will come); `oom` the
 * kernel's word that the cgroup was under OOM (v1: a notification while the cgroup existed, or
 * more than the removal's one counted; v2: the counters show oom or oom_kill); `counts` read at
 * once (zero when gone). */
struct jb_memcg_note {
  bool oom, gone;
  struct jb_memcg_counts counts;
};

/* Registers for the OOM notification of `m` (borrowed; it must stay open while `n` is used).
 * v1: eventfd(2) (EFD_CLOEXEC|EFD_NONBLOCK) and "<eventfd> <fd of memory.oom_control>" written
 * to cgroup.event_control (memory.rst "OOM Control"; the root cgroup has none); v2: open
 * memory.events. 0 with *n open, or -1 with `err` (n->fd -1): no such file, no permission,
 * the kernel refused the registration. */
int jb_memcg_notify_open(const struct jb_memcg *m, struct jb_memcg_notify *n, jb_error *err);

/* Whether a notification is waiting on `n` (poll(2) with timeout 0: takes nothing). */
bool jb_memcg_notify_pending(const struct jb_memcg_notify *n);

/* Takes what is waiting on `n` and reads the counters of `m` at once into *note. v1 reads the
 * eventfd's count (EAGAIN when nothing is waiting: *note then only has the counters), then
 * memory.oom_control; v2 reads memory.events from its start through n->fd, which also clears
 * the pending event. 0, or -1 with `err` on a failure other than the cgroup being gone
 * (ENOENT, ENODEV: note->gone). */
int jb_memcg_notify_take(const struct jb_memcg *m, struct jb_memcg_notify *n,
                         struct jb_memcg_note *note, jb_error *err);

/* Closes `n` (fd -1 is fine); a v1 registration ends with its eventfd. */
void jb_memcg_notify_close(struct jb_memcg_notify *n);

#endif
