/* tools.h — the agent's tools as MCP describes them (MCP "tools/list", the Tool object of
 * https://modelcontextprotocol.io/specification/2025-11-25/server/tools). */
#ifndef JB_API_TOOLS_H
#define JB_API_TOOLS_H

#include <jansson.h>
#include <stdbool.h>

/* Whether a session's tools/list names exec (decided by the op path from the session contract:
 * api/core/ops.h jb_op_exec_offer). */
enum jb_exec_offer {
  JB_EXEC_OFFER_UNKNOWN = 0, /* not known yet: no contract (the session is being launched), or
                              * one that does not say — listed; a call is decided when it runs */
  JB_EXEC_OFFERED, /* the contract's exec.available is true */
  JB_EXEC_NOT_OFFERED, /* false: the sandbox cannot run commands; a call is refused up front */
};

/* The tools/list array: one Tool object per tool the agent may call, with the JSON Schema of
 * its arguments; exec only when `exec` (the file tools and done always). New reference; NULL
 * when out of memory. */
json_t *jb_tools_describe(bool exec);

#endif
