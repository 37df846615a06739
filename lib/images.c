/* images.c — sandbox image names in canonical form and the allowlist check (see images.h). */
#include "lib/images.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '/' || c == ':' || c == '@' || c == '-';
}

int jb_image_name_canonical(const char *name, char *out, size_t len, jb_error *err) {
  size_t n = strlen(name);
  if (n == 0) return jb_fail(err, EINVAL, "an image name is empty");
  if (n > JB_IMAGE_NAME_MAX)
    return jb_fail(err, ENAMETOOLONG, "an image name is longer than %d bytes", JB_IMAGE_NAME_MAX);
  char first = name[0];
  if (!((first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z') ||
        (first >= '0' && first <= '9')))
    return jb_fail(err, EINVAL, "image name '%.*s' must begin with a letter or a digit", (int)n,
                   name);
  for (size_t i = 0; i < n; i++)
    if (!name_char(name[i]))
      return jb_fail(err, EINVAL, "image name '%.*s' has a character outside [A-Za-z0-9._/:@-]",
                     (int)n, name);
  if (strstr(name, "//") || name[n - 1] == '/' || name[n - 1] == ':' || name[n - 1] == '@')
    return jb_fail(err, EINVAL, "image name '%s' has an empty component", name);
  const char *last = strrchr(name, '/');
  bool tagged = strchr(name, '@') || strchr(last ? last : name, ':');
  int w = snprintf(out, len, "%s%s", name, tagged ? "" : ":latest");
  if (w < 0 || (size_t)w >= len)
    return jb_fail(err, ENAMETOOLONG, "image name '%s' does not fit", name);
  return 0;
}

/* Calls fn(entry, ctx) for every entry of `list` (separated by commas and/or spaces) until
 * fn returns non-zero; returns that value, 0 after the last entry, or -1 with `err` for an
 * entry too long to hold. */
static int each_entry(const char *list, int (*fn)(const char *entry, void *ctx), void *ctx,
                      jb_error *err) {
  const char *p = list;
  while (*p) {
    p += strspn(p, ", ");
    size_t k = strcspn(p, ", ");
    if (k == 0) break;
    char entry[JB_IMAGE_NAME_MAX + 1];
    if (k > JB_IMAGE_NAME_MAX)
      return jb_fail(err, ENAMETOOLONG, "an image name is longer than %d bytes", JB_IMAGE_NAME_MAX);
    memcpy(entry, p, k);
    entry[k] = '\0';
    int rc = fn(entry, ctx);
    if (rc) return rc;
    p += k;
  }
  return 0;
}

struct check_ctx {
  jb_error *err;
  size_t count;
};

static int check_one(const char *entry, void *ctxv) {
  struct check_ctx *ctx = ctxv;
  char canon[JB_IMAGE_NAME_MAX + 8];
  ctx->count++;
  return jb_image_name_canonical(entry, canon, sizeof canon, ctx->err) < 0 ? -1 : 0;
}

int jb_image_list_check(const char *list, jb_error *err) {
  struct check_ctx ctx = {err, 0};
  if (each_entry(list, check_one, &ctx, err) < 0) return -1;
  if (ctx.count == 0) return jb_fail(err, EINVAL, "the image allowlist is empty");
  return 0;
}

static int matches(const char *entry, void *want) {
  char canon[JB_IMAGE_NAME_MAX + 8];
  jb_error err = {0};
  if (jb_image_name_canonical(entry, canon, sizeof canon, &err) < 0) return 0;
  return strcmp(canon, want) == 0 ? 1 : 0;
}

bool jb_image_allowed(const char *list, const char *default_image, const char *name) {
  char canon[JB_IMAGE_NAME_MAX + 8];
  jb_error err = {0};
  if (default_image && jb_image_name_canonical(default_image, canon, sizeof canon, &err) == 0 &&
      strcmp(canon, name) == 0)
    return true;
  return each_entry(list, matches, (void *)name, &err) == 1;
}
