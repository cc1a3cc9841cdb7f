/* Segment map: one bit per 2 MiB unit of the 47-bit user address space (8 MiB of .bss, touched
   only where segments live) saying "a segment header starts here".  free() consults it before
   reading any header, so a pointer that chromalloc did not hand out is rejected instead of
   dereferenced.  Large segments set only their first unit: an interior pointer beyond it is
   foreign by construction. */
#include "internal.h"

_Atomic(uint64_t) _ca_segmap[(1UL << CA_SEGMAP_BITS) / 64];

void _ca_segmap_set(ca_segment_t* seg, bool present) {
  uintptr_t i = (uintptr_t)seg >> CA_SEGMENT_SHIFT;
  if ((i >> CA_SEGMAP_BITS) != 0) return;      /* above 47 bits: never handed out by mmap */
  uint64_t bit = (uint64_t)1 << (i & 63);
  if (present) atomic_fetch_or_explicit(&_ca_segmap[i >> 6], bit, ca_release);
  else atomic_fetch_and_explicit(&_ca_segmap[i >> 6], ~bit, ca_release);
}
