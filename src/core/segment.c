/* Segments: where spans come from and where free memory goes.

   A heap owns segments; those with a free span sit in heap->segments[kind] (kind = SMALL or
   MEDIUM), and all of them in heap->all.  A span freed inside a segment that is still in use
   waits on the heap's purge list of its kind (the next span of that kind is its newest) and is
   given back to the OS (MADV_DONTNEED) after purge_delay ms unless it is reused first.  A
   segment whose spans are all free goes to the freeing thread's slots, the one they push out to
   the global segment cache (kept mapped, purged after purge_delay ms, unmapped beyond
   `segment_cache` entries):

     free ──> heap->slots[2] ──> cache_first ... (unpurged, newest first) ... (purged) cache_last
                 ^ the owner, lock-free     ^ any thread, cache_lock

   A LARGE segment holds one object and belongs to no heap; it is cached the same way.

   When a thread exits, its heap's segments are abandoned to a global list (owner = NULL, spans
   in delayed state NEVER so remote frees only touch the span); a heap that needs a segment
   first adopts abandoned ones.  The global lists are behind small locks: they are touched once
   per 2 MiB, never per block. */
#include "internal.h"
#include "hooks.h"
#include "queue.h"
#include "pacer.h"

static ca_lock_t     cache_lock;
static ca_segment_t* cache_first;          /* most recently cached first */
static size_t        cache_count;
static _Atomic(uint64_t) cache_next_purge; /* earliest time a cached or abandoned segment
                                               needs purging */

/* 2 MiB segments are carved from reservations of several (4 MiB, doubling to 32 MiB; untouched
   pages cost no memory).  A thread that maps memory blocks the other threads' page faults in the
   mapping it changes, and the kernel wakes the one that waited on its waker's CPU: rptest's two
   threads then shared one CPU for most of a round while the other idled.  So: one mmap for many
   segments, and each reservation 2 MiB below the last one, never next to it, where the kernel
   would merge the two into one mapping and lock the one in use.  The reservation has a lock of
   its own: an mmap under cache_lock made the other thread, there for a cached segment, yield. */
#define CA_RESERVE_MIN     ((size_t)4 << 20)
#define CA_RESERVE_MAX     ((size_t)32 << 20)
static ca_lock_t     reserve_lock;
static uint8_t*      reserve_next;         /* under reserve_lock */
static uint8_t*      reserve_end;
static uint8_t*      reserve_start;
static size_t        reserve_size;

static ca_lock_t     abandoned_lock;
static ca_segment_t* abandoned_first;

static uint64_t abandoned_purge(uint64_t now, bool force);
static uint64_t slots_expire(uint64_t now, bool force);
static bool fits_better(size_t res, size_t best, size_t touch);

static ca_span_queue_t* purge_queue(ca_heap_t* h, const ca_span_t* s) { return &h->purge[_ca_span_segment(s)->kind]; }

static void purge_remove(ca_heap_t* h, ca_span_t* s) {
  spanq_remove(purge_queue(h, s), s);
  s->purge_at = 0;
}

/* Insert keeping the list in expiry order (adopted spans carry their own expiry time). */
static void purge_insert(ca_heap_t* h, ca_span_t* s) {
  ca_span_queue_t* q = purge_queue(h, s);
  ca_span_t* after = q->last;
  while (after != NULL && after->purge_at > s->purge_at) after = after->prev;
  s->prev = after;
  s->next = after ? after->next : q->first;
  if (s->next) s->next->prev = s; else q->last = s;
  if (after) after->next = s; else q->first = s;
}

/* ---- mapping, cache -------------------------------------------------------------------------- */

/* The cache keeps free segments mapped so the next one costs no system call.  What it holds
   unpurged ("dirty") stays resident, so that is bounded: at most CA_CACHE_DIRTY_MIN bytes or an
   eighth of the memory mapped for live segments, whichever is more, times the cache's pace (a
   program that keeps taking purged segments back gets more room); beyond that the oldest dirty
   segments are purged at once instead of after their wait.  A segment's dirty bytes are what it
   may have resident: a large object's extent, not its 2 MiB mapping (counted whole, 32 cached
   segments of 100 KiB objects looked like 64 MiB and were purged as soon as they came in).  The
   segment just freed is spared up to CA_CACHE_NEWEST_MAX: a program that frees and allocates one
   big buffer per frame reuses it without faulting its pages in again (a 16 MiB buffer took
   945,000 page faults in 2 s, against glibc's 8,000).  Purges run outside the lock, with their
   segments out of the list: a madvise under it made the other thread spin and yield. */
