/* Recolouring: move a live page to a frame of another colour while other threads may be using
   it.  Its data is copied into a pooled page of the target colour, whose frame takes the old
   one's place (move.c: by UFFDIO_MOVE, threads touching the page meanwhile wait in the kernel;
   by mremap, the page is read-only during the copy, and a thread that writes faults: the fault
   handler (trap.c) sees the page is being recoloured and waits until it is done, then the
   write is retried on the new frame).  The old frame is released, unless the caller knows its
   colour set (a coloured chunk's, or protection has just measured it): then it is parked in a
   pool slot and joins that set's pool (protection's after the pool's re-test: `test`).

   What this cannot cover: a system call (read(2) into the page, say) made during the few
   microseconds of the copy fails with EFAULT instead of waiting, unless userfaultfd serves
   kernel faults here (move.c).

   A fork waits until no page is in flight (move.c). */
#define _GNU_SOURCE
#include "colour.h"
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

/* One live page onto the frame of `fresh` (a page of known colour, not in use): 1 by
   UFFDIO_MOVE, 2 by mremap, 0 not moved (fresh is then dropped). */
int _ca_recolour_page(void* page, void* fresh, int keep, bool test) {
  uint64_t t0 = _ca_clock_ns();
  /* the old frame: to a slot when its set is known, or when UFFDIO_MOVE needs one to move through */
  void* park = keep > 0 || _ca_move_uffd() ? _ca_colour_slot() : NULL;
  bool parked = false;
  int how = _ca_colour_move_live(page, fresh, park, &parked);
  if (how == 0) _ca_pool_drop(fresh);
  if (park != NULL) {
    if (parked && keep > 0) _ca_colour_keep_frame(keep, park, test);
    else if (parked) _ca_colour_drop_slot(park);
    else _ca_colour_keep_frame(0, park, false);
  }
  if (how != 0) _ca_colour_note_recolour(_ca_clock_ns() - t0, how == 2);
  return how;
}

long _ca_recolour(void* p, size_t len, int id, int keep, bool test) {
  uint8_t* first = (uint8_t*)((uintptr_t)p & ~(uintptr_t)(CA_OS_PAGE - 1));
  uint8_t* end = (uint8_t*)(((uintptr_t)p + len + CA_OS_PAGE - 1) & ~(uintptr_t)(CA_OS_PAGE - 1));
  long moved = 0;
  int e = errno;
  for (uint8_t* page = first; page < end; page += CA_OS_PAGE) {
    void* fresh = _ca_colour_take_page(id);
    if (fresh == NULL || _ca_recolour_page(page, fresh, keep, test) == 0) break;
    moved++;
  }
  errno = e;
  return moved;
}
