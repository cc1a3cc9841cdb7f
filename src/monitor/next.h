/* Interposition: the next definition of a symbol chromalloc defines too (glibc's own), looked
   up once with dlsym(RTLD_NEXT) and cached.  Used by every interposed function that forwards. */
#ifndef CA_NEXT_H
#define CA_NEXT_H

#include <dlfcn.h>
#include <stdatomic.h>

#define NEXT(type, name) ((type)({ static _Atomic(void*) f_; void* f = atomic_load_explicit(&f_, memory_order_relaxed); \
    if (f == NULL) { f = dlsym(RTLD_NEXT, #name); atomic_store_explicit(&f_, f, memory_order_relaxed); } f; }))

#endif
