/* Thread heaps: the per-thread owner of spans.  A heap keeps, per size class, a queue of spans
   whose first span is the one allocating (and is what direct[] points at for small sizes), a
   queue of full spans, and the atomic delayed-free list through which other threads hand back
   blocks of full spans.  The generic malloc path lives here: it runs when the first span of a
   class has no block ready, and is also the heap's heartbeat (delayed frees, purging).

   Heaps are never unmapped: a thread that exits returns its heap to a pool for the next thread,
   so a remote thread holding a heap pointer never reads freed memory. */
#include "alloc.h"
#include "hooks.h"
#include "queue.h"

ca_span_t _ca_span_empty = { .flags = CA_SPAN_UNUSED };
ca_heap_t _ca_heap_empty = { .direct = { [0 ... CA_DIRECT_N - 1] = &_ca_span_empty } };
__thread ca_heap_t* _ca_heap __attribute__((tls_model("initial-exec"))) = &_ca_heap_empty;
__thread ca_heap_t* _ca_heap_alloc __attribute__((tls_model("initial-exec"))) = &_ca_heap_empty;
__thread bool _ca_no_policy __attribute__((tls_model("initial-exec")));

static ca_lock_t  registry_lock;
static ca_heap_t* registry_first;

/* ---- span-level mapping of small classes, and sampling (hooks.h) -------------------------------- */

static _Atomic(uint8_t)  class_route[CA_CLASS_MAX];     /* flavour heap serving the class (0: own) */
_Atomic(uint32_t) _ca_route_gen;    /* routes changed, or a policy installed: 0 in the allocator alone */

void _ca_route_class(uint32_t c, uint8_t flavour) {
  if (c >= CA_CLASS_MAX || atomic_load_explicit(&class_route[c], ca_relaxed) == flavour) return;
  atomic_store_explicit(&class_route[c], flavour, ca_relaxed);
  atomic_fetch_add_explicit(&_ca_route_gen, 1, ca_release);
}

uint8_t _ca_class_route(uint32_t c) { return c < CA_CLASS_MAX ? atomic_load_explicit(&class_route[c], ca_relaxed) : 0; }

/* span classes of a page or more whose chunks the policy names one by one (`place`) */
static _Atomic(uint8_t) class_placed[CA_CLASS_MAX];

void _ca_place_class(uint32_t c, bool on) {
  if (c < CA_CLASS_MAX) atomic_store_explicit(&class_placed[c], on, ca_relaxed);
}

bool _ca_class_placed(uint32_t c) { return c < CA_CLASS_MAX && atomic_load_explicit(&class_placed[c], ca_relaxed); }

static bool routed(const ca_heap_t* h, uint32_t c) {
  return h->flavour == 0 && atomic_load_explicit(&class_route[c], ca_relaxed) != 0;
}

/* ---- span queues ------------------------------------------------------------------------------ */

/* Point the direct entries of class c at the first span of its queue (at the empty span when
   the class is routed to a flavour heap: every allocation then takes the generic path). */
static void direct_update(ca_heap_t* h, uint32_t c) {
  size_t lo = c == 0 ? 0 : _ca_class_size[c - 1] / CA_MIN_ALIGN + 1;
  if (lo >= CA_DIRECT_N) return;
  size_t hi = _ca_class_size[c] / CA_MIN_ALIGN;
  if (hi >= CA_DIRECT_N) hi = CA_DIRECT_N - 1;
  ca_span_t* s = h->queues[c].first && !routed(h, c) ? h->queues[c].first : &_ca_span_empty;
  for (size_t w = lo; w <= hi; w++) h->direct[w] = s;
}

void _ca_heap_queue_remove(ca_heap_t* h, ca_span_t* s) {
  uint32_t c = (s->flags & CA_SPAN_FULL) ? CA_CLASS_FULL : s->sclass;
  bool was_first = h->queues[c].first == s;
  spanq_remove(&h->queues[c], s);
  if (was_first && c != CA_CLASS_FULL) direct_update(h, c);
}

/* ---- full spans ------------------------------------------------------------------------------- */

