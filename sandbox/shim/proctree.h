/* proctree.h — signals to every process of a command's jail but its pid 1, sent by the spawner
 * (sandbox/WALLS.md, "exec": the container has no CAP_KILL, so root cannot signal the jail's
 * uid-65534 processes; the sender becomes that uid first). */
#ifndef JB_SANDBOX_SHIM_PROCTREE_H
#define JB_SANDBOX_SHIM_PROCTREE_H

#include <sys/types.h>

/* Sends `sig` to every descendant of process `root` (the jail's pid 1, not signalled itself) —
 * inside the jail's pid namespace an orphan is adopted by its pid 1, so they are every process
 * of the command — found from /proc's parent links in passes until a pass finds no new one
 * (SIGCONT is sent again to the ones found before each pass, so that none stopped between
 * passes is missed). The signals go from a child process that first becomes uid and gid 65534
 * (an unprivileged sender may signal its own uid's processes); waits for it. 0 when at least
 * one process was signalled, else -1. */
int jb_proctree_signal(pid_t root, int sig);

/* The name of signal `s` ("SIGKILL"; "SIG?" for one not listed); a static string. */
const char *jb_signame(int s);

#endif
