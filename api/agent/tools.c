/* tools.c — the agent's tools as MCP tools/list describes them: name, title, description and
 * the JSON Schema of the arguments (see tools.h). */
#include "api/agent/tools.h"

static json_t *tool_schema(const char *name, const char *title, const char *desc, json_t *props,
                           json_t *required) {
  return json_pack("{s:s,s:s,s:s,s:{s:s,s:o,s:o,s:b}}", "name", name, "title", title, "description",
                   desc, "inputSchema", "type", "object", "properties", props, "required", required,
                   "additionalProperties", 0);
}

json_t *jb_tools_describe(void) {
  json_t *path = json_pack("{s:s,s:i,s:i,s:s}", "type", "string", "minLength", 1, "maxLength", 4096,
                           "description", "path relative to the workspace root");
  json_t *tools = json_pack(
      "[o,o,o,o]",
      tool_schema("read", "Read a file",
                  "Read a file of the workspace: UTF-8 text, or base64 with encoding 'base64'.",
                  json_pack("{s:O,s:{s:s,s:i},s:{s:s,s:i}}", "path", path, "offset", "type",
                            "integer", "minimum", 0, "length", "type", "integer", "minimum", 0),
                  json_pack("[s]", "path")),
      tool_schema(
          "write", "Write a file",
          "Write a whole file of the workspace; in supervised mode the buyer approves it first.",
          json_pack("{s:O,s:{s:s},s:{s:s,s:[s,s]}}", "path", path, "content", "type", "string",
                    "encoding", "type", "string", "enum", "utf-8", "base64"),
          json_pack("[s,s]", "path", "content")),
      tool_schema("list", "List a directory",
                  "List a directory of the workspace: name, type (file, dir, symlink) and size.",
                  json_pack("{s:O,s:{s:s}}", "path", path, "recursive", "type", "boolean"),
                  json_pack("[s]", "path")),
      tool_schema("done", "Finish the session",
                  "Declare the work finished; the session goes to 'done' for the buyer to accept.",
                  json_pack("{s:{s:s,s:i,s:i}}", "summary", "type", "string", "minLength", 1,
                            "maxLength", 65536),
                  json_pack("[s]", "summary")));
  json_decref(path);
  return tools;
}

