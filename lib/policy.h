/* policy.h — approval rules: their grammar, their validation and the first-match decision
 * of an op against an ordered list of them. Pure (no database, no clock of its own): jailboxd
 * decides ops with it (api/core/policy.c), jailboxctl can check a rule before sending it.
 *
 * A rule is a JSON object {id, tool, path?, argvPrefix?, argv?, cwd?, env?, envSha256?,
 * command?, maxBytes?, effect, expiresAt?, uses?, locked?, broad?, writable?}:
 *   id          1..64 bytes of [A-Za-z0-9_.-] (made up when not given: "r-" and 12 hex digits)
 *   tool        the op's tool: write, edit, mkdir, move, delete or exec
 *   path        a glob with the exclusion matcher's .gitignore semantics (lib/pathcheck.h
 *               jb_path_excluded: a glob names a path and everything below it, "**" any number
 *               of directories, a glob without '/' is tried on every component's name, case is
 *               ignored; a backslash makes the next character literal), 1..1024 bytes;
 *               (an allow rule's glob: case counts, and it names what is below a match
 *               only when its last component is a plain name or "**");
 *               a move matches an allow rule when source and destination both do, a deny
 *               or an ask rule when either does;
 *               an exec's path is its working directory
 *   argvPrefix  exec only: 1..64 strings the op's argv must start with (the operator's form:
 *               GNU tools read options anywhere, so "make check" allows "make check --eval=…")
 *   argv        exec only: the op's whole argv, item for item (1..256 strings, 128 KiB); an
 *               allow rule with argv matches an exec with exactly the variables of `env`
 *               and no stdin
 *   cwd         with argv: the op's working directory as the op gave it ("." for none)
 *   env         with argv: the names of the variables the op sets (none when absent)
 *   envSha256   with env: jb_rule_env_sha256 of the op's variables (their values, without
 *               keeping them); a deny or an ask rule with argv looks at argv alone
 *   command     exec only: the op's shell command text, exactly (an allow rule with
 *               argvPrefix or command matches no exec that sets environment variables)
 *   maxBytes    write and edit only: the content the op leaves is at most this many bytes
 *   effect      allow (the op runs without asking), ask (the buyer decides), deny (refused)
 *   expiresAt   RFC 3339 UTC time ("2026-12-03T10:00:00Z") after which the rule decides nothing
 *   uses        1..1000000: the rule decides this many ops, then expires
 *   locked      the operator's rules only: a buyer can neither revoke it nor add one before it
 *   broad       the buyer's consent to an allow rule for delete or exec that matches every op
 *               of its tool (no path, or a path of only "*" and "**" components, and for exec
 *               no argvPrefix nor command)
 *   writable    exec only: an allow rule matches an exec with the workspace writable
 *               (`writable: true` in its arguments) only when it says writable: true; without
 *               it the rule allows read-only commands alone. A deny or an ask rule matches
 *               both kinds whatever it says.
 * Unknown fields are refused. */
#ifndef JB_LIB_POLICY_H
#define JB_LIB_POLICY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define JB_RULES_MAX 256 /* rules of one session (the operator's included) */
#define JB_RULE_GLOB_MAX 1024 /* bytes of a rule's path glob */
#define JB_RULE_ID_MAX 64 /* bytes of a rule's id */
#define JB_RULE_ARGV_MAX 64 /* items of an argvPrefix */
#define JB_RULE_EXACT_ARGV_MAX 256 /* items of an exact argv (an exec's own limit) */
#define JB_RULE_EXACT_ARGV_BYTES (128 * 1024) /* bytes of an exact argv, a NUL each */
#define JB_RULE_ENV_MAX 256 /* names of an exact rule's env (an exec's own limit) */

/* A rule's effect; also the decision of an op. */
enum jb_rule_effect { JB_RULE_ALLOW = 0, JB_RULE_ASK, JB_RULE_DENY };

/* "allow", "ask", "deny" (static). */
const char *jb_rule_effect_name(enum jb_rule_effect e);

/* What a rule is matched against: one op (all borrowed). */
struct jb_rule_op {
  const char *tool; /* write, edit, mkdir, move, delete, exec, … */
  const char *path; /* workspace path (exec: cwd); NULL: none */
  const char *dest; /* move's destination; NULL otherwise */
  const json_t *argv; /* exec's argv (JSON array of strings), NULL for a shell command */
  const char *command; /* exec's shell command text, else NULL */
  long long size; /* bytes a write or edit leaves; -1: not known */
  bool env; /* exec: the op sets environment variables (PATH, LD_PRELOAD, MAKEFLAGS… choose
             * what a program runs, so an allow rule with argvPrefix or command does not match) */
  bool writable; /* exec: the workspace is writable for the command */
  const json_t *env_vars; /* exec: its {NAME: value} object (NULL: none); an exact rule
                           * (argv) matches the names and, with envSha256, the values */
  bool stdin_data; /* exec: the op gives the command input on stdin (which can be a program:
                    * `make -f /dev/stdin`), so no exact allow rule matches it */
};

/* The SHA-256 of an exec's variables `env` ({NAME: value} object, borrowed; NULL: none) as
 * lowercase hex in `hex`: over each NAME, NUL, VALUE, NUL in byte order of the names. What an
 * exact rule keeps of the values the buyer was shown (envSha256). 0, or -1 out of memory. */
int jb_rule_env_sha256(const json_t *env, char hex[65]);

