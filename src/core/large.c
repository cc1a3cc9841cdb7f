/* Large objects (bigger than the largest size class): one object per LARGE segment, owned by no
   heap, so any thread allocates and frees them through the segment cache without touching a
   heap.  The object starts one header page into the segment plus a random whole number of cache
   lines (jemalloc's cache-oblivious placement), so large buffers of different objects do not all
   start on L1 set 0.  realloc grows or shrinks in place while the mapping is big enough. */
#include "internal.h"
#include "hooks.h"
#include <sys/mman.h>

static _Atomic(uint64_t) large_rng = 0x9E3779B97F4A7C15ull;

static size_t random_line_offset(void) {
  uint64_t x = atomic_fetch_add_explicit(&large_rng, 0x9E3779B97F4A7C15ull, ca_relaxed);
  x ^= _ca_process.seed;
  x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return _ca_layout_large_offset(&x);
}

void* _ca_large_alloc(size_t n, size_t align, bool zero) {
  if (n > PTRDIFF_MAX) { errno = ENOMEM; return NULL; }
  _ca_ensure_init();
  size_t off = align > CA_MIN_ALIGN ? 0 : random_line_offset();
  ca_segment_t* seg = _ca_segment_large_alloc(n, align, &off);
  if (seg == NULL) return NULL;
  uint8_t* p = (uint8_t*)seg + off;
  seg->large_ptr = p;
  seg->large_size = seg->size - off;
  _ca_stat_inc(&_ca_stats.large_allocs, 1);
  _ca_stat_add(&_ca_stats.large_live, 1, NULL);
  _ca_stat_add(&_ca_stats.large_live_bytes, (int64_t)seg->large_size, &_ca_stats.large_peak_bytes);
  uint8_t* page = (uint8_t*)seg + (off & ~(CA_OS_PAGE - 1));
  CA_HOOK(span_memory, page, seg->size - (size_t)(page - (uint8_t*)seg), seg->flavour);
  if (zero && !seg->is_zero) memset(p, 0, n);
  CA_HOOK(chunk, CA_CHUNK_ALLOC, p, n);
  return p;
}

void _ca_large_free(ca_segment_t* seg) {
  CA_HOOK(chunk, CA_CHUNK_FREE, seg->large_ptr, seg->large_size);
  uint8_t* page = (uint8_t*)((uintptr_t)seg->large_ptr & ~(uintptr_t)(CA_OS_PAGE - 1));
  CA_HOOK(span_released, page, seg->size - (size_t)(page - (uint8_t*)seg), seg->flavour);
  _ca_stat_add(&_ca_stats.large_live, -1, NULL);
  _ca_stat_add(&_ca_stats.large_live_bytes, -(int64_t)seg->large_size, NULL);
  seg->spans[0].flags = CA_SPAN_UNUSED;
  _ca_segment_large_free(seg);
}

/* In place when the mapping already has room and the block would not be mostly empty; otherwise
   NULL (the caller moves it).  Shrinking gives the tail pages back to the OS. */
void* _ca_large_realloc(ca_segment_t* seg, void* p, size_t n) {
  size_t have = seg->large_size;
  if (n > have) return NULL;
  if (n < have / 2 && have - n > CA_SEGMENT_SIZE) {
    /* keep the object where it is and return whole pages past its new end */
    uintptr_t keep = ((uintptr_t)p + n + CA_OS_PAGE - 1) & ~(uintptr_t)(CA_OS_PAGE - 1);
    uintptr_t end = (uintptr_t)seg + seg->size;
    if (end > keep) _ca_os_purge((void*)keep, end - keep);
  }
  return p;
}
