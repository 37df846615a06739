/* docker.c — Docker Engine API over the Unix socket with libcurl (see docker.h). */
#define _GNU_SOURCE
#include "sandbox/worker/docker.h"

#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct body {
  char *buf;
  size_t len, cap;
  bool too_big;
};

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud) {
  struct body *b = ud;
  size_t n = size * nmemb;
  if (b->len + n > JB_DOCKER_MAX_BODY) {
    b->too_big = true;
    return 0; /* aborts the transfer */
  }
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *nb = realloc(b->buf, cap);
    if (!nb) return 0;
    b->buf = nb;
    b->cap = cap;
  }
  memcpy(b->buf + b->len, ptr, n);
  b->len += n;
  b->buf[b->len] = '\0';
  return n;
}

int jb_docker_call(const struct jb_docker *d, const char *method, const char *path,
                   const json_t *body, long timeout_ms, long *status, json_t **out, jb_error *err) {
  if (out) *out = NULL;
  *status = 0;
  char url[2048];
  if ((size_t)snprintf(url, sizeof url, "http://docker" JB_DOCKER_API "%s", path) >= sizeof url)
    return jb_fail(err, ENAMETOOLONG, "docker %s: path too long", method);
  CURL *h = curl_easy_init();
  if (!h) return jb_fail(err, ENOMEM, "curl_easy_init failed");
  char *payload = NULL;
  struct curl_slist *hdr = NULL;
  struct body b = {0};
  int ret = -1;
  if (body) {
    payload = json_dumps(body, JSON_COMPACT);
    if (!payload) {
      jb_fail(err, ENOMEM, "docker %s %s: cannot encode the request", method, path);
      goto out;
    }
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    if (!hdr) {
      jb_fail(err, ENOMEM, "out of memory");
      goto out;
    }
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
  } else if (strcmp(method, "POST") == 0) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
  }
  curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, d->socket);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  if (timeout_ms > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
  CURLcode rc = curl_easy_perform(h);
  if (rc != CURLE_OK) {
    if (b.too_big)
      jb_fail(err, EMSGSIZE, "docker %s %s: answer over %d bytes", method, path,
              JB_DOCKER_MAX_BODY);
    else
      jb_fail(err, rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : ECONNREFUSED,
              "docker %s %s: %s (socket %s)", method, path, curl_easy_strerror(rc), d->socket);
    goto out;
  }
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
  if (out && b.len > 0) *out = json_loadb(b.buf, b.len, JSON_REJECT_DUPLICATES, NULL);
  ret = 0;
out:
  free(b.buf);
  free(payload);
  curl_slist_free_all(hdr);
  curl_easy_cleanup(h);
  return ret;
}

int jb_docker_expect(const struct jb_docker *d, const char *method, const char *path,
                     const json_t *body, long timeout_ms, json_t **out, jb_error *err) {
  long status = 0;
  json_t *r = NULL;
  if (jb_docker_call(d, method, path, body, timeout_ms, &status, &r, err) < 0) return -1;
  if (status < 200 || status > 299) {
    const char *m = json_string_value(json_object_get(r, "message"));
    jb_fail(err, (int)status, "docker %s %s: %ld %s", method, path, status, m ? m : "(no message)");
    json_decref(r);
    return -1;
  }
  if (out)
    *out = r;
  else
    json_decref(r);
  return 0;
}

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

