/* tools.c — the agent's tools as MCP tools/list describes them (see tools.h): name, title,
 * a description a model can act on, the JSON Schema of the arguments with their limits
 * (the ones api/core/op_checks.c enforces), the JSON Schema of structuredContent, and the
 * behaviour annotations. */
#include "api/core/tools.h"

#include <stdbool.h>
#include <string.h>

/* Schema fragments shared by several tools (JSON text). */
#define PATH_S                                                                        \
  "{\"type\":\"string\",\"minLength\":1,\"maxLength\":4096,\"description\":\"a path " \
  "relative to the workspace root, '/'-separated, without '.' or '..' components\"}"
#define DIR_S                                                                           \
  "{\"type\":\"string\",\"minLength\":1,\"maxLength\":4096,\"default\":\".\","          \
  "\"description\":\"a directory relative to the workspace root; '.' (the default) is " \
  "the root\"}"
#define NAT "{\"type\":\"integer\",\"minimum\":0}"
#define POS "{\"type\":\"integer\",\"minimum\":1}"
#define BATCH_S                                                                            \
  "{\"type\":\"string\",\"pattern\":\"^[A-Za-z0-9._-]{1,64}$\",\"description\":\"stage "   \
  "the op in the batch of this name instead of running it (or asking the buyer): it is "   \
  "checked now and answered {staged: true, opId}; commit_changeset then offers the whole " \
  "batch for one review\"}"
#define STAGED_OR(req) "\"anyOf\":[{\"required\":[\"" req "\"]},{\"required\":[\"staged\"]}]"
#define HEX "{\"type\":\"string\",\"pattern\":\"^[0-9a-f]{64}$\"}"
#define HEX_OR_NULL "{\"type\":[\"string\",\"null\"]}"
#define FOLDERS_S "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}"
#define READ_RESULT_S                                                                        \
  "{\"type\":\"object\",\"properties\":{\"size\":" NAT ",\"offset\":" NAT ",\"length\":" NAT \
  ",\"eof\":{\"type\":\"boolean\"},\"content\":{\"type\":\"string\"},"                       \
  "\"encoding\":{\"enum\":[\"utf-8\",\"base64\"]},\"lines\":{\"type\":\"object\","           \
  "\"properties\":{\"first\":" NAT ",\"count\":" NAT                                         \
  ",\"total\":{\"type\":[\"integer\","                                                       \
  "\"null\"]}}}},\"required\":[\"content\",\"encoding\"]}"
#define DIFF_S                                                                          \
  "{\"type\":[\"object\",\"null\"],\"properties\":{\"format\":{\"const\":\"unified\"}," \
  "\"text\":{\"type\":\"string\"},\"truncated\":{\"type\":\"boolean\"},\"bytes\":" NAT "}}"

/* One tool: name, title, description, input and output schema (JSON text), annotations. */
struct tool_text {
  const char *name, *title, *desc, *input, *output;
  bool read_only, destructive, idempotent;
};

