/* fileops.c — the shim's file operations that read or write one file or list a directory
 * (read, read_many, write, stat, list) inside /workspace, and the dispatch of all file ops
 * (jb_fileop; mkdir, move and delete live in treeops.c, find and search in searchops.c); the
 * resolver every op shares is walk.c (walk.h). Nothing here trusts the tree: the workspace may change under the shim
 * at any moment (the buyer's own tools, a racing rename), so every path is resolved from the
 * descriptor of the root, one component at a time, with O_NOFOLLOW on every open (or openat2
 * with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS per component where the
 * kernel has it; gVisor 2024-07 does not), and a name that turns out to be a symlink is never
 * handed to the kernel to follow. ".." is never opened: it pops the walk's own stack of
 * directory descriptors, so a directory moved out of the workspace mid-walk cannot lead
 * above the root. Checks are made on the opened descriptor (fstat), never check-then-open.
 *
 * Rules: a read or list may pass a symlink only when its target, resolved the same
 * way, stays inside the workspace (absolute targets never do); a write never passes or
 * replaces a symlink; regular files with more than one hard link, fifos, sockets and devices
 * are refused; a write goes to a temporary file in the same directory, then rename(2). */
#define _GNU_SOURCE
#include "sandbox/shim/fileops.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lib/pathcheck.h"
#include "sandbox/proto/shim.h"
#include "sandbox/shim/walk.h"

#define LIST_DEPTH 64 /* recursion of a recursive list */

/* Opens `path` for reading as read resolves it: the last component is opened first, and only
 * when it is a symlink (ELOOP) is the path resolved again, that symlink followed (or refused)
 * the way the walk follows the others. The opened descriptor must be a regular file with one
 * link (fstat into *st). The descriptor, or -1 with *e. */
