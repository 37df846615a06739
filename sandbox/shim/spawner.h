/* spawner.h — the spawner: the launcher (`jailbox-shim --launch`) kept alive, root of gVisor's
 * kernel inside the container, that builds one bubblewrap jail per command of exec on the
 * worker's request and reports its output and end (sandbox/proto/PROTOCOL.md, "The spawner";
 * sandbox/WALLS.md, "exec"). It reads requests only from its own channel and runs nothing but
 * the jails it is asked for. The next command's jail is built ahead, its helper waiting for
 * the command. Also the in-jail helper every command starts through. */
#ifndef JB_SANDBOX_SHIM_SPAWNER_H
#define JB_SANDBOX_SHIM_SPAWNER_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

#include "lib/pathcheck.h"
#include "sandbox/proto/shim.h"

/* Serves the spawner's line protocol on `chan` (a connected socket, taken over) until the
 * process `shim_pid` (the shim's bwrap, a child of this process) ends; every command then
 * running is killed. `bpf`/`bpf_len`: the exec filter (classic BPF, borrowed). `self`: the
 * absolute path of this binary inside the container (bound into each jail as the helper).
 * Returns the exit status the launcher ends with: the shim's (its exit code, or 128 + the
 * signal that ended it). Reaps every child of the process (it is the container's init). */
int jb_spawner_run(int chan, const unsigned char *bpf, size_t bpf_len, pid_t shim_pid,
                   const char *self);

/* The helper's mode, `jailbox-shim --exec FD`, run inside a command's jail after setpriv (uid
 * 65534, no capability, no_new_privs, the exec filter): closes every descriptor above 2 but
 * FD (a Unix socket of the spawner's), writes one byte `r` there (ready) and waits for its
 * command: a 4-byte length carrying the stdin memfd (SCM_RIGHTS), then that many bytes of
 * NUL-terminated strings — cwd, RLIMIT_FSIZE, RLIMIT_NPROC, argc, argv…, envc, NAME=VALUE… .
 * It sets the limits (hard and soft), the environment (after setpriv, so that no variable of
 * the agent's reaches setpriv, a dynamically linked program that runs with capabilities still
 * held) and the cwd, and runs PROGRAM (searched in PATH) as its child in a new process group,
 * waiting for it. Returns the command's exit code, 128 + the signal that ended it, 127 (not
 * found), 126 (not executable) or 125 (usage, a bad request, the socket ended before a
 * command came, fork). */
int jb_exec_helper(int argc, char **argv);

/* The image as a command's jail will see it, looked at in the caller's root (the container's,
 * whose /usr, /bin and /lib* each jail binds), for the spawner's hello: {"shell": true when
 * /bin/sh, links followed, is a regular file others (the jail's uid 65534) may execute,
 * "programs": the names of a short list of common ones (image_facts.c) found so in
 * /usr/local/bin, /usr/bin or /bin, in the list's order}. New reference; NULL when out of
 * memory. */
json_t *jb_image_facts(void);

/* A memfd (close-on-exec) holding the `len` bytes at `p`, its offset at the start (the
 * command's stdin, the exec filter handed to bwrap); -1 with errno on failure. */
int jb_memfd_with(const char *name, const void *p, size_t len);

/* The most bytes of a command handed to the helper (argv and env, the cwd, the numbers): the
 * spawner refuses to send more and the helper to read more. */
#define JB_HELPER_REQUEST_MAX (JB_SPAWNER_MAX_ARGV_BYTES + JB_PATH_MAX + sizeof "/workspace" + 4096)

#endif
