/* workspace_access.c — the jail's group access to a workspace, and its undoing (see
 * workspace_access.h). */
#define _GNU_SOURCE
#include "sandbox/worker/workspace_access.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GRANT_DEPTH 256

/* Called on every directory and regular file of the walk, open (`fd`, not to be closed), with
 * the open directory holding it (`dir`) and its `name` there (-1 and NULL for the root). */
typedef void (*visit_fn)(int fd, int dir, const char *name, void *ctx);

/* Walks the open directory `dfd` (closed here; in `parent` as `name`) without following any
 * symlink: visits it, then its regular files and, recursively, its directories, up to *left
 * entries. Regular files are opened O_NONBLOCK|O_NOCTTY: a name swapped for a fifo or device
 * after the stat opens without side effects (the visitor checks the opened file). */
static void walk(int dfd, int parent, const char *name, visit_fn fn, void *ctx, long *left,
                 int depth) {
  fn(dfd, parent, name, ctx);
  if (depth >= GRANT_DEPTH) {
    close(dfd);
    return;
  }
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) && *left > 0) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    (*left)--;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    if (S_ISDIR(st.st_mode)) {
      int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) walk(sub, dirfd(d), e->d_name, fn, ctx, left, depth + 1);
    } else if (S_ISREG(st.st_mode)) {
      int f =
          openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
      if (f >= 0) {
        fn(f, dirfd(d), e->d_name, ctx);
        close(f);
      }
    }
  }
  closedir(d);
}

struct grant_ctx {
  unsigned gid;
  long changed;
  struct jb_workspace_grant *rec;
  bool oom;
};

static void record(struct grant_ctx *g, const struct stat *st, bool chowned, mode_t added) {
  struct jb_workspace_grant *r = g->rec;
  if (!r) return;
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 256;
    struct jb_grant_entry *nv = realloc(r->v, cap * sizeof *nv);
    if (!nv) {
      g->oom = true;
      return;
    }
    r->v = nv;
    r->cap = cap;
  }
  r->v[r->n++] = (struct jb_grant_entry){.dev = st->st_dev,
                                         .ino = st->st_ino,
                                         .uid = st->st_uid,
                                         .gid = st->st_gid,
                                         .chowned = chowned,
                                         .added = added};
}

/* Records the place of the entry `st` named `name` in the directory `dir`: its owner, group
 * and the bits the grant added. */
static void record_place(struct grant_ctx *g, int dir, const char *name, const struct stat *st,
                         mode_t added) {
  struct jb_workspace_grant *r = g->rec;
  struct stat ds;
  if (!r || dir < 0 || fstat(dir, &ds) < 0) return;
  size_t nl = strlen(name) + 1;
  if (r->np == r->pcap) {
    size_t cap = r->pcap ? r->pcap * 2 : 256;
    struct jb_grant_place *nv = realloc(r->p, cap * sizeof *nv);
    if (!nv) {
      g->oom = true;
      return;
    }
    r->p = nv;
    r->pcap = cap;
  }
  if (r->names_len + nl > r->names_cap) {
    size_t cap = r->names_cap ? r->names_cap * 2 : 8192;
    while (cap < r->names_len + nl) cap *= 2;
    char *nn = realloc(r->names, cap);
    if (!nn) {
      g->oom = true;
      return;
    }
    r->names = nn;
    r->names_cap = cap;
  }
  memcpy(r->names + r->names_len, name, nl);
  r->p[r->np++] = (struct jb_grant_place){.dir_dev = ds.st_dev,
                                          .dir_ino = ds.st_ino,
                                          .name = r->names_len,
                                          .uid = st->st_uid,
                                          .gid = st->st_gid,
                                          .added = added,
                                          .dir = S_ISDIR(st->st_mode)};
  r->names_len += nl;
}

/* Grants access on `fd`: directories get group rwx + set-group-ID, single-link regular files
 * without set-ID bits group rw; anything else is left. */
