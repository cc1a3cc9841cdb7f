/* Over-aligned allocation (posix_memalign, aligned_alloc, memalign, valloc, C++ aligned new).
   - alignment <= 16: every block already is;
   - a class whose stride is a multiple of the alignment (alignment <= a cache line): its blocks
     are aligned because spans start on a line;
   - otherwise, while size + alignment fits a size class: take a bigger block and hand out an
     aligned pointer inside it; the span is flagged ALIGNED so free() maps interior pointers
     back to the block (mimalloc does the same);
   - beyond that: a large object placed at the alignment (any power of two; 2 MiB and more put
     the object on its own 2 MiB boundary). */
#include "alloc.h"

void* _ca_calloc_slow(size_t n) {
  void* p = _ca_malloc(n);
  if (p != NULL) _ca_zero_block(p, n);
  return p;
}

void* _ca_malloc_aligned(size_t n, size_t align, bool zero) {
  if (align <= CA_MIN_ALIGN) return zero ? _ca_calloc_slow(n) : _ca_malloc(n);
  _ca_ensure_init();
  if (n == 0) n = 1;
  if (n <= _ca_medium_limit) {
    uint32_t c = _ca_size_class(n);
    if (align <= _ca_machine.l1d.line && _ca_class_size[c] % align == 0) {
      _ca_no_policy = true;                 /* aligned because it is a block of this class */
      void* p = _ca_malloc(n);
      _ca_no_policy = false;
      if (p != NULL && zero) memset(p, 0, n);
      return p;
    }
  }
  if (n + align - CA_MIN_ALIGN <= _ca_medium_limit && n + align > n) {
    _ca_no_policy = true;                   /* the pointer inside must be a block of a span */
    uint8_t* p = _ca_malloc(n + align - CA_MIN_ALIGN);
    _ca_no_policy = false;
    if (p == NULL) return NULL;
    uint8_t* q = (uint8_t*)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    if (q != p) {
      ca_segment_t* seg = _ca_segment_of(p);
      ca_span_t* s = _ca_span_of(seg, p);
      s->flags |= CA_SPAN_ALIGNED;
      s->local = NULL;
    }
    if (zero) memset(q, 0, n);
    return q;
  }
  return _ca_large_alloc(n, align, zero, 0);
}

size_t _ca_usable_size(const void* p) {
  ca_segment_t* seg = _ca_segment_of(p);
  if (seg == NULL) {
    if (p == NULL) return 0;
    _ca_fatal("malloc_usable_size(): invalid pointer %p (not allocated by chromalloc)", p);
  }
  if (seg->kind == CA_SEG_LARGE) {
    if (p != seg->large_ptr || (seg->spans[0].flags & CA_SPAN_UNUSED))
      _ca_fatal("malloc_usable_size(): invalid pointer %p", p);
    return seg->large_size;
  }
  ca_span_t* s = _ca_span_of(seg, p);
  bool valid;
  uint8_t* b = _ca_block_start(seg, s, p, &valid);
  if (!valid) _ca_fatal("malloc_usable_size(): invalid pointer %p (not an allocated block)", p);
  return s->block_size - (size_t)((const uint8_t*)p - b);
}

/* A page of its own for a policy's sampled small chunk: the page-aligned page inside a block of
   at least two pages (no mapping of its own), its span flagged ALIGNED even when the page is the
   block's start, so that its free reaches the policy (free.c). */
void* _ca_malloc_page(void) {
  void* p = _ca_malloc_aligned(CA_OS_PAGE, CA_OS_PAGE, false);
  ca_segment_t* seg = p != NULL ? _ca_segment_of(p) : NULL;
  if (seg != NULL && seg->kind != CA_SEG_LARGE) {
    ca_span_t* s = _ca_span_of(seg, p);
    s->flags |= CA_SPAN_ALIGNED | CA_SPAN_POLICY;
    s->local = NULL;
  }
  return p;
}
