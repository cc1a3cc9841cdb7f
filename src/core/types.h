/* chromalloc core data structures.

   A process maps memory in *segments*: 2 MiB-aligned regions, each with its header in the first
   4 KiB page (so a segment can later be one huge page, or be filled with pages of chosen cache
   colours, without the header moving).

     segment (2 MiB, aligned) ─┬─ header page: segment fields + span descriptors spans[]
                               ├─ span 0  (shortened by the header page)
                               ├─ span 1        all spans of a segment have one size:
                               ├─ ...           SMALL 64 KiB (blocks <= 8 KiB), MEDIUM 512 KiB
                               └─ span n-1      (blocks <= 64 KiB); a LARGE segment is one span
                                                holding one object (and may be bigger than 2 MiB)

   A *span* holds blocks of one size class, laid out as a flat array that starts at a per-span
   colour offset (src/index/layout.c): the block stride is index-aware, so the blocks of a span
   start on every L1 set (paper 001).  A block pointer finds its span by address arithmetic:
   segment = (p - 1) & ~(2 MiB - 1), span = spans[(p - segment) >> span_shift].  A global bitmap
   (segmap.c) says which 2 MiB units are segment heads, so free() can reject foreign pointers.

   Ownership.  Every small/medium segment belongs to one thread heap (segment.owner); only
   that thread allocates from its spans and touches their `free`/`local_free` lists, so the
   malloc and local free fast paths take no lock and no atomic.  Frees from other threads push
   onto the span's atomic `thread_free` list; its two low bits carry the delayed-free state:
   when a span is full (parked in the heap's full queue) the first remote free instead pushes
   the block onto the owner heap's atomic `delayed_free` list, which tells the owner to bring
   the span back (mimalloc's scheme; the block keeps the span alive, so a span is never freed
   while someone still holds a pointer to it).

     heap (per thread) ── direct[size/16] ──> span with free blocks (fast path, sizes <= 1 KiB)
                       ── queues[class]   ──> spans of that class, the first one allocating
                       ── queues[FULL]    ──> spans with no free block
                       ── delayed_free    <── blocks freed remotely into full spans (atomic)

   A thread allocating memory of a *flavour* (pages of chosen cache colours, src/color) does so
   from a second heap of that flavour, whose segments carry the flavour; the span hook fills
   their spans.  The fast paths never see flavours: a free into a flavour heap takes the slow
   path, which finds the owner among the thread's heaps.

   A thread that exits abandons its segments (owner = NULL) to a global list; another thread
   adopts them when it needs a new segment.  Large objects live in their own LARGE segment that
   no heap owns: any thread frees it straight back to the segment cache.  Free segments wait in
   a global cache and are purged (MADV_DONTNEED) after `purge_delay` ms.

   Free blocks carry `key` in their second word: a per-process random value, cleared by malloc.
   A free() that finds the key already set is a probable double free and is confirmed by a scan
   (glibc's tcache uses the same idea). */
#ifndef CA_TYPES_H
#define CA_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "hooks.h"                                 /* CA_FLAVOURS */

#define CA_SEGMENT_SHIFT   21
#define CA_SEGMENT_SIZE    ((size_t)1 << CA_SEGMENT_SHIFT)
#define CA_SEGMENT_MASK    (CA_SEGMENT_SIZE - 1)
#define CA_HEADER_SIZE     ((size_t)4096)          /* segment header page */

#define CA_SMALL_SHIFT     16                      /* 64 KiB spans */
#define CA_MEDIUM_SHIFT    19                      /* 512 KiB spans */
#define CA_LARGE_SHIFT     22                      /* one span: any offset below 4 MiB -> index 0 */
#define CA_MAX_SPANS       (CA_SEGMENT_SIZE >> CA_SMALL_SHIFT)   /* 32 */

#define CA_MIN_ALIGN       16                      /* every block is 16-byte aligned */
#define CA_SMALL_MAX       8192                    /* largest base class in small spans */
#define CA_MEDIUM_MAX      65536                   /* largest base class in medium spans */
#define CA_DIRECT_MAX      1024                    /* sizes served from heap->direct[] */
#define CA_DIRECT_N        (CA_DIRECT_MAX / CA_MIN_ALIGN + 1)
#define CA_HEAP_SLOTS      2                       /* free segments a thread keeps (segment.c) */
#define CA_CLASS_FULL      CA_CLASS_MAX            /* heap queue index of full spans */

typedef enum ca_segment_kind_e { CA_SEG_SMALL, CA_SEG_MEDIUM, CA_SEG_LARGE } ca_segment_kind_t;

