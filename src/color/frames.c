/* Colours from frame numbers.  Where the guest's frames are the host's (bare metal, or a host
   that backs the guest with huge pages) and the process may read them (/proc/self/pagemap, as
   root), a page's colour follows its frame number; timing is then needed only to learn which
   colour each residue is, from pages the eviction sets classify anyway:

     residue r = frame % M            M: the colours found, rounded up to a power of two
     colour[r] = c, agree[r] = n      n pages of residue r that timing put in colour c

   The source answers once 32 pages agreed with one taught before them and none disagreed, a
   residue once two of its pages agree; one page that disagrees turns it off for the process (a
   VM backed by 4 KiB host pages: frames say nothing there).  An answer is one read of pagemap
   (a few us) instead of a test against every colour's set (about 0.3 ms), and it does not
   depend on the moment: with a 1.7 MiB chase on the other vCPU of the Intel Xeon guest, timing
   could tell 8 of 256 live pages.  A residue no page has taught (a colour without a set)
   answers -1, and the caller times. */
#include "layer.h"
#include <fcntl.h>
#include <unistd.h>

enum { F_UNKNOWN, F_LEARNING, F_ON, F_HIDDEN, F_DISAGREE };
#define SEEN 2048
static const char* const state_names[] = { "unknown", "learning", "on", "hidden", "disagree" };

static struct {
  ca_lock_t lock;
  int       state;
  uint32_t  m, epoch;                 /* the map's numbering the residues were taught in */
  uint32_t  lessons;                  /* epoch + 1 of the last lesson (one a numbering) */
  uint32_t  since, repeats;           /* pages taught in this numbering; of them, agreeing repeats */
  uint64_t  seen[SEEN];               /* frames taught in this numbering (a frame teaches once: the
                                         kernel hands a freed frame out again, and a page asked about
                                         twice is one frame) */
  int8_t    colour[CA_COLOURS_MAX];
  uint8_t   agree[CA_COLOURS_MAX];
  uint64_t  taught, answered, conflicts;
} F;

/* the frame of a resident page, 0 when it cannot be read (not resident, or hidden: not root).
   Opened each time: a descriptor kept could be closed by the program and its number reused. */
static uint64_t frame_of(const void* page) {
  if (_ca_machine.simulated) return _ca_machine.frames ? _ca_sim_frame(page) : 0;
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  uint64_t e = 0;
  ssize_t r = pread(fd, &e, sizeof e, (off_t)((uintptr_t)page / CA_OS_PAGE * sizeof e));
  close(fd);
  return r == (ssize_t)sizeof e && e >> 63 ? e & ((1ull << 55) - 1) : 0;
}

/* M from the most colours anything says the level has (the geometry, the calibration, the
   sets), to a power of two: a frame's low bits past the page are the colour on bare metal */
static uint32_t residues(void) {
  uint32_t n = L.map.ncolours > L.cal.colours ? L.map.ncolours : L.cal.colours;
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++) {
    const ca_cache_level_t* l = &_ca_machine.levels[i];
    if (l->level == L.cal.level && l->ways) { uint64_t g = l->size / l->ways / CA_OS_PAGE; if (g > n) n = (uint32_t)g; }
  }
  uint32_t m = 1;
  while (m < n) m <<= 1;
  return m;
}

/* F.lock held.  The sets renumbered: what was taught names other colours now (frames that
   disagreed or cannot be read stay so: that is the machine's, not the numbering's) */
static bool usable(void) {
  if ((F.state == F_LEARNING || F.state == F_ON) && F.epoch != L.map.epoch) {
    memset(F.agree, 0, sizeof F.agree);
    F.state = F_UNKNOWN;
  }
  if (F.state == F_UNKNOWN && L.map.ncolours >= 2) {
    uint32_t m = residues();
    F.m = m >= 2 && m <= CA_COLOURS_MAX ? m : 0;
    F.epoch = L.map.epoch;
    F.since = F.repeats = 0;
    memset(F.seen, 0, sizeof F.seen);
    for (uint32_t r = 0; r < CA_COLOURS_MAX; r++) F.colour[r] = -1;
    F.state = F.m ? F_LEARNING : F_HIDDEN;
  }
  return F.state == F_LEARNING || F.state == F_ON;
}

/* a fork child: the worker may have held the lock */
void _ca_frames_fork_child(void) { atomic_store_explicit(&F.lock.v, 0, ca_relaxed); }

