/* fuzz_shim_line.c — libFuzzer harness for what the worker reads from the shim: the Docker
 * attach stream demultiplexer (sandbox/worker/attach.c) feeding the line reader (lib/line.c),
 * the way sandbox/worker/shimconn.c drives them, over arbitrary bytes cut into arbitrary
 * chunks, each line then parsed as a strict JSON object.
 *
 * Input: byte 0 the line limit, byte 1 the reader's options, byte 2 the chunking, byte 3 a
 * seed; the rest is the stream. Besides sanitizer reports, it checks the results against a
 * plain model computed on the whole stream at once: the same stdout and stderr bytes, the same
 * lines and reports in the same order whatever the chunking, and never more than
 * max_line + 1 bytes held.
 *
 * Each line that parses as an object naming a file op ("op": read, read_many, write, stat,
 * list, mkdir, move, delete, find, search) is also run as a request by the shim's own file ops
 * (sandbox/shim/fileops.h: argument parsing, resolution, PCRE2 compilation and limits)
 * against a small workspace under /tmp: a tree with symlinks inside and out, a hard link and a
 * fifo, beside a sibling directory "outside" that its links point at. After every input the
 * outside directory must be exactly as made (an op that reached it aborts the run), and the
 * workspace is made again when an op changed it. A line naming "cs_read" is run by the
 * spawner's read of an overlay's upper (sandbox/shim/overlay.h jb_cs_read_at: path syntax,
 * offset and length bounds, the walk) with the workspace standing for the upper: a read that
 * succeeds must have reached a regular file through real directories only (no symlink, no
 * FIFO), else the run aborts. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/buf.h"
#include "lib/json.h"
#include "lib/line.h"
#include "sandbox/proto/shim.h"
#include "lib/pathcheck.h"
#include "sandbox/shim/fileops.h"
#include "sandbox/shim/overlay.h"
#include "sandbox/worker/attach.h"

#define OUT_CAP (1u << 20)

static void put(struct jb_buf *t, const void *p, size_t n) {
  if (jb_buf_append(t, p, n) < 0) abort();
}

static void put_line(struct jb_buf *t, const char *line, size_t n) {
  unsigned char h[5] = {'L', (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                        (unsigned char)(n >> 8), (unsigned char)n};
  put(t, h, sizeof h);
  put(t, line, n);
}

/* The model: lines of the whole stdout stream `s` under `o`, as the reader must give them
 * when the input ends after `s`. */
static void model_lines(const struct jb_line_opts *o, const char *s, size_t n, struct jb_buf *t) {
  size_t start = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '\n') continue;
    size_t len = i - start;
    if (len > o->max_line) {
      put(t, "T", 1);
      if (o->over == JB_LINE_FAIL) return;
    } else if (len > 0 || !o->skip_empty) {
      put_line(t, s + start, len);
    }
    start = i + 1;
  }
  size_t len = n - start;
  if (len > o->max_line) {
    if (o->over == JB_LINE_FAIL) {
      put(t, "T", 1);
      return;
    }
    if (o->over == JB_LINE_SKIP) put(t, "T", 1);
  } else if (len > 0 && o->last_unterminated) {
    put_line(t, s + start, len);
  }
  put(t, "E", 1);
}

/* The model of the frames: whole frames one after the other; a bad header ends the stream. */
static bool model_frames(const unsigned char *p, size_t n, struct jb_buf *out, struct jb_buf *err) {
  size_t i = 0;
  while (n - i >= 8) {
    const unsigned char *h = p + i;
    if ((h[0] != 1 && h[0] != 2) || h[1] || h[2] || h[3]) return true;
    size_t size = ((size_t)h[4] << 24) | ((size_t)h[5] << 16) | ((size_t)h[6] << 8) | h[7];
    i += 8;
    size_t take = size < n - i ? size : n - i;
    put(h[0] == 1 ? out : err, p + i, take);
    i += take;
  }
  return false;
}

/* ---- the file ops' workspace ------------------------------------------------------------- */

static char base[64]; /* holds ws/ (the workspace) and outside/ */
static bool ws_dirty;

static void mk(const char *rel, const char *content) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", base, rel);
  if (!content) {
    if (mkdir(p, 0755) < 0) abort();
    return;
  }
  FILE *f = fopen(p, "w");
  if (!f) abort();
  fputs(content, f);
  fclose(f);
}

