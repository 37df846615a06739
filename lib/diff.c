/* diff.c — unified diff previews of supervised writes with libgit2 (see diff.h). */
#define _GNU_SOURCE
#include "lib/diff.h"

#include <errno.h>
#include <git2.h>
#include <pthread.h>
#include <string.h>

static pthread_once_t git_once = PTHREAD_ONCE_INIT;
static int git_ready;

static void git_start(void) { git_ready = git_libgit2_init() > 0; }

/* Whether `len` bytes at `s` are UTF-8 without NUL (jansson checks the encoding). */
static bool is_text(const unsigned char *s, size_t len) {
  if (len == 0) return true;
  if (memchr(s, '\0', len)) return false;
  json_t *j = json_stringn((const char *)s, len);
  json_decref(j);
  return j != NULL;
}

/* The length to keep of `len` bytes of UTF-8 text at `s` so that it is at most `max`: after
 * the last line end that fits, or, with none, at the last character boundary. */
static size_t cut_len(const char *s, size_t len, size_t max) {
  if (len <= max) return len;
  const char *nl = memrchr(s, '\n', max);
  if (nl) return (size_t)(nl - s) + 1;
  size_t keep = max;
  while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80) keep--; /* not inside a character */
  return keep;
}

json_t *jb_diff_shorten(const json_t *diff, size_t max) {
  json_t *jt = json_object_get(diff, "text");
  if (!json_is_string(jt)) return json_null();
  size_t len = json_string_length(jt), keep = cut_len(json_string_value(jt), len, max);
  json_t *out = json_copy((json_t *)diff);
  if (!out) return NULL;
  if (keep < len &&
      (json_object_set_new(out, "text", json_stringn(json_string_value(jt), keep)) < 0 ||
       json_object_set_new(out, "truncated", json_true()) < 0)) {
    json_decref(out);
    return NULL;
  }
  return out;
}

int jb_diff_preview(const char *path, const unsigned char *old, size_t old_len, bool old_exists,
                    const unsigned char *new_data, size_t new_len, size_t max, json_t **out,
                    jb_error *err) {
  *out = NULL;
  if (max == 0 || (old_exists && !is_text(old, old_len)) || !is_text(new_data, new_len)) {
    *out = json_null();
    return 0;
  }
  pthread_once(&git_once, git_start);
  if (!git_ready) return jb_fail(err, EIO, "libgit2 did not initialise");
  git_diff_options opts;
  if (git_diff_options_init(&opts, GIT_DIFF_OPTIONS_VERSION) < 0)
    return jb_fail(err, EIO, "libgit2: diff options");
  opts.flags |= GIT_DIFF_FORCE_TEXT; /* both sides were checked to be text above */
  git_patch *patch = NULL;
  git_buf buf = {0};
  /* a NULL old buffer is "no such file": the diff says /dev/null and "new file" */
  int rc = git_patch_from_buffers(
      &patch, old_exists ? (old_len ? old : (const unsigned char *)"") : NULL,
      old_exists ? old_len : 0, path, new_len ? new_data : (const unsigned char *)"", new_len, path,
      &opts);
  if (rc == 0) rc = git_patch_to_buf(&buf, patch);
  git_patch_free(patch);
  if (rc != 0) {
    const git_error *ge = git_error_last();
    git_buf_dispose(&buf);
    return jb_fail(err, EIO, "diff preview: %s",
                   ge && ge->message ? ge->message : "libgit2 failed");
  }
  size_t len = buf.size, keep = cut_len(buf.ptr, len, max);
  json_t *text = json_stringn(buf.ptr ? buf.ptr : "", keep);
  git_buf_dispose(&buf);
  if (!text) return jb_fail(err, ENOMEM, "diff preview: out of memory or not UTF-8");
  *out = json_pack("{s:s, s:o, s:b, s:I}", "format", "unified", "text", text, "truncated",
                   keep < len, "bytes", (json_int_t)len);
  return *out ? 0 : jb_fail(err, ENOMEM, "diff preview: out of memory");
}
