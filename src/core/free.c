/* free() slow paths: foreign pointers, large objects, over-aligned blocks, full spans, frees
   from a thread that does not own the span, and double-free confirmation.

   What is caught (and aborts with "chromalloc: ..." naming the pointer):
   - a pointer in no chromalloc segment (stack, globals, another allocator's memory);
   - a pointer inside a segment that is not the start of a live block: interior pointers,
     pointers into free spans, headers, or cached segments (only over-aligned spans accept
     interior pointers, since their blocks are handed out at an offset);
   - a double free of a small/medium block: the block's key word is already set (confirmed by
     scanning the owner's free lists when the owner frees it);
   - a double free of a large object (its segment no longer holds it). */
#include "alloc.h"
#include "hooks.h"

_Noreturn static ca_cold void invalid(const char* what, const void* p) { _ca_fatal(what, p); }

/* Block that p points into.  *valid is false when p is not a block start (or, for an
   over-aligned span, not inside a handed-out block). */
void* _ca_block_start(ca_segment_t* seg, ca_span_t* s, const void* p, bool* valid) {
  (void)seg;
  if (s->flags & CA_SPAN_UNUSED) { *valid = false; return NULL; }
  if (s->flags & CA_SPAN_ALIGNED) {
    uintptr_t off = (uintptr_t)p - (uintptr_t)s->start;
    uint64_t idx = off / s->block_size;
    *valid = (uintptr_t)p >= (uintptr_t)s->start && idx < s->capacity;
    return s->start + idx * s->block_size;
  }
  *valid = _ca_block_index(s, p) < s->capacity;
  return (void*)p;
}

static bool list_contains(const ca_block_t* list, const ca_block_t* b, uint32_t limit) {
  for (uint32_t n = 0; list != NULL && n <= limit; list = list->next, n++)
    if (list == b) return true;
  return false;
}

/* The key word says "free": confirm before aborting (the program could, in theory, have the
   same 64-bit value in a live block).  Only the owner calls this: it alone removes blocks from
   thread_free, so walking a snapshot of that list is safe. */
void _ca_free_double_check(ca_heap_t* h, ca_span_t* s, ca_block_t* b) {
  _ca_stat_inc(&_ca_stats.double_frees_checked, 1);
  ca_block_t* remote = CA_TF_BLOCKS(atomic_load_explicit(&s->thread_free, ca_acquire));
  ca_block_t* delayed = atomic_load_explicit(&h->delayed_free, ca_acquire);
  if (list_contains(s->free, b, s->capacity) || list_contains(s->local_free, b, s->capacity) ||
      list_contains(remote, b, s->capacity) || list_contains(delayed, b, UINT32_MAX - 1))
    _ca_fatal("free(): double free of %p", b);
}

/* The span is parked as full and this thread claimed its delayed state: the block goes on the
   owner heap's delayed list, so that the owner takes the span back into use. */
static ca_noinline void free_delayed(ca_segment_t* seg, ca_span_t* s, ca_block_t* b) {
  uintptr_t tf, ntf;
  ca_heap_t* h = atomic_load_explicit(&seg->owner, ca_acquire);
  ca_block_t* head = atomic_load_explicit(&h->delayed_free, ca_relaxed);
  do { b->next = head; } while (!atomic_compare_exchange_weak_explicit(&h->delayed_free, &head, b, ca_release, ca_relaxed));
  tf = atomic_load_explicit(&s->thread_free, ca_relaxed);
  do { ntf = (tf & ~CA_DELAY_MASK) | CA_DELAY_NONE; }
  while (!atomic_compare_exchange_weak_explicit(&s->thread_free, &tf, ntf, ca_release, ca_relaxed));
}

/* Another thread's span: push on its thread_free list (or see free_delayed). */
static inline void free_remote(ca_segment_t* seg, ca_span_t* s, ca_block_t* b) {
  if (ca_unlikely(b->key == _ca_key)) invalid("free(): double free of %p (freed by another thread)", b);
  b->key = _ca_key;
  uintptr_t tf = atomic_load_explicit(&s->thread_free, ca_relaxed), ntf;
  bool delayed;
  do {
    delayed = (tf & CA_DELAY_MASK) == CA_DELAY_USE;
    if (delayed) ntf = (tf & ~CA_DELAY_MASK) | CA_DELAY_FREEING;
    else { b->next = CA_TF_BLOCKS(tf); ntf = (uintptr_t)b | (tf & CA_DELAY_MASK) | ((tf & ~(CA_TF_ONE - 1)) + CA_TF_ONE); }
  } while (!atomic_compare_exchange_weak_explicit(&s->thread_free, &tf, ntf, ca_release, ca_relaxed));
  if (ca_unlikely(delayed)) free_delayed(seg, s, b);
}

