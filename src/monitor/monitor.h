/* The locality monitor (monitor.c): sampled page traps that decide whether a chunk's data is
   reused while it could still be in the L2 (normal) or not (polluter). */
#ifndef CA_MONITOR_H
#define CA_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ca_buf_s;

/* What the monitor saw of one chunk. */
typedef struct ca_monitor_result_s {
  bool     judged;         /* enough evidence for a verdict */
  bool     polluter;       /* miss rate above one half */
  uint32_t pages;          /* pages sampled */
  uint32_t hits, misses;   /* judged reference pairs */
  uint32_t far;            /* misses: the chunk alone touched more than the L2 between the two */
  uint32_t unused;         /* misses: a page referenced once and never again */
  uint32_t interference;   /* hits by the chunk's own footprint whose timed reload missed: its
                              data was evicted by other data (it is a victim of pollution) */
} ca_monitor_result_t;

/* A chunk's monitoring ended with enough evidence (r->judged), or a group's ended (chunk NULL,
   with or without).  Called on the monitor thread or in the thread that freed the chunk,
   never in the fault handler, with no monitor lock held.  `cookie` is what
   _ca_monitor_start or _ca_monitor_start_member was given. */
typedef void (*ca_verdict_fn)(void* chunk, size_t size, uint64_t cookie, const ca_monitor_result_t* r);

#pragma GCC visibility push(hidden)
void   _ca_monitor_init(ca_verdict_fn verdict);
/* Start sampling a chunk (whole pages inside [p, p + n)); false when there is no room, no
   whole page, or the monitor is still measuring the machine. */
bool   _ca_monitor_start(void* p, size_t n, uint64_t cookie);
/* A chunk below the L2 joins the group `cookie` (one allocation context's chunks below the
   L2, judged together: monitor.c) with its page p, standing for `stride` bytes: a sampled small
   chunk alone on p, for the context's small allocations of a sampling period; a larger chunk
   starting at p, for its size.  `start`: the group may start now, else it only joins one
   running.  False when there is no room or no group to join. */
bool   _ca_monitor_start_member(void* p, uint64_t cookie, size_t stride, bool start);
bool   _ca_monitor_member_room(uint64_t cookie, bool start);   /* a member could join (no lock) */
uint32_t _ca_monitor_group_pages(size_t stride);    /* members of `stride` bytes a group takes in all */
size_t _ca_monitor_member_least(void);              /* bytes a member stands for at least */
int    _ca_monitor_tracer(const char* status, size_t n);   /* TracerPid of a status text (pure) */
/* The chunk is freed or resized: stop, give the verdict if the evidence suffices. */
void   _ca_monitor_stop(void* p);
/* The kernel is about to touch [p, p + len) (a system call's buffer) or the program changes its
   protection: make any sampled page in it accessible and stop sampling it. */
void   _ca_monitor_release(const void* p, size_t len) __attribute__((access(none, 1)));
bool   _ca_monitor_active(void);                    /* any chunk being sampled */
/* The program's thread, at an allocator call while chunks are sampled: re-protect the pages
   whose burst has passed (cheap when there are none). */
void   _ca_monitor_tick(void);
extern _Atomic(int) _ca_sampled_chunks;             /* how many (a load for hot wrappers) */
/* The process set up asynchronous kernel I/O (io_uring, aio: syscalls.c): every sampled page
   is opened, and no chunk is sampled by page traps from now on. */
void   _ca_monitor_stop_traps(void);
bool   _ca_async_io(void);                          /* syscalls.c: that happened */
void   _ca_async_io_begins(void);                   /* syscalls.c: it happens (stops the traps) */
bool   _ca_monitor_async_maps(const char* text, size_t n);   /* an io_uring or aio mapping in it (pure) */
uint64_t _ca_monitor_cost_ns(void);                 /* time spent protecting pages and in faults */
uint64_t _ca_monitor_page_cost_ns(void);            /* of that, per sampled page (average) */
/* A timed reload of a page about to be touched (8 dependent loads over its lines from `line`;
   async-signal-safe): 2 the L2 holds them, 3 a level beyond it, 4 memory, 0 the thresholds are
   not measured (_ca_monitor_measure: once, on one CPU, about a millisecond). */
int    _ca_monitor_reload(const void* page, unsigned line, uint32_t* ticks);
void   _ca_monitor_measure(void);
/* the reload's thresholds (pure): the L2's from its reading and the L3's fastest and median, memory's
   from the L3's fastest and flushed lines' */
