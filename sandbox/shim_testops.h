/* shim_testops.h — ops that attack the jail from inside, compiled only into jailbox-shim-test
 * (JB_SHIM_TEST_OPS) for the wall tests; never part of the production shim. */
#ifndef JB_SANDBOX_SHIM_TESTOPS_H
#define JB_SANDBOX_SHIM_TESTOPS_H

#include <jansson.h>

#include "server/err.h"

/* Runs test op `name` (the part after "test.") with the fields of `req`. Returns the result
 * object (new reference), or NULL with `err` set for an unknown op or bad arguments.
 * Ops: syscall {name}, write {path}, connect {host, port, timeoutMs} or {path} (Unix), forkbomb {max},
 * memhog {mib}. See sandbox/PROTOCOL.md. */
json_t *jb_shim_test_op(const char *name, const json_t *req, jb_error *err);

#endif
