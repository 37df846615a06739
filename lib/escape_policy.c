/* escape_policy.c — signal kinds and their configured policy (see escape_policy.h). */
#include "lib/escape_policy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[JB_SIG_COUNT] = {
    [JB_SIG_PATH_TRAVERSAL] = "path_traversal", [JB_SIG_ABSOLUTE_PATH] = "absolute_path",
    [JB_SIG_SYMLINK_ESCAPE] = "symlink_escape", [JB_SIG_HARD_LINK] = "hard_link",
    [JB_SIG_SECCOMP_KILL] = "seccomp_kill",     [JB_SIG_SHIM_EXIT] = "shim_exit",
    [JB_SIG_SANDBOX_DIED] = "sandbox_died",     [JB_SIG_PROTOCOL_VIOLATION] = "protocol_violation",
    [JB_SIG_EXCLUDED_PATH] = "excluded_path",   [JB_SIG_DENIED_PATH] = "denied_path",
};

const char *jb_signal_name(enum jb_signal s) {
  return (int)s >= 0 && s < JB_SIG_COUNT ? names[s] : "unknown";
}

int jb_signal_from_name(const char *name) {
  for (int i = 0; i < JB_SIG_COUNT; i++)
    if (strcmp(names[i], name) == 0) return i;
  return -1;
}

/* Calls fn(item, len) for each item of `list` separated by commas or blanks. */
static int each_item(const char *list, int (*fn)(void *, const char *, size_t, jb_error *),
                     void *ctx, jb_error *err) {
  const char *p = list;
  while (*p) {
    p += strspn(p, ", \t");
    size_t n = strcspn(p, ", \t");
    if (n == 0) break;
    if (fn(ctx, p, n, err) < 0) return -1;
    p += n;
  }
  return 0;
}

static int kind_of(const char *s, size_t n, jb_error *err, const char *setting) {
  char name[40];
  if (n >= sizeof name)
    return jb_fail(err, EINVAL, "%s: unknown signal kind '%.*s'", setting, (int)n, s);
  memcpy(name, s, n);
  name[n] = '\0';
  int k = jb_signal_from_name(name);
  if (k < 0) return jb_fail(err, EINVAL, "%s: unknown signal kind '%s'", setting, name);
  return k;
}

static int take_abort(void *ctx, const char *s, size_t n, jb_error *err) {
  struct jb_escape_policy *p = ctx;
  if (n == 4 && memcmp(s, "none", 4) == 0) return 0;
  int k = kind_of(s, n, err, "JAILBOX_ESCAPE_ABORT");
  if (k < 0) return -1;
  p->abort[k] = true;
  return 0;
}

static int take_after(void *ctx, const char *s, size_t n, jb_error *err) {
  struct jb_escape_policy *p = ctx;
  const char *colon = memchr(s, ':', n);
  if (!colon) return jb_fail(err, EINVAL, "JAILBOX_ALERT_AFTER: '%.*s' is not kind:N", (int)n, s);
  int k = kind_of(s, (size_t)(colon - s), err, "JAILBOX_ALERT_AFTER");
  if (k < 0) return -1;
  char num[24];
  size_t nl = n - (size_t)(colon - s) - 1;
  if (nl == 0 || nl >= sizeof num)
    return jb_fail(err, EINVAL, "JAILBOX_ALERT_AFTER: bad count in '%.*s'", (int)n, s);
  memcpy(num, colon + 1, nl);
  num[nl] = '\0';
  char *end;
  errno = 0;
  long v = strtol(num, &end, 10);
  if (errno || *end || v < 1 || v > 1000000)
    return jb_fail(err, EINVAL, "JAILBOX_ALERT_AFTER: count '%s' of %s is not in 1..1000000", num,
                   names[k]);
  p->alert_after[k] = v;
  return 0;
}

int jb_escape_policy_parse(struct jb_escape_policy *p, const char *abort_list,
                           const char *alert_after, long penalty, jb_error *err) {
  memset(p, 0, sizeof *p);
  if (penalty < 0 || penalty > 1000)
    return jb_fail(err, EINVAL, "JAILBOX_TRUST_PENALTY: %ld is not in 0..1000", penalty);
  p->trust_penalty = penalty;
  if (each_item(abort_list ? abort_list : "", take_abort, p, err) < 0) return -1;
  if (each_item(alert_after ? alert_after : "", take_after, p, err) < 0) return -1;
  for (int k = 0; k < JB_SIG_ESCAPE_COUNT; k++)
    if (!p->abort[k] && p->alert_after[k] == 0) p->alert_after[k] = 1;
  return 0;
}
