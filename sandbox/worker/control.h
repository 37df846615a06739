/* control.h — the rule of the worker's control socket (control.c) that needs no worker: how
 * long a request's shim call may wait. Header only, so that it is tested alone
 * (tests/unit/sandbox/test_control_timeout.c). */
#ifndef JB_SANDBOX_WORKER_CONTROL_H
#define JB_SANDBOX_WORKER_CONTROL_H

#include <jansson.h>

#define JB_CONTROL_TIMEOUT_MAX_MS 3600000L /* an hour: the longest wait a request may ask for */

/* The ms a control request's shim call waits: its "timeoutMs" (`v`, borrowed; may be NULL)
 * when that is a positive integer, at most JB_CONTROL_TIMEOUT_MAX_MS (so that now + timeout
 * cannot overflow a deadline); `dflt` (JAILBOX_CALL_TIMEOUT_MS) when it is absent, not an
 * integer, zero or negative. */
static inline long jb_control_timeout_ms(const json_t *v, long dflt) {
  if (!json_is_integer(v) || json_integer_value(v) <= 0) return dflt;
  json_int_t t = json_integer_value(v);
  return t > JB_CONTROL_TIMEOUT_MAX_MS ? JB_CONTROL_TIMEOUT_MAX_MS : (long)t;
}

#endif