#define CA_CACHE_DIRTY_MIN ((size_t)16 << 20)
#define CA_CACHE_NEWEST_MAX ((size_t)64 << 20)
static ca_segment_t* cache_last;           /* oldest */
static size_t        cache_dirty;          /* unpurged bytes in the cache */
static size_t        cache_bytes;          /* all bytes in the cache */
static ca_pacer_t    cache_pacer;

static uintptr_t segment_cookie(const ca_segment_t* seg) { return (uintptr_t)seg ^ _ca_process.secret; }

static void segment_unmap(ca_segment_t* seg) {
  _ca_segmap_set(seg, false);
  _ca_stat_add(&_ca_stats.mapped_bytes, -(int64_t)seg->size, NULL);
  _ca_os_unmap(seg, seg->size);
}

/* cache list (lock held): most recently cached first; purged ones go back at the old end */
static void cache_link(ca_segment_t* s, bool front) {
  ca_segment_t** near = front ? &cache_first : &cache_last;
  ca_segment_t** far = front ? &cache_last : &cache_first;
  if (front) { s->prev = NULL; s->next = *near; if (*near) (*near)->prev = s; }
  else       { s->next = NULL; s->prev = *near; if (*near) (*near)->next = s; }
  if (*far == NULL) *far = s;
  *near = s;
  cache_count++;
  cache_bytes += s->size;
  if (!s->purged) cache_dirty += s->dirty;
}
static void cache_unlink(ca_segment_t* s) {
  if (s->prev) s->prev->next = s->next; else cache_first = s->next;
  if (s->next) s->next->prev = s->prev; else cache_last = s->prev;
  cache_count--;
  cache_bytes -= s->size;
  if (!s->purged) cache_dirty -= s->dirty;
}

/* Purge the segments of `list` (taken out of the cache, chained by next) with the lock released,
   then put them back at the old end, purged. */
static void cache_purge_list(ca_segment_t* list) {
  if (list == NULL) return;
  _ca_unlock(&cache_lock);
  uint64_t now = _ca_clock_ms();
  for (ca_segment_t* s = list; s != NULL; s = s->next) {
    _ca_os_purge((uint8_t*)s + CA_HEADER_SIZE, s->dirty > CA_HEADER_SIZE ? s->dirty - CA_HEADER_SIZE : 0);
    _ca_stat_inc(&_ca_stats.purges, 1);
    _ca_stat_inc(&_ca_stats.purged_bytes, s->dirty > CA_HEADER_SIZE ? s->dirty - CA_HEADER_SIZE : 0);
    s->purged = 1;
    s->purged_at = now;
    s->dirty = CA_HEADER_SIZE;
  }
  _ca_lock(&cache_lock);
  for (ca_segment_t* s = list, *next; s != NULL; s = next) { next = s->next; cache_link(s, false); }
}

/* Purge cached segments whose wait is over (or all, when forced). */
void _ca_segment_cache_purge(bool force) {
  if (_ca_opt(CA_OPT_PURGE_DELAY) < 0 && !force) return;
  uint64_t now = _ca_clock_ms();
  if (!force && now < atomic_load_explicit(&cache_next_purge, ca_relaxed)) return;
  uint64_t slots_next = slots_expire(now, force);
  _ca_lock(&cache_lock);
  _ca_pacer_purging(&cache_pacer, now);
  uint64_t delay = _ca_pacer_delay(&cache_pacer), next = UINT64_MAX;
  ca_segment_t* list = NULL;
  for (ca_segment_t* s = cache_first, *n; s != NULL; s = n) {
    n = s->next;
    if (s->purged) continue;
    if (force || s->cached_at + delay <= now) { cache_unlink(s); s->next = list; list = s; }
    else if (s->cached_at + delay < next) next = s->cached_at + delay;
  }
  cache_purge_list(list);
  _ca_unlock(&cache_lock);
  uint64_t abandoned_next = abandoned_purge(now, force);
  if (abandoned_next < next) next = abandoned_next;
  atomic_store_explicit(&cache_next_purge, slots_next < next ? slots_next : next, ca_relaxed);
}

uint32_t _ca_segment_cache_pace(void) { return _ca_pacer_mult(&cache_pacer); }

