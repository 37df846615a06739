/* fuzz_sio.c — libFuzzer harness for what jailboxctl parses from others: a Socket.IO server's
 * messages (jb_sio_decode, cli/sio_client.c) and an MCP client's stdin lines
 * (jb_mcp_stdio_check, cli/bridge.c). Any crash, leak, sanitizer report or broken
 * promise of the decoders' contracts is a bug. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/ctl.h"
#include "cli/sio_client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct jb_sio_packet pk;
  if (jb_sio_decode((const char *)data, size, &pk) == 0) {
    if (pk.eio == '4') {
      if ((pk.sio == '2' || pk.sio == '3') && !json_is_array(pk.data)) abort();
      if (pk.sio == '2' && !json_is_string(json_array_get(pk.data, 0))) abort();
      if (pk.sio == '3' && pk.id == 0) abort();
      if ((pk.sio == '0' || pk.sio == '4') && pk.data && !json_is_object(pk.data)) abort();
    } else if (pk.sio != 0) {
      abort();
    }
    if (pk.id > 9007199254740991ULL) abort();
    json_decref(pk.data);
  }
  json_t *msg, *id;
  int code;
  char why[300];
  int r = jb_mcp_stdio_check((const char *)data, size, &msg, &id, &code, why, sizeof why);
  if (r == 1) {
    if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "method")) || id) abort();
    json_decref(msg);
  } else if (r == -1) {
    if ((code != -32700 && code != -32600) || !why[0] || msg) abort();
    if (id && !json_is_string(id) && !json_is_integer(id)) abort();
    json_decref(id);
  } else if (r != 0 || msg || id) {
    abort();
  }
  return 0;
}
