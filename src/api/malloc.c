/* Exported allocation API: the standard malloc family with glibc's semantics (so chromalloc is
   a drop-in replacement under LD_PRELOAD or -lchromalloc), the __libc_* aliases that glibc's
   own code and some programs call, and the chromalloc_* extensions of chromalloc.h.
   Every entry point is a thin wrapper around the inline fast paths of core/alloc.h. */
#include "../core/alloc.h"
#include "../../include/chromalloc.h"
#include "../core/buf.h"
#include "../core/hooks.h"
#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

#define ca_export __attribute__((visibility("default")))

ca_export void* malloc(size_t n) { return _ca_malloc(n); }

ca_export void free(void* p) { _ca_free(p); }

static void* calloc_from(size_t n, const void* frame, const void* ret) {
  void* p = _ca_malloc_from(n, frame, ret);
  if (p != NULL) _ca_zero_block(p, n);
  return p;
}

ca_export void* calloc(size_t count, size_t size) {
  size_t n;
  if (ca_unlikely(__builtin_mul_overflow(count, size, &n))) { errno = ENOMEM; return NULL; }
  _ca_ensure_init();
  if (n > _ca_medium_limit) {
    void* p = _ca_policy_place(n, true, __builtin_frame_address(0), __builtin_return_address(0));
    return p != NULL ? p : _ca_large_alloc(n, 0, true, 0);           /* fresh pages: no memset */
  }
  return calloc_from(n, __builtin_frame_address(0), __builtin_return_address(0));
}

ca_export void* realloc(void* p, size_t n) {
  if (p == NULL) return _ca_malloc_from(n, __builtin_frame_address(0), __builtin_return_address(0));
  if (n == 0) { _ca_free(p); return NULL; }            /* glibc: realloc(p, 0) frees */
  ca_segment_t* seg = _ca_segment_of(p);
  size_t have = _ca_usable_size(p);                    /* aborts on a pointer that is not ours */
  uint8_t flavour = seg->kind == CA_SEG_LARGE ? seg->flavour : _ca_span_of(seg, p)->flavour;
  if (seg->kind == CA_SEG_LARGE) {
    if (n > _ca_medium_limit && flavour == 0) {        /* a coloured object does not grow in place */
      void* q = _ca_large_realloc(seg, p, n);
      if (q != NULL) return q;
    }
    if (flavour != 0 && n <= have) return p;
  } else if (n <= have && n >= have / 2) {
    return p;
  }
  void* q = flavour ? _ca_malloc_flavour(n, flavour) : _ca_malloc_from(n, __builtin_frame_address(0), __builtin_return_address(0));
  if (q == NULL) return NULL;                          /* p is left untouched */
  memcpy(q, p, n < have ? n : have);
  _ca_free(p);
  return q;
}

ca_export void* reallocarray(void* p, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) { errno = ENOMEM; return NULL; }
  return realloc(p, n);
}

static bool is_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

ca_export int posix_memalign(void** out, size_t align, size_t n) {
  if (!is_pow2(align) || align % sizeof(void*) != 0) return EINVAL;
  int e = errno;
  void* p = _ca_malloc_aligned(n, align, false);
  if (p == NULL) { errno = e; return ENOMEM; }
  *out = p;
  return 0;
}

ca_export void* aligned_alloc(size_t align, size_t n) {
  if (!is_pow2(align)) { errno = EINVAL; return NULL; }
  return _ca_malloc_aligned(n, align, false);
}

ca_export void* memalign(size_t align, size_t n) {
  if (align != 0 && !is_pow2(align)) {                 /* glibc rounds up to a power of two */
    if (align > ((size_t)1 << 62)) { errno = EINVAL; return NULL; }
    align = (size_t)1 << (64 - __builtin_clzl(align));
  }
  return _ca_malloc_aligned(n, align, false);
}

ca_export void* valloc(size_t n) { return _ca_malloc_aligned(n, (size_t)getpagesize(), false); }

ca_export void* pvalloc(size_t n) {
  size_t page = (size_t)getpagesize();
  size_t r = (n + page - 1) & ~(page - 1);
  if (r < n) { errno = ENOMEM; return NULL; }
  return _ca_malloc_aligned(r == 0 ? page : r, page, false);
}

ca_export size_t malloc_usable_size(void* p) { return _ca_usable_size(p); }

ca_export void cfree(void* p) { _ca_free(p); }

ca_export int malloc_trim(size_t pad) {
  (void)pad;
  chromalloc_collect();
  return 1;
}

/* glibc's internal names: some programs and libc itself call these directly */
ca_export void* __libc_malloc(size_t n) __attribute__((alias("malloc"), copy(malloc)));
ca_export void  __libc_free(void* p) __attribute__((alias("free"), copy(free)));
ca_export void* __libc_calloc(size_t c, size_t n) __attribute__((alias("calloc"), copy(calloc)));
ca_export void* __libc_realloc(void* p, size_t n) __attribute__((alias("realloc"), copy(realloc)));
ca_export void* __libc_memalign(size_t a, size_t n) __attribute__((alias("memalign"), copy(memalign)));
ca_export void* __libc_valloc(size_t n) __attribute__((alias("valloc"), copy(valloc)));
ca_export void* __libc_pvalloc(size_t n) __attribute__((alias("pvalloc"), copy(pvalloc)));
ca_export int   __posix_memalign(void** out, size_t a, size_t n) __attribute__((alias("posix_memalign"), copy(posix_memalign)));

/* ---- extensions ----------------------------------------------------------------------------- */

ca_export const char* chromalloc_version(void) { return CHROMALLOC_VERSION; }

ca_export void chromalloc_collect(void) {
  ca_heap_t* h = _ca_heap;
  if (h != &_ca_heap_empty) {
    _ca_heap_delayed_free(h);
    _ca_heap_collect_flavours(h);
    _ca_segment_purge_expired(h, true);
  }
  _ca_large_collect();
  _ca_segment_cache_purge(true);
}

ca_export size_t chromalloc_options_describe(char* buf, size_t size) {
  _ca_ensure_init();
  ca_buf_t b = ca_buf(buf, size);
  _ca_options_describe(&b);
  return b.len;
}

ca_export long chromalloc_option(const char* name) {
  _ca_process_init();
  bool found;
  long v = _ca_option_by_name(name, &found);
  if (!found) { errno = EINVAL; return -1; }
  return v;
}
