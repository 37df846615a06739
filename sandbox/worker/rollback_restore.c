/* rollback_restore.c — one pre-image row put back (see rollback_restore.h). */
#define _GNU_SOURCE
#include "sandbox/worker/rollback_restore.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/worker/hostfs.h"

const char *jb_restore_outcome_name(enum jb_restore_outcome o) {
  return o == JB_RESTORED ? "restored" : o == JB_CONFLICT ? "conflict" : "failed";
}

static const char *str(json_t *row, const char *key) {
  return json_string_value(json_object_get(row, key));
}

bool jb_restore_holds(const struct jb_pstore_item *now, const char *kind, const char *sha,
                      long long mode, const char *target) {
  if (!kind || strcmp(kind, jb_pstore_kind_name(now->kind))) return false;
  if (now->kind == JB_PSTORE_FILE && sha && strcmp(sha, now->sha256)) return false;
  if ((now->kind == JB_PSTORE_FILE || now->kind == JB_PSTORE_DIR) && mode >= 0 &&
      mode != (long long)now->mode)
    return false;
  if (now->kind == JB_PSTORE_LINK && target && strcmp(target, now->target)) return false;
  return true;
}

static long long mode_of(json_t *row, const char *key) {
  json_t *m = json_object_get(row, key);
  return json_is_integer(m) ? (long long)json_integer_value(m) : -1;
}

/* A temporary name beside the path (in its folder). */
static void tmp_name(char *out, size_t size) {
  unsigned char r[8];
  randombytes_buf(r, sizeof r);
  snprintf(out, size, ".jb-rollback-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4],
           r[5], r[6], r[7]);
}

/* The owner a restored entry `name` of `pfd` gets: the row's `uid` and `gid` when it has both,
 * else that of what is there now, else that of its folder (the table keeps no owner; a worker running as root would leave root's otherwise).
 * Best effort: a worker without CAP_CHOWN keeps its own. */
static void owner_of(int pfd, const char *name, json_t *row, uid_t *uid, gid_t *gid) {
  json_t *u = json_object_get(row, "uid"), *g = json_object_get(row, "gid");
  if (json_is_integer(u) && json_is_integer(g)) { /* the row says (a changeset's new entry) */
    *uid = (uid_t)json_integer_value(u);
    *gid = (gid_t)json_integer_value(g);
    return;
  }
  struct stat st;
  if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 || fstat(pfd, &st) == 0) {
    *uid = st.st_uid;
    *gid = st.st_gid;
  } else {
    *uid = (uid_t)-1;
    *gid = (gid_t)-1;
  }
}

/* The mode a restored file gets: the one it had, without its set-ID bits. The table keeps no
 * owner, and a restored file takes the owner of what is there now or of its folder (owner_of):
 * a set-ID bit kept with another owner than the file had would make a set-ID program of that
 * owner (a buyer's set-user-ID file deleted by the agent in a folder of root's came back
 * set-user-ID root). */
static mode_t restore_mode(mode_t mode) { return mode & 01777; }

/* Writes blob `sha` as a file of mode `mode` under a temporary name (into `tmp`, 64 bytes) in
 * `pfd`, fsynced when `sync`. 0, or -1 with `detail` (nothing left behind). */
static int write_temp(const char *store, const char *job, int pfd, const char *name, json_t *row,
                      const char *sha, mode_t mode, bool sync, char tmp[64], char *detail,
                      size_t dsize) {
  tmp_name(tmp, 64);
  int fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return snprintf(detail, dsize, "temporary file: %s", strerror(errno)), -1;
  uid_t uid;
  gid_t gid;
  owner_of(pfd, name, row, &uid, &gid);
  (void)!fchown(fd, uid, gid); /* best effort (see owner_of) */
  jb_error e = {0};
  int rc = jb_pstore_copy_out(store, job, sha, fd, &e);
  if (rc < 0) snprintf(detail, dsize, "%s", e.msg);
  /* the mode it had, never a set-ID bit (restore_mode) */
  if (rc == 0 && (fchmod(fd, restore_mode(mode)) < 0 || (sync && fsync(fd) < 0)))
    rc = -1, snprintf(detail, dsize, "mode: %s", strerror(errno));
  close(fd);
  if (rc < 0) unlinkat(pfd, tmp, 0);
  return rc;
}

/* Writes blob `sha` as a file of mode `mode` under a temporary name in `pfd`, fsynced, and
 * renames it over `name`. 0, or -1 with `detail`. */
static int put_file(const char *store, const char *job, int pfd, const char *name, json_t *row,
                    const char *sha, mode_t mode, char *detail, size_t dsize) {
  char tmp[64];
  int rc = write_temp(store, job, pfd, name, row, sha, mode, true, tmp, detail, dsize);
  if (rc == 0 && renameat(pfd, tmp, pfd, name) < 0) {
    rc = -1, snprintf(detail, dsize, "rename: %s", strerror(errno));
    unlinkat(pfd, tmp, 0);
  }
  if (rc == 0) fsync(pfd);
  return rc;
}

