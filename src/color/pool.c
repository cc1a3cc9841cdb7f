/* Page pools: pages whose colour is known, waiting to back a span.

   Fresh pages come from supply chunks (2 MiB mappings, faulted in: one huge page each where
   that lets the frames no set wants go back at once, below).  The worker classifies them and
   pushes each onto the pool of the colour set it belongs to.

   A span of a colour set is filled by moving pool pages into its address range (move.c), which
   keeps the physical frame (and so the colour).  When the span is freed its pages move back
   into the pool: into *slots* of a reserved pool region, since the span's range must be
   ordinary memory again.  No frame whose colour was paid for is lost, except by re-verification
   (a page whose colour changed: the host moved it).

   A page moved by mremap is a VMA of its own, and the kernel caps a process at
   vm.max_map_count of them (65530 by default), so where moves are mremaps the coloured pages
   in use are capped at a quarter of that. */
#define _GNU_SOURCE
#include "colour.h"
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <unistd.h>

#define CA_SLOT_REGION ((size_t)1 << 32)     /* 4 GiB of address space for parked pages */

static uint8_t*  slot_region;
static size_t    slot_next;                  /* bump index into the slot region */
static void**    slot_free;                  /* free slot addresses (stack) */
static size_t    slot_free_n, slot_free_cap;
static size_t    moved_pages, moved_limit;   /* pages living outside their supply chunk */

static bool grow(void*** arr, size_t* cap, size_t need) {
  if (need <= *cap) return true;
  size_t ncap = *cap ? *cap * 2 : 4096;
  while (ncap < need) ncap *= 2;
  void** n = _ca_os_map(ncap * sizeof(void*));
  if (n == NULL) return false;
  if (*arr) { memcpy(n, *arr, *cap * sizeof(void*)); _ca_os_unmap(*arr, *cap * sizeof(void*)); }
  *arr = n;
  *cap = ncap;
  return true;
}

bool _ca_pool_push(ca_page_pool_t* p, void* page) {
  if (!grow(&p->pages, &p->cap, p->count + 1)) return false;
  p->pages[p->count++] = page;
  return true;
}

void* _ca_pool_pop(ca_page_pool_t* p) { return p->count ? p->pages[--p->count] : NULL; }

/* A page from anywhere in the pool.  The last pages pushed come from the last supply chunk or
   two, and a chunk's frames fall unevenly on the colours: a 64-page block filled from the top
   of a 7/8 pool evicted itself from the L2 (its pages of four colours or fewer) in 7 of 19
   processes on the Zen 5 host, drawn from anywhere in 0 of 18 (docs/colours.md, "The slice
   audit").  Also stock.c's, for the pages it tests. */
void* _ca_pool_pop_any(ca_page_pool_t* p, uint64_t* rng) {
  if (p->count == 0) return NULL;
  *rng ^= *rng << 13; *rng ^= *rng >> 7; *rng ^= *rng << 17;
  size_t at = (size_t)(*rng % p->count);
  void* page = p->pages[at];
  p->pages[at] = p->pages[--p->count];
  return page;
}

static size_t map_count_limit(void) {
  char buf[32];
  int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
  size_t v = 65530;
  if (fd >= 0) {
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) { buf[n] = 0; v = 0; for (char* q = buf; *q >= '0' && *q <= '9'; q++) v = v * 10 + (size_t)(*q - '0'); }
  }
  return v / 4;
}

/* The slot region takes pages by UFFDIO_MOVE only when mapped writable (registered by move.c);
   for mremap an inaccessible reservation serves. */
bool _ca_pool_init(void) {
  if (slot_region) return true;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  slot_region = _ca_move_uffd() ? mmap(NULL, CA_SLOT_REGION, PROT_READ | PROT_WRITE, flags, -1, 0) : MAP_FAILED;
  if (slot_region != MAP_FAILED) _ca_move_quiet_region(slot_region, CA_SLOT_REGION);
  else slot_region = mmap(NULL, CA_SLOT_REGION, PROT_NONE, flags, -1, 0);
  if (slot_region == MAP_FAILED) { slot_region = NULL; return false; }
  moved_limit = map_count_limit();
  return true;
}

/* n more pages moved would pass the cap on mappings (mremap moves only) */
bool _ca_pool_moves_capped(size_t n) { return !_ca_move_uffd() && moved_pages + n > moved_limit; }

/* Transparent huge pages on request (sysfs says "always" or "madvise"). */
static bool thp_offered(void) {
  static int offered = -1;
  if (offered < 0) {
    char buf[128];
    int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    buf[n > 0 ? n : 0] = 0;
    offered = n > 0 && strstr(buf, "[never]") == NULL;
  }
  return offered;
}

/* A supply chunk of fresh pages, faulted in: (base, npages).  `*fresh`: the chunk is one huge
   page, its frames a 2 MiB block the kernel had not just taken back, so those no set takes can
   go back at once (worker.c, release_chunk) and will not come back in the next chunk.  Pages of
   4 KiB come from the frames given back last first (447 of 512 in the next chunk here), so
   those are held until a round ends.  A huge page is used only where pages move by
   UFFDIO_MOVE: one page moved out splits it, and the rest is then freed (an mremap leaves the
   huge page whole, and its pages given back stay allocated until memory runs short: 128 MiB
   held for 16 MiB pooled here). */