static void grant_fd(int fd, int dir, const char *name, void *ctx) {
  struct grant_ctx *g = ctx;
  struct stat st;
  if (fstat(fd, &st) < 0) return;
  mode_t want;
  if (S_ISDIR(st.st_mode))
    want = st.st_mode | S_IRGRP | S_IWGRP | S_IXGRP | S_ISGID;
  else if (S_ISREG(st.st_mode) && st.st_nlink == 1 && !(st.st_mode & (S_ISUID | S_ISGID)))
    want = st.st_mode | S_IRGRP | S_IWGRP;
  else
    return; /* set-user/group-ID files are never opened up: they stay unwritable */
  bool chowned = st.st_gid != g->gid && fchown(fd, (uid_t)-1, g->gid) == 0;
  mode_t added = (want & 07777) & ~(st.st_mode & 07777);
  /* chown may have cleared set-ID bits: set the mode from what we read, plus our bits */
  if ((added || chowned) && fchmod(fd, want & 07777) < 0) added = 0;
  if (chowned || added) {
    g->changed++;
    record(g, &st, chowned, added);
  }
  record_place(g, dir, name, &st, added);
}

long jb_workspace_grant(const char *root, unsigned gid, long max_entries,
                        struct jb_workspace_grant *rec, jb_error *err) {
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return jb_fail_errno(err, errno, "workspace %s", root);
  struct stat rst;
  if (fstat(fd, &rst) < 0) {
    int e = errno;
    close(fd);
    return jb_fail_errno(err, e, "workspace %s", root);
  }
  if (rec) {
    rec->root_dev = rst.st_dev;
    rec->root_ino = rst.st_ino;
    rec->valid = true;
  }
  long left = max_entries;
  struct grant_ctx g = {.gid = gid, .rec = rec};
  walk(fd, -1, NULL, grant_fd, &g, &left, 0);
  if (g.oom && rec) {
    rec->valid = false; /* an incomplete record could not be undone faithfully: say so */
    return jb_fail(err, ENOMEM, "out of memory recording the workspace grant");
  }
  return g.changed;
}

static int by_inode(const void *a, const void *b) {
  const struct jb_grant_entry *x = a, *y = b;
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
  return 0;
}

/* Orders places by directory, then name (qsort_r: `names` is the record's names). */
static int by_place(const void *a, const void *b, void *names) {
  const struct jb_grant_place *x = a, *y = b;
  if (x->dir_dev != y->dir_dev) return x->dir_dev < y->dir_dev ? -1 : 1;
  if (x->dir_ino != y->dir_ino) return x->dir_ino < y->dir_ino ? -1 : 1;
  return strcmp((const char *)names + x->name, (const char *)names + y->name);
}

