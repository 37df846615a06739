/* edit.h — the edit tool's text replacement, pure: a list of {oldText, newText, replaceAll}
 * applied in order to a file's bytes, all or nothing. No I/O; jailboxd reads the file through
 * the shim, applies the edits here and writes the result with the hash of what it read. */
#ifndef JB_API_EDIT_H
#define JB_API_EDIT_H

#include <stdbool.h>
#include <stddef.h>

/* One replacement: `old_text` (`old_len` bytes, at least 1) by `new_text` (`new_len` bytes).
 * Without `replace_all` the old text must occur exactly once in the text as the edits before
 * it left it; with it, every non-overlapping occurrence (at least one) is replaced. Borrowed. */
struct jb_edit {
  const char *old_text;
  size_t old_len;
  const char *new_text;
  size_t new_len;
  bool replace_all;
};

enum jb_edit_fault {
  JB_EDIT_OK = 0,
  JB_EDIT_EMPTY, /* an edit's oldText is empty */
  JB_EDIT_NOT_FOUND, /* an edit's oldText does not occur */
  JB_EDIT_AMBIGUOUS, /* it occurs `count` times and replaceAll is not set */
  JB_EDIT_TOO_LARGE, /* the result would be over the caller's maximum */
  JB_EDIT_NOMEM, /* out of memory */
};

/* Why jb_edit_apply failed: the fault, the 0-based index of the edit that caused it, and for
 * JB_EDIT_AMBIGUOUS the number of occurrences. */
struct jb_edit_failure {
  enum jb_edit_fault fault;
  size_t index;
  size_t count;
};

/* Applies `n` edits in order to `len` bytes at `src` (borrowed). Returns 0 with *out (new,
 * malloc'd, free it; never NULL) holding *out_len bytes and *replaced the number of
 * replacements made; or -1 with *fail filled, *out NULL, and nothing else changed. The result
 * (and every intermediate text) is at most `max` bytes, checked before it is allocated. */
int jb_edit_apply(const unsigned char *src, size_t len, const struct jb_edit *edits, size_t n,
                  size_t max, unsigned char **out, size_t *out_len, size_t *replaced,
                  struct jb_edit_failure *fail);

/* A sentence for the model saying which edit failed and why (e.g. "edit 2 of 3: oldText was
 * found 4 times; add context to make it unique or set replaceAll"), written into `buf`
 * (`size` bytes, always terminated). `n` is the number of edits of the call. */
void jb_edit_failure_text(const struct jb_edit_failure *fail, size_t n, size_t max, char *buf,
                          size_t size);

#endif
