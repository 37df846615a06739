/* memwatch.h — a command's memory, counted and held to its limit by the spawner
 * (sandbox/WALLS.md, "Memory per command"): each jail gets a memory cgroup of its own in
 * gVisor's cgroupfs, which counts every page the jail's processes and its /tmp hold (gVisor
 * does not enforce the cgroup's limit, but it accounts per cgroup); the spawner reads that
 * count every JB_MEMWATCH_INTERVAL_MS and kills the jail when it passes the command's limit,
 * before the container's limit is reached and the host's OOM killer ends the whole sandbox. */
#ifndef JB_SANDBOX_SHIM_MEMWATCH_H
#define JB_SANDBOX_SHIM_MEMWATCH_H

#include <stdbool.h>
#include <stddef.h>

/* How often a running command's memory is read, ms. */
#define JB_MEMWATCH_INTERVAL_MS 20

/* One jail's memory cgroup. `usage_fd` -1 and `procs_fd` -1: none. */
struct jb_memcg {
  char path[96]; /* the cgroup's directory ("" when none) */
  int usage_fd; /* its memory.usage_in_bytes, read with pread (O_CLOEXEC) */
  int procs_fd; /* its cgroup.procs, written by the jail's first process, then closed */
};

/* Checks once whether per-jail memory cgroups work here (the memory hierarchy mounted at
 * /sys/fs/cgroup/memory, a cgroup can be made, read and removed). true, or false with the
 * reason in `why` (`len` bytes). Later calls answer the first one's verdict. */
bool jb_memwatch_available(char *why, size_t len);

/* Makes a new memory cgroup for a jail into `m` and opens its two files. 0, or -1 with errno
 * (nothing is left behind then; `m` says none). */
int jb_memwatch_create(struct jb_memcg *m);

/* In the jail's first process, before it executes bwrap: moves the calling process into `m`
 * (every process it starts is counted there too). Only async-signal-safe calls. 0, or -1. */
int jb_memwatch_join(const struct jb_memcg *m);

/* Bytes the cgroup `m` holds now (its processes' memory and its tmpfs pages), or -1. */
long long jb_memwatch_usage(const struct jb_memcg *m);

/* Closes the cgroup's files and removes it; one still holding a process (its jail is ending)
 * is removed by a later call of this function or jb_memwatch_sweep. `m` then says none. */
void jb_memwatch_release(struct jb_memcg *m);

/* Removes the cgroups left by jb_memwatch_release whose processes have ended since. */
void jb_memwatch_sweep(void);

/* Waits up to `wait_ms` (polling every 10 ms) until no cgroup left by jb_memwatch_release
 * holds a process: a jail's processes are sent SIGKILL when its pid 1 ends, but gVisor does not
 * wait for them to end (Linux's zap_pid_ns_processes does), so one of them may still run a
 * moment after its bwrap was reaped. true when none is left (at once without memory cgroups),
 * false with a message in `why` (`len` bytes). */
bool jb_memwatch_settle(int wait_ms, char *why, size_t len);

#endif