/* Makes `name` in `pfd` what `row` keeps. 0, or -1 with `detail`. */
static int put_back(const char *store, const char *job, int rootfd, int pfd, const char *name,
                    json_t *row, const struct jb_pstore_item *now, char *detail, size_t dsize) {
  const char *kind = str(row, "kind");
  long long mode = mode_of(row, "mode");
  if (!strcmp(kind, "file"))
    return put_file(store, job, pfd, name, row, str(row, "sha256"), mode < 0 ? 0644 : (mode_t)mode,
                    detail, dsize);
  if (!strcmp(kind, "absent")) {
    int r = now->kind == JB_PSTORE_ABSENT ? 0
            : now->kind == JB_PSTORE_DIR  ? unlinkat(pfd, name, AT_REMOVEDIR)
                                          : unlinkat(pfd, name, 0);
    if (r < 0) snprintf(detail, dsize, "remove: %s", strerror(errno));
    return r < 0 ? -1 : (fsync(pfd), 0);
  }
  uid_t uid;
  gid_t gid;
  owner_of(pfd, name, row, &uid, &gid);
  if (!strcmp(kind, "dir")) {
    int r = now->kind == JB_PSTORE_DIR ? 0 : mkdirat(pfd, name, 0700);
    if (r == 0) (void)!fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW); /* best effort */
    if (r == 0) r = fchmodat(pfd, name, mode < 0 ? 0755 : (mode_t)mode, 0);
    if (r < 0) snprintf(detail, dsize, "folder: %s", strerror(errno));
    return r < 0 ? -1 : (fsync(pfd), 0);
  }
  if (!strcmp(kind, "link")) {
    char tmp[64];
    tmp_name(tmp, sizeof tmp);
    int r = symlinkat(str(row, "target") ?: "", pfd, tmp);
    if (r == 0) (void)!fchownat(pfd, tmp, uid, gid, AT_SYMLINK_NOFOLLOW); /* best effort */
    if (r == 0 && renameat(pfd, tmp, pfd, name) < 0) r = -1, unlinkat(pfd, tmp, 0);
    if (r < 0) snprintf(detail, dsize, "link: %s", strerror(errno));
    return r < 0 ? -1 : (fsync(pfd), 0);
  }
  if (!strcmp(kind, "rename")) { /* the folder back where it was, never over anything */
    const char *from = str(row, "fromPath"), *fname;
    int ffd = from ? jb_hostfs_open_parent(rootfd, from, &fname) : -1;
    int r = ffd < 0 ? -1 : renameat2(pfd, name, ffd, fname, RENAME_NOREPLACE);
    if (r < 0) snprintf(detail, dsize, "rename back: %s", strerror(errno));
    if (r == 0) fsync(ffd), fsync(pfd);
    if (ffd >= 0) close(ffd);
    return r;
  }
  snprintf(detail, dsize, "unknown kind %.20s", kind);
  return -1;
}

/* For a rename row: what its source path (fromPath) holds now (kind absent expected). */
static bool from_free(int rootfd, json_t *row) {
  struct jb_pstore_item f;
  jb_error e = {0};
  const char *from = str(row, "fromPath");
  return from && jb_pstore_take(NULL, "", rootfd, from, -1, &f, &e) == 0 &&
         f.kind == JB_PSTORE_ABSENT;
}

enum jb_restore_outcome jb_rollback_restore(const char *store_dir, const char *job, int rootfd,
                                            json_t *row, bool force, long long room,
                                            jb_restore_keep_fn keep, void *keep_ctx,
                                            struct jb_pstore_item *kept, char *detail,
                                            size_t dsize) {
  memset(kept, 0, sizeof *kept);
  detail[0] = '\0';
  const char *path = str(row, "path"), *kind = str(row, "kind");
  if (!path || !kind) return snprintf(detail, dsize, "malformed row"), JB_RESTORE_FAILED;
  struct jb_pstore_item now;
  jb_error e = {0};
  if (jb_pstore_take(NULL, job, rootfd, path, -1, &now, &e) < 0) /* a link on the way … */
    return snprintf(detail, dsize, "%s", e.msg), JB_RESTORE_FAILED;
  bool rename = !strcmp(kind, "rename");
  long long mode = mode_of(row, "mode");
  if (!strcmp(kind, "file") && mode >= 0) mode = restore_mode((mode_t)mode);
  /* what the row restores is there already (a rollback killed after its rename) */
  if (!rename && jb_restore_holds(&now, kind, str(row, "sha256"), mode, str(row, "target")))
    return JB_RESTORED;
  if (rename && now.kind == JB_PSTORE_ABSENT && !from_free(rootfd, row)) return JB_RESTORED;
  bool as_left = jb_restore_holds(&now, str(row, "afterKind"), str(row, "afterSha256"),
                                  mode_of(row, "afterMode"), NULL);
  if (rename && as_left && !from_free(rootfd, row)) {
    snprintf(detail, dsize, "%.300s is taken again", str(row, "fromPath"));
    return JB_CONFLICT; /* a rename never replaces what is at its source, even forced */
  }
  if (!as_left && (!force || rename)) {
    snprintf(detail, dsize, "changed since the op (now %s)", jb_pstore_kind_name(now.kind));
    return JB_CONFLICT;
  }
  const char *name;
  int pfd = jb_hostfs_open_parent(rootfd, path, &name);
  if (pfd < 0) return snprintf(detail, dsize, "its folder: %s", strerror(errno)), JB_RESTORE_FAILED;
  if (!as_left && now.kind != JB_PSTORE_ABSENT) { /* forced: keep what it overwrites */
    if (jb_pstore_take(store_dir, job, rootfd, path, room < 0 ? 0 : room, kept, &e) < 0) {
      close(pfd);
      snprintf(detail, dsize, "forced, but what is there cannot be kept: %s", e.msg);
      return JB_RESTORE_FAILED;
    }
    if (keep && keep(keep_ctx, row, kept) < 0) { /* recorded before it is overwritten */
      close(pfd);
      memset(kept, 0, sizeof *kept); /* not the caller's to record again */
      snprintf(detail, dsize, "forced, but what is there could not be recorded");
      return JB_RESTORE_FAILED;
    }
  }
  int rc = put_back(store_dir, job, rootfd, pfd, name, row, &now, detail, dsize);
  close(pfd);
  return rc == 0 ? JB_RESTORED : JB_RESTORE_FAILED;
}