static void span_to_full(ca_heap_t* h, ca_span_t* s) {
  _ca_heap_queue_remove(h, s);
  s->flags |= CA_SPAN_FULL;
  s->local = NULL;
  spanq_push_back(&h->queues[CA_CLASS_FULL], s);
  _ca_span_set_delay(s, CA_DELAY_USE, false);
  /* a remote free may have landed before the state changed: it would wait unseen */
  if (CA_TF_BLOCKS(atomic_load_explicit(&s->thread_free, ca_acquire)) != NULL) _ca_heap_span_unfull(h, s);
}

void _ca_heap_span_unfull(ca_heap_t* h, ca_span_t* s) {
  spanq_remove(&h->queues[CA_CLASS_FULL], s);
  s->flags &= (uint8_t)~CA_SPAN_FULL;
  _ca_span_local(s, h);
  _ca_span_set_delay(s, CA_DELAY_NONE, false);
  /* a flavour's own span goes before an ordinary one (see queue_find) */
  ca_span_queue_t* q = &h->queues[s->sclass];
  if (h->flavour != 0 && s->flavour != 0 && q->first != NULL && q->first->flavour == 0) spanq_push_front(q, s);
  else spanq_push_back(q, s);
  if (q->first == s) direct_update(h, s->sclass);
}

/* ---- retire: a span whose blocks are all free ---------------------------------------------- */

static uint32_t list_length(const ca_block_t* b) {
  uint32_t n = 0;
  for (; b != NULL; b = b->next) n++;
  return n;
}

/* Collect a span's frees outside a refill.  Its `free` list may take the local frees, and the
   statistics count what was handed out as `installed` less what is left of that list: so they
   are settled before, and restart from the list as it is after (settled after it, a thread that
   exited with local frees counted 2^32 allocations too many). */
static void collect_settled(ca_heap_t* h, ca_span_t* s) {
  _ca_stats_span_settle(h, s, list_length(s->free));
  _ca_span_collect(s);
  s->installed = (uint16_t)list_length(s->free);
  _ca_stats_span_settle(h, s, s->installed);          /* the live blocks the collect freed */
}

/* an empty span leaves its heap's queue and goes back to its segment */
static void give_back(ca_heap_t* h, ca_span_t* s) {
  _ca_stats_span_settle(h, s, list_length(s->free));
  _ca_heap_queue_remove(h, s);
  _ca_segment_span_free(h, s);
}

static bool refillable(const ca_heap_t* h, const ca_span_t* s) {
  const ca_hooks_t* hk = _ca_hooks;
  ca_segment_t* seg = _ca_segment_of(s->start);
  return hk != NULL && hk->span_ready != NULL && seg != NULL && hk->span_ready(_ca_span_bytes(seg, s), h->flavour);
}

/* An empty span that is kept starts again from its first block, carved in address order as
   in a new span.  Its lists hold the blocks in the order of the last frees, and each frame
   that ends in the middle of a span's list mixes it further: over 3000 frames of pv messages,
   52% of its messages lay next to the one before in kept spans (97% in spans made anew), and
   allocating, writing, reading and freeing them took 1.47x as long as with the policy off
   (1.15x since).  Only a span carved to its end restarts, so that between two restarts a span
   hands out at least its blocks less a page (a program that takes and gives back one block
   never carves that far). */
static void span_restart(ca_heap_t* h, ca_span_t* s) {
  _ca_stats_span_settle(h, s, list_length(s->free));
  s->free = NULL;
  s->local_free = NULL;
  s->capacity = 0;
  s->installed = 0;
  s->zero = 0;
}

void _ca_heap_span_retire(ca_heap_t* h, ca_span_t* s) {
  ca_span_queue_t* q = &h->queues[s->sclass];
  /* keep the only span of a class warm; and a span of a flavour was assembled page by page
     (one mremap each) and would be taken apart the same way: a flavour heap keeps its empty
     spans for the next blocks of their class (a routed class's blocks, all freed every frame,
     were re-assembled every frame) until the thread exits or calls chromalloc_collect /
     malloc_trim.  One the hook could not fill (its pool was short) is ordinary memory: it is
     kept only until the hook could fill its replacement (kept for good, it streamed 1 of pv
     packets' 7 spans through every colour each frame; given back at once, it was made again,
     ordinary, every frame the pool stayed short) */
  bool keep = (q->first == s && s->next == NULL) || (h->flavour != 0 && (s->flavour != 0 || !refillable(h, s)));
  if (!keep) give_back(h, s);
  else if (s->capacity == s->reserved) span_restart(h, s);
}

