/* walls.c — probe, launch, check and describe the three walls (see walls.h). */
#define _GNU_SOURCE
#include "sandbox/worker/walls.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/worker/filter.h"
#include "sandbox/worker/secopt.h"
#include "sandbox/proto/shim.h"
#include "lib/log.h"
#include "lib/metrics.h"

extern char **environ;

const char *const jb_wall_names[JB_WALL_COUNT] = {"gvisor", "docker", "bwrap"};

/* Capabilities the container keeps under runsc. They exist only in gVisor's kernel: bwrap
 * needs SYS_ADMIN for its namespaces and mounts, SETPCAP to empty the bounding set, and
 * setpriv SETUID/SETGID to leave uid 0. Each was removed in turn on this host and the jail
 * then failed to build (or kept a non-empty bounding set, without SETPCAP). */
static const char *const gvisor_caps[] = {"SYS_ADMIN", "SETPCAP", "SETUID", "SETGID", NULL};
/* Without bwrap only setpriv's three are needed. */
static const char *const setpriv_caps[] = {"SETPCAP", "SETUID", "SETGID", NULL};

static long long epoch_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000L;
}

static void iso8601(long long ms, char *buf, size_t len) {
  time_t s = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&s, &tm);
  char head[32];
  strftime(head, sizeof head, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, len, "%s.%03lldZ", head, ms % 1000);
}

static void sha256_hex(const void *data, size_t len, char out[65]) {
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, data, len);
  sodium_bin2hex(out, 65, h, sizeof h);
}

