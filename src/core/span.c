/* Spans: one size class, a flat array of blocks and three free lists (sharded free lists after
   mimalloc): `free` to allocate from, `local_free` for blocks the owner freed, and the atomic
   `thread_free` for blocks other threads freed.  Keeping the owner's frees off the allocation
   list means the fast path pops one list, and the slow path (collect) runs once per list, which
   is where chromalloc does its accounting.  Blocks are carved lazily, about a page at a time, so
   a span touches no memory it has not handed out. */
#include "internal.h"
#include "hooks.h"
#include <sched.h>

void _ca_span_init(ca_heap_t* h, ca_span_t* s, uint32_t sclass) {
  ca_segment_t* seg = _ca_span_segment(s);
  size_t bytes = _ca_span_bytes(seg, s);
  uint32_t bsize = _ca_class_size[sclass];
  uint32_t off = _ca_layout_span_offset(bsize, bytes, &h->colour[sclass], &h->rng);
  _ca_layout_span_shape(s, bsize);
  s->start = _ca_span_base(seg, s) + off;
  s->reserved = (uint16_t)((bytes - off) / bsize);
  s->capacity = 0;
  s->free = NULL;
  s->local_free = NULL;
  atomic_store_explicit(&s->thread_free, CA_DELAY_NONE, ca_relaxed);
  s->used = 0;
  s->used_seen = 0;
  s->installed = 0;
  s->sclass = (uint8_t)sclass;
  s->flags = 0;
  _ca_span_local(s, h);
  /* a span of a flavour is of that flavour only if the hook could fill it */
  const ca_hooks_t* hk = _ca_hooks;
  bool filled = hk != NULL && hk->span_memory != NULL && hk->span_memory(_ca_span_base(seg, s), bytes, seg->flavour);
  s->flavour = filled ? seg->flavour : 0;
}

/* Carve the next blocks, up to one OS page worth (at least one block), in address order. */
void _ca_span_extend(ca_span_t* s) {
  uint32_t bsize = s->block_size;
  uint32_t n = bsize >= CA_OS_PAGE ? 1 : (uint32_t)(CA_OS_PAGE / bsize);
  if (n > s->reserved - s->capacity) n = s->reserved - s->capacity;
  if (n == 0) return;
  if (s->zero & CA_ZERO_TAIL) s->zero = s->free == NULL ? CA_ZERO_TAIL | CA_ZERO_LIST : CA_ZERO_TAIL;
  uint8_t* first = s->start + (size_t)s->capacity * bsize;
  uint8_t* p = first;
  for (uint32_t i = 1; i < n; i++, p += bsize) ((ca_block_t*)p)->next = (ca_block_t*)(p + bsize);
  ((ca_block_t*)p)->next = s->free;
  s->free = (ca_block_t*)first;
  s->capacity += n;
}

/* Move remote frees to local_free, and local_free to free when free is empty.  When the remote
   list brings back every block of a span carved to its end and `free` is empty, the span starts
   again from its first block instead (see span_restart in heap.c): its lists are dropped
   unread.  Their blocks were last written by other threads, and walking them cost a miss per
   block, where carving writes the lines in address order (producer/consumer programs such as
   xmalloc-test, whose every span comes back whole). */
void _ca_span_collect(ca_span_t* s) {
  uintptr_t tf = atomic_load_explicit(&s->thread_free, ca_relaxed);
  if (CA_TF_BLOCKS(tf) != NULL) {
    while (!atomic_compare_exchange_weak_explicit(&s->thread_free, &tf, tf & CA_DELAY_MASK,
                                                  ca_acq_rel, ca_relaxed)) {}
    ca_block_t* head = CA_TF_BLOCKS(tf);
    uint32_t n = (uint32_t)(tf >> CA_TF_COUNT_SHIFT);
    if (n == s->used && s->free == NULL && s->capacity == s->reserved) {
      s->local_free = NULL;
      s->capacity = 0;
      s->used = 0;
      s->zero = 0;                        /* carved again over its old bytes */
      return;
    }
    ca_block_t* tail = head;
    uint32_t count = 1;
    while (tail->next != NULL && count < n) { tail = tail->next; count++; }
    if (count != n || tail->next != NULL) _ca_fatal("corrupted remote free list in span of block %p", head);
    tail->next = s->local_free;
    s->local_free = head;
    s->used -= count;
  }
  if (s->free == NULL && s->local_free != NULL) {
    s->free = s->local_free;
    s->local_free = NULL;
    s->zero &= (uint8_t)~CA_ZERO_LIST;
  }
}

/* Change the delayed-free state, waiting out a remote thread that is in the middle of pushing
   to the heap's delayed list.  NEVER sticks unless override_never (used when adopting). */
void _ca_span_set_delay(ca_span_t* s, uintptr_t state, bool override_never) {
  uintptr_t tf = atomic_load_explicit(&s->thread_free, ca_acquire);
  for (int spins = 0;;) {
    uintptr_t old = tf & CA_DELAY_MASK;
    if (old == CA_DELAY_FREEING) {
      if (++spins < 64) ca_cpu_relax(); else sched_yield();
      tf = atomic_load_explicit(&s->thread_free, ca_acquire);
      continue;
    }
    if (old == state || (old == CA_DELAY_NEVER && !override_never)) return;
    if (atomic_compare_exchange_weak_explicit(&s->thread_free, &tf, (tf & ~CA_DELAY_MASK) | state,
                                              ca_acq_rel, ca_acquire)) return;
  }
}
