/* Out of memory: under an address-space limit (RLIMIT_AS), every allocation function returns
   NULL (posix_memalign returns ENOMEM) with errno ENOMEM, a failed realloc leaves the block
   intact, and after freeing, allocation works again.  Runs in a child so the limit does not
   leak into the rest of the run. */
#include "check.h"
#include <sys/resource.h>

static size_t vm_size(void) {
  long pages = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f) { if (fscanf(f, "%ld", &pages) != 1) pages = 0; fclose(f); }
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

static void exhaust(size_t size, const char* what) {
  static void* kept[1 << 22];
  size_t n = 0;
  errno = 0;
  for (;;) {
    void* p = malloc(size);
    if (p == NULL) break;
    if (n < sizeof kept / sizeof *kept) kept[n++] = p;
    else { fprintf(stderr, "%s: limit not reached\n", what); break; }
  }
  CHECK_EQ(errno, ENOMEM);
  CHECK(n > 0);
  for (size_t i = 0; i < n; i++) free(kept[i]);
  void* again = malloc(size);                 /* memory came back */
  CHECK(again != NULL);
  free(again);
}

int main(void) {
  require_chromalloc("test_enomem");
  void* warm = malloc(100);                    /* initialise before limiting */
  struct rlimit lim = { vm_size() + (192u << 20), vm_size() + (192u << 20) };
  CHECK_EQ(setrlimit(RLIMIT_AS, &lim), 0);

  errno = 0;
  CHECK(malloc(1u << 30) == NULL);
  CHECK_EQ(errno, ENOMEM);
  errno = 0;
  CHECK(calloc(1, 1u << 30) == NULL);
  CHECK_EQ(errno, ENOMEM);
  void* p = (void*)1;
  CHECK_EQ(posix_memalign(&p, 4096, 1u << 30), ENOMEM);
  CHECK(p == (void*)1);
  errno = 0;
  CHECK(aligned_alloc(1 << 21, 1u << 30) == NULL);
  CHECK_EQ(errno, ENOMEM);
  char* keep = malloc(1000);
  memset(keep, 'k', 1000);
  errno = 0;
  CHECK(realloc(keep, 1u << 30) == NULL);
  CHECK_EQ(errno, ENOMEM);
  CHECK(keep[0] == 'k' && keep[999] == 'k');
  free(keep);

  exhaust(100000, "100 KB blocks");            /* large objects */
  exhaust(20000, "20 KB blocks");              /* medium spans */
  exhaust(64, "64 B blocks");                  /* small spans: the last segment fails */
  free(warm);
  return check_done("test_enomem");
}
