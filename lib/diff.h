/* diff.h — the diff preview of a supervised write: a unified diff of the file as it
 * is now against the proposed content, made by libgit2 (git_patch_from_buffers, then
 * git_patch_to_buf; https://libgit2.org/libgit2/#HEAD/group/patch), shown to the buyer in
 * jailbox:approval_request and stored with the op. */
#ifndef JB_LIB_DIFF_H
#define JB_LIB_DIFF_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/err.h"

/* The preview of replacing `old` (`old_len` bytes; `old_exists` false for a new file, then
 * `old` is ignored) by `new` (`new_len` bytes) at `path`, at most `max` bytes of diff text.
 * Returns 0 with *out a new JSON value: {"format":"unified", "text", "truncated", "bytes"}
 * (`bytes`: the whole diff's length; `text` cut at the last line end within `max`, or at a
 * character boundary when one line is longer) — or JSON null when either side is not text
 * (a NUL byte, or not UTF-8) or `max` is 0. -1 with `err` when libgit2 fails. */
int jb_diff_preview(const char *path, const unsigned char *old, size_t old_len, bool old_exists,
                    const unsigned char *new_data, size_t new_len, size_t max, json_t **out,
                    jb_error *err);

/* A copy (new) of the preview `diff` (borrowed, from jb_diff_preview) whose text is at most
 * `max` bytes, cut as jb_diff_preview cuts; "truncated" is true when it is shorter than the
 * whole diff. JSON null when `diff` is not a preview; NULL on allocation failure. */
json_t *jb_diff_shorten(const json_t *diff, size_t max);

#endif