uint8_t* _ca_pool_supply(size_t npages, bool* fresh) {
  size_t len = npages * CA_OS_PAGE, huge = (size_t)1 << 21;
  *fresh = len % huge == 0 && _ca_move_uffd() && thp_offered() && !_ca_machine.simulated;
  uint8_t* base = *fresh ? _ca_os_map_aligned(len, huge) : _ca_os_map(len);
  if (base == NULL) return NULL;
  _ca_os_thp(base, len, *fresh);
  for (size_t i = 0; i < npages; i++) base[i * CA_OS_PAGE] = 0;
  return base;
}

/* Give back pages[0..n) (MADV_DONTNEED), a run of adjacent pages at a time, all runs in one
   process_madvise where the kernel batches them (one TLB shootdown: with a thread of the
   program on the other CPU, 64 runs took 0.15 ms so and 0.8-1 ms by madvise, each call
   interrupting that CPU).  The pages are in address order. */
void _ca_pool_purge(void* const* pages, size_t n) {
  static int pidfd = -1, pid;
  enum { BATCH_IOV = 256 };
  struct iovec iov[BATCH_IOV];
  size_t k = 0;
  if (pid != getpid()) {                           /* a forked child has a pidfd of its own */
    if (pidfd >= 0) close(pidfd);
    pid = getpid();
    pidfd = (int)_ca_syscall6(SYS_pidfd_open, pid, 0, 0, 0, 0, 0);
  }
  for (size_t i = 0, len; i <= n; i += len) {
    if (i < n) {
      uint8_t* start = pages[i];
      for (len = 1; i + len < n && pages[i + len] == start + len * CA_OS_PAGE; len++) {}
      iov[k++] = (struct iovec){ start, len * CA_OS_PAGE };
    } else len = 1;
    if (k == BATCH_IOV || (i >= n && k > 0)) {
      long r = pidfd >= 0 ? _ca_syscall6(SYS_process_madvise, pidfd, (long)iov, (long)k, MADV_DONTNEED, 0, 0) : -1;
      if (r < 0) for (size_t j = 0; j < k; j++) _ca_os_purge(iov[j].iov_base, iov[j].iov_len);
      k = 0;
    }
  }
}

/* Fill [base, base + bytes) with pages from pool: all of them or none.  Called with the
   layer's lock held. */
bool _ca_pool_fill(ca_page_pool_t* pool, uint8_t* base, size_t bytes) {
  static uint64_t fill_rng = 0x9E3779B97F4A7C15ull;
  size_t n = bytes / CA_OS_PAGE;
  if (pool->count < n || _ca_pool_moves_capped(n)) return false;
  bool registered = _ca_move_fill_begin(base, bytes);
  for (size_t i = 0; i < n; i++) {
    void* page = _ca_pool_pop_any(pool, &fill_rng);
    if (!_ca_colour_move_page(page, base + i * CA_OS_PAGE)) {
      _ca_pool_push(pool, page);                   /* the page is still where it was */
      _ca_move_fill_end(base, bytes, registered);
      /* undo what was moved: [base, base + i) back to the pool, the range made ordinary */
      if (i > 0) _ca_pool_take_back(pool, base, i * CA_OS_PAGE);
      return false;
    }
  }
  _ca_move_fill_end(base, bytes, registered);
  moved_pages += n;
  pool->handed += n;
  return true;
}

/* A free slot address for a parked page, or NULL; _ca_pool_unslot gives an unused one back.
   Called with the layer's lock held. */
void* _ca_pool_slot(void) {
  return slot_free_n ? slot_free[--slot_free_n]
       : (slot_next + CA_OS_PAGE <= CA_SLOT_REGION ? slot_region + (slot_next += CA_OS_PAGE) - CA_OS_PAGE : NULL);
}

void _ca_pool_unslot(void* slot) {
  if (grow(&slot_free, &slot_free_cap, slot_free_n + 1)) slot_free[slot_free_n++] = slot;
}

/* The pages of [base, base + bytes) go back to pool (into slots); the range becomes ordinary
   zero memory again.  Called with the layer's lock held. */
void _ca_pool_take_back(ca_page_pool_t* pool, uint8_t* base, size_t bytes) {
  size_t n = bytes / CA_OS_PAGE;
  bool ordinary = true;                            /* every page left by UFFDIO_MOVE: the range is as it was */
  for (size_t i = 0; i < n; i++) {
    void* slot = _ca_pool_slot();
    int how = slot != NULL ? _ca_colour_move_page(base + i * CA_OS_PAGE, slot) : 0;
    ordinary &= how == 1;
    if (how == 0) {
      if (slot) _ca_pool_unslot(slot);
      continue;                                    /* the frame is lost: it stays in the span */
    }
    _ca_pool_push(pool, slot);
    pool->returned++;
  }
  if (!ordinary)
    _ca_syscall6(SYS_mmap, (long)base, (long)bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  moved_pages = moved_pages >= n ? moved_pages - n : 0;
}

/* A pool page whose colour no longer checks out: give it back to the OS. */
void _ca_pool_drop(void* page) {
  _ca_os_purge(page, CA_OS_PAGE);
  if ((uint8_t*)page >= slot_region && (uint8_t*)page < slot_region + CA_SLOT_REGION) _ca_pool_unslot(page);
}

size_t _ca_pool_moved(void) { return moved_pages; }
void   _ca_pool_note_moved(size_t n) { moved_pages += n; }
size_t _ca_pool_moved_limit(void) { return moved_limit; }
