/* image_facts.c — what the image gives a command, looked at once by the spawner at its start
 * in the container's root, whose /usr, /bin and /lib* every jail binds read-only as they are:
 * whether /bin/sh runs for the jail's user, and which of a short list of common programs the
 * jail's PATH finds. The worker decides from it whether exec is offered (sandbox/WALLS.md,
 * "What a command can run"). jb_image_facts is declared in spawner.h. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>

#include "sandbox/shim/spawner.h"

/* The programs a contract names when the image has them: the shell, then what build and test
 * commands reach for first. Not an allowlist: any program of the image may be run. */
static const char *const common_programs[] = {"sh",    "bash",  "env",     "make", "cc",   "gcc",
                                              "clang", "git",   "python3", "perl", "node", "go",
                                              "cargo", "rustc", "java",    NULL};

/* The directories of the jail's PATH a program is looked for in (its sbin ones hold no
 * command of the list). */
static const char *const path_dirs[] = {"/usr/local/bin", "/usr/bin", "/bin", NULL};

/* true when `path` (symbolic links followed, as execve follows them) is a regular file the
 * jail's user (uid 65534, in no group of the file's) may execute. */
static bool runs_for_jail(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & S_IXOTH);
}

json_t *jb_image_facts(void) {
  json_t *found = json_array();
  for (const char *const *p = common_programs; found && *p; p++)
    for (const char *const *d = path_dirs; *d; d++) {
      char path[64];
      snprintf(path, sizeof path, "%s/%s", *d, *p);
      if (runs_for_jail(path)) {
        json_array_append_new(found, json_string(*p));
        break;
      }
    }
  return json_pack("{s:b, s:o*}", "shell", runs_for_jail("/bin/sh"), "programs", found);
}
