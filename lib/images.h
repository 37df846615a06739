/* images.h — sandbox image names and the operator's allowlist of them. A session names its
 * image at open (POST /v1/jailbox "image"); jailboxd refuses a name outside the allowlist and
 * the worker checks it again before it launches. Settings: JAILBOX_SANDBOX_IMAGE (the image
 * of a session that names none) and JAILBOX_SANDBOX_IMAGES (the allowlist), read by jailboxd
 * (server/config.c) and jailbox-worker (sandbox/worker/main.c). Images are built by
 * deploy/sandbox-image/build.sh (the minimal one) and build.sh --userland (the one with a
 * Debian userland and a toolchain). */
#ifndef JB_IMAGES_H
#define JB_IMAGES_H

#include <stdbool.h>
#include <stddef.h>

#include "lib/err.h"

/* The image of a session that names none: the minimal, file-only image. */
#define JB_SANDBOX_IMAGE_DEFAULT "jailbox-sandbox:latest"
/* The default allowlist: the two images the project builds. */
#define JB_SANDBOX_IMAGES_DEFAULT "jailbox-sandbox:latest,jailbox-sandbox-build:latest"
/* The longest image name accepted, bytes (without the terminating NUL). */
#define JB_IMAGE_NAME_MAX 256

/* Writes `name` in its canonical form into `out` (`len` bytes, at least JB_IMAGE_NAME_MAX + 8):
 * a reference without a tag or digest gets ":latest", as Docker reads it. The name must be
 * 1..JB_IMAGE_NAME_MAX bytes of [A-Za-z0-9._/:@-], begin with a letter or digit, and have no
 * empty path component. Returns 0, or -1 with `err` (EINVAL, ENAMETOOLONG) saying what is
 * wrong. */
int jb_image_name_canonical(const char *name, char *out, size_t len, jb_error *err);

/* Checks the allowlist `list` (names separated by commas and/or spaces; at least one) the
 * way the settings take it: every name valid for jb_image_name_canonical. Returns 0, or -1
 * with `err` naming the bad entry. */
int jb_image_list_check(const char *list, jb_error *err);

/* Whether the canonical name `name` may be launched: it is in `list` (compared in canonical
 * form) or is `default_image` (JAILBOX_SANDBOX_IMAGE is always allowed). */
bool jb_image_allowed(const char *list, const char *default_image, const char *name);

#endif
