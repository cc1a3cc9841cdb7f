/* Large objects (bigger than the largest size class): one object per LARGE segment, owned by no
   heap, so any thread allocates and frees them through the segment cache without touching a
   heap.  The object starts one header page into the segment plus a random whole number of cache
   lines (jemalloc's cache-oblivious placement), so large buffers of different objects do not all
   start on L1 set 0.  realloc grows or shrinks in place while the mapping is big enough; the
   object's usable size is its request rounded up to a page, not the mapping.

   An object of a flavour (pages of a colour set) is assembled page by page by the span hook,
   one mremap per page, and taken apart the same way when freed: for a 4 MiB buffer that is
   1024 system calls each way.  So the last few freed objects of each flavour are *kept* whole,
   pages and all, and the next object of that flavour that fits in one (at most twice smaller)
   reuses it as it is.  They are given back on chromalloc_collect/malloc_trim and when a newer
   one pushes them out. */
#include "internal.h"
#include "hooks.h"
#include <sys/mman.h>

static _Atomic(uint64_t) large_rng = 0x9E3779B97F4A7C15ull;

#define KEPT_PER_FLAVOUR 4
static ca_lock_t     kept_lock;
static ca_segment_t* kept[CA_FLAVOURS][KEPT_PER_FLAVOUR];   /* freed objects of a flavour, whole */

static size_t random_line_offset(void) {
  uint64_t x = atomic_fetch_add_explicit(&large_rng, 0x9E3779B97F4A7C15ull, ca_relaxed);
  x ^= _ca_process.seed;
  x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return _ca_layout_large_offset(&x);
}

/* What malloc_usable_size reports for n bytes at offset off: up to the end of the last page
   the object covers.  Not the whole mapping: a 65 KiB object in a 2 MiB segment is a 68 KiB
   object to programs that account memory by usable size (Redis, SQLite), and the mapping's
   rest is only address space. */
static size_t usable(size_t off, size_t n) {
  return ((off + n + CA_OS_PAGE - 1) & ~(CA_OS_PAGE - 1)) - off;
}

/* The pages a large object occupies: what the hook fills and takes back. */
static void object_pages(const ca_segment_t* seg, uint8_t** page, size_t* bytes) {
  *page = (uint8_t*)((uintptr_t)seg->large_ptr & ~(uintptr_t)(CA_OS_PAGE - 1));
  uintptr_t end = ((uintptr_t)seg->large_ptr + seg->large_size + CA_OS_PAGE - 1) & ~(uintptr_t)(CA_OS_PAGE - 1);
  *bytes = (size_t)(end - (uintptr_t)*page);
}

/* The segment's dirty extent covers the object: the cache purges up to it, and trusts the
   pages beyond it to be zero. */
static void cover(ca_segment_t* seg) {
  size_t end = (size_t)(seg->large_ptr - (uint8_t*)seg) + seg->large_size;
  if (end > seg->dirty) seg->dirty = end;
}

static void account_alloc(const ca_segment_t* seg) {
  _ca_stat_inc(&_ca_stats.large_allocs, 1);
  _ca_stat_add(&_ca_stats.large_live, 1, NULL);
  _ca_stat_add(&_ca_stats.large_live_bytes, (int64_t)seg->large_size, &_ca_stats.large_peak_bytes);
}

/* A kept object of `flavour` that holds n bytes and is at most twice as big, or NULL. */
static ca_segment_t* kept_take(size_t n, uint8_t flavour) {
  ca_segment_t* seg = NULL;
  _ca_lock(&kept_lock);
  for (int i = 0; i < KEPT_PER_FLAVOUR && seg == NULL; i++) {
    ca_segment_t* s = kept[flavour][i];
    if (s != NULL && s->large_size >= n && s->large_size / 2 <= n) { seg = s; kept[flavour][i] = NULL; }
  }
  _ca_unlock(&kept_lock);
  return seg;
}

/* Keep a freed object of a flavour whole; false when there is no room (the caller frees it). */
static bool kept_put(ca_segment_t* seg) {
  _ca_lock(&kept_lock);
  ca_segment_t** k = kept[seg->flavour];
  bool ok = false;
  for (int i = 0; i < KEPT_PER_FLAVOUR && !ok; i++) if (k[i] == NULL) { k[i] = seg; ok = true; }
  _ca_unlock(&kept_lock);
  return ok;
}

