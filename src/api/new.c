/* C++'s replaceable allocation functions: operator new, new[], delete, delete[] and the sized
   deletes.  Without them a C++ program's new goes through libstdc++'s operator new, which calls
   malloc: two calls and a PLT hop per allocation (alloc-test: 4.7% of its samples in those
   trampolines).  mimalloc, jemalloc and tcmalloc replace them too.

   The standard's semantics are kept: new never returns NULL; on failure it calls the
   new-handler until one succeeds, and throws std::bad_alloc when there is none.  Both come from
   libstdc++ through weak references (a C++ program has it loaded; a C program never calls
   these), so the allocator links against libc alone.  The nothrow and align_val_t forms are
   left to libstdc++: they call the forms here (nothrow new catches the exception, which C
   cannot) or aligned_alloc and free. */
#define _GNU_SOURCE
#include "../core/alloc.h"
#include <dlfcn.h>

#define ca_export __attribute__((visibility("default")))

typedef void (*ca_new_handler_t)(void);
extern ca_new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));   /* std::get_new_handler */
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));   /* std::__throw_bad_alloc */

/* dlsym is libc's from glibc 2.34, libdl's before: weak, so the library never needs libdl */
extern void* dlsym(void* handle, const char* name) __attribute__((weak));

/* libstdc++'s function `name`: bound at load time, or looked up now (a C program that loaded a
   C++ library with dlopen after chromalloc) */
static void* cxx_runtime(void* bound, const char* name) {
  return bound != NULL || dlsym == NULL ? bound : dlsym(RTLD_DEFAULT, name);
}

static ca_noinline void* new_failed(size_t n, const void* frame, const void* ret) {
  ca_new_handler_t (*get_handler)(void) = (ca_new_handler_t (*)(void))cxx_runtime((void*)_ZSt15get_new_handlerv, "_ZSt15get_new_handlerv");
  void (*throw_bad_alloc)(void) = (void (*)(void))cxx_runtime((void*)_ZSt17__throw_bad_allocv, "_ZSt17__throw_bad_allocv");
  for (;;) {
    ca_new_handler_t handler = get_handler != NULL ? get_handler() : NULL;
    if (handler == NULL) {
      if (throw_bad_alloc != NULL) throw_bad_alloc();
      _ca_fatal("operator new: out of memory for %p bytes, and no C++ runtime to throw std::bad_alloc", (void*)n);
    }
    handler();                                         /* may free memory, or throw */
    void* p = _ca_malloc_from(n, frame, ret);
    if (p != NULL) return p;
  }
}

/* new's slow path, reached by a tail call as malloc's is: its frame is then new's (the policy
   reads the context above it, as above malloc), and new's fast path sets up no frame of its own
   (it took 25 instructions where malloc takes 14) */
static ca_noinline void* new_generic(size_t n, const void* ret) {
  const void* frame = __builtin_frame_address(0);
  void* p = _ca_malloc_generic_at(_ca_heap_alloc, n, frame, ret);
  return ca_likely(p != NULL) ? p : new_failed(n, frame, ret);
}

/* the array forms are the plain ones; a sized delete does not need its size */
ca_export void* _Znwm(size_t n) {
  void* p = _ca_heap_pop(_ca_heap_alloc, n);
  return ca_likely(p != NULL) ? p : new_generic(n, __builtin_return_address(0));
}
ca_export void  _ZdlPv(void* p) { _ca_free(p); }
ca_export void  _ZdlPvm(void* p, size_t n) { (void)n; _ca_free(p); }
ca_export void* _Znam(size_t n) __attribute__((alias("_Znwm"), copy(_Znwm)));
ca_export void  _ZdaPv(void* p) __attribute__((alias("_ZdlPv"), copy(_ZdlPv)));
ca_export void  _ZdaPvm(void* p, size_t n) __attribute__((alias("_ZdlPvm"), copy(_ZdlPvm)));