/* Checks rule `in` (borrowed) against the grammar above and returns its normalized copy
 * (new; id made up when missing; expiresAt rewritten as "YYYY-MM-DDTHH:MM:SSZ"), or NULL with
 * a sentence naming the field in `msg`. `operator_rule`: `locked` is allowed (a buyer's rule
 * with locked is refused). `now` (seconds since the epoch) refuses an expiresAt in the past. */
json_t *jb_rule_check(const json_t *in, bool operator_rule, long long now, char *msg, size_t msize);

/* Checks a whole list (JSON array; at most JB_RULES_MAX - `existing` rules, no id twice) as
 * jb_rule_check does each; returns the normalized list (new) or NULL with `msg` prefixed by
 * "rules[i]: ". */
json_t *jb_rules_check(const json_t *list, size_t existing, bool operator_rule, long long now,
                       char *msg, size_t msize);

/* Whether argv prefix `prefix` (JSON array of strings) would let any program run: its first
 * item's base name is a shell or a language interpreter (sh, bash, python3, node, perl…) and
 * every item after it is an option ("-c", "-e"), or a launcher of other programs (env, xargs,
 * sudo, nice, timeout, busybox, npx, uvx, find, parallel…). Such a prefix cannot be an allow
 * rule's argvPrefix. */
bool jb_argv_prefix_is_interpreter(const json_t *prefix);

/* Whether rule `rule` (normalized, borrowed) matches op `op` at time `now` (seconds since the
 * epoch; a rule whose expiresAt is not after `now` matches nothing). `uses` is not looked at
 * (the store counts them). */
bool jb_rule_matches(const json_t *rule, const struct jb_rule_op *op, long long now);

/* The first rule of `rules` (JSON array, borrowed) that matches `op`, or NULL (the mode's
 * default decides). Borrowed from `rules`. Compiles the list for this one decision
 * (jb_rules_compile): a caller that decides many ops on one list compiles it once. */
const json_t *jb_rules_first_match(const json_t *rules, const struct jb_rule_op *op, long long now);

/* A list of normalized rules read once for matching: ids, tools, times and sizes parsed, path
 * globs split into their components, argv prefixes copied. Immutable once made: threads may
 * match against one list at the same time. */
struct jb_rules;

/* Compiles `rules` (JSON array of normalized rules, borrowed; nothing of it is kept): new (free
 * with jb_rules_free), or NULL out of memory. */
struct jb_rules *jb_rules_compile(const json_t *rules);
void jb_rules_free(struct jb_rules *rs); /* NULL: nothing */

/* The index of the first rule of `rs` that matches `op` at `now` (seconds since the epoch), as
 * jb_rule_matches decides each, or -1 (none; the mode's default decides). Allocates nothing:
 * the op's path and destination are split on the stack once, each rule's components are
 * compared with fnmatch(3). */
long jb_rules_match(const struct jb_rules *rs, const struct jb_rule_op *op, long long now);

size_t jb_rules_count(const struct jb_rules *rs);
const char *jb_rules_id(const struct jb_rules *rs, size_t i); /* borrowed from `rs` */
enum jb_rule_effect jb_rules_effect(const struct jb_rules *rs, size_t i);
bool jb_rules_counts_uses(const struct jb_rules *rs, size_t i); /* the rule has `uses` */
/* The earliest expiresAt of the rules of `rs` (seconds since the epoch), LLONG_MAX when none
 * has one: from then on a copy of the list no longer says which rules are live. */
long long jb_rules_next_expiry(const struct jb_rules *rs);

/* The effect of a normalized rule. */
enum jb_rule_effect jb_rule_effect_of(const json_t *rule);

/* The rule "approve and allow similar" makes of approved op `op` for key `key`
 * ("directory", "extension", "command", "session"; new, normalized, effect allow, with an id
 * made up), or NULL with `msg`:
 *   directory  path "D/" "**" for the op's directory D (a file at the workspace root:
 *              refused, use extension or session)
 *   extension  path "D/" "**" "/" "*.EXT" for its directory D and its extension (a file at
 *              the root: "/" "*.EXT", the root's files; no extension: refused)
 *   command    exec only: the exact command approved — argv whole, cwd, env names and
 *              envSha256 of their values; refused for a shell command, for an exec with
 *              stdin, and for a shell, interpreter or launcher whose other items are all
 *              options
 * The op's directory and file name enter the glob as literal text (* ? [ ] \ escaped with a
 * backslash): a directory named "*" gives a rule for that directory, not for every one.
 *   session    every op of that tool in this session (broad)
 * An exec's rule (command, session) made from a writable exec says writable: true. */
json_t *jb_rule_similar(const struct jb_rule_op *op, const char *key, char *msg, size_t msize);

/* The operator's policy file (JAILBOX_POLICY_FILE): one rule a line as a JSON object of the
 * grammar above (`locked` allowed, `uses` not: it counts per session), blank lines and lines
 * whose first non-blank character is '#' ignored; at most JB_RULES_MAX rules, ids unique.
 * `text` is `len` bytes (not necessarily NUL-terminated), `name` the file's name for messages.
 * Returns the normalized rules in file order (new JSON array), or NULL with "NAME:LINE: what
 * is wrong" in `msg`. */
json_t *jb_policy_file_parse(const char *text, size_t len, const char *name, long long now,
                             char *msg, size_t msize);

/* Parses "YYYY-MM-DDTHH:MM:SS[.fff](Z|+00:00)" (RFC 3339, UTC; digits only, a day the month
 * has) into seconds since the epoch: 0, or -1. */
int jb_rule_parse_time(const char *s, long long *out);

#endif
