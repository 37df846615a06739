/* scan.h — the content scanner: a rule set read from a rules file (deploy/scan-rules, embedded
 * at build time; JAILBOX_SCAN_RULES names another one), matched with PCRE2
 * (https://www.pcre.org/current/doc/html/pcre2api.html) against the writes jailboxd is asked
 * for (here) and against the output of commands the worker runs (lib/redact.h: `secret` and
 * `redact` rules). The grammar of the file is described at its top. Paths are checked with lib/pathcheck.h first; exclusion globs are
 * there too (jb_path_excluded). */
#ifndef JB_LIB_SCAN_H
#define JB_LIB_SCAN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/pathcheck.h" /* jb_path_excluded */
#include "lib/err.h"

#define JB_SCAN_RULES_FILE_MAX (1024 * 1024) /* bytes of a rules file at most */
#define JB_SCAN_LINE_MAX 4096 /* bytes of one line at most */
#define JB_SCAN_ID_MAX 64 /* bytes of a rule id at most */
#define JB_SCAN_MATCH_LIMIT 5000000 /* pcre2_set_match_limit of every match */
#define JB_SCAN_DEPTH_LIMIT 10000 /* pcre2_set_depth_limit (interpreter only) */
#define JB_SCAN_HEAP_LIMIT_KIB 20480 /* pcre2_set_heap_limit, KiB */

enum jb_scan_check {
  JB_SCAN_CONTENT, /* a PCRE2 pattern over the content (and the content without NUL bytes) */
  JB_SCAN_PATH, /* a PCRE2 pattern over the workspace-relative path */
  JB_SCAN_BINARY, /* builtin:binary — a NUL byte in content longer than a threshold */
  JB_SCAN_SECRET, /* a content pattern whose matches are also redacted from command output */
  JB_SCAN_REDACT, /* a pattern whose matches are redacted from command output; no write check */
};

struct jb_scan_rules; /* a parsed, compiled rule set; immutable, shared by threads */

/* Parses and compiles the rules in `text` (`len` bytes; NUL bytes are refused). `origin`
 * names the text in messages ("deploy/scan-rules", a file path). Returns 0 with *out (new,
 * free with jb_scan_rules_free), or -1 with err->msg "ORIGIN:LINE: what is wrong" (ORIGIN:
 * for a fault of the whole text: too large, no rules). Faults: an id that is not
 * [a-z][a-z0-9_]* of at most 64 bytes or repeats, an unknown severity or check, a missing
 * argument, a pattern PCRE2 refuses (its message and offset), a threshold that is no whole
 * number in 0..2^30, text after a threshold, a line over 4096 bytes. */
int jb_scan_rules_parse(const char *text, size_t len, const char *origin,
                        struct jb_scan_rules **out, jb_error *err);

/* Reads and parses the rules file `path` (at most 1 MiB, opened O_CLOEXEC); NULL or "" parses
 * the embedded deploy/scan-rules instead. As jb_scan_rules_parse, with messages naming `path`
 * (or "embedded deploy/scan-rules"). */
int jb_scan_rules_load(const char *path, struct jb_scan_rules **out, jb_error *err);

void jb_scan_rules_free(struct jb_scan_rules *r);

/* The number of rules, and rule i's id (borrowed), check and severity (borrowed); for i past
 * the last rule: NULL, JB_SCAN_CONTENT, NULL. */
size_t jb_scan_rules_count(const struct jb_scan_rules *r);
const char *jb_scan_rule_id(const struct jb_scan_rules *r, size_t i);
enum jb_scan_check jb_scan_rule_check(const struct jb_scan_rules *r, size_t i);
const char *jb_scan_rule_severity(const struct jb_scan_rules *r, size_t i);

/* Scans a proposed write (with the rules of every check but `redact`) of `len` bytes at `data` to `path` (NUL-terminated) with `r`.
 * Returns a new JSON array of findings, one per rule that matched, in rule order:
 * {"rule": id, "severity": s} — empty when the write is clean. A pattern that stops at
 * PCRE2's match, depth or heap limit, or fails otherwise, counts as matched (fail closed)
 * and its finding carries "error": "match limit" (or PCRE2's message). NULL on allocation
 * failure (callers treat that as flagged). Thread-safe. */
json_t *jb_scan_run(const struct jb_scan_rules *r, const char *path, const unsigned char *data,
                    size_t len);

/* Makes `r` (owned from now on) the rule set jb_scan_content uses; call before threads that
 * scan start. Without a call, jb_scan_content uses the embedded rules. */
void jb_scan_use(struct jb_scan_rules *r);

/* The rule set of jb_scan_use, else the embedded rules (parsed on first use); borrowed, valid
 * for the process's life. NULL when even the embedded rules cannot be had. Thread-safe. */
const struct jb_scan_rules *jb_scan_rules_in_use(void);

/* jb_scan_run with the rule set of jb_scan_use (or the embedded rules, parsed on first use).
 * If even the embedded rules cannot be had, every write is flagged by "scanner_unavailable". */
json_t *jb_scan_content(const char *path, const unsigned char *data, size_t len);

/* The landing check: whether an entry that lands at the workspace-relative `path` (NUL-
 * terminated; a write, an edit, either end of a move, a mkdir, a mode change, or an entry a
 * writable command added, changed, renamed or re-moded) is one a tool on the buyer's host runs
 * or reads for what to run — the rules of check `path` in `r`. A directory (`is_dir`) is also
 * matched as "PATH/", so that `.git/hooks` itself counts as well as the entries under it.
 * A path holding a character a Unicode case-folding file system takes for ASCII letters
 * (U+017F, U+212A, the Latin ligatures U+FB00..U+FB06) or one HFS+ ignores in names (zero-width
 * and direction marks, U+FEFF) is also matched with those letters in its place (or without it).
 * Returns 0 when no path rule matches; 1 when one does, with its id in `rule` (`rsize` bytes,
 * cut to fit); 1 as well when a match fails or `r` is NULL (fail closed: rule
 * "scanner_unavailable"). Thread-safe; allocates nothing that outlives the call. */
int jb_scan_landing(const struct jb_scan_rules *r, const char *path, bool is_dir, char *rule,
                    size_t rsize);

/* `path` as a Unicode case-folding or HFS+ file system may take it (the letters and dropped
 * code points jb_scan_landing names): a new string (free it), or NULL when nothing in it
 * folds — or out of memory, then *oom is set. */
char *jb_scan_path_folded(const char *path, bool *oom);

/* jb_scan_landing with the rule set in use (jb_scan_rules_in_use). */
int jb_scan_landing_in_use(const char *path, bool is_dir, char *rule, size_t rsize);

/* The ids of the `secret` rules of `r` that match `len` bytes at `data` (also with NUL bytes
 * removed, as jb_scan_run): for the pre-scan's list of files that look like secrets. Returns
 * the number of ids written to `ids` (at most `max`, in rule order; each borrowed from `r`),
 * or -1 when a match failed (callers treat the file as a secret: fail closed). Allocates
 * only for content holding NUL bytes. Thread-safe. */
int jb_scan_secrets(const struct jb_scan_rules *r, const unsigned char *data, size_t len,
                    const char **ids, int max);

/* The rule ids of a findings array (new array of strings), NULL on allocation failure. */
json_t *jb_scan_rule_ids(const json_t *findings);

/* The embedded deploy/scan-rules (generated at build time; NUL-terminated). */
extern const unsigned char jb_scan_rules_default[];
extern const size_t jb_scan_rules_default_len;

#endif
