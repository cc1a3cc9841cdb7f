/* Internal interface of the core allocator: process state, the small inline helpers every
   core file uses (pointer -> segment -> span, thread id, atomics), and the prototypes of the
   noinline slow paths.  The cache runtime never includes this: it reaches the core through
   hooks.h.  Names: `_ca_*` are internal and shared, file-local helpers are static. */
#ifndef CA_INTERNAL_H
#define CA_INTERNAL_H

#include "os.h"
#include "hooks.h"
#include "types.h"

/* Everything declared below is internal to the library: hidden symbols are reached directly
   (RIP-relative), not through the GOT. */
#pragma GCC visibility push(hidden)

#define ca_hidden          __attribute__((visibility("hidden")))

/* Debug builds (make OPT="-O1 -g -DCA_DEBUG") check invariants on every block handed out. */
#ifdef CA_DEBUG
#define ca_assert(cond, msg, p) do { if (!(cond)) _ca_fatal("internal check failed: " msg " at %p", (p)); } while (0)
#else
#define ca_assert(cond, msg, p) ((void)0)
#endif

/* ---- process-wide state (init.c) ---------------------------------------------------------- */
typedef struct ca_process_s {
  _Atomic(int)         state;          /* 0 = not yet, 1 = initialising, 2 = ready */
  uintptr_t            secret;         /* random: segment cookies */
  uint64_t             seed;           /* per-process seed for span colours */
} ca_process_t;

extern ca_process_t    _ca_process;
extern uintptr_t       _ca_key;        /* free-block key (second word of a free block) */
extern ca_heap_t       _ca_heap_empty; /* sentinel: every direct[] entry is an empty span */
extern ca_span_t       _ca_span_empty;
extern __thread ca_heap_t* _ca_heap __attribute__((tls_model("initial-exec")));

static inline uintptr_t _ca_tid(void) { return (uintptr_t)__builtin_thread_pointer(); }

/* ---- segment map (segmap.c): which 2 MiB units hold a segment header ---------------------- */
#define CA_SEGMAP_BITS     (47 - CA_SEGMENT_SHIFT)                 /* user space is 47 bits */
extern _Atomic(uint64_t) _ca_segmap[(1UL << CA_SEGMAP_BITS) / 64];
void _ca_segmap_set(ca_segment_t* seg, bool present);

/* The segment holding p: (p - 1) so that an object that starts exactly on a 2 MiB boundary
   (alignment >= 2 MiB) belongs to the header just before it. */
static inline uintptr_t _ca_segment_index(const void* p) { return ((uintptr_t)p - 1) >> CA_SEGMENT_SHIFT; }
/* unit i's bit; i below 2^CA_SEGMAP_BITS (free's fast path masks it, _ca_segmap_has checks it) */
static inline bool _ca_segmap_bit(uintptr_t i) { return (atomic_load_explicit(&_ca_segmap[i >> 6], ca_relaxed) >> (i & 63)) & 1; }
static inline bool _ca_segmap_has(uintptr_t i) {
  if (ca_unlikely((i >> CA_SEGMAP_BITS) != 0)) return false;
  return _ca_segmap_bit(i);
}
/* NULL when p is not in a chromalloc segment. */
static inline ca_segment_t* _ca_segment_of(const void* p) {
  uintptr_t i = _ca_segment_index(p);
  return _ca_segmap_has(i) ? (ca_segment_t*)(i << CA_SEGMENT_SHIFT) : NULL;
}

static inline ca_span_t* _ca_span_of(ca_segment_t* seg, const void* p) {
  return &seg->spans[((uintptr_t)p - (uintptr_t)seg) >> seg->span_shift];
}

/* Index of the block that starts at p, or a huge number when p is not a block start of s:
   exact division by block_size via its odd part's inverse and a rotate (Granlund-Montgomery). */
static inline uint64_t _ca_block_index(const ca_span_t* s, const void* p) {
  uint64_t x = ((uintptr_t)p - (uintptr_t)s->start) * s->inv;
  return (x >> s->shift) | (x << ((64 - s->shift) & 63));
}

/* ---- options (options.c): the core's; the layers register theirs (hooks.h) ---------------- */
typedef enum ca_option_e {
  CA_OPT_LAYOUT,          /* 0 = index-aware, 1 = ciu (flat, no colour) */
  CA_OPT_COLOUR,          /* span colours and large-object offsets */
  CA_OPT_PURGE_DELAY,     /* ms before free memory is returned to the OS (-1 never) */
  CA_OPT_SEGMENT_CACHE,   /* free 2 MiB segments kept mapped for reuse */
  CA_OPT_THP,             /* madvise(MADV_HUGEPAGE) on segments */
  CA_OPT_SEED,            /* 0 = random per process */
  CA_OPT_VERBOSE,
  CA_OPT_COUNT
} ca_option_t;

#define CA_LAYOUT_AWARE 0
#define CA_LAYOUT_CIU   1

extern long _ca_options[CA_OPT_COUNT];
static inline long _ca_opt(ca_option_t o) { return _ca_options[o]; }
void        _ca_options_init(void);
long        _ca_option_by_name(const char* name, bool* found);
void        _ca_options_json(ca_buf_t* b);
void        _ca_options_describe(ca_buf_t* b);

