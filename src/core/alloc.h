/* The two fast paths, inline.  malloc: one TLS load, one table load, pop a list.  free: check the
   pointer is ours and a block start (segment bitmap + exact division), check the span is this
   thread's and needs no care (one field, span.local), push on the local list.  Anything else
   (first call of a thread, empty list, remote or full span, over-aligned block, double free,
   large object) goes to a noinline slow path, reached by a tail call, so these stay small and
   spill no registers. */
#ifndef CA_ALLOC_H
#define CA_ALLOC_H

#include "internal.h"

/* a block from the heap's direct table, or NULL */
static inline __attribute__((always_inline)) void* _ca_heap_pop(ca_heap_t* h, size_t n) {
  if (ca_likely(n <= CA_DIRECT_MAX)) {
    ca_span_t* s = h->direct[(n + CA_MIN_ALIGN - 1) / CA_MIN_ALIGN];
    ca_block_t* b = s->free;
    if (ca_likely(b != NULL)) {
      ca_assert(_ca_block_index(s, b) < s->capacity, "free list holds a foreign block", b);
      ca_assert(b->next == NULL || _ca_block_index(s, b->next) < s->capacity, "free list next is foreign", b);
      s->free = b->next;
      s->used++;
      b->key = 0;
      return b;
    }
  }
  return NULL;
}

/* always inline, at any optimisation: the return address the slow path is given is then the
   entry point's (malloc's caller: the policy's call site), whether or not the compiler makes
   the call a tail call (at -O1 it does not: glibc's own buffers read as the program's) */
static inline __attribute__((always_inline)) void* _ca_heap_malloc(ca_heap_t* h, size_t n) {
  void* p = _ca_heap_pop(h, n);
  return ca_likely(p != NULL) ? p : _ca_malloc_generic(h, n, __builtin_return_address(0));
}

static inline __attribute__((always_inline)) void* _ca_malloc(size_t n) { return _ca_heap_malloc(_ca_heap_alloc, n); }

/* malloc on behalf of an entry point other than malloc (calloc, realloc): the policy reads the
   program's context above that entry point's frame */
static inline void* _ca_malloc_from(size_t n, const void* frame, const void* ret) {
  ca_heap_t* h = _ca_heap_alloc;
  void* p = _ca_heap_pop(h, n);
  return ca_likely(p != NULL) ? p : _ca_malloc_generic_at(h, n, frame, ret);
}

/* calloc's zeroing of a span-class block malloc just returned: one carved from zero memory
   (fresh or purged) and never handed out is zero but for its link (rptest: memset was 7.8% of
   the samples, against mimalloc's 6.2%, which skips fresh pages the same way) */
static inline void _ca_zero_block(void* p, size_t n) {
  ca_segment_t* seg = (ca_segment_t*)(_ca_segment_index(p) << CA_SEGMENT_SHIFT);   /* malloc's: ours */
  if (_ca_hooks == NULL && seg->kind != CA_SEG_LARGE && (_ca_span_of(seg, p)->zero & CA_ZERO_LIST)) {
    ((ca_block_t*)p)->next = NULL;
    return;
  }
  memset(p, 0, n);
}

/* p in span s, of this thread's ordinary heap, needing no care (s->local): pushed on its local
   list when it is a block start not already free; false otherwise */
static inline __attribute__((always_inline)) bool _ca_free_mine(ca_span_t* s, void* p) {
  ca_block_t* b = (ca_block_t*)p;
  if (ca_likely(s->local == _ca_heap && _ca_block_index(s, p) < s->capacity && b->key != _ca_key)) {
    b->next = s->local_free;
    b->key = _ca_key;
    s->local_free = b;
    if (ca_unlikely(--s->used == 0)) _ca_free_last(s);   /* a tail call: the fast path spills nothing */
    return true;
  }
  return false;
}

static inline __attribute__((always_inline)) void _ca_free(void* p) {
  /* the index is masked instead of bounds-checked: a wild pointer above 2^47 then names one of
     our segments, and fails the block test below (its offset from the span is no block's) */
  uintptr_t i = _ca_segment_index(p) & (((uintptr_t)1 << CA_SEGMAP_BITS) - 1);
  if (ca_likely(_ca_segmap_bit(i))) {
    ca_segment_t* seg = (ca_segment_t*)(i << CA_SEGMENT_SHIFT);
    /* the span as if the segment were SMALL (a constant shift, no load of the segment's): in a
       MEDIUM or LARGE one, the block test fails p anywhere but in the span this names */
    _Static_assert(sizeof(ca_span_t) == 3 * 32 && CA_MAX_SPANS == 32, "spans[] indexed by shift, mask, x3");
    ca_span_t* s = (ca_span_t*)((uintptr_t)seg->spans + 3 * (((uintptr_t)p >> (CA_SMALL_SHIFT - 5)) & (31 << 5)));
    if (ca_likely(_ca_free_mine(s, p))) return;
    _ca_free_span(seg, p);                    /* another thread's block, or one needing care */
    return;
  }
  _ca_free_unknown(p);
}

#endif
