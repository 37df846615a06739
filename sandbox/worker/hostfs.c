/* hostfs.c — the workspace on the worker's host reached without following a link (see
 * hostfs.h). */
#define _GNU_SOURCE
#include "sandbox/worker/hostfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int jb_hostfs_open_dir(int rootfd, const char *dir) {
  if (!dir[0]) return fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
  struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  return (int)syscall(SYS_openat2, rootfd, dir, &how, sizeof how);
}

const char *jb_hostfs_split(const char *path, char *dir, size_t dsize) {
  const char *slash = strrchr(path, '/');
  size_t dl = slash ? (size_t)(slash - path) : 0;
  if (dl >= dsize) return NULL;
  memcpy(dir, path, dl);
  dir[dl] = '\0';
  return slash ? slash + 1 : path;
}

int jb_hostfs_open_parent(int rootfd, const char *path, const char **name) {
  char dir[PATH_MAX];
  *name = jb_hostfs_split(path, dir, sizeof dir);
  if (!*name) return -1;
  return jb_hostfs_open_dir(rootfd, dir);
}

int jb_hostfs_read_file(int dfd, const char *name, size_t max, char **data, size_t *len) {
  int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return -1;
  }
  if ((unsigned long long)st.st_size > max) {
    close(fd);
    return 1;
  }
  char *b = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  int rc = b ? 0 : -1;
  while (rc == 0) {
    ssize_t r = read(fd, b + got, (size_t)st.st_size + 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) rc = -1;
    if (r <= 0) break;
    got += (size_t)r;
    if (got > (size_t)st.st_size) rc = 1;
  }
  close(fd);
  if (rc != 0) {
    free(b);
    return rc;
  }
  *data = b;
  *len = got;
  return 0;
}

int jb_hostfs_remove_tree(int dfd, const char *name, int depth) {
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(st.st_mode)) return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -1 : 0;
  if (depth > JB_HOSTFS_TREE_DEPTH_MAX) return -1;
  int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0) return -1;
  DIR *d = fdopendir(sub);
  if (!d) {
    close(sub);
    return -1;
  }
  int rc = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
        jb_hostfs_remove_tree(dirfd(d), de->d_name, depth + 1) < 0)
      rc = -1;
  closedir(d);
  if (rc == 0 && unlinkat(dfd, name, AT_REMOVEDIR) < 0) rc = -1;
  return rc;
}
