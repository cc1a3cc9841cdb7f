/* Index-aware placement (paper 001, Afek/Dice/Morrison "Cache index-aware memory allocation").

   A span of blocks of stride S starting at base B puts block starts on only
   P / gcd(P, S) distinct positions of the L1 "cache page" P = sets x line (4 KiB here).  With
   power-of-two-ish size classes (256, 512, 1024, ...) that is 1-16 of the 64 sets, and a
   program that walks such blocks misses in L1 for no reason.  Remedies, all here:

   - index-aware size classes (the paper's appendix B): a class whose stride shares more than a
     line with P is widened by the minimum alignment (16 bytes), so every stride is 16 x odd or
     an odd number of half/whole lines.  This costs at most 16 bytes per block and keeps the
     fast path a flat array (no punctuation to skip).
   - span colours (paper section 5): a span's first block is offset from the span base.  When
     a span holds a whole index cycle (P / gcd(P, S) blocks) the offset is a random line within
     the span's slack, drawn from a per-process seeded generator, only to keep threads and
     processes apart.  When it holds less (big blocks: 15 blocks of 4128 bytes cover 8 sets),
     random offsets would leave sets unused, so each new span of a class *continues* the
     arithmetic progression of the heap's previous span of that class: it starts at
     `stride - slack`, where the previous one stopped one stride short of its end.  A heap's
     spans of a class then cover the sets like one contiguous array (glibc's heap does this by
     accident), and when they are adjacent in memory, as spans handed out in a row are, the
     blocks keep one exact stride, which the hardware prefetcher follows when a program walks
     them in address order (a 4 KiB-modular continuation measured 35-55% slower to chase).
     The price is one block's worth of bytes per span boundary for those classes: the
     position of the block that would straddle the boundary is skipped.  That position is
     `page - slack`, and since spans are a multiple of the cache page the slack moves by
     `span mod stride` from one span to the next; a class where that is less than a line and
     whose index cycle crosses as many span boundaries as a set has positions (1040-byte
     blocks: 65536 = 63 x 1040 + 16, five crossings, four positions per set) would skip
     neighbouring positions until a set is empty, so such a class is widened by another 16
     bytes (1024 -> 1056).
     The progression starts at a random offset per heap and class.
   - no 4 KiB aliasing between neighbours: a class above 2 KiB whose blocks one to four strides
     apart lie 1-31 bytes apart modulo 4 KiB is widened by another 16 bytes (4096 + 16 ->
     4096 + 32, and so for every multiple of 4 KiB).  glibc's memcpy (rep movsb above 2 KiB)
     copies 17-28x slower when the destination lies 8-24 bytes above the source modulo 4 KiB
     (Zen 3, `bench/src/alias.c`): with 16400-byte blocks, copying a block into the next one
     took 5.3 us instead of 0.19.  Distances of a multiple of 32 bytes copy at full speed.
   - large objects start at a random cache line of their first page (jemalloc's
     "cache-oblivious" large placement).

   `layout=ciu` keeps the plain classes and no colours (the paper's index-unfriendly CIU), for
   comparison; `colour=0` keeps index-aware classes without colours.  The line size and set
   count come from the machine model, not constants. */
#include "../core/internal.h"

uint32_t _ca_class_size[CA_CLASS_MAX];
uint8_t  _ca_class_kind[CA_CLASS_MAX];
uint32_t _ca_class_count;
uint8_t  _ca_class_of_w[(CA_MEDIUM_MAX + 64) / CA_MIN_ALIGN + 1];
size_t   _ca_medium_limit;

static uint32_t gcd32(uint32_t a, uint32_t b) {
  while (b != 0) { uint32_t t = a % b; a = b; b = t; }
  return a;
}

/* Do blocks of stride s, one to four apart, lie 1-31 bytes apart modulo 4 KiB (copies between
   them alias in the store buffer)?  Only above 2 KiB, where memcpy turns to rep movsb. */
static bool aliases(uint32_t s) {
  if (s <= 2048) return false;
  for (uint32_t k = 1; k <= 4; k++)
    if ((k * s) % CA_OS_PAGE != 0 && (k * s) % CA_OS_PAGE < 32) return true;
  return false;
}

/* base classes: 16-byte steps to 128, then four per doubling up to CA_MEDIUM_MAX, eight from
   1 KiB to CA_SMALL_MAX */
static uint32_t base_classes(uint32_t* out) {
  uint32_t n = 0;
  for (uint32_t s = 16; s <= 128; s += 16) out[n++] = s;
  for (uint32_t p = 128; p < CA_MEDIUM_MAX; p *= 2) {
    uint32_t steps = p >= 1024 && p < CA_SMALL_MAX ? 8 : 4;
    for (uint32_t k = 1; k <= steps; k++) out[n++] = p + k * (p / steps);
  }
  return n;
}

