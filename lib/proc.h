/* proc.h — running helper programs (initdb, pg_ctl) as a chosen user, without a shell. */
#ifndef JB_PROC_H
#define JB_PROC_H

#include <stdbool.h>
#include <sys/types.h>

#include "lib/err.h"

struct jb_run_as {
  bool switch_user; /* when true, the child drops to uid/gid before exec */
  uid_t uid;
  gid_t gid;
};

/* Runs argv[0] (an absolute path) with `argv`, as `who` when who->switch_user, in a new
 * session (so a terminal's Ctrl-C reaches jailboxd only), with stdin from /dev/null and
 * stdout+stderr appended to `log_path` (created 0600; NULL: /dev/null). No fd other than
 * 0-2 reaches the child. Waits for it. Returns its exit status (0..255), or -1 with `err`
 * set when it could not run or was killed by a signal. */
int jb_proc_run(const char *const argv[], const struct jb_run_as *who, const char *log_path,
                jb_error *err);

/* Looks up `user` in the password database into `who` (switch_user = true). Returns 0, or
 * -1 with `err` set when there is no such user. */
int jb_run_as_lookup(const char *user, struct jb_run_as *who, jb_error *err);

#endif
