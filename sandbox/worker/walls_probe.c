/* walls_probe.c — jb_walls_probe: which walls this host can build (Docker, the image, the
 * gVisor runtime and its arguments, Wall 3's filter), found by launching a probe container with
 * every wall still up (walls_launch.c) and checking it from inside. Above walls_launch.c and
 * walls.c. */
#define _GNU_SOURCE
#include "sandbox/worker/walls.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/worker/filter.h"
#include "sandbox/worker/walls_internal.h"
#include "lib/metrics.h"

extern char **environ;

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

/* A real container with every wall that is still up, checked from inside: a wall it came up
 * without is marked down in `p` (`err`: jb_walls_probe's, for the launch's failure). */
static void probe_container(const struct jb_walls_config *cfg, struct jb_probe *p, jb_error *err) {
  char ws[] = "/tmp/jailbox-probe.XXXXXX";
  if (!mkdtemp(ws)) {
    down(p, JB_WALL_DOCKER, "cannot make a probe workspace: %s", strerror(errno));
    return;
  }
  chmod(ws, 0755);
  json_t *limits = json_pack("{s:i, s:f, s:i}", "memoryMiB", 256, "cpus", 1.0, "pids", 64);
  json_t *lab = json_pack("{s:s}", "jailbox.probe", "1");
  struct jb_walls_config all = *cfg;
  for (int w = 0; w < JB_WALL_COUNT; w++) all.require[w] = false; /* build what can be built */
  struct jb_sandbox sb;
  enum jb_wall failed = JB_WALL_COUNT;
  struct jb_probe snapshot = *p;
  if (jb_sandbox_launch(&all, &snapshot, "probe", ws, limits, lab, &sb, &failed, err) < 0) {
    down(p, failed == JB_WALL_COUNT ? JB_WALL_DOCKER : failed, "probe container: %s", err->msg);
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
}

void jb_walls_probe(const struct jb_walls_config *cfg, struct jb_probe *p) {
  memset(p, 0, sizeof *p);
  long t0 = jb_now_ms();
  p->at_ms = walls_epoch_ms();
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
    walls_sha256_hex(bpf, bpf_len, p->filter_sha256);
    free(bpf);
  }

  if (!p->up[JB_WALL_GVISOR] && p->up[JB_WALL_BWRAP])
    down(p, JB_WALL_BWRAP, "not built: Wall 3 is built only under gVisor, which is unavailable");

  probe_container(cfg, p, &err);
done:
  p->duration_ms = jb_now_ms() - t0;
}
