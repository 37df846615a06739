/* workspace_access.c — the jail's group access to a workspace, and its undoing (see
 * workspace_access.h). */
#define _GNU_SOURCE
#include "sandbox/worker/workspace_access.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

/* Called on every directory and regular file of the walk, open (`fd`, not to be closed), with
 * the open directory holding it (`dir`) and its `name` there (-1 and NULL for the root). */
typedef void (*visit_fn)(int fd, int dir, const char *name, void *ctx);

/* What a walk could not do: how many entries, and the first reason. */
struct walk_faults {
  long n;
  char first[160];
};

static void fault(struct walk_faults *f, int e, const char *what, const char *name) {
  if (f->n++ == 0)
    snprintf(f->first, sizeof f->first, "%s %.64s: %s", what, name ? name : "(root)", strerror(e));
}

/* Where an entry is: its mount (statx's mount id where the kernel gives one, else its device:
 * a bind mount of the same file system has the device of what it is mounted on) and inode. */
struct where {
  uint64_t mnt;
  bool has_mnt;
  dev_t dev;
  ino_t ino;
  mode_t mode;
};

/* The `where` of `name` in `dir` (AT_EMPTY_PATH with name ""), not following a symlink. 0,
 * or -1 (errno). */
static int where_of(int dir, const char *name, struct where *w) {
  struct statx sx;
  int flags = AT_SYMLINK_NOFOLLOW | AT_STATX_SYNC_AS_STAT | (*name ? 0 : AT_EMPTY_PATH);
  if (statx(dir, name, flags, STATX_TYPE | STATX_INO | STATX_MNT_ID, &sx) < 0) return -1;
  w->has_mnt = (sx.stx_mask & STATX_MNT_ID) != 0;
  w->mnt = sx.stx_mnt_id;
  w->dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
  w->ino = sx.stx_ino;
  w->mode = sx.stx_mode;
  return 0;
}

/* Whether `w` is on the mount of the walk's root `root`. */
static bool same_mount(const struct where *w, const struct where *root) {
  if (w->dev != root->dev) return false;
  return !(w->has_mnt && root->has_mnt) || w->mnt == root->mnt;
}

/* One directory on the walk's path: the names of its subdirectories (what else it holds is
 * visited while they are read), the next one to go down, and its inode (checked when the walk
 * comes back up through ".."). */
struct level {
  char **names;
  size_t n, next;
  dev_t dev;
  ino_t ino;
};

static void level_free(struct level *l) {
  for (size_t i = 0; i < l->n; i++) free(l->names[i]);
  free(l->names);
  memset(l, 0, sizeof *l);
}

struct walk {
  visit_fn fn;
  void *ctx;
  long *left;
  struct walk_faults *faults;
  struct where root;
};

/* Reads the open directory `fd` (left open) into *l: visits each regular file on the root's
 * mount at once (opened O_NONBLOCK|O_NOCTTY: a name swapped for a fifo or device after the
 * stat opens without side effects; the visitor checks the opened file) and keeps the names of
 * its subdirectories on that mount, within the walk's budget of entries. So what the walk
 * keeps in memory grows with the directories on its path, never with the files in them. 0, or
 * -1 (errno; the directory could not be read, or no memory for a name: what was read is
 * kept). */
static int level_read(struct walk *wk, int fd, struct level *l) {
  memset(l, 0, sizeof *l);
  struct stat st;
  if (fstat(fd, &st) < 0) return -1;
  l->dev = st.st_dev;
  l->ino = st.st_ino;
  int d2 = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d2 < 0) return -1;
  DIR *d = fdopendir(d2);
  if (!d) {
    int e = errno;
    close(d2);
    errno = e;
    return -1;
  }
  size_t cap = 0;
  int rerr = 0;
  struct dirent *e;
  for (errno = 0; *wk->left > 0 && (e = readdir(d)); errno = 0) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    (*wk->left)--;
    struct where w;
    if (where_of(fd, e->d_name, &w) < 0) {
      if (errno != ENOENT) fault(wk->faults, errno, "stat", e->d_name);
      continue;
    }
    if (!same_mount(&w, &wk->root)) continue; /* a mount here: not entered, not changed */
    if (S_ISREG(w.mode)) {
      int f = openat(fd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
      if (f < 0) {
        if (errno != ENOENT) fault(wk->faults, errno, "open", e->d_name);
        continue;
      }
      wk->fn(f, fd, e->d_name, wk->ctx);
      close(f);
      continue;
    }
    if (!S_ISDIR(w.mode)) continue;
    if (l->n == cap) {
      size_t nc = cap ? cap * 2 : 16;
      char **nv = realloc(l->names, nc * sizeof *nv);
      if (!nv) {
        rerr = ENOMEM;
        break;
      }
      l->names = nv;
      cap = nc;
    }
    if (!(l->names[l->n] = strdup(e->d_name))) {
      rerr = ENOMEM;
      break;
    }
    l->n++;
  }
  if (!rerr && errno) rerr = errno;
  closedir(d);
  errno = rerr;
  return rerr ? -1 : 0;
}

