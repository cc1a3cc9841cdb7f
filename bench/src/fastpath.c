/* The fast paths alone, for callgrind (bench/fastpath.py): 6.4 M malloc/free pairs of 32, 48, 64
   and 80 bytes, 64 live at a time and freed in allocation order; one block of each size stays
   live throughout, so no span empties and no slow path is taken after the first round. */
#include <stdlib.h>

int main(void) {
  void* volatile p;
  void* q[64];
  void* keep[4];
  for (int j = 0; j < 4; j++) keep[j] = malloc(32 + j * 16);
  for (int i = 0; i < 100000; i++) {
    for (int j = 0; j < 64; j++) q[j] = malloc(32 + (j & 3) * 16);
    for (int j = 0; j < 64; j++) { p = q[j]; free(p); }
  }
  for (int j = 0; j < 4; j++) free(keep[j]);
  return 0;
}