/* chromalloc_collect / malloc_trim: the empty spans a thread's flavour heaps keep (see retire)
   go back */
void _ca_heap_collect_flavours(ca_heap_t* h) {
  for (uint32_t f = 1; f < CA_FLAVOURS; f++) {
    ca_heap_t* fh = h->flavours[f];
    if (fh == NULL) continue;
    _ca_heap_delayed_free(fh);
    for (uint32_t c = 0; c < _ca_class_count; c++)
      for (ca_span_t* s = fh->queues[c].first, *next; s != NULL; s = next) {
        next = s->next;
        collect_settled(fh, s);
        if (s->used == 0) give_back(fh, s);
      }
  }
}

/* ---- delayed frees ---------------------------------------------------------------------------- */

void _ca_heap_delayed_free(ca_heap_t* h) {
  ca_block_t* b = atomic_exchange_explicit(&h->delayed_free, NULL, ca_acquire);
  while (b != NULL) {
    ca_block_t* next = b->next;
    ca_segment_t* seg = _ca_segment_of(b);
    ca_span_t* s = _ca_span_of(seg, b);
    _ca_span_set_delay(s, CA_DELAY_NONE, false);
    if (s->flags & CA_SPAN_FULL) _ca_heap_span_unfull(h, s);
    b->next = s->local_free;
    s->local_free = b;
    if (--s->used == 0) _ca_heap_span_retire(h, s);
    b = next;
  }
}

/* ---- the generic allocation path -------------------------------------------------------------- */

/* Make s->free non-empty if the span has any block: settle statistics for the list it used up,
   then collect frees, then carve fresh blocks. */
static void span_refill(ca_heap_t* h, ca_span_t* s) {
  if (s->free != NULL) return;
  _ca_stats_span_settle(h, s, 0);
  _ca_span_collect(s);
  if (s->free == NULL && s->capacity < s->reserved) _ca_span_extend(s);
  s->installed = (uint16_t)(s->capacity - s->used);
  h->sample_left -= (int64_t)(s->installed * s->block_size);   /* bytes the list will serve */
}

/* The first span of class c with a block ready, moving exhausted spans to the full queue.  In a
   flavour heap, a span the hook could not fill (ordinary memory, see retire) is the last resort:
   the flavour's own spans come first, and once the hook could fill a new span, the ordinary one
   serves nothing more (and goes back when empty).  (Taken in queue order, pv packets' one
   ordinary span of 8 came first after every frame, filled spans rejoining at the back: 1.7% of
   the packets of 6000 frames went through every colour, 1.0% now, the median of 5 runs each.) */
static ca_span_t* queue_find(ca_heap_t* h, uint32_t c) {
  ca_span_queue_t* q = &h->queues[c];
  ca_span_t* ordinary = NULL;
  for (ca_span_t* s = q->first; s != NULL;) {
    ca_span_t* next = s->next;
    span_refill(h, s);
    if (s->free != NULL && h->flavour != 0 && s->flavour == 0) {
      if (!refillable(h, s)) { if (ordinary == NULL) ordinary = s; }
      else if (s->used == 0) give_back(h, s);
    } else if (s->free != NULL) {
      if (q->first != s) { spanq_remove(q, s); spanq_push_front(q, s); direct_update(h, c); }
      return s;
    } else {
      span_to_full(h, s);
    }
    s = next;
  }
  if (ordinary != NULL && q->first != ordinary) { spanq_remove(q, ordinary); spanq_push_front(q, ordinary); direct_update(h, c); }
  return ordinary;
}

static ca_span_t* heap_find_span(ca_heap_t* h, uint32_t c) {
  ca_span_t* s = queue_find(h, c);
  if (s != NULL) return s;
  ca_segment_kind_t kind = (ca_segment_kind_t)_ca_class_kind[c];
  /* before taking a new span, adopt what exited threads left: it may hold this class */
  if (h->segments[kind].first == NULL && _ca_segment_reclaim(h) && (s = queue_find(h, c)) != NULL) return s;
  s = _ca_segment_span_alloc(h, kind, c);
  if (s == NULL) return NULL;
  _ca_span_init(h, s, c);
  _ca_span_extend(s);
  s->installed = (uint16_t)s->capacity;
  h->sample_left -= (int64_t)(s->installed * s->block_size);
  spanq_push_front(&h->queues[c], s);
  direct_update(h, c);
  return s;
}