void _ca_layout_init(void) {
  uint32_t base[CA_CLASS_MAX];
  uint32_t nb = base_classes(base);
  bool aware = _ca_opt(CA_OPT_LAYOUT) == CA_LAYOUT_AWARE;
  uint32_t line = _ca_machine.l1d.line;
  uint32_t page = line * _ca_machine.l1d.sets;         /* the L1 "cache page" */
  uint32_t n = 0;
  for (uint32_t i = 0; i < nb; i++) {
    uint32_t s = base[i];
    size_t span = base[i] <= CA_SMALL_MAX ? (size_t)1 << CA_SMALL_SHIFT : (size_t)1 << CA_MEDIUM_SHIFT;
    while (aware) {
      if (gcd32(page, s) > line) { s += CA_MIN_ALIGN; continue; }
      /* a cycle of blocks crosses `crossings` span boundaries; a set holds `per_set` positions */
      size_t cycle = page / gcd32(page, s), fit = span / s, d = span % s;
      size_t crossings = cycle / fit + 1, per_set = line / gcd32(page, s);
      if (fit < cycle && crossings >= per_set && (d < line || s - d < line)) { s += CA_MIN_ALIGN; continue; }
      if (aliases(s)) { s += CA_MIN_ALIGN; continue; }
      break;
    }
    if (n > 0 && s <= _ca_class_size[n - 1]) continue;
    _ca_class_kind[n] = base[i] <= CA_SMALL_MAX ? CA_SEG_SMALL : CA_SEG_MEDIUM;
    _ca_class_size[n++] = s;
  }
  _ca_class_count = n;
  _ca_medium_limit = _ca_class_size[n - 1];
  uint32_t c = 0;
  for (size_t w = 0; w * CA_MIN_ALIGN <= _ca_medium_limit; w++) {
    while (_ca_class_size[c] < w * CA_MIN_ALIGN) c++;
    _ca_class_of_w[w] = (uint8_t)c;
  }
}

static uint64_t next_rand(uint64_t* rng) {
  uint64_t x = *rng;
  x ^= x << 13; x ^= x >> 7; x ^= x << 17;
  return *rng = x;
}

static bool colours_on(void) {
  return _ca_opt(CA_OPT_LAYOUT) == CA_LAYOUT_AWARE && _ca_opt(CA_OPT_COLOUR) != 0;
}

/* Granularity of span offsets for a stride: block starts stay as aligned as the stride allows
   (up to a line), so a class whose stride is a multiple of 64 hands out line-aligned blocks. */
static uint32_t offset_unit(uint32_t block_size) {
  uint32_t line = _ca_machine.l1d.line;
  return gcd32(block_size, line);
}

/* A random start offset (bytes, below the stride) for a heap's first span of a class. */
uint32_t _ca_layout_first_colour(uint32_t block_size, uint64_t* rng) {
  if (!colours_on()) return 0;
  uint32_t unit = offset_unit(block_size);
  return (uint32_t)(next_rand(rng) % (block_size / unit)) * unit;
}

/* Offset (bytes) of the first block from the span base.  *colour is the heap's offset for the
   class's next span and is advanced past this span. */
uint32_t _ca_layout_span_offset(uint32_t block_size, size_t span_bytes, uint32_t* colour, uint64_t* rng) {
  if (!colours_on()) return 0;
  uint32_t line = _ca_machine.l1d.line;
  uint32_t page = line * _ca_machine.l1d.sets;
  size_t cycle = page / gcd32(page, block_size);       /* blocks until start positions repeat */
  if (span_bytes / block_size >= cycle) {
    /* the span alone covers every set: a random line inside the slack, for diversity only */
    size_t lines = (span_bytes % block_size) / line + 1;
    if (lines > 16) lines = 16;
    return (uint32_t)(next_rand(rng) % lines) * line;
  }
  uint32_t off = *colour;
  size_t slack = (span_bytes - off) % block_size;
  *colour = (uint32_t)((block_size - slack) % block_size);
  return off;
}

size_t _ca_layout_large_offset(uint64_t* rng) {
  if (!colours_on()) return 0;
  uint32_t line = _ca_machine.l1d.line;
  return (size_t)(next_rand(rng) % (CA_OS_PAGE / line)) * line;
}

/* Fill in the stride-derived fields of a span: the exact-division constants used by free(). */
void _ca_layout_span_shape(ca_span_t* s, uint32_t block_size) {
  uint32_t shift = (uint32_t)__builtin_ctz(block_size);
  uint64_t odd = block_size >> shift;
  uint64_t inv = odd;                                  /* Newton: 3 bits -> 6 -> 12 -> 24 -> 48 -> 96 */
  for (int i = 0; i < 5; i++) inv *= 2 - odd * inv;
  s->block_size = block_size;
  s->shift = (uint8_t)shift;
  s->inv = inv;
}
