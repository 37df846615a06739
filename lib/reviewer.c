/* reviewer.c — the operator's op reviewer on the wire (see reviewer.h): the address check, the
 * webhook call (libcurl easy interface, https://curl.se/libcurl/c/libcurl-easy.html), the
 * program run (posix_spawn, its stdin a socket and its stdout a pipe, a deadline over poll), and the answer parser. */
#define _GNU_SOURCE
#include "lib/reviewer.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/json.h"

const char *jb_review_verdict_name(enum jb_review_verdict v) {
  return v == JB_REVIEW_ALLOW ? "allow" : v == JB_REVIEW_DENY ? "deny" : "ask";
}

/* Sets *out to ask, failed, with the printf-style reason. */
static void fail(struct jb_review *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct jb_review *out, const char *fmt, ...) {
  out->verdict = JB_REVIEW_ASK;
  out->failed = true;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->reason, sizeof out->reason, fmt, ap);
  va_end(ap);
}

/* ---- the address ---- */

/* Whether `host` (as CURLU gives it: an IPv6 literal in brackets) is a loopback literal. */
static bool loopback_literal(const char *host) {
  struct in_addr a4;
  if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  size_t n = strlen(host);
  if (n > 2 && host[0] == '[' && host[n - 1] == ']') {
    char v6[64];
    if (n - 2 >= sizeof v6) return false;
    memcpy(v6, host + 1, n - 2);
    v6[n - 2] = '\0';
    struct in6_addr a6;
    return inet_pton(AF_INET6, v6, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
  }
  return false;
}

int jb_review_url_check(const char *url, jb_error *err) {
  CURLU *u = curl_url();
  if (!u) return jb_fail(err, ENOMEM, "out of memory");
  char *scheme = NULL, *host = NULL, *frag = NULL;
  int rc = -1;
  if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
    jb_fail(err, EINVAL, "not an absolute URL (https://host[:port]/path)");
    goto out;
  }
  if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host[0]) {
    jb_fail(err, EINVAL, "the URL has no host");
    goto out;
  }
  if (curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0) == CURLUE_OK) {
    jb_fail(err, EINVAL, "the URL has a fragment (#...)");
    goto out;
  }
  if (!strcmp(scheme, "https")) {
    rc = 0;
  } else if (!strcmp(scheme, "http")) {
    if (loopback_literal(host))
      rc = 0;
    else
      jb_fail(err, EINVAL,
              "http:// is allowed only to a loopback address (127.0.0.0/8, [::1]); use https://");
  } else {
    jb_fail(err, EINVAL, "the URL's scheme must be https (or http to a loopback address)");
  }
out:
  curl_free(scheme);
  curl_free(host);
  curl_free(frag);
  curl_url_cleanup(u);
  return rc;
}

int jb_review_cmd_check(const char *path, jb_error *err) {
  if (path[0] != '/') return jb_fail(err, EINVAL, "'%s' is not an absolute path", path);
  struct stat st;
  if (stat(path, &st) < 0) return jb_fail_errno(err, errno, "%s", path);
  if (!S_ISREG(st.st_mode) || access(path, X_OK) < 0)
    return jb_fail(err, EACCES, "%s is not an executable file", path);
  return 0;
}

int jb_review_global_init(jb_error *err) {
  CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  return rc == CURLE_OK ? 0 : jb_fail(err, EIO, "libcurl: %s", curl_easy_strerror(rc));
}

/* ---- the answer ---- */

/* Copies `n` bytes of UTF-8 text `s` into `dst` (`size` bytes): control characters (C0, DEL,
 * and C1 — U+0080..U+009F, bytes C2 80..C2 9F) as spaces, cut at a character's start so that
 * it fits. */
static void clean_text(char *dst, size_t size, const char *s, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + k > n) break;
    if (o + k >= size) break;
    if (c < 0x20 || c == 0x7F || (c == 0xC2 && (unsigned char)s[i + 1] < 0xA0)) {
      dst[o++] = ' ';
    } else {
      memcpy(dst + o, s + i, k);
      o += k;
    }
    i += k;
  }
  dst[o] = '\0';
}