/* from the policy's `sample`: this thread's next sample comes `periods` periods later */
void _ca_sample_defer(uint32_t periods) {
  ca_heap_t* h = _ca_heap;
  if (periods > 1 && h->flavour == 0) h->sample_left += (int64_t)(periods - 1) * __atomic_load_n(&_ca_sample_period, __ATOMIC_RELAXED);
}

/* A span-class allocation in an ordinary heap: sampled for the policy when it crosses a
   sampling period, offered to `place` when the policy names its class one by one, served by a
   flavour heap when its class is routed, else NULL (the heap's own spans). */
static void* small_policy(ca_heap_t* h, size_t n, const void* frame, const void* ret, bool policy) {
  uint32_t gen = atomic_load_explicit(&_ca_route_gen, ca_acquire);
  if (ca_unlikely(h->route_gen != gen)) {
    for (uint32_t c = 0; c < _ca_class_count; c++) direct_update(h, c);
    h->route_gen = gen;
  }
  uint32_t c = _ca_size_class(n);
  bool via = routed(h, c);
  /* bytes are counted as free lists are filled (span_refill), routed blocks one by one */
  if (via) h->sample_left -= (int64_t)_ca_class_size[c];
  int64_t period = __atomic_load_n(&_ca_sample_period, __ATOMIC_RELAXED);
  if (ca_unlikely(h->sample_left < 0) && period != 0 && !_ca_no_policy) {
    h->rng ^= h->rng << 13; h->rng ^= h->rng >> 7; h->rng ^= h->rng << 17;
    h->sample_left = period / 2 + (int64_t)(h->rng % (uint64_t)period);
    const ca_policy_t* p = __atomic_load_n(&_ca_policy, __ATOMIC_ACQUIRE);
    void* q = p != NULL && p->sample != NULL ? p->sample(n, frame, ret) : NULL;
    if (q != NULL) return q;
  }
  /* a class named one by one goes to `place` before its route: with every chunk monitored
     (nightwatch_monitor=1), a routed class had 91 of pv packets' 6000 chunks monitored */
  if (policy && n >= CA_OS_PAGE && atomic_load_explicit(&class_placed[c], ca_relaxed)) {
    void* q = _ca_policy_place(n, false, frame, ret);
    if (q != NULL) { h->sample_left -= (int64_t)_ca_class_size[c]; return q; }   /* still sampled */
  }
  if (!via) return NULL;
  ca_heap_t* f = _ca_heap_flavour(atomic_load_explicit(&class_route[c], ca_relaxed));
  return f != NULL && f != h ? _ca_heap_malloc(f, n) : NULL;
}

/* malloc reaches this by a tail call (at -O2): its caller's frame is this one's.  Without the
   tail call the stack scan starts one frame deeper, and `ret` still names malloc's caller. */
void* _ca_malloc_generic(ca_heap_t* h, size_t n, const void* ret) {
  return _ca_malloc_generic_at(h, n, __builtin_frame_address(0), ret);
}

