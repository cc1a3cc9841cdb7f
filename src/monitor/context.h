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
/* The stack word `at` bytes above `from` (a frame of this thread's stack, as given to the
   capture), or 0 when that lies beyond the stack's top or no capture ran on this thread yet:
   with the at1 of an earlier capture from the same call site, the caller's return address. */
uintptr_t _ca_context_word(const void* from, uint32_t at);
/* "symbol+0xoff (object)" of a return address, via dladdr; never allocates. */
void _ca_context_symbol(uintptr_t pc, char* out, size_t len);
void _ca_context_init(void);                  /* once, before the first capture: fork safety */
/* Forget the list of code ranges (tests, dlopen): it is rebuilt on the next capture. */
void _ca_context_refresh(void);
#pragma GCC visibility pop

#endif
