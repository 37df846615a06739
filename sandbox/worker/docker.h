/* docker.h — a small Docker Engine API client over the daemon's Unix socket, with libcurl
 * (CURLOPT_UNIX_SOCKET_PATH). The only way jailbox talks to Docker: no CLI.
 * API reference: https://docs.docker.com/engine/api/v1.41/ (Docker 20.10, Debian 12's).
 *
 * Every call is synchronous and uses its own curl handle, so calls from several threads are
 * fine. curl_global_init must have run before the first call (the worker's main does it). */
#ifndef JB_SANDBOX_DOCKER_H
#define JB_SANDBOX_DOCKER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/err.h"

#define JB_DOCKER_API "/v1.41"
/* Largest response body read, bytes (container inspect with a big seccomp profile ≈ 20 KiB). */
#define JB_DOCKER_MAX_BODY (4 * 1024 * 1024)

struct jb_docker {
  char socket[512]; /* path of the daemon's socket, e.g. /var/run/docker.sock */
};

/* Sends `method` `path` (below JB_DOCKER_API, e.g. "/containers/json?all=1") with the JSON
 * `body` (borrowed; NULL: none), waiting at most `timeout_ms` (0: no limit). On return
 * *status is the HTTP status and *out (may be NULL) the parsed JSON answer as a new
 * reference, or NULL when the body is empty or not JSON. Returns 0 whenever an HTTP answer
 * arrived (whatever its status), or -1 with `err` set when the daemon could not be reached,
 * timed out, or answered more than JB_DOCKER_MAX_BODY bytes. */
int jb_docker_call(const struct jb_docker *d, const char *method, const char *path,
                   const json_t *body, long timeout_ms, long *status, json_t **out, jb_error *err);

/* As jb_docker_call, but any status outside 200..299 is an error too: `err` then carries the
 * daemon's "message" (Docker puts one in every error body) and the status in err->code. */
int jb_docker_expect(const struct jb_docker *d, const char *method, const char *path,
                     const json_t *body, long timeout_ms, json_t **out, jb_error *err);

/* A hijacked attach connection (POST /containers/{id}/attach with `Upgrade: tcp`): after the
 * `101 UPGRADED` answer the socket carries the container's stdin raw one way and its stdout
 * and stderr in 8-byte-header frames the other way (type, 0, 0, 0, big-endian length). */
struct jb_docker_stream {
  void *curl; /* the handle that owns the socket */
  int fd; /* the socket, for poll/read/write; -1 when closed */
  unsigned char pre[4096]; /* stream bytes that arrived together with the HTTP answer */
  size_t pre_len, pre_off;
};

/* Attaches to container `id` (stdin, stdout, stderr, stream=1); works before the container
 * is started, so nothing it prints is lost. Returns 0 with `s` ready, or -1 with `err`. */
int jb_docker_attach(const struct jb_docker *d, const char *id, struct jb_docker_stream *s,
                     long timeout_ms, jb_error *err);

/* Closes the connection (the container sees end of input on stdin when it was created with
 * StdinOnce). Safe on a closed stream. */
void jb_docker_stream_close(struct jb_docker_stream *s);

/* Percent-encodes `in` for a URL query into `out` (`len` bytes). Returns 0 or -1 (too long). */
int jb_docker_urlencode(const char *in, char *out, size_t len);

#endif
