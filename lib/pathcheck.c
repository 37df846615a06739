/* pathcheck.c — the syntactic rules of a workspace path (see pathcheck.h). */
#define _GNU_SOURCE /* FNM_CASEFOLD */
#include "lib/pathcheck.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum jb_path_verdict jb_path_check(const char *path, size_t len, int allow_root) {
  if (!path || len == 0) return JB_PATH_EMPTY;
  if (memchr(path, '\0', len)) return JB_PATH_NUL;
  if (path[0] == '/') return JB_PATH_ABSOLUTE;
  if (len > JB_PATH_MAX) return JB_PATH_TOO_LONG;
  if (len == 1 && path[0] == '.' && allow_root) return JB_PATH_OK;
  size_t start = 0;
  for (size_t i = 0; i <= len; i++) {
    if (i < len && path[i] != '/') continue;
    size_t n = i - start;
    if (n == 0) return JB_PATH_EMPTY_NAME;
    if (n > JB_PATH_NAME_MAX) return JB_PATH_NAME_TOO_LONG;
    if (n == 1 && path[start] == '.') return JB_PATH_DOT;
    if (n == 2 && path[start] == '.' && path[start + 1] == '.') return JB_PATH_DOTDOT;
    start = i + 1;
  }
  return JB_PATH_OK;
}

const char *jb_path_verdict_text(enum jb_path_verdict v) {
  switch (v) {
    case JB_PATH_OK:
      return "ok";
    case JB_PATH_EMPTY:
      return "the path is empty";
    case JB_PATH_NUL:
      return "the path contains a NUL byte";
    case JB_PATH_ABSOLUTE:
      return "absolute paths are refused: paths are relative to the workspace root";
    case JB_PATH_TOO_LONG:
      return "the path is over 4096 bytes";
    case JB_PATH_NAME_TOO_LONG:
      return "a path component is over 255 bytes";
    case JB_PATH_EMPTY_NAME:
      return "the path has an empty component";
    case JB_PATH_DOT:
      return "'.' components are refused";
    case JB_PATH_DOTDOT:
      return "'..' components are refused";
  }
  return "invalid path";
}

/* Splits the NUL-terminated `s` (modified: '/' become NUL) into its non-empty components:
 * pointers into `s` from v[*n]; `v` has room for `cap`. With `lead` and `trail`, "**" is put
 * before and after them. */
static void split_components(char *s, const char **v, size_t *n, bool lead, bool trail) {
  static const char any[] = "**";
  *n = 0;
  if (lead) v[(*n)++] = any;
  for (char *c = s;;) {
    char *e = strchr(c, '/');
    if (e) *e = '\0';
    if (*c) v[(*n)++] = c;
    if (!e) break;
    c = e + 1;
  }
  if (trail) v[(*n)++] = any;
}

/* Whether the glob components g[0..ng) match the path components p[0..np) entirely: "**"
 * matches any number of components (none included), any other component matches exactly one
 * by fnmatch(3) FNM_CASEFOLD (a leading dot is not special; case is ignored, as a
 * case-insensitive workspace file system — vfat, exFAT, ext4 casefold — would open
 * "SECRETS/KEY" for "secrets/key"). The greedy two-pointer match
 * with backtracking to the last "**" (each other glob component takes exactly one path
 * component, so this is exact): at most ng * np fnmatch calls. */
static bool components_match(const char *const *g, size_t ng, const char *const *p, size_t np,
                             int fnflags) {
  size_t gi = 0, pi = 0, star = (size_t)-1, mark = 0;
  while (pi < np) {
    if (gi < ng && !strcmp(g[gi], "**")) {
      star = gi++;
      mark = pi;
    } else if (gi < ng && fnmatch(g[gi], p[pi], fnflags) == 0) {
      gi++;
      pi++;
    } else if (star != (size_t)-1) {
      gi = star + 1;
      pi = ++mark;
    } else {
      return false;
    }
  }
  while (gi < ng && !strcmp(g[gi], "**")) gi++;
  return gi == ng;
}

