/* Protection: keep live memory out of a colour set, so that what is confined there (a polluter)
   can evict nothing else.  This is ROCS's pollute buffer (paper 004: no other data in the
   polluter's slice) done the way hot-page colouring moves pages (paper 002: recolour live pages,
   within a budget), without either paper's kernel.

   Why it is needed here: NightWatch's restrictive mapping puts a polluter in 1/8 of the L2's
   colours, but open memory, as ordinary pages, has 1/8 of its pages in those colours too.  On
   the Zen 5 host a confined stream evicts that 1/8 completely, while an unconfined stream leaves
   much of a hot working set in place, so confinement alone gains nothing (docs/nightwatch.md);
   with the victim out of the polluter's colours it gains fully.

   The registry holds ranges of ordinary memory as the core hands them out (spans and large
   objects up to a size, through the colour layer's span hook), oldest first, up to a page
   budget, before it is known whether anything will ever be confined; a range leaves it when the
   core takes the memory back.  Once armed with (from, to), the colour worker goes through them
   page by page: each page the program has touched by the time its range has lived AGE_MS is
   moved to a pooled page of set `to` (whose pages the slice audit vouches are not of `from`),
   once; pages not touched by then are left alone (short-lived memory is not worth it).

   Every touched page is moved, not only those a live colour test places in `from`.  That test
   (one rule per colour and controls per batch, a pass judged and made again when it found
   under half the set's share) read most pages of `from` as out in loud moments: in one
   make bench the runs whose victims lost to policy-off had found 1-7 pages in the
   slice of 427 touched (1/8: ~53; the runs that gained, 12-33), and a victim left in the
   polluter's colours gains nothing.  Moving all costs about 8 times the moves (100-200 pages
   per pv process, once, each one VMA; the worker's time per page looked at, moves included, a
   median 18 us against 29 for the test) and the 7/8 pool's stock; it depends on no reading of
   the moment.  Without access bits in user space (page_idle needs
   root and a kernel option this host lacks) the hot pages cannot be told from the cold ones:
   the budget (a few times the L2) and the oldest-first order stand in for that, and the pages
   moved are capped (each is a VMA of its own, as in pool.c).  The old frame goes to the pool
   of `from` if the pool's re-test places it there (1 in 8 of them).

   Lifetime: the worker marks the range it is at as busy; removing a range waits for that page
   to be done, so the worker never reads or moves a page the core has taken back.  A range that
   a system call's buffer, or the program's own mprotect/munmap/madvise, touches is dropped the
   same way (monitor/syscalls.c): recolouring write-protects a page for a few microseconds, and
   the kernel writing into it then would fail with EFAULT. */
#include "colour.h"
#include "../monitor/monitor.h"

#define RANGES   256                 /* live ranges recorded */
#define AGE_MS   20                  /* a range is looked at once it has lived this long */

typedef struct ca_prange_s {
  const void* key;                   /* what it was recorded with (NULL: a free slot) */
  uint8_t*    base;                  /* first whole page */
  size_t      pages, next;           /* pages, and the next one to look at */
  uint64_t    born_ms;
} ca_prange_t;

/* Slots never move, so a range can be looked for without the lock. */
static struct {
  ca_lock_t          lock;
  ca_prange_t        r[RANGES];
  uint32_t           n, cursor;      /* ranges recorded; where the worker goes on */
  _Atomic(uint32_t)  top;            /* slots ever used: the scans stop there */
  int                from, to;       /* armed when from > 0 */
  bool               capped;         /* the move cap was reached: nothing more is moved */
  size_t             max_bytes, budget, pages;   /* largest range, pages allowed, recorded */
  uintptr_t          lo, hi;         /* every key and range recorded so far lies in [lo, hi) */
  _Atomic(const void*) busy;         /* key of the range whose page the worker is at */
  uint64_t           recorded, full, released, checked, untouched, moved, ns;
} P;

/* Set while this thread takes or holds P.lock: a signal handler of the program nested in that
   section (its read() comes to _ca_protect_release) must not wait for the lock (see monitor.c). */
static __thread bool holding __attribute__((tls_model("initial-exec")));
static void lock_p(void) { holding = true; _ca_lock(&P.lock); }
static void unlock_p(void) { _ca_unlock(&P.lock); holding = false; }

static const void* key_at(uint32_t i) { return __atomic_load_n(&P.r[i].key, __ATOMIC_ACQUIRE); }

/* Drop slot i (lock held). */
static void drop(uint32_t i) {
  P.pages -= P.r[i].pages;
  P.n--;
  __atomic_store_n(&P.r[i].key, NULL, __ATOMIC_RELEASE);
}

