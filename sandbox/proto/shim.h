/* shim.h — constants of the worker ↔ jailbox-shim line protocol (sandbox/proto/PROTOCOL.md),
 * shared by both ends. */
#ifndef JB_SANDBOX_SHIM_PROTO_H
#define JB_SANDBOX_SHIM_PROTO_H

#define JB_SHIM_PROTOCOL 1

/* Longest line either side sends or accepts, bytes, excluding the newline: room for a 1 MiB
 * file in base64 (1,398,104 bytes) plus the envelope. */
#define JB_SHIM_MAX_LINE (2 * 1024 * 1024)

/* Deepest array/object nesting accepted in a line. */
#define JB_SHIM_MAX_DEPTH 16

/* Launch preamble: "JBSECCOMP <bytes>\n" then the classic BPF program (sock_filter array). */
#define JB_SHIM_FILTER_MAGIC "JBSECCOMP"
#define JB_SHIM_FILTER_MAX (64 * 1024)
#define JB_SHIM_FILTER_FD 3

/* The launcher's environment variable naming the Unix socket to connect the shim's stdio to
 * (sandbox/proto/PROTOCOL.md, "Channel"). bwrap --clearenv keeps it out of the jail. */
#define JB_SHIM_SOCKET_ENV "JB_SHIM_SOCKET"

/* ---- the spawner (sandbox/proto/PROTOCOL.md, "The spawner") ---- */

/* Set to "1" in the launcher's environment by a worker that writes the exec filter block after
 * the Wall 3 filter in the preamble and takes a second connection for the spawner; without it
 * the launcher reads one filter and runs no spawner. */
#define JB_SHIM_SPAWNER_ENV "JB_SHIM_SPAWNER"

/* Second block of the launch preamble: "JBSECCOMPX <bytes>\n" then the exec filter's classic
 * BPF (the filter every command of exec runs under). 0 bytes: no exec filter, no spawner. */
#define JB_SHIM_EXEC_FILTER_MAGIC "JBSECCOMPX"

#define JB_SPAWNER_PROTOCOL 1
/* Longest line either side of the spawner's channel sends or accepts (as the shim's). */
#define JB_SPAWNER_MAX_LINE JB_SHIM_MAX_LINE
/* Raw bytes of output in one chunk line at most. */
#define JB_SPAWNER_CHUNK (16 * 1024)
/* A request's bounds: argv items and their bytes together, stdin bytes (decoded), env
 * entries, the wall-clock timeout, the output cap per stream. */
#define JB_SPAWNER_MAX_ARGV 256
#define JB_SPAWNER_MAX_ARGV_BYTES (128 * 1024)
#define JB_SPAWNER_MAX_STDIN (1024 * 1024)
#define JB_SPAWNER_MAX_ENV 256
#define JB_SPAWNER_MAX_TIMEOUT_MS (24L * 3600 * 1000)
#define JB_SPAWNER_MAX_OUTPUT (64L * 1024 * 1024)
/* Defaults of a request's "limits": the largest file a command may write (RLIMIT_FSIZE), its
 * own /tmp tmpfs. RLIMIT_NPROC defaults to the container's own limit less JB_SPAWNER_NPROC_KEEP
 * (the shim runs as the same uid). */
#define JB_SPAWNER_DEFAULT_FSIZE (1024LL * 1024 * 1024)
#define JB_SPAWNER_DEFAULT_TMP (128LL * 1024 * 1024)
#define JB_SPAWNER_NPROC_KEEP 4

#endif