/* The global cache takes a free segment (cached_at set: its wait may have begun in a slot). */
static void cache_insert(ca_segment_t* seg) {
  ca_segment_t* evict = NULL;
  ca_segment_t* list = NULL;
  _ca_lock(&cache_lock);
  cache_link(seg, true);
  bool taken = _ca_opt(CA_OPT_PURGE_DELAY) == 0;       /* seg is out of the cache (on `list` or evicted) */
  if (taken) { cache_unlink(seg); seg->next = NULL; list = seg; }
  if (cache_count > (size_t)_ca_opt(CA_OPT_SEGMENT_CACHE)) { evict = cache_last; cache_unlink(evict); taken |= evict == seg; }
  size_t live = (size_t)atomic_load_explicit(&_ca_stats.mapped_bytes, ca_relaxed) - cache_bytes;
  uint32_t room = _ca_pacer_mult(&cache_pacer) < 8 ? _ca_pacer_mult(&cache_pacer) : 8;
  size_t budget = (live / 8 > CA_CACHE_DIRTY_MIN ? live / 8 : CA_CACHE_DIRTY_MIN) * room;
  size_t spare = seg->dirty <= CA_CACHE_NEWEST_MAX ? seg->dirty : 0;
  for (ca_segment_t* s = cache_last, *prev; s != NULL && cache_dirty > budget + spare; s = prev) {
    prev = s->prev;
    if (!s->purged && s != seg) { cache_unlink(s); s->next = list; list = s; }
  }
  if (cache_dirty > budget + spare && !taken) { cache_unlink(seg); seg->next = list; list = seg; }
  uint64_t due = seg->cached_at + _ca_pacer_delay(&cache_pacer);
  if (due < atomic_load_explicit(&cache_next_purge, ca_relaxed)) atomic_store_explicit(&cache_next_purge, due, ca_relaxed);
  cache_purge_list(list);
  _ca_unlock(&cache_lock);
  if (evict) segment_unmap(evict);
}

/* ---- the thread's slots ----------------------------------------------------------------------
   A thread keeps the last CA_HEAP_SLOTS 2 MiB segments it freed (mostly large objects') in its
   heap, ahead of the global cache: two threads that each free and allocate large objects in turn
   met on cache_lock at every call (xchurn: 29-149 sched_yields a run, 2% of its time in
   segment_map's walk, against none for mimalloc, whose segments are per thread).  The owner puts
   and takes them with atomic exchanges; any thread takes one whose wait is over into the cache
   (slots_expire, from the purge and malloc_trim), so an idle thread's slots are purged too.  Who
   holds a segment is whoever took it out of a slot: no header is read before that. */

static ca_heap_t* slot_heap(void) {
  ca_heap_t* h = _ca_heap;
  if (h == &_ca_heap_empty || !h->in_use) return NULL;   /* no heap, or the thread is exiting */
  return _ca_opt(CA_OPT_PURGE_DELAY) != 0 && _ca_opt(CA_OPT_SEGMENT_CACHE) > 0 ? h : NULL;
}

static uint64_t slot_due(const ca_segment_t* seg) {
  return _ca_opt(CA_OPT_PURGE_DELAY) < 0 ? UINT64_MAX : seg->cached_at + _ca_pacer_delay(&cache_pacer);
}

/* seg into slot i; what the slot held goes to the cache */
static void slot_set(ca_heap_t* h, uint32_t i, ca_segment_t* seg) {
  uint64_t due = slot_due(seg);
  ca_segment_t* old = atomic_exchange_explicit(&h->slots[i], seg, ca_acq_rel);
  atomic_store_explicit(&h->slots_due[i], due, ca_relaxed);   /* a hint: takers read cached_at */
  if (due < atomic_load_explicit(&cache_next_purge, ca_relaxed)) atomic_store_explicit(&cache_next_purge, due, ca_relaxed);
  if (old != NULL) cache_insert(old);
}

/* A free 2 MiB segment into an empty slot of the thread's, else into the one due first. */
static bool slot_put(ca_segment_t* seg) {
  ca_heap_t* h = seg->size == CA_SEGMENT_SIZE ? slot_heap() : NULL;
  if (h == NULL) return false;
  uint32_t pick = 0;
  for (uint32_t i = 0; i < CA_HEAP_SLOTS; i++) {
    if (atomic_load_explicit(&h->slots[i], ca_relaxed) == NULL) { pick = i; break; }
    if (atomic_load_explicit(&h->slots_due[i], ca_relaxed) < atomic_load_explicit(&h->slots_due[pick], ca_relaxed)) pick = i;
  }
  slot_set(h, pick, seg);
  return true;
}

/* The thread's slot segment whose resident pages fit `touch` best (the others stay), or NULL. */
static ca_segment_t* slot_take(size_t touch) {
  ca_heap_t* h = slot_heap();
  if (h == NULL) return NULL;
  ca_segment_t* best = NULL;
  uint32_t from = 0;
  for (uint32_t i = 0; i < CA_HEAP_SLOTS; i++) {
    if (atomic_load_explicit(&h->slots[i], ca_relaxed) == NULL) continue;
    ca_segment_t* s = atomic_exchange_explicit(&h->slots[i], NULL, ca_acquire);
    if (s == NULL) continue;
    if (best != NULL && !fits_better(s->dirty, best->dirty, touch)) { slot_set(h, i, s); continue; }
    if (best != NULL) slot_set(h, from, best);
    best = s;
    from = i;
  }
  if (best != NULL) _ca_stat_inc(&_ca_stats.slot_reuse, 1);
  return best;
}

