/* filter.c — the syscall deny-lists (see filter.h): Wall 3's (the shim's) and exec's (every
 * command's), their compilation with libseccomp and their description for the session
 * contract. */
#define _GNU_SOURCE
#include "sandbox/worker/filter.h"

#include <errno.h>
#include <stdbool.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

enum action { KILL, EPERM_, ENOSYS_ };
enum argtest {
  ARG_NONE, /* every call */
  ARG_SOCKET_FAMILY, /* socket(2) of a family other than AF_UNIX, AF_INET, AF_INET6 */
  ARG_CLONE_NS, /* clone(2) asking for any new namespace: one rule per CLONE_NEW* bit */
  ARG_IOCTL_TTY, /* ioctl(2) with TIOCSTI or TIOCLINUX in the low 32 bits of the request */
};

struct rule {
  const char *name;
  enum action act;
  enum argtest arg;
};

/* Wall 3's deny-list (the shim's). Everything else is allowed: Walls 1 and 2 already narrow the rest (gVisor's
 * own syscall surface, then the container's seccomp profile). */
static const struct rule shim_rules[] = {
    /* mount namespace surgery */
    {"mount", KILL, ARG_NONE},
    {"umount2", KILL, ARG_NONE},
    {"pivot_root", KILL, ARG_NONE},
    {"chroot", KILL, ARG_NONE},
    {"open_tree", KILL, ARG_NONE},
    {"move_mount", KILL, ARG_NONE},
    {"fsopen", KILL, ARG_NONE},
    {"fsconfig", KILL, ARG_NONE},
    {"fsmount", KILL, ARG_NONE},
    {"fspick", KILL, ARG_NONE},
    {"mount_setattr", KILL, ARG_NONE},
    /* namespaces: entering or making them (a new user namespace brings back every capability) */
    {"unshare", KILL, ARG_NONE},
    {"setns", KILL, ARG_NONE},
    {"clone", KILL, ARG_CLONE_NS},
    {"clone3", ENOSYS_, ARG_NONE},
    /* other processes' memory and descriptors */
    {"ptrace", KILL, ARG_NONE},
    {"process_vm_readv", KILL, ARG_NONE},
    {"process_vm_writev", KILL, ARG_NONE},
    {"pidfd_getfd", KILL, ARG_NONE},
    {"kcmp", EPERM_, ARG_NONE},
    /* the kernel itself */
    {"kexec_load", KILL, ARG_NONE},
    {"kexec_file_load", KILL, ARG_NONE},
    {"init_module", KILL, ARG_NONE},
    {"finit_module", KILL, ARG_NONE},
    {"delete_module", KILL, ARG_NONE},
    {"reboot", KILL, ARG_NONE},
    {"bpf", KILL, ARG_NONE},
    {"perf_event_open", KILL, ARG_NONE},
    {"userfaultfd", KILL, ARG_NONE},
    {"iopl", KILL, ARG_NONE},
    {"ioperm", KILL, ARG_NONE},
    {"swapon", KILL, ARG_NONE},
    {"swapoff", KILL, ARG_NONE},
    /* kernel keyrings */
    {"keyctl", KILL, ARG_NONE},
    {"add_key", KILL, ARG_NONE},
    {"request_key", KILL, ARG_NONE},
    /* io_uring performs syscalls the filter never sees */
    {"io_uring_setup", KILL, ARG_NONE},
    {"io_uring_enter", KILL, ARG_NONE},
    {"io_uring_register", KILL, ARG_NONE},
    /* opening by file handle bypasses path-based confinement (the "shocker" escape) */
    {"open_by_handle_at", KILL, ARG_NONE},
    {"name_to_handle_at", KILL, ARG_NONE},
    /* pushing input into a terminal (CVE-2017-5226) or driving the console */
    {"ioctl", KILL, ARG_IOCTL_TTY},
    /* sockets: the shim speaks on the stdio it was given and needs none of its own. Under runsc
   * --host-uds=open a connect() could reach a host Unix socket left in the workspace (the
   * launcher connects the shim's own channel before this filter is in force) */
    {"socket", EPERM_, ARG_NONE},
    {"socketpair", EPERM_, ARG_NONE},
    {"connect", EPERM_, ARG_NONE},
    /* privileged, but not escape-shaped: fail politely */
    {"acct", EPERM_, ARG_NONE},
    {"quotactl", EPERM_, ARG_NONE},
    {"quotactl_fd", EPERM_, ARG_NONE},
    {"settimeofday", EPERM_, ARG_NONE},
    {"clock_settime", EPERM_, ARG_NONE},
    {"clock_adjtime", EPERM_, ARG_NONE},
    {"adjtimex", EPERM_, ARG_NONE},
    {"sethostname", EPERM_, ARG_NONE},
    {"setdomainname", EPERM_, ARG_NONE},
    {"syslog", EPERM_, ARG_NONE},
    {"vhangup", EPERM_, ARG_NONE},
    {"lookup_dcookie", EPERM_, ARG_NONE},
    {"fanotify_init", EPERM_, ARG_NONE},
    {"mbind", EPERM_, ARG_NONE},
    {"migrate_pages", EPERM_, ARG_NONE},
    {"move_pages", EPERM_, ARG_NONE},
    {"set_mempolicy", EPERM_, ARG_NONE},
    {"personality", EPERM_, ARG_NONE},
};

