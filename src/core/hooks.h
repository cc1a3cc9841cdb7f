/* The one interface between the core allocator and the layers above it (colour layer,
   policies).  The core never includes their headers; they install a table of callbacks here.
   Every callback runs on a slow path only (a new span, a span given back, a large object), so
   with no hooks installed - or with policies switched off - the core runs bare.

   - span_memory: a span (or a large object's pages) is about to be used: the hook may replace
     the pages of [base, base + bytes) with memory of its choosing (pages of chosen cache colours)
     for the span's flavour.  Returns false when it did not, and the span stays ordinary memory.
   - span_released: the range is free again; called before the core would purge it, so a hook
     that placed special pages there can take them back first.
   - span_ready: whether span_memory could fill `bytes` for the flavour now (a hint, no lock):
     a flavour heap keeps an empty span that stayed ordinary memory until it could.

   A policy (src/policy/) installs a second, separate table:
   - place: a chunk of at least a page is requested from a thread's ordinary heap (malloc, or
     calloc when `zero`), larger than the span classes (_ca_medium_limit) or of a span class
     the policy asked to see one by one (`_ca_place_class`).  The policy may allocate it itself
     (as a large object of a flavour, through _ca_large_alloc / _ca_malloc_flavour, which never
     call place) or return NULL to let the core allocate it as usual.  Other sizes, and the
     fast path, never see it.
     `frame` is the frame address of the allocator's entry point (__builtin_frame_address(0)
     there): the program's frames lie above it, which is where a context is read from; `ret`
     is the entry point's return address: the program's call site.
   - chunk: a large object is freed (CA_CHUNK_FREE) or about to be resized in place or moved
     (CA_CHUNK_RESIZE), or a block of a span holding a page from _ca_malloc_page is freed
     (CA_CHUNK_FREE, size 0):
     the policy stops watching it.
   - sample: span-class chunks (up to _ca_medium_limit, also those of a class placed one by
     one, before `place` sees them), sampled by bytes.  While `_ca_sample_period` is not 0, each
     thread's ordinary heap counts down the bytes its span-class allocations take (counted as it
     fills a span's free list, and block by block for a routed class) and, on the generic path,
     calls `sample` once the count has crossed a period, so each call stands for about
     `_ca_sample_period` bytes of such allocations.  The policy may return the chunk (on pages
     of its own) or NULL.  Called from
     `sample`, _ca_sample_defer(k) makes this thread's next sample come k periods later.
   Span-level mapping for span classes: `_ca_route_class(c, flavour)` makes every ordinary
   heap serve class c from its heap of that flavour (0: back to its own spans).  A heap sees
   the change at its next generic call: a routed class's direct[] entries point at the empty
   span, so all its allocations take the generic path, which serves them from the flavour
   heap (routing is for classes whose blocks stream through the cache: a slower malloc there
   costs little next to the misses they take anyway). */
#ifndef CA_HOOKS_H
#define CA_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ca_chunk_event_e { CA_CHUNK_FREE, CA_CHUNK_RESIZE } ca_chunk_event_t;

typedef struct ca_hooks_s {
  bool (*span_memory)(void* base, size_t bytes, uint32_t flavour);
  void (*span_released)(void* base, size_t bytes, uint32_t flavour);
  bool (*span_ready)(size_t bytes, uint32_t flavour);
} ca_hooks_t;

typedef struct ca_policy_s {
  void* (*place)(size_t n, bool zero, const void* frame, const void* ret);
  void  (*chunk)(ca_chunk_event_t event, void* p, size_t size);
  void* (*sample)(size_t n, const void* frame, const void* ret);
} ca_policy_t;

#pragma GCC visibility push(hidden)
extern const ca_hooks_t* _ca_hooks;
extern const ca_policy_t* _ca_policy;
void _ca_hooks_install(const ca_hooks_t* hooks);   /* NULL uninstalls */
void _ca_policy_install(const ca_policy_t* policy);
extern int64_t  _ca_sample_period;            /* bytes of sampled allocations per sample (0: none) */
void _ca_sample_defer(uint32_t periods);       /* from `sample`: the next one periods later */
void _ca_route_class(uint32_t c, uint8_t flavour);
uint8_t _ca_class_route(uint32_t c);           /* the flavour class c is served from (0: own) */
void _ca_place_class(uint32_t c, bool on);     /* class c's chunks of a page or more go to `place` */
bool _ca_class_placed(uint32_t c);
#pragma GCC visibility pop

#define CA_HOOK(name, ...) do { const ca_hooks_t* h_ = _ca_hooks; if (h_ != NULL && h_->name != NULL) h_->name(__VA_ARGS__); } while (0)
#define CA_POLICY_CHUNK(...) do { const ca_policy_t* p_ = _ca_policy; if (p_ != NULL) p_->chunk(__VA_ARGS__); } while (0)

/* the policy's chunk, or NULL: the core allocates */
static inline void* _ca_policy_place(size_t n, bool zero, const void* frame, const void* ret) {
  const ca_policy_t* p = __atomic_load_n(&_ca_policy, __ATOMIC_ACQUIRE);
  return p != NULL ? p->place(n, zero, frame, ret) : NULL;
}

#endif
