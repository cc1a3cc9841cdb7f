/* Protection on this machine (internal interfaces: built static only): an ordinary object of
   half the L2 (ranges up to the L2's size are recorded), recorded as the core hands it out, has
   every page moved to pooled pages of the other seven eighths of the L2's colours once
   protection is armed, while another thread keeps writing to it (no write may be lost), so that
   none of it is left in the first eighth; each moved page's old frame joins the first eighth's
   pool if the pool's re-test agrees.  Protection is armed the way a program's first coloured
   allocation from the first eighth arms it.  When colours cannot be controlled here the timing
   checks are skipped, saying so; the data checks always run.  Last, frames of known colour are
   handed over as kept frames (the pool's re-test must give back those not of the set). */
#include "check.h"
#include "../../src/color/colour.h"
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>

static size_t PAGES = 128;               /* half the L2, set from the machine */

static volatile unsigned long* buf;
static atomic_bool stop;
static unsigned long rounds;

static void* writer(void* arg) {
  while (!atomic_load(&stop)) {
    for (size_t i = 0; i < PAGES; i++) buf[i * 512]++;
    rounds++;
  }
  return arg;
}

/* a number from the statistics JSON: "key":N after "section": in it */
static long stat_in(const char* section, const char* key) {
  static char json[1 << 20];
  if (chromalloc_stats_json(json, sizeof json) == 0) return -1;
  char sec[64];
  snprintf(sec, sizeof sec, "\"%s\":", section);
  const char* p = strstr(json, sec);
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  p = p ? strstr(p, pat) : NULL;
  return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

/* Pages of the n at base that two looks both place in the first eighth of the colours; *seen:
   those either look places there. */
static int in_first_eighth(uint8_t* base, size_t n, int* seen) {
  static bool first[1024];
  int colours = _ca_colour_count(), both = 0;
  *seen = 0;
  for (int look = 0; look < 2; look++)
    for (size_t i = 0; i < n && i < 1024; i++) {
      int c = _ca_colour_of(base + i * 4096);
      bool in = c >= 0 && c < colours / 8;
      if (look == 0) first[i] = in;
      *seen += in && (look == 0 || !first[i]);
      both += look == 1 && in && first[i];
    }
  return both;
}

/* The pool's re-test of kept frames: frames of the rest's pool, handed over as protection hands
   over the old frames of the pages it moves, are given back, not pooled.  Each is parked in a
   pool slot, as recolour.c parks the old frame. */
static void kept_frames_tested(int low, int rest) {
  enum { N = 8 };
  if (_ca_colour_prepare(rest, N, 60000) != 0) {
    fprintf(stderr, "test_protect: pools not stocked: kept frames' re-test not checked\n");
    CHECK(!machine_described());
    return;
  }
  long kept0 = stat_in("colours", "frames_kept"), rejected0 = stat_in("colours", "frames_rejected");
  for (int i = 0; i < N; i++) {
    void* page = _ca_colour_take_page(rest);
    void* slot = _ca_colour_slot();
    CHECK(page != NULL && slot != NULL);
    if (page == NULL || slot == NULL) return;
    CHECK(_ca_colour_move_page(page, slot));       /* as recolour.c moves it: the frame goes along */
    mprotect(slot, 4096, PROT_READ);
    _ca_colour_keep_frame(low, slot, true);
  }
  long kept = 0, rejected = 0;
  for (int s = 0; s < 300 && kept + rejected < N; s++) {     /* the worker wakes every 2 s at most */
    kept = stat_in("colours", "frames_kept") - kept0;
    rejected = stat_in("colours", "frames_rejected") - rejected0;
    if (kept + rejected < N) usleep(100000);
  }
  fprintf(stderr, "test_protect: frames of the rest handed over as of the first eighth: %ld given back, %ld pooled\n",
          rejected, kept);
  CHECK_EQ(kept + rejected, N);
  /* the pool's strict test decides: on a described machine exactly (the simulated frames moved
     with their pages), on a real one by timing */
  if (machine_described()) CHECK_EQ(rejected, N);
  else CHECK(rejected * 4 >= N * 3);
}

int main(void) {
  require_chromalloc("test_protect");
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++)
    if (_ca_machine.levels[i].level == 2) PAGES = _ca_machine.levels[i].size / 2 / 4096;
  /* a large object, as malloc makes it but past NightWatch, which could monitor it (page traps)
     and keep it from protection until its verdict */
  buf = _ca_large_alloc(PAGES * 4096 + 100, 0, false, 0);
  CHECK(buf != NULL);
  memset((void*)buf, 0, PAGES * 4096 + 100);
  CHECK(_ca_protect_pages() >= PAGES);                    /* recorded as the core handed it out */
  pthread_t t;
  pthread_create(&t, NULL, writer, NULL);
  int low = _ca_colour_set(0, 1, 8), rest = _ca_colour_set(1, 8, 8);
  bool ready = low > 0 && rest > 0 && _ca_colour_prepare(rest, 64, 60000) == 0;
  if (ready) {
    /* a coloured allocation reserves a small slice at either end, not a big one (option
       colour_reserve, on by default) */
    _ca_colour_reserve_first(rest);
    CHECK(!_ca_protect_armed());
    _ca_colour_reserve_first(low);
    CHECK(_ca_protect_armed());
    CHECK(!_ca_protect_arm(rest, low));                   /* armed with (low, rest) */
    CHECK(_ca_protect_arm(low, rest));
    for (int s = 0; s < 600 && _ca_protect_pending() > 0; s++) usleep(100000);
  }
  atomic_store(&stop, true);
  pthread_join(t, NULL);
  bool intact = true;
  for (size_t i = 0; i < PAGES; i++) intact &= buf[i * 512] == rounds;
  CHECK(intact);                                          /* no write lost across the moves */
  if (!ready) {
    fprintf(stderr, "test_protect: colours not available here: placement not checked\n");
    CHECK(!machine_described());
    return check_done("test_protect");
  }
  long checked = stat_in("protect", "pages_checked"), moved = stat_in("protect", "pages_moved");
  CHECK(checked > 0);
  /* every page moved left its old frame: the first eighth's pool took it if the pool's re-test
     placed it there, else it was given back (the worker tests a batch's frames right after the
     batch) */
  long kept = 0, rejected = 0;
  for (int s = 0; s < 100; s++) {
    moved = stat_in("protect", "pages_moved");
    kept = stat_in("colours", "frames_kept");
    rejected = stat_in("colours", "frames_rejected");
    if (kept + rejected == moved) break;
    usleep(100000);
  }
  CHECK_EQ(kept + rejected, moved);
  if (_ca_protect_pending() > 0) {
    /* the worker looks at ranges between stocking chunks, each in a quiet window: on a loaded
       host (make -j2 running the program tests alongside) a chunk took 1-2 s, not 40 ms */
    fprintf(stderr, "test_protect: %zu pages still pending after 60 s (a loaded host): placement not checked\n",
            _ca_protect_pending());
    CHECK(!machine_described());
    return check_done("test_protect");
  }
  CHECK(checked >= (long)PAGES);
  CHECK(moved >= (long)PAGES);                            /* every page of the object: all touched */
  /* the check places a page only among the colours that have eviction sets (here, those of
     the first eighth): a control of CONTROL unrecorded pages shows how many it finds there without
     protection (1 in 8 at random, fewer as the strict check misses some) */
  enum { CONTROL = 256, SENSITIVE = CONTROL / 16 };   /* half the 1 in 8 of random pages */
  uint8_t* control = mmap(NULL, CONTROL * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(control != MAP_FAILED);
  memset(control, 1, CONTROL * 4096);
  /* a page counts as found in the first eighth when two looks both place it there: a look that
     reads noise places pages at random, a page of those colours is placed there each time (the
     CI host once found 20 of 256 control pages and 10 of the object's 128, as many as random:
     that look was noise, or protection's moves landed on pooled frames of the first eighth) */
  int in_control = 0, in_buf = 0, seen_control = 0, seen_buf = 0;
  /* up to three tries, a second apart: a noisy moment passes, pages left in the set do not */
  for (int tries = 0; tries < 3 && (in_control < SENSITIVE || in_control * 3 < seen_control * 2 || (size_t)in_buf * 2 * CONTROL > (size_t)in_control * PAGES); tries++) {
    if (tries > 0) sleep(1);
    in_control = in_first_eighth(control, CONTROL, &seen_control);
    in_buf = in_first_eighth((uint8_t*)buf, PAGES, &seen_buf);
  }
  munmap(control, CONTROL * 4096);
  fprintf(stderr, "test_protect: old frames: %ld pooled, %ld given back by the pool's re-test\n", kept, rejected);
  fprintf(stderr, "test_protect: %ld pages looked at, %ld moved; pages found in the first eighth by "
          "both of two looks (by either): %d (%d) of the object's %zu, %d (%d) of %d unprotected ones\n", checked, moved,
          in_buf, seen_buf, PAGES, in_control, seen_control, CONTROL);
  if (machine_described()) {
    /* a simulated L2: the looks are exact, no page of the object is left in the first eighth */
    CHECK_EQ(in_buf, 0);
    CHECK(in_control >= SENSITIVE);
  } else if (in_control > CONTROL / 4) {
    /* twice the share the colours have: the check reads noise as evictions (225 of 256 in one
       make -j2 run on a Zen 1 host, 8 of 256 alone a minute later) and cannot tell placement */
    fprintf(stderr, "test_protect: the check found %d of %d unprotected pages in the first eighth now (over-eager on a noisy host): placement not checked\n",
            in_control, CONTROL);
  } else if (in_control >= SENSITIVE && in_control * 3 < seen_control * 2) {
    fprintf(stderr, "test_protect: two looks agree on %d of the %d control pages either places in the first eighth (noise): placement not checked\n",
            in_control, seen_control);
  } else if (in_control >= SENSITIVE) {
    /* (below half the random share, the check misses most pages of the first eighth now) */
    CHECK((size_t)in_buf * 2 * CONTROL <= (size_t)in_control * PAGES); /* random: same share; protected: few */
  } else {
    fprintf(stderr, "test_protect: the check found too few pages of the first eighth now (a noisy host): placement not checked\n");
  }
  free((void*)buf);
  kept_frames_tested(low, rest);
  return check_done("test_protect");
}
