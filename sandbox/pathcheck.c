/* pathcheck.c — the syntactic rules of a workspace path (see pathcheck.h). */
#include "sandbox/pathcheck.h"

#include <fnmatch.h>
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
  case JB_PATH_OK: return "ok";
  case JB_PATH_EMPTY: return "the path is empty";
  case JB_PATH_NUL: return "the path contains a NUL byte";
  case JB_PATH_ABSOLUTE: return "absolute paths are refused: paths are relative to the workspace root";
  case JB_PATH_TOO_LONG: return "the path is over 4096 bytes";
  case JB_PATH_NAME_TOO_LONG: return "a path component is over 255 bytes";
  case JB_PATH_EMPTY_NAME: return "the path has an empty component";
  case JB_PATH_DOT: return "'.' components are refused";
  case JB_PATH_DOTDOT: return "'..' components are refused";
  }
  return "invalid path";
}

bool jb_path_excluded(const char *path, const json_t *globs, const char **which) {
  size_t i;
  json_t *g;
  size_t len = strlen(path);
  char *prefix = malloc(len + 1);
  if (!prefix) return true; /* fail closed */
  bool hit = false;
  json_array_foreach(globs, i, g) {
    const char *glob = json_string_value(g);
    if (!glob || !glob[0]) continue;
    /* Excluding errs on the side of hiding: a leading dot is not special ("secrets/ *" without the space hides
     * "secrets/.env"), the path and each leading directory are tried ("a/b/c" → "a", "a/b"),
     * and a glob without '/' is tried on every component's name, as .gitignore does
     * ("*.pem" hides "sub/key.pem"). */
    bool basename_glob = strchr(glob, '/') == NULL;
    if (fnmatch(glob, path, FNM_PATHNAME) == 0) hit = true;
    for (size_t k = 0; !hit && k < len; k++) {
      if (path[k] != '/') continue;
      memcpy(prefix, path, k);
      prefix[k] = '\0';
      if (fnmatch(glob, prefix, FNM_PATHNAME) == 0) hit = true;
    }
    for (size_t k = 0, start = 0; !hit && basename_glob && k <= len; k++) {
      if (path[k] != '/' && path[k] != '\0') continue;
      memcpy(prefix, path + start, k - start);
      prefix[k - start] = '\0';
      if (fnmatch(glob, prefix, 0) == 0) hit = true;
      start = k + 1;
    }
    if (hit) {
      if (which) *which = glob;
      break;
    }
  }
  free(prefix);
  return hit;
}
