/* scan.c — exclusion globs and the content scanner of writes (see scan.h). */
#define _GNU_SOURCE
#include "api/scan.h"

#include <pthread.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

struct rule {
  const char *id, *pattern;
  regex_t re;
};

static struct rule rules[] = {
    {"private_key", "BEGIN[[:space:]]+([A-Z0-9]+[[:space:]]+)*PRIVATE[[:space:]]+KEY", {0}},
    {"aws_access_key_id", "(^|[^A-Z0-9])(AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}([^A-Z0-9]|$)", {0}},
    {"github_token", "(gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{50,})", {0}},
    {"slack_token", "xox[abprs]-[A-Za-z0-9-]{10,}", {0}},
    {"gitlab_token", "glpat-[A-Za-z0-9_-]{20}", {0}},
    {"google_api_key", "AIza[0-9A-Za-z_-]{35}", {0}},
    {"download_and_execute",
     "(curl|wget)[^|\n]*\\|[[:space:]]*(sudo([[:space:]]+-[A-Za-z]+)*[[:space:]]+)?"
     "([/a-z]*/)?((ba|da|z|k)?sh|python[0-9.]*|perl|ruby|node)([[:space:]]|$)", {0}},
    {"download_and_execute", "(ba|da|z|k)?sh[[:space:]]+(-c[[:space:]]+\"?\\$\\(|<\\()[[:space:]]*(curl|wget)", {0}},
};
#define N_RULES (sizeof rules / sizeof rules[0])
static pthread_once_t rules_once = PTHREAD_ONCE_INIT;
static bool rules_ok;

static void compile_rules(void) {
  rules_ok = true;
  for (size_t i = 0; i < N_RULES; i++)
    if (regcomp(&rules[i].re, rules[i].pattern, REG_EXTENDED | REG_NOSUB) != 0) rules_ok = false;
}

#define BINARY_THRESHOLD 8192

json_t *jb_scan_content(const char *path, const unsigned char *data, size_t len) {
  pthread_once(&rules_once, compile_rules);
  json_t *hits = json_array();
  if (!hits) return NULL;
  if (!rules_ok) { /* fail closed: an unusable rule set flags everything */
    json_array_append_new(hits, json_string("scanner_unavailable"));
    return hits;
  }
  /* where a write runs later without anybody reading it: git hooks (also of submodules),
   * CI definitions, shell start-up files */
  bool in_git = strncmp(path, ".git/", 5) == 0 || strstr(path, "/.git/");
  if (in_git && (strncmp(path, ".git/hooks/", 11) == 0 || strstr(path, "/hooks/")))
    json_array_append_new(hits, json_string("git_hooks"));
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (strncmp(path, ".github/workflows/", 18) == 0 || strstr(path, "/.github/workflows/") ||
      strcmp(base, ".gitlab-ci.yml") == 0 || strncmp(path, ".circleci/", 10) == 0 ||
      strcmp(base, "Jenkinsfile") == 0)
    json_array_append_new(hits, json_string("ci_definition"));
  static const char *const startup[] = {".bashrc", ".bash_profile", ".bash_login", ".bash_logout",
                                        ".profile", ".zshrc", ".zprofile", ".zshenv", ".zlogin",
                                        ".kshrc", ".cshrc", ".tcshrc", NULL};
  for (size_t i = 0; startup[i]; i++)
    if (strcmp(base, startup[i]) == 0) json_array_append_new(hits, json_string("shell_startup"));
  char *text = malloc(len + 1);
  if (!text) {
    json_decref(hits);
    return NULL;
  }
  bool has_nul = false;
  for (size_t i = 0; i < len; i++) {
    text[i] = data[i] ? (char)data[i] : ' ';
    if (!data[i]) has_nul = true;
  }
  text[len] = '\0';
  if (has_nul && len > BINARY_THRESHOLD) json_array_append_new(hits, json_string("binary_content"));
  /* also with NUL bytes dropped, so that UTF-16 text of ASCII characters is read as such */
  char *squeezed = has_nul ? malloc(len + 1) : NULL;
  if (squeezed) {
    size_t k = 0;
    for (size_t i = 0; i < len; i++)
      if (data[i]) squeezed[k++] = (char)data[i];
    squeezed[k] = '\0';
  }
  for (size_t i = 0; i < N_RULES; i++) {
    bool hit = regexec(&rules[i].re, text, 0, NULL, 0) == 0 ||
               (squeezed && regexec(&rules[i].re, squeezed, 0, NULL, 0) == 0);
    bool dup = false;
    for (size_t k = 0; k < json_array_size(hits); k++)
      dup |= strcmp(json_string_value(json_array_get(hits, k)), rules[i].id) == 0;
    if (hit && !dup) json_array_append_new(hits, json_string(rules[i].id));
  }
  free(squeezed);
  free(text);
  return hits;
}