void* _ca_malloc_generic_at(ca_heap_t* h, size_t n, const void* frame, const void* ret) {
  if (ca_unlikely(h == &_ca_heap_empty)) {
    h = _ca_thread_init();
    if (h == NULL) { errno = ENOMEM; return NULL; }
  }
  /* a chunk above the span classes is the policy's to place; a span-class one is sampled
     (small_policy) and then, in a class the policy names one by one, offered to it as well */
  bool policy = h->flavour == 0 && !_ca_no_policy;
  if (n > _ca_medium_limit) {
    void* p = policy ? _ca_policy_place(n, false, frame, ret) : NULL;
    return p != NULL ? p : _ca_large_alloc(n, 0, false, h->flavour);
  }
  h->generic_calls++;
  if (atomic_load_explicit(&h->delayed_free, ca_relaxed) != NULL) _ca_heap_delayed_free(h);
  for (uint32_t f = 1; f < CA_FLAVOURS && (h->generic_calls & 63) == 0; f++)
    if (h->flavours[f] && atomic_load_explicit(&h->flavours[f]->delayed_free, ca_relaxed)) _ca_heap_delayed_free(h->flavours[f]);
  if ((h->purge[0].first != NULL || h->purge[1].first != NULL) && (h->generic_calls & 15) == 0) _ca_segment_purge_expired(h, false);
  /* the allocator alone never comes here: no policy installed, no class routed */
  if (h->flavour == 0 && ca_unlikely(atomic_load_explicit(&_ca_route_gen, ca_relaxed) != 0)) {
    void* p = small_policy(h, n, frame, ret, policy);
    if (p != NULL) return p;
  }
  ca_span_t* s = heap_find_span(h, _ca_size_class(n));
  if (ca_unlikely(s == NULL)) { errno = ENOMEM; return NULL; }
  ca_block_t* b = s->free;
  ca_assert(_ca_block_index(s, b) < s->capacity, "free list holds a foreign block", b);
  s->free = b->next;
  s->used++;
  b->key = 0;
  return b;
}

/* ---- adoption (segment reclaim) --------------------------------------------------------------- */

void _ca_heap_adopt_span(ca_heap_t* h, ca_span_t* s) {
  s->zero = 0;
  _ca_span_set_delay(s, CA_DELAY_NONE, true);
  s->flags &= (uint8_t)~CA_SPAN_FULL;
  _ca_span_local(s, h);
  collect_settled(h, s);
  if (s->used == 0) {
    _ca_segment_span_free(h, s);
    return;
  }
  spanq_push_back(&h->queues[s->sclass], s);
  if (h->queues[s->sclass].first == s) direct_update(h, s->sclass);
}

/* ---- heap life cycle -------------------------------------------------------------------------- */

/* Reset a heap for a new thread.  The registry fields (next_heap, in_use) are left alone: the
   heap was claimed under the registry lock, and clearing in_use here would let another thread
   claim it too. */
void _ca_heap_init(ca_heap_t* h) {
  ca_pacer_t pace = h->pacer;      /* what reuse taught outlives the thread: larson's threads of a
                                      few ms each started again at the base pace, purging spans
                                      the next thread faulted in (3x mimalloc's page faults) */
  memset(h, 0, offsetof(ca_heap_t, next_heap));
  h->pacer = pace;
  h->main = h;
  for (size_t w = 0; w < CA_DIRECT_N; w++) h->direct[w] = &_ca_span_empty;
  h->rng = _ca_process.seed ^ ((uintptr_t)h * 0x9E3779B97F4A7C15ull);
  if (h->rng == 0) h->rng = 0x2545F4914F6CDD1Dull;
  for (uint32_t c = 0; c < _ca_class_count; c++)
    h->colour[c] = _ca_layout_first_colour(_ca_class_size[c], &h->rng);
}

/* A heap for a new thread: a pooled one, or a fresh page.  The registry is never shrunk. */
ca_heap_t* _ca_heap_acquire(void) {
  _ca_lock(&registry_lock);
  ca_heap_t* h = registry_first;
  while (h != NULL && h->in_use) h = h->next_heap;
  if (h != NULL) {
    h->in_use = true;
    _ca_stat_inc(&_ca_stats.heaps_reused, 1);
  }
  _ca_unlock(&registry_lock);
  if (h == NULL) {
    h = _ca_os_map((sizeof(ca_heap_t) + CA_OS_PAGE - 1) & ~(CA_OS_PAGE - 1));
    if (h == NULL) return NULL;
    _ca_lock(&registry_lock);
    h->in_use = true;
    h->next_heap = registry_first;
    registry_first = h;
    _ca_unlock(&registry_lock);
  }
  _ca_heap_init(h);
  return h;
}

/* Register a heap that was not mapped by _ca_heap_acquire (the main thread's static heap). */
void _ca_heap_register(ca_heap_t* h) {
  _ca_lock(&registry_lock);
  h->in_use = true;
  h->next_heap = registry_first;
  registry_first = h;
  _ca_unlock(&registry_lock);
}

ca_heap_t* _ca_heap_first(void) { return registry_first; }

