/* fuzz_http.c — libFuzzer harness for what the HTTP front reads from a request line and
 * headers before the database is asked: route matching (server/http.c) and bearer token
 * parsing (api/core/auth.c). Input: path, NUL, token. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/auth.h"
#include "api/start.h"
#include "server/app.h"
#include "server/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  const char *path = buf;
  const char *tok = memchr(buf, '\0', size) ? buf + strlen(buf) + 1 : "";
  if (tok > buf + size) tok = "";
  size_t n;
  const struct jb_route *routes = jb_api_routes(&n);
  char pbuf[2048];
  const char *params[JB_HTTP_MAX_PARAMS];
  int np;
  for (size_t i = 0; i < n; i++)
    if (jb_route_match(routes[i].pattern, path, pbuf, sizeof pbuf, params, &np))
      for (int k = 0; k < np; k++)
        if (!params[k][0] || strchr(params[k], '/'))
          abort(); /* segments are never empty or split */
  unsigned char h[32];
  if (jb_token_hash(tok, h) == 0 && (strlen(tok) != 47 || strncmp(tok, "jbt_", 4) != 0)) abort();
  free(buf);
  return 0;
}
