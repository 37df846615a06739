/* proc.c — fork/exec of helper programs as another user (see proc.h). */
#define _GNU_SOURCE
#include "lib/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/close_range.h>

int jb_run_as_lookup(const char *user, struct jb_run_as *who, jb_error *err) {
  struct passwd pw, *res = NULL;
  char buf[4096];
  int rc = getpwnam_r(user, &pw, buf, sizeof buf, &res);
  if (rc != 0 || !res)
    return jb_fail(err, rc ? rc : ENOENT, "no OS user '%s' (create it: useradd --system %s)", user,
                   user);
  who->switch_user = true;
  who->uid = pw.pw_uid;
  who->gid = pw.pw_gid;
  return 0;
}

int jb_proc_run(const char *const argv[], const struct jb_run_as *who, const char *log_path,
                jb_error *err) {
  int out =
      open(log_path ? log_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (out < 0) return jb_fail_errno(err, errno, "open %s", log_path ? log_path : "/dev/null");
  if (who && who->switch_user && fchown(out, who->uid, who->gid) < 0 && errno != EPERM) {
    int e = errno;
    close(out);
    return jb_fail_errno(err, e, "chown %s", log_path);
  }
  int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    int e = errno;
    close(out);
    return jb_fail_errno(err, e, "open /dev/null");
  }
  /* errors of the child before exec come back over a CLOEXEC pipe */
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0) {
    int e = errno;
    close(out);
    close(in);
    return jb_fail_errno(err, e, "pipe2");
  }
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(out), close(in), close(pfd[0]), close(pfd[1]);
    return jb_fail_errno(err, e, "fork");
  }
  if (pid == 0) {
    int step = 0;
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (setsid() < 0) goto fail;
    step = 1;
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) goto fail;
    /* nothing but 0-2 (and the error pipe, closed by exec) may reach the program */
    close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    step = 2;
    if (who && who->switch_user) {
      if (setgroups(0, NULL) < 0 || setgid(who->gid) < 0 || setuid(who->uid) < 0) goto fail;
    }
    step = 3;
    execv(argv[0], (char *const *)argv);
  fail:;
    int msg[2] = {step, errno};
    ssize_t w = write(pfd[1], msg, sizeof msg);
    (void)w;
    _exit(127);
  }
  close(out), close(in), close(pfd[1]);
  int msg[2];
  ssize_t n;
  do n = read(pfd[0], msg, sizeof msg);
  while (n < 0 && errno == EINTR);
  close(pfd[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return jb_fail_errno(err, errno, "waitpid %s", argv[0]);
  if (n == (ssize_t)sizeof msg) {
    static const char *const what[] = {"setsid", "redirect stdio", "switch user", "exec"};
    return jb_fail_errno(err, msg[1], "%s: %s", argv[0], what[msg[0] & 3]);
  }
  if (WIFSIGNALED(status))
    return jb_fail(err, EINTR, "%s killed by signal %d", argv[0], WTERMSIG(status));
  return WEXITSTATUS(status);
}
