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

#endif