uint32_t _ca_monitor_l2_threshold(uint32_t hit, uint32_t l3_low);
uint32_t _ca_monitor_mem_threshold(uint32_t l3_low, uint32_t mem);
bool   _ca_monitor_covers(uintptr_t a);             /* a lies in a chunk being sampled (no lock) */
uint32_t _ca_monitor_samples(size_t pages);         /* pages sampled for a chunk of `pages` */
/* The pair rule: the chunk's other sampled pages referenced between the pair's two references
   stood for `between` bytes, the page itself for `stride`: a hit when that footprint fits the
   L2. */
bool   _ca_monitor_judge(uint64_t between, size_t stride, size_t l2);
void   _ca_monitor_stats_json(struct ca_buf_s* b);
/* The PMU method: sampled loads with the level that served them (pmu.h), attributed to the
   chunks being monitored.  Tests call _ca_monitor_use_samples() before the monitor starts to
   judge chunks by the samples they feed (no traps, no rings). */
struct ca_pmu_sample_s;
void   _ca_monitor_feed(const struct ca_pmu_sample_s* s, size_t n);
void   _ca_monitor_use_samples(void);           /* test builds only (CA_TEST_HOOKS) */
struct ca_layer_s;
extern const struct ca_layer_s _ca_layer_monitor;

/* Software access bits (access.c): a range made inaccessible for a window, its pages' first
   touches recorded in `bits` (one per page) by the fault handler; or, `writes`, write-protected
   (written.c), its written pages recorded at the window's end.  Arm returns the slot, or -1
   (no room, pages the monitor samples, quiet, not a mapping, or no such backend here). */
int    _ca_access_arm(void* base, size_t pages, uint64_t* bits, bool writes);
bool   _ca_access_disarm(int slot);                 /* the window's end: the range opened; false:
                                                       quiet opened it early */
/* a trapped range's times, once disarmed and before the next arm: from arming to each trap,
   summed over the pages trapped, and to the range's opening (the window, or less when cut) */
void   _ca_access_waited(int slot, uint64_t* waited_ns, uint64_t* open_ns);
bool   _ca_access_armed(void);                      /* any range armed (one load) */
bool   _ca_access_covers(uintptr_t a);              /* a lies in an armed range */
bool   _ca_monitor_move_begin(void);                /* around a live page's move too: no */
void   _ca_monitor_move_end(void* page, bool held); /* sampled page opened or protected */
void   _ca_access_move_begin(void* page);          /* around a live page's move (color/move.c): */
void   _ca_access_move_end(void);                   /* no trap opens it, no range is armed */
void   _ca_access_release(const void* p, size_t len);   /* a system call's buffer, the program's
                                                           mprotect/munmap/madvise: never armed again */
void   _ca_access_on_change(void (*fn)(uintptr_t lo, uintptr_t hi));   /* ... the client is told here */
/* each trap, told in the faulting thread's signal handler once the page is open again (atomics
   only): the faulting address.  Two clients at most (lock sets' nested check, ROCS). */
void   _ca_access_on_touch(void (*fn)(uintptr_t addr));
bool   _ca_access_watching(void);                   /* the wrappers must release buffers */
void   _ca_access_stats(uint64_t* faults, uint64_t* fault_ns, uint64_t* released, uint64_t* quiet, uint64_t* written);
/* quiet: nothing armed while the C library may touch memory with every signal blocked */
bool   _ca_access_quiet(void);                       /* traps refused now */
void   _ca_access_hold(bool on);                     /* around posix_spawn, system, popen */
void   _ca_access_quiet_for(uint64_t ns);            /* after vfork */
void   _ca_access_thread_leaving(void);              /* a thread's exit: until it is gone */
void   _ca_access_fork_child(void);
#ifdef CA_TEST_HOOKS
extern void (*_ca_test_locked)(char which);   /* called in A.lock ('A') and H.lock ('H') sections */
#define CA_TEST_LOCKED(which) do { if (_ca_test_locked != NULL) _ca_test_locked(which); } while (0)
#else
#define CA_TEST_LOCKED(which) do { } while (0)
#endif
/* written pages (written.c): userfaultfd's asynchronous write protection and PAGEMAP_SCAN */
bool        _ca_written_ok(void);                    /* usable here (tried once, on first use) */
const char* _ca_written_why(void);                   /* ... if not, why */
bool        _ca_written_arm(uintptr_t lo, uintptr_t hi);
size_t      _ca_written_collect(uintptr_t lo, uintptr_t hi, _Atomic(uint64_t)* bits);
void        _ca_written_fork_child(void);
#pragma GCC visibility pop

#endif