int jb_docker_attach(const struct jb_docker *d, const char *id, struct jb_docker_stream *s,
                     long timeout_ms, jb_error *err) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
  CURL *h = curl_easy_init();
  if (!h) return jb_fail(err, ENOMEM, "curl_easy_init failed");
  /* libcurl makes the connection; the upgrade itself is HTTP/1.1 written by hand, because
   * after "101 UPGRADED" the socket is no longer HTTP */
  curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, d->socket);
  curl_easy_setopt(h, CURLOPT_URL, "http://docker/");
  curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  CURLcode rc = curl_easy_perform(h);
  curl_socket_t fd = CURL_SOCKET_BAD;
  if (rc == CURLE_OK) rc = curl_easy_getinfo(h, CURLINFO_ACTIVESOCKET, &fd);
  if (rc != CURLE_OK || fd == CURL_SOCKET_BAD) {
    jb_fail(err, ECONNREFUSED, "docker attach %s: connect: %s", id, curl_easy_strerror(rc));
    curl_easy_cleanup(h);
    return -1;
  }
  char req[512];
  int n =
      snprintf(req, sizeof req,
               "POST " JB_DOCKER_API
               "/containers/%s/attach?stream=1&stdin=1&stdout=1&stderr=1 HTTP/1.1\r\n"
               "Host: docker\r\nUpgrade: tcp\r\nConnection: Upgrade\r\nContent-Length: 0\r\n\r\n",
               id);
  if (n < 0 || (size_t)n >= sizeof req) {
    curl_easy_cleanup(h);
    return jb_fail(err, ENAMETOOLONG, "docker attach: container id too long");
  }
  long deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 10000);
  size_t sent = 0;
  while (sent < (size_t)n) {
    size_t w = 0;
    rc = curl_easy_send(h, req + sent, (size_t)n - sent, &w);
    if (rc == CURLE_AGAIN) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      if (poll(&p, 1, 100) < 0 && errno != EINTR) break;
      if (now_ms() > deadline) break;
      continue;
    }
    if (rc != CURLE_OK) break;
    sent += w;
  }
  if (sent < (size_t)n) {
    curl_easy_cleanup(h);
    return jb_fail(err, EIO, "docker attach %s: sending the request failed", id);
  }
  /* read the answer head; bytes after it already belong to the stream */
  char head[4096 + sizeof s->pre];
  size_t hl = 0;
  char *end = NULL;
  while (!end) {
    if (hl >= sizeof head - 1 || now_ms() > deadline) {
      curl_easy_cleanup(h);
      return jb_fail(err, ETIMEDOUT, "docker attach %s: no answer", id);
    }
    size_t got = 0;
    rc = curl_easy_recv(h, head + hl, sizeof head - 1 - hl, &got);
    if (rc == CURLE_AGAIN) {
      struct pollfd p = {.fd = fd, .events = POLLIN};
      poll(&p, 1, 100);
      continue;
    }
    if (rc != CURLE_OK || got == 0) {
      curl_easy_cleanup(h);
      return jb_fail(err, EPIPE, "docker attach %s: connection closed before an answer", id);
    }
    hl += got;
    head[hl] = '\0';
    end = strstr(head, "\r\n\r\n");
  }
  int code = 0;
  if (sscanf(head, "HTTP/1.%*d %d", &code) != 1 || (code != 101 && code != 200)) {
    char *nl = strchr(head, '\r');
    if (nl) *nl = '\0';
    /* the error body (JSON with "message") follows the head; give its start */
    const char *bodyp = end + 4;
    jb_fail(err, code ? code : EPROTO, "docker attach %s: %s %.200s", id, head, bodyp);
    curl_easy_cleanup(h);
    return -1;
  }
  size_t rest = hl - (size_t)(end + 4 - head);
  if (rest > sizeof s->pre) {
    curl_easy_cleanup(h);
    return jb_fail(err, EPROTO, "docker attach %s: unexpected data after the answer", id);
  }
  memcpy(s->pre, end + 4, rest);
  s->pre_len = rest;
  s->curl = h;
  s->fd = (int)fd;
  return 0;
}

void jb_docker_stream_close(struct jb_docker_stream *s) {
  if (s->curl) curl_easy_cleanup(s->curl); /* closes the socket */
  s->curl = NULL;
  s->fd = -1;
}

int jb_docker_urlencode(const char *in, char *out, size_t len) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
    bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 *p == '-' || *p == '_' || *p == '.' || *p == '~';
    if (o + (plain ? 1 : 3) >= len) return -1;
    if (plain)
      out[o++] = (char)*p;
    else {
      out[o++] = '%';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    }
  }
  out[o] = '\0';
  return 0;
}