/* exec's deny-list: what compilers, interpreters, make, git and test runners use stays allowed
 * (sockets of the local families included: gVisor gives the sandbox loopback only); the
 * escape-shaped calls kill the command (a security signal for the worker); the uncommon
 * privileged ones fail with EPERM, clone3 with ENOSYS (libc falls back to clone, whose flags
 * the filter reads), io_uring with ENOSYS (its calls would pass the filter unseen; runtimes
 * fall back to plain calls). */
static const struct rule exec_rules[] = {
    {"mount", KILL, ARG_NONE},
    {"umount2", KILL, ARG_NONE},
    {"pivot_root", KILL, ARG_NONE},
    {"open_tree", KILL, ARG_NONE},
    {"move_mount", KILL, ARG_NONE},
    {"fsopen", KILL, ARG_NONE},
    {"fsconfig", KILL, ARG_NONE},
    {"fsmount", KILL, ARG_NONE},
    {"fspick", KILL, ARG_NONE},
    {"mount_setattr", KILL, ARG_NONE},
    {"unshare", KILL, ARG_NONE},
    {"setns", KILL, ARG_NONE},
    {"clone", KILL, ARG_CLONE_NS},
    {"clone3", ENOSYS_, ARG_NONE},
    {"ptrace", KILL, ARG_NONE},
    {"process_vm_readv", KILL, ARG_NONE},
    {"process_vm_writev", KILL, ARG_NONE},
    {"pidfd_getfd", KILL, ARG_NONE},
    {"kexec_load", KILL, ARG_NONE},
    {"kexec_file_load", KILL, ARG_NONE},
    {"init_module", KILL, ARG_NONE},
    {"finit_module", KILL, ARG_NONE},
    {"delete_module", KILL, ARG_NONE},
    {"bpf", KILL, ARG_NONE},
    {"perf_event_open", KILL, ARG_NONE},
    {"userfaultfd", KILL, ARG_NONE},
    {"keyctl", KILL, ARG_NONE},
    {"add_key", KILL, ARG_NONE},
    {"request_key", KILL, ARG_NONE},
    {"open_by_handle_at", KILL, ARG_NONE},
    {"ioctl", KILL, ARG_IOCTL_TTY},
    {"io_uring_setup", ENOSYS_, ARG_NONE},
    {"io_uring_enter", ENOSYS_, ARG_NONE},
    {"io_uring_register", ENOSYS_, ARG_NONE},
    {"socket", EPERM_, ARG_SOCKET_FAMILY},
    {"chroot", EPERM_, ARG_NONE},
    {"name_to_handle_at", EPERM_, ARG_NONE},
    {"kcmp", EPERM_, ARG_NONE},
    {"reboot", EPERM_, ARG_NONE},
    {"iopl", EPERM_, ARG_NONE},
    {"ioperm", EPERM_, ARG_NONE},
    {"swapon", EPERM_, ARG_NONE},
    {"swapoff", EPERM_, ARG_NONE},
    {"acct", EPERM_, ARG_NONE},
    {"quotactl", EPERM_, ARG_NONE},
    {"quotactl_fd", EPERM_, ARG_NONE},
    {"settimeofday", EPERM_, ARG_NONE},
    {"clock_settime", EPERM_, ARG_NONE},
    {"clock_adjtime", EPERM_, ARG_NONE},
    {"adjtimex", EPERM_, ARG_NONE},
    {"sethostname", EPERM_, ARG_NONE},
    {"setdomainname", EPERM_, ARG_NONE},
    {"syslog", EPERM_, ARG_NONE},
    {"vhangup", EPERM_, ARG_NONE},
    {"lookup_dcookie", EPERM_, ARG_NONE},
    {"fanotify_init", EPERM_, ARG_NONE},
    {"mbind", EPERM_, ARG_NONE},
    {"migrate_pages", EPERM_, ARG_NONE},
    {"move_pages", EPERM_, ARG_NONE},
    {"set_mempolicy", EPERM_, ARG_NONE},
};