void* _ca_large_alloc(size_t n, size_t align, bool zero, uint8_t flavour) {
  if (n > PTRDIFF_MAX) { errno = ENOMEM; return NULL; }
  _ca_ensure_init();
  ca_segment_t* reuse = flavour != 0 && align <= CA_OS_PAGE ? kept_take(n, flavour) : NULL;
  if (reuse != NULL) {
    /* the segment cache is purged on its own calls only: a program whose large objects all come
       from kept ones now (a polluter's buffer, reused whole) would keep the ordinary segments it
       cached before resident for good */
    _ca_segment_cache_purge(false);
    _ca_stat_inc(&_ca_stats.large_kept_reuse, 1);
    account_alloc(reuse);
    if (zero) memset(reuse->large_ptr, 0, n);
    return reuse->large_ptr;
  }
  size_t off = align > CA_MIN_ALIGN ? 0 : random_line_offset();
  ca_segment_t* seg = _ca_segment_large_alloc(n, align, &off);
  if (seg == NULL) return NULL;
  uint8_t* p = (uint8_t*)seg + off;
  seg->large_ptr = p;
  seg->large_size = usable(off, n);
  cover(seg);
  account_alloc(seg);
  /* the hook sees the pages the object covers (the mapping may be longer: room to grow in
     place) */
  uint8_t* page;
  size_t bytes;
  object_pages(seg, &page, &bytes);
  const ca_hooks_t* hk = _ca_hooks;
  bool filled = hk != NULL && hk->span_memory != NULL && hk->span_memory(page, bytes, flavour);
  seg->flavour = filled ? flavour : 0;
  if (filled) seg->is_zero = 0;
  if (zero && !seg->is_zero) memset(p, 0, n);
  return p;
}

/* Give an object's pages back to the hook and its segment to the cache. */
static void release(ca_segment_t* seg) {
  uint8_t* page;
  size_t bytes;
  object_pages(seg, &page, &bytes);
  CA_HOOK(span_released, page, bytes, seg->flavour);
  seg->flavour = 0;
  seg->spans[0].flags = CA_SPAN_UNUSED;
  _ca_segment_large_free(seg);
}

void _ca_large_free(ca_segment_t* seg) {
  CA_POLICY_CHUNK(CA_CHUNK_FREE, seg->large_ptr, seg->large_size);
  _ca_stat_add(&_ca_stats.large_live, -1, NULL);
  _ca_stat_add(&_ca_stats.large_live_bytes, -(int64_t)seg->large_size, NULL);
  if (seg->flavour != 0 && kept_put(seg)) return;
  release(seg);
}

/* Every kept object goes back (chromalloc_collect, malloc_trim).  After fork() the child's
   kept pages are copies in new frames: `ordinary` then drops their flavour first. */
static void kept_flush(bool ordinary) {
  for (int f = 1; f < CA_FLAVOURS; f++)
    for (int i = 0; i < KEPT_PER_FLAVOUR; i++) {
      _ca_lock(&kept_lock);
      ca_segment_t* seg = kept[f][i];
      kept[f][i] = NULL;
      _ca_unlock(&kept_lock);
      if (seg == NULL) continue;
      if (ordinary) seg->flavour = 0;
      release(seg);
    }
}

void _ca_large_collect(void) { kept_flush(false); }
void _ca_large_fork_child(void) { atomic_store_explicit(&kept_lock.v, 0, ca_relaxed); kept_flush(true); }

/* An ordinary object's pages are known to the layers by address (span_memory): they let go of
   them before a resize, which may move them, and learn of them again after. */
static void tell_pages(ca_segment_t* seg, bool ours) {
  const ca_hooks_t* hk = _ca_hooks;
  if (hk == NULL || seg->flavour != 0) return;
  uint8_t* page;
  size_t bytes;
  object_pages(seg, &page, &bytes);
  if (!ours) CA_HOOK(span_released, page, bytes, 0);
  else if (hk->span_memory != NULL) hk->span_memory(page, bytes, 0);
}

/* Resize a large object without copying when it can: in place while the mapping has room
   (shrinking gives whole tail pages back), else by growing the mapping where it lies, else by
   moving its pages to a new 2 MiB-aligned place with mremap (page tables move, data does not).
   NULL when none worked; the caller then copies. */
void* _ca_large_realloc(ca_segment_t* seg, void* p, size_t n) {
  CA_POLICY_CHUNK(CA_CHUNK_RESIZE, p, seg->large_size);
  size_t off = (size_t)((uint8_t*)p - (uint8_t*)seg);
  if (n > PTRDIFF_MAX) return NULL;
  tell_pages(seg, false);
  size_t room = seg->size - off, was = seg->large_size;
  if (n <= room) {
    if (n < room / 2 && room - n > CA_SEGMENT_SIZE) {
      uintptr_t keep = (uintptr_t)p + usable(off, n);
      _ca_os_purge((void*)keep, (uintptr_t)seg + seg->size - keep);
    }
  } else {
    size_t need = (off + n + CA_SEGMENT_MASK) & ~CA_SEGMENT_MASK;
    size_t old = seg->size;
    ca_segment_t* moved = _ca_os_remap(seg, old, need);
    if (moved == NULL) { tell_pages(seg, true); return NULL; }
    if (moved != seg) {
      _ca_segmap_set(seg, false);
      _ca_segmap_set(moved, true);
      moved->cookie = (uintptr_t)moved ^ _ca_process.secret;
      moved->large_ptr = (uint8_t*)moved + off;
    }
    moved->size = need;
    _ca_stat_add(&_ca_stats.mapped_bytes, (int64_t)(need - old), &_ca_stats.mapped_peak);
    seg = moved;
  }
  seg->large_size = usable(off, n);
  cover(seg);
  tell_pages(seg, true);
  _ca_stat_add(&_ca_stats.large_live_bytes, (int64_t)seg->large_size - (int64_t)was, &_ca_stats.large_peak_bytes);
  return seg->large_ptr;
}