/* What the path of file row `row` holds now (into `now`) and whether that is what the row
 * restores (*done) or what the op left (*as_left). -1 with `detail` when it cannot be read. */
static int file_state(const char *job, int rootfd, json_t *row, struct jb_pstore_item *now,
                      bool *done, bool *as_left, char *detail, size_t dsize) {
  jb_error e = {0};
  if (jb_pstore_take(NULL, job, rootfd, str(row, "path"), -1, now, &e) < 0)
    return snprintf(detail, dsize, "%s", e.msg), -1;
  long long mode = mode_of(row, "mode");
  if (mode >= 0) mode = restore_mode((mode_t)mode);
  *done = jb_restore_holds(now, "file", str(row, "sha256"), mode, NULL);
  *as_left = jb_restore_holds(now, str(row, "afterKind"), str(row, "afterSha256"),
                              mode_of(row, "afterMode"), NULL);
  return 0;
}

enum jb_restore_outcome jb_restore_stage(const char *store_dir, const char *job, int rootfd,
                                         json_t *row, struct jb_restore_staged *st, char *detail,
                                         size_t dsize) {
  st->pfd = -1;
  st->tmp[0] = '\0';
  detail[0] = '\0';
  const char *kind = str(row, "kind"), *path = str(row, "path");
  if (!path || !kind || strcmp(kind, "file") || !str(row, "sha256"))
    return snprintf(detail, dsize, "not a file's row"), JB_RESTORE_FAILED;
  struct jb_pstore_item now;
  bool done, as_left;
  if (file_state(job, rootfd, row, &now, &done, &as_left, detail, dsize) < 0)
    return JB_RESTORE_FAILED;
  if (done) return JB_RESTORED; /* there already (a run killed after its rename) */
  if (!as_left) {
    snprintf(detail, dsize, "changed since the op (now %s)", jb_pstore_kind_name(now.kind));
    return JB_CONFLICT;
  }
  int pfd = jb_hostfs_open_parent(rootfd, path, &st->name);
  if (pfd < 0) return snprintf(detail, dsize, "its folder: %s", strerror(errno)), JB_RESTORE_FAILED;
  long long mode = mode_of(row, "mode");
  if (write_temp(store_dir, job, pfd, st->name, row, str(row, "sha256"),
                 mode < 0 ? 0644 : (mode_t)mode, false, st->tmp, detail, dsize) < 0) {
    close(pfd);
    return JB_RESTORE_FAILED;
  }
  st->pfd = pfd;
  return JB_RESTORED;
}

enum jb_restore_outcome jb_restore_finish(const char *job, int rootfd, json_t *row,
                                          struct jb_restore_staged *st, char *detail,
                                          size_t dsize) {
  detail[0] = '\0';
  if (st->pfd < 0) return JB_RESTORED;
  struct jb_pstore_item now;
  bool done, as_left;
  enum jb_restore_outcome o = JB_RESTORED;
  if (file_state(job, rootfd, row, &now, &done, &as_left, detail, dsize) < 0) {
    o = JB_RESTORE_FAILED;
  } else if (!as_left && !done) { /* changed while it was staged: left alone */
    snprintf(detail, dsize, "changed since the op (now %s)", jb_pstore_kind_name(now.kind));
    o = JB_CONFLICT;
  } else if (renameat(st->pfd, st->tmp, st->pfd, st->name) < 0) {
    snprintf(detail, dsize, "rename: %s", strerror(errno));
    o = JB_RESTORE_FAILED;
  }
  if (o != JB_RESTORED) unlinkat(st->pfd, st->tmp, 0);
  jb_restore_staged_drop(st);
  return o;
}

void jb_restore_staged_drop(struct jb_restore_staged *st) {
  if (st->pfd < 0) return;
  if (st->tmp[0]) unlinkat(st->pfd, st->tmp, 0); /* not renamed: gone (ENOENT after a rename) */
  close(st->pfd);
  st->pfd = -1;
  st->tmp[0] = '\0';
}