struct table {
  const struct rule *rules;
  size_t n;
};
static const struct table shim_table = {shim_rules, sizeof shim_rules / sizeof shim_rules[0]};
static const struct table exec_table = {exec_rules, sizeof exec_rules / sizeof exec_rules[0]};

static const unsigned long clone_ns_flags[] = {CLONE_NEWNS,    CLONE_NEWUTS, CLONE_NEWIPC,
                                               CLONE_NEWUSER,  CLONE_NEWPID, CLONE_NEWNET,
                                               CLONE_NEWCGROUP};
static const unsigned long tty_requests[] = {TIOCSTI, TIOCLINUX};

static uint32_t action_of(enum action a) {
  switch (a) {
    case KILL:
      return SCMP_ACT_KILL_PROCESS;
    case EPERM_:
      return SCMP_ACT_ERRNO(EPERM);
    case ENOSYS_:
      return SCMP_ACT_ERRNO(ENOSYS);
  }
  return SCMP_ACT_KILL_PROCESS;
}

/* Adds one rule, counting it. */
static int add(scmp_filter_ctx ctx, const struct rule *r, int nr, unsigned n_args,
               const struct scmp_arg_cmp *cmp, struct jb_filter_info *info, jb_error *err) {
  int rc = seccomp_rule_add_exact_array(ctx, action_of(r->act), nr, n_args, cmp);
  if (rc < 0) return jb_fail_errno(err, -rc, "seccomp rule for %s", r->name);
  info->rules++;
  if (r->act == KILL)
    info->kill_rules++;
  else
    info->errno_rules++;
  return 0;
}

/* Socket families a command may use: AF_UNIX (1), AF_INET (2), AF_INET6 (10); the others
 * between them, and every family above AF_INET6, fail with EPERM. */
static const unsigned long socket_refused_small[] = {3, 4, 5, 6, 7, 8, 9};

static int build(scmp_filter_ctx ctx, const struct table *t, struct jb_filter_info *info,
                 jb_error *err) {
  int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (rc < 0) return jb_fail_errno(err, -rc, "seccomp bad-arch action");
  for (size_t i = 0; i < t->n; i++) {
    const struct rule *r = &t->rules[i];
    int nr = seccomp_syscall_resolve_name(r->name);
    if (nr < 0) continue; /* not a syscall of this architecture */
    info->syscalls++;
    if (r->arg == ARG_NONE) {
      if (add(ctx, r, nr, 0, NULL, info, err) < 0) return -1;
    } else if (r->arg == ARG_CLONE_NS) {
      for (size_t k = 0; k < sizeof clone_ns_flags / sizeof clone_ns_flags[0]; k++) {
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, clone_ns_flags[k], clone_ns_flags[k]);
        if (add(ctx, r, nr, 1, &c, info, err) < 0) return -1;
      }
    } else if (r->arg == ARG_SOCKET_FAMILY) {
      struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_GT, 10, 0);
      if (add(ctx, r, nr, 1, &c, info, err) < 0) return -1;
      for (size_t k = 0; k < sizeof socket_refused_small / sizeof socket_refused_small[0]; k++) {
        struct scmp_arg_cmp e = SCMP_A0(SCMP_CMP_EQ, socket_refused_small[k], 0);
        if (add(ctx, r, nr, 1, &e, info, err) < 0) return -1;
      }
    } else {
      /* the kernel reads the request as 32 bits; compare only those so that a request with
       * high bits set cannot slip past (CVE-2017-5226, bubblewrap's own fix) */
      for (size_t k = 0; k < sizeof tty_requests / sizeof tty_requests[0]; k++) {
        struct scmp_arg_cmp c = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, tty_requests[k]);
        if (add(ctx, r, nr, 1, &c, info, err) < 0) return -1;
      }
    }
  }
  return 0;
}