/* span.flags: a local free takes the fast path only when all are clear (span.local says so). */
#define CA_SPAN_FULL       0x01    /* parked in the heap's full queue */
#define CA_SPAN_ALIGNED    0x02    /* holds over-aligned blocks: pointers may be interior */
#define CA_SPAN_UNUSED     0x04    /* not allocated to any size class */
#define CA_SPAN_POLICY     0x08    /* holds a policy's page (_ca_malloc_page): frees reach the policy */

/* span.zero, trusted by calloc only while no hooks are installed (the colour layer's pages carry bytes) */
#define CA_ZERO_TAIL       0x01    /* memory past the carved blocks is zero (fresh or purged) */
#define CA_ZERO_LIST       0x02    /* `free` holds only blocks carved from it: zero but for `next` */

/* delayed-free state in the low bits of span.thread_free */
#define CA_DELAY_NONE      0       /* remote frees push onto thread_free */
#define CA_DELAY_USE       1       /* span is full: next remote free goes to heap->delayed_free */
#define CA_DELAY_FREEING   2       /* a remote thread is pushing onto heap->delayed_free */
#define CA_DELAY_NEVER     3       /* abandoned: never touch the heap */
#define CA_DELAY_MASK      ((uintptr_t)3)
/* the list's length rides in the word's top 16 bits (user addresses stay below 2^47, a span holds
   at most 4096 blocks): the owner learns that every block came back without walking the list */
#define CA_TF_COUNT_SHIFT  48
#define CA_TF_ONE          ((uintptr_t)1 << CA_TF_COUNT_SHIFT)
#define CA_TF_BLOCKS(tf)   ((ca_block_t*)((tf) & (CA_TF_ONE - 1) & ~CA_DELAY_MASK))

typedef struct ca_block_s {
  struct ca_block_s* next;
  uintptr_t          key;          /* == _ca_key while the block is free */
} ca_block_t;

typedef struct ca_heap_s ca_heap_t;
typedef struct ca_segment_s ca_segment_t;

typedef struct ca_span_s {
  /* Remote frees' word first, then the fast-path fields, the rarely written ones last: spans
     are 96 bytes, so an odd span's first 32 bytes share a line with the even span's last 32.
     With thread_free at the end, every remote free to span k pulled span k+1's free list away
     from its owner; now that line holds span k's queue links beside span k+1's own words. */
  _Atomic(uintptr_t)   thread_free;    /* count << 48 | remote frees | CA_DELAY_* */
  ca_block_t*          free;           /* blocks ready to hand out (owner only) */
  ca_heap_t*           local;          /* the owner heap while its frees may take the fast path
                                          (ordinary heap, no flag set), else NULL: free()'s one
                                          test for "mine and needs no care" */
  uint32_t             used;           /* blocks handed out, minus local frees */
  uint8_t              flags;          /* CA_SPAN_* */
  uint8_t              sclass;         /* size class */
  uint8_t              shift;          /* trailing zero bits of block_size */
  uint8_t              flavour;        /* memory flavour chosen by the span hook (0 = open) */
  ca_block_t*          local_free;     /* freed by the owner, not yet reusable */
  uint64_t             inv;            /* inverse of (block_size >> shift) mod 2^64 */
  uint8_t*             start;          /* first block (span base + colour offset) */
  uint32_t             capacity;       /* blocks carved so far (lazy, page by page) */
  uint32_t             block_size;     /* stride */
  uint16_t             reserved;       /* blocks that fit (at most 64 KiB / 16) */
  uint8_t              index;          /* position in segment->spans */
  uint8_t              zero;           /* CA_ZERO_*: what of its memory is known zero (calloc) */
  uint16_t             installed;      /* stats: length of `free` when last installed */
  uint16_t             used_seen;      /* stats: `used` when last accounted */
  struct ca_span_s*    next;           /* heap queue, or segment free/purge list */
  struct ca_span_s*    prev;
  uint64_t             purge_at;       /* free span: time (ms) after which to purge, 0 = purged */
} ca_span_t;
_Static_assert(sizeof(ca_span_t) == 96, "span descriptor size");   /* free() indexes spans[] by x3, shift */