int _ca_frames_colour(const void* page) {
  if (atomic_load_explicit(&L.state, ca_acquire) != CA_COLOURS_READY) return -1;
  _ca_lock(&F.lock);
  int c = -1;
  if (usable() && F.state == F_ON) {
    uint64_t f = frame_of(page);
    uint32_t r = (uint32_t)(f % F.m);
    if (f != 0 && F.agree[r] >= 2) { c = F.colour[r]; F.answered++; }
  }
  _ca_unlock(&F.lock);
  return c;
}

/* F.lock held: true the first time frame f is taught in this numbering (and once the table is
   full: by then the source is on or off) */
static bool first_time(uint64_t f) {
  for (uint32_t i = (uint32_t)(f * 0x9E3779B97F4A7C15ull >> 53) % SEEN, n = 0; n < SEEN; i = (i + 1) % SEEN, n++) {
    if (F.seen[i] == f) return false;
    if (F.seen[i] == 0) { F.seen[i] = f; return true; }
  }
  return true;
}

/* On after 32 pages agreed with one taught before them in their residue, none disagreeing: where
   frames say nothing, each such page agrees by chance with at most an even chance (two colours
   known; 1 in 32 with 32), so 32 leave a false source on once in 4 x 10^9 */
#define REPEATS 32
void _ca_frames_teach(const void* page, int c) {
  if (c < 0) return;
  _ca_lock(&F.lock);
  uint64_t f = usable() ? frame_of(page) : 0;
  if (f == 0 && F.state == F_LEARNING && F.since == 0) F.state = F_HIDDEN;   /* a resident page: none for us */
  if (f != 0 && first_time(f)) {
    uint32_t r = (uint32_t)(f % F.m);
    F.taught++;
    F.since++;
    if (F.agree[r] == 0) { F.colour[r] = (int8_t)c; F.agree[r] = 1; }
    else if (F.colour[r] == c) { F.repeats++; if (F.agree[r] < UINT8_MAX) F.agree[r]++; }
    else { F.conflicts++; F.state = F_DISAGREE; }
    if (F.state == F_LEARNING && F.repeats >= REPEATS) F.state = F_ON;
  }
  _ca_unlock(&F.lock);
}

static uint32_t half_taught(void) {      /* residues one page taught: not answering yet */
  uint32_t n = 0;
  for (uint32_t r = 0; r < F.m; r++) n += F.agree[r] == 1;
  return n;
}

static uint32_t learned(void) {
  uint32_t n = 0;
  for (uint32_t r = 0; r < F.m; r++) n += F.agree[r] >= 2;
  return n;
}

/* Once the layer is ready, once a numbering of the sets: teach the source from fresh pages until
   it answers, for as many residues as there are sets, and for every residue a page taught (32
   pages a residue at most; frames unreadable stop it at the first page the sets name).  The
   worker's: about 0.3 ms of timing a page. */
void _ca_frames_learn(void) {
  enum { CHUNK = 64, CHUNKS = CA_COLOURS_MAX * 32 / CHUNK };
  _ca_lock(&F.lock);
  bool due = usable() && F.lessons != F.epoch + 1;
  F.lessons = F.epoch + 1;
  _ca_unlock(&F.lock);
  uint8_t* chunk[CHUNKS];
  size_t n = 0;
  for (bool fresh; due && n < CHUNKS && F.state != F_DISAGREE &&
                   (F.state != F_ON || half_taught() > 0 || learned() < L.map.ncolours) &&
                   n * CHUNK < F.m * 32 && (chunk[n] = _ca_pool_supply(CHUNK, &fresh)) != NULL; n++) {
    for (size_t i = 0; i < CHUNK && F.state != F_DISAGREE && F.state != F_HIDDEN; i++) {
      void* page = chunk[n] + i * CA_OS_PAGE;
      _ca_frames_teach(page, _ca_colour_classify(&L.probe.base, &L.map, page, ~(uint64_t)0));
    }
    if (F.state == F_HIDDEN) { n++; break; }
  }
  while (n > 0) _ca_os_unmap(chunk[--n], CHUNK * CA_OS_PAGE);   /* held till now: each a frame of its own */
}

void _ca_frames_stats_json(ca_buf_t* b) {
  ca_buf_str(b, "{\"state\":\""); ca_buf_str(b, state_names[F.state]); ca_buf_str(b, "\"");
  ca_buf_field_u64(b, "residues", F.m);
  ca_buf_field_u64(b, "learned", learned());
  ca_buf_field_u64(b, "taught", F.taught);
  ca_buf_field_u64(b, "answered", F.answered);
  ca_buf_field_u64(b, "conflicts", F.conflicts);
  ca_buf_str(b, "}");
}