bool jb_path_excluded(const char *path, const json_t *globs, const char **which) {
  size_t i;
  json_t *g;
  if (json_array_size(globs) == 0) return false;
  size_t len = strlen(path);
  char *pbuf = strdup(path);
  const char **pv = malloc((len / 2 + 2) * sizeof *pv);
  char *gbuf = NULL;
  const char **gv = NULL;
  bool hit = false;
  if (!pbuf || !pv) {
    hit = true; /* fail closed */
    goto out;
  }
  size_t np;
  split_components(pbuf, pv, &np, false, false);
  json_array_foreach (globs, i, g) {
    const char *glob = json_string_value(g);
    if (!glob || !glob[0]) continue;
    /* Excluding errs on the side of hiding, as .gitignore matches: a leading dot is not
     * special ("secrets/ *" without the space hides "secrets/.env"); a glob names the path
     * and everything below it (as if it ended in "/ **"); "**" stands for any number of
     * directories, none included ("** /.env" hides ".env" and "a/b/.env"); and a glob without
     * '/' is tried on every component's name ("*.pem" hides "sub/key.pem"); and case is
     * ignored ("secrets" hides "Secrets", which a case-insensitive file system opens). */
    size_t gl = strlen(glob);
    free(gbuf);
    free(gv);
    gbuf = strdup(glob);
    gv = malloc((gl / 2 + 4) * sizeof *gv);
    if (!gbuf || !gv) {
      hit = true;
      break;
    }
    size_t ng;
    split_components(gbuf, gv, &ng, strchr(glob, '/') == NULL, true);
    if (ng <= 1) continue; /* only '/': names nothing */
    if (components_match(gv, ng, pv, np, FNM_CASEFOLD)) hit = true;
    if (hit) {
      if (which) *which = glob;
      break;
    }
  }
out:
  free(pbuf);
  free(pv);
  free(gbuf);
  free(gv);
  return hit;
}

int jb_path_glob_match(const char *path, const char *glob, unsigned flags) {
  if (!path || !glob || !glob[0]) return 0;
  size_t len = strlen(path), gl = strlen(glob);
  char *pbuf = strdup(path), *gbuf = strdup(glob);
  const char **pv = malloc((len / 2 + 2) * sizeof *pv);
  const char **gv = malloc((gl / 2 + 4) * sizeof *gv);
  int rc = -1;
  if (pbuf && gbuf && pv && gv) {
    size_t np, ng;
    split_components(pbuf, pv, &np, false, false);
    split_components(gbuf, gv, &ng, strchr(glob, '/') == NULL, (flags & JB_GLOB_BELOW) != 0);
    rc = ng > 0 && components_match(gv, ng, pv, np, (flags & JB_GLOB_CASEFOLD) ? FNM_CASEFOLD : 0);
  }
  free(pbuf);
  free(gbuf);
  free(pv);
  free(gv);
  return rc;
}

size_t jb_glob_split(char *s, const char **v, bool lead, bool trail) {
  size_t n;
  split_components(s, v, &n, lead, trail);
  return n;
}

bool jb_glob_components_match(const char *const *g, size_t ng, const char *const *p, size_t np,
                              bool casefold) {
  return ng > 0 && components_match(g, ng, p, np, casefold ? FNM_CASEFOLD : 0);
}

/* The end of the bracket expression that opens at `s` ('['), as fnmatch(3) reads one: an
 * optional '!' or '^', a ']' right after that is a member, "[:class:]" (and "[.x.]",
 * "[=x=]") are members. NULL when the component ends first (fnmatch would then read the '['
 * as itself). */
static const char *bracket_end(const char *s) {
  const char *c = s + 1;
  if (*c == '!' || *c == '^') c++;
  if (*c == ']') c++;
  for (; *c && *c != '/'; c++) {
    if (*c == ']') return c;
    if (*c == '[' && (c[1] == ':' || c[1] == '.' || c[1] == '=')) {
      char close[3] = {c[1], ']', '\0'};
      const char *e = strstr(c + 2, close);
      const char *slash = strchr(c + 2, '/');
      if (!e || (slash && slash < e)) return NULL;
      c = e + 1;
    } else if (*c == '\\' && c[1] && c[1] != '/') {
      c++;
    }
  }
  return NULL;
}

int jb_glob_check(const char *glob, char *msg, size_t msize) {
  for (const char *c = glob; *c;) {
    size_t n = strcspn(c, "/");
    if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) {
      snprintf(msg, msize,
               "the glob has a \"%.*s\" component, which no workspace path has (paths are "
               "relative to the workspace, without . or ..)",
               (int)n, c);
      return -1;
    }
    for (size_t i = 0; i < n; i++) {
      if (c[i] == '\\') {
        if (i + 1 == n) {
          snprintf(msg, msize,
                   "a backslash ends the component \"%.*s\" of the glob and makes nothing "
                   "literal",
                   (int)n, c);
          return -1;
        }
        i++;
      } else if (c[i] == '[') {
        const char *e = bracket_end(c + i);
        if (!e) {
          snprintf(msg, msize,
                   "the '[' in the component \"%.*s\" of the glob is not closed by ']' (write "
                   "\\[ for a literal bracket)",
                   (int)n, c);
          return -1;
        }
        i = (size_t)(e - c);
      }
    }
    c += n;
    if (*c == '/') c++;
  }
  return 0;
}