/* Walks the directory `root_fd` (closed here) without following any symlink and without
 * leaving its mount: visits it, then each regular file and, going down, each directory below
 * it, at any depth, up to *left entries. The walk holds the descriptors of at most three
 * entries at a time: it reads a directory (visiting its files) before going down into its
 * subdirectories, and comes back up through ".." after checking that it leads to the
 * directory it came from (the tree was moved meanwhile: the walk stops, a fault). Memory grows
 * with the depth and the subdirectories on the path. What could not be read or opened is
 * counted in *faults. */
static void walk(int root_fd, visit_fn fn, void *ctx, long *left, struct walk_faults *faults) {
  struct walk wk = {.fn = fn, .ctx = ctx, .left = left, .faults = faults};
  if (where_of(root_fd, "", &wk.root) < 0) {
    fault(faults, errno, "stat", NULL);
    close(root_fd);
    return;
  }
  fn(root_fd, -1, NULL, ctx);
  int cur = root_fd;
  size_t depth = 0, cap = 16;
  struct level *stack = calloc(cap, sizeof *stack);
  if (!stack) {
    fault(faults, ENOMEM, "walk", NULL);
    close(cur);
    return;
  }
  if (level_read(&wk, cur, &stack[0]) < 0) fault(faults, errno, "read directory", NULL);
  depth = 1;
  while (depth > 0) {
    if (stack[depth - 1].next == stack[depth - 1].n) { /* this directory is done */
      level_free(&stack[--depth]);
      if (depth == 0) break;
      /* back up to the directory it is in, as the walk found it */
      int up = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      struct stat us;
      if (up < 0 || fstat(up, &us) < 0 || us.st_dev != stack[depth - 1].dev ||
          us.st_ino != stack[depth - 1].ino) {
        fault(faults, up < 0 ? errno : ESTALE, "back up from", "a directory moved meanwhile");
        if (up >= 0) close(up);
        break;
      }
      close(cur);
      cur = up;
      continue;
    }
    if (*left <= 0) break; /* the budget is spent (the grant's) */
    struct level *l = &stack[depth - 1];
    const char *name = l->names[l->next++];
    int sub = openat(cur, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct where w;
    if (sub < 0 || where_of(sub, "", &w) < 0 || !same_mount(&w, &wk.root)) {
      if (sub < 0 && errno != ENOENT) fault(faults, errno, "open", name);
      if (sub >= 0) close(sub); /* (swapped for a mount point since it was read: left) */
      continue;
    }
    fn(sub, cur, name, ctx);
    if (depth == cap) {
      struct level *nv = realloc(stack, cap * 2 * sizeof *nv);
      if (!nv) {
        fault(faults, ENOMEM, "go below", name);
        close(sub);
        continue;
      }
      stack = nv;
      cap *= 2;
    }
    /* (a directory read in part still has what was read gone through) */
    if (level_read(&wk, sub, &stack[depth]) < 0) fault(faults, errno, "read directory", name);
    depth++;
    close(cur);
    cur = sub;
  }
  while (depth > 0) level_free(&stack[--depth]);
  free(stack);
  close(cur);
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
                                          .mode = st->st_mode & 07777,
                                          .added = added,
                                          .dir = S_ISDIR(st->st_mode)};
  r->names_len += nl;
}

/* Whether the open file `fd` carries file capabilities (capabilities(7): the
 * security.capability attribute, which the kernel drops at any chown of the file). An error
 * other than "no such attribute" counts as carrying them: the file is then left alone. */
