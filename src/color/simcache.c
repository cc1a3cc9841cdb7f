/* A simulated L2 behind the probe interface, for a described machine (CHROMALLOC_MACHINE,
   cachemodel.c): the colour layer runs unchanged on any host, and its outcome depends on the
   described geometry, never on this host's timing.

   A page's colour is that of its frame.  A frame is named by the address where the page was
   first mapped (its page number), and it moves with the page: the layer moves pages only
   through _ca_sim_moved's callers (pool fills and take-backs, recolouring), which record the
   frame at its new address here.

     moved: open-addressing table  page address -> frame   (pages living away from their birth)
     frame(page)  = moved[page] or page / 4 KiB
     colour(page) = frame % colours               (index=linear: bare metal's physical bits)
                  = mix(frame) % colours          (index=hashed: a VM's scattered host pages)

   A group evicts a reference when it holds `ways` pages of the reference's colour, the
   question every test asks (plainly, fully and clearly alike).  Pages are never touched. */
#include "colour.h"

#define SIM_SLOTS0 ((size_t)1 << 16)

typedef struct sim_entry_s { uintptr_t page, frame; } sim_entry_t;

static struct {
  ca_lock_t    lock;
  sim_entry_t* slot;          /* page 0 marks a free slot */
  size_t       cap, used;
  uint32_t     colours, ways;
} S;

static size_t home(uintptr_t page, size_t cap) { return (size_t)((page >> 12) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1); }

static sim_entry_t* find(uintptr_t page) {
  if (S.cap == 0) return NULL;
  for (size_t i = home(page, S.cap);; i = (i + 1) & (S.cap - 1)) {
    if (S.slot[i].page == page) return &S.slot[i];
    if (S.slot[i].page == 0) return NULL;
  }
}

static void put(sim_entry_t* t, size_t cap, uintptr_t page, uintptr_t frame) {
  size_t i = home(page, cap);
  while (t[i].page != 0 && t[i].page != page) i = (i + 1) & (cap - 1);
  t[i] = (sim_entry_t){ page, frame };
}

/* Remove the entry of page, shifting back the run after it (no tombstones). */
static void erase(uintptr_t page) {
  sim_entry_t* e = find(page);
  if (e == NULL) return;
  size_t i = (size_t)(e - S.slot);
  S.slot[i].page = 0;
  S.used--;
  for (size_t j = (i + 1) & (S.cap - 1); S.slot[j].page != 0; j = (j + 1) & (S.cap - 1)) {
    sim_entry_t m = S.slot[j];
    S.slot[j].page = 0;
    put(S.slot, S.cap, m.page, m.frame);
  }
}

static bool grow(void) {
  size_t cap = S.cap ? S.cap * 2 : SIM_SLOTS0;
  sim_entry_t* t = _ca_os_map(cap * sizeof *t);
  if (t == NULL) return false;
  for (size_t i = 0; i < S.cap; i++) if (S.slot[i].page != 0) put(t, cap, S.slot[i].page, S.slot[i].frame);
  if (S.slot != NULL) _ca_os_unmap(S.slot, S.cap * sizeof *S.slot);
  S.slot = t;
  S.cap = cap;
  return true;
}

static uintptr_t frame_of(uintptr_t page) {
  sim_entry_t* e = find(page);
  return e != NULL ? e->frame : page >> 12;
}

/* n pages moved from `from` to `to` (page aligned): their frames now live there. */
void _ca_sim_moved(const void* from, const void* to, size_t n) {
  if (!_ca_machine.simulated) return;
  _ca_lock(&S.lock);
  for (size_t i = 0; i < n; i++) {
    uintptr_t f = (uintptr_t)from + i * CA_OS_PAGE, t = (uintptr_t)to + i * CA_OS_PAGE;
    uintptr_t frame = frame_of(f);
    erase(f);
    erase(t);
    if (frame == t >> 12) continue;                /* back where it was born */
    if ((S.used + 1) * 2 > S.cap && !grow()) continue;   /* no memory: the page reads as born there */
    put(S.slot, S.cap, t, frame);
    S.used++;
  }
  _ca_unlock(&S.lock);
}

/* Held across fork: the worker may be in the middle of a test or a move (a fork child that
   inherited the lock held waited on it for ever, freeing a coloured object). */
void _ca_sim_fork(bool hold) {
  if (!_ca_machine.simulated) return;
  if (hold) _ca_lock(&S.lock);
  else _ca_unlock(&S.lock);
}