/* The recorded place named `name` in the directory `ds` (places sorted by by_place), or NULL. */
static const struct jb_grant_place *place_of(const struct jb_workspace_grant *rec,
                                             const struct stat *ds, const char *name) {
  size_t lo = 0, hi = rec->np;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const struct jb_grant_place *p = &rec->p[mid];
    int c = p->dir_dev != ds->st_dev   ? (p->dir_dev < ds->st_dev ? -1 : 1)
            : p->dir_ino != ds->st_ino ? (p->dir_ino < ds->st_ino ? -1 : 1)
                                       : strcmp(rec->names + p->name, name);
    if (c == 0) return p;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

struct restore_ctx {
  unsigned gid, jail_uid;
  struct jb_workspace_grant *rec;
  long restored;
};

/* Gives an entry the jail made (`st`, open as `fd`, named `name` in `dir`) an owner outside
 * the jail: what its place held, or else what the directory holding it has (as given back:
 * the walk visits a directory before what it holds). */
static bool restore_made(struct restore_ctx *r, int fd, const struct stat *st, int dir,
                         const char *name) {
  struct stat ds;
  if (dir < 0 || fstat(dir, &ds) < 0) return false;
  bool is_dir = S_ISDIR(st->st_mode);
  const struct jb_grant_place *p = place_of(r->rec, &ds, name);
  if (p && p->dir != is_dir) p = NULL; /* a file where a directory was, or the reverse */
  uid_t uid = p ? p->uid : ds.st_uid;
  gid_t gid = p ? p->gid : ds.st_gid;
  mode_t mode = st->st_mode & (is_dir ? 03777 : 0777); /* never set-user-ID; a file no set-ID */
  if (p) {
    mode &= ~p->added;
  } else {
    mode &= ~(mode_t)S_IWOTH;
    if (!(ds.st_mode & S_IWGRP)) mode &= ~(mode_t)S_IWGRP;
    if (is_dir && !(ds.st_mode & S_ISGID)) mode &= ~(mode_t)S_ISGID;
  }
  /* chown first: it may clear set-ID bits, and the mode set after it is the one wanted */
  if (fchown(fd, uid, gid) < 0) return false;
  (void)fchmod(fd, mode);
  return true;
}

/* Undoes on `fd` what the grant recorded for its inode: the group back when it is still the
 * jail's, and only the mode bits the grant added (the rest as it is now); an entry the jail
 * made gets an owner outside it (restore_made). */
static void restore_fd(int fd, int dir, const char *name, void *ctx) {
  struct restore_ctx *r = ctx;
  struct stat st;
  if (fstat(fd, &st) < 0) return;
  struct jb_grant_entry key = {.dev = st.st_dev, .ino = st.st_ino};
  struct jb_grant_entry *e =
      r->rec->n ? bsearch(&key, r->rec->v, r->rec->n, sizeof key, by_inode) : NULL;
  /* an inode the jail owns that the grant met owned by another: the number was freed (the
   * agent replaced or deleted that file) and taken again by a file the jail made */
  if (e && st.st_uid == r->jail_uid && e->uid != r->jail_uid) e = NULL;
  if (!e) {
    if (st.st_uid == r->jail_uid && name && (S_ISDIR(st.st_mode) || st.st_nlink == 1))
      r->restored += restore_made(r, fd, &st, dir, name);
    return;
  }
  bool done = false;
  mode_t mode = st.st_mode & 07777;
  if (e->chowned && st.st_gid == r->gid && fchown(fd, (uid_t)-1, e->gid) == 0) done = true;
  if (fchmod(fd, mode & ~e->added) == 0 && (mode & e->added)) done = true;
  r->restored += done;
}

long jb_workspace_restore(const char *root, unsigned gid, unsigned jail_uid,
                          struct jb_workspace_grant *rec, jb_error *err) {
  if (!rec->valid) return jb_fail(err, EINVAL, "no complete record of the workspace grant");
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return jb_fail_errno(err, errno, "workspace %s", root);
  struct stat rst;
  if (fstat(fd, &rst) < 0 || rst.st_dev != rec->root_dev || rst.st_ino != rec->root_ino) {
    close(fd);
    return jb_fail(err, ESTALE, "workspace %s is no longer the directory the grant was made on",
                   root);
  }
  if (rec->n > 1) qsort(rec->v, rec->n, sizeof rec->v[0], by_inode);
  if (rec->np > 1) qsort_r(rec->p, rec->np, sizeof rec->p[0], by_place, rec->names);
  /* No budget of entries: the agent creates entries (one a write), and a budget it could use
   * up before the walk reaches the buyer's files would leave them open to the jail's group,
   * or the files it made owned by it. */
  long left = LONG_MAX;
  struct restore_ctx r = {.gid = gid, .jail_uid = jail_uid, .rec = rec};
  walk(fd, -1, NULL, restore_fd, &r, &left, 0);
  return r.restored;
}

#define GRANT_MAGIC 0x6a626732u /* "jbg2" */

/* What a grant holds besides its tables, at the start of what jb_workspace_grant_save writes;
 * the entries, the places and the names follow. */
struct grant_head {
  uint32_t magic; /* GRANT_MAGIC: this layout */
  dev_t root_dev;
  ino_t root_ino;
  bool valid;
  size_t n, np, names_len;
};

/* All `len` bytes at *off written from (`out`) or read into `buf`; *off moves past them. 0, or
 * -1 (errno). */
static int pio_full(int fd, void *buf, size_t len, off_t *off, bool out) {
  char *p = buf;
  while (len > 0) {
    ssize_t k = out ? pwrite(fd, p, len, *off) : pread(fd, p, len, *off);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -1;
    if (k == 0) {
      errno = EIO;
      return -1;
    }
    p += k;
    len -= (size_t)k;
    *off += k;
  }
  return 0;
}

int jb_workspace_grant_save(int fd, const struct jb_workspace_grant *rec) {
  struct grant_head h = {.magic = GRANT_MAGIC,
                         .root_dev = rec->root_dev,
                         .root_ino = rec->root_ino,
                         .valid = rec->valid,
                         .n = rec->n,
                         .np = rec->np,
                         .names_len = rec->names_len};
  off_t off = 0;
  if (pio_full(fd, &h, sizeof h, &off, true) < 0 ||
      (rec->n && pio_full(fd, rec->v, rec->n * sizeof *rec->v, &off, true) < 0) ||
      (rec->np && pio_full(fd, rec->p, rec->np * sizeof *rec->p, &off, true) < 0) ||
      (rec->names_len && pio_full(fd, rec->names, rec->names_len, &off, true) < 0))
    return -1;
  return 0;
}

void jb_workspace_grant_load(int fd, struct jb_workspace_grant *rec) {
  memset(rec, 0, sizeof *rec);
  struct grant_head h;
  off_t off = 0;
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || pio_full(fd, &h, sizeof h, &off, false) < 0 ||
      h.magic != GRANT_MAGIC)
    return;
  /* the sizes must add up to what the file holds (no overflow: each is checked first) */
  size_t left = (size_t)st.st_size - sizeof h;
  if (h.n > left / sizeof *rec->v) return;
  left -= h.n * sizeof *rec->v;
  if (h.np > left / sizeof *rec->p) return;
  left -= h.np * sizeof *rec->p;
  if (h.names_len != left) return;
  struct jb_workspace_grant g = {
      .root_dev = h.root_dev, .root_ino = h.root_ino, .n = h.n, .np = h.np};
  g.v = malloc(h.n ? h.n * sizeof *g.v : 1);
  g.p = malloc(h.np ? h.np * sizeof *g.p : 1);
  g.names = malloc(h.names_len ? h.names_len : 1);
  if (!g.v || !g.p || !g.names || (h.n && pio_full(fd, g.v, h.n * sizeof *g.v, &off, false) < 0) ||
      (h.np && pio_full(fd, g.p, h.np * sizeof *g.p, &off, false) < 0) ||
      (h.names_len && pio_full(fd, g.names, h.names_len, &off, false) < 0)) {
    jb_workspace_grant_free(&g);
    return;
  }
  /* every place names a NUL-terminated name inside the names */
  for (size_t i = 0; i < h.np; i++)
    if (g.p[i].name >= h.names_len ||
        !memchr(g.names + g.p[i].name, '\0', h.names_len - g.p[i].name)) {
      jb_workspace_grant_free(&g);
      return;
    }
  g.cap = g.n;
  g.pcap = g.np;
  g.names_len = g.names_cap = h.names_len;
  g.valid = h.valid;
  *rec = g;
}

void jb_workspace_grant_free(struct jb_workspace_grant *rec) {
  if (!rec) return;
  free(rec->v);
  free(rec->p);
  free(rec->names);
  memset(rec, 0, sizeof *rec);
}
