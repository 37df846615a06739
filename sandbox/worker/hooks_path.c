/* hooks_path.c — core.hooksPath of the workspace's repository (see hooks_path.h). */
#define _GNU_SOURCE
#include "sandbox/worker/hooks_path.h"

#include <ctype.h>
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

/* Calls fn(section, key, value, ctx) for each variable of git configuration `text` (`len`
 * bytes), in order: section and key lower-cased (the section with "." after it when its
 * header names a subsection: "includeif." for [includeIf "…"]), the value with quotes and
 * escapes undone, a backslash before a newline joining the next line, a CR
 * before a newline dropped, `#`/`;` starting a comment outside quotes (git-config(1) "Syntax").
 * Values over 4095 bytes are passed cut to NULL (the caller treats that as unreadable). */
typedef void (*config_fn)(const char *section, const char *key, const char *value, void *ctx);

static void config_each(const char *text, size_t len, config_fn fn, void *ctx) {
  const char *p = text, *end = text + len;
  char section[64] = "", key[64], value[4096];
  while (p < end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    if (p >= end) break;
    if (*p == '#' || *p == ';') { /* a comment line */
      while (p < end && *p != '\n') p++;
      continue;
    }
    if (*p == '[') { /* [section] or [section "sub"] */
      size_t n = 0;
      for (p++; p < end && *p != ']' && *p != '\n' && *p != ' ' && *p != '\t'; p++)
        if (n + 1 < sizeof section) section[n++] = (char)tolower((unsigned char)*p);
      if (p < end && (*p == ' ' || *p == '\t') && n + 1 < sizeof section)
        section[n++] = '.'; /* a subsection: "core." is not "core" */
      section[n] = '\0';
      while (p < end && *p != ']' && *p != '\n') p++;
      if (p < end && *p == ']') p++;
      continue;
    }
    size_t kn = 0; /* a key: letters, digits, '-' */
    for (; p < end && (isalnum((unsigned char)*p) || *p == '-'); p++)
      if (kn + 1 < sizeof key) key[kn++] = (char)tolower((unsigned char)*p);
    key[kn] = '\0';
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    size_t vn = 0, trail = 0;
    bool quoted = false, fits = true;
    if (p < end && *p == '=') {
      for (p++; p < end && *p != '\n'; p++) {
        char c = *p;
        if (c == '\r' && (p + 1 == end || p[1] == '\n')) continue;
        if (!quoted && (c == '#' || c == ';')) {
          while (p < end && *p != '\n') p++;
          break;
        }
        if (c == '"') {
          quoted = !quoted;
          trail = vn;
          continue;
        }
        if (c == '\\' && p + 1 < end) {
          c = *++p;
          if (c == '\r' && p + 1 < end && p[1] == '\n') c = *++p;
          if (c == '\n') continue; /* a continued line */
          c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'b' ? '\b' : c;
        } else if (!quoted && (c == ' ' || c == '\t')) {
          if (vn == 0) continue; /* leading blanks */
          c = ' '; /* git keeps a blank inside a value as a space */
        }
        if (vn + 1 >= sizeof value) {
          fits = false;
          continue;
        }
        value[vn++] = c;
        if (quoted || !(c == ' ' || c == '\t')) trail = vn;
      }
    } else { /* a key alone (a boolean) or nothing we read: to the line's end */
      while (p < end && *p != '\n') p++;
    }
    value[trail] = '\0';
    if (kn > 0) fn(section, key, fits ? value : NULL, ctx);
  }
}

struct hooks_path_ctx {
  char *out;
  size_t size;
  int found;
};

static void hooks_path_of(const char *section, const char *key, const char *value, void *ctx) {
  struct hooks_path_ctx *h = ctx;
  if (strcmp(section, "core") || strcmp(key, "hookspath")) return;
  if (!value || strlen(value) >= h->size) {
    h->found = -1;
    return;
  }
  snprintf(h->out, h->size, "%s", value);
  h->found = 1;
}

int jb_git_hooks_path(const char *text, size_t len, char *out, size_t size) {
  struct hooks_path_ctx h = {.out = out, .size = size, .found = 0};
  config_each(text, len, hooks_path_of, &h);
  return h.found;
}

/* `v` (relative to the workspace directory `base`, "" for the root, or absolute) as a
 * workspace-relative path into `rel` (`size` bytes) when it names a place inside workspace
 * `root`: true; else false ("~", a ".." above the root, another absolute path). */
