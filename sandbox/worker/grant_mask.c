/* grant_mask.c — the tree hash without the workspace grant's bits (see grant_mask.h). */
#include "sandbox/worker/grant_mask.h"

#include <stdlib.h>
#include <string.h>

/* The names table of the place being sorted or looked up (qsort has no context). */
static _Thread_local const char *sort_names;

static int by_inode(const void *a, const void *b) {
  const struct jb_grant_entry *x = a, *y = b;
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static int by_place(const void *a, const void *b) {
  const struct jb_grant_place *x = a, *y = b;
  if (x->dir_dev != y->dir_dev) return x->dir_dev < y->dir_dev ? -1 : 1;
  if (x->dir_ino != y->dir_ino) return x->dir_ino < y->dir_ino ? -1 : 1;
  return strcmp(sort_names + x->name, sort_names + y->name);
}

int jb_grant_mask_init(struct jb_grant_mask *m, const struct jb_workspace_grant *g) {
  memset(m, 0, sizeof *m);
  if (!g || !g->valid) return 0;
  m->v = g->n ? malloc(g->n * sizeof *m->v) : NULL;
  m->p = g->np ? malloc(g->np * sizeof *m->p) : NULL;
  m->names = g->names_len ? malloc(g->names_len) : NULL;
  if ((g->n && !m->v) || (g->np && !m->p) || (g->names_len && !m->names)) {
    jb_grant_mask_free(m);
    return -1;
  }
  if (g->n) memcpy(m->v, g->v, g->n * sizeof *m->v);
  if (g->np) memcpy(m->p, g->p, g->np * sizeof *m->p);
  if (g->names_len) memcpy(m->names, g->names, g->names_len);
  m->n = g->n;
  m->np = g->np;
  qsort(m->v, m->n, sizeof *m->v, by_inode);
  sort_names = m->names;
  qsort(m->p, m->np, sizeof *m->p, by_place);
  return 0;
}

unsigned jb_grant_mask_mode(void *ctx, const struct stat *dir, const char *name,
                            const struct stat *st) {
  const struct jb_grant_mask *m = ctx;
  unsigned mode = (unsigned)st->st_mode & 07777u;
  struct jb_grant_entry ke = {.dev = st->st_dev, .ino = st->st_ino};
  const struct jb_grant_entry *e = m->n ? bsearch(&ke, m->v, m->n, sizeof *m->v, by_inode) : NULL;
  if (e && e->uid == st->st_uid) return mode & ~(unsigned)e->added;
  if (!m->np || !m->names) return mode;
  struct jb_grant_place kp = {.dir_dev = dir->st_dev, .dir_ino = dir->st_ino};
  const struct jb_grant_place *p = NULL;
  size_t lo = 0, hi = m->np;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const struct jb_grant_place *q = &m->p[mid];
    int c = kp.dir_dev != q->dir_dev   ? (kp.dir_dev < q->dir_dev ? -1 : 1)
            : kp.dir_ino != q->dir_ino ? (kp.dir_ino < q->dir_ino ? -1 : 1)
                                       : strcmp(name, m->names + q->name);
    if (c == 0) {
      p = q;
      break;
    }
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return p ? mode & ~(unsigned)p->added : mode;
}

void jb_grant_mask_free(struct jb_grant_mask *m) {
  free(m->v);
  free(m->p);
  free(m->names);
  memset(m, 0, sizeof *m);
}
