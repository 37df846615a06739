/* tools.h — the agent's tools as MCP describes them (MCP "tools/list", the Tool object of
 * https://modelcontextprotocol.io/specification/2025-11-25/server/tools). */
#ifndef JB_API_TOOLS_H
#define JB_API_TOOLS_H

#include <jansson.h>

/* The tools/list array: one Tool object per tool the agent may call, with the JSON Schema of
 * its arguments. New reference; NULL when out of memory. */
json_t *jb_tools_describe(void);

#endif