static void ln(const char *target, const char *rel) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", base, rel);
  if (symlink(target, p) < 0) abort();
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f) {
  return remove(p);
}

static void make_workspace(void) {
  char p[256], q[256];
  snprintf(p, sizeof p, "%s/ws", base);
  nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  mk("ws", NULL);
  mk("ws/src", NULL);
  mk("ws/src/deep", NULL);
  mk("ws/a.txt", "alpha\nbeta\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab\n");
  mk("ws/src/main.c", "int main(void) { return 0; }\n");
  mk("ws/src/deep/x.h", "#define X 1\n");
  mk("ws/secret", "key\n");
  ln("a.txt", "ws/in");
  ln("../outside", "ws/out");
  snprintf(q, sizeof q, "%s/outside/file", base);
  ln(q, "ws/abs");
  ln("../../outside/file", "ws/src/up");
  snprintf(p, sizeof p, "%s/ws/src/hl", base);
  if (link(q, p) < 0) abort(); /* a hard link to the file outside */
  snprintf(p, sizeof p, "%s/ws/fifo", base);
  if (mkfifo(p, 0600) < 0) abort();
  ws_dirty = false;
}

static void init_workspace(void) {
  snprintf(base, sizeof base, "/tmp/jb-fuzz-shim-XXXXXX");
  if (!mkdtemp(base)) abort();
  mk("outside", NULL);
  mk("outside/file", "outside\n");
  make_workspace();
  char p[256];
  snprintf(p, sizeof p, "%s/ws", base);
  if (jb_fileops_init(p) < 0) abort();
}

/* The outside directory as made: one file, one line, its two links (itself and src/hl). */
static void check_outside(void) {
  char p[256], buf[64];
  snprintf(p, sizeof p, "%s/outside/file", base);
  struct stat st;
  int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st) < 0) abort();
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  if (n != 8 || memcmp(buf, "outside\n", 8) || st.st_size != 8) abort();
  snprintf(p, sizeof p, "%s/outside", base);
  int count = 0;
  DIR *d = opendir(p);
  if (!d) abort();
  struct dirent *de;
  while ((de = readdir(d))) count += de->d_name[0] != '.';
  closedir(d);
  if (count != 1) abort();
}

/* Runs cs_read {path, offset, length} on the workspace as an upper; a success must name a
 * regular file reached through directories (each step lstat'ed again here). */
static void run_cs_read(json_t *o) {
  char p[256];
  snprintf(p, sizeof p, "%s/ws", base);
  int ws = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (ws < 0) abort();
  const char *path = json_string_value(json_object_get(o, "path")), *code = NULL;
  json_int_t len = json_integer_value(json_object_get(o, "length"));
  char why[300] = "";
  json_t *r = jb_cs_read_at(ws, path, json_integer_value(json_object_get(o, "offset")),
                            len < 0 ? 0 : (size_t)len, &code, why, sizeof why);
  if (!r && (!code || !why[0])) abort(); /* a refusal always says what and why */
  if (r) {
    char rel[JB_PATH_MAX + 1];
    snprintf(rel, sizeof rel, "%s", path);
    struct stat st;
    for (char *c = rel;; c++) {
      bool last = *c == '\0';
      if (*c != '/' && !last) continue;
      *c = '\0';
      if (fstatat(ws, rel, &st, AT_SYMLINK_NOFOLLOW) < 0) abort();
      if (last ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode)) abort();
      if (last) break;
      *c = '/';
    }
  }
  json_decref(r);
  close(ws);
}

/* Runs the parsed line `o` as a file op (or cs_read) when it names one. */
static void run_op(json_t *o) {
  const char *op = json_string_value(json_object_get(o, "op"));
  if (op && !strcmp(op, "cs_read")) {
    run_cs_read(o);
    return;
  }
  if (!op || !jb_fileop_known(op)) return;
  struct jb_fileop_error e = {0};
  json_t *r = jb_fileop(op, o, &e);
  if (!r && (!e.code || !e.message[0])) abort(); /* a refusal always says what and why */
  if (r && (!strcmp(op, "write") || !strcmp(op, "mkdir") || !strcmp(op, "move") ||
            !strcmp(op, "delete")))
    ws_dirty = true;
  json_decref(r);
}