static void wait_idle(const void* key) {
  while (atomic_load_explicit(&P.busy, ca_acquire) == key) ca_cpu_relax();
}

void _ca_protect_init(size_t max_bytes, size_t budget_pages) {
  lock_p();
  P.max_bytes = max_bytes;
  P.budget = _ca_async_io() ? 0 : budget_pages;   /* see _ca_protect_stop */
  unlock_p();
}

void _ca_protect_add(const void* key, void* p, size_t n) {
  uint8_t* base = (uint8_t*)(((uintptr_t)p + CA_OS_PAGE - 1) & ~(uintptr_t)(CA_OS_PAGE - 1));
  uint8_t* end = (uint8_t*)(((uintptr_t)p + n) & ~(uintptr_t)(CA_OS_PAGE - 1));
  size_t pages = end > base ? (size_t)(end - base) / CA_OS_PAGE : 0;
  if (pages == 0 || n > P.max_bytes || P.pages + pages > P.budget) return;   /* unlocked: a hint */
  lock_p();
  uint32_t i = 0;
  while (i < RANGES && P.r[i].key != NULL) i++;
  if (i < RANGES && P.pages + pages <= P.budget) {
    P.r[i] = (ca_prange_t){ NULL, base, pages, 0, _ca_clock_ms() };
    __atomic_store_n(&P.r[i].key, key, __ATOMIC_RELEASE);
    if (i >= atomic_load_explicit(&P.top, ca_relaxed)) atomic_store_explicit(&P.top, i + 1, ca_release);
    /* bounds of keys and pages; they only grow */
    uintptr_t first = (uintptr_t)key < (uintptr_t)base ? (uintptr_t)key : (uintptr_t)base;
    uintptr_t last = (uintptr_t)key >= (uintptr_t)end ? (uintptr_t)key + 1 : (uintptr_t)end;
    if (P.lo == 0 || first < P.lo) P.lo = first;
    if (last > P.hi) P.hi = last;
    P.n++;
    P.pages += pages;
    P.recorded++;
  } else {
    P.full++;
  }
  unlock_p();
}

void _ca_protect_remove(const void* key) {
  /* every span and large object freed comes here: look without the lock first (a range is
     added and removed by the owner of its memory, never both at once, and slots never move) */
  if (P.n == 0 || (uintptr_t)key < P.lo || (uintptr_t)key >= P.hi) return;
  for (uint32_t i = 0, top = atomic_load_explicit(&P.top, ca_acquire); i < top; i++) {
    if (key_at(i) != key) continue;
    lock_p();
    if (P.r[i].key == key) drop(i);
    unlock_p();
    wait_idle(key);
    return;
  }
}

/* The kernel is about to use [p, p + n) (a system call's buffer) or the program changes its
   protection: the ranges it touches are dropped, so the worker never write-protects a page the
   kernel may be writing (the copy of a recolouring would make the call fail with EFAULT). */
void _ca_protect_release(const void* p, size_t n) {
  uintptr_t lo = (uintptr_t)p, hi = n > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + n;
  if (P.n == 0 || hi <= P.lo || lo >= P.hi || holding) return;   /* unlocked: a hint (see remove) */
  /* every buffer system call comes here: look without the lock first (a slot's base and pages
     are written before its key is published) */
  uint32_t top = atomic_load_explicit(&P.top, ca_acquire);
  bool any = false;
  for (uint32_t i = 0; i < top && !any; i++) {
    const void* key = key_at(i);
    any = key != NULL && (uintptr_t)P.r[i].base < hi && (uintptr_t)P.r[i].base + P.r[i].pages * CA_OS_PAGE > lo;
  }
  if (!any) return;
  const void* gone[RANGES];
  uint32_t ngone = 0;
  lock_p();
  for (uint32_t i = 0; i < top; i++) {
    ca_prange_t* r = &P.r[i];
    if (r->key != NULL && (uintptr_t)r->base < hi && (uintptr_t)r->base + r->pages * CA_OS_PAGE > lo) {
      gone[ngone++] = r->key;
      P.released++;
      drop(i);
    }
  }
  unlock_p();
  for (uint32_t k = 0; k < ngone; k++) wait_idle(gone[k]);
}

bool _ca_protect_arm(int from, int to) {
  lock_p();
  if (P.from <= 0) { P.from = from; P.to = to; }
  bool ok = P.from == from && P.to == to;
  unlock_p();
  return ok;
}

/* Asynchronous kernel I/O (monitor/syscalls.c): a page being moved is read-only for a moment,
   and the kernel may write into any buffer at any time.  Nothing is recorded or moved again. */
