/* op_state.c — an op's state and its stored name, both ways (see op_state.h). */
#include "db/op_state.h"

#include <stddef.h>
#include <string.h>

/* Indexed by enum jb_op_state. */
static const char *const op_state_names[] = {"pending", "approved", "rejected", "done",
                                             "failed",  "running",  "staged"};
_Static_assert(sizeof op_state_names / sizeof op_state_names[0] == JB_OP_STAGED + 1,
               "one name per op state");

const char *jb_op_state_name(enum jb_op_state st) {
  if (st < 0 || (size_t)st >= sizeof op_state_names / sizeof op_state_names[0]) return NULL;
  return op_state_names[st];
}

enum jb_op_state jb_op_state_from_name(const char *name) {
  for (size_t i = 0; name && i < sizeof op_state_names / sizeof op_state_names[0]; i++)
    if (!strcmp(op_state_names[i], name)) return (enum jb_op_state)i;
  return JB_OP_UNKNOWN;
}