/* Every thread's slot segments whose wait is over (all, when forced) go to the cache.  Returns the
   next expiry among those left. */
static uint64_t slots_expire(uint64_t now, bool force) {
  uint64_t next = UINT64_MAX;
  for (ca_heap_t* h = _ca_heap_first(); h != NULL; h = h->next_heap)
    for (uint32_t i = 0; i < CA_HEAP_SLOTS; i++) {
      if (atomic_load_explicit(&h->slots[i], ca_relaxed) == NULL) continue;
      uint64_t due = atomic_load_explicit(&h->slots_due[i], ca_relaxed);
      if (!force && due > now) { if (due < next) next = due; continue; }
      ca_segment_t* s = atomic_exchange_explicit(&h->slots[i], NULL, ca_acquire);
      if (s == NULL) continue;
      due = slot_due(s);                               /* the owner may have put a newer one */
      ca_segment_t* none = NULL;
      if (!force && due > now &&
          atomic_compare_exchange_strong_explicit(&h->slots[i], &none, s, ca_acq_rel, ca_relaxed)) {
        atomic_store_explicit(&h->slots_due[i], due, ca_relaxed);
        if (due < next) next = due;
        continue;
      }
      cache_insert(s);                                 /* its wait is over, or the owner filled the slot */
    }
  return next;
}

/* A free segment: the thread's slots, else the global cache. */
static void segment_cache_put(ca_segment_t* seg) {
  atomic_store_explicit(&seg->owner, NULL, ca_relaxed);
  atomic_store_explicit(&seg->thread, NULL, ca_relaxed);
  seg->spans[0].flags = CA_SPAN_UNUSED;               /* a free() into it is invalid */
  if (seg->kind != CA_SEG_LARGE) seg->dirty = seg->size;   /* LARGE: the objects' extent (large.c) */
  seg->cached_at = _ca_clock_ms();
  seg->purged = 0;
  if (!slot_put(seg)) cache_insert(seg);
}

/* A 2 MiB-aligned mapping that the segment map can name (below 2^47), or NULL with ENOMEM. */
static void* map_ours(size_t size) {
  uint8_t* p = _ca_os_map_aligned(size, CA_SEGMENT_SIZE);
  if (p != NULL && ((uintptr_t)(p + size - 1) >> 47) != 0) {
    _ca_os_unmap(p, size);
    errno = ENOMEM;
    p = NULL;
  }
  return p;
}

/* A fresh 2 MiB segment from the reservation; under an address-space limit the reservation
   shrinks back to one segment. */
static ca_segment_t* segment_carve(void) {
  ca_segment_t* seg = NULL;
  _ca_lock(&reserve_lock);
  if (reserve_next == reserve_end) {
    size_t n = reserve_size ? 2 * reserve_size : CA_RESERVE_MIN;
    if (n > CA_RESERVE_MAX) n = CA_RESERVE_MAX;
    uint8_t* p = NULL;
    if (reserve_start != NULL && (uintptr_t)reserve_start > n + 2 * CA_SEGMENT_SIZE)
      p = _ca_os_map_at(reserve_start - CA_SEGMENT_SIZE - n, n);
    while (p == NULL && (p = map_ours(n)) == NULL && n > CA_SEGMENT_SIZE) n /= 2;
    if (p != NULL) {
      reserve_start = reserve_next = p;
      reserve_end = p + n;
      reserve_size = n;
      _ca_stat_inc(&_ca_stats.reservations, 1);
    }
  }
  if (reserve_next != reserve_end) {
    seg = (ca_segment_t*)reserve_next;
    reserve_next += CA_SEGMENT_SIZE;
  }
  _ca_unlock(&reserve_lock);
  return seg;
}

/* A mapping of `size` bytes (a multiple of 2 MiB, 2 MiB aligned): the smallest cached one that
   is not more than twice as big (its unused dirty tail is purged), else a new mapping.  Among
   those of that size, the one whose resident extent covers the `touch` bytes the caller will
   write with the least to spare, else the one with the most resident: taken newest first, a
   cached segment held a 128 KiB object when the next wanted 640 KiB, and mstress faulted in 15
   segments of large objects up to 2 MiB each where its live ones took 5 MiB.  The header, and
   `dirty` (kept across reuse), are left for the caller. */
#define CA_FIT_SLACK ((size_t)64 << 10)
/* a resident extent `res` fits `touch` better than `best`: one covering it with less to spare, or
   a larger one while neither covers it */
