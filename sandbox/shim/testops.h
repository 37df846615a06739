/* testops.h — ops that attack the jail from inside, compiled only into jailbox-shim-test
 * (JB_SHIM_TEST_OPS) for the wall tests; never part of the production shim. */
#ifndef JB_SANDBOX_SHIM_TESTOPS_H
#define JB_SANDBOX_SHIM_TESTOPS_H

#include <jansson.h>
#include <stdbool.h>

#include "lib/err.h"

/* Runs test op `name` (the part after "test.") with the fields of `req`. Returns the result
 * object (new reference), or NULL with `err` set for an unknown op or bad arguments.
 * Ops: syscall {name}, write {path}, connect {host, port, timeoutMs} or {path} (Unix), forkbomb {max},
 * memhog {mib}, arm {what: "malformed" | "noresult", target}, renameat2 {from, to, flags}. See sandbox/proto/PROTOCOL.md. */
json_t *jb_shim_test_op(const char *name, const json_t *req, jb_error *err);

/* test.arm {what: "malformed" | "noresult", target}: what the answer to request `op` must be
 * instead of its own, once, for the first read, list or stat (or `target` op) after the arming:
 * 0 its own, 1 a line that is not JSON, 2 {"id", "ok": true} without a result. */
int jb_shim_test_malformed_now(const char *op);

#endif