void jb_review_parse(const char *body, size_t len, struct jb_review *out) {
  memset(out, 0, sizeof *out);
  if (len > JB_REVIEW_ANSWER_MAX) {
    fail(out, "the reviewer's answer is over %d bytes", JB_REVIEW_ANSWER_MAX);
    return;
  }
  jb_error err = {0};
  cleanup_json json_t *a = jb_json_parse_object(body, len, JB_REVIEW_ANSWER_DEPTH, &err);
  if (!a) {
    char why[200];
    clean_text(why, sizeof why, err.msg, strlen(err.msg));
    fail(out, "the reviewer's answer is not a JSON object (%s)", why);
    return;
  }
  json_t *v = json_object_get(a, "verdict");
  if (!json_is_string(v)) {
    fail(out, "the reviewer's answer has no verdict string");
    return;
  }
  const char *vs = json_string_value(v);
  if (!strcmp(vs, "allow"))
    out->verdict = JB_REVIEW_ALLOW;
  else if (!strcmp(vs, "deny"))
    out->verdict = JB_REVIEW_DENY;
  else if (!strcmp(vs, "ask"))
    out->verdict = JB_REVIEW_ASK;
  else {
    char shown[60];
    clean_text(shown, sizeof shown, vs, json_string_length(v));
    fail(out, "the reviewer answered an unknown verdict \"%s\"", shown);
    return;
  }
  json_t *r = json_object_get(a, "reason");
  if (r && !json_is_null(r) && !json_is_string(r)) {
    fail(out, "the reviewer's reason is not a string");
    return;
  }
  if (json_is_string(r))
    clean_text(out->reason, sizeof out->reason, json_string_value(r), json_string_length(r));
}

/* ---- the webhook ---- */

struct sink {
  char *buf;
  size_t len;
  bool over;
};

static size_t sink_write(char *p, size_t size, size_t n, void *ud) {
  struct sink *s = ud;
  size_t k = size * n;
  if (s->len + k > JB_REVIEW_ANSWER_MAX) {
    s->over = true;
    return 0; /* CURLE_WRITE_ERROR: the transfer stops here */
  }
  memcpy(s->buf + s->len, p, k);
  s->len += k;
  return k;
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Whether `cut` (nullable) says to end the review now. */
static bool cut_due(const struct jb_review_cut *cut) {
  if (!cut || !cut->at_ms) return false;
  long long at = atomic_load(cut->at_ms);
  return at > 0 && now_ms() >= at - cut->before_ms;
}

static const char CUT_REASON[] = "the review was cut short: the server is shutting down";

/* libcurl's progress callback: a non-zero return aborts the transfer (CURLOPT_XFERINFOFUNCTION). */
static int cut_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                        curl_off_t ulnow) {
  (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
  return cut_due(ud) ? 1 : 0;
}

/* libcurl's sockets, opened close-on-exec (a program started meanwhile must not hold them). */
static curl_socket_t open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a) {
  (void)ud;
  (void)purpose;
  int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
  return fd < 0 ? CURL_SOCKET_BAD : fd;
}

void jb_review_http(const char *url, const char *body, size_t len, long timeout_ms,
                    const struct jb_review_cut *cut, struct jb_review *out) {
  memset(out, 0, sizeof *out);
  struct sink s = {.buf = malloc(JB_REVIEW_ANSWER_MAX + 1)};
  CURL *h = s.buf ? curl_easy_init() : NULL;
  if (!h) {
    free(s.buf);
    fail(out, "reviewer not asked: out of memory");
    return;
  }
  bool https = !strncasecmp(url, "https:", 6); /* checked: https or loopback http */
  struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
  hdr = hdr ? curl_slist_append(hdr, "Accept: application/json") : NULL;
  hdr = hdr ? curl_slist_append(hdr, "Expect:") : NULL; /* no 100-continue round trip */
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, https ? "https" : "http");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_PROXY, ""); /* the environment's proxies are not used */
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for DNS timeouts */
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_socket);
  curl_easy_setopt(h, CURLOPT_POST, 1L);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "jailboxd-reviewer");
  curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)JB_REVIEW_ANSWER_MAX);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
  if (cut) { /* checked about once a second, and at every transfer step */
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, cut_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)cut);
  }
  CURLcode rc = hdr ? curl_easy_perform(h) : CURLE_OUT_OF_MEMORY;
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  if (rc == CURLE_ABORTED_BY_CALLBACK) {
    fail(out, "%s", CUT_REASON);
    out->cut = true;
  } else if (s.over || rc == CURLE_FILESIZE_EXCEEDED)
    fail(out, "the reviewer's answer is over %d bytes", JB_REVIEW_ANSWER_MAX);
  else if (rc == CURLE_OPERATION_TIMEDOUT)
    fail(out, "reviewer timed out after %ld ms", timeout_ms);
  else if (rc != CURLE_OK) /* curl's own words: no URL in them */
    fail(out, "reviewer unreachable: %s", curl_easy_strerror(rc));
  else if (status < 200 || status > 299)
    fail(out, "reviewer answered HTTP %ld", status);
  else
    jb_review_parse(s.buf, s.len, out);
  curl_slist_free_all(hdr);
  curl_easy_cleanup(h);
  free(s.buf);
}

/* ---- the program ---- */

extern char **environ;

