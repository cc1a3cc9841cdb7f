/* Segment map: one byte per 2 MiB unit of the 47-bit user address space saying "a segment
   header starts here".  free() consults it before reading any header, so a pointer that
   chromalloc did not hand out is rejected instead of dereferenced.  Large segments set only
   their first unit: an interior pointer beyond it is foreign by construction.
   64 MiB of .bss, address space only: a page of it covers 8 GiB, and only the pages where
   segments live are ever touched.  A byte, not a bit: free() tests it with one compare (a bit
   took two instructions more a free). */
#include "internal.h"

_Atomic(uint8_t) _ca_segmap[1UL << CA_SEGMAP_BITS];

void _ca_segmap_set(ca_segment_t* seg, bool present) {
  uintptr_t i = (uintptr_t)seg >> CA_SEGMENT_SHIFT;
  if ((i >> CA_SEGMAP_BITS) != 0) return;      /* above 47 bits: never handed out by mmap */
  atomic_store_explicit(&_ca_segmap[i], present, ca_release);
}