static bool fits_better(size_t res, size_t best, size_t touch) {
  if (res >= touch) return best < touch || res < best;
  return best < touch && res > best;
}
static ca_segment_t* segment_map(size_t size, size_t touch, bool* fresh) {
  ca_segment_t* mine = size == CA_SEGMENT_SIZE ? slot_take(touch) : NULL;
  if (mine != NULL && mine->dirty >= touch) { *fresh = false; return mine; }   /* covers it: no lock */
  ca_segment_t* best = NULL, *slot_back = NULL;
  size_t best_res = 0;
  _ca_lock(&cache_lock);
  for (ca_segment_t* s = cache_first; s != NULL; s = s->next) {     /* newest (likely warm) first */
    if (s->size < size || s->size > 2 * size) continue;
    size_t res = s->purged ? 0 : s->dirty;
    bool better = best == NULL || s->size < best->size || (s->size == best->size && fits_better(res, best_res, touch));
    if (better) { best = s; best_res = res; }
    if (best->size == size && best_res >= touch && best_res - touch <= touch / 4 + CA_FIT_SLACK) break;   /* fits well enough */
    if (s->purged && best->size == size) break;     /* the rest are purged too (cache_link): none fits better */
  }
  if (mine != NULL && (best == NULL || fits_better(mine->dirty, best_res, touch))) best = NULL;   /* the slot's */
  else if (mine != NULL) { slot_back = mine; mine = NULL; }
  if (best) {
    cache_unlink(best);
    if (best->purged) _ca_pacer_reused(&cache_pacer, best->purged_at, _ca_clock_ms());
  }
  _ca_unlock(&cache_lock);
  ca_segment_t* seg = best == NULL && mine == NULL && size == CA_SEGMENT_SIZE ? segment_carve() : NULL;
  if (slot_back != NULL) slot_put(slot_back);
  if (mine != NULL) { *fresh = false; return mine; }
  if (best) {
    if (!best->purged && best->size > size && best->dirty > size) {
      _ca_os_purge((uint8_t*)best + size, best->dirty - size);
      best->dirty = size;
    }
    *fresh = false;
    return best;
  }
  if (seg == NULL && size > CA_SEGMENT_SIZE) seg = map_ours(size);
  if (seg == NULL) return NULL;
  if (_ca_opt(CA_OPT_THP)) _ca_os_thp(seg, size, true);
  seg->size = size;
  seg->dirty = CA_HEADER_SIZE;
  seg->purged = 1;                                    /* nothing resident but what we write */
  _ca_segmap_set(seg, true);
  _ca_stat_add(&_ca_stats.mapped_bytes, (int64_t)size, &_ca_stats.mapped_peak);
  _ca_stat_inc(&_ca_stats.segments_mapped, 1);
  *fresh = true;
  return seg;
}

/* ---- small/medium segments ------------------------------------------------------------------- */

static ca_segment_t* segment_new(ca_heap_t* h, ca_segment_kind_t kind) {
  bool fresh;
  ca_segment_t* seg = segment_map(CA_SEGMENT_SIZE, CA_SEGMENT_SIZE, &fresh);
  if (seg == NULL) return NULL;
  size_t size = seg->size;
  bool zero = fresh || (seg->purged && _ca_os_purges_zero());
  memset(seg, 0, offsetof(ca_segment_t, spans));
  seg->size = size;
  seg->cookie = segment_cookie(seg);
  seg->kind = (uint8_t)kind;
  seg->flavour = h->flavour;
  seg->span_shift = kind == CA_SEG_SMALL ? CA_SMALL_SHIFT : CA_MEDIUM_SHIFT;
  seg->span_count = (uint32_t)(CA_SEGMENT_SIZE >> seg->span_shift);
  seg->clean_spans = zero ? (uint32_t)((1ull << seg->span_count) - 1) : 0;
  for (uint32_t i = 0; i <= CA_MAX_SPANS; i++) {
    ca_span_t* s = &seg->spans[i];
    uint8_t c = s->sclass;                             /* what a reused segment's span served */
    uint32_t bsize = zero ? 0 : s->block_size;
    memset(s, 0, sizeof *s);
    s->index = (uint8_t)i;
    s->flags = CA_SPAN_UNUSED;
    s->sclass = c;
    s->block_size = bsize;
  }
  atomic_store_explicit(&seg->thread, h->main, ca_relaxed);
  atomic_store_explicit(&seg->owner, h, ca_release);
  allq_push_front(&h->all, seg);
  segq_push_front(&h->segments[kind], seg);
  _ca_stat_add(&_ca_stats.segments, 1, &_ca_stats.segments_peak);
  return seg;
}

