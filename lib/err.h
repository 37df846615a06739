/* err.h — the project's error value: an errno-style code plus a message a person reads.
 *
 * The rule the code follows (crun's libcrun_error_t, with curl's "pass the result straight
 * up" for the hops that add nothing):
 * - A fallible function takes a `jb_error *err` (last), returns a negative value on failure
 *   (-1, or a negative enum jb_err when callers must tell outcomes apart) and fills `err`
 *   once, where the failure is found, naming what was being done and to what:
 *   `return jb_fail_errno(err, errno, "open workspace %s", path);`. A database statement is
 *   named by the `what` its caller passes to db/db.h ("lock session: <server message>").
 * - A caller passes the error up unchanged when the message already says what a person needs
 *   (`if (f(…, err) < 0) return -1;`), and wraps it with jb_error_wrap() when it knows what
 *   the callee could not: which file, key, program, migration or peer
 *   (`return jb_error_wrap(err, "signing key %s", path);`). A helper that works on a bare fd
 *   or runs any program (lib/line.c, lib/proc.c) names only the system call: its caller
 *   wraps.
 * - Nobody prints an error and returns it too: it is shown once, by the code that turns it
 *   into an answer, a log line or a line on stderr (the top of a request, a thread's loop,
 *   main).
 * - A failure the caller goes on after (a fallback, a best-effort step) goes into a local
 *   jb_error or NULL, which discards the message. Out of memory is just "out of memory". */
#ifndef JB_ERR_H
#define JB_ERR_H

#include <stddef.h>

#define JB_ERROR_MSG_MAX 512

/* Results of operations on stored things (sessions, ops, tokens) that a caller must tell
 * apart; every other failure is JB_ERR_FAIL with the detail in a jb_error. */
enum jb_err {
  JB_OK = 0,
  JB_ERR_FAIL = -1, /* database or system failure */
  JB_ERR_NOT_FOUND = -2, /* no such session / op / agent */
  JB_ERR_CONFLICT = -3, /* the thing is not in a state that allows this */
  JB_ERR_EXISTS = -4, /* a thing with that id exists already */
};

typedef struct jb_error {
  int code; /* errno value, or 0 when none applies */
  char msg[JB_ERROR_MSG_MAX]; /* NUL-terminated, one line, no trailing newline */
} jb_error;

/* Fills `err` with `code` (an errno value or 0) and a printf-style message.
 * Returns -1 always, so that `return jb_fail(err, ...)` reads naturally. */
int jb_fail(jb_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* As jb_fail, with ": strerror(code)" appended to the message. Returns -1. */
int jb_fail_errno(jb_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes the message already in `err` with printf-style context and ": ".
 * Returns -1. The code is kept. */
int jb_error_wrap(jb_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Cleanup helpers (bubblewrap/crun style): release on every return path. */
void jb_freep(void *p);
void jb_closep(int *fd);
#define cleanup_free __attribute__((cleanup(jb_freep)))
#define cleanup_close __attribute__((cleanup(jb_closep)))

/* Hands over what `*pp` points to and leaves NULL behind, so that a cleanup attribute on the
 * variable releases nothing (crun's steal_pointer): `return jb_steal_pointer(&buf);`. `pp` is
 * the address of any object pointer. */
static inline void *jb_steal_pointer(void *pp) {
  void **p = pp;
  void *v = *p;
  *p = NULL;
  return v;
}

#endif
