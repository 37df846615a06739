/* tool.c — the tools' names and the enum (tool.h). */
#include "sandbox/proto/tool.h"

#include <stddef.h>
#include <string.h>

/* Indexed by enum jb_tool. */
static const char *const names[] = {"read",   "write", "list",  "done", "read_many", "edit", "find",
                                    "search", "stat",  "mkdir", "move", "delete",    "exec"};
_Static_assert(sizeof names / sizeof names[0] == JB_TOOL_COUNT, "one name per tool");

enum jb_tool jb_tool_from_name(const char *name) {
  for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(names[i], name)) return (enum jb_tool)i;
  return JB_TOOL_UNKNOWN;
}

const char *jb_tool_name(enum jb_tool t) {
  if ((int)t < 0 || (int)t >= JB_TOOL_COUNT) return NULL;
  return names[t];
}

bool jb_tool_changes_files(enum jb_tool t) {
  switch (t) {
    case JB_TOOL_WRITE:
    case JB_TOOL_EDIT:
    case JB_TOOL_MKDIR:
    case JB_TOOL_MOVE:
    case JB_TOOL_DELETE:
      return true;
    default:
      return false;
  }
}
