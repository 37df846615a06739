/* proctree.c — signals to a jail's processes (see proctree.h). */
#define _GNU_SOURCE
#include "sandbox/shim/proctree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The parent of process `pid` from /proc/PID/stat, or -1. */
static pid_t parent_of(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  if (!p) return -1;
  char state;
  int ppid;
  return sscanf(p + 1, " %c %d", &state, &ppid) == 2 ? (pid_t)ppid : -1;
}

int jb_proctree_signal(pid_t root, int sig) {
  pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    if (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0) _exit(1);
    enum { MAXP = 4096 };
    static pid_t tree[MAXP];
    size_t n = 0;
    tree[n++] = root;
    for (int pass = 0; pass < 8; pass++) {
      size_t before = n;
      DIR *d = opendir("/proc");
      if (!d) _exit(1);
      struct dirent *e;
      while ((e = readdir(d)) && n < MAXP) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        pid_t p = (pid_t)atoi(e->d_name);
        bool known = false;
        for (size_t i = 0; i < n && !known; i++) known = tree[i] == p;
        if (known) continue;
        pid_t pp = parent_of(p);
        for (size_t i = 0; i < n; i++)
          if (tree[i] == pp) {
            tree[n++] = p;
            kill(p, sig);
            break;
          }
      }
      closedir(d);
      if (n == before) break;
      /* a continue must not miss one stopped between passes */
      if (sig == SIGCONT)
        for (size_t i = 1; i < before; i++) kill(tree[i], sig);
    }
    _exit(n > 1 ? 0 : 2);
  }
  int st = 0;
  while (waitpid(child, &st, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

const char *jb_signame(int s) {
  static const struct {
    int n;
    const char *name;
  } t[] = {{SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
           {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
           {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
           {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
           {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (t[i].n == s) return t[i].name;
  return "SIG?";
}
