/* Interposition: the next definition of a symbol chromalloc defines too (glibc's own), looked
   up once with dlsym(RTLD_NEXT) and cached.  Used by every interposed function that forwards. */
#ifndef CA_NEXT_H
#define CA_NEXT_H

#include <dlfcn.h>
#include <stdatomic.h>

/* An interposed definition: exported, and weak, so that a program defining the same name itself
   (its own `error`, `warn` or `sigset`) links against libchromalloc.a without a clash and its
   definition is the one used, as it is under LD_PRELOAD. */
#define ca_interpose __attribute__((visibility("default"), weak))

#define NEXT(type, name) ((type)({ static _Atomic(void*) f_; void* f = atomic_load_explicit(&f_, memory_order_relaxed); \
    if (f == NULL) { f = dlsym(RTLD_NEXT, #name); atomic_store_explicit(&f_, f, memory_order_relaxed); } f; }))

#endif
