/* Recolouring: move a live page to a frame of another colour while other threads may be using
   it.  The page is made read-only, copied into a pooled page of the target colour, and that
   page is moved over the old one with mremap (atomically: there is no moment the address is
   unmapped).  A thread that writes meanwhile faults; the fault handler (trap.c) sees the page
   is being recoloured and waits until it is done, then the write is retried on the new frame.
   The old frame is released, unless the caller knows its colour set (a coloured chunk's, or
   protection has just measured it): then it is first moved aside to a pool slot and joins that
   set's pool (protection's after the pool's re-test: `test`), and the
   address is unmapped between the two moves, which a thread touching it meanwhile sees as a
   fault the handler waits out like the others.

   What this cannot cover: a system call (read(2) into the page, say) made during the few
   microseconds of the copy fails with EFAULT instead of faulting.

   fork(): a child must not inherit a page in the middle of a move (read-only, or unmapped
   between the two moves, by a thread the child does not have: its first write waited for ever).
   The fork waits until no page is in flight and none starts before it is done
   (_ca_recolour_fork_hold / _ca_recolour_fork_release, colourset.c's fork handlers). */
#define _GNU_SOURCE
#include "colour.h"
#include "../monitor/trap.h"
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define INFLIGHT 8
static _Atomic(uintptr_t) inflight[INFLIGHT];        /* pages being recoloured */
static _Atomic(uintptr_t) recent[64];                 /* pages recoloured in the last moments */
static _Atomic(uint64_t)  recent_ms[64];
static _Atomic(unsigned)  recent_next;
static _Atomic(bool)      forking;                    /* a fork waits: no new page in flight */

/* A fault on a page being recoloured waits for it; one on a page recoloured within the last
   50 ms is retried (the thread faulted during the copy and woke after it).  Anything else is
   the program's own fault. */
static bool on_fault(void* addr, int sig) {
  (void)sig;
  uintptr_t page = (uintptr_t)addr & ~(uintptr_t)(CA_OS_PAGE - 1);
  /* page 0 is never recoloured, and empty slots hold 0: a null-pointer fault (the JVM's
     implicit null checks) waited on them for ever */
  if (page == 0) return false;
  bool ours = false;
  for (int i = 0; i < INFLIGHT; i++)
    while (atomic_load_explicit(&inflight[i], ca_acquire) == page) { ours = true; sched_yield(); }
  uint64_t now = _ca_clock_ms();
  for (int i = 0; i < 64 && !ours; i++)
    ours = atomic_load_explicit(&recent[i], ca_relaxed) == page && now - atomic_load_explicit(&recent_ms[i], ca_relaxed) < 50;
  return ours;
}

/* A free slot for page, or -1 while none is free or another thread has the same page in flight:
   two moves of one page at once (protection's and the program's chromalloc_recolour) took its
   frame away under each other's copy, and the thread that faulted there waited for its own
   slot for ever (test_colour_api, fork during recolouring). */
static ca_lock_t claim_lock;
static int claim_slot(uintptr_t page) {
  int slot = -1;
  _ca_lock(&claim_lock);
  bool busy = false;
  for (int i = 0; i < INFLIGHT; i++) busy |= atomic_load(&inflight[i]) == page;
  for (int i = 0; i < INFLIGHT && slot < 0 && !busy; i++)
    if (atomic_load(&inflight[i]) == 0) { atomic_store(&inflight[i], page); slot = i; }
  _ca_unlock(&claim_lock);
  return slot;
}

static bool protect(void* page, int prot) { return _ca_syscall6(SYS_mprotect, (long)page, CA_OS_PAGE, prot, 0, 0, 0) == 0; }

/* Move the page's frame to a slot (kept for set keep) and fresh's frame into its place; false
   (the page as it was, the slot given back) when a move fails. */
static bool swap_in(void* fresh, void* page, int keep, bool test) {
  void* slot = keep > 0 ? _ca_colour_slot() : NULL;
  if (slot != NULL && !_ca_colour_move_page(page, slot)) { _ca_colour_keep_frame(0, slot, false); slot = NULL; }
  if (_ca_colour_move_page(fresh, page)) {
    if (slot != NULL) _ca_colour_keep_frame(keep, slot, test);
    return true;
  }
  if (slot != NULL && !_ca_colour_move_page(slot, page)) {
    /* the address must not stay unmapped (only the process's map limit makes moves fail):
       its data goes into a fresh page there, read-only like the page it replaces */
    if (_ca_syscall6(SYS_mmap, (long)page, CA_OS_PAGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == (long)page) {
      memcpy(page, slot, CA_OS_PAGE);
      protect(page, PROT_READ);
    }
  }
  if (slot != NULL) _ca_colour_keep_frame(0, slot, false);
  return false;
}

/* The claim lock is held across the fork too: a child that inherited it taken would wait for
   it at its first recolouring. */
void _ca_recolour_fork_hold(void) {
  atomic_store(&forking, true);
  _ca_lock(&claim_lock);
  for (int i = 0; i < INFLIGHT; i++)
    while (atomic_load(&inflight[i]) != 0) sched_yield();
}

void _ca_recolour_fork_release(void) {
  _ca_unlock(&claim_lock);
  atomic_store(&forking, false);
}

long _ca_recolour(void* p, size_t len, int id, int keep, bool test) {
  static _Atomic(bool) registered;
  if (!atomic_exchange(&registered, true)) _ca_trap_register(on_fault);
  uint8_t* first = (uint8_t*)((uintptr_t)p & ~(uintptr_t)(CA_OS_PAGE - 1));
  uint8_t* end = (uint8_t*)(((uintptr_t)p + len + CA_OS_PAGE - 1) & ~(uintptr_t)(CA_OS_PAGE - 1));
  long moved = 0;
  int e = errno;
  for (uint8_t* page = first; page < end; page += CA_OS_PAGE) {
    void* fresh = _ca_colour_take_page(id);
    if (fresh == NULL) break;
    uint64_t t0 = _ca_clock_ns();
    int slot = -1;
    while (slot < 0) {
      slot = claim_slot((uintptr_t)page);
      /* the slot first, then the fork's flag: a fork that set it before sees this slot taken
         and waits, one that sets it after waits too (both sequentially consistent) */
      if (slot >= 0 && atomic_load(&forking)) { atomic_store(&inflight[slot], 0); slot = -1; }
      if (slot < 0) sched_yield();
    }
    bool ok = protect(page, PROT_READ);
    if (ok) {
      memcpy(fresh, page, CA_OS_PAGE);
      ok = swap_in(fresh, page, keep, test);
      if (!ok) { protect(page, PROT_READ | PROT_WRITE); _ca_pool_drop(fresh); }
    } else {
      _ca_pool_drop(fresh);
    }
    unsigned r = atomic_fetch_add(&recent_next, 1) % 64;
    atomic_store_explicit(&recent_ms[r], _ca_clock_ms(), ca_relaxed);
    atomic_store_explicit(&recent[r], (uintptr_t)page, ca_relaxed);
    atomic_store_explicit(&inflight[slot], 0, ca_release);
    if (!ok) break;
    moved++;
    _ca_colour_note_recolour(_ca_clock_ns() - t0);
  }
  errno = e;
  return moved;
}
