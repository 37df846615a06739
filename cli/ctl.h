/* ctl.h — the parts of jailboxctl shared between its files: the exit codes, the options every
 * server verb takes, the REST client (libcurl) and the verbs implemented outside the main file
 * (cli/main.c). Each verb takes the arguments after its name and returns the process
 * exit code. */
#ifndef JB_CTL_H
#define JB_CTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Exit codes of every verb. */
enum {
  JB_CTL_OK = 0, /* done */
  JB_CTL_REFUSED = 1, /* the server refused (HTTP 4xx, connect_error), or a check failed */
  JB_CTL_USAGE = 2, /* usage error: unknown verb or option, missing argument */
  JB_CTL_FAILED = 3, /* failure: server unreachable, HTTP 5xx, malformed answer, I/O */
};

/* Where the server is and who we are: JAILBOX_URL / JAILBOX_TOKEN / JAILBOX_WS_URL, overridden
 * by --url / --token / --ws-url; --json asks for machine output. Strings are borrowed from the
 * environment or argv. */
struct jb_ctl {
  const char *verb; /* for messages: "jailboxctl approve" */
  const char *url; /* REST base, default http://127.0.0.1:8080 */
  const char *token; /* bearer token (service or buyer; agent for mcp-bridge) */
  const char *ws_url; /* Socket.IO base; NULL: the host of `url`, port + 1 (the defaults' pair) */
  bool json;
  long quiet_status; /* an HTTP status the caller reports itself (jb_ctl_http prints nothing) */
};

/* One HTTP answer: status and body (NUL-terminated; free it). */
struct jb_ctl_reply {
  long status;
  char *body;
  size_t len;
};

/* Sends `method` `url`+`path` with the bearer token (when set) and `body` (borrowed; NULL: no
 * body) as JSON; the answer, at most 64 MiB, goes to *r. Returns JB_CTL_OK for 2xx,
 * JB_CTL_REFUSED for 4xx (the server's {error:{code,message}} printed to stderr), JB_CTL_FAILED
 * when the server cannot be reached, answers 5xx or more than the limit (printed). *r is
 * filled whenever the server answered; release it with jb_ctl_reply_free. */
int jb_ctl_http(const struct jb_ctl *o, const char *method, const char *path, const json_t *body,
                struct jb_ctl_reply *r);
void jb_ctl_reply_free(struct jb_ctl_reply *r);

/* GET `path` with the bearer token; a 2xx body is written to `out` as it arrives (no size
 * limit: an audit export), an error answer is reported as jb_ctl_http does. Returns the
 * exit code (JB_CTL_FAILED also when `out` cannot be written). */
int jb_ctl_http_stream(const struct jb_ctl *o, const char *path, FILE *out);

/* Prints `v` (borrowed) as one line of compact JSON. JB_CTL_OK, or JB_CTL_FAILED (out of
 * memory, stdout failed). */
int jb_ctl_print_json(const json_t *v);

/* Parses the body of `r` as a JSON object (duplicate keys and nesting deeper than 64 refused).
 * New reference, or NULL with a message printed. */
json_t *jb_ctl_reply_json(const struct jb_ctl *o, const struct jb_ctl_reply *r);

/* `s` made safe for a terminal: C0 and C1 control characters and DEL (which could move the
 * cursor, retitle the window or hide text: strings from the server may come from the agent),
 * and bidi controls, zero-width marks and the byte order mark (which reorder or hide text)
 * become '?', and more than 512 bytes are cut with "…". A string of a rotating pool of 16
 * (borrowed; valid until 16 more calls; not thread-safe). NULL gives "-". */
const char *jb_ctl_text(const char *s);

/* The path of a session resource: /v1/jailbox/<JOB percent-encoded><suffix>. New string
 * (free it) or NULL (out of memory). */
char *jb_ctl_job_path(const char *job, const char *suffix);