static bool has_capabilities(int fd) {
  if (fgetxattr(fd, "security.capability", NULL, 0) >= 0) return true;
  return errno != ENODATA && errno != ENOTSUP;
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
  else if (S_ISREG(st.st_mode) && st.st_nlink == 1 && !(st.st_mode & (S_ISUID | S_ISGID)) &&
           !has_capabilities(fd))
    want = st.st_mode | S_IRGRP | S_IWGRP;
  else
    return; /* set-user/group-ID files are never opened up: they stay unwritable; nor files
             * with capabilities, which a chown would take from them for good */
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
  struct walk_faults faults = {0};
  walk(fd, grant_fd, &g, &left, &faults); /* what it could not open stays closed to the jail */
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

/* The order of places: by directory (device, inode), then name; <0, 0 or >0 as strcmp for
 * the place (dev, ino, name) against `p`, whose name is in `names`. */
static int place_cmp(dev_t dev, ino_t ino, const char *name, const struct jb_grant_place *p,
                     const char *names) {
  if (dev != p->dir_dev) return dev < p->dir_dev ? -1 : 1;
  if (ino != p->dir_ino) return ino < p->dir_ino ? -1 : 1;
  return strcmp(name, names + p->name);
}

/* qsort_r's comparison for places (`names` is the record's names). */
static int by_place(const void *a, const void *b, void *names) {
  const struct jb_grant_place *x = a, *y = b;
  return place_cmp(x->dir_dev, x->dir_ino, (const char *)names + x->name, y, names);
}

/* The recorded place named `name` in the directory `ds` (places sorted by by_place), or NULL. */
static const struct jb_grant_place *place_of(const struct jb_workspace_grant *rec,
                                             const struct stat *ds, const char *name) {
  size_t lo = 0, hi = rec->np;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = place_cmp(ds->st_dev, ds->st_ino, name, &rec->p[mid], rec->names);
    if (c == 0) return &rec->p[mid];
    if (c > 0)
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
  struct walk_faults faults;
};

/* The group and other bits a file the agent put in a place may keep: those the place's file
 * had, and execute where it had read (a script the agent made runnable stays runnable for
 * whoever could read the one it replaced); never write or read the original did not give. */
static mode_t place_bits(mode_t now, mode_t orig) {
  mode_t may = (orig & 0077) | ((orig & 0044) >> 2);
  return (now & 0700) | (now & may);
}

/* Takes away the POSIX ACLs (acl(5): the system.posix_acl_access and, on a directory,
 * system.posix_acl_default attributes) of an entry the jail made: an entry that now has an
 * owner outside the jail is governed by its mode bits alone. (Wall 2's filter lets the jail
 * set no attribute; this holds without it.) */
static void drop_acls(struct restore_ctx *r, int fd, bool is_dir, const char *name) {
  if (fremovexattr(fd, "system.posix_acl_access") < 0 && errno != ENODATA && errno != ENOTSUP)
    fault(&r->faults, errno, "remove the ACL of", name);
  if (is_dir && fremovexattr(fd, "system.posix_acl_default") < 0 && errno != ENODATA &&
      errno != ENOTSUP)
    fault(&r->faults, errno, "remove the default ACL of", name);
}

/* Gives an entry the jail made (`st`, open as `fd`, named `name` in `dir`) an owner outside
 * the jail: what its place held, or else what the directory holding it has (as given back:
 * the walk visits a directory before what it holds). */
static void restore_made(struct restore_ctx *r, int fd, const struct stat *st, int dir,
                         const char *name) {
  struct stat ds;
  if (dir < 0 || fstat(dir, &ds) < 0) {
    fault(&r->faults, errno, "stat the directory of", name);
    return;
  }
  bool is_dir = S_ISDIR(st->st_mode);
  const struct jb_grant_place *p = place_of(r->rec, &ds, name);
  if (p && p->dir != is_dir) p = NULL; /* a file where a directory was, or the reverse */
  uid_t uid = p ? p->uid : ds.st_uid;
  gid_t gid = p ? p->gid : ds.st_gid;
  mode_t now = st->st_mode & 07777, mode;
  if (p) {
    mode = place_bits(now & ~p->added, p->mode);
    if (is_dir) mode |= now & p->mode & (S_ISGID | S_ISVTX);
  } else {
    mode = now & 0777 & ~(mode_t)S_IWOTH;
    if (!(ds.st_mode & S_IWGRP)) mode &= ~(mode_t)S_IWGRP;
    if (is_dir) mode |= now & ds.st_mode & (S_ISGID | S_ISVTX);
  }
  /* chown first: it may clear set-ID bits, and the mode set after it is the one wanted */
  if (fchown(fd, uid, gid) < 0 || fchmod(fd, mode) < 0) {
    fault(&r->faults, errno, "give an owner to", name);
    return;
  }
  drop_acls(r, fd, is_dir, name);
  r->restored++;
}

/* An entry not the jail's whose inode the grant did not meet, in the jail's group (`st`, open
 * as `fd`, named `name` in `dir`): one written in a recorded place during the session by the
 * worker (a changeset applied, a rollback: it keeps the owner of what it replaces, and the
 * group and mode bits it had then, the grant's included) or by anyone in a folder whose
 * set-group-ID bit the grant set. It gets the place's group back and loses the bits the grant
 * added to that place; one in no recorded place, or of another owner than the place's, is
 * left alone. */
static void restore_rewritten(struct restore_ctx *r, int fd, const struct stat *st, int dir,
                              const char *name) {
  struct stat ds;
  if (st->st_gid != r->gid || dir < 0 || fstat(dir, &ds) < 0) return;
  const struct jb_grant_place *p = place_of(r->rec, &ds, name);
  if (!p || p->dir != S_ISDIR(st->st_mode) || p->uid != st->st_uid) return;
  mode_t now = st->st_mode & 07777, mode = now & ~p->added;
  if (fchown(fd, (uid_t)-1, p->gid) < 0 || (mode != now && fchmod(fd, mode) < 0)) {
    fault(&r->faults, errno, "give the group and mode back to", name);
    return;
  }
  r->restored++;
}

/* Undoes on `fd` what the grant recorded for its inode: the group back when it is still the
 * jail's, and only the mode bits the grant added (the rest as it is now, but no set-ID bit on
 * a file the jail owns: it could have set them); an entry the jail made gets an owner outside
 * it (restore_made); a file of the jail with several links keeps its owner, without set-ID
 * bits or write for group and others. */
static void restore_fd(int fd, int dir, const char *name, void *ctx) {
  struct restore_ctx *r = ctx;
  struct stat st;
  if (fstat(fd, &st) < 0) {
    fault(&r->faults, errno, "stat", name);
    return;
  }
  struct jb_grant_entry key = {.dev = st.st_dev, .ino = st.st_ino};
  struct jb_grant_entry *e =
      r->rec->n ? bsearch(&key, r->rec->v, r->rec->n, sizeof key, by_inode) : NULL;
  /* an inode the jail owns that the grant met owned by another: the number was freed (the
   * agent replaced or deleted that file) and taken again by a file the jail made */
  if (e && st.st_uid == r->jail_uid && e->uid != r->jail_uid) e = NULL;
  bool jails = st.st_uid == r->jail_uid && !S_ISDIR(st.st_mode);
  if (!e) {
    if (st.st_uid != r->jail_uid && name) restore_rewritten(r, fd, &st, dir, name);
    if (st.st_uid != r->jail_uid || !name) return;
    if (S_ISDIR(st.st_mode) || st.st_nlink == 1) {
      restore_made(r, fd, &st, dir, name);
    } else {
      mode_t m = st.st_mode & 0755; /* no set-ID bits, no write but the owner's */
      if (m != (st.st_mode & 07777) && fchmod(fd, m) < 0) fault(&r->faults, errno, "chmod", name);
    }
    return;
  }
  mode_t now = st.st_mode & 07777, mode = now & ~e->added;
  if (jails) mode &= ~(mode_t)(S_ISUID | S_ISGID);
  bool done = false;
  if (e->chowned && st.st_gid == r->gid) {
    if (fchown(fd, (uid_t)-1, e->gid) < 0)
      fault(&r->faults, errno, "give the group back to", name);
    else
      done = true;
  }
  /* after the chown, which may have cleared set-ID bits: the mode wanted, not the one read */
  if (done || mode != now) {
    if (fchmod(fd, mode) < 0)
      fault(&r->faults, errno, "give the mode back to", name);
    else
      done = true;
  }
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
  walk(fd, restore_fd, &r, &left, &r.faults);
  if (r.faults.n)
    return jb_fail(err, EIO, "%ld entries given back, %ld could not be (the first: %s)", r.restored,
                   r.faults.n, r.faults.first);
  return r.restored;
}

#define GRANT_MAGIC 0x6a626733u /* "jbg3" */

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

/* Whether the byte at `off` in `obj` is 0 or 1. */
static bool byte_is_flag(const void *obj, size_t off) {
  unsigned char b;
  memcpy(&b, (const char *)obj + off, 1);
  return b <= 1;
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
  /* every flag is 0 or 1 (read as a byte: a bool holding another value is undefined), and
   * every place names a NUL-terminated name inside the names */
  bool ok = byte_is_flag(&h, offsetof(struct grant_head, valid));
  for (size_t i = 0; ok && i < h.n; i++)
    ok = byte_is_flag(&g.v[i], offsetof(struct jb_grant_entry, chowned));
  for (size_t i = 0; ok && i < h.np; i++)
    ok = byte_is_flag(&g.p[i], offsetof(struct jb_grant_place, dir)) && g.p[i].name < h.names_len &&
         memchr(g.names + g.p[i].name, '\0', h.names_len - g.p[i].name);
  if (!ok) {
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
