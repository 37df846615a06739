/* compiler.h — the compiler attributes the project's headers use, named for what they ask of
 * the caller (gcc and clang both know them). */
#ifndef JB_COMPILER_H
#define JB_COMPILER_H

/* The caller must use the result: dropping it is a warning (-Wunused-result, an error under
 * -Werror). On functions whose failure leaves their work undone — an append that appended
 * nothing, a write that wrote nothing — and on those that return memory or a reference the
 * caller owns (after curl's WARN_UNUSED_RESULT on its dynbuf adds). gcc does not count a
 * (void) cast as a use: where dropping the result is really right, a comment says why and the
 * call is written `if (f(...) < 0) {}`. */
#define JB_MUST_USE __attribute__((warn_unused_result))

#endif