static void for_each_span(ca_heap_t* h, void (*fn)(ca_heap_t*, ca_span_t*)) {
  for (uint32_t c = 0; c <= CA_CLASS_FULL; c++)
    for (ca_span_t* s = h->queues[c].first, *next; s != NULL; s = next) { next = s->next; fn(h, s); }
}
static void span_never(ca_heap_t* h, ca_span_t* s) { (void)h; _ca_span_set_delay(s, CA_DELAY_NEVER, false); }
static void span_leave(ca_heap_t* h, ca_span_t* s) {
  uint32_t c = (s->flags & CA_SPAN_FULL) ? CA_CLASS_FULL : s->sclass;
  spanq_remove(&h->queues[c], s);
  s->flags &= (uint8_t)~CA_SPAN_FULL;
  s->local = NULL;                     /* abandoned: a thread that gets this heap next is not its owner */
  collect_settled(h, s);
  if (s->used == 0) _ca_segment_span_free(h, s);
}

/* Thread exit: stop remote threads from using the heap, hand back what is free, abandon the
   rest.  The heap returns to the pool. */
void _ca_heap_done(ca_heap_t* h) {
  if (h == &_ca_heap_empty || !h->in_use) return;
  for (uint32_t f = 1; f < CA_FLAVOURS; f++)
    if (h->flavours[f] != NULL) { _ca_heap_done(h->flavours[f]); h->flavours[f] = NULL; }
  _ca_heap_delayed_free(h);
  for_each_span(h, span_never);
  _ca_heap_delayed_free(h);            /* blocks pushed before NEVER took effect */
  for_each_span(h, span_leave);
  _ca_segment_abandon(h);
  _ca_stats_heap_flush(h);
  _ca_lock(&registry_lock);
  h->in_use = false;
  _ca_unlock(&registry_lock);
}

/* fork() child: threads other than the caller are gone.  A span of ours left in state FREEING
   by one of them would make us wait forever: the block it was pushing is lost (leaked). */
static void span_unstick(ca_heap_t* h, ca_span_t* s) {
  (void)h;
  uintptr_t tf = atomic_load_explicit(&s->thread_free, ca_relaxed);
  if ((tf & CA_DELAY_MASK) == CA_DELAY_FREEING)
    atomic_store_explicit(&s->thread_free, (tf & ~CA_DELAY_MASK) | CA_DELAY_NONE, ca_relaxed);
}
void _ca_heap_fork_prepare(void) { _ca_lock(&registry_lock); }
void _ca_heap_fork_parent(void) { _ca_unlock(&registry_lock); }
void _ca_heap_fork_child(ca_heap_t* self) {
  atomic_store_explicit(&registry_lock.v, 0, ca_relaxed);
  if (self == &_ca_heap_empty) return;
  for_each_span(self, span_unstick);
  for (uint32_t f = 1; f < CA_FLAVOURS; f++) if (self->flavours[f]) for_each_span(self->flavours[f], span_unstick);
}

/* memory of a flavour (pages of a colour set): the thread's heap of that flavour */
void* _ca_malloc_flavour(size_t n, uint8_t flavour) {
  ca_heap_t* h = _ca_heap_flavour(flavour);
  if (h == NULL) { errno = ENOMEM; return NULL; }
  return _ca_heap_malloc(h, n);
}

/* The thread's mallocs go to its heap of `flavour` (0: its own again).  A thread with no heap
   yet (or none left, exiting) starts one, as its first malloc would; out of memory, it is left
   as it is. */
ca_heap_t* _ca_heap_divert(uint8_t flavour) {
  ca_heap_t* f = _ca_heap_flavour(flavour);
  return _ca_heap_alloc = f != NULL ? f : _ca_heap;
}

/* The calling thread's heap for memory of a flavour (created on first use). */
ca_heap_t* _ca_heap_flavour(uint8_t flavour) {
  ca_heap_t* h = _ca_heap;
  if (ca_unlikely(h == &_ca_heap_empty)) {
    h = _ca_thread_init();
    if (h == NULL) return NULL;
  }
  if (flavour == 0 || flavour >= CA_FLAVOURS) return h;
  ca_heap_t* f = h->flavours[flavour];
  if (f == NULL) {
    f = _ca_heap_acquire();
    if (f == NULL) return NULL;
    f->flavour = flavour;
    f->main = h;
    h->flavours[flavour] = f;
  }
  return f;
}