/* Runs `path` `arg` and copies the first line of its stdout into `out`. 0 or -1. */
static int first_line_of(const char *path, const char *arg, char *out, size_t len) {
  out[0] = '\0';
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  char *const argv[] = {(char *)path, (char *)arg, NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, path, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  if (rc != 0) {
    close(p[0]);
    return -1;
  }
  size_t n = 0;
  for (;;) {
    ssize_t r = read(p[0], out + n, len - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
    if (n >= len - 1) break;
  }
  close(p[0]);
  out[n] = '\0';
  out[strcspn(out, "\n")] = '\0';
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  return n > 0 ? 0 : -1;
}

static json_t *str_array(const char *const list[]) {
  json_t *a = json_array();
  for (size_t i = 0; list[i]; i++) json_array_append_new(a, json_string(list[i]));
  return a;
}

/* ---- probe ---------------------------------------------------------------------------- */

static void down(struct jb_probe *p, enum jb_wall w, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void down(struct jb_probe *p, enum jb_wall w, const char *fmt, ...) {
  p->up[w] = false;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->reason[w], sizeof p->reason[w], fmt, ap);
  va_end(ap);
}

static bool has_arg(json_t *args, const char *want) {
  size_t i;
  json_t *a;
  json_array_foreach (args, i, a) {
    const char *s = json_string_value(a);
    if (s && strcmp(s, want) == 0) return true;
  }
  return false;
}

static bool host_has_apparmor(void) {
  char buf[8] = "";
  int fd = open("/sys/module/apparmor/parameters/enabled", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  return n > 0 && buf[0] == 'Y';
}

int jb_image_inspect(const struct jb_walls_config *cfg, const char *name, struct jb_image_info *out,
                     jb_error *err) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", name);
  char enc[3 * sizeof out->name], path[sizeof enc + 32];
  if (jb_docker_urlencode(name, enc, sizeof enc) < 0)
    return jb_fail(err, ENAMETOOLONG, "image name %s too long", name);
  snprintf(path, sizeof path, "/images/%s/json", enc);
  json_t *img = NULL;
  if (jb_docker_expect(&cfg->docker, "GET", path, NULL, 5000, &img, err) < 0) {
    if (err && err->code == 404)
      return jb_fail(err, ENOENT,
                     "image %s not present on this Docker daemon (build it with "
                     "deploy/sandbox-image/build.sh%s)",
                     name, strstr(name, "-build") ? " --userland" : "");
    return jb_fail(err, err && err->code ? err->code : EIO, "image %s: %s", name,
                   err ? err->msg : "?");
  }
  snprintf(out->id, sizeof out->id, "%s", json_string_value(json_object_get(img, "Id")) ?: "");
  json_t *labels = json_object_get(json_object_get(img, "Config"), "Labels");
  snprintf(out->digest, sizeof out->digest, "%s",
           json_string_value(json_object_get(labels, "jailbox.image.digest")) ?: "");
  snprintf(out->shim_sha256, sizeof out->shim_sha256, "%s",
           json_string_value(json_object_get(labels, "jailbox.shim.sha256")) ?: "");
  snprintf(out->bwrap_version, sizeof out->bwrap_version, "%s",
           json_string_value(json_object_get(labels, "jailbox.bwrap.version")) ?: "");
  json_decref(img);
  return 0;
}

void jb_probe_set_image(struct jb_probe *p, const struct jb_image_info *img) {
  snprintf(p->image_name, sizeof p->image_name, "%s", img->name);
  snprintf(p->image_id, sizeof p->image_id, "%s", img->id);
  snprintf(p->image_digest, sizeof p->image_digest, "%s", img->digest);
  snprintf(p->shim_sha256, sizeof p->shim_sha256, "%s", img->shim_sha256);
  snprintf(p->bwrap_version, sizeof p->bwrap_version, "%s", img->bwrap_version);
}

void jb_walls_probe(const struct jb_walls_config *cfg, struct jb_probe *p) {
  memset(p, 0, sizeof *p);
  long t0 = jb_now_ms();
  p->at_ms = epoch_ms();
  p->done = true;
  for (int w = 0; w < JB_WALL_COUNT; w++) p->up[w] = true;
  jb_error err = {0};

  /* Docker itself */
  json_t *v = NULL;
  if (jb_docker_expect(&cfg->docker, "GET", "/version", NULL, 5000, &v, &err) < 0) {
    down(p, JB_WALL_DOCKER, "Docker daemon not reachable: %s", err.msg);
    down(p, JB_WALL_GVISOR, "not probed: Docker is unavailable");
    down(p, JB_WALL_BWRAP, "not probed: Docker is unavailable");
    goto done;
  }
  snprintf(p->engine, sizeof p->engine, "%s",
           json_string_value(json_object_get(v, "Version")) ?: "?");
  snprintf(p->api, sizeof p->api, "%s", json_string_value(json_object_get(v, "ApiVersion")) ?: "?");
  json_decref(v);

  struct jb_image_info img;
  if (jb_image_inspect(cfg, cfg->image, &img, &err) < 0) {
    down(p, JB_WALL_DOCKER, "sandbox %s", err.msg);
    down(p, JB_WALL_GVISOR, "not probed: no sandbox image");
    down(p, JB_WALL_BWRAP, "not probed: no sandbox image");
    goto done;
  }
  jb_probe_set_image(p, &img);

  /* gVisor: registered, with the arguments the walls rely on */
  json_t *info = NULL;
  if (jb_docker_expect(&cfg->docker, "GET", "/info", NULL, 5000, &info, &err) < 0) {
    down(p, JB_WALL_GVISOR, "cannot read the daemon's runtimes: %s", err.msg);
  } else {
    json_t *rt = json_object_get(json_object_get(info, "Runtimes"), cfg->runtime);
    if (!rt) {
      down(p, JB_WALL_GVISOR,
           "runtime '%s' is not registered with Docker (deploy/register-runsc.sh)", cfg->runtime);
    } else {
      json_t *args = json_object_get(rt, "runtimeArgs");
      snprintf(p->runsc_path, sizeof p->runsc_path, "%s",
               json_string_value(json_object_get(rt, "path")) ?: "");
      char *a = json_dumps(args ? args : json_array(), JSON_COMPACT);
      snprintf(p->runsc_args, sizeof p->runsc_args, "%s", a ? a : "[]");
      free(a);
      if (!has_arg(args, "--network=none") || !has_arg(args, "--oci-seccomp"))
        down(p, JB_WALL_GVISOR,
             "runtime '%s' lacks runtimeArgs --network=none and --oci-seccomp (has %s)",
             cfg->runtime, p->runsc_args);
      if (p->runsc_path[0] &&
          first_line_of(p->runsc_path, "--version", p->runsc_version, sizeof p->runsc_version) < 0)
        snprintf(p->runsc_version, sizeof p->runsc_version, "unknown (%s --version failed)",
                 p->runsc_path);
    }
    json_t *so = json_object_get(info, "SecurityOptions");
    size_t i;
    json_t *s;
    bool docker_aa = false;
    json_array_foreach (so, i, s)
      if (json_string_value(s) && strstr(json_string_value(s), "name=apparmor")) docker_aa = true;
    p->apparmor_host = docker_aa && host_has_apparmor();
    json_decref(info);
  }

  /* Wall 3's filter */
  unsigned char *bpf = NULL;
  size_t bpf_len = 0;
  struct jb_filter_info fi;
  if (jb_filter_compile(&bpf, &bpf_len, &fi, &err) < 0) {
    down(p, JB_WALL_BWRAP, "syscall filter does not compile: %s", err.msg);
  } else {
    p->filter_rules = fi.rules;
    p->filter_syscalls = fi.syscalls;
    sha256_hex(bpf, bpf_len, p->filter_sha256);
    free(bpf);
  }

  if (!p->up[JB_WALL_GVISOR] && p->up[JB_WALL_BWRAP])
    down(p, JB_WALL_BWRAP, "not built: Wall 3 is built only under gVisor, which is unavailable");

  /* a real container with every wall that is still up, checked from inside */
  char ws[] = "/tmp/jailbox-probe.XXXXXX";
  if (!mkdtemp(ws)) {
    down(p, JB_WALL_DOCKER, "cannot make a probe workspace: %s", strerror(errno));
    goto done;
  }
  chmod(ws, 0755);
  json_t *limits = json_pack("{s:i, s:f, s:i}", "memoryMiB", 256, "cpus", 1.0, "pids", 64);
  json_t *lab = json_pack("{s:s}", "jailbox.probe", "1");
  struct jb_walls_config all = *cfg;
  for (int w = 0; w < JB_WALL_COUNT; w++) all.require[w] = false; /* build what can be built */
  struct jb_sandbox sb;
  enum jb_wall failed = JB_WALL_COUNT;
  struct jb_probe snapshot = *p;
  if (jb_sandbox_launch(&all, &snapshot, "probe", ws, limits, lab, &sb, &failed, &err) < 0) {
    down(p, failed == JB_WALL_COUNT ? JB_WALL_DOCKER : failed, "probe container: %s", err.msg);
    if (sb.contract) json_decref(sb.contract);
  } else {
    for (int w = 0; w < JB_WALL_COUNT; w++)
      if (p->up[w] && !sb.walls_up[w])
        down(p, (enum jb_wall)w, "probe container came up without it");
    jb_sandbox_destroy(cfg, &sb);
  }
  json_decref(limits);
  json_decref(lab);
  rmdir(ws);
done:
  p->duration_ms = jb_now_ms() - t0;
}

json_t *jb_probe_json(const struct jb_probe *p) {
  char at[40];
  iso8601(p->at_ms, at, sizeof at);
  json_t *walls = json_object();
  for (int w = 0; w < JB_WALL_COUNT; w++) {
    json_t *o = json_pack("{s:b}", "up", p->up[w]);
    if (!p->up[w]) json_object_set_new(o, "reason", json_string(p->reason[w]));
    json_object_set_new(walls, jb_wall_names[w], o);
  }
  return json_pack("{s:s, s:I, s:o}", "at", at, "durationMs", (json_int_t)p->duration_ms, "walls",
                   walls);
}

/* ---- launch --------------------------------------------------------------------------- */

static void add_args(json_t *cmd, const char *const list[]) {
  for (size_t i = 0; list[i]; i++) json_array_append_new(cmd, json_string(list[i]));
}

/* The container's command: the launcher, then bwrap with Wall 3, then setpriv, then the shim
 * (or, without Wall 3, setpriv and the shim directly). */
static json_t *container_cmd(bool bwrap, long jail_tmp_mib) {
  json_t *cmd = json_array();
  static const char *const setpriv[] = {JB_IMAGE_SETPRIV,  "--reuid",
                                        "65534",           "--regid",
                                        "65534",           "--clear-groups",
                                        "--inh-caps=-all", "--bounding-set=-all",
                                        "--no-new-privs",  "--",
                                        JB_IMAGE_SHIM,     NULL};
  if (!bwrap) {
    add_args(cmd, setpriv);
    return cmd;
  }
  static const char *const head[] = {
      JB_IMAGE_SHIM, "--launch", "--", JB_IMAGE_BWRAP,
      /* directories bwrap would create 0700 (unreadable after the switch to uid 65534) */
      "--perms", "0755", "--dir", "/usr", "--perms", "0755", "--dir", "/usr/bin", "--perms", "0755",
      "--dir", "/opt", "--perms", "0755", "--dir", "/opt/jailbox", "--perms", "0755", "--dir",
      "/opt/jailbox/bin",
      /* the minimal tree: setpriv and its libraries, the shim, the workspace */
      "--ro-bind", "/lib", "/lib", "--ro-bind", "/lib64", "/lib64", "--ro-bind", JB_IMAGE_SETPRIV,
      JB_IMAGE_SETPRIV, "--ro-bind", JB_IMAGE_SHIM, JB_IMAGE_SHIM, "--bind", "/workspace",
      "/workspace", NULL};
  add_args(cmd, head);
  char size[32];
  snprintf(size, sizeof size, "%ld", jail_tmp_mib * 1024 * 1024);
  json_array_append_new(cmd, json_string("--perms"));
  json_array_append_new(cmd, json_string("1777"));
  json_array_append_new(cmd, json_string("--size"));
  json_array_append_new(cmd, json_string(size));
  static const char *const tail[] = {"--tmpfs",
                                     "/tmp",
                                     "--proc",
                                     "/proc",
                                     "--remount-ro",
                                     "/",
                                     "--chdir",
                                     "/workspace",
                                     "--clearenv",
                                     "--unshare-pid",
                                     "--unshare-ipc",
                                     "--unshare-uts",
                                     "--unshare-cgroup-try",
                                     "--die-with-parent",
                                     "--new-session",
                                     "--cap-drop",
                                     "ALL",
                                     "--cap-add",
                                     "CAP_SETUID",
                                     "--cap-add",
                                     "CAP_SETGID",
                                     "--cap-add",
                                     "CAP_SETPCAP",
                                     "--seccomp",
                                     "3",
                                     NULL};
  add_args(cmd, tail);
  add_args(cmd, setpriv);
  return cmd;
}

struct limits {
  long long memory_bytes, nano_cpus, pids, host_pids;
};

static void read_limits(const json_t *l, bool gvisor, struct limits *out) {
  json_int_t mem = json_integer_value(json_object_get(l, "memoryMiB"));
  double cpus = json_number_value(json_object_get(l, "cpus"));
  json_int_t pids = json_integer_value(json_object_get(l, "pids"));
  if (mem <= 0) mem = 1024;
  if (cpus <= 0) cpus = 1.0;
  if (pids <= 0) pids = 256;
  out->memory_bytes = (long long)mem * 1024 * 1024;
  out->nano_cpus = (long long)(cpus * 1e9);
  out->pids = pids;
  /* Under gVisor the host's pids cgroup also counts the Sentry's own threads (about two per
   * jailed process were seen); hitting it crashes the whole sandbox instead of failing a
   * fork. The jail's limit is therefore RLIMIT_NPROC inside gVisor (uid 65534 is the jail's
   * alone there), and the host limit sits above it with room for the Sentry. */
  out->host_pids = gvisor ? 4 * pids + 256 : pids;
}

/* `socket_dir`: the session's shim socket directory on the host, bind-mounted read-only
 * at JB_IMAGE_SHIM_SOCKET_DIR (NULL: no socket channel). */
static json_t *create_body(const struct jb_walls_config *cfg, const char *workspace,
                           const json_t *labels, bool gvisor, bool bwrap, bool apparmor,
                           const struct limits *lim, const char *socket_dir, bool spawner) {
  json_t *lab = json_pack("{s:s, s:s}", "jailbox.worker", cfg->worker_id, "jailbox.deployment",
                          cfg->deployment);
  if (labels) json_object_update(lab, (json_t *)labels);
  json_t *secopt = json_array();
  json_array_append_new(secopt, json_string("no-new-privileges=true"));
  char *seccomp = malloc(cfg->profile_len + 9);
  if (seccomp) {
    memcpy(seccomp, "seccomp=", 8);
    memcpy(seccomp + 8, cfg->profile, cfg->profile_len);
    seccomp[8 + cfg->profile_len] = '\0';
    json_array_append_new(secopt, json_string(seccomp));
    free(seccomp);
  }
  if (apparmor) json_array_append_new(secopt, json_string("apparmor=docker-default"));
  char tmpfs[64];
  snprintf(tmpfs, sizeof tmpfs, "rw,nosuid,nodev,size=%ldm", cfg->container_tmp_mib);
  json_t *ulimits = json_array();
  json_array_append_new(ulimits,
                        json_pack("{s:s, s:i, s:i}", "Name", "core", "Soft", 0, "Hard", 0));
  json_array_append_new(ulimits,
                        json_pack("{s:s, s:i, s:i}", "Name", "nofile", "Soft", 1024, "Hard", 1024));
  if (gvisor)
    json_array_append_new(ulimits, json_pack("{s:s, s:I, s:I}", "Name", "nproc", "Soft",
                                             (json_int_t)lim->pids, "Hard", (json_int_t)lim->pids));
  json_t *host = json_pack(
      "{s:s, s:s, s:[s], s:o, s:o, s:b, s:{s:s}, s:I, s:I, s:I, s:I, s:o,"
      " s:[{s:s, s:s, s:s, s:b, s:{s:s}}], s:s, s:{s:s}, s:i, s:b, s:b}",
      "Runtime", gvisor ? cfg->runtime : "runc", "NetworkMode", "none", "CapDrop", "ALL", "CapAdd",
      str_array(gvisor && bwrap ? gvisor_caps : setpriv_caps), "SecurityOpt", secopt,
      "ReadonlyRootfs", 1, "Tmpfs", "/tmp", tmpfs, "Memory", (json_int_t)lim->memory_bytes,
      "MemorySwap", (json_int_t)lim->memory_bytes, "NanoCpus", (json_int_t)lim->nano_cpus,
      "PidsLimit", (json_int_t)lim->host_pids, "Ulimits", ulimits, "Mounts", "Type", "bind",
      "Source", workspace, "Target", "/workspace", "ReadOnly", 0, "BindOptions", "Propagation",
      "rprivate", "IpcMode", "private", "LogConfig", "Type", "none", "OomScoreAdj", 500,
      "Privileged", 0, "AutoRemove", 0);
  json_t *env = json_array();
  if (socket_dir)
    json_array_append_new(
        env, json_string(JB_SHIM_SOCKET_ENV "=" JB_IMAGE_SHIM_SOCKET_DIR "/" JB_SHIM_SOCKET_NAME));
  if (socket_dir && spawner) json_array_append_new(env, json_string(JB_SHIM_SPAWNER_ENV "=1"));
  if (host && socket_dir)
    json_array_append_new(json_object_get(host, "Mounts"),
                          json_pack("{s:s, s:s, s:s, s:b, s:{s:s}}", "Type", "bind", "Source",
                                    socket_dir, "Target", JB_IMAGE_SHIM_SOCKET_DIR, "ReadOnly", 1,
                                    "BindOptions", "Propagation", "rprivate"));
  return json_pack(
      "{s:s, s:o, s:n, s:o, s:s, s:s, s:s, s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:o, s:o}", "Image",
      cfg->image, "Cmd", container_cmd(bwrap, cfg->jail_tmp_mib), "Entrypoint", "Env", env,
      "WorkingDir", "/", "User", "0:0", "Hostname", "jailbox", "OpenStdin", 1, "StdinOnce", 1,
      "AttachStdin", 1, "AttachStdout", 1, "AttachStderr", 1, "Tty", 0, "NetworkDisabled", 1,
      "Labels", lab, "HostConfig", host);
}

int jb_container_remove(const struct jb_walls_config *cfg, const char *id, jb_error *err) {
  char path[256];
  snprintf(path, sizeof path, "/containers/%s?force=1&v=1", id);
  long status = 0;
  if (jb_docker_call(&cfg->docker, "DELETE", path, NULL, 30000, &status, NULL, err) < 0) return -1;
  if (status == 204 || status == 404) return 0;
  /* 409: removal already in progress */
  if (status == 409) return 0;
  return jb_fail(err, (int)status, "docker DELETE container %.12s: status %ld", id, status);
}

void jb_sandbox_destroy(const struct jb_walls_config *cfg, struct jb_sandbox *sb) {
  jb_spawner_close(&sb->spawner);
  if (sb->conn_open) jb_shimconn_close(&sb->conn);
  sb->conn_open = false;
  if (sb->container_id[0]) {
    jb_error err = {0};
    (void)jb_container_remove(cfg, sb->container_id, &err);
  }
  sb->container_id[0] = '\0';
  json_decref(sb->contract);
  sb->contract = NULL;
}

/* Checks on the jailed process's own view. Appends "what is wrong" to `problems` of the wall
 * concerned. */
struct check {
  json_t *problems[JB_WALL_COUNT];
};

static void problem(struct check *c, enum jb_wall w, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void problem(struct check *c, enum jb_wall w, const char *fmt, ...) {
  char buf[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  json_array_append_new(c->problems[w], json_string(buf));
}

static bool all_zero(const char *hex) {
  if (!hex || !*hex) return false;
  for (; *hex; hex++)
    if (*hex != '0') return false;
  return true;
}

/* `later`: the shim has served ops since its launch; it then holds the workspace open (its
 * root for openat2), which is the one descriptor besides stdio allowed. */
static void check_status(const json_t *st, bool gvisor, bool bwrap, bool later, struct check *c) {
  /* the jailed process: whichever wall put it there (bwrap + setpriv, or setpriv alone) */
  enum jb_wall jw = bwrap ? JB_WALL_BWRAP : JB_WALL_DOCKER;
  json_int_t euid = json_integer_value(json_object_get(json_object_get(st, "uid"), "effective"));
  json_int_t ruid = json_integer_value(json_object_get(json_object_get(st, "uid"), "real"));
  if (euid != JB_JAIL_UID || ruid != JB_JAIL_UID)
    problem(c, jw, "jailed uid is %lld/%lld, not %d", (long long)ruid, (long long)euid,
            JB_JAIL_UID);
  json_t *caps = json_object_get(st, "capabilities");
  static const char *const capkeys[] = {"effective",   "permitted",       "bounding",
                                        "inheritable", "effectiveCapget", "permittedCapget"};
  for (size_t i = 0; i < sizeof capkeys / sizeof capkeys[0]; i++) {
    const char *v = json_string_value(json_object_get(caps, capkeys[i]));
    if (!all_zero(v)) problem(c, jw, "capability set %s is %s", capkeys[i], v ? v : "unknown");
  }
  if (json_integer_value(json_object_get(st, "noNewPrivs")) != 1)
    problem(c, jw, "no_new_privs is not set");
  json_t *fds = json_object_get(st, "fds");
  size_t i;
  json_t *f;
  json_array_foreach (fds, i, f) {
    json_int_t fd = json_integer_value(json_object_get(f, "fd"));
    const char *target = json_string_value(json_object_get(f, "target"));
    if (later && target && !strcmp(target, "/workspace")) continue;
    if (fd > 2)
      problem(c, jw, "unexpected open descriptor %lld (%s)", (long long)fd,
              json_string_value(json_object_get(f, "target")) ?: "?");
  }
  /* Wall 2: no network but loopback */
  json_t *nd = json_object_get(st, "netdevs");
  json_array_foreach (nd, i, f) {
    const char *n = json_string_value(f);
    if (!n || strcmp(n, "lo") != 0)
      problem(c, JB_WALL_DOCKER, "network interface '%s' present", n ? n : "?");
  }
  /* Wall 1: a kernel that is not the host's */
  if (gvisor) {
    struct utsname u;
    uname(&u);
    const char *k = json_string_value(json_object_get(st, "kernel"));
    if (!k || strcmp(k, u.release) == 0)
      problem(c, JB_WALL_GVISOR, "the jail sees the host's kernel %s", u.release);
  }
  if (!bwrap) return;
  /* Wall 3 */
  if (json_integer_value(json_object_get(st, "seccomp")) != 2)
    problem(c, JB_WALL_BWRAP, "seccomp filter not in force");
  if (json_array_size(json_object_get(st, "pids")) > 2)
    problem(c, JB_WALL_BWRAP, "the jail sees %zu processes",
            json_array_size(json_object_get(st, "pids")));
  if (json_is_true(json_object_get(st, "sysPresent"))) problem(c, JB_WALL_BWRAP, "/sys is visible");
  bool root_ro = false;
  json_t *mounts = json_object_get(st, "mounts");
  json_array_foreach (mounts, i, f) {
    const char *path = json_string_value(json_object_get(f, "path"));
    const char *opts = json_string_value(json_object_get(f, "options"));
    if (path && opts && strcmp(path, "/") == 0)
      root_ro = strncmp(opts, "ro", 2) == 0 && (opts[2] == '\0' || opts[2] == ',');
  }
  if (!root_ro) problem(c, JB_WALL_BWRAP, "the jail's root is not read-only");
}

/* Reads the parts of `docker inspect` the contract reports and checks Wall 2's settings. */
static json_t *inspect_settings(const struct jb_walls_config *cfg, const char *id, bool gvisor,
                                struct check *c, jb_error *err) {
  char path[128];
  snprintf(path, sizeof path, "/containers/%s/json", id);
  json_t *in = NULL;
  if (jb_docker_expect(&cfg->docker, "GET", path, NULL, 10000, &in, err) < 0) return NULL;
  json_t *hc = json_object_get(in, "HostConfig");
  const char *rt = json_string_value(json_object_get(hc, "Runtime"));
  if (gvisor && (!rt || strcmp(rt, cfg->runtime) != 0))
    problem(c, JB_WALL_GVISOR, "container runtime is %s", rt ? rt : "unknown");
  if (!json_is_true(json_object_get(hc, "ReadonlyRootfs")))
    problem(c, JB_WALL_DOCKER, "root filesystem is writable");
  const char *nm = json_string_value(json_object_get(hc, "NetworkMode"));
  if (!nm || strcmp(nm, "none") != 0)
    problem(c, JB_WALL_DOCKER, "network mode is %s", nm ? nm : "unknown");
  bool nnp, sc; /* as Docker applies the options: the last of each kind decides */
  jb_secopt_judge(json_object_get(hc, "SecurityOpt"), cfg->profile, cfg->profile_len, &nnp, &sc);
  if (!nnp) problem(c, JB_WALL_DOCKER, "no-new-privileges not set");
  if (!sc) problem(c, JB_WALL_DOCKER, "seccomp profile not set, or not jailbox's");
  json_t *out = json_pack(
      "{s:s, s:O, s:O, s:O, s:O, s:O, s:O, s:O}", "runtime", rt ? rt : "?", "capDrop",
      json_object_get(hc, "CapDrop"), "capAdd", json_object_get(hc, "CapAdd"), "readOnlyRootfs",
      json_object_get(hc, "ReadonlyRootfs"), "networkMode", json_object_get(hc, "NetworkMode"),
      "tmpfs", json_object_get(hc, "Tmpfs") ?: json_null(), "ulimits",
      json_object_get(hc, "Ulimits") ?: json_null(), "state",
      json_object_get(json_object_get(in, "State"), "Status") ?: json_null());
  json_decref(in);
  return out;
}

int jb_sandbox_recheck(const struct jb_walls_config *cfg, struct jb_sandbox *sb, jb_error *err) {
  bool gvisor = sb->walls_up[JB_WALL_GVISOR], bwrap = sb->walls_up[JB_WALL_BWRAP];
  json_t *req = json_pack("{s:s}", "op", "status");
  json_t *ans = req ? jb_shimconn_call(&sb->conn, req, cfg->call_timeout_ms, err) : NULL;
  json_decref(req);
  if (!ans || !json_is_true(json_object_get(ans, "ok"))) {
    json_decref(ans);
    return ans ? jb_fail(err, EPROTO, "shim status: refused") : -1;
  }
  struct check chk;
  for (int w = 0; w < JB_WALL_COUNT; w++) chk.problems[w] = json_array();
  check_status(json_object_get(ans, "result"), gvisor, bwrap, true, &chk);
  json_decref(ans);
  json_t *settings = inspect_settings(cfg, sb->container_id, gvisor, &chk, err);
  int rc = settings ? 0 : -1;
  json_decref(settings);
  for (int w = 0; w < JB_WALL_COUNT && rc == 0; w++)
    if (sb->walls_up[w] && json_array_size(chk.problems[w]) > 0)
      rc = jb_fail(err, EPERM, "%s: not as specified any more: %s", jb_wall_names[w],
                   json_string_value(json_array_get(chk.problems[w], 0)));
  for (int w = 0; w < JB_WALL_COUNT; w++) json_decref(chk.problems[w]);
  return rc;
}

/* Which wall a failure at a given step points at. */
static enum jb_wall blame_start(const char *msg, bool gvisor) {
  /* the image lacks a program the command names */
  if (strstr(msg, "no such file or directory") || strstr(msg, "not found")) return JB_WALL_DOCKER;
  if (strstr(msg, "runtime") || strstr(msg, "runsc") || strstr(msg, "gvisor"))
    return JB_WALL_GVISOR;
  return gvisor ? JB_WALL_GVISOR : JB_WALL_DOCKER;
}

static enum jb_wall blame_output(const char *stderr_tail, bool bwrap) {
  if (strstr(stderr_tail, "bwrap") || strstr(stderr_tail, "setpriv") ||
      strstr(stderr_tail, "jailbox-shim: launch"))
    return bwrap ? JB_WALL_BWRAP : JB_WALL_DOCKER;
  return JB_WALL_COUNT;
}

static int fail_wall(enum jb_wall *failed, enum jb_wall w, jb_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_wall(enum jb_wall *failed, enum jb_wall w, jb_error *err, const char *fmt, ...) {
  char msg[JB_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  *failed = w;
  return jb_fail(err, err && err->code ? err->code : EIO, "%s: %s",
                 w < JB_WALL_COUNT ? jb_wall_names[w] : "walls", msg);
}

static json_t *timings_json(const long t[], const char *const names[], size_t n) {
  json_t *o = json_object();
  for (size_t i = 1; i < n; i++)
    if (t[i]) json_object_set_new(o, names[i], json_integer(t[i] - t[i - 1]));
  return o;
}

json_t *jb_walls_residual_risks(const struct jb_walls_config *cfg, const bool up[JB_WALL_COUNT],
                                bool apparmor) {
  json_t *r = json_array();
#define RISK(s) json_array_append_new(r, json_string(s))
  if (up[JB_WALL_GVISOR])
    RISK(
        "gVisor's Sentry is one shared surface: a Sentry flaw combined with a flaw in the few host "
        "syscalls the Sentry itself may make would reach the host kernel.");
  else
    RISK(
        "Wall 1 is missing: the jail runs on the host kernel (runc), so any kernel flaw reachable "
        "through the remaining filters is a way out.");
  if (!up[JB_WALL_BWRAP])
    RISK(
        "Wall 3 is missing: no private mount, pid, ipc and uts namespaces and no per-jail syscall "
        "filter; the shim runs in the container's own view.");
  RISK(
      "The container starts as root inside gVisor with SYS_ADMIN, SETPCAP, SETUID and SETGID so "
      "that bwrap can build Wall 3; they exist only in gVisor's kernel and are gone from the "
      "jailed process (checked from inside at every launch).");
  RISK(
      "Wall 2's profile allows mount, umount2, pivot_root and clone with namespace flags because "
      "bwrap needs them; only Wall 3's filter takes them from the jailed process.");
  RISK(
      "The workspace is bind-mounted read-write: whatever the shim is asked to write lands in "
      "the buyer's files; the policy, scanner and supervision above decide what reaches it.");
  RISK(
      "Only memory, CPU and process count are limited: disk use inside the workspace has no "
      "quota, and timing side channels between sessions on one host are not addressed.");
  RISK(
      "jailbox-worker holds the Docker socket, which is root on this host: a flaw in the worker "
      "is a flaw in every wall.");
  if (apparmor)
    RISK(
        "AppArmor's docker-default profile is requested; whether runsc applies it to anything "
        "but its own host processes was not verified (the test hosts have no AppArmor).");
  else
    RISK("No AppArmor: the host kernel has none, so Wall 2 has no mandatory access control layer.");
  if (cfg->override)
    RISK(
        "Development override: JAILBOX_REQUIRE_WALLS is narrower than gvisor,docker,bwrap, so "
        "sessions may run with fewer walls than the product promises.");
#undef RISK
  return r;
}

/* The contract's "exec": whether commands can run, and the jail and filter they run under
 * (`reason`: borrowed string, NULL when available; `fi`: exec's filter, NULL when none). */
static json_t *exec_contract(struct jb_spawner *sp, json_t *reason, const struct jb_filter_info *fi,
                             const char *sha) {
  bool up = !reason && sp->fd >= 0;
  json_t *o = json_pack("{s:b}", "available", up);
  if (!up)
    json_object_set_new(o, "reason", reason ? json_incref(reason) : json_string("unavailable"));
  if (sp->hello)
    json_object_set_new(
        o, "spawner",
        json_pack("{s:O, s:O, s:s}", "protocol", json_object_get(sp->hello, "protocol"), "pid",
                  json_object_get(sp->hello, "pid") ?: json_null(), "what",
                  "the launcher kept alive (root of gVisor's kernel, in no jail): "
                  "takes requests only from the worker's second connection and "
                  "builds one bwrap jail per command, the next one ahead of its request"));
  json_t *binds = sp->hello ? json_object_get(sp->hello, "binds") : NULL;
  json_t *image_binds = binds ? json_incref(binds) : json_array(); /* taken by the pack */
  json_object_set_new(
      o, "jail",
      json_pack("{s:s, s:[s,s,s,s,s], s:s, s:i, s:i, s:s, s:b, s:s, s:s, s:s, s:o, s:s, s:s, s:s,"
                " s:{s:s, s:s, s:s, s:s, s:s}}",
                "builtBy",
                "bwrap per command, started by the spawner: the next command's jail is built "
                "after the last one ended (and when the session becomes active), its helper "
                "waiting for the command's argv, env, cwd, stdin and limits; it is used by one "
                "command only and killed when the session is paused; a command whose workspace "
                "mode or /tmp size differs from it gets a jail built for it",
                "namespacesNew", "mount",
                "pid (cannot see or signal the shim; its pid 1's death ends every process of it)",
                "ipc", "uts", "cgroup (where the runtime allows)", "privilegeDrop",
                "setpriv --reuid 65534 --regid 65534 --clear-groups --inh-caps=-all "
                "--bounding-set=-all --no-new-privs",
                "uid", JB_JAIL_UID, "gid", JB_JAIL_UID, "capabilities", "none", "noNewPrivs", 1,
                "network",
                "none: AF_UNIX sockets only (Wall 2's profile refuses every other family with "
                "EPERM, under exec's filter that would let AF_INET and AF_INET6 through to "
                "gVisor's loopback-only stack, runsc --network=none)",
                "workspace", "/workspace read-only, read-write when the request says writable",
                "tmp", "its own tmpfs at /tmp (limits.tmpBytes, default 128 MiB)", "imageBinds",
                image_binds, "proc", "its own (the command's pid namespace)", "dev",
                "bwrap's minimal /dev (null, zero, full, random, urandom, tty, pts, shm)", "env",
                "PATH, HOME=/tmp, LANG=C.UTF-8, TERM=dumb, then the request's (no LD_*), applied "
                "after setpriv by the static helper jailbox-shim --exec, which also sets the "
                "request's RLIMIT_FSIZE and RLIMIT_NPROC and cwd",
                "limits", "wallClock",
                "timeoutMs: SIGKILL to the jail's pid 1 (the whole tree) at the timeout", "output",
                "maxOutputBytes per stream sent; the rest counted, not sent", "fsize",
                "RLIMIT_FSIZE (default 1 GiB)", "nproc",
                "RLIMIT_NPROC of uid 65534 (default: the container's limit less 4)", "memory",
                "the container's limit (over it the sandbox is killed: the result says oom)"));
  json_object_set_new(
      o, "checksFromInside",
      json_string("not probed at launch (jailSeenFromInside is the shim's jail); a program run as "
                  "a command checks each wall with its expected failure: no network (AF_UNIX "
                  "sockets only, lo the only interface), no capability (CapEff, CapPrm, CapBnd), "
                  "no_new_privs, read-only "
                  "root, /usr and workspace (EROFS; read-write only when writable), the "
                  "escape-shaped syscalls killed (SIGSYS, seccomp_kill), the uncommon ones "
                  "failing (EPERM, ENOSYS), its own /proc, no /sys, no descriptor above 2, "
                  "TIOCSTI killed, the process limit (EAGAIN), oom, gVisor's kernel "
                  "(tests/node/exec_checks.test.mjs)"));
  if (fi) {
    json_t *desc = jb_exec_filter_describe();
    json_object_set_new(
        o, "filter",
        json_pack("{s:I, s:I, s:I, s:I, s:s, s:s, s:o}", "syscalls", (json_int_t)fi->syscalls,
                  "rules", (json_int_t)fi->rules, "killRules", (json_int_t)fi->kill_rules,
                  "errnoRules", (json_int_t)fi->errno_rules, "bpfSha256", sha, "compiledWith",
                  "libseccomp (seccomp_export_bpf), handed to each command's bwrap "
                  "--seccomp",
                  "filter", desc ? desc : json_null()));
  }
  return o;
}

/* ---- the launch, stage by stage ----------------------------------------------------------- */

/* The timings a launch records (ms since the epoch; the contract's timingsMs). */
enum { T_START, T_CREATE, T_ATTACH, T_RUN, T_READY, T_STATUS, T_PING, T_N };
static const char *const tnames[] = {"",        "createMs", "attachMs", "startMs",
                                     "readyMs", "statusMs", "pingMs"};

/* One launch in progress (jb_sandbox_launch): its arguments, what each stage found or built
 * (owned here until launch_end, but sb's), and what the contract is written from. */
struct launch {
  const struct jb_walls_config *cfg;
  const struct jb_probe *probe;
  const char *job_id, *workspace;
  const json_t *limits, *labels;
  struct jb_sandbox *sb;
  enum jb_wall *failed;
  jb_error *err;
  long t[T_N];
  bool use[JB_WALL_COUNT]; /* which walls can be built here */
  bool gvisor, bwrap, apparmor;
  struct limits lim;
  json_t *body, *created, *status, *settings; /* new */
  struct check chk;
  unsigned char *bpf; /* Wall 3's filter */
  size_t bpf_len;
  struct jb_filter_info fi;
  char bpf_sha[65];
  /* exec's filter, handed to the spawner (only with the socket channel: its own connection) */
  unsigned char *xbpf;
  size_t xbpf_len;
  struct jb_filter_info xfi;
  char xbpf_sha[65];
  json_t *exec_reason; /* why exec is unavailable (a string), NULL: it is */
  /* the shim's channel: a per-session socket when the launcher runs (Wall 3) and it is on */
  struct jb_shim_listener lsn;
  json_t *channel;
  long ready_deadline; /* jb_now_ms by which the shim must be ready */
};

/* The launch's start: `sb` empty, the walls this host can build (the probe; Wall 3 is built
 * with gVisor's capabilities: without gVisor it is not offered here, as bwrap under runc would
 * need unprivileged user namespaces and an unmasked /proc) and the session's limits. */
static void launch_init(struct launch *L) {
  memset(L->sb, 0, sizeof *L->sb);
  jb_spawner_init(&L->sb->spawner);
  snprintf(L->sb->job_id, sizeof L->sb->job_id, "%s", L->job_id);
  *L->failed = JB_WALL_COUNT;
  L->t[T_START] = jb_now_ms();
  for (int w = 0; w < JB_WALL_COUNT; w++) L->chk.problems[w] = json_array();
  for (int w = 0; w < JB_WALL_COUNT; w++) L->use[w] = L->probe ? L->probe->up[w] : true;
  if (!L->use[JB_WALL_GVISOR]) L->use[JB_WALL_BWRAP] = false;
  L->gvisor = L->use[JB_WALL_GVISOR];
  L->bwrap = L->use[JB_WALL_BWRAP];
  L->apparmor = L->probe && L->probe->apparmor_host;
  read_limits(L->limits, L->gvisor, &L->lim);
}

/* Whether the walls this host can build are enough: -1 with Docker down or a required
 * wall missing. */
static int launch_walls_allowed(struct launch *L) {
  if (!L->use[JB_WALL_DOCKER]) {
    fail_wall(L->failed, JB_WALL_DOCKER, L->err, "unavailable: %s",
              L->probe ? L->probe->reason[JB_WALL_DOCKER] : "?");
    return -1;
  }
  for (int w = 0; w < JB_WALL_COUNT; w++)
    if (L->cfg->require[w] && !L->use[w]) {
      const char *why = L->probe && !L->probe->up[w] ? L->probe->reason[w]
                        : w == JB_WALL_BWRAP
                            ? "Wall 3 is built only under gVisor, which is unavailable"
                            : "unavailable";
      fail_wall(L->failed, (enum jb_wall)w, L->err, "required but unavailable: %s", why);
      return -1;
    }
  return 0;
}

/* Wall 3's filter compiled, the shim's channel chosen (a per-session socket when the
 * launcher runs and it is on; its listener opened) and exec's filter compiled when the spawner
 * can have its own connection (else why exec is unavailable). -1 when Wall 3's filter does not
 * compile. */
static int launch_filters(struct launch *L) {
  if (L->bwrap) {
    if (jb_filter_compile(&L->bpf, &L->bpf_len, &L->fi, L->err) < 0) {
      fail_wall(L->failed, JB_WALL_BWRAP, L->err, "syscall filter: %s", L->err->msg);
      return -1;
    }
    sha256_hex(L->bpf, L->bpf_len, L->bpf_sha);
  }
  if (!L->bwrap) {
    L->channel = json_pack("{s:s, s:s}", "kind", "attach", "reason",
                           "no launcher without Wall 3: setpriv starts the shim directly");
  } else if (L->cfg->shim_socket_off) {
    L->channel = json_pack("{s:s, s:s}", "kind", "attach", "reason",
                           "socket channel turned off (JAILBOX_SHIM_SOCKET_DIR=none)");
  } else {
    jb_error lerr = {0};
    if (jb_shim_listener_open(&L->lsn, L->cfg->shim_socket_dir, JB_SHIM_SOCKET_NAME, &lerr) < 0)
      L->channel = json_pack("{s:s, s:s+}", "kind", "attach", "reason",
                             "cannot make the session's shim socket: ", lerr.msg);
  }
  if (L->lsn.fd >= 0) {
    jb_error xerr = {0};
    if (jb_exec_filter_compile(&L->xbpf, &L->xbpf_len, &L->xfi, &xerr) < 0)
      L->exec_reason = json_sprintf("exec's syscall filter does not compile: %s", xerr.msg);
    else
      sha256_hex(L->xbpf, L->xbpf_len, L->xbpf_sha);
  } else {
    L->exec_reason = json_string(
        L->bwrap ? "the spawner needs the socket channel, which this session does not have"
                 : "exec runs only inside Wall 3 (bwrap under gVisor), which this session "
                   "does not have");
  }
  return 0;
}

/* The container created (Wall 2's settings, Wall 1's runtime). */
static int launch_create(struct launch *L) {
  L->body = create_body(L->cfg, L->workspace, L->labels, L->gvisor, L->bwrap, L->apparmor, &L->lim,
                        L->lsn.fd >= 0 ? L->lsn.dir : NULL, L->xbpf != NULL);
  if (!L->body) {
    fail_wall(L->failed, JB_WALL_DOCKER, L->err, "cannot build the container request");
    return -1;
  }
  if (jb_docker_expect(&L->cfg->docker, "POST", "/containers/create", L->body, 30000, &L->created,
                       L->err) < 0) {
    fail_wall(L->failed, blame_start(L->err->msg, L->gvisor), L->err, "create: %s", L->err->msg);
    return -1;
  }
  snprintf(L->sb->container_id, sizeof L->sb->container_id, "%s",
           json_string_value(json_object_get(L->created, "Id")) ?: "");
  L->t[T_CREATE] = jb_now_ms();
  return 0;
}

/* Its attach stream taken: the shim's stdin and stdout until a socket replaces them. */
static int launch_attach(struct launch *L) {
  struct jb_docker_stream st;
  if (jb_docker_attach(&L->cfg->docker, L->sb->container_id, &st, 10000, L->err) < 0) {
    fail_wall(L->failed, JB_WALL_DOCKER, L->err, "attach: %s", L->err->msg);
    return -1;
  }
  if (jb_shimconn_init(&L->sb->conn, &st, L->err) < 0) {
    jb_docker_stream_close(&st);
    fail_wall(L->failed, JB_WALL_DOCKER, L->err, "%s", L->err->msg);
    return -1;
  }
  L->sb->conn_open = true;
  L->t[T_ATTACH] = jb_now_ms();
  return 0;
}

/* The container started. */
static int launch_start(struct launch *L) {
  char path[160];
  snprintf(path, sizeof path, "/containers/%s/start", L->sb->container_id);
  if (jb_docker_expect(&L->cfg->docker, "POST", path, NULL, 60000, NULL, L->err) < 0) {
    fail_wall(L->failed, blame_start(L->err->msg, L->gvisor), L->err, "start: %s", L->err->msg);
    return -1;
  }
  L->t[T_RUN] = jb_now_ms();
  return 0;
}

/* Wall 3's filter, then exec's, handed to the launcher on the attach stream (bwrap
 * --seccomp reads them from there). */
static int launch_hand_filters(struct launch *L) {
  if (L->bwrap) {
    char head[64];
    int hn = snprintf(head, sizeof head, JB_SHIM_FILTER_MAGIC " %zu\n", L->bpf_len);
    if (jb_shimconn_send_raw(&L->sb->conn, head, (size_t)hn, 5000, L->err) < 0 ||
        jb_shimconn_send_raw(&L->sb->conn, L->bpf, L->bpf_len, 5000, L->err) < 0) {
      fail_wall(L->failed, JB_WALL_BWRAP, L->err, "handing over the filter: %s", L->err->msg);
      return -1;
    }
    if (L->xbpf) {
      hn = snprintf(head, sizeof head, JB_SHIM_EXEC_FILTER_MAGIC " %zu\n", L->xbpf_len);
      if (jb_shimconn_send_raw(&L->sb->conn, head, (size_t)hn, 5000, L->err) < 0 ||
          jb_shimconn_send_raw(&L->sb->conn, L->xbpf, L->xbpf_len, 5000, L->err) < 0) {
        fail_wall(L->failed, JB_WALL_BWRAP, L->err, "handing over exec's filter: %s", L->err->msg);
        return -1;
      }
    }
  }
  return 0;
}

/* With the socket channel on, the launcher's first line: where the shim will speak (the
 * socket accepted, then the spawner's connection), or that it cannot (the attach stream then).
 * *ready_out (new) receives a first line that was no channel announcement (an older shim's
 * ready line), else NULL. -1 when the announced socket cannot be taken. */
static int launch_channel(struct launch *L, json_t **ready_out) {
  L->ready_deadline = jb_now_ms() + L->cfg->start_timeout_ms;
  json_t *ready = NULL;
  *ready_out = NULL;
  if (L->lsn.fd >= 0) {
    /* the launcher says on the attach stream where the shim will speak */
    ready = jb_shimconn_read(&L->sb->conn, L->cfg->start_timeout_ms, L->err);
    const char *ev = json_string_value(json_object_get(ready, "event")) ?: "";
    if (ready && strcmp(ev, "channel") == 0) {
      const char *kind = json_string_value(json_object_get(ready, "channel")) ?: "";
      if (strcmp(kind, "socket") == 0) {
        long left = L->ready_deadline - jb_now_ms();
        int fd = jb_shim_listener_accept(&L->lsn, left > 0 ? left : 0, L->err);
        if (fd < 0 || jb_shimconn_use_socket(&L->sb->conn, fd, L->err) < 0) {
          jb_shim_listener_close(&L->lsn);
          json_decref(ready);
          fail_wall(L->failed, JB_WALL_COUNT, L->err, "shim socket: %s", L->err->msg);
          return -1;
        }
        /* the spawner's connection comes second, right after the shim's */
        if (json_is_true(json_object_get(ready, "spawner"))) {
          jb_error serr = {0};
          int sfd = jb_shim_listener_accept(&L->lsn, 2000, &serr);
          if (sfd < 0 || jb_spawner_attach(&L->sb->spawner, sfd, 3000, &serr) < 0) {
            L->exec_reason = json_sprintf("the spawner did not come up: %s", serr.msg);
            jb_log(JB_LOG_WARN, "exec unavailable", "job", L->job_id, "reason", serr.msg, NULL);
          } else {
            json_decref(L->exec_reason);
            L->exec_reason = NULL;
          }
        } else if (L->xbpf && !L->exec_reason) {
          const char *why = json_string_value(json_object_get(ready, "spawnerError"));
          L->exec_reason = why ? json_sprintf("the launcher could not connect the spawner: %s", why)
                               : json_string(
                                     "the image's launcher has no spawner (rebuild it: "
                                     "deploy/sandbox-image/build.sh)");
        }
        jb_shim_listener_close(&L->lsn); /* nothing else may connect */
        L->channel = json_pack("{s:s, s:s, s:s}", "kind", "socket", "socket",
                               JB_IMAGE_SHIM_SOCKET_DIR "/" JB_SHIM_SOCKET_NAME, "note",
                               "per-session Unix socket of the worker, bind-mounted read-only into "
                               "the container and connected by the launcher before the jail; the "
                               "jail's filter refuses socket, socketpair and connect");
      } else {
        const char *why = json_string_value(json_object_get(ready, "error")) ?: "no reason given";
        if (!L->exec_reason)
          L->exec_reason = json_string("the launcher could not connect to the session's socket");
        L->channel = json_pack("{s:s, s:s+}", "kind", "attach", "reason",
                               "the launcher could not connect to the session's socket (does the "
                               "runtime have --host-uds=open?): ",
                               why);
        jb_log(JB_LOG_WARN, "shim socket channel unavailable; using the attach stream", "job",
               L->job_id, "reason", why, NULL);
      }
      json_decref(ready);
      ready = NULL;
    } else if (ready) {
      L->channel =
          json_pack("{s:s, s:s}", "kind", "attach", "reason",
                    "the launcher did not announce a channel: the image's jailbox-shim "
                    "predates the socket channel (rebuild it: deploy/sandbox-image/build.sh)");
      jb_log(JB_LOG_WARN, "shim socket channel unavailable; using the attach stream", "job",
             L->job_id, "reason", "the image's jailbox-shim predates the socket channel", NULL);
      if (!L->exec_reason)
        L->exec_reason =
            json_string("the image's launcher predates the socket channel and the spawner");
    }
    jb_shim_listener_close(&L->lsn);
  }
  *ready_out = ready;
  return 0;
}

/* The shim's ready line (`ready`, taken; NULL: read it now) in the protocol this worker
 * speaks. */
static int launch_ready(struct launch *L, json_t *ready) {
  if (!ready) {
    long left = L->ready_deadline - jb_now_ms();
    ready = jb_shimconn_read(&L->sb->conn, left > 0 ? left : 0, L->err);
  }
  if (!ready || strcmp(json_string_value(json_object_get(ready, "event")) ?: "", "ready") != 0) {
    char tail[600];
    jb_shimconn_stderr(&L->sb->conn, tail, sizeof tail);
    enum jb_wall w = blame_output(tail, L->bwrap);
    if (w == JB_WALL_COUNT) w = L->gvisor ? JB_WALL_GVISOR : JB_WALL_DOCKER;
    fail_wall(L->failed, w, L->err, "the jail did not come up: %s",
              ready ? "unexpected first line" : L->err->msg);
    json_decref(ready);
    return -1;
  }
  if (json_integer_value(json_object_get(ready, "protocol")) != JB_SHIM_PROTOCOL) {
    json_decref(ready);
    fail_wall(L->failed, JB_WALL_COUNT, L->err, "shim speaks another protocol version");
    return -1;
  }
  json_decref(ready);
  L->t[T_READY] = jb_now_ms();
  L->sb->ready_ms = L->t[T_READY] - L->t[T_START];
  return 0;
}

/* What the jailed shim sees (status) and that it answers (ping). */
static int launch_inside(struct launch *L) {
  json_t *req = json_pack("{s:s}", "op", "status");
  json_t *ans = jb_shimconn_call(&L->sb->conn, req, L->cfg->call_timeout_ms, L->err);
  json_decref(req);
  if (!ans || !json_is_true(json_object_get(ans, "ok"))) {
    json_decref(ans);
    fail_wall(L->failed, JB_WALL_COUNT, L->err, "shim status: %s", ans ? "refused" : L->err->msg);
    return -1;
  }
  L->status = json_incref(json_object_get(ans, "result"));
  json_decref(ans);
  L->t[T_STATUS] = jb_now_ms();
  req = json_pack("{s:s}", "op", "ping");
  ans = jb_shimconn_call(&L->sb->conn, req, L->cfg->call_timeout_ms, L->err);
  json_decref(req);
  bool pong = ans && json_is_true(json_object_get(json_object_get(ans, "result"), "pong"));
  json_decref(ans);
  if (!pong) {
    fail_wall(L->failed, JB_WALL_COUNT, L->err, "shim ping: %s", L->err->msg);
    return -1;
  }
  L->t[T_PING] = jb_now_ms();
  return 0;
}

/* The walls as they stand (the shim's status, Docker's inspect) against what was asked: a
 * wall that stands but not as specified is a failed wall, required or not — the contract never
 * claims what is not true, and a half-built wall is not offered. */
static int launch_check(struct launch *L) {
  check_status(L->status, L->gvisor, L->bwrap, false, &L->chk);
  L->settings = inspect_settings(L->cfg, L->sb->container_id, L->gvisor, &L->chk, L->err);
  if (!L->settings) {
    fail_wall(L->failed, JB_WALL_DOCKER, L->err, "inspect: %s", L->err->msg);
    return -1;
  }
  for (int w = 0; w < JB_WALL_COUNT; w++)
    L->sb->walls_up[w] = L->use[w] && json_array_size(L->chk.problems[w]) == 0;
  int ret = 0;
  for (int w = 0; w < JB_WALL_COUNT; w++)
    if (L->use[w] && json_array_size(L->chk.problems[w]) > 0) {
      if (ret == 0)
        fail_wall(L->failed, (enum jb_wall)w, L->err, "not as specified: %s",
                  json_string_value(json_array_get(L->chk.problems[w], 0)));
      ret = -1;
    }
  return ret;
}

/* Wall 1 in the contract (new). */
static json_t *contract_gvisor(const struct launch *L) {
  json_t *w1 = json_pack("{s:b, s:b}", "up", L->sb->walls_up[JB_WALL_GVISOR], "required",
                         L->cfg->require[JB_WALL_GVISOR]);
  if (L->gvisor) {
    json_object_set_new(w1, "runtime", json_string(L->cfg->runtime));
    if (L->probe) {
      json_object_set_new(w1, "runtimePath", json_string(L->probe->runsc_path));
      json_object_set_new(w1, "version", json_string(L->probe->runsc_version));
      json_t *ra = json_loads(L->probe->runsc_args, 0, NULL);
      json_object_set_new(w1, "runtimeArgs", ra ? ra : json_null());
    }
    json_object_set_new(w1, "network",
                        json_string("none (runsc --network=none: no network stack but loopback)"));
    json_object_set_new(w1, "seccompEnforcedBy", json_string("gVisor (runsc --oci-seccomp)"));
    if (L->status)
      json_object_set_new(w1, "kernelSeenInside",
                          json_incref(json_object_get(L->status, "kernel")));
  } else {
    json_object_set_new(w1, "runtime", json_string("runc"));
    json_object_set_new(
        w1, "reason",
        json_string(L->probe && !L->probe->up[JB_WALL_GVISOR] ? L->probe->reason[JB_WALL_GVISOR]
                                                              : "not used"));
  }
  return w1;
}

/* Wall 2 in the contract (new), with its seccomp profile counted. */
static json_t *contract_docker(const struct launch *L) {
  json_t *sc = json_pack("{s:s, s:s, s:s, s:s}", "profile", "deploy/seccomp/jailbox.json", "source",
                         L->cfg->profile_source, "sha256", L->cfg->profile_sha256, "defaultAction",
                         "SCMP_ACT_ERRNO (EPERM)");
  json_t *prof = json_loadb(L->cfg->profile, L->cfg->profile_len, 0, NULL);
  if (prof) {
    size_t allowed = 0, i;
    json_t *e;
    json_array_foreach (json_object_get(prof, "syscalls"), i, e) {
      const char *act = json_string_value(json_object_get(e, "action"));
      if (act && strcmp(act, "SCMP_ACT_ALLOW") == 0)
        allowed += json_array_size(json_object_get(e, "names"));
    }
    json_object_set_new(sc, "allowedSyscalls", json_integer((json_int_t)allowed));
    json_decref(prof);
  }
  char tmpsz[32];
  snprintf(tmpsz, sizeof tmpsz, "%ldMiB", L->cfg->container_tmp_mib);
  json_t *w2 = json_pack(
      "{s:b, s:b, s:s, s:s, s:{s:[s], s:o}, s:b, s:o, s:s, s:s, s:b, s:{s:s, s:s, s:s},"
      " s:{s:I, s:I, s:f, s:I, s:I}, s:s, s:s, s:s}",
      "up", L->sb->walls_up[JB_WALL_DOCKER], "required", L->cfg->require[JB_WALL_DOCKER], "engine",
      L->probe ? L->probe->engine : "?", "image", L->cfg->image, "capabilities", "drop", "ALL",
      "add", str_array(L->gvisor && L->bwrap ? gvisor_caps : setpriv_caps), "noNewPrivileges", 1,
      "seccomp", sc, "apparmor",
      L->apparmor ? "docker-default" : "unavailable (the host kernel has no AppArmor)", "network",
      "none", "readOnlyRootfs", 1, "tmpfs", "path", "/tmp", "size", tmpsz, "purpose",
      L->bwrap ? "bwrap builds the jail's new root there" : "scratch space", "limits",
      "memoryBytes", (json_int_t)L->lim.memory_bytes, "memorySwapBytes",
      (json_int_t)L->lim.memory_bytes, "cpus", (double)L->lim.nano_cpus / 1e9, "pids",
      (json_int_t)L->lim.pids, "hostPids", (json_int_t)L->lim.host_pids, "workspace",
      "bind mount at /workspace (rw, rprivate)", "containerUser",
      "0:0 (root of gVisor's kernel; the jail drops it)", "logDriver",
      "none (nothing the shim prints is kept on disk)");
  if (L->gvisor)
    json_object_set_new(json_object_get(w2, "limits"), "pidsEnforcedAs",
                        json_string("RLIMIT_NPROC of the jail's uid inside gVisor; the host pids "
                                    "cgroup (hostPids) leaves room for the Sentry's threads"));
  if (L->probe && L->probe->image_id[0]) {
    json_object_set_new(w2, "imageId", json_string(L->probe->image_id));
    json_object_set_new(w2, "imageDigest", json_string(L->probe->image_digest));
  }
  if (L->sb->container_id[0])
    json_object_set_new(w2, "containerId", json_string(L->sb->container_id));
  if (L->settings) json_object_set_new(w2, "inspected", json_incref(L->settings));
  return w2;
}

/* Wall 3 in the contract (new). */
static json_t *contract_bwrap(const struct launch *L) {
  json_t *w3 = json_pack("{s:b, s:b}", "up", L->sb->walls_up[JB_WALL_BWRAP], "required",
                         L->cfg->require[JB_WALL_BWRAP]);
  if (L->bwrap) {
    json_t *desc = jb_filter_describe();
    json_t *w3s = json_pack(
        "{s:s, s:[s,s,s,s,s], s:[s,s], s:b, s:b, s:s, s:s, s:s, s:s,"
        " s:{s:I, s:I, s:I, s:s, s:s, s:o}}",
        "bwrap", L->probe && L->probe->bwrap_version[0] ? L->probe->bwrap_version : "bubblewrap",
        "namespacesNew", "mount", "pid", "ipc", "uts", "cgroup (where the runtime allows)",
        "namespacesShared", "net (gVisor's, loopback only)",
        "user (bwrap runs as root of gVisor's kernel)", "dieWithParent", 1, "newSession", 1, "proc",
        "private (new procfs for the jail's pid namespace)", "sys", "absent", "root",
        "tmpfs, remounted read-only", "binds",
        "/lib, /lib64, setpriv, jailbox-shim (read-only); /workspace (read-write); /tmp (tmpfs)",
        "seccomp", "syscalls", (json_int_t)L->fi.syscalls, "rules", (json_int_t)L->fi.rules,
        "killRules", (json_int_t)L->fi.kill_rules, "bpfSha256", L->bpf_sha, "compiledWith",
        "libseccomp (seccomp_export_bpf), handed to bwrap --seccomp", "filter",
        desc ? desc : json_null());
    json_object_update(w3, w3s);
    json_decref(w3s);
    json_object_set_new(w3, "privilegeDrop",
                        json_string("setpriv --reuid 65534 --regid 65534 --clear-groups "
                                    "--inh-caps=-all --bounding-set=-all --no-new-privs"));
  } else {
    json_object_set_new(w3, "reason",
                        json_string(L->probe && !L->probe->up[JB_WALL_BWRAP]
                                        ? L->probe->reason[JB_WALL_BWRAP]
                                        : "not built (needs gVisor on this host)"));
  }
  return w3;
}

/* The jail as the shim saw it from inside (new; JSON null without its status). */
static json_t *contract_jail(const json_t *status) {
  json_t *jail = json_null();
  if (status) {
    json_t *caps = json_object_get(status, "capabilities");
    jail = json_pack("{s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O}", "uid",
                     json_object_get(status, "uid"), "gid", json_object_get(status, "gid"),
                     "capEff", json_object_get(caps, "effective") ?: json_null(), "capPrm",
                     json_object_get(caps, "permitted") ?: json_null(), "capBnd",
                     json_object_get(caps, "bounding") ?: json_null(), "noNewPrivs",
                     json_object_get(status, "noNewPrivs"), "seccompMode",
                     json_object_get(status, "seccomp"), "namespaces",
                     json_object_get(status, "namespaces"), "netdevs",
                     json_object_get(status, "netdevs"), "fds", json_object_get(status, "fds"));
  }
  return jail;
}

/* The session contract (sb->contract): what stands, with its settings, and what remains; on
 * failure too, saying what was found. */
static void contract_build(struct launch *L, int ret) {
  if (!L->channel)
    L->channel = json_pack("{s:s, s:s}", "kind", "none", "reason", "the shim did not come up");
  /* the session contract: what stands, with its settings, and what remains */
  char at[40];
  iso8601(epoch_ms(), at, sizeof at);
  json_t *w1 = contract_gvisor(L), *w2 = contract_docker(L), *w3 = contract_bwrap(L);
  json_t *jail = contract_jail(L->status);
  json_t *problems = json_object();
  for (int w = 0; w < JB_WALL_COUNT; w++)
    if (json_array_size(L->chk.problems[w]))
      json_object_set(problems, jb_wall_names[w], L->chk.problems[w]);
  json_t *req_list = json_array();
  for (int w = 0; w < JB_WALL_COUNT; w++)
    if (L->cfg->require[w]) json_array_append_new(req_list, json_string(jb_wall_names[w]));
  L->sb->contract = json_pack(
      "{s:i, s:s, s:s, s:s, s:o, s:o, s:{s:o, s:o, s:o}, s:o, s:o, s:o, s:o}", "contractVersion", 1,
      "at", at, "worker", L->cfg->worker_id, "status", ret == 0 ? "up" : "failed", "required",
      req_list, "override",
      L->cfg->override
          ? json_pack("{s:s, s:s}", "requireWalls", L->cfg->require_text, "note",
                      "development override: fewer walls required than gvisor,docker,bwrap")
          : json_null(),
      "walls", "gvisor", w1, "docker", w2, "bwrap", w3, "jailSeenFromInside", jail, "problems",
      problems, "timingsMs", timings_json(L->t, tnames, T_N), "residualRisks",
      jb_walls_residual_risks(L->cfg, L->sb->walls_up, L->apparmor));
  if (L->sb->contract) json_object_set(L->sb->contract, "shimChannel", L->channel);
}

/* The contract's exec, image and probe, and the residual risks they bring. */
static void contract_exec_image(struct launch *L, int ret) {
  if (L->sb->contract) {
    if (!L->exec_reason && L->sb->spawner.fd < 0)
      L->exec_reason = json_string(ret == 0 ? "no spawner answered" : "the shim did not come up");
    json_object_set_new(
        L->sb->contract, "exec",
        exec_contract(&L->sb->spawner, L->exec_reason, L->xbpf ? &L->xfi : NULL, L->xbpf_sha));
    if (L->sb->spawner.fd >= 0 && !L->exec_reason)
      json_array_append_new(
          json_object_get(L->sb->contract, "residualRisks"),
          json_string(
              "exec: a command may connect() to a host Unix socket file in the workspace "
              "(runsc --host-uds=open; the pre-scan flags such files) — exec's filter "
              "allows local sockets, which build and test tools need. Its memory is the "
              "container's: over the limit the whole sandbox is killed (reported as oom)."));
  }
  if (L->sb->contract)
    json_object_set_new(
        L->sb->contract, "image",
        L->probe && L->probe->image_id[0]
            ? json_pack("{s:s, s:s, s:s?}", "name", L->cfg->image, "id", L->probe->image_id,
                        "contentDigest", L->probe->image_digest[0] ? L->probe->image_digest : NULL)
            : json_pack("{s:s, s:n, s:n}", "name", L->cfg->image, "id", "contentDigest"));
  if (L->sb->contract && L->gvisor && L->probe && strstr(L->probe->runsc_args, "--host-uds=open"))
    json_array_append_new(
        json_object_get(L->sb->contract, "residualRisks"),
        json_string(L->bwrap
                        ? "runsc runs with --host-uds=open, so a process in the sandbox may "
                          "connect to a host Unix socket visible in its mounts: the workspace "
                          "(a socket file the buyer left there) and the session's shim socket "
                          "directory. Only the launcher connects, as the container's root before "
                          "the jail, once (the worker then removes the socket); the jailed shim "
                          "sees no socket directory and Wall 3's filter refuses socket, "
                          "socketpair and connect (EPERM)."
                        : "runsc runs with --host-uds=open and Wall 3 is missing: the shim may "
                          "connect to a host Unix socket left in the workspace; only Wall 2's "
                          "profile and gVisor stand in the way."));
  if (L->sb->contract && L->probe && L->probe->done)
    json_object_set_new(L->sb->contract, "probe", jb_probe_json(L->probe));
}

/* The launch's end: a failed launch's connection closed, its container removed and its
 * spawner's channel closed; what the stages held freed. */
static void launch_end(struct launch *L, int ret) {
  if (ret < 0) {
    json_object_set_new(L->sb->contract, "failure", json_string(L->err ? L->err->msg : "?"));
    if (L->sb->conn_open) jb_shimconn_close(&L->sb->conn);
    L->sb->conn_open = false;
    if (L->sb->container_id[0]) {
      jb_error rerr = {0};
      (void)jb_container_remove(L->cfg, L->sb->container_id, &rerr);
      L->sb->container_id[0] = '\0';
    }
  }
  for (int w = 0; w < JB_WALL_COUNT; w++) json_decref(L->chk.problems[w]);
  if (ret < 0) jb_spawner_close(&L->sb->spawner);
  json_decref(L->exec_reason);
  free(L->xbpf);
  json_decref(L->channel);
  json_decref(L->status);
  json_decref(L->settings);
  json_decref(L->created);
  json_decref(L->body);
  free(L->bpf);
}

/* The stages in the order the walls need them: which walls, the filters and the channel, the
 * container created, attached and started, the filters handed over, the channel taken, the
 * shim ready, checked from inside, the walls checked as they stand; then the contract (also of
 * a failed launch) and the end. */
int jb_sandbox_launch(const struct jb_walls_config *cfg, const struct jb_probe *probe,
                      const char *job_id, const char *workspace, const json_t *limits,
                      const json_t *labels, struct jb_sandbox *sb, enum jb_wall *failed,
                      jb_error *err) {
  struct launch L = {.cfg = cfg,
                     .probe = probe,
                     .job_id = job_id,
                     .workspace = workspace,
                     .limits = limits,
                     .labels = labels,
                     .sb = sb,
                     .failed = failed,
                     .err = err,
                     .lsn = JB_SHIM_LISTENER_INIT};
  launch_init(&L);
  json_t *ready = NULL;
  int ret = launch_walls_allowed(&L);
  if (ret == 0) ret = launch_filters(&L);
  if (ret == 0) ret = launch_create(&L);
  if (ret == 0) ret = launch_attach(&L);
  if (ret == 0) ret = launch_start(&L);
  if (ret == 0) ret = launch_hand_filters(&L);
  if (ret == 0) ret = launch_channel(&L, &ready);
  if (ret == 0) ret = launch_ready(&L, ready); /* takes ready */
  if (ret == 0) ret = launch_inside(&L);
  if (ret == 0) ret = launch_check(&L);
  jb_shim_listener_close(&L.lsn);
  contract_build(&L, ret);
  contract_exec_image(&L, ret);
  launch_end(&L, ret);
  return ret;
}
