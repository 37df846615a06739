/* wake.c — what one hand-over between two processes costs on this machine, by how long the
 * receiver slept: process A sends 4 bytes over a Unix socket pair, B holds them for D µs
 * (busy, so that only A sleeps meanwhile) and sends them back; A's round trip minus D is the
 * cost of the two hand-overs, the second one to a process that slept about D µs. A read
 * through jailbox passes about a dozen such hand-overs (agent, jailboxd, worker, gVisor's
 * Sentry and the shim, PostgreSQL and its WAL flush), most of them to a process that slept
 * for more than a few hundred µs; on a virtual machine whose idle vCPUs halt, each of those
 * wake-ups costs far more than one to a process that slept briefly. Prints p50 and p90 of
 * that cost for D = 0, 100, 300, 1000 and 2500 µs. No arguments. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 400

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return perror("socketpair"), 1;
  pid_t pid = fork();
  if (pid < 0) return perror("fork"), 1;
  if (pid == 0) { /* B: hold each message for the µs it names, busy, then send it back */
    close(sv[0]);
    int d;
    while (read(sv[1], &d, sizeof d) == (ssize_t)sizeof d) {
      double t = now_us();
      while (now_us() - t < d) {}
      if (write(sv[1], &d, sizeof d) != (ssize_t)sizeof d) break;
    }
    _exit(0);
  }
  close(sv[1]);
  static const int delays[] = {0, 100, 300, 1000, 2500};
  for (size_t k = 0; k < sizeof delays / sizeof delays[0]; k++) {
    double cost[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
      int d = delays[k];
      double t = now_us();
      if (write(sv[0], &d, sizeof d) != (ssize_t)sizeof d ||
          read(sv[0], &d, sizeof d) != (ssize_t)sizeof d)
        return perror("round trip"), 1;
      cost[i] = now_us() - t - delays[k];
    }
    qsort(cost, ROUNDS, sizeof cost[0], by_value);
    printf(
        "  floor: two hand-overs, the receiver having slept %4d us: p50 %6.1f us   p90 %6.1f us\n",
        delays[k], cost[ROUNDS / 2], cost[ROUNDS * 9 / 10]);
  }
  close(sv[0]);
  waitpid(pid, NULL, 0);
  return 0;
}
