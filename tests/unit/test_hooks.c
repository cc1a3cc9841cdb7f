/* The core's policy hook (src/core/hooks.h): a layer that installs it is asked about every new
   span and large object, told about every span given back, and sees large-object events.
   Linked against the static library, since the hook is internal. */
#include "check.h"
#include "../../src/core/hooks.h"

static long spans, bytes_in, released, bytes_out, allocs, frees;

static bool on_span(void* base, size_t bytes, uint32_t flavour) {
  spans++; bytes_in += (long)bytes;
  CHECK(((uintptr_t)base & 4095) == 0 && bytes % 4096 == 0 && flavour == 0);
  return true;
}
static void on_release(void* base, size_t bytes, uint32_t flavour) { released++; bytes_out += (long)bytes; }
static void on_chunk(ca_chunk_event_t ev, void* p, size_t size) {
  if (ev == CA_CHUNK_ALLOC) { allocs++; CHECK(size == 5u << 20); }
  else frees++;
}

static const ca_hooks_t hooks = { on_span, on_release, on_chunk };

int main(void) {
  require_chromalloc("test_hooks");
  free(malloc(1));                              /* initialise */
  _ca_hooks_install(&hooks);
  static void* p[40000];
  for (int i = 0; i < 40000; i++) p[i] = malloc(100);       /* ~4 MB: many new 64 KiB spans */
  long spans_after_alloc = spans;
  CHECK(spans_after_alloc >= 50);
  for (int i = 0; i < 40000; i++) free(p[i]);
  CHECK(released >= spans_after_alloc - 2);     /* all but the span kept warm for the class */
  char* volatile big = malloc(5u << 20);
  big[0] = 1;
  CHECK_EQ(allocs, 1);
  CHECK(spans > spans_after_alloc);             /* the large object's pages were offered too */
  free(big);
  CHECK_EQ(frees, 1);
  _ca_hooks_install(NULL);
  long before = spans;
  for (int i = 0; i < 40000; i++) p[i] = malloc(200);
  CHECK_EQ(spans, before);                      /* uninstalled: not called */
  for (int i = 0; i < 40000; i++) free(p[i]);
  fprintf(stderr, "test_hooks: %ld spans offered (%ld KiB), %ld released\n", spans, bytes_in >> 10, released);
  return check_done("test_hooks");
}
