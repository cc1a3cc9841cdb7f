/* Allocation contexts (context.c): which call stack an allocation comes from, cheaply, in
   binaries built without frame pointers. */
#ifndef CA_CONTEXT_H
#define CA_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CA_CONTEXT_FRAMES 10

typedef struct ca_context_s {
  uint64_t  hash;                          /* 0 is never a valid hash */
  uintptr_t frames[CA_CONTEXT_FRAMES];     /* return addresses, innermost first, outside chromalloc */
  uint32_t  nframes;
  uint32_t  at1;                           /* frames[1]'s stack slot, bytes above `from` (0: unknown) */
  bool      in_libc;                       /* the call site is in glibc itself */
} ca_context_t;

#pragma GCC visibility push(hidden)
/* Capture the calling thread's allocation context from the stack above `from` (the frame of
   chromalloc's entry point; NULL: the caller's own frame) whose return address is `ret` (the
   program's call site; NULL: found by the scan). */
void _ca_context_capture(ca_context_t* ctx, const void* from, const void* ret);
/* This thread's stack, [_ca_stack_lo, _ca_stack_top) (both 0 until first needed) */
extern __thread uintptr_t _ca_stack_lo __attribute__((tls_model("initial-exec")));
extern __thread uintptr_t _ca_stack_top __attribute__((tls_model("initial-exec")));
uintptr_t _ca_context_word_first(const void* from, uint32_t at);
/* The stack word `at` bytes above `from` (a frame of this thread's stack, as given to the
   capture), or 0 when that lies beyond the stack's top or `from` is not on the thread's own
   stack (a signal stack): with the at1 of an earlier capture from the same call site, the
   caller's return address.  Inline: NightWatch reads one for every chunk it names. */
static inline uintptr_t _ca_context_word(const void* from, uint32_t at) {
  uintptr_t f = (uintptr_t)from, w = f + at;
  if (__builtin_expect(_ca_stack_top == 0, 0)) return _ca_context_word_first(from, at);
  if (at == 0 || f < _ca_stack_lo || w + sizeof(uintptr_t) > _ca_stack_top) return 0;
  return *(const uintptr_t*)w;
}
/* "symbol+0xoff (object)" of a return address, via dladdr; never allocates. */
void _ca_context_symbol(uintptr_t pc, char* out, size_t len);
void _ca_context_fork_prepare(void);          /* fork: the code ranges' lock */
void _ca_context_fork_release(void);
/* Forget the list of code ranges (tests, dlopen): it is rebuilt on the next capture. */
void _ca_context_refresh(void);
#pragma GCC visibility pop

#endif
