/* tool.h — the tools an op names (db ops.tool, the direct protocol's "tool", the shim's "op";
 * sandbox/proto/PROTOCOL.md) as one enum: a name is parsed once where it comes in
 * (jb_tool_from_name), and the code after switches on the enum instead of comparing strings. */
#ifndef JB_SANDBOX_PROTO_TOOL_H
#define JB_SANDBOX_PROTO_TOOL_H

#include <stdbool.h>

/* The agent's tools (MCP tools/list), named on the wire by their lower-case names; the worker
 * runs all but done. The values are fixed: jailboxd indexes tables by them. */
enum jb_tool {
  JB_TOOL_UNKNOWN = -1, /* no name, or a name that is none of these */
  JB_TOOL_READ,
  JB_TOOL_WRITE,
  JB_TOOL_LIST,
  JB_TOOL_DONE,
  JB_TOOL_READ_MANY,
  JB_TOOL_EDIT, /* runs in the shim as the write jailboxd made of it */
  JB_TOOL_FIND,
  JB_TOOL_SEARCH,
  JB_TOOL_STAT,
  JB_TOOL_MKDIR,
  JB_TOOL_MOVE,
  JB_TOOL_DELETE,
  JB_TOOL_EXEC, /* a command run in its own jail in the sandbox (sandbox/worker/exec_op.c) */
  JB_TOOL_COUNT, /* not a tool: the number of them */
};

/* The tool named `name` (nullable; compared exactly), or JB_TOOL_UNKNOWN. */
enum jb_tool jb_tool_from_name(const char *name);

/* The wire name of `t` ("read"; static), or NULL for JB_TOOL_UNKNOWN and any value outside the
 * enum. */
const char *jb_tool_name(enum jb_tool t);

/* Whether ops of `t` change the workspace through the shim's file ops: write, edit, mkdir,
 * move, delete (an exec's changes are judged apart, after its command). */
bool jb_tool_changes_files(enum jb_tool t);

#endif