/* Spawns `path` with stdin from `in` and stdout to `outfd`: its pid, or -1 (errno). */
static pid_t spawn(const char *path, int in, int outfd) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  if (posix_spawn_file_actions_init(&fa)) return -1;
  if (posix_spawnattr_init(&at)) {
    posix_spawn_file_actions_destroy(&fa);
    return -1;
  }
  sigset_t none, def;
  sigemptyset(&none);
  sigemptyset(&def);
  sigaddset(&def, SIGPIPE); /* ignored here; the program gets the default */
  int e = posix_spawn_file_actions_adddup2(&fa, in, 0);
  if (!e) e = posix_spawn_file_actions_adddup2(&fa, outfd, 1);
  if (!e) e = posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  if (!e) e = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  if (!e) e = posix_spawnattr_setsigmask(&at, &none);
  if (!e) e = posix_spawnattr_setsigdefault(&at, &def);
  if (!e)
    e = posix_spawnattr_setflags(
        &at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  char *const argv[] = {(char *)path, NULL};
  char *const envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", NULL};
  pid_t pid = -1;
  if (!e) e = posix_spawn(&pid, path, &fa, &at, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (e) {
    errno = e;
    return -1;
  }
  return pid;
}

void jb_review_cmd(const char *path, const char *body, size_t len, long timeout_ms,
                   const struct jb_review_cut *cut, struct jb_review *out) {
  memset(out, 0, sizeof *out);
  long long deadline = now_ms() + timeout_ms;
  int pin[2], pout[2];
  /* stdin a socket: a send to a program that stopped reading is EPIPE, not SIGPIPE */
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pin) < 0) {
    fail(out, "reviewer not run: %s", strerror(errno));
    return;
  }
  if (pipe2(pout, O_CLOEXEC) < 0) {
    fail(out, "reviewer not run: %s", strerror(errno));
    close(pin[0]), close(pin[1]);
    return;
  }
  char *buf = malloc(JB_REVIEW_ANSWER_MAX + 1);
  pid_t pid = buf ? spawn(path, pin[0], pout[1]) : -1;
  int e = buf ? errno : ENOMEM;
  close(pin[0]);
  close(pout[1]);
  if (pid < 0) {
    close(pin[1]), close(pout[0]);
    free(buf);
    fail(out, "reviewer not run: %s", strerror(e));
    return;
  }
  fcntl(pin[1], F_SETFL, O_NONBLOCK);
  fcntl(pout[0], F_SETFL, O_NONBLOCK);
  int win = len > 0 ? pin[1] : -1, rout = pout[0];
  if (win < 0) close(pin[1]);
  size_t sent = 0, got = 0;
  bool over = false, timed_out = false, cut_short = false;
  while (rout >= 0) {
    long long left = deadline - now_ms();
    if (left <= 0 || (cut_short = cut_due(cut))) {
      timed_out = true;
      break;
    }
    struct pollfd p[2] = {{.fd = rout, .events = POLLIN}, {.fd = win, .events = POLLOUT}};
    long slice = cut ? 100 : 1000; /* a cut is seen within a tenth of a second */
    int k = poll(p, win >= 0 ? 2 : 1, (int)(left > slice ? slice : left));
    if (k < 0 && errno != EINTR) break;
    if (k <= 0) continue;
    if (win >= 0 && p[1].revents) {
      ssize_t w = send(win, body + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) sent += (size_t)w;
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || sent == len) { /* EPIPE: it stopped */
        close(win);
        win = -1;
      }
    }
    if (p[0].revents) {
      ssize_t r = read(rout, buf + got, JB_REVIEW_ANSWER_MAX + 1 - got);
      if (r > 0) {
        got += (size_t)r;
        if (got > JB_REVIEW_ANSWER_MAX) {
          over = true;
          break;
        }
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(rout);
        rout = -1;
      }
    }
  }
  if (win >= 0) close(win);
  if (rout >= 0) close(rout);
  /* stdout closed: the program has its deadline to exit (seen without reaping it, so that
   * its process group cannot be another's when it is killed) */
  bool exited = false;
  while (!timed_out && !over) {
    siginfo_t si = {0};
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno != EINTR) break;
    if (si.si_pid == pid) {
      exited = true;
      break;
    }
    if (now_ms() >= deadline || (cut_short = cut_due(cut))) {
      timed_out = true;
      break;
    }
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  kill(-pid, SIGKILL); /* on time out the program and what it started; else what it left */
  int status = 0;
  pid_t w;
  while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {}
  if (!timed_out && !over && !exited) w = -1;
  if (cut_short) {
    fail(out, "%s", CUT_REASON);
    out->cut = true;
  } else if (timed_out)
    fail(out, "reviewer timed out after %ld ms", timeout_ms);
  else if (over)
    fail(out, "the reviewer's answer is over %d bytes", JB_REVIEW_ANSWER_MAX);
  else if (w < 0)
    fail(out, "reviewer program lost");
  else if (WIFSIGNALED(status))
    fail(out, "reviewer program killed by signal %d", WTERMSIG(status));
  else if (WEXITSTATUS(status) != 0)
    fail(out, "reviewer program exited with status %d", WEXITSTATUS(status));
  else
    jb_review_parse(buf, got, out);
  free(buf);
}
