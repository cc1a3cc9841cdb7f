/* The core's hooks (src/core/hooks.h): a layer that installs the memory hooks is asked about
   every new span and large object and told about every span given back; a policy is asked to
   place every chunk above the span classes, and those of a span class of a page or more it asks
   for, and sees large objects freed.  Linked against the static
   library, since the hooks are internal. */
#include "check.h"
#include "../../src/core/hooks.h"
#include "../../src/core/internal.h"

static long spans, bytes_in, released, bytes_out, places, placed_big, frees;
static char* last_base;                         /* the last pages offered */
static size_t last_bytes;
static void* last_released;

static bool on_span(void* base, size_t bytes, uint32_t flavour) {
  spans++; bytes_in += (long)bytes;
  last_base = base; last_bytes = bytes;
  CHECK(((uintptr_t)base & 4095) == 0 && bytes % 4096 == 0 && flavour == 0);
  return true;
}
static void on_release(void* base, size_t bytes, uint32_t flavour) { released++; bytes_out += (long)bytes; last_released = base; }
static void* on_place(size_t n, bool zero, const void* frame, const void* ret) {
  places++;
  CHECK(n >= 4096);
  CHECK(frame != NULL && ret != NULL);
  if (n == 5u << 20) placed_big++;
  return NULL;                                  /* the core allocates it */
}
static void on_chunk(ca_chunk_event_t ev, void* p, size_t size) { if (ev == CA_CHUNK_FREE) frees++; }

static const ca_hooks_t hooks = { on_span, on_release, NULL };
static const ca_policy_t policy = { on_place, on_chunk, NULL };

int main(void) {
  require_chromalloc("test_hooks");
  free(malloc(1));                              /* initialise */
  _ca_hooks_install(&hooks);
  _ca_policy_install(&policy);                  /* replaces NightWatch, if it is on */
  static void* p[40000];
  for (int i = 0; i < 40000; i++) p[i] = malloc(100);       /* ~4 MB: many new 64 KiB spans */
  long spans_after_alloc = spans;
  CHECK(spans_after_alloc >= 50);
  for (int i = 0; i < 40000; i++) free(p[i]);
  CHECK(released >= spans_after_alloc - 2);     /* all but the span kept warm for the class */
  char* volatile big = malloc(5u << 20);
  big[0] = 1;
  CHECK_EQ(placed_big, 1);
  CHECK_EQ(places, 1);                          /* 100-byte blocks never reach the policy */
  CHECK(spans > spans_after_alloc);             /* the large object's pages were offered too */
  free(big);
  CHECK_EQ(frees, 1);
  void* volatile small = malloc(3000);
  free(small);
  CHECK_EQ(places, 1);                          /* below a page: not asked */
  void* volatile two_pages = malloc(8192);
  free(two_pages);
  CHECK_EQ(places, 1);                          /* a span class: sampled, not asked ... */
  _ca_place_class(_ca_size_class(8192), true);
  two_pages = malloc(8192);
  free(two_pages);
  CHECK_EQ(places, 2);                          /* ... unless the policy names its chunks one by one */
  _ca_place_class(_ca_size_class(8192), false);
  /* a large object resized (grown far: moved) is let go of and offered again where it is now */
  char* grown = malloc(5u << 20);
  memset(grown, 7, 5u << 20);
  char* old_base = last_base;
  long s0 = spans, r0 = released;
  grown = realloc(grown, 80u << 20);
  CHECK(grown != NULL && grown[(5u << 20) - 1] == 7);
  CHECK_EQ(released, r0 + 1);
  CHECK(last_released == old_base);
  CHECK_EQ(spans, s0 + 1);
  CHECK(grown >= last_base && grown < last_base + last_bytes && last_bytes >= (80u << 20) - 4096);
  char* now = last_base;
  free(grown);
  CHECK(last_released == now);
  _ca_hooks_install(NULL);
  _ca_policy_install(NULL);
  long before = spans;
  for (int i = 0; i < 40000; i++) p[i] = malloc(200);
  CHECK_EQ(spans, before);                      /* uninstalled: not called */
  for (int i = 0; i < 40000; i++) free(p[i]);
  fprintf(stderr, "test_hooks: %ld spans offered (%ld KiB), %ld released\n", spans, bytes_in >> 10, released);
  return check_done("test_hooks");
}