static int open_for_read(const char *path, struct stat *st, struct jb_fileop_error *e) {
  struct walk w;
  char last[JB_PATH_NAME_MAX + 1];
  char canon[JB_PATH_MAX + 1];
  int fd = -1, en = 0;
  for (int probe = 0; probe < 2; probe++) {
    if (fo_resolve_allowed(path, true, probe, &w, last, canon, e) < 0) return -1;
    /* O_NONBLOCK: a fifo opens at once (and is refused below) instead of waiting for a writer */
    fd = openat(fo_walk_dir(&w), last, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    en = errno;
    fo_walk_close(&w);
    if (fd >= 0 || en != ELOOP) break;
  }
  if (fd < 0) return fo_fail_errno(e, en, path);
  if (fstat(fd, st) < 0 || fo_check_regular(st, path, e) < 0) {
    if (!e->code) fo_fail_errno(e, errno, path);
    close(fd);
    return -1;
  }
  return fd;
}

/* Reads up to `want` bytes at `off` of `fd` into a new buffer (*out, *got bytes; a short
 * count at the end of the file). 0, or -1 with *e. */
static int read_at(int fd, long long off, size_t want, unsigned char **out, size_t *got,
                   const char *path, struct jb_fileop_error *e) {
  unsigned char *buf = malloc(want > 0 ? want : 1);
  if (!buf) return fo_fail(e, "internal", ENOMEM, "out of memory");
  size_t n = 0;
  while (n < want) {
    ssize_t r = pread(fd, buf + n, want - n, off + (off_t)n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int en = errno;
      free(buf);
      return fo_fail_errno(e, en, path);
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  *out = buf;
  *got = n;
  return 0;
}

/* The answer of a read of `got` bytes at `off` of a file of `size` bytes; takes `buf`. */
static json_t *read_answer(long long size, long long off, unsigned char *buf, size_t got,
                           struct jb_fileop_error *e) {
  json_t *o = json_pack("{s:I, s:I, s:I, s:b}", "size", (json_int_t)size, "offset", (json_int_t)off,
                        "length", (json_int_t)got, "eof", off + (long long)got >= size);
  o = o ? fo_content_json(buf, got, o) : NULL;
  free(buf);
  if (!o) fo_fail(e, "internal", ENOMEM, "out of memory");
  return o;
}

#define LINES_COUNT_MAX (64LL * 1024 * 1024) /* files whose lines a line-mode read counts */
#define SCAN_CHUNK 65536

/* Lines `first`… (at most `limit`, all when -1) of `fd`: one pass from the start that counts
 * newlines and keeps the bytes of the selected lines; it goes on to the end, counting, when
 * the file is at most LINES_COUNT_MAX bytes (`total`), else stops after the selection. A line
 * is what ends with "\n", and the bytes after the last "\n" when there are any. */
static json_t *read_lines_from(int fd, const struct stat *st, long long first, long long limit,
                               const char *path, struct jb_fileop_error *e) {
  unsigned char *chunk = malloc(SCAN_CHUNK), *sel = malloc(JB_FILE_MAX > 0 ? JB_FILE_MAX : 1);
  if (!chunk || !sel) {
    free(chunk);
    free(sel);
    fo_fail(e, "internal", ENOMEM, "out of memory");
    return NULL;
  }
  long long ln = 0; /* lines ended before the current position */
  long long start = first == 0 ? 0 : -1, end = limit == 0 ? start : -1;
  size_t sel_len = 0;
  long long pos = 0;
  bool counting = st->st_size <= LINES_COUNT_MAX;
  unsigned char lastc = '\n';
  for (;;) {
    if (end >= 0 && !counting) break;
    ssize_t n = pread(fd, chunk, SCAN_CHUNK, pos);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int en = errno;
      free(chunk);
      free(sel);
      fo_fail_errno(e, en, path);
      return NULL;
    }
    if (n == 0) break;
    for (unsigned char *p = chunk, *stop = chunk + n; p < stop;) {
      unsigned char *nl = memchr(p, '\n', (size_t)(stop - p));
      if (!nl) break;
      ln++;
      long long after = pos + (nl - chunk) + 1;
      if (start < 0 && ln == first) start = after;
      if (end < 0 && start >= 0 && limit >= 0 && ln == first + limit) end = after;
      p = nl + 1;
      if (end >= 0 && !counting) break;
    }
    /* the part of this chunk inside the selection */
    if (start >= 0) {
      long long a = start > pos ? start : pos;
      long long b = end >= 0 && end < pos + n ? end : pos + n;
      if (b > a) {
        if (sel_len + (size_t)(b - a) > JB_FILE_MAX) {
          free(chunk);
          free(sel);
          fo_fail(e, "too_large", EFBIG,
                  "the lines selected in %s are over %d bytes: ask for fewer (lineLimit)", path,
                  JB_FILE_MAX);
          return NULL;
        }
        memcpy(sel + sel_len, chunk + (a - pos), (size_t)(b - a));
        sel_len += (size_t)(b - a);
      }
    }
    lastc = chunk[n - 1];
    pos += n;
  }
  free(chunk);
  bool at_end = end < 0 || counting; /* the pass read the whole file */
  long long total = at_end ? ln + (pos > 0 && lastc != '\n') : -1;
  if (start < 0) start = pos; /* past the last line: nothing selected */
  long long count = end >= 0 ? limit : (total > first ? total - first : 0);
  json_t *o = read_answer(at_end ? pos : (long long)st->st_size, start, sel, sel_len, e);
  if (!o) return NULL;
  json_object_set_new(
      o, "lines",
      json_pack("{s:I, s:I, s:o}", "first", (json_int_t)first, "count", (json_int_t)count, "total",
                total >= 0 ? json_integer(total) : json_null()));
  return o;
}

/* The last `n` lines of `fd`: a pass backwards from the end finds where they begin (a final
 * "\n" ends the last line, it does not begin another), then they are read; the lines are
 * counted (`total`, and `first` from it) when the file is at most LINES_COUNT_MAX bytes. */
static json_t *read_tail(int fd, const struct stat *st, long long n, const char *path,
                         struct jb_fileop_error *e) {
  long long size = st->st_size, start = 0, newlines = 0;
  unsigned char *chunk = malloc(SCAN_CHUNK);
  if (!chunk) {
    fo_fail(e, "internal", ENOMEM, "out of memory");
    return NULL;
  }
  long long want = n;
  if (n == 0) {
    start = size;
  } else {
    long long hi = size; /* bytes [0, hi) not yet looked at */
    bool skip_final = true;
    start = 0;
    while (hi > 0) {
      long long lo = hi > SCAN_CHUNK ? hi - SCAN_CHUNK : 0;
      ssize_t r = pread(fd, chunk, (size_t)(hi - lo), lo);
      if (r < 0 && errno == EINTR) continue;
      if (r < (ssize_t)(hi - lo)) {
        int en = r < 0 ? errno : EAGAIN;
        free(chunk);
        if (en == EAGAIN) {
          fo_fail(e, "changed", EAGAIN, "%s changed during the read", path);
          return NULL;
        }
        fo_fail_errno(e, en, path);
        return NULL;
      }
      long long found = -1;
      for (long long i = hi - lo - 1; i >= 0; i--) {
        if (chunk[i] != '\n') continue;
        if (skip_final && lo + i == size - 1) continue;
        if (--want == 0) {
          found = lo + i + 1;
          break;
        }
      }
      skip_final = false;
      if (found >= 0) {
        start = found;
        break;
      }
      if (size - lo > JB_FILE_MAX) break; /* too much already: refused below */
      hi = lo;
    }
    if (size - start > JB_FILE_MAX && want > 0) start = -1;
  }
  if (start < 0 || size - start > JB_FILE_MAX) {
    free(chunk);
    fo_fail(e, "too_large", EFBIG, "the last %lld lines of %s are over %d bytes: ask for fewer", n,
            path, JB_FILE_MAX);
    return NULL;
  }
  /* counting the whole file's lines, for `first` and `total` */
  long long total = -1;
  if (size <= LINES_COUNT_MAX) {
    long long pos = 0;
    unsigned char lastc = '\n';
    for (;;) {
      ssize_t r = pread(fd, chunk, SCAN_CHUNK, pos);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      for (unsigned char *p = chunk, *stop = chunk + r; (p = memchr(p, '\n', (size_t)(stop - p)));
           p++)
        newlines++;
      lastc = chunk[r - 1];
      pos += r;
    }
    total = newlines + (pos > 0 && lastc != '\n');
  }
  free(chunk);
  unsigned char *buf;
  size_t got;
  if (read_at(fd, start, (size_t)(size - start), &buf, &got, path, e) < 0) return NULL;
  long long count = 0;
  for (size_t i = 0; i < got; i++) count += buf[i] == '\n';
  if (got > 0 && buf[got - 1] != '\n') count++;
  json_t *o = read_answer(size, start, buf, got, e);
  if (!o) return NULL;
  json_object_set_new(
      o, "lines",
      json_pack("{s:o, s:I, s:o}", "first",
                total >= 0 ? json_integer(total - count > 0 ? total - count : 0) : json_null(),
                "count", (json_int_t)count, "total",
                total >= 0 ? json_integer(total) : json_null()));
  return o;
}

/* The non-negative integer argument `key` into *v (unchanged when absent). 1 when present, 0
 * when absent, -1 with *e when it is no such integer. */
static int arg_count(json_t *req, const char *key, long long *v, struct jb_fileop_error *e) {
  json_t *j = json_object_get(req, key);
  if (!j) return 0;
  if (!json_is_integer(j) || json_integer_value(j) < 0)
    return fo_fail(e, "bad_request", EINVAL, "'%s' must be a non-negative integer", key);
  *v = json_integer_value(j);
  return 1;
}

static json_t *op_read(json_t *req, struct jb_fileop_error *e) {
  const char *path = fo_arg_path(req, NULL, e);
  if (!path) return NULL;
  long long off = 0, len = -1, loff = 0, llim = -1, head = -1, tail = -1;
  int has_off = arg_count(req, "offset", &off, e), has_len = arg_count(req, "length", &len, e);
  int has_loff = arg_count(req, "lineOffset", &loff, e),
      has_llim = arg_count(req, "lineLimit", &llim, e), has_head = arg_count(req, "head", &head, e),
      has_tail = arg_count(req, "tail", &tail, e);
  if (has_off < 0 || has_len < 0 || has_loff < 0 || has_llim < 0 || has_head < 0 || has_tail < 0)
    return NULL;
  int modes = (has_off || has_len) + (has_loff || has_llim) + has_head + has_tail;
  if (modes > 1) {
    fo_fail(e, "bad_request", EINVAL,
            "one way of reading at a time: offset/length (bytes), lineOffset/lineLimit, head or "
            "tail");
    return NULL;
  }
  if (len > JB_FILE_MAX) {
    fo_fail(e, "too_large", EFBIG, "'length' over %d bytes", JB_FILE_MAX);
    return NULL;
  }
  struct stat st;
  int fd = open_for_read(path, &st, e);
  if (fd < 0) return NULL;
  json_t *o;
  if (has_tail) {
    o = read_tail(fd, &st, tail, path, e);
  } else if (has_head || has_loff || has_llim) {
    o = read_lines_from(fd, &st, has_head ? 0 : loff, has_head ? head : llim, path, e);
  } else {
    long long avail = st.st_size > off ? st.st_size - off : 0;
    if (len < 0 && avail > JB_FILE_MAX) {
      close(fd);
      fo_fail(e, "too_large", EFBIG,
              "%s is %lld bytes: read it in parts of at most %d with offset and length, or by "
              "lines",
              path, (long long)st.st_size, JB_FILE_MAX);
      return NULL;
    }
    long long want = len >= 0 && len < avail ? len : avail;
    unsigned char *buf;
    size_t got;
    o = read_at(fd, off, (size_t)want, &buf, &got, path, e) < 0
            ? NULL
            : read_answer(st.st_size, off, buf, got, e);
  }
  fo_close_later(fd);
  return o;
}

#define READ_MANY_MAX 50 /* paths of one read_many */

#define READ_MANY_ENTRY 2048 /* bytes of one entry's framing and error message, escaped */

/* Bytes the content of `n` bytes at most takes in the answer: the smaller of its JSON escapes
 * and base64 (fo_content_json), bounded by base64. */
static size_t content_cost(size_t n) {
  return sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
}

/* read_many: each path read whole as `read` reads it, each answered on its own; the contents
 * together stay within JB_FILE_MAX bytes, and the whole answer — contents as sent (base64 or
 * escaped), every path echoed escaped, every error message — within one protocol line
 * (JB_SHIM_MAX_LINE, less room for the envelope): a file past either budget is too_large. */
static json_t *op_read_many(json_t *req, struct jb_fileop_error *e) {
  json_t *paths = json_object_get(req, "paths");
  if (!json_is_array(paths) || json_array_size(paths) == 0 ||
      json_array_size(paths) > READ_MANY_MAX) {
    fo_fail(e, "bad_request", EINVAL, "'paths' must be an array of 1 to %d paths", READ_MANY_MAX);
    return NULL;
  }
  json_t *files = json_array();
  size_t budget = JB_FILE_MAX;
  size_t i;
  json_t *jp;
  /* the answer's room for contents: the line, less every entry's echo and message */
  size_t echoes = 0;
  json_array_foreach (paths, i, jp) {
    echoes += READ_MANY_ENTRY;
    if (json_is_string(jp))
      echoes +=
          fo_json_escaped_len((const unsigned char *)json_string_value(jp), json_string_length(jp));
  }
  size_t line_room = JB_SHIM_MAX_LINE - 65536;
  size_t room = echoes < line_room ? line_room - echoes : 0;
  json_array_foreach (paths, i, jp) {
    struct jb_fileop_error fe = {0};
    json_t *one = json_pack("{s:O}", "path", jp);
    const char *path = fo_arg_path(one, NULL, &fe);
    json_t *r = NULL;
    struct stat st;
    int fd = path ? open_for_read(path, &st, &fe) : -1;
    if (fd >= 0) {
      if (st.st_size > JB_FILE_MAX) {
        fo_fail(&fe, "too_large", EFBIG, "%s is %lld bytes: read it alone, in parts", path,
                (long long)st.st_size);
      } else if ((size_t)st.st_size > budget || content_cost((size_t)st.st_size) > room) {
        fo_fail(&fe, "too_large", EFBIG,
                "%s: the answer's budget (%d bytes of contents, one protocol line in all) is "
                "spent by the entries before it: read it alone",
                path, JB_FILE_MAX);
      } else {
        unsigned char *buf;
        size_t got;
        if (read_at(fd, 0, (size_t)st.st_size, &buf, &got, path, &fe) == 0) {
          budget -= got;
          room -= content_cost(got);
          r = read_answer(st.st_size, 0, buf, got, &fe);
        }
      }
      fo_close_later(fd);
    }
    json_t *ent = r ? json_pack("{s:O, s:b, s:o}", "path", jp, "ok", 1, "result", r)
                    : json_pack("{s:O, s:b, s:{s:s, s:s}}", "path", jp, "ok", 0, "error", "code",
                                fe.code ? fe.code : "internal", "message", fe.message);
    if (ent && !r && fe.escape)
      json_object_set_new(json_object_get(ent, "error"), "escape", json_string(fe.escape));
    json_decref(one);
    if (!ent || json_array_append_new(files, ent) < 0) {
      json_decref(files);
      fo_fail(e, "internal", ENOMEM, "out of memory");
      return NULL;
    }
  }
  return json_pack("{s:o}", "files", files);
}

/* The name `last` in `dir` as a write would find it: {exists, type, size, links, mode, mtime,
 * sha256} (sha256 for a regular single-link file only, and only with `hash`), never following
 * a symlink. `mode` is the permission bits as an octal string ("0644"), `mtime` the
 * modification time in RFC 3339 UTC with nanoseconds. With
 * `with_content`, such a file of at most JB_FILE_MAX bytes also gets {content, encoding} (as
 * read answers them), taken in the same read as the hash. */
static json_t *stat_name(int dir, const char *last, const char *path, bool hash, bool with_content,
                         struct jb_fileop_error *e) {
  struct stat st;
  if (fstatat(dir, last, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    if (errno == ENOENT) return json_pack("{s:b}", "exists", 0);
    fo_fail_errno(e, errno, path);
    return NULL;
  }
  json_t *o = json_pack("{s:b, s:s, s:I, s:I}", "exists", 1, "type", fo_type_name(st.st_mode),
                        "size", (json_int_t)st.st_size, "links", (json_int_t)st.st_nlink);
  char mode[8], mtime[48];
  struct tm tm;
  snprintf(mode, sizeof mode, "%04o", (unsigned)(st.st_mode & 07777));
  if (!o || !gmtime_r(&st.st_mtim.tv_sec, &tm) || !strftime(mtime, 24, "%Y-%m-%dT%H:%M:%S", &tm)) {
    json_decref(o);
    fo_fail(e, "internal", ENOMEM, "out of memory");
    return NULL;
  }
  snprintf(mtime + strlen(mtime), sizeof mtime - strlen(mtime), ".%09ldZ",
           (long)st.st_mtim.tv_nsec);
  json_object_set_new(o, "mode", json_string(mode));
  json_object_set_new(o, "mtime", json_string(mtime));
  if (hash && S_ISREG(st.st_mode) && st.st_nlink == 1) {
    int fd = openat(dir, last, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st2;
    char hex[65];
    unsigned char *content = NULL;
    size_t clen = 0;
    if (fd >= 0 && fstat(fd, &st2) == 0 && S_ISREG(st2.st_mode) && st2.st_ino == st.st_ino &&
        fo_hash_fd(fd, hex, with_content && st2.st_size <= JB_FILE_MAX ? &content : NULL, &clen) ==
            0) {
      json_object_set_new(o, "sha256", json_string(hex));
      if (content && !fo_content_json(content, clen, o)) {
        free(content);
        close(fd);
        fo_fail(e, "internal", ENOMEM, "out of memory");
        return NULL;
      }
    }
    free(content);
    if (fd >= 0) close(fd);
  }
  return o;
}

static json_t *op_stat(json_t *req, struct jb_fileop_error *e) {
  const char *path = fo_arg_path(req, NULL, e);
  if (!path) return NULL;
  struct walk w;
  char last[JB_PATH_NAME_MAX + 1];
  char canon[JB_PATH_MAX + 1];
  json_t *jw = json_object_get(req, "withContent"), *jh = json_object_get(req, "hash");
  json_t *jt = json_object_get(req, "tree");
  if ((jw && !json_is_boolean(jw)) || (jh && !json_is_boolean(jh)) ||
      (jt && !json_is_boolean(jt))) {
    fo_fail(e, "bad_request", EINVAL, "'withContent', 'hash' and 'tree' must be booleans");
    return NULL;
  }
  if (fo_resolve_allowed(path, false, false, &w, last, canon, e) < 0) return NULL;
  json_t *o = stat_name(fo_walk_dir(&w), last, path, !jh || json_is_true(jh) || json_is_true(jw),
                        json_is_true(jw), e);
  /* a write onto a symlink is refused; onto one that leads out it is an escape signal */
  if (o && !strcmp(json_string_value(json_object_get(o, "type")) ?: "", "symlink"))
    json_object_set_new(o, "leadsOut", json_boolean(fo_link_leads_out(&w, last)));
  /* a directory's names, for the landing check of its move */
  if (o && json_is_true(jt) &&
      !strcmp(json_string_value(json_object_get(o, "type")) ?: "", "dir")) {
    json_t *tree = fo_tree_names(&w, last, canon, e);
    if (!tree) {
      json_decref(o);
      o = NULL;
    } else {
      json_object_set_new(o, "tree", tree);
    }
  }
  fo_walk_close(&w);
  return o;
}

/* The bytes a write request `req` carries ("content" in "encoding"): *bytes borrowed from it
 * (utf-8) or decoded into *owned (base64, the caller frees), *dlen of them, at most
 * JB_FILE_MAX. 0 or -1 with *e. */
static int write_content(json_t *req, const unsigned char **bytes, unsigned char **owned,
                         size_t *dlen, struct jb_fileop_error *e) {
  json_t *jc = json_object_get(req, "content");
  const char *enc = json_string_value(json_object_get(req, "encoding"));
  *owned = NULL;
  if (!json_is_string(jc) || (json_object_get(req, "encoding") && !enc) ||
      (enc && strcmp(enc, "utf-8") && strcmp(enc, "base64")))
    return fo_fail(e, "bad_request", EINVAL,
                   "'content' must be a string and 'encoding' utf-8 or base64");
  const char *text = json_string_value(jc);
  size_t tlen = json_string_length(jc);
  *dlen = tlen;
  *bytes = (const unsigned char *)text;
  if (enc && strcmp(enc, "base64") == 0) {
    if (tlen > (size_t)JB_FILE_MAX / 3 * 4 + 8)
      return fo_fail(e, "too_large", EFBIG, "content over %d bytes", JB_FILE_MAX);
    unsigned char *data = malloc(tlen / 4 * 3 + 4);
    if (!data || sodium_base642bin(data, tlen / 4 * 3 + 4, text, tlen, NULL, dlen, NULL,
                                   sodium_base64_VARIANT_ORIGINAL) != 0) {
      free(data);
      return fo_fail(e, "bad_request", EINVAL, "'content' is not valid base64");
    }
    *bytes = *owned = data;
  }
  if (*dlen > JB_FILE_MAX) {
    free(*owned);
    *owned = NULL;
    return fo_fail(e, "too_large", EFBIG, "content of %zu bytes is over %d", *dlen, JB_FILE_MAX);
  }
  return 0;
}

static json_t *op_write(json_t *req, struct jb_fileop_error *e) {
  const char *path = fo_arg_path(req, NULL, e);
  if (!path) return NULL;
  const unsigned char *bytes = NULL;
  unsigned char *data = NULL;
  size_t dlen = 0;
  if (write_content(req, &bytes, &data, &dlen, e) < 0) return NULL;
  struct walk w;
  char last[JB_PATH_NAME_MAX + 1];
  char canon[JB_PATH_MAX + 1];
  struct fo_made made;
  if (fo_resolve_create(path, json_object_get(req, "createParents"), &w, last, canon, &made, e) <
      0) {
    free(data);
    return NULL;
  }
  int dir = fo_walk_dir(&w);
  mode_t mode = 0644;
  struct stat st;
  if (fstatat(dir, last, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (fo_check_regular(&st, path, e) < 0) {
      if (S_ISLNK(st.st_mode) && fo_link_leads_out(&w, last)) {
        fo_fail(e, "denied", ELOOP,
                "%s is a symlink that leads out of the workspace: writes never"
                " replace a symlink",
                path);
        e->escape = "symlink_escape";
      }
      fo_unmake(&w, &made);
      fo_walk_close(&w);
      free(data);
      return NULL;
    }
    mode = st.st_mode & 0777;
  } else if (errno != ENOENT) {
    int en = errno;
    fo_unmake(&w, &made);
    fo_walk_close(&w);
    free(data);
    fo_fail_errno(e, en, path);
    return NULL;
  }
  /* expectSha256: the file as it was when the write was requested ("" = it did not exist) */
  const char *expect = json_string_value(json_object_get(req, "expectSha256"));
  /* the file as it is now: checked against expectSha256, and its hash reported as
   * previousSha256 (null: it did not exist) for the session's change summary */
  json_t *now = stat_name(dir, last, path, true, false, e);
  const char *have = json_is_true(json_object_get(now, "exists"))
                         ? (json_string_value(json_object_get(now, "sha256")) ?: "?")
                         : "";
  char previous[65];
  snprintf(previous, sizeof previous, "%s", have);
  json_decref(now); /* `have` is not used past here */
  if (!now || (expect && strcmp(previous, expect) != 0)) {
    fo_unmake(&w, &made);
    fo_walk_close(&w);
    free(data);
    if (now) fo_fail(e, "changed", EAGAIN, "%s changed since the write was requested", path);
    return NULL;
  }
  if (!strcmp(previous, "?")) { /* over HASH_MAX: what it replaced could not be recorded */
    fo_unmake(&w, &made);
    fo_walk_close(&w);
    free(data);
    fo_fail(e, "too_large", EFBIG,
            "%s is over %lld bytes: a write may not replace a file whose SHA-256"
            " the session's change summary cannot record",
            path, HASH_MAX);
    return NULL;
  }
  unsigned char after[32];
  char after_hex[65];
  crypto_hash_sha256(after, bytes, dlen);
  sodium_bin2hex(after_hex, sizeof after_hex, after, sizeof after);
  /* temp file + rename: the name is replaced, never written through (a link swapped in after
   * the check above is replaced, not followed) */
  unsigned char rnd[8];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) memset(rnd, 0, sizeof rnd);
  char tmp[64];
  snprintf(tmp, sizeof tmp, ".jailbox-%02x%02x%02x%02x%02x%02x%02x%02x.tmp", rnd[0], rnd[1], rnd[2],
           rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
  int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int en = errno;
    fo_unmake(&w, &made);
    fo_walk_close(&w);
    free(data);
    fo_fail_errno(e, en, path);
    return NULL;
  }
  size_t done = 0;
  int en = 0;
  while (done < dlen) {
    ssize_t n = write(fd, bytes + done, dlen - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      en = errno;
      break;
    }
    done += (size_t)n;
  }
  free(data);
  if (!en && fchmod(fd, mode) < 0) en = errno;
  if (!en && fsync(fd) < 0) en = errno;
  close(fd);
  if (!en && renameat(dir, tmp, dir, last) < 0) en = errno;
  if (en) {
    unlinkat(dir, tmp, 0);
    fo_unmake(&w, &made);
    fo_walk_close(&w);
    fo_fail_errno(e, en, path);
    return NULL;
  }
  fo_walk_close(&w);
  json_t *prev = previous[0] == '\0' ? json_null() : json_string(previous);
  json_t *o = json_pack("{s:I, s:s}", "written", (json_int_t)dlen, "sha256", after_hex);
  if (o && prev) json_object_set_new(o, "previousSha256", prev);
  if (o && made.names) json_object_set(o, "createdFolders", made.names);
  fo_made_clear(&made);
  return o;
}

/* qsort comparator of list entries by their "name" (bytewise). */
static int cmp_entries(const void *a, const void *b) {
  return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "name")),
                json_string_value(json_object_get(*(json_t *const *)b, "name")));
}

/* Sorts the array of {name, …} objects `a` in place by name. */
static void json_array_sort_by_name(json_t *a) {
  size_t n = json_array_size(a);
  if (n < 2) return;
  json_t **v = malloc(n * sizeof *v);
  if (!v) return; /* unsorted rather than lost */
  for (size_t i = 0; i < n; i++) v[i] = json_incref(json_array_get(a, i));
  qsort(v, n, sizeof *v, cmp_entries);
  json_array_clear(a);
  for (size_t i = 0; i < n; i++) json_array_append_new(a, v[i]);
  free(v);
}

struct lister {
  json_t *entries;
  size_t count;
  size_t bytes; /* of the entries as JSON, about */
  bool truncated;
};

/* Lists the directory `fd` (owned, closed here) whose root-relative, symlink-free path is
 * `rel` ("" for the root) and whose names appear as `prefix` + name. Excluded entries are left
 * out, and so is everything the pre-scan would flag as refused (workspace_scan.h): regular
 * files with more than one link, fifos, sockets, devices and symlinks that lead out of the
 * workspace — judged here, on what is there now, so that they stay invisible however they
 * are reached (through a symlinked directory, past the pre-scan's first 1,000 flags, or made
 * after it). */
static void list_dir(struct lister *l, int fd, const char *rel, const char *prefix, int levels,
                     int depth) {
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  struct fo_names names;
  if (fo_read_names(d, &names) < 0) l->truncated = true;
  for (size_t k = 0; k < names.n; k++) {
    const char *dname = names.v[k];
    if (l->count >= JB_LIST_MAX) {
      l->truncated = true;
      break;
    }
    struct stat st;
    if (fstatat(dirfd(d), dname, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    size_t nl = strlen(prefix) + strlen(dname) + 2;
    size_t rl = strlen(rel) + strlen(dname) + 2;
    char *name = malloc(nl), *relp = malloc(rl);
    if (!name || !relp) {
      free(name);
      free(relp);
      l->truncated = true;
      break;
    }
    snprintf(name, nl, "%s%s", prefix, dname);
    snprintf(relp, rl, "%s%s%s", rel, rel[0] ? "/" : "", dname);
    if (fo_canon_excluded(relp)) { /* invisible, and not descended into */
      free(name);
      free(relp);
      continue;
    }
    bool inside = false, leads_out = false;
    char target[JB_PATH_MAX + 1];
    if (S_ISLNK(st.st_mode)) {
      /* the target shown is the one judged: its text is read once, then resolved from this
       * directory — a link swapped meanwhile for one into an excluded directory is judged
       * on (and shows) what was read, never the newer text */
      ssize_t tl = readlinkat(dirfd(d), dname, target, sizeof target - 1);
      if (tl > 0) {
        target[tl] = '\0';
        char tp[2 * JB_PATH_MAX + 2];
        int n = snprintf(tp, sizeof tp, "%s%s%s", rel, rel[0] ? "/" : "", target);
        if (target[0] == '/')
          leads_out = true; /* absolute targets never stay inside */
        else
          inside = n > 0 && n <= JB_PATH_MAX && fo_resolves_inside(tp, &leads_out);
      }
    }
    if ((S_ISREG(st.st_mode) && st.st_nlink > 1) || leads_out ||
        !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode))) {
      free(name);
      free(relp);
      continue;
    }
    /* the answer stays well inside one protocol line: long names, deep trees */
    size_t cost = fo_json_escaped_len((const unsigned char *)name, strlen(name)) + 64 +
                  (inside ? fo_json_escaped_len((const unsigned char *)target, strlen(target)) : 0);
    if (l->bytes + cost > FO_ANSWER_MAX) {
      free(name);
      free(relp);
      l->truncated = true;
      break;
    }
    l->bytes += cost;
    json_t *ent = json_pack("{s:s, s:s, s:I}", "name", name, "type", fo_type_name(st.st_mode),
                            "size", (json_int_t)(S_ISREG(st.st_mode) ? st.st_size : 0));
    if (inside) json_object_set_new(ent, "target", json_string(target));
    json_array_append_new(l->entries, ent);
    l->count++;
    if (S_ISDIR(st.st_mode) && st.st_dev == fo_root_dev && depth + 1 < levels &&
        strlen(relp) < JB_PATH_MAX) {
      int sub = fo_open_dir_readable(dirfd(d), dname);
      if (sub >= 0) {
        char *p2 = malloc(nl + 1);
        if (p2) {
          snprintf(p2, nl + 1, "%s/", name);
          list_dir(l, sub, relp, p2, levels, depth + 1);
          free(p2);
        } else {
          close(sub);
        }
      }
    }
    free(name);
    free(relp);
  }
  fo_names_free(&names);
  closedir(d);
}

static json_t *op_list(json_t *req, struct jb_fileop_error *e) {
  const char *path = fo_arg_path(req, ".", e);
  if (!path) return NULL;
  json_t *jr = json_object_get(req, "recursive"), *jd = json_object_get(req, "depth");
  if (jr && !json_is_boolean(jr)) {
    fo_fail(e, "bad_request", EINVAL, "'recursive' must be a boolean");
    return NULL;
  }
  if (jd &&
      (!json_is_integer(jd) || json_integer_value(jd) < 1 || json_integer_value(jd) > LIST_DEPTH)) {
    fo_fail(e, "bad_request", EINVAL, "'depth' must be an integer from 1 to %d", LIST_DEPTH);
    return NULL;
  }
  /* depth 1: the directory's own entries; recursive without depth: LIST_DEPTH levels */
  int levels = jd ? (int)json_integer_value(jd) : json_is_true(jr) ? LIST_DEPTH : 1;
  struct walk w;
  char last[JB_PATH_NAME_MAX + 1];
  char canon[JB_PATH_MAX + 1];
  /* as op_read: a symlink named last (ENOTDIR or ELOOP from the open) is looked at and
   * followed only then */
  int fd = -1, en = 0;
  for (int probe = 0; probe < 2; probe++) {
    if (fo_resolve_allowed(path, true, probe, &w, last, canon, e) < 0) return NULL;
    fd = fo_open_dir_readable(fo_walk_dir(&w), last);
    en = errno;
    fo_walk_close(&w);
    if (fd >= 0 || (en != ELOOP && en != ENOTDIR)) break;
  }
  if (fd < 0) {
    fo_fail_errno(e, en, path);
    return NULL;
  }
  struct lister l = {.entries = json_array()};
  list_dir(&l, fd, canon, "", levels, 0);
  /* visited depth first with each directory's names in order (so that a truncated answer is
   * the same on every run), answered in bytewise order of the whole names */
  json_array_sort_by_name(l.entries);
  return json_pack("{s:s, s:o, s:I, s:b}", "path", path, "entries", l.entries, "count",
                   (json_int_t)l.count, "truncated", l.truncated);
}

json_t *jb_fileop(const char *op, json_t *req, struct jb_fileop_error *e) {
  /* opened on the first op, not at start: the wall checks made right after launch expect
   * no descriptor but 0-2 */
  if (fo_root_fd < 0 && jb_fileops_init("/workspace") < 0) {
    fo_fail(e, "internal", errno, "the workspace cannot be opened: %s", strerror(errno));
    return NULL;
  }
  fo_exclude = json_object_get(req, "exclude");
  if (fo_exclude && !json_is_array(fo_exclude)) {
    fo_fail(e, "bad_request", EINVAL, "'exclude' must be an array of globs");
    return NULL;
  }
  if (strcmp(op, "read") == 0) return op_read(req, e);
  if (strcmp(op, "write") == 0) return op_write(req, e);
  if (strcmp(op, "list") == 0) return op_list(req, e);
  if (strcmp(op, "stat") == 0) return op_stat(req, e);
  if (strcmp(op, "read_many") == 0) return op_read_many(req, e);
  if (strcmp(op, "mkdir") == 0) return fo_op_mkdir(req, e);
  if (strcmp(op, "move") == 0) return fo_op_move(req, e);
  if (strcmp(op, "delete") == 0) return fo_op_delete(req, e);
  if (strcmp(op, "find") == 0) return fo_op_find(req, e);
  if (strcmp(op, "search") == 0) return fo_op_search(req, e);
  fo_fail(e, "unknown_op", ENOSYS, "unknown op '%.64s'", op);
  return NULL;
}

bool jb_fileop_known(const char *op) {
  static const char *const ops[] = {"read",  "read_many", "write",  "list", "stat",
                                    "mkdir", "move",      "delete", "find", "search"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (strcmp(op, ops[i]) == 0) return true;
  return false;
}