/* A block of this thread's heap or of one of its flavour heaps, whose span needs care (full, or a
   flavour's). */
static inline void free_local(ca_segment_t* seg, ca_span_t* s, ca_block_t* b) {
  ca_heap_t* h = atomic_load_explicit(&seg->owner, ca_relaxed);
  if (b->key == _ca_key) _ca_free_double_check(h, s, b);
  b->next = s->local_free;
  b->key = _ca_key;
  s->local_free = b;
  s->used--;
  if (s->flags & CA_SPAN_FULL) _ca_heap_span_unfull(h, s);
  if (s->used == 0) _ca_heap_span_retire(h, s);
}

/* The owner freed the last used block of a span. */
void _ca_free_last(ca_span_t* s) { _ca_heap_span_retire(_ca_heap, s); }

/* free's fast path found no segment: NULL, or a pointer that is not ours */
void _ca_free_unknown(void* p) {
  if (p != NULL) invalid("free(): invalid pointer %p (not allocated by chromalloc)", p);
}

/* Everything but a plain span's block (free_span's fast case): large objects, over-aligned and
   policy spans, and what is invalid. */
static ca_noinline void free_careful(ca_segment_t* seg, ca_span_t* s, void* p) {
  /* the fast path masks the segment index: a wild pointer above user space names one of ours */
  if (_ca_segment_of(p) != seg) invalid("free(): invalid pointer %p (not allocated by chromalloc)", p);
  if (ca_unlikely(seg->cookie != ((uintptr_t)seg ^ _ca_process.secret)))
    invalid("free(): invalid pointer %p (corrupted segment header)", p);
  if (seg->kind == CA_SEG_LARGE) {
    if (p != seg->large_ptr || (seg->spans[0].flags & CA_SPAN_UNUSED))
      invalid(seg->spans[0].flags & CA_SPAN_UNUSED ? "free(): double free of %p (large object)"
                                                   : "free(): invalid pointer %p (inside a large object)", p);
    _ca_large_free(seg);
    return;
  }
  bool valid;
  ca_block_t* b = _ca_block_start(seg, s, p, &valid);
  if (!valid) invalid("free(): invalid pointer %p (not the start of an allocated block)", p);
  /* a block of a span that holds a policy's page may be that page (a sampled chunk it watches);
     other over-aligned spans' frees (mixed: 355,000) do not concern it */
  if (s->flags & CA_SPAN_POLICY) CA_POLICY_CHUNK(CA_CHUNK_FREE, p, 0);
  if (atomic_load_explicit(&seg->thread, ca_relaxed) != _ca_heap) free_remote(seg, s, b);
  else free_local(seg, s, b);
}

/* p lies in segment seg (free's fast path found it, and read p's span as a small one).  A medium
   block of this thread's, and another thread's plain block (producer/consumer programs), are
   checked and pushed without the general path's frame (xmalloc-test on one CPU: 2.30 -> 1.99 s). */
void _ca_free_span(ca_segment_t* seg, void* p) {
  /* masked: a large object's pointer past 128 MiB, or a wild one above 2^47, must not index
     beyond spans[] */
  ca_span_t* s = &seg->spans[(((uintptr_t)p - (uintptr_t)seg) >> seg->span_shift) & (CA_MAX_SPANS - 1)];
  if (seg->span_shift != CA_SMALL_SHIFT && _ca_free_mine(s, p)) return;   /* a medium block */
  if (ca_likely(seg->cookie == ((uintptr_t)seg ^ _ca_process.secret) && seg->kind != CA_SEG_LARGE &&
                (s->flags & (CA_SPAN_UNUSED | CA_SPAN_ALIGNED | CA_SPAN_POLICY)) == 0 && _ca_block_index(s, p) < s->capacity)) {
    if (atomic_load_explicit(&seg->thread, ca_relaxed) != _ca_heap) free_remote(seg, s, (ca_block_t*)p);
    else free_local(seg, s, (ca_block_t*)p);
    return;
  }
  free_careful(seg, s, p);
}