/* The pages of a shared file (the set file) have the same frames in every process that maps
   it: named by the file, far from any frame an address names. */
void _ca_sim_file_frames(void* pages, size_t npages, uint64_t file) {
  if (!_ca_machine.simulated) return;
  _ca_lock(&S.lock);
  for (size_t i = 0; i < npages; i++) {
    uintptr_t page = (uintptr_t)pages + i * CA_OS_PAGE;
    erase(page);
    if ((S.used + 1) * 2 > S.cap && !grow()) break;
    put(S.slot, S.cap, page, ((uintptr_t)1 << 60) | (uintptr_t)(file << 24) | i);
    S.used++;
  }
  _ca_unlock(&S.lock);
}

static uint32_t colour(uintptr_t frame) {
  uint64_t x = frame;
  if (_ca_machine.hashed) { x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; }
  return (uint32_t)(x % S.colours);
}

/* The simulated frame number of the page holding p (0: not simulated), as pagemap gives it. */
uint64_t _ca_sim_frame(const void* p) {
  if (!_ca_machine.simulated) return 0;
  _ca_lock(&S.lock);
  uintptr_t f = frame_of((uintptr_t)p & ~(uintptr_t)(CA_OS_PAGE - 1));
  _ca_unlock(&S.lock);
  return f;
}

/* The simulated colour of the page holding p (tests compare it with chromalloc_colour_of). */
int _ca_sim_colour(const void* p) {
  if (!_ca_machine.simulated || S.colours == 0) return -1;
  _ca_lock(&S.lock);
  uint32_t c = colour(frame_of((uintptr_t)p & ~(uintptr_t)(CA_OS_PAGE - 1)));
  _ca_unlock(&S.lock);
  return (int)c;
}

static bool sim_evicts(ca_probe_t* p, void* r, void* const* pages, size_t n) {
  p->tests++;
  uint64_t t0, t;                                  /* the CPU a timed test would take (CPU time, */
  if (_ca_machine.probe_ns != 0 && _ca_clock_read_ns(CLOCK_THREAD_CPUTIME_ID, &t0))   /* not wall time) */
    while (_ca_clock_read_ns(CLOCK_THREAD_CPUTIME_ID, &t) && t - t0 < _ca_machine.probe_ns) ca_cpu_relax();
  _ca_lock(&S.lock);
  uint32_t c = colour(frame_of((uintptr_t)r)), same = 0;
  for (size_t i = 0; i < n && same < S.ways; i++)
    same += pages[i] != r && colour(frame_of((uintptr_t)pages[i])) == c;
  _ca_unlock(&S.lock);
  return same >= S.ways;
}

static void sim_prepare(ca_probe_t* p, void* r) { (void)p; (void)r; }

/* what an eviction set reads on a quiet host, or nothing */
static uint32_t sim_ratio(ca_probe_t* p, void* r, void* const* pages, size_t n, int reps) {
  (void)reps;
  return sim_evicts(p, r, pages, n) ? 300 : 100;
}

/* The sets always evict clearly: every moment is a quiet one. */
static void sim_recalibrate(ca_probe_t* p, void* const* refs, void* const (*sets)[CA_WAYS_MAX], size_t n, size_t ways) {
  (void)refs; (void)sets; (void)n; (void)ways;
  ca_timing_probe_t* tp = (ca_timing_probe_t*)p;
  tp->set_ratio_pct = 300;
  tp->full_pct = 260;
}

/* The probe of the described L2 (false: no L2 described). */
bool _ca_probe_sim_init(ca_timing_probe_t* tp) {
  const ca_cache_level_t* l2 = NULL;
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++) if (_ca_machine.levels[i].level == 2) l2 = &_ca_machine.levels[i];
  if (l2 == NULL || l2->ways == 0 || l2->size / l2->ways < CA_OS_PAGE) return false;
  S.colours = l2->size / l2->ways / (uint32_t)CA_OS_PAGE;
  S.ways = l2->ways;
  tp->base.evicts = tp->base.evicts_fully = tp->base.evicts_clearly = sim_evicts;
  tp->base.prepare = sim_prepare;
  tp->base.recalibrate = sim_recalibrate;
  tp->base.ratio = sim_ratio;
  tp->reps = tp->passes = 1;
  tp->hit_ticks = 100;
  tp->miss_ticks = 300;
  tp->ratio_pct = 150;
  tp->clear_pct = 200;
  tp->threshold = 150;
  tp->set_ratio_pct = 300;
  tp->full_pct = 260;
  return true;
}