static void segment_release(ca_heap_t* h, ca_segment_t* seg) {
  for (uint32_t i = 0; i < seg->span_count; i++)
    if (seg->spans[i].purge_at != 0) purge_remove(h, &seg->spans[i]);
  segq_remove(&h->segments[seg->kind], seg);
  allq_remove(&h->all, seg);
  _ca_stat_add(&_ca_stats.segments, -1, NULL);
  segment_cache_put(seg);
}

/* A span last used for class c (block_size is kept when a span is freed, and across a cached
   segment's reuse): its pages are resident as far as that class carved them.  Spans that served
   every class in turn were each resident to the furthest any class carved (threadchurn: 4 threads
   of 18 classes each, reused segments, 1.6x mimalloc's peak RSS). */
static bool served(const ca_span_t* s, uint32_t c) { return s->block_size != 0 && s->sclass == c; }

ca_span_t* _ca_segment_span_alloc(ca_heap_t* h, ca_segment_kind_t kind, uint32_t c) {
  /* The span freed last, in whichever segment, while it is still committed: taking only from the
     first segment with room left the others' free spans resident until their wait ran out, and
     faulted purged ones in meanwhile (rptest: 13 of 32 MiB resident in free spans, and each
     refault lengthened the wait).  Among the last few freed, one that served c. */
  ca_span_t* pick = h->purge[kind].last;
  int n = 0;
  for (ca_span_t* s = pick; s != NULL && n < 8; s = s->prev, n++)
    if (served(s, c)) { pick = s; break; }
  ca_segment_t* seg;
  if (pick != NULL) {
    seg = _ca_span_segment(pick);
    purge_remove(h, pick);
    pick->zero = 0;
  } else {
    seg = h->segments[kind].first;
    if (seg == NULL) seg = segment_new(h, kind);
    if (seg == NULL) return NULL;
    for (uint32_t i = 0; i < seg->span_count; i++) {     /* a cold span never used before one given back */
      ca_span_t* s = &seg->spans[i];
      if (!(s->flags & CA_SPAN_UNUSED)) continue;
      bool purged = (seg->purged_spans >> i) & 1;
      if (!purged && served(s, c)) { pick = s; break; }
      if (pick == NULL || ((seg->purged_spans >> pick->index) & 1)) pick = s;
    }
    if ((seg->purged_spans >> pick->index) & 1) {         /* a refault: we gave it back too soon? */
      seg->purged_spans &= ~(1u << pick->index);
      _ca_pacer_reused(&h->pacer, seg->spans_purged_at, _ca_clock_ms());
    }
    pick->zero = (seg->clean_spans >> pick->index) & 1 ? CA_ZERO_TAIL : 0;
  }
  seg->clean_spans &= ~(1u << pick->index);
  pick->flags = 0;
  if (++seg->spans_used == seg->span_count) segq_remove(&h->segments[kind], seg);
  _ca_segment_cache_purge(false);
  return pick;
}

/* Give a free span's memory back to the OS. */
static void span_purge(ca_segment_t* seg, ca_span_t* s, uint64_t now) {
  if (_ca_os_purge(_ca_span_base(seg, s), _ca_span_bytes(seg, s))) seg->clean_spans |= 1u << s->index;
  _ca_stat_inc(&_ca_stats.purges, 1);
  _ca_stat_inc(&_ca_stats.purged_bytes, _ca_span_bytes(seg, s));
  seg->purged_spans |= 1u << s->index;
  seg->spans_purged_at = now;
  s->purge_at = 0;
}

void _ca_segment_span_free(ca_heap_t* h, ca_span_t* s) {
  ca_segment_t* seg = _ca_span_segment(s);
  s->flags = CA_SPAN_UNUSED;
  s->local = NULL;
  s->zero = 0;
  s->free = s->local_free = NULL;
  s->capacity = 0;
  CA_HOOK(span_released, _ca_span_base(seg, s), _ca_span_bytes(seg, s), s->flavour);
  if (seg->spans_used-- == seg->span_count) segq_push_front(&h->segments[seg->kind], seg);
  if (seg->spans_used == 0) { segment_release(h, seg); return; }
  long delay = _ca_opt(CA_OPT_PURGE_DELAY);
  if (delay == 0) {
    span_purge(seg, s, _ca_clock_ms());
  } else if (delay > 0) {
    s->purge_at = _ca_clock_ms() + _ca_pacer_delay(&h->pacer);
    purge_insert(h, s);
  }
  _ca_segment_cache_purge(false);
}

/* Give back free spans whose wait is over (the list is in expiry order). */
void _ca_segment_purge_expired(ca_heap_t* h, bool force) {
  uint64_t now = _ca_clock_ms();
  bool paced = false;
  for (int k = 0; k < 2; k++) {
    ca_span_queue_t* q = &h->purge[k];
    while (q->first != NULL && (force || q->first->purge_at <= now)) {
      if (!paced) { _ca_pacer_purging(&h->pacer, now); paced = true; }
      ca_span_t* s = q->first;
      purge_remove(h, s);
      span_purge(_ca_span_segment(s), s, now);
    }
  }
}

