/* escape_policy.h — the kinds of security signal a session can raise and the
 * configured policy for each: abort the session at once, or raise a security alert after N
 * occurrences. Shared by jailboxd (signals it sees on the op path) and jailbox-worker
 * (signals from the shim and the container). Settings: JAILBOX_ESCAPE_ABORT,
 * JAILBOX_ALERT_AFTER, JAILBOX_TRUST_PENALTY (server/config.c; the worker inherits them). */
#ifndef JB_ESCAPE_POLICY_H
#define JB_ESCAPE_POLICY_H

#include <stdbool.h>

#include "lib/err.h"

/* Signal kinds. The first block are escape attempts: by default each aborts the session. */
enum jb_signal {
  JB_SIG_PATH_TRAVERSAL, /* a ".." component (jailboxd's syntax check, or the shim's) */
  JB_SIG_ABSOLUTE_PATH, /* a path starting with "/" */
  JB_SIG_SYMLINK_ESCAPE, /* through or onto a symlink that leads out of the workspace (shim) */
  JB_SIG_HARD_LINK, /* a file with more than one hard link (shim) */
  JB_SIG_SECCOMP_KILL, /* the shim or a jailed process killed by the syscall filter */
  JB_SIG_SHIM_EXIT, /* the shim exited while the session was live */
  JB_SIG_SANDBOX_DIED, /* the container died (killed from outside the shim) */
  JB_SIG_PROTOCOL_VIOLATION, /* a malformed or oversized line from the shim */
  JB_SIG_ESCAPE_COUNT,
  /* not escapes: alert only, after N occurrences */
  JB_SIG_EXCLUDED_PATH = JB_SIG_ESCAPE_COUNT, /* an op on an excluded path */
  JB_SIG_DENIED_PATH, /* any other path refused by the rules (special file, …) */
  JB_SIG_COUNT
};

/* The escape kinds, comma-separated: the default of JAILBOX_ESCAPE_ABORT. */
#define JB_ESCAPE_KINDS_TEXT                                                                   \
  "path_traversal,absolute_path,symlink_escape,hard_link,seccomp_kill,shim_exit,sandbox_died," \
  "protocol_violation"
#define JB_ALERT_AFTER_DEFAULT "excluded_path:3,denied_path:10"

struct jb_escape_policy {
  bool abort[JB_SIG_COUNT]; /* aborts the session at its first occurrence */
  long alert_after[JB_SIG_COUNT]; /* otherwise: an alert at every alert_after-th; 0 = never */
  long trust_penalty; /* trust score points an agent loses per escape abort */
};

/* The wire name of a kind ("path_traversal", …); "unknown" out of range. */
const char *jb_signal_name(enum jb_signal s);

/* The kind named `name`, or -1. */
int jb_signal_from_name(const char *name);

/* Fills `p` from `abort_list` (kinds separated by commas and/or spaces; "none" or "" for
 * none), `alert_after` ("kind:N,…", N ≥ 1) and `penalty` (0..1000). A kind neither aborting
 * nor listed in `alert_after` alerts at every occurrence when it is an escape kind, and never
 * otherwise. Returns 0, or -1 with `err` naming the bad item. */
int jb_escape_policy_parse(struct jb_escape_policy *p, const char *abort_list,
                           const char *alert_after, long penalty, jb_error *err);

#endif
