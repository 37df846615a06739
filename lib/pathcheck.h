/* pathcheck.h — the syntactic rules of a workspace path, shared by jailboxd (first
 * check, before an op is stored or relayed) and jailbox-shim (second check, before the open).
 * The open-time rules — no symlink escapes, no hard links, no special files — are the shim's
 * (sandbox/shim/fileops.c); these only look at the bytes. */
#ifndef JB_SANDBOX_PATHCHECK_H
#define JB_SANDBOX_PATHCHECK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define JB_PATH_MAX 4096 /* bytes of a whole path, without a terminating NUL */
#define JB_PATH_NAME_MAX 255 /* bytes of one component */

/* Why a path was refused. */
enum jb_path_verdict {
  JB_PATH_OK = 0,
  JB_PATH_EMPTY, /* no bytes */
  JB_PATH_NUL, /* a NUL byte inside */
  JB_PATH_ABSOLUTE, /* begins with '/' */
  JB_PATH_TOO_LONG, /* over JB_PATH_MAX bytes */
  JB_PATH_NAME_TOO_LONG, /* a component over JB_PATH_NAME_MAX bytes */
  JB_PATH_EMPTY_NAME, /* "a//b", a trailing '/' */
  JB_PATH_DOT, /* a "." component (only the whole path "." is allowed, as the root) */
  JB_PATH_DOTDOT, /* a ".." component */
};

/* Checks `len` bytes at `path` (not necessarily NUL-terminated) against the rules: relative to
 * the workspace root; no NUL; no empty, "." or ".." component; at most JB_PATH_MAX bytes and
 * JB_PATH_NAME_MAX per component. The whole path "." names the root itself when `allow_root`
 * is non-zero (list). Nothing is decoded: backslashes, '%' and any other Unicode are ordinary
 * bytes. Returns JB_PATH_OK or the first rule broken. */
enum jb_path_verdict jb_path_check(const char *path, size_t len, int allow_root);

/* A short English reason for a verdict ("absolute paths are refused", …); static storage. */
const char *jb_path_verdict_text(enum jb_path_verdict v);

/* Whether workspace path `path` is excluded by a glob of `globs` (JSON array of strings,
 * borrowed; NULL or empty: nothing is). A glob is matched component by component, as
 * .gitignore patterns are: each component with fnmatch(3) FNM_CASEFOLD (a leading dot is not
 * special; case is ignored, since a case-insensitive workspace file system opens "SECRETS"
 * for "secrets"), "**" standing for any number of directories (none included: "** /x" — without the
 * space — hides "x" and "a/b/x"); it hides the path and everything below it (excluding
 * "secrets" or ".git" hides their contents); a glob without '/' is tried on every component's
 * name ("*.pem" hides "sub/key.pem"). Out of memory counts as excluded. Used by jailboxd on
 * the requested path and by the shim on the symlink-free path it resolved (so that a symlink
 * cannot lead around an exclusion). *which (may be NULL) receives the matching glob (borrowed
 * from `globs`). */
bool jb_path_excluded(const char *path, const json_t *globs, const char **which);

#define JB_GLOB_CASEFOLD 1u /* jb_path_glob_match: case is ignored */
#define JB_GLOB_BELOW 2u /* jb_path_glob_match: the glob also names everything below a match */

/* Whether workspace path `path` matches the one glob `glob` by the components of
 * jb_path_excluded (a glob without '/' tried on every component's name, "**" any number of
 * directories, fnmatch(3) per component, a backslash making the next character literal), with
 * `flags`: JB_GLOB_CASEFOLD ignores case, JB_GLOB_BELOW lets the glob name everything below
 * what it matches (jb_path_excluded is both). Without them a glob matches the path exactly,
 * case included — what an approval rule that allows needs (lib/policy.h). 1 it matches, 0
 * not (an empty glob or a glob of only '/' matches nothing), -1 out of memory. */
int jb_path_glob_match(const char *path, const char *glob, unsigned flags);

/* The two halves of jb_path_glob_match, for a caller that splits a glob once and matches it
 * many times without allocating (lib/policy.c's compiled rules). jb_glob_split cuts the
 * NUL-terminated `s` in place ('/' become NUL) into its non-empty components, pointers into `s`
 * stored from v[0]; `lead` puts "**" first (a glob without '/'), `trail` puts "**" last (the
 * glob names what is below a match). `v` needs room for strlen(s) / 2 + 3 pointers. Returns
 * how many were stored. */
size_t jb_glob_split(char *s, const char **v, bool lead, bool trail);

/* Whether glob components g[0..ng) (jb_glob_split) match path components p[0..np) entirely,
 * as jb_path_glob_match does ("**" any number of components, fnmatch(3) for each other one,
 * case ignored with `casefold`). No glob component (ng 0) matches nothing. No allocation. */
bool jb_glob_components_match(const char *const *g, size_t ng, const char *const *p, size_t np,
                              bool casefold);

/* Checks that every component of the glob `glob` (NUL-terminated, '/' between components) can
 * match a workspace path component as jb_path_glob_match reads it: no "." or ".." component
 * (workspace paths have none, so such a glob could never match), no component ending in a
 * backslash (it would make nothing literal), and every '[' that is not escaped closed by a ']'
 * in its component (fnmatch(3), POSIX.1-2017 2.13.1: an unclosed '[' would silently stand for
 * itself). Returns 0, or -1 with what is wrong in `msg` (`msize` bytes, always terminated). */
int jb_glob_check(const char *glob, char *msg, size_t msize);

#endif
