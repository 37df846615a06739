/* workspace_access.c — the jail's group access to a workspace (see workspace_access.h). */
#define _GNU_SOURCE
#include "sandbox/workspace_access.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GRANT_DEPTH 256

/* Grants access on the open directory or file `fd` (not closed). 1 when changed, 0 when left. */
static int grant_fd(int fd, unsigned gid) {
  struct stat st;
  if (fstat(fd, &st) < 0) return 0;
  mode_t want;
  if (S_ISDIR(st.st_mode)) want = st.st_mode | S_IRGRP | S_IWGRP | S_IXGRP | S_ISGID;
  else if (S_ISREG(st.st_mode) && st.st_nlink == 1 && !(st.st_mode & (S_ISUID | S_ISGID)))
    want = st.st_mode | S_IRGRP | S_IWGRP;
  else return 0; /* set-user/group-ID files are never opened up: they stay unwritable */
  int changed = 0;
  if (st.st_gid != gid && fchown(fd, (uid_t)-1, gid) == 0) changed = 1;
  if ((st.st_mode & 07777) != (want & 07777) && fchmod(fd, want & 07777) == 0) changed = 1;
  return changed;
}

static void grant_dir(int dfd, unsigned gid, long *left, long *changed, int depth) {
  *changed += grant_fd(dfd, gid);
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
      if (sub >= 0) grant_dir(sub, gid, left, changed, depth + 1);
    } else if (S_ISREG(st.st_mode) && st.st_nlink == 1) {
      /* O_NONBLOCK|O_NOCTTY: a name swapped for a fifo or device after the stat opens without
       * side effects and is then left alone (grant_fd checks the opened file) */
      int f = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
      if (f >= 0) {
        *changed += grant_fd(f, gid);
        close(f);
      }
    }
  }
  closedir(d);
}

long jb_workspace_grant(const char *root, unsigned gid, long max_entries, jb_error *err) {
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return jb_fail_errno(err, errno, "workspace %s", root);
  long left = max_entries, changed = 0;
  grant_dir(fd, gid, &left, &changed, 0);
  return changed;
}