/* ---- abandon / reclaim ----------------------------------------------------------------------- */

/* Called by an exiting thread after its spans were set to CA_DELAY_NEVER and emptied spans freed.
   Free spans waiting to be purged keep their expiry time: whoever adopts the segment takes the
   wait over (or the periodic purge does, see abandoned_purge), so a segment reused at once by
   the next thread is not purged and faulted in again. */
void _ca_segment_abandon(ca_heap_t* h) {
  for (uint32_t i = 0; i < CA_HEAP_SLOTS; i++) {      /* the slots go to the cache */
    ca_segment_t* s = atomic_exchange_explicit(&h->slots[i], NULL, ca_acquire);
    if (s != NULL) cache_insert(s);
  }
  for (int k = 0; k < 2; k++) {
    ca_span_queue_t* q = &h->purge[k];
    if (q->first != NULL) {                             /* the list is in expiry order */
      uint64_t due = q->first->purge_at;
      if (due < atomic_load_explicit(&cache_next_purge, ca_relaxed)) atomic_store_explicit(&cache_next_purge, due, ca_relaxed);
    }
    for (ca_span_t* s = q->first, *next; s != NULL; s = next) { next = s->next; s->next = s->prev = NULL; }
    q->first = q->last = NULL;
  }
  h->segments[0].first = h->segments[0].last = NULL;
  h->segments[1].first = h->segments[1].last = NULL;
  ca_segment_t* seg = h->all.first;
  h->all.first = h->all.last = NULL;
  if (seg == NULL) return;
  uint64_t n = 0;
  ca_segment_t* last = seg;
  for (ca_segment_t* s = seg; s != NULL; s = s->all_next) {
    atomic_store_explicit(&s->thread, NULL, ca_relaxed);
    atomic_store_explicit(&s->owner, NULL, ca_release);
    s->abandoned = 1;
    s->next = s->prev = NULL;
    last = s;
    n++;
  }
  _ca_lock(&abandoned_lock);
  last->all_next = abandoned_first;
  abandoned_first = seg;
  _ca_unlock(&abandoned_lock);
  _ca_stat_inc(&_ca_stats.segments_abandoned, n);
}

/* Purge the expired free spans of segments nobody has adopted yet.  Returns the next expiry. */
static uint64_t abandoned_purge(uint64_t now, bool force) {
  uint64_t next = UINT64_MAX;
  _ca_lock(&abandoned_lock);
  for (ca_segment_t* seg = abandoned_first; seg != NULL; seg = seg->all_next)
    for (uint32_t i = 0; i < seg->span_count; i++) {
      ca_span_t* s = &seg->spans[i];
      if (s->purge_at == 0) continue;
      if (force || s->purge_at <= now) {
        span_purge(seg, s, now);
      } else if (s->purge_at < next) next = s->purge_at;
    }
  _ca_unlock(&abandoned_lock);
  return next;
}

/* Adopt abandoned segments until one has a free span (or none are left).  Returns true when
   anything was adopted: their live spans are now in h's queues. */
bool _ca_segment_reclaim(ca_heap_t* h) {
  if (atomic_load_explicit((_Atomic(ca_segment_t*)*)&abandoned_first, ca_relaxed) == NULL) return false;
  bool any = false;
  for (int tries = 0; tries < 8; tries++) {
    _ca_lock(&abandoned_lock);
    ca_segment_t* seg = abandoned_first;
    if (seg) abandoned_first = seg->all_next;
    _ca_unlock(&abandoned_lock);
    if (seg == NULL) break;
    any = true;
    seg->abandoned = 0;
    seg->all_next = seg->all_prev = NULL;
    atomic_store_explicit(&seg->thread, h->main, ca_relaxed);
    atomic_store_explicit(&seg->owner, h, ca_release);
    allq_push_front(&h->all, seg);
    if (seg->spans_used < seg->span_count) segq_push_front(&h->segments[seg->kind], seg);
    for (uint32_t i = 0; i < seg->span_count; i++)      /* take over pending purges */
      if ((seg->spans[i].flags & CA_SPAN_UNUSED) && seg->spans[i].purge_at != 0) purge_insert(h, &seg->spans[i]);
    _ca_stat_inc(&_ca_stats.segments_reclaimed, 1);
    /* adopt live spans; free the ones that emptied meanwhile.  Freeing the last one releases
       (and may unmap) the segment, so `live` is tested before the segment is read again. */
    uint32_t live = seg->spans_used, count = seg->span_count;
    for (uint32_t i = 0; live > 0 && i < count; i++) {
      ca_span_t* s = &seg->spans[i];
      if (s->flags & CA_SPAN_UNUSED) continue;
      live--;
      _ca_heap_adopt_span(h, s);        /* frees s when empty: seg may be released after this */
    }
    if (h->segments[CA_SEG_SMALL].first || h->segments[CA_SEG_MEDIUM].first) break;
  }
  return any;
}

