/* filter.h — Wall 3's syscall filter: a deny-list compiled with libseccomp, exported as a
 * classic BPF program and handed to bubblewrap (`bwrap --seccomp FD`), which installs it
 * (with no_new_privs) just before it executes the jailed program.
 *
 * Actions (the choice is ours; see the table in filter.c):
 *  - kill: SECCOMP_RET_KILL_PROCESS for escape-shaped calls (mount family, namespaces,
 *    ptrace and cross-process memory, kernel loading, bpf, keyrings, io_uring, handle-based
 *    opens, terminal injection). The jailed program is jailbox-shim, which never makes any of
 *    them, so reaching one means the shim runs code it was not built with; the process dies
 *    with SIGSYS and the worker sees it (an escape signal).
 *  - errno: EPERM for privileged calls without an escape shape (clock, hostname, NUMA,
 *    accounting, quotas), so that a library probing them degrades instead of dying;
 *    ENOSYS for clone3, whose flags live in memory a filter cannot read, so that libc falls
 *    back to clone(2), whose flags the filter does check. */
#ifndef JB_SANDBOX_FILTER_H
#define JB_SANDBOX_FILTER_H

#include <jansson.h>
#include <stddef.h>

#include "lib/err.h"

struct jb_filter_info {
  unsigned rules; /* rules added (one per syscall, or per syscall+argument test) */
  unsigned syscalls; /* distinct syscalls the filter acts on */
  unsigned kill_rules; /* rules whose action is kill-process */
  unsigned errno_rules; /* rules that fail the call with an errno */
};

/* Compiles the filter for the native architecture (other architectures, e.g. the 32-bit
 * entry points, hit the bad-arch action: kill) and exports it as classic BPF.
 * On success *bpf is a new allocation of *len bytes (a struct sock_filter array; free it)
 * and `info` (may be NULL) is filled. Returns 0, or -1 with `err` set (a libseccomp failure
 * names the syscall). Source of the format: seccomp(2), libseccomp seccomp_export_bpf(3). */
int jb_filter_compile(unsigned char **bpf, size_t *len, struct jb_filter_info *info, jb_error *err);

/* exec's filter, the one every command of exec runs under (handed to the spawner in the launch
 * preamble, installed by the command's bwrap): the escape-shaped calls kill (mount family,
 * namespaces, ptrace and cross-process memory, kernel loading, bpf, perf_event_open,
 * userfaultfd, keyrings, handle-based opens, TIOCSTI/TIOCLINUX); the uncommon privileged ones
 * fail with EPERM; clone3 and io_uring with ENOSYS; socket only for AF_UNIX, AF_INET and
 * AF_INET6 (others EPERM). Same shapes and errors as jb_filter_compile. */
int jb_exec_filter_compile(unsigned char **bpf, size_t *len, struct jb_filter_info *info,
                           jb_error *err);

/* exec's rules as JSON, in jb_filter_describe's shape (new reference, or NULL). */
json_t *jb_exec_filter_describe(void);

/* The rules as JSON for the session contract: {"default":"allow","badArch":"kill",
 * "kill":[names…],"errno":{"EPERM":[…],"ENOSYS":[…]},"argumentRules":[descriptions…]}.
 * New reference, or NULL on allocation failure. */
json_t *jb_filter_describe(void);

#endif