/* ---- machine cache model (machine.c) ----------------------------------------------------- */
void _ca_machine_init(void);

/* ---- size classes and placement (index/layout.c) ------------------------------------------ */
extern uint8_t  _ca_class_kind[CA_CLASS_MAX];     /* CA_SEG_SMALL or CA_SEG_MEDIUM spans */
extern uint8_t  _ca_class_of_w[];          /* (size + 15) / 16 -> class, sizes <= _ca_medium_limit */
void     _ca_layout_init(void);
static inline uint32_t _ca_size_class(size_t n) { return _ca_class_of_w[(n + CA_MIN_ALIGN - 1) / CA_MIN_ALIGN]; }
uint32_t _ca_layout_first_colour(uint32_t block_size, uint64_t* rng);
uint32_t _ca_layout_span_offset(uint32_t block_size, size_t span_bytes, uint32_t* colour, uint64_t* rng);
size_t   _ca_layout_large_offset(uint64_t* rng);
void     _ca_layout_span_shape(ca_span_t* s, uint32_t block_size);

/* ---- segments (segment.c) ----------------------------------------------------------------- */
ca_span_t*    _ca_segment_span_alloc(ca_heap_t* h, ca_segment_kind_t kind, uint32_t sclass);
void          _ca_segment_span_free(ca_heap_t* h, ca_span_t* s);
void          _ca_segment_abandon(ca_heap_t* h);
bool          _ca_segment_reclaim(ca_heap_t* h);
void          _ca_segment_purge_expired(ca_heap_t* h, bool force);
ca_segment_t* _ca_segment_large_alloc(size_t need, size_t align, size_t* offset);  /* *offset in: wanted object offset; out: used */
void          _ca_segment_large_free(ca_segment_t* seg);
void          _ca_segment_cache_purge(bool force);
uint32_t      _ca_segment_cache_pace(void);           /* the cache's purge_delay multiplier */
void          _ca_segment_fork_prepare(void);
void          _ca_segment_fork_parent(void);
void          _ca_segment_fork_child(void);
static inline size_t _ca_span_bytes(const ca_segment_t* seg, const ca_span_t* s) {
  return s->index == 0 ? ((size_t)1 << seg->span_shift) - CA_HEADER_SIZE : (size_t)1 << seg->span_shift;
}
static inline uint8_t* _ca_span_base(const ca_segment_t* seg, const ca_span_t* s) {
  return (uint8_t*)seg + (s->index == 0 ? CA_HEADER_SIZE : (size_t)s->index << seg->span_shift);
}
static inline ca_segment_t* _ca_span_segment(const ca_span_t* s) {
  return (ca_segment_t*)((uintptr_t)s & ~(uintptr_t)CA_SEGMENT_MASK);
}

/* ---- spans (span.c) ----------------------------------------------------------------------- */
void  _ca_span_init(ca_heap_t* h, ca_span_t* s, uint32_t sclass);
void  _ca_span_extend(ca_span_t* s);
void  _ca_span_collect(ca_span_t* s);
void  _ca_span_set_delay(ca_span_t* s, uintptr_t state, bool override_never);
static inline bool _ca_span_all_free(const ca_span_t* s) { return s->used == 0; }
/* after s->flags or its owner changed: may the owner's frees take the fast path? */
static inline void _ca_span_local(ca_span_t* s, ca_heap_t* h) {
  s->local = h != NULL && s->flags == 0 && h->flavour == 0 ? h : NULL;
}

/* ---- heaps (heap.c) ----------------------------------------------------------------------- */
void* _ca_malloc_generic(ca_heap_t* h, size_t n, const void* ret) ca_noinline;
void* _ca_malloc_generic_at(ca_heap_t* h, size_t n, const void* frame, const void* ret) ca_noinline;
void  _ca_heap_init(ca_heap_t* h);
ca_heap_t* _ca_heap_acquire(void);
void  _ca_heap_done(ca_heap_t* h);
void  _ca_heap_queue_remove(ca_heap_t* h, ca_span_t* s);
void  _ca_heap_span_unfull(ca_heap_t* h, ca_span_t* s);
void  _ca_heap_span_retire(ca_heap_t* h, ca_span_t* s);
void  _ca_heap_delayed_free(ca_heap_t* h);
void  _ca_heap_adopt_span(ca_heap_t* h, ca_span_t* s);
void  _ca_heap_register(ca_heap_t* h);
ca_heap_t* _ca_heap_first(void);
void  _ca_heap_fork_prepare(void);
void  _ca_heap_fork_parent(void);
void  _ca_heap_fork_child(ca_heap_t* self);
ca_heap_t* _ca_heap_flavour(uint8_t flavour);
void   _ca_heap_collect_flavours(ca_heap_t* h);        /* their empty spans go back */