struct ca_segment_s {
  uintptr_t            cookie;         /* address ^ secret: a valid header */
  _Atomic(ca_heap_t*)  owner;          /* owner heap; NULL when abandoned, LARGE or cached.
                                          free() compares it with the thread's heap (not the
                                          thread id: a thread created after fork() may reuse a
                                          dead thread's id, never its heap) */
  _Atomic(ca_heap_t*)  thread;         /* the owner's thread, named by its ordinary heap (owner->main):
                                          free()'s "is it mine" test.  Reading owner->main instead
                                          missed on the line the owner writes at every refill */
  size_t               size;           /* bytes mapped (2 MiB for SMALL/MEDIUM) */
  uint8_t              kind;           /* ca_segment_kind_t */
  uint8_t              span_shift;
  uint8_t              flavour;        /* memory flavour of every span here */
  uint8_t              is_zero;        /* LARGE: object memory is known to be zero */
  uint8_t              purged;         /* cached and given back to the OS */
  uint8_t              abandoned;      /* on the abandoned list */
  uint32_t             span_count;
  uint64_t             cached_at;      /* in the segment cache since (ms) */
  uint64_t             purged_at;      /* cached: when it was given back (ms) */
  /* the fields above fill the first cache line, which remote frees read: those below the owner
     writes as spans come and go */
  uint32_t             spans_used;
  uint32_t             purged_spans;   /* spans given back while free, not used since (bits) */
  uint32_t             clean_spans;    /* free spans whose memory is zero: never used, or purged (bits) */
  uint64_t             spans_purged_at;/* when the last of them was given back (ms) */
  size_t               dirty;          /* bytes from the start that may be resident (LARGE: the
                                          objects' extent since the last purge) */
  ca_segment_t*        next;           /* heap's queue of segments with free spans / cache */
  ca_segment_t*        prev;
  ca_segment_t*        all_next;       /* heap's list of all its segments / abandoned list */
  ca_segment_t*        all_prev;
  /* LARGE segments: the one object */
  uint8_t*             large_ptr;      /* pointer handed out */
  size_t               large_size;     /* usable bytes from large_ptr */
  ca_span_t            spans[CA_MAX_SPANS + 1];   /* +1: sentinel that is always UNUSED */
};
_Static_assert(offsetof(ca_segment_t, spans_used) == 64, "free()'s segment fields share no line with the owner's");

/* purge pacing (pacer.h) */
typedef struct ca_pacer_s {
  uint32_t             mult;           /* waits are purge_delay x mult (0 counts as 1) */
  uint64_t             calm_since;     /* last refault, or last pace-down (ms) */
} ca_pacer_t;

typedef struct ca_span_queue_s {
  ca_span_t*           first;
  ca_span_t*           last;
} ca_span_queue_t;

typedef struct ca_segment_queue_s {
  ca_segment_t*        first;
  ca_segment_t*        last;
} ca_segment_queue_t;

/* per-heap, per-class counters, settled in slow paths (see stats.c) */
typedef struct ca_class_count_s {
  uint64_t             allocs;         /* blocks handed out (settled at refill) */
  int64_t              live_delta;     /* not yet flushed to the global counters */
} ca_class_count_t;

struct ca_heap_s {
  ca_span_t*           direct[CA_DIRECT_N];     /* size/16 -> span to allocate from */
  _Atomic(ca_block_t*) delayed_free;
  ca_span_queue_t      queues[CA_CLASS_MAX + 1];
  ca_segment_queue_t   segments[2];             /* SMALL, MEDIUM segments with free spans */
  ca_segment_queue_t   all;                     /* every segment this heap owns */
  ca_span_queue_t      purge[2];                /* SMALL, MEDIUM free spans waiting to be purged
                                                   (expiry order) */
  ca_pacer_t           pacer;                   /* how long they wait */
  uint64_t             rng;                     /* xorshift state: span colours */
  uint32_t             colour[CA_CLASS_MAX];    /* next span's first-block offset per class */
  uint64_t             generic_calls;
  int64_t              sample_left;             /* bytes of sampled allocations to the next sample */
  uint32_t             route_gen;               /* class routes seen (_ca_route_class) */
  uint8_t              flavour;                 /* of the memory this heap's segments get */
  ca_heap_t*           main;                    /* the thread's ordinary heap (itself if it is) */
  ca_heap_t*           flavours[CA_FLAVOURS];   /* main heap only: the thread's flavour heaps */
  ca_class_count_t     counts[CA_CLASS_MAX];
  /* registry fields: written only under the registry lock, never cleared by heap init */
  ca_heap_t*           next_heap;               /* registry of all heaps (never freed) */
  bool                 in_use;
  /* free 2 MiB segments the thread keeps ahead of the global cache (segment.c): the owner puts
     and takes them, any thread may take one; never cleared by heap init */
  _Atomic(ca_segment_t*) slots[CA_HEAP_SLOTS];
  _Atomic(uint64_t)    slots_due[CA_HEAP_SLOTS]; /* when the slot's segment is to be purged (ms) */
};

#endif