static int compile(const struct table *t, unsigned char **bpf, size_t *len,
                   struct jb_filter_info *info_out, jb_error *err) {
  *bpf = NULL;
  *len = 0;
  struct jb_filter_info info = {0};
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return jb_fail(err, ENOMEM, "seccomp_init failed");
  int fd = -1, ret = -1;
  unsigned char *buf = NULL;
  if (build(ctx, t, &info, err) < 0) goto out;
  fd = memfd_create("jailbox-filter", MFD_CLOEXEC);
  if (fd < 0) {
    jb_fail_errno(err, errno, "memfd_create");
    goto out;
  }
  int rc = seccomp_export_bpf(ctx, fd);
  if (rc < 0) {
    jb_fail_errno(err, -rc, "seccomp_export_bpf");
    goto out;
  }
  off_t size = lseek(fd, 0, SEEK_END);
  if (size <= 0 || size > 1 << 20 || size % 8 != 0) {
    jb_fail(err, EINVAL, "exported filter has an unexpected size (%lld bytes)", (long long)size);
    goto out;
  }
  buf = malloc((size_t)size);
  if (!buf) {
    jb_fail(err, ENOMEM, "out of memory");
    goto out;
  }
  ssize_t got = pread(fd, buf, (size_t)size, 0);
  if (got != size) {
    jb_fail_errno(err, got < 0 ? errno : EIO, "read exported filter");
    goto out;
  }
  *bpf = buf;
  *len = (size_t)size;
  buf = NULL;
  if (info_out) *info_out = info;
  ret = 0;
out:
  free(buf);
  if (fd >= 0) close(fd);
  seccomp_release(ctx);
  return ret;
}

int jb_filter_compile(unsigned char **bpf, size_t *len, struct jb_filter_info *info,
                      jb_error *err) {
  return compile(&shim_table, bpf, len, info, err);
}

int jb_exec_filter_compile(unsigned char **bpf, size_t *len, struct jb_filter_info *info,
                           jb_error *err) {
  return compile(&exec_table, bpf, len, info, err);
}

static json_t *describe(const struct table *t, bool exec) {
  json_t *kill = json_array(), *eperm = json_array(), *enosys = json_array();
  json_t *argrules = json_array();
  for (size_t i = 0; i < t->n; i++) {
    const struct rule *r = &t->rules[i];
    if (seccomp_syscall_resolve_name(r->name) < 0) continue;
    json_t *list = r->act == KILL ? kill : r->act == EPERM_ ? eperm : enosys;
    if (r->arg == ARG_NONE) json_array_append_new(list, json_string(r->name));
  }
  json_array_append_new(argrules, json_string("clone with any CLONE_NEW* flag (NEWNS, NEWUTS, "
                                              "NEWIPC, NEWUSER, NEWPID, NEWNET, NEWCGROUP): kill"));
  json_array_append_new(
      argrules,
      json_string("ioctl with TIOCSTI or TIOCLINUX in the low 32 bits of the request: kill"));
  if (exec)
    json_array_append_new(argrules, json_string("socket of a family other than AF_UNIX, AF_INET, "
                                                "AF_INET6: EPERM"));
  return json_pack("{s:s, s:s, s:o, s:{s:o, s:o}, s:o}", "default", "allow", "badArch", "kill",
                   "kill", kill, "errno", "EPERM", eperm, "ENOSYS", enosys, "argumentRules",
                   argrules);
}

json_t *jb_filter_describe(void) { return describe(&shim_table, false); }

json_t *jb_exec_filter_describe(void) { return describe(&exec_table, true); }