/* ---- large objects ---------------------------------------------------------------------------- */

/* A LARGE segment for an object of `need` bytes aligned to `align`; *offset gets the object's
   offset from the segment.  Alignments of 2 MiB and more put the object on the next 2 MiB
   boundary after the header unit (see _ca_segment_of). */
ca_segment_t* _ca_segment_large_alloc(size_t need, size_t align, size_t* offset) {
  size_t off, size;
  bool fresh = true;
  ca_segment_t* seg;
  if (align >= CA_SEGMENT_SIZE) {
    size_t body = (need + CA_OS_PAGE - 1) & ~(CA_OS_PAGE - 1);
    if (body < need || body + align < body) { errno = ENOMEM; return NULL; }
    uint8_t* r = _ca_os_map_aligned(align + body, align);
    if (r == NULL) return NULL;
    seg = (ca_segment_t*)(r + align - CA_SEGMENT_SIZE);
    if ((uint8_t*)seg > r) _ca_os_unmap(r, (size_t)((uint8_t*)seg - r));
    if (((uintptr_t)seg >> 47) != 0) { _ca_os_unmap(seg, CA_SEGMENT_SIZE + body); errno = ENOMEM; return NULL; }
    off = CA_SEGMENT_SIZE;
    size = CA_SEGMENT_SIZE + body;
    seg->size = size;
    seg->dirty = CA_HEADER_SIZE;
    _ca_segmap_set(seg, true);
    _ca_stat_add(&_ca_stats.mapped_bytes, (int64_t)size, &_ca_stats.mapped_peak);
    _ca_stat_inc(&_ca_stats.segments_mapped, 1);
  } else {
    off = *offset;                                     /* caller's random line offset */
    if (align > CA_MIN_ALIGN) off = (CA_HEADER_SIZE + align - 1) & ~(align - 1);
    else off += CA_HEADER_SIZE;
    size = (off + need + CA_SEGMENT_MASK) & ~CA_SEGMENT_MASK;
    if (size < need) { errno = ENOMEM; return NULL; }
    seg = segment_map(size, off + need, &fresh);
    if (seg == NULL) return NULL;
    if (!fresh) _ca_stat_inc(&_ca_stats.large_cached_reuse, 1);
  }
  size = seg->size;
  bool zero = fresh || (seg->purged && _ca_os_purges_zero());
  size_t dirty = seg->dirty;                           /* pages beyond it are known zero */
  memset(seg, 0, offsetof(ca_segment_t, spans) + 2 * sizeof(ca_span_t));
  seg->size = size;
  seg->dirty = dirty;
  seg->cookie = segment_cookie(seg);
  seg->kind = CA_SEG_LARGE;
  seg->span_shift = CA_LARGE_SHIFT;
  seg->span_count = 1;
  seg->is_zero = zero;
  seg->spans[1].flags = CA_SPAN_UNUSED;
  /* free() may read any of spans[0..31]: their `local` is NULL, as every span's is once freed
     (a segment is cached only with all its spans free) and as a fresh mapping's is */
#ifdef CA_DEBUG
  for (uint32_t i = 0; i < CA_MAX_SPANS; i++) ca_assert(seg->spans[i].local == NULL, "large segment span with an owner", seg);
#endif
  *offset = off;
  return seg;
}

void _ca_segment_large_free(ca_segment_t* seg) {
  if (seg->size > CA_SEGMENT_SIZE && _ca_opt(CA_OPT_SEGMENT_CACHE) == 0) { segment_unmap(seg); return; }
  segment_cache_put(seg);
}

/* ---- fork ------------------------------------------------------------------------------------- */

void _ca_segment_fork_prepare(void) { _ca_lock(&abandoned_lock); _ca_lock(&cache_lock); _ca_lock(&reserve_lock); }
void _ca_segment_fork_parent(void) { _ca_unlock(&reserve_lock); _ca_unlock(&cache_lock); _ca_unlock(&abandoned_lock); }
void _ca_segment_fork_child(void) {
  atomic_store_explicit(&reserve_lock.v, 0, ca_relaxed);
  atomic_store_explicit(&cache_lock.v, 0, ca_relaxed);
  atomic_store_explicit(&abandoned_lock.v, 0, ca_relaxed);
}
