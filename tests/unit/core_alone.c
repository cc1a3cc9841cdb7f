/* The core and index-aware placement need nothing but libc: this program links their objects
   alone (no API layer, no cache runtime; tests.mk links it with -nodefaultlibs -lc) and
   allocates through the core's own inline paths. */
#include "check.h"
#include "../../src/core/alloc.h"

int main(void) {
  _ca_process_init();
  static void* p[4096];
  for (int i = 0; i < 4096; i++) { p[i] = _ca_malloc((size_t)(i % 700) * 16 + 1); CHECK(p[i] != NULL); memset(p[i], i, (size_t)(i % 700) * 16 + 1); }
  bool ok = true;
  for (int i = 0; i < 4096; i++) { ok &= ((unsigned char*)p[i])[0] == (unsigned char)i; _ca_free(p[i]); }
  CHECK(ok);
  void* big = _ca_large_alloc(3 << 20, 0, true, 0);
  CHECK(big != NULL && ((char*)big)[12345] == 0);
  _ca_free(big);
  void* a = _ca_malloc_aligned(1000, 256, false);
  CHECK(a != NULL && ((uintptr_t)a & 255) == 0);
  _ca_free(a);
  static char json[1 << 16];
  ca_buf_t b = ca_buf(json, sizeof json);
  _ca_stats_json(&b);
  CHECK(strstr(json, "\"size_classes\"") != NULL && strstr(json, "\"colours\"") == NULL);
  return check_done("core-alone");
}
