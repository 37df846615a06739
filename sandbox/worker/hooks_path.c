/* hooks_path.c — core.hooksPath of the workspace's repository (see hooks_path.h). */
#define _GNU_SOURCE
#include "sandbox/worker/hooks_path.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/worker/workspace_scan.h"

#define CONFIG_MAX (1024 * 1024) /* bytes of .git/config read at most */

/* One value (after '=') from `p` to the line's end into `out`: quotes, escapes, comments. */
static int value_of(const char *p, const char *end, char *out, size_t size) {
  size_t n = 0, trail = 0; /* trail: the length before unquoted blanks at the end */
  bool quoted = false;
  for (; p < end && *p != '\n'; p++) {
    char c = *p;
    if (!quoted && (c == '#' || c == ';')) break;
    if (c == '"') {
      quoted = !quoted;
      trail = n;
      continue;
    }
    if (c == '\\' && p + 1 < end) {
      c = *++p;
      c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else if (!quoted && (c == ' ' || c == '\t')) {
      if (n == 0) continue; /* leading blanks */
      if (n + 1 >= size) return -1;
      out[n++] = c;
      continue;
    }
    if (n + 1 >= size) return -1;
    out[n++] = c;
    trail = n;
  }
  out[trail] = '\0';
  return 0;
}

int jb_git_hooks_path(const char *text, size_t len, char *out, size_t size) {
  const char *p = text, *end = text + len;
  bool core = false;
  int found = 0;
  while (p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    while (p < eol && (*p == ' ' || *p == '\t')) p++;
    if (p < eol && *p == '[') { /* [section] or [section "sub"], maybe a key after it */
      const char *close = memchr(p, ']', (size_t)(eol - p));
      if (!close) {
        p = eol + 1;
        continue;
      }
      core = close - p - 1 == 4 && !strncasecmp(p + 1, "core", 4);
      p = close + 1;
      while (p < eol && (*p == ' ' || *p == '\t')) p++;
    }
    if (core && (size_t)(eol - p) >= 9 && !strncasecmp(p, "hookspath", 9)) {
      const char *q = p + 9;
      while (q < eol && (*q == ' ' || *q == '\t')) q++;
      if (q < eol && *q == '=') {
        if (value_of(q + 1, eol, out, size) < 0) return -1;
        found = 1;
      }
    }
    p = eol + 1;
  }
  return found;
}

/* `v` as a workspace-relative path (into `rel`, PATH_MAX bytes) when it names a place inside
 * workspace `root`: true; else false. */
static bool inside(const char *root, const char *v, char *rel, size_t size) {
  size_t rl = strlen(root);
  if (v[0] == '/') {
    if (strncmp(v, root, rl) || v[rl] != '/') return false;
    v += rl + 1;
  } else if (v[0] == '~') {
    return false;
  }
  size_t n = 0;
  for (const char *c = v; *c;) { /* components: "." dropped, ".." refused, "//" folded */
    const char *s = strchr(c, '/');
    size_t cl = s ? (size_t)(s - c) : strlen(c);
    if (cl == 2 && !strncmp(c, "..", 2)) return false;
    if (cl > 0 && !(cl == 1 && c[0] == '.')) {
      if (n + cl + 2 > size) return false;
      if (n) rel[n++] = '/';
      memcpy(rel + n, c, cl);
      n += cl;
    }
    c += cl + (s ? 1 : 0);
  }
  rel[n] = '\0';
  return n > 0;
}

void jb_prescan_hooks_path(const char *root, json_t *scan) {
  int rfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (rfd < 0) return;
  struct open_how how = {.flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  int fd = (int)syscall(SYS_openat2, rfd, ".git/config", &how, sizeof how);
  close(rfd);
  if (fd < 0) return;
  char *buf = malloc(CONFIG_MAX);
  ssize_t got = buf ? read(fd, buf, CONFIG_MAX) : -1;
  close(fd);
  char v[4096], rel[4096];
  if (got > 0 && jb_git_hooks_path(buf, (size_t)got, v, sizeof v) == 1 &&
      inside(root, v, rel, sizeof rel)) {
    json_t *f = jb_scan_flag_json(rel, "landing_link");
    json_t *flagged = json_object_get(scan, "flagged");
    if (f && json_is_array(flagged)) {
      json_object_set_new(f, "link", json_string(".git/config"));
      json_array_append(flagged, f);
      json_t *count = json_object_get(scan, "flaggedCount");
      json_object_set_new(scan, "flaggedCount", json_integer(json_integer_value(count) + 1));
    }
    json_decref(f);
  }
  free(buf);
}
