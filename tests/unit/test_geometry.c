/* What chromalloc derives from the cache geometry, on the machine CHROMALLOC_MACHINE describes
   (tests/run.py runs this on every L2 x L1d x index combination it knows; internal interfaces,
   static link only):
   - the machine model is the description: levels, sets, the simulated index;
   - blocks of every size 16..4096 (step 16) start on every L1d set;
   - the colour layer counts the L2's colours (size / ways / 4 KiB) and its slices hold exactly
     the colours they name, by the simulated L2's own colours: a 1/8 block's pages are of
     colours/8 colours (all of them, given enough pages), a 7/8 block's of none of those;
   - the sizes the policy takes from the L2: small chunks sampled per L2/8 bytes, chunks judged
     alone from the L2's size, a group member standing for at least L2/24, protection recording
     ranges up to the L2 and 4 L2s in all. */
#include "check.h"
#include "../../src/color/colour.h"
#include "../../src/core/hooks.h"
#include "../../src/monitor/monitor.h"

static const ca_cache_level_t* level(uint32_t n) {
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++) if (_ca_machine.levels[i].level == n) return &_ca_machine.levels[i];
  return NULL;
}

static void test_model(size_t l1, unsigned l1w, size_t l2, unsigned l2w) {
  CHECK(_ca_machine.simulated);
  CHECK(strcmp(_ca_machine.source, "described") == 0);
  CHECK_EQ(_ca_machine.hashed, strstr(getenv("CHROMALLOC_MACHINE"), "index=hashed") != NULL);
  CHECK_EQ(_ca_machine.l1d.size, l1);
  CHECK_EQ(_ca_machine.l1d.ways, l1w);
  CHECK_EQ(_ca_machine.l1d.sets, l1 / l1w / 64);
  const ca_cache_level_t* L2 = level(2);
  CHECK(L2 != NULL);
  if (L2 == NULL) return;
  CHECK_EQ(L2->size, l2);
  CHECK_EQ(L2->ways, l2w);
  CHECK_EQ(L2->sets, l2 / l2w / 64);
  CHECK_EQ(L2->shared_cpus, 1);
  const ca_cache_level_t* L3 = level(3);
  CHECK(L3 == NULL || L3->shared_cpus > 1);
}

/* 256 blocks of each size: their start lines cover every L1d set */
static void test_layout(void) {
  static void* p[256];
  unsigned sets = _ca_machine.l1d.sets, worst = sets, worst_size = 0;
  for (size_t size = 16; size <= 4096; size += 16) {
    static uint8_t seen[1024];
    memset(seen, 0, sizeof seen);
    unsigned covered = 0;
    for (int i = 0; i < 256; i++) {
      p[i] = malloc(size);
      unsigned s = (unsigned)(((uintptr_t)p[i] / 64) % sets);
      covered += !seen[s];
      seen[s] = 1;
    }
    for (int i = 0; i < 256; i++) free(p[i]);
    if (covered < worst) { worst = covered; worst_size = (unsigned)size; }
  }
  if (worst < sets) fprintf(stderr, "test_geometry: blocks of %u B start on %u of %u L1d sets\n", worst_size, worst, sets);
  CHECK_EQ(worst, sets);
}

static void test_colours(size_t l2, unsigned l2w) {
  int colours = (int)(l2 / l2w / 4096), eighth = colours / 8 > 0 ? colours / 8 : 1;
  int low = _ca_colour_set(0, 1, 8), rest = _ca_colour_set(1, 8, 8);
  CHECK(low > 0 && rest > 0);
  size_t pages = (size_t)colours * 8;            /* eight pages of each colour, at random */
  /* stock for every page the blocks cover (a large object starts at a random line) */
  CHECK_EQ(_ca_colour_prepare(low, pages + 1, 30000), 0);
  CHECK_EQ(_ca_colour_prepare(rest, pages + 1, 30000), 0);
  CHECK_EQ(_ca_colour_count(), colours);
  char* a = _ca_malloc_flavour(pages * 4096, (uint8_t)low);
  char* b = _ca_malloc_flavour(pages * 4096, (uint8_t)rest);
  CHECK(a != NULL && b != NULL);
  if (a == NULL || b == NULL) return;
  uint64_t in_low = 0, in_rest = 0;
  for (size_t i = 0; i < pages; i++) {
    a[i * 4096] = b[i * 4096] = 1;
    in_low |= (uint64_t)1 << _ca_sim_colour(a + i * 4096);
    in_rest |= (uint64_t)1 << _ca_sim_colour(b + i * 4096);
  }
  fprintf(stderr, "test_geometry: %d colours; a 1/8 block of %zu pages on %d of them, a 7/8 block on %d, %d shared\n",
          colours, pages, __builtin_popcountll(in_low), __builtin_popcountll(in_rest), __builtin_popcountll(in_low & in_rest));
  CHECK_EQ(__builtin_popcountll(in_low), eighth);
  CHECK_EQ(in_low & in_rest, 0);
  CHECK(__builtin_popcountll(in_rest) >= colours - eighth - 1);
  free(a);
  free(b);
}

static long long protect_field(const char* key) {
  static char buf[4096];
  ca_buf_t b = ca_buf(buf, sizeof buf);
  _ca_protect_stats_json(&b);
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char* at = strstr(buf, pat);
  return at ? atoll(at + strlen(pat)) : -1;
}

static void test_policy_sizes(size_t l2) {
  CHECK_EQ(_ca_sample_period_bytes(), (long long)(l2 / 8));
  CHECK_EQ(_ca_monitor_member_least(), (long long)((l2 + 23) / 24));
  CHECK_EQ(protect_field("page_budget"), (long long)(4 * l2 / 4096));
  /* a group of members of the least stride holds the L2's worth of cold ones and warm ones */
  CHECK(_ca_monitor_group_pages(_ca_monitor_member_least()) >= 24 + 16);
}

int main(void) {
  require_chromalloc("test_geometry");
  size_t l1, l2;
  unsigned l1w, l2w;
  if (!described_level("l1d", &l1, &l1w) || !described_level("l2", &l2, &l2w)) {
    fprintf(stderr, "test_geometry: run it with CHROMALLOC_MACHINE=l1d=SIZE/WAYS,l2=SIZE/WAYS (tests/run.py does)\n");
    return 2;
  }
  test_model(l1, l1w, l2, l2w);
  test_layout();
  test_policy_sizes(l2);
  test_colours(l2, l2w);
  return check_done("test_geometry");
}