static bool inside(const char *root, const char *base, const char *v, char *rel, size_t size) {
  size_t rl = strlen(root), n = 0;
  if (v[0] == '/') {
    if (strncmp(v, root, rl) || v[rl] != '/') return false;
    v += rl + 1;
    base = "";
  } else if (v[0] == '~') {
    return false;
  }
  if (strlen(base) + 1 > size) return false;
  n = (size_t)snprintf(rel, size, "%s", base);
  for (const char *c = v; *c;) { /* components: "." dropped, ".." up (never above), "//" one */
    const char *s = strchr(c, '/');
    size_t cl = s ? (size_t)(s - c) : strlen(c);
    if (cl == 2 && !strncmp(c, "..", 2)) {
      if (n == 0) return false;
      char *up = memrchr(rel, '/', n);
      n = up ? (size_t)(up - rel) : 0;
    } else if (cl > 0 && !(cl == 1 && c[0] == '.')) {
      if (n + cl + 2 > size) return false;
      if (n) rel[n++] = '/';
      memcpy(rel + n, c, cl);
      n += cl;
    }
    rel[n] = '\0';
    c += cl + (s ? 1 : 0);
  }
  return n > 0;
}

struct places_ctx {
  const char *root;
  const char *gitdir; /* REPO/.git */
  struct jb_git_place *out;
  size_t max, n;
};

/* The files a configuration includes (include.path, includeIf.*.path; relative to the
 * configuration's directory, .git/) that lie inside the workspace: what git reads as its
 * config. */
static void include_of(const char *section, const char *key, const char *value, void *ctx) {
  struct places_ctx *c = ctx;
  if (!value || strcmp(key, "path") ||
      (strcmp(section, "include") && strcmp(section, "includeif.")))
    return;
  if (c->n < c->max && inside(c->root, c->gitdir, value, c->out[c->n].t, sizeof c->out[c->n].t)) {
    snprintf(c->out[c->n].as, sizeof c->out[c->n].as, "%s/config", c->gitdir);
    c->n++;
  }
}

size_t jb_git_config_places(const char *root, const char *repo, struct jb_git_place *out,
                            size_t max) {
  char gitdir[4096], cfg[4200];
  snprintf(gitdir, sizeof gitdir, "%s%s.git", repo, repo[0] ? "/" : "");
  snprintf(cfg, sizeof cfg, "%s/config", gitdir);
  int rfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (rfd < 0) return 0;
  struct open_how how = {.flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  int fd = (int)syscall(SYS_openat2, rfd, cfg, &how, sizeof how);
  close(rfd);
  if (fd < 0) return 0;
  char *buf = malloc(CONFIG_MAX);
  ssize_t got = buf ? read(fd, buf, CONFIG_MAX) : -1;
  close(fd);
  struct places_ctx c = {.root = root, .gitdir = gitdir, .out = out, .max = max};
  char v[4096];
  if (got > 0 && c.n < max && jb_git_hooks_path(buf, (size_t)got, v, sizeof v) == 1 &&
      inside(root, repo, v, out[c.n].t, sizeof out[c.n].t)) {
    snprintf(out[c.n].as, sizeof out[c.n].as, "%s/hooks", gitdir);
    c.n++;
  }
  if (got > 0) config_each(buf, (size_t)got, include_of, &c);
  free(buf);
  return c.n;
}

void jb_prescan_hooks_path(const char *root, const json_t *repos, json_t *scan) {
  struct jb_git_place *places = calloc(JB_GIT_PLACES_MAX, sizeof *places);
  json_t *flagged = json_object_get(scan, "flagged");
  size_t n = 0, nr = repos ? json_array_size(repos) : 1;
  for (size_t r = 0; places && r < nr && n < JB_GIT_PLACES_MAX; r++) {
    const char *repo = repos ? json_string_value(json_array_get(repos, r)) : "";
    if (repo) n += jb_git_config_places(root, repo, places + n, JB_GIT_PLACES_MAX - n);
  }
  for (size_t i = 0; i < n && json_is_array(flagged); i++) {
    json_t *f = jb_scan_flag_json(places[i].t, "landing_link");
    if (!f) continue;
    json_object_set_new(f, "link", json_string(places[i].as));
    json_array_append_new(flagged, f);
    json_t *count = json_object_get(scan, "flaggedCount");
    json_object_set_new(scan, "flaggedCount", json_integer(json_integer_value(count) + 1));
  }
  free(places);
}
