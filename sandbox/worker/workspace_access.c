/* workspace_access.c — the jail's group access to a workspace, and its undoing (see
 * workspace_access.h). */
#define _GNU_SOURCE
#include "sandbox/worker/workspace_access.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GRANT_DEPTH 256

/* Called on every directory and regular file of the walk, open (`fd`, not to be closed). */
typedef void (*visit_fn)(int fd, void *ctx);

/* Walks the open directory `dfd` (closed here) without following any symlink: visits it, then
 * its regular files and, recursively, its directories, up to *left entries. Regular files are
 * opened O_NONBLOCK|O_NOCTTY: a name swapped for a fifo or device after the stat opens without
 * side effects (the visitor checks the opened file). */
static void walk(int dfd, visit_fn fn, void *ctx, long *left, int depth) {
  fn(dfd, ctx);
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
      if (sub >= 0) walk(sub, fn, ctx, left, depth + 1);
    } else if (S_ISREG(st.st_mode)) {
      int f =
          openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
      if (f >= 0) {
        fn(f, ctx);
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
  r->v[r->n++] = (struct jb_grant_entry){
      .dev = st->st_dev, .ino = st->st_ino, .gid = st->st_gid, .chowned = chowned, .added = added};
}

/* Grants access on `fd`: directories get group rwx + set-group-ID, single-link regular files
 * without set-ID bits group rw; anything else is left. */
static void grant_fd(int fd, void *ctx) {
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
  walk(fd, grant_fd, &g, &left, 0);
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

struct restore_ctx {
  unsigned gid;
  struct jb_workspace_grant *rec;
  long restored;
  size_t seen; /* recorded inodes met so far */
  long *left; /* the walk's budget: set to 0 once every recorded inode has been met */
};

/* Undoes on `fd` what the grant recorded for its inode: the group back when it is still the
 * jail's, and only the mode bits the grant added (the rest as it is now). */
static void restore_fd(int fd, void *ctx) {
  struct restore_ctx *r = ctx;
  struct stat st;
  if (fstat(fd, &st) < 0) return;
  struct jb_grant_entry key = {.dev = st.st_dev, .ino = st.st_ino};
  struct jb_grant_entry *e = bsearch(&key, r->rec->v, r->rec->n, sizeof key, by_inode);
  if (!e) return;
  if (!e->seen) {
    e->seen = true;
    if (++r->seen == r->rec->n) *r->left = 0; /* nothing more to undo: the walk may stop */
  }
  bool done = false;
  mode_t mode = st.st_mode & 07777;
  if (e->chowned && st.st_gid == r->gid && fchown(fd, (uid_t)-1, e->gid) == 0) done = true;
  if (fchmod(fd, mode & ~e->added) == 0 && (mode & e->added)) done = true;
  r->restored += done;
}

long jb_workspace_restore(const char *root, unsigned gid, struct jb_workspace_grant *rec,
                          jb_error *err) {
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
  for (size_t i = 0; i < rec->n; i++) rec->v[i].seen = false;
  /* No budget of entries: the agent creates entries (one a write), and a budget it could use
   * up before the walk reaches the buyer's files would leave them open to the jail's group.
   * The walk ends as soon as every recorded inode has been met (at once when none was). */
  long left = rec->n ? LONG_MAX : 0;
  struct restore_ctx r = {.gid = gid, .rec = rec, .left = &left};
  walk(fd, restore_fd, &r, &left, 0);
  return r.restored;
}

void jb_workspace_grant_free(struct jb_workspace_grant *rec) {
  if (!rec) return;
  free(rec->v);
  memset(rec, 0, sizeof *rec);
}
