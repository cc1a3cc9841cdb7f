/* The one interface between the core allocator and the layers of the cache runtime above it
   (colour layer, monitor, policies: libchromalloc-colour).  They include this header and no
   other of the core's; the core includes none of theirs.  libchromalloc (the allocator alone)
   is the core with nothing installed here.

     layers  ──register──>  a ca_layer_t each (init, fork, options, statistics), in one table
             ──install───>  a memory provider (ca_hooks_t) and a policy (ca_policy_t)
             <──query─────  the core asks them on slow paths only: which memory for a new span or
                            large object, and tells them of chunks freed or resized
             ──call──────>  the functions below: memory of a flavour, what a pointer is, and
                            the few changes of placement the core makes on their behalf

   Lock order (fork takes them in this order; a thread holding one may take those after it,
   never those before): the policy's (NightWatch, its call sites, the context ranges), the
   monitor's, the colour layer's (recolouring's claim, then its sets and pools), the fault
   handler's, then the core's (heap registry, abandoned segments, segment cache, kept objects).
   No layer calls into one above it while it holds a lock. */
#ifndef CA_HOOKS_H
#define CA_HOOKS_H

#include "os.h"
#include "buf.h"

#pragma GCC visibility push(hidden)

/* ---- the machine (machine.c): read once at start, read-only after -------------------------- */
typedef struct ca_cache_level_s {
  uint32_t level, size, ways, line, sets;
  uint32_t shared_cpus;      /* cpus sharing this cache, 0 if unknown */
} ca_cache_level_t;

typedef struct ca_machine_s {
  ca_cache_level_t l1d;
  ca_cache_level_t levels[4];    /* data/unified levels found, L1d first */
  uint32_t         nlevels;
  const char*      source;       /* "sysfs", "cpuid", "default" or "described" */
  bool             simulated;    /* described (CHROMALLOC_MACHINE): the colour layer simulates it */
  bool             hashed;       /* ... with a hashed index */
  bool             frames;       /* ... whose frame numbers a process may read (pagemap as root) */
  uint32_t         probe_ns;     /* ... each simulated eviction test costing this long */
} ca_machine_t;

extern ca_machine_t _ca_machine;
size_t   _ca_machine_l2(void);                 /* bytes of the L2 (1 MiB when none is known) */
void     _ca_started(void);                    /* the process is initialised (an entry point's first call) */
uint64_t _ca_process_seed(void);               /* random per process (option seed) */

/* ---- layers ----------------------------------------------------------------------------------
   A layer's options join CHROMALLOC_OPTIONS (one table each, read with the core's, before any
   allocation), its statistics are a section of the JSON, and its init and fork handlers run in
   the order of the table: init from the last layer to the first (inner first), fork's prepare
   from the first to the last and then the core's, parent and child the core's first and then
   the layers' in reverse (the lock order above). */
typedef struct ca_option_desc_s {
  const char*        name;
  long               def, min, max;
  const char* const* words;        /* enumerated values (index = value), or NULL for integers */
  const char*        desc;
} ca_option_desc_t;
extern const char* const _ca_bool_words[];      /* "0", "1": a boolean option (also on/off ...) */

typedef struct ca_layer_s {
  const char*             name;      /* its statistics section, NULL: none */
  const ca_option_desc_t* options;   /* its options and where their values go */
  long*                   values;
  uint32_t                noptions;
  void (*init)(void);                /* process start, after the core's (may be NULL, as below) */
  void (*fork_prepare)(void);
  void (*fork_parent)(void);
  void (*fork_child)(void);
  void (*thread_done)(void);         /* a thread exits (its key destructor: signals not yet blocked) */
  void (*stats)(ca_buf_t* b);        /* the section's JSON object */
} ca_layer_t;
/* the cache runtime's layers, outer first, NULL-terminated (runtime.c; the allocator alone has
   none) */
extern const ca_layer_t* const _ca_layers[];

/* ---- the memory provider (the colour layer) ---------------------------------------------------
   - span_memory: a span (or a large object's pages) is about to be used: the provider may
     replace the pages of [base, base + bytes) with memory of its choosing (pages of chosen cache
     colours) for the span's flavour.  Returns false when it did not, and the span stays
     ordinary memory.  For flavour 0 it only learns of ordinary memory handed out.
   - span_released: the range is free again; called before the core would purge it, so that a
     provider that placed special pages there can take them back first.
   - span_ready: whether span_memory could fill `bytes` for the flavour now (a hint, no lock):
     a flavour heap keeps an empty span that stayed ordinary memory until it could. */
typedef struct ca_hooks_s {
  bool (*span_memory)(void* base, size_t bytes, uint32_t flavour);
  void (*span_released)(void* base, size_t bytes, uint32_t flavour);
  bool (*span_ready)(size_t bytes, uint32_t flavour);
} ca_hooks_t;
void _ca_hooks_install(const ca_hooks_t* hooks);   /* NULL uninstalls */