void _ca_protect_stop(void) {
  lock_p();
  P.budget = 0;
  unlock_p();
  _ca_protect_release(NULL, SIZE_MAX);
}

bool _ca_protect_armed(void) { return P.from > 0; }
int  _ca_protect_from(void) { return P.from; }
bool _ca_protect_recording(void) { return P.budget > 0; }
size_t _ca_protect_pages(void) { return P.pages; }
bool _ca_protect_recorded(void) { return P.n != 0; }

size_t _ca_protect_pending(void) {
  size_t n = 0;
  lock_p();
  for (uint32_t i = 0; i < P.top; i++) if (P.r[i].key != NULL) n += P.r[i].pages - P.r[i].next;
  unlock_p();
  return n;
}

/* The next page to look at, with its range marked busy; NULL when none is due.  `*pending`:
   pages of ranges still to be looked at (due or not). */
static uint8_t* next_page(const void** key, size_t* pending) {
  uint8_t* page = NULL;
  uint64_t now = _ca_clock_ms();
  *pending = 0;
  lock_p();
  uint32_t top = P.top;
  for (uint32_t k = 0; k < top; k++) {
    uint32_t i = (P.cursor + k) % top;
    ca_prange_t* r = &P.r[i];
    if (r->key == NULL) continue;
    *pending += r->pages - r->next;
    if (page == NULL && r->next < r->pages && now - r->born_ms >= AGE_MS) {
      page = r->base + r->next * CA_OS_PAGE;
      *key = r->key;
      P.cursor = i;
      atomic_store_explicit(&P.busy, r->key, ca_release);
    }
  }
  unlock_p();
  return page;
}

/* The page is done: its range (if still there) moves on. */
static void page_done(const void* key) {
  lock_p();
  for (uint32_t i = 0; i < P.top; i++)
    if (P.r[i].key == key) { P.r[i].next++; break; }
  unlock_p();
  atomic_store_explicit(&P.busy, NULL, ca_release);
}

size_t _ca_protect_work(const ca_protect_ops_t* ops, size_t max_pages) {
  size_t pending = 0;
  if (P.from <= 0 || P.capped) return 0;
  for (size_t done = 0; done < max_pages; done++) {
    const void* key = NULL;
    uint8_t* page = next_page(&key, &pending);
    if (page == NULL) return pending;
    uint64_t t0 = _ca_clock_ns();
    bool touched = ops->resident == NULL || ops->resident(page);
    int moved = touched ? ops->move(page, P.from, P.to) : 1;
    P.ns += _ca_clock_ns() - t0;
    if (moved == 0) {                              /* no page to move to now: later */
      atomic_store_explicit(&P.busy, NULL, ca_release);
      return pending;
    }
    P.checked++;
    P.untouched += !touched;
    P.moved += touched && moved > 0;
    if (moved < 0) { P.capped = true; atomic_store_explicit(&P.busy, NULL, ca_release); return 0; }
    page_done(key);
    pending--;
  }
  return pending;
}

void _ca_protect_fork_child(void) {
  /* the child's pages are copies with frames (colours) of their own: look at them again */
  atomic_store_explicit(&P.lock.v, 0, ca_relaxed);
  atomic_store_explicit(&P.busy, NULL, ca_relaxed);
  for (uint32_t i = 0; i < P.top; i++) P.r[i].next = 0;
}

void _ca_protect_stats_json(ca_buf_t* b) {
  ca_buf_str(b, "{\"armed\":"); ca_buf_str(b, P.from > 0 ? "true" : "false");
  ca_buf_field_u64(b, "ranges", P.n);
  ca_buf_field_u64(b, "ranges_recorded", P.recorded);
  ca_buf_field_u64(b, "ranges_not_recorded", P.full);
  ca_buf_field_u64(b, "ranges_released", P.released);
  ca_buf_field_u64(b, "pages", P.pages);
  ca_buf_field_u64(b, "page_budget", P.budget);
  ca_buf_field_u64(b, "pages_pending", _ca_protect_pending());
  ca_buf_field_u64(b, "pages_checked", P.checked);
  ca_buf_field_u64(b, "pages_untouched", P.untouched);
  ca_buf_field_u64(b, "pages_moved", P.moved);
  ca_buf_str(b, ",\"capped\":"); ca_buf_str(b, P.capped ? "true" : "false");
  ca_buf_str(b, ",\"us_per_page\":");
  ca_buf_fixed(b, P.checked ? (int64_t)(P.ns / P.checked / 10) : 0, 2);
  ca_buf_char(b, '}');
}
