/* memcg.h — the memory cgroup of a session's container, read on the host: whether the
 * kernel's OOM killer acted in it. Docker's State.OOMKilled is not always set when a
 * sandbox ends for memory (under runsc the process killed may be one the runtime does not
 * report); the cgroup's own counters are the kernel's word. cgroup v2: memory.events
 * (`oom`, `oom_kill`); cgroup v1: memory.oom_control (`oom_kill`, `under_oom`).
 * Kernel documentation: Documentation/admin-guide/cgroup-v2.rst ("memory.events") and
 * Documentation/admin-guide/cgroup-v1/memory.rst ("memory.oom_control"). */
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

#endif