static const struct tool_text tools[] = {
    {"read", "Read a file",
     "Read a file of the workspace. Without options: the whole file (up to 1 MiB). Choose at "
     "most one way to read part of it: offset/limit (lines; offset 0 is the first line), "
     "head or tail (the first or last N lines), or byteOffset/byteLength (bytes, for large or "
     "binary files). Text comes as UTF-8, anything else as base64 (encoding says which).",
     "{\"type\":\"object\",\"properties\":{\"path\":" PATH_S ",\"offset\":" NAT ",\"limit\":" POS
     ",\"head\":" POS ",\"tail\":" POS ",\"byteOffset\":" NAT ",\"byteLength\":" NAT
     "},\"required\":[\"path\"],\"additionalProperties\":false}",
     READ_RESULT_S, true, false, true},
    {"read_many", "Read several files",
     "Read up to 50 whole files in one call. Each file gets its own result or error (a missing "
     "or refused file does not fail the others); together at most 1 MiB of content — files past "
     "that say too_large: read them alone.",
     "{\"type\":\"object\",\"properties\":{\"paths\":{\"type\":\"array\",\"minItems\":1,"
     "\"maxItems\":50,\"items\":" PATH_S "}},\"required\":[\"paths\"],"
     "\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"files\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"ok\":{\"type\":\"boolean\"},"
     "\"result\":" READ_RESULT_S ",\"error\":{\"type\":\"object\"}},\"required\":[\"path\","
     "\"ok\"]}}},\"required\":[\"files\"]}",
     true, false, true},
    {"write", "Write a file",
     "Create or replace a whole file (up to 1 MiB; encoding 'base64' for binary content). To "
     "change part of an existing text file prefer edit. Missing parent folders are created "
     "(createdFolders names them) unless createParents is false. In a supervised session the "
     "buyer approves the write, and the folders it creates, first.",
     "{\"type\":\"object\",\"properties\":{\"path\":" PATH_S ",\"content\":{\"type\":"
     "\"string\"},\"encoding\":{\"enum\":[\"utf-8\",\"base64\"],\"default\":\"utf-8\"},"
     "\"createParents\":{\"type\":\"boolean\",\"default\":true},\"changeset\":" BATCH_S "},"
     "\"required\":[\"path\",\"content\"],\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"written\":" NAT ",\"sha256\":" HEX
     ",\"previousSha256\":" HEX_OR_NULL ",\"createdFolders\":" FOLDERS_S
     "}," STAGED_OR("written") "}",
     false, true, true},
    {"edit", "Edit a text file",
     "Replace exact text in a UTF-8 file (up to 1 MiB): each edit's oldText must occur exactly "
     "once in the file as the edits before it left it (set replaceAll to replace every "
     "occurrence). All edits apply or none: a failing edit is named with the reason (not found, "
     "or found N times). The answer is the unified diff; dryRun returns the diff without "
     "writing. In a supervised session the buyer approves exactly that diff first; the file "
     "must not change meanwhile.",
     "{\"type\":\"object\",\"properties\":{\"path\":" PATH_S ",\"edits\":{\"type\":\"array\","
     "\"minItems\":1,\"maxItems\":100,\"items\":{\"type\":\"object\",\"properties\":{"
     "\"oldText\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1048576},\"newText\":{"
     "\"type\":\"string\",\"maxLength\":1048576},\"replaceAll\":{\"type\":\"boolean\","
     "\"default\":false}},\"required\":[\"oldText\",\"newText\"],\"additionalProperties\":"
     "false}},\"dryRun\":{\"type\":\"boolean\",\"default\":false},\"changeset\":" BATCH_S
     "},\"required\":[\"path\",\"edits\"],\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"dryRun\":{\"type\":"
     "\"boolean\"},\"edits\":" NAT ",\"replaced\":" NAT ",\"diff\":" DIFF_S ",\"written\":" NAT
     ",\"sha256\":" HEX ",\"previousSha256\":" HEX_OR_NULL ",\"sha256Before\":" HEX
     ",\"sha256After\":" HEX "}}",
     false, true, false},
    {"list", "List a directory",
     "List a directory: name, type (file, dir, symlink) and size, sorted by name. recursive "
     "descends into subdirectories (depth limits how far: 1 is the directory alone); names are "
     "relative to path. Excluded and unsafe entries are not shown.",
     "{\"type\":\"object\",\"properties\":{\"path\":" DIR_S ",\"recursive\":{\"type\":"
     "\"boolean\",\"default\":false},\"depth\":{\"type\":\"integer\",\"minimum\":1,"
     "\"maximum\":64}},\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"entries\":{\"type\":"
     "\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
     "\"type\":{\"enum\":[\"file\",\"dir\",\"symlink\"]},\"size\":" NAT ",\"target\":{\"type\":"
     "\"string\"}},\"required\":[\"name\",\"type\"]}},\"count\":" NAT ",\"truncated\":{\"type\":"
     "\"boolean\"}},\"required\":[\"entries\"]}",
     true, false, true},
    {"find", "Find files by name",
     "Find files and directories under path whose workspace-relative path matches a glob: '*' "
     "and '?' within a name, '**' across directories (e.g. '**/*.c', 'src/**/test_*'). "
     "Excluded entries are never found. At most 10,000 matches (truncated says when there were "
     "more).",
     "{\"type\":\"object\",\"properties\":{\"pattern\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":1024},\"path\":" DIR_S "},\"required\":[\"pattern\"],"
     "\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"matches\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"string\"}},\"truncated\":{\"type\":\"boolean\"},\"scanned\":" NAT "},\"required\":["
     "\"matches\"]}",
     true, false, true},
    {"search", "Search file contents",
     "Search the contents of the files under path with a regular expression (PCRE2 syntax), "
     "optionally only in files whose path matches glob. Answers path:line:text for each "
     "matching line, at most maxMatches (default 200, at most 5000); binary files and files "
     "over 16 MiB are skipped. A regex too costly to run fails with regex_limit: simplify it.",
     "{\"type\":\"object\",\"properties\":{\"pattern\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":1024},\"path\":" DIR_S ",\"glob\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":1024},\"maxMatches\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":5000,"
     "\"default\":200}},\"required\":[\"pattern\"],\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"matches\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"line\":" POS ",\"text\":{"
     "\"type\":\"string\"}},\"required\":[\"path\",\"line\",\"text\"]}},\"truncated\":{\"type\":"
     "\"boolean\"},\"filesScanned\":" NAT ",\"filesSkipped\":" NAT "},\"required\":["
     "\"matches\"]}",
     true, false, true},
    {"stat", "Describe a file",
     "Whether a path exists, and its type, size, mode (octal) and modification time; sha256 "
     "adds the SHA-256 of a regular file.",
     "{\"type\":\"object\",\"properties\":{\"path\":" PATH_S ",\"sha256\":{\"type\":\"boolean\","
     "\"default\":false}},\"required\":[\"path\"],\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"exists\":{\"type\":\"boolean\"},\"type\":{\"type\":"
     "\"string\"},\"size\":" NAT ",\"links\":" NAT ",\"mode\":{\"type\":\"string\"},\"mtime\":{"
     "\"type\":\"string\"},\"sha256\":" HEX "},\"required\":[\"exists\"]}",
     true, false, true},
    {"mkdir", "Make a directory",
     "Create a directory and any missing parents. An existing directory is not an error "
     "(created is false); an existing file there is (exists). Supervised sessions ask the buyer "
     "first.",
     "{\"type\":\"object\",\"properties\":{\"path\":" PATH_S ",\"changeset\":" BATCH_S
     "},\"required\":[\"path\"],\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"created\":{\"type\":\"boolean\"},\"type\":{"
     "\"const\":\"dir\"}}," STAGED_OR("created") "}",
     false, false, true},
    {"move", "Move or rename",
     "Move or rename a file or directory. The destination's missing parent folders are created "
     "(createdFolders) unless createParents is false; an existing destination is refused "
     "(exists) unless overwrite, which replaces only a regular file. Supervised sessions ask "
     "the buyer first.",
     "{\"type\":\"object\",\"properties\":{\"source\":" PATH_S ",\"destination\":" PATH_S
     ",\"overwrite\":{\"type\":\"boolean\",\"default\":false},\"createParents\":{\"type\":"
     "\"boolean\",\"default\":true},\"changeset\":" BATCH_S "},\"required\":[\"source\","
     "\"destination\"],\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"moved\":{\"type\":\"boolean\"},\"type\":{\"enum\":["
     "\"file\",\"dir\"]},\"sha256\":" HEX ",\"destination\":{\"type\":\"string\"},"
     "\"createdFolders\":" FOLDERS_S "}," STAGED_OR("moved") "}",
     false, true, false},
    {"delete", "Delete a file or directory",
     "Delete a file or symlink (a symlink itself, never what it points to); a directory only "
     "with recursive, which deletes everything in it — or nothing, if anything in it may not be "
     "deleted. The workspace root cannot be deleted. Supervised sessions ask the buyer first.",
     "{\"type\":\"object\",\"properties\":{\"path\":" PATH_S ",\"recursive\":{\"type\":"
     "\"boolean\",\"default\":false},\"changeset\":" BATCH_S "},\"required\":[\"path\"],"
     "\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"deleted\":" NAT
     ",\"type\":{\"type\":\"string\"}}," STAGED_OR("deleted") "}",
     false, true, false},
    {"exec", "Run a command",
     "Run a command in the workspace, inside the sandbox: each command gets a fresh jail of its "
     "own (no network but a loopback of its own, 127.0.0.1 and ::1, TCP and UDP; its own /tmp; "
     "the workspace read-only unless writable). Give argv (the "
     "program and its arguments) or command (shell text, run by /bin/sh -c). A non-zero exit is "
     "a normal result (exitCode); output beyond maxOutputBytes per stream is cut (stdoutTruncated "
     "/ stderrTruncated), bytes that are not UTF-8 are replaced, and secrets (private keys, cloud "
     "keys, tokens, credentials) are replaced by [REDACTED:<rule>] (redactions, redacted). A "
     "writable command's effects on the workspace are listed (changes); symbolic links leading "
     "out, special files and new hard links it leaves are removed. The "
     "command is killed at "
     "timeoutSec (timedOut; 120 s unless given, at most the operator's limit, 600 s by default), "
     "and when it holds more memory than its limit (the session contract's "
     "exec.memory.perCommandMiB, or a lower memoryMiB): it then ends with oom true and the "
     "session goes on. Builds and test suites may take minutes, so send _meta.progressToken and "
     "the server sends notifications/progress while the call waits (the command's last output "
     "line, or what it waits for), at least every 10 s; a client that declares the Tasks "
     "extension gets a task instead. env may set only locale, colour, CI and debug variables "
     "(LANG, "
     "LC_*, TZ, TERM, NO_COLOR, FORCE_COLOR, CI, PYTHONUNBUFFERED, RUST_BACKTRACE, RUST_LOG...) "
     "and the ones the operator allows; others are refused (denied). In a supervised session "
     "the buyer approves the command first, seeing the variables' values, and may kill it while "
     "it runs.",
     "{\"type\":\"object\",\"properties\":{\"argv\":{\"type\":\"array\",\"minItems\":1,"
     "\"maxItems\":256,\"items\":{\"type\":\"string\"},\"description\":\"the program and its "
     "arguments (not run through a shell)\"},\"command\":{\"type\":\"string\",\"minLength\":1,"
     "\"maxLength\":131072,\"description\":\"shell text, run as /bin/sh -c command\"},"
     "\"cwd\":" DIR_S ",\"env\":{\"type\":\"object\",\"maxProperties\":256,"
     "\"propertyNames\":{\"pattern\":\"^[A-Za-z_][A-Za-z0-9_]{0,127}$\"},"
     "\"additionalProperties\":{\"type\":\"string\"},\"description\":\"variables added to the "
     "jail's base environment (PATH, HOME=/tmp, LANG=C.UTF-8, TERM=dumb)\"},\"stdin\":{\"type\":"
     "\"string\",\"maxLength\":1048576,\"description\":\"text given on standard input\"},"
     "\"timeoutSec\":{\"type\":\"integer\",\"minimum\":1,\"default\":120},\"maxOutputBytes\":{"
     "\"type\":\"integer\",\"minimum\":0,\"maximum\":8388608,\"default\":1048576,"
     "\"description\":\"bytes kept of each stream\"},\"writable\":{\"type\":\"boolean\","
     "\"default\":false,\"description\":\"mount the workspace writable for this command\"},"
     "\"memoryMiB\":{\"type\":\"integer\",\"minimum\":16,\"maximum\":65536,\"description\":"
     "\"a lower memory limit for this command (the session's per-command limit otherwise)\"}},"
     "\"oneOf\":[{\"required\":[\"argv\"]},{\"required\":[\"command\"]}],"
     "\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"exitCode\":{\"type\":[\"integer\",\"null\"]},"
     "\"signal\":{\"type\":[\"string\",\"null\"]},\"timedOut\":{\"type\":\"boolean\"},"
     "\"durationMs\":" NAT ",\"stdout\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"},"
     "\"stdoutTruncated\":{\"type\":\"boolean\"},\"stderrTruncated\":{\"type\":\"boolean\"},"
     "\"oom\":{\"type\":\"boolean\",\"description\":\"killed for going over its memory "
     "limit\"},\"stdoutBytes\":" NAT ",\"stderrBytes\":" NAT ",\"invalidUtf8\":" NAT
     ",\"redactions\":" NAT
     ",\"redacted\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
     "\"rule\":{\"type\":\"string\"},\"stream\":{\"enum\":[\"stdout\",\"stderr\"]},\"offset\":" NAT
     ",\"failed\":{\"type\":\"boolean\"}}}},\"changes\":{\"type\":\"array\",\"description\":"
     "\"a writable command's effects on the workspace\",\"items\":{\"type\":\"object\","
     "\"properties\":{\"path\":{\"type\":\"string\"},\"change\":{\"enum\":[\"added\","
     "\"modified\",\"deleted\",\"mode\"]},\"type\":{\"type\":\"string\"},\"mode\":{\"type\":"
     "\"string\"},\"size\":" NAT ",\"sha256\":{\"type\":\"string\"},\"target\":{\"type\":"
     "\"string\"},\"flagged\":{\"type\":\"string\"},\"removed\":{\"type\":\"boolean\"}}}},"
     "\"changesTotal\":" NAT "},\"required\":[\"exitCode\",\"signal\",\"timedOut\","
     "\"durationMs\",\"stdout\",\"stderr\",\"stdoutTruncated\",\"stderrTruncated\","
     "\"redactions\"]}",
     false, true, false},
    {"done", "Finish the session",
     "Declare the work finished; the session goes to 'done' for the buyer to review. No file "
     "operation is possible after it.",
     "{\"type\":\"object\",\"properties\":{\"summary\":{\"type\":\"string\",\"maxLength\":4096,"
     "\"description\":\"what was done, for the buyer\"}},\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"state\":{\"const\":\"done\"}},\"required\":["
     "\"state\"]}",
     false, false, true},
    {"commit_changeset", "Commit a batch of changes",
     "Offer the ops staged with changeset NAME (write, edit, mkdir, move, delete called with "
     "that changeset argument) as one changeset: in a supervised session the buyer reviews "
     "every file's diff at once and approves all, some or none; unsupervised, they run at "
     "once. The call waits until the approved ops have run and answers each op's state "
     "(done, failed — e.g. changed: the file changed after it was staged —, rejected).",
     "{\"type\":\"object\",\"properties\":{\"changeset\":{\"type\":\"string\",\"pattern\":"
     "\"^[A-Za-z0-9._-]{1,64}$\"}},\"required\":[\"changeset\"],\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"changeset\":{\"type\":\"object\",\"properties\":"
     "{\"opId\":" POS ",\"batch\":{\"type\":\"string\"},\"state\":{\"enum\":[\"applied\","
     "\"rejected\",\"failed\",\"undecided\"]},\"applied\":" NAT ",\"rejected\":" NAT
     ",\"failed\":" NAT ",\"members\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}}},"
     "\"required\":[\"opId\",\"state\",\"members\"]}},\"required\":[\"changeset\"]}",
     false, true, false},
};

json_t *jb_tools_describe(bool exec) {
  json_t *out = json_array();
  for (size_t i = 0; out && i < sizeof tools / sizeof tools[0]; i++) {
    const struct tool_text *t = &tools[i];
    if (!exec && !strcmp(t->name, "exec")) continue;
    json_t *in = json_loads(t->input, 0, NULL), *os = json_loads(t->output, 0, NULL);
    if (!in || !os) { /* a schema above that does not parse is a bug (tests/unit/api) */
      json_decref(in);
      json_decref(os);
      json_decref(out);
      return NULL;
    }
    json_t *tool =
        json_pack("{s:s,s:s,s:s,s:o,s:o,s:{s:s,s:b,s:b,s:b,s:b}}", "name", t->name, "title",
                  t->title, "description", t->desc, "inputSchema", in, "outputSchema", os,
                  "annotations", "title", t->title, "readOnlyHint", t->read_only, "destructiveHint",
                  t->destructive, "idempotentHint", t->idempotent, "openWorldHint", 0);
    if (!tool) {
      json_decref(out);
      return NULL;
    }
    json_array_append_new(out, tool);
  }
  return out;
}