/* Percent-encodes `s` for one path segment (RFC 3986 unreserved kept). New string or NULL. */
char *jb_ctl_escape(const char *s);

/* The Socket.IO base URL ("ws://host:port") of `o`, in `buf`. Returns 0, -1 when it cannot be
 * derived (message printed). */
int jb_ctl_ws_base(const struct jb_ctl *o, char *buf, size_t size);

/* rollback JOB [--to OP] [--force] [--dry-run] [--reason R] (cli/rollback.c). */
int jb_ctl_rollback(struct jb_ctl *o, int argc, char **argv);

/* changes JOB --op OP [--diff] (cli/changeset.c): a changeset's files, every page, and with
 * --diff each file's diff text. */
int jb_ctl_changeset_show(struct jb_ctl *o, int argc, char **argv);

/* approve JOB OP --files a,b | --file PATH ... | --except c [--reason R] (cli/changeset.c):
 * fetches the changeset, then approves those files (or every approvable one but those) with
 * its changesetSha256. */
int jb_ctl_changeset_approve(struct jb_ctl *o, int argc, char **argv);

/* Writes the `n` bytes of diff text at `s` to stdout: as they are when stdout is not a
 * terminal (for patch or git apply), else with C0 and C1 control characters and DEL but
 * newline and tab shown as '?' (agent text must not drive the terminal). False when stdout
 * failed. */
bool jb_ctl_write_diff_text(const char *s, size_t n);

/* Runs the verb of argv[1...] (or its --help) unless cli/main.c handles it (the offline
 * verbs: audit verify, keys rotate, token create, tree-hash), setting *rc; returns true then. */
bool jb_ctl_dispatch(int *argc, char **argv, int *rc);

/* token create --role service [--label L] [--database-url URL | --state-dir DIR] */
int jb_ctl_token_create(int argc, char **argv);

/* `jailboxctl keys rotate --key FILE [--grace S] [--database-url URL | --state-dir DIR]`
 * (cli/keys.c): generates FILE when it does not exist, then makes its key the active audit
 * signing key and retires the others S seconds later (default 60), in one transaction. */
int jb_ctl_keys_rotate(int argc, char **argv);

/* `jailboxctl tree-hash DIR [--json]` (cli/treehash.c): prints the tree hash v1 of DIR
 * (lib/treehash.h; JAILBOX_TREE_HASH_MAX_BYTES bounds the content read), or "null WHY" when
 * it is not computed. Returns JB_CTL_OK with a digest, JB_CTL_REFUSED without one,
 * JB_CTL_USAGE, or JB_CTL_FAILED when DIR cannot be opened or walked. */
int jb_ctl_tree_hash(int argc, char **argv);

/* watch JOB [--poll] [--interval MS] [--until-end] [--decide]: live events, and with --decide
 * the buyer's decisions read from stdin (cli/watch.c) */
int jb_ctl_watch(struct jb_ctl *o, int argc, char **argv);

/* Checks one line an MCP client sent on stdin (MCP stdio transport: one JSON-RPC 2.0 message
 * per line; `n` bytes, no newline): strict JSON (duplicate keys and nesting deeper than 32
 * refused), one object (batches refused, as MCP 2025-06-18 removed them), jsonrpc "2.0", an
 * id that is a string or an integer. Returns 1 with *msg (new reference) for a request or a
 * notification to relay; 0 for nothing to do (a blank line, or a response: jailbox sends no
 * requests); -1 for a refusal: *code the JSON-RPC error code (-32700 or -32600), `why` the
 * message and *id (new reference or NULL) the id to answer. */
int jb_mcp_stdio_check(const char *line, size_t n, json_t **msg, json_t **id, int *code, char *why,
                       size_t why_size);

/* mcp-bridge --job JOB: MCP stdio server relaying to the session (cli/bridge.c) */
int jb_ctl_bridge(struct jb_ctl *o, int argc, char **argv);

#endif