/* ---- the policy (NightWatch) ------------------------------------------------------------------
   - place: a chunk of at least a page is requested from a thread's ordinary heap (malloc, or
     calloc when `zero`), larger than the span classes (_ca_medium_limit) or of a span class the
     policy asked to see one by one (_ca_place_class).  The policy may allocate it itself (as a
     large object of a flavour, _ca_large_alloc / _ca_malloc_flavour, which never call place)
     or return NULL to let the core allocate it as usual.  `frame` is the frame address of the
     allocator's entry point: the program's frames lie above it, which is where a context is
     read from; `ret` is the entry point's return address: the program's call site.
   - chunk: a large object is freed (CA_CHUNK_FREE) or about to be resized in place or moved
     (CA_CHUNK_RESIZE), or a block of a span holding a page from _ca_malloc_page is freed
     (CA_CHUNK_FREE, size 0): the policy stops watching it.
   - sample: span-class chunks, sampled by bytes.  While the sampling period is not 0, each
     thread's ordinary heap counts down the bytes its span-class allocations take and calls
     `sample` once the count has crossed a period, so each call stands for about a period's
     bytes.  The policy may return the chunk (on pages of its own) or NULL; from `sample`,
     _ca_sample_defer(k) makes this thread's next sample come k periods later.
   Span-level mapping: _ca_route_class(c, flavour) makes every ordinary heap serve class c from
   its heap of that flavour (0: its own spans again).  A heap sees the change at its next
   generic call; a routed class's allocations all take the generic path (its blocks stream
   through the cache: a slower malloc costs little next to their misses).
   None of this is on a path the core takes while no policy is installed. */
typedef enum ca_chunk_event_e { CA_CHUNK_FREE, CA_CHUNK_RESIZE } ca_chunk_event_t;

typedef struct ca_policy_s {
  void* (*place)(size_t n, bool zero, const void* frame, const void* ret);
  void  (*chunk)(ca_chunk_event_t event, void* p, size_t size);
  void* (*sample)(size_t n, const void* frame, const void* ret);
} ca_policy_t;
void     _ca_policy_install(const ca_policy_t* policy);   /* NULL uninstalls */
void     _ca_sample_set_period(int64_t bytes);   /* 0: no sampling */
int64_t  _ca_sample_period_bytes(void);
void     _ca_sample_defer(uint32_t periods);     /* from `sample`: the next one periods later */
void     _ca_route_class(uint32_t c, uint8_t flavour);
uint8_t  _ca_class_route(uint32_t c);            /* the flavour class c is served from (0: own) */
void     _ca_place_class(uint32_t c, bool on);   /* class c's chunks of a page or more go to `place` */
bool     _ca_class_placed(uint32_t c);
/* set while a layer allocates for itself (a symbol lookup, a stack scan): the allocation never
   reaches the policy */
extern __thread bool _ca_no_policy __attribute__((tls_model("initial-exec")));

/* ---- memory for the layers -------------------------------------------------------------------- */
#define CA_FLAVOURS 17                /* 0 = ordinary, 1..15 = colour sets, 16 = spread (colour.h) */
void*  _ca_malloc_flavour(size_t n, uint8_t flavour);   /* from the thread's heap of the flavour */
/* Diverting a thread's allocations.  Until called again, the calling thread's malloc, calloc,
   realloc and aligned allocations come from its heap of `flavour` (0: its own); its fast paths
   are unchanged (malloc reads _ca_heap_alloc instead of _ca_heap; frees and ownership always go
   by _ca_heap); a thread with no heap yet starts one.  _ca_heap_divert returns the heap now in
   use, which a layer may keep and store into _ca_heap_alloc itself (a lock call's fast path: one
   store) until the thread's heaps go back at its exit (the layer's thread_done), when
   _ca_heap_alloc = _ca_heap undoes it. */
struct ca_heap_s;
extern __thread struct ca_heap_s* _ca_heap __attribute__((tls_model("initial-exec")));
extern __thread struct ca_heap_s* _ca_heap_alloc __attribute__((tls_model("initial-exec")));
struct ca_heap_s* _ca_heap_divert(uint8_t flavour);
void*  _ca_large_alloc(size_t n, size_t align, bool zero, uint8_t flavour);   /* pages of its own */
void*  _ca_malloc_page(void);                   /* a page of its own inside a span block (free: chunk) */
void   _ca_free_chunk(void* p);                 /* free() */
/* p is the start of a live large object: its usable size and flavour (false: it is not) */
bool   _ca_large_info(const void* p, size_t* size, uint8_t* flavour);
/* The large object at p (live: the caller keeps it from being freed meanwhile) now has pages of
   `flavour` (0: ordinary): the caller recoloured them.  Its free gives them back accordingly. */
void   _ca_large_set_flavour(void* p, uint8_t flavour);
uint8_t _ca_flavour_of(const void* p);          /* of the span or large object holding p (0: ordinary) */
uint32_t _ca_block_size_of(const void* p);      /* the block size of the span holding p (0: a large
                                                   object, or not ours) */
uint8_t* _ca_span_memory_of(const void* p);     /* the base span_memory was given for that span (NULL: none) */
/* the size classes (read-only once the process has started) */
#define CA_CLASS_MAX 64                                /* room for the class table (56 used) */
extern uint32_t _ca_class_size[];
extern uint32_t _ca_class_count;
extern size_t   _ca_medium_limit;               /* largest size served by a span */
uint32_t _ca_class_of(size_t n);                /* n <= _ca_medium_limit */

#pragma GCC visibility pop

#endif
