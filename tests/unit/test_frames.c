/* Colours from frame numbers (src/color/frames.c), on a described machine whose frames the
   simulated L2 names (CHROMALLOC_MACHINE ... frames=1: readable, as pagemap is to root):

     on        index=linear: a frame's low bits are its colour.  Once ready the source answers for
               fresh pages and for the same pages recoloured (moved onto frames of a slice), every answer the page's true (simulated) colour; after the
               sets are lost and found again (renumbered), it learns again and is right again.
     disagree  index=hashed: frames say nothing (a VM's host pages); the source turns itself off on
               its first disagreement, and every colour comes from the sets, still right.
     hidden    frames=0: no frame to read (not root); the sets answer.

   Right means: the colour named is the one whose eviction set's reference has the page's
   simulated colour (the numbering is the sets'). */
#include "check.h"
#include "../../src/color/colour.h"
#include "../../src/color/layer.h"
#include <sys/mman.h>
#include <time.h>

static bool state_is(const char* s) {
  static char buf[1 << 18];
  char want[64];
  chromalloc_stats_json(buf, sizeof buf);
  snprintf(want, sizeof want, "\"frames\":{\"state\":\"%s\"", s);
  return strstr(buf, want) != NULL;
}

/* how many of n pages at m the layer names right: the set whose reference has the page's
   simulated colour, or -1 when no set has it (colours without a set cannot be named) */
static int right_in(uint8_t* m, int n) {
  int right = 0;
  for (int i = 0; i < n; i++) {
    void* p = m + (size_t)i * 4096;
    int truth = -1;
    for (uint32_t k = 0; k < L.map.ncolours; k++) if (_ca_sim_colour(L.map.ref[k]) == _ca_sim_colour(p)) truth = (int)k;
    right += _ca_colour_of(p) == truth;
  }
  return right;
}

/* n fresh pages, then the same pages recoloured into set id (moved onto frames of its slice) */
static int right_of(int n, int id) {
  uint8_t* m = mmap(NULL, (size_t)n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED);
  memset(m, 7, (size_t)n * 4096);
  int right = right_in(m, n);
  CHECK_EQ(_ca_recolour(m, (size_t)n * 4096, id, 0, false), n);
  right += right_in(m, n);
  for (int i = 0; i < n; i++) CHECK_EQ(m[(size_t)i * 4096 + 99], 7);
  munmap(m, (size_t)n * 4096);
  return right;
}

int main(int argc, char** argv) {
  require_chromalloc("test_frames");
  const char* mode = argc > 1 ? argv[1] : "on";
  CHECK(machine_described());
  int id = _ca_colour_set(0, 1, 8);
  CHECK(id > 0);
  CHECK_EQ(_ca_colour_prepare(id, 64, 60000), 0);   /* the frames right_of recolours onto */
  long long answered = stats_value("frames", "answered");
  CHECK_EQ(right_of(64, id), 128);
  if (strcmp(mode, "on") == 0) {
    CHECK(state_is("on"));
    CHECK_EQ(stats_value("frames", "learned"), stats_value("colours", "eviction_sets"));   /* linear: a residue a colour */
    CHECK(stats_value("frames", "answered") > answered);   /* pages of colours with a set, by their frames */
    CHECK_EQ(stats_value("frames", "conflicts"), 0);
    /* renumbered: the sets lost and found again; the table follows the new numbering */
    long long f0 = stats_value("colours", "start_failures");
    _ca_colour_test_drop_sets(1);
    for (int t = 0; t < 1000 && stats_value("colours", "start_failures") < f0 + 1; t++) { struct timespec s = { 0, 10000000 }; nanosleep(&s, NULL); }
    CHECK_EQ(_ca_colour_prepare(id, 64, 60000), 0);   /* the frames right_of recolours onto */
    answered = stats_value("frames", "answered");
    CHECK_EQ(right_of(64, id), 128);
    CHECK(state_is("on"));
    CHECK(stats_value("frames", "answered") > answered);
  } else if (strcmp(mode, "disagree") == 0) {
    CHECK(state_is("disagree"));
    CHECK(stats_value("frames", "conflicts") >= 1);
    CHECK_EQ(stats_value("frames", "answered"), answered);   /* none since it turned off */
  } else {
    CHECK(state_is("hidden"));
    CHECK_EQ(stats_value("frames", "answered"), 0);
  }
  return check_done("test_frames");
}