/* Pulls every result the reader has; false once it has ended for good. */
static bool drain(struct jb_line_reader *r, struct jb_buf *t) {
  for (;;) {
    char *line;
    size_t n;
    int rc = jb_line_next(r, &line, &n);
    if (r->buf.len > r->o.max_line + 1 || r->buf.alloc > r->o.max_line + 2) abort();
    if (rc == JB_LINE_AGAIN) return true;
    if (rc == JB_LINE_OK) {
      if (n > r->o.max_line || line[n] != '\0') abort();
      put_line(t, line, n);
      jb_error err;
      json_t *o = jb_json_parse_object(line, n, JB_SHIM_MAX_DEPTH, &err);
      if (!o && !err.msg[0]) abort(); /* a refusal always says why */
      if (o) run_op(o);
      json_decref(o);
      continue;
    }
    if (rc == JB_LINE_TOO_LONG) {
      put(t, "T", 1);
      if (r->o.over == JB_LINE_FAIL) return false;
      continue;
    }
    if (rc == JB_LINE_END) {
      put(t, "E", 1);
      return false;
    }
    abort(); /* JB_LINE_NOMEM: not with these sizes */
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!base[0]) init_workspace();
  if (size < 4) return 0;
  struct jb_line_opts o = {
      .max_line = data[0] & 0x80 ? 1 + (size_t)(data[0] & 0x7f) : 1 + (size_t)data[0] * 64,
      .over = (enum jb_line_over)(data[1] % 3),
      .skip_empty = data[1] & 4,
      .last_unterminated = data[1] & 8,
  };
  size_t max_chunk = (size_t)1 << (data[2] % 14);
  uint32_t seed = 0x9e3779b9u ^ data[3];
  const unsigned char *in = data + 4;
  size_t n = size - 4;

  struct jb_buf want_out, want_err, want_lines, got_err, got_lines;
  jb_buf_init(&want_out, OUT_CAP);
  jb_buf_init(&want_err, OUT_CAP);
  jb_buf_init(&want_lines, OUT_CAP);
  jb_buf_init(&got_err, OUT_CAP);
  jb_buf_init(&got_lines, OUT_CAP);
  bool want_broken = model_frames(in, n, &want_out, &want_err);
  model_lines(&o, want_out.data ? want_out.data : "", want_out.len, &want_lines);

  /* the worker's way: a raw chunk at a time, frames taken apart, stdout to the reader */
  struct jb_attach_demux d;
  jb_attach_demux_init(&d);
  struct jb_line_reader r;
  jb_line_init(&r, &o);
  bool broken = false, open = true;
  for (size_t i = 0; i < n && !broken;) {
    seed ^= seed << 13;
    seed ^= seed >> 17;
    seed ^= seed << 5;
    size_t chunk = 1 + seed % max_chunk;
    size_t end = n - i < chunk ? n : i + chunk;
    while (i < end) {
      size_t used;
      struct jb_attach_chunk c;
      int rc = jb_attach_demux_next(&d, in + i, end - i, &used, &c);
      if (used > end - i) abort();
      i += used;
      if (rc < 0) {
        broken = true;
        break;
      }
      if (rc == 0) {
        if (i != end) abort();
        break;
      }
      if (c.data != in + i || c.len == 0 || c.len > end - i) abort();
      size_t took = c.len;
      if (c.stream == JB_ATTACH_STDERR)
        put(&got_err, c.data, c.len);
      else
        took = jb_line_feed(&r, c.data, c.len);
      if (took > c.len) abort();
      jb_attach_demux_consume(&d, took);
      i += took;
      if (open)
        open = drain(&r, &got_lines);
      else if (took < c.len)
        abort(); /* an ended reader takes everything */
    }
  }
  jb_line_end(&r);
  if (open) drain(&r, &got_lines);
  jb_line_free(&r);

  if (broken != want_broken) abort();
  if (got_err.len != want_err.len ||
      (got_err.len && memcmp(got_err.data, want_err.data, got_err.len)))
    abort();
  if (got_lines.len != want_lines.len ||
      (got_lines.len && memcmp(got_lines.data, want_lines.data, got_lines.len)))
    abort();
  jb_buf_free(&want_out);
  jb_buf_free(&want_err);
  jb_buf_free(&want_lines);
  jb_buf_free(&got_err);
  jb_buf_free(&got_lines);
  check_outside();
  if (ws_dirty) make_workspace();
  return 0;
}
