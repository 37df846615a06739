/* hooks_path.h — where the buyer's git looks for hooks when its configuration says so: the
 * repository's core.hooksPath (git-config(1)), read from the workspace's .git/config by the
 * pre-scan, so that a directory it names inside the workspace is covered as .git/hooks is. */
#ifndef JB_SANDBOX_WORKER_HOOKS_PATH_H
#define JB_SANDBOX_WORKER_HOOKS_PATH_H

#include <jansson.h>
#include <stddef.h>

/* The value of core.hooksPath in the git configuration `text` (`len` bytes; the last one set
 * wins, as git reads it; sections [core] and keys are case-insensitive, a value may be quoted
 * with \" \\ \n \t escapes, a backslash before a newline continues it on the next line, CR LF
 * ends a line as LF does, `#` and `;` start comments; include directives are not followed)
 * into `out` (`size` bytes). 1 when set, 0 when not, -1 when the value does not fit. */
int jb_git_hooks_path(const char *text, size_t len, char *out, size_t size);

/* A place inside the workspace that the repository's configuration makes git's own: the
 * directory core.hooksPath names (`as` ".git/hooks") or a file it includes (`as`
 * ".git/config"), workspace-relative in `t`. */
#define JB_GIT_PLACES_MAX 16 /* places read from one configuration at most */

struct jb_git_place {
  char t[4096];
  char as[4096]; /* REPO/.git/hooks or REPO/.git/config */
};

/* The places the .git/config of the work tree `repo` (workspace-relative, "" for the root)
 * of the workspace `root` (opened beneath `root` without following a link, at most 1 MiB)
 * makes git's own — core.hooksPath, include.path, includeIf.*.path — when they lie inside the
 * workspace (a hooks path relative to the work tree, an include relative to its .git/, or
 * absolute under `root`; never above the root), into `out` (at most `max`). Returns how many;
 * 0 when the file is missing or unreadable. */
size_t jb_git_config_places(const char *root, const char *repo, struct jb_git_place *out,
                            size_t max);

/* Adds to pre-scan `scan` (jb_scan_json's object) a `landing_link` flag for each place (as
 * jb_git_config_places finds them) of the work trees `repos` (a JSON array of workspace-relative
 * paths, "" the root; NULL: the root alone): {path, kind: "landing_link", link:
 * "REPO/.git/hooks" or "REPO/.git/config"} — so that a write, mkdir or move there is a landing on git's hooks or
 * config. The file is opened beneath `root` without following a link (at most
 * 1 MiB); nothing is added when it is missing or unreadable. */
void jb_prescan_hooks_path(const char *root, const json_t *repos, json_t *scan);

#endif