/* ---- free (free.c) and large objects (large.c), aligned (aligned.c) ----------------------- */
void   _ca_free_unknown(void* p) ca_noinline;
void   _ca_free_span(ca_segment_t* seg, void* p) ca_noinline;
void   _ca_free_last(ca_span_t* s) ca_noinline;
void   _ca_free_double_check(ca_heap_t* h, ca_span_t* s, ca_block_t* b) ca_noinline;
void*  _ca_large_alloc(size_t n, size_t align, bool zero, uint8_t flavour) ca_noinline;
void   _ca_large_free(ca_segment_t* seg);
void   _ca_large_collect(void);                     /* kept objects of flavours go back */
void   _ca_large_fork_child(void);
void*  _ca_large_realloc(ca_segment_t* seg, void* p, size_t n);
void*  _ca_malloc_aligned(size_t n, size_t align, bool zero);
void*  _ca_malloc_page(void);                       /* a page of its own (aligned.c) */
size_t _ca_usable_size(const void* p);
void*  _ca_block_start(ca_segment_t* seg, ca_span_t* s, const void* p, bool* valid);
void*  _ca_calloc_slow(size_t n);
void*  _ca_malloc_flavour(size_t n, uint8_t flavour);

/* ---- what the layers installed (hooks.c, hooks.h) ---------------------------------------- */
extern const ca_hooks_t*  _ca_hooks;
extern const ca_policy_t* _ca_policy;
extern int64_t            _ca_sample_period;   /* bytes of sampled allocations per sample (0: none) */
extern _Atomic(uint32_t)  _ca_route_gen;       /* class routes changed, or a policy installed */

#define CA_HOOK(name, ...) do { const ca_hooks_t* h_ = _ca_hooks; if (h_ != NULL && h_->name != NULL) h_->name(__VA_ARGS__); } while (0)
#define CA_POLICY_CHUNK(...) do { const ca_policy_t* p_ = _ca_policy; if (p_ != NULL) p_->chunk(__VA_ARGS__); } while (0)

/* the policy's chunk, or NULL: the core allocates */
static inline void* _ca_policy_place(size_t n, bool zero, const void* frame, const void* ret) {
  const ca_policy_t* p = __atomic_load_n(&_ca_policy, __ATOMIC_ACQUIRE);
  return p != NULL ? p->place(n, zero, frame, ret) : NULL;
}

/* ---- process / threads (init.c) ----------------------------------------------------------- */
void  _ca_process_init(void);
static inline void _ca_ensure_init(void) {
  if (ca_unlikely(atomic_load_explicit(&_ca_process.state, ca_acquire) != 2)) _ca_process_init();
}
ca_heap_t* _ca_thread_init(void);

/* ---- statistics (stats.c): all counters, one place ---------------------------------------- */
typedef struct ca_stats_s {
  _Atomic(int64_t)  live[CA_CLASS_MAX];       /* blocks, flushed from heaps */
  _Atomic(int64_t)  peak[CA_CLASS_MAX];
  _Atomic(uint64_t) allocs[CA_CLASS_MAX];     /* flushed from heaps at thread exit / report */
  _Atomic(int64_t)  segments, segments_peak;  /* SMALL/MEDIUM segments mapped */
  _Atomic(uint64_t) segments_mapped;          /* segments mapped fresh, in all (incl. large) */
  _Atomic(uint64_t) reservations;             /* mmaps that 2 MiB segments are carved from */
  _Atomic(uint64_t) segments_reclaimed, segments_abandoned;
  _Atomic(uint64_t) large_allocs;
  _Atomic(int64_t)  large_live, large_live_bytes, large_peak_bytes;
  _Atomic(uint64_t) large_cached_reuse;
  _Atomic(uint64_t) slot_reuse;               /* segments taken from the thread's own slots */
  _Atomic(uint64_t) large_kept_reuse;         /* objects of a flavour reused whole */
  _Atomic(uint64_t) flavour_blocks;           /* blocks flavour heaps handed out ... */
  _Atomic(uint64_t) flavour_blocks_ordinary;  /* ... of them from spans the hook could not fill */
  _Atomic(int64_t)  mapped_bytes, mapped_peak;
  _Atomic(uint64_t) purged_bytes, purges;
  _Atomic(uint64_t) threads, heaps_reused;
  _Atomic(uint64_t) double_frees_checked;
} ca_stats_t;

extern ca_stats_t _ca_stats;
static inline void _ca_stat_add(_Atomic(int64_t)* v, int64_t d, _Atomic(int64_t)* peak) {
  int64_t now = atomic_fetch_add_explicit(v, d, ca_relaxed) + d;
  if (peak != NULL) {
    int64_t p = atomic_load_explicit(peak, ca_relaxed);
    while (now > p && !atomic_compare_exchange_weak_explicit(peak, &p, now, ca_relaxed, ca_relaxed)) {}
  }
}
static inline void _ca_stat_inc(_Atomic(uint64_t)* v, uint64_t d) { atomic_fetch_add_explicit(v, d, ca_relaxed); }
void _ca_stats_span_settle(ca_heap_t* h, ca_span_t* s, uint32_t remaining);
void _ca_stats_heap_flush(ca_heap_t* h);
void _ca_stats_exit(void);
void _ca_stats_json(struct ca_buf_s* b);

#pragma GCC visibility pop

#endif
