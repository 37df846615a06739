/* explain.c — the session contract as text for a person (see explain.h). */
#include "sandbox/proto/explain.h"

#include <string.h>

static const char *str(const json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "?";
}

static void list(FILE *out, const json_t *a) {
  size_t i;
  json_t *v;
  json_array_foreach (a, i, v)
    fprintf(out, "%s%s", i ? ", " : "", json_string_value(v) ? json_string_value(v) : "?");
}

static void wall_head(FILE *out, const char *title, const json_t *w) {
  fprintf(out, "\n%s: %s%s\n", title, json_is_true(json_object_get(w, "up")) ? "UP" : "DOWN",
          json_is_true(json_object_get(w, "required")) ? " (required)" : " (not required)");
  if (!json_is_true(json_object_get(w, "up")) && json_object_get(w, "reason"))
    fprintf(out, "  why: %s\n", str(w, "reason"));
}

int jb_contract_explain(const json_t *c, FILE *out) {
  if (json_is_object(json_object_get(c, "walls")) && json_object_get(c, "jobId")) {
    fprintf(out, "session %s: %s%s%s\n", str(c, "jobId"), str(c, "state"),
            json_string_value(json_object_get(c, "stateReason")) ? " — " : "",
            json_string_value(json_object_get(c, "stateReason")) ?: "");
    c = json_object_get(c, "walls");
  }
  const json_t *walls = json_object_get(c, "walls");
  if (!json_is_object(walls)) return -1;
  fprintf(out, "session contract v%d, %s, by worker %s: %s\n",
          (int)json_integer_value(json_object_get(c, "contractVersion")), str(c, "at"),
          str(c, "worker"),
          strcmp(str(c, "status"), "up") == 0 ? "all walls in place" : "NOT in place");
  fprintf(out, "required walls: ");
  list(out, json_object_get(c, "required"));
  fprintf(out, "\n");
  const json_t *ov = json_object_get(c, "override");
  if (json_is_object(ov))
    fprintf(out, "DEVELOPMENT OVERRIDE: JAILBOX_REQUIRE_WALLS=%s — %s\n", str(ov, "requireWalls"),
            str(ov, "note"));
  if (json_object_get(c, "failure")) fprintf(out, "launch failed: %s\n", str(c, "failure"));

  const json_t *g = json_object_get(walls, "gvisor");
  wall_head(out, "Wall 1 — gVisor (a kernel of its own)", g);
  fprintf(out, "  runtime %s (%s) %s, args ", str(g, "runtime"), str(g, "runtimePath"),
          str(g, "version"));
  list(out, json_object_get(g, "runtimeArgs"));
  fprintf(out, "\n  kernel seen inside: %s; network: %s\n", str(g, "kernelSeenInside"),
          str(g, "network"));

  const json_t *d = json_object_get(walls, "docker");
  const json_t *caps = json_object_get(d, "capabilities");
  const json_t *sc = json_object_get(d, "seccomp");
  const json_t *lim = json_object_get(d, "limits");
  wall_head(out, "Wall 2 — hardened container", d);
  fprintf(out, "  engine %s, image %s (%s)\n", str(d, "engine"), str(d, "image"),
          str(d, "imageId"));
  fprintf(out, "  capabilities: drop ");
  list(out, json_object_get(caps, "drop"));
  fprintf(out, ", keep ");
  list(out, json_object_get(caps, "add"));
  fprintf(out,
          " (gVisor's kernel only)\n  no-new-privileges: %s; read-only root: %s; network: %s; "
          "AppArmor: %s\n",
          json_is_true(json_object_get(d, "noNewPrivileges")) ? "yes" : "no",
          json_is_true(json_object_get(d, "readOnlyRootfs")) ? "yes" : "no", str(d, "network"),
          str(d, "apparmor"));
  fprintf(out, "  seccomp profile %s, sha256 %s, %lld syscalls allowed, default %s\n",
          str(sc, "profile"), str(sc, "sha256"),
          (long long)json_integer_value(json_object_get(sc, "allowedSyscalls")),
          str(sc, "defaultAction"));
  fprintf(out, "  limits: memory %lld MiB, cpus %.2f, processes %lld\n",
          (long long)(json_integer_value(json_object_get(lim, "memoryBytes")) / (1024 * 1024)),
          json_number_value(json_object_get(lim, "cpus")),
          (long long)json_integer_value(json_object_get(lim, "pids")));

  const json_t *b = json_object_get(walls, "bwrap");
  const json_t *f = json_object_get(b, "seccomp");
  wall_head(out, "Wall 3 — bubblewrap + seccomp (the jail)", b);
  if (json_is_true(json_object_get(b, "up"))) {
    fprintf(out, "  %s; new namespaces: ", str(b, "bwrap"));
    list(out, json_object_get(b, "namespacesNew"));
    fprintf(out, "\n  mounts: %s; /proc %s; /sys %s\n", str(b, "binds"), str(b, "proc"),
            str(b, "sys"));
    fprintf(
        out,
        "  syscall filter: %lld syscalls in %lld rules (%lld kill the process), BPF sha256 %s\n",
        (long long)json_integer_value(json_object_get(f, "syscalls")),
        (long long)json_integer_value(json_object_get(f, "rules")),
        (long long)json_integer_value(json_object_get(f, "killRules")), str(f, "bpfSha256"));
    fprintf(out, "  privileges: %s\n", str(b, "privilegeDrop"));
  }
  const json_t *in = json_object_get(c, "jailSeenFromInside");
  if (json_is_object(in)) {
    fprintf(out,
            "\nchecked from inside the jail: uid %lld, CapEff %s, CapBnd %s, no_new_privs %lld, "
            "seccomp mode %lld, interfaces ",
            (long long)json_integer_value(json_object_get(json_object_get(in, "uid"), "effective")),
            str(in, "capEff"), str(in, "capBnd"),
            (long long)json_integer_value(json_object_get(in, "noNewPrivs")),
            (long long)json_integer_value(json_object_get(in, "seccompMode")));
    list(out, json_object_get(in, "netdevs"));
    fprintf(out, ", %zu open descriptors\n", json_array_size(json_object_get(in, "fds")));
  }
  const json_t *ex = json_object_get(c, "exec");
  if (json_is_object(ex)) {
    if (json_is_true(json_object_get(ex, "available")))
      fprintf(out, "commands (exec), checked from inside: %s\n", str(ex, "checksFromInside"));
    else
      fprintf(out, "commands (exec): unavailable — %s\n", str(ex, "reason"));
  }
  const json_t *ch = json_object_get(c, "shimChannel");
  if (json_is_object(ch)) {
    const char *kind = str(ch, "kind");
    if (strcmp(kind, "socket") == 0)
      fprintf(out, "shim channel: per-session Unix socket (%s)\n", str(ch, "socket"));
    else
      fprintf(out, "shim channel: %s — %s\n",
              strcmp(kind, "attach") == 0 ? "Docker attach stream" : kind, str(ch, "reason"));
  }
  const char *k;
  json_t *v;
  json_object_foreach ((json_t *)json_object_get(c, "problems"), k, v) {
    fprintf(out, "problem with %s: ", k);
    list(out, v);
    fprintf(out, "\n");
  }
  fprintf(out, "\nresidual risks:\n");
  size_t i;
  json_array_foreach (json_object_get(c, "residualRisks"), i, v)
    fprintf(out, "  - %s\n", json_string_value(v) ?: "?");
  return 0;
}
