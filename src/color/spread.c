/* Single colours, for a policy that spreads pages over the whole level (hot pages, paper 002):
   the colour of a live page, and moving a live page onto a frame of one of some colours.

   The colour sets (sets.c) are slices with pools of megabytes each; spreading a few hundred hot
   pages evenly needs frames of every single colour instead, a few at a time.  They come from
   small supply chunks, classified against every colour's eviction set as they are needed, and
   wait in one spare list per colour:

     spare[c]: pages of colour c, ready to move      chunk: fresh pages not classified yet
       |                                               |
       +--- _ca_colour_move_to(page, mask, tries) takes one of any colour in mask, classifying
            fresh pages until one turns up, `tries` at most (the others join their own lists)

   The client (one policy) also hears of ordinary memory as the core hands it out and takes it
   back, and gets the worker's time once the layer is ready (worker.c). */
#include "layer.h"

#define CHUNK   64                   /* fresh pages per supply chunk */
#define SPARES  256                  /* classified pages waiting, in all */

static struct {
  const ca_colour_client_t* client;
  ca_page_pool_t spare[CA_COLOURS_MAX];
  size_t         spares;
  uint8_t*       chunk;               /* pages [next, CHUNK) not classified yet */
  size_t         next;
  uint64_t       classified, unknown, moves, move_fails;
} S = { .next = CHUNK };

const ca_colour_client_t* _ca_cs_client(void) { return S.client; }

void _ca_colour_client(const ca_colour_client_t* c) {
  S.client = c;
  _ca_cs_start_worker();
}

/* the live page's colour among the known ones, or -1 (the worker's: pinned, measuring) */
int _ca_colour_page(const void* page) {
  if (atomic_load_explicit(&L.state, ca_acquire) != CA_COLOURS_READY) return -1;
  S.classified++;
  int c = _ca_frames_colour(page);
  if (c >= 0) return c;
  c = _ca_colour_of_live(&L.probe.base, &L.map, page, ~(uint64_t)0, 3, 3, CA_ASK_FULLY);
  _ca_frames_teach(page, c);
  S.unknown += c < 0;
  return c;
}

static void* fresh_page(void) {
  if (S.next >= CHUNK) {
    bool huge;
    S.chunk = _ca_pool_supply(CHUNK, &huge);
    if (S.chunk == NULL) return NULL;
    S.next = 0;
  }
  return S.chunk + S.next++ * CA_OS_PAGE;
}

/* a page of a colour in mask: a spare, else fresh pages classified until one is (at most
   *tries of them); those of other colours wait in their lists, SPARES / colours a colour */
static void* frame_of(uint64_t mask, int* colour, uint32_t* tries) {
  for (uint32_t c = 0; c < L.map.ncolours; c++)
    if ((mask >> c) & 1 && S.spare[c].count > 0) { S.spares--; *colour = (int)c; return _ca_pool_pop(&S.spare[c]); }
  size_t per = L.map.ncolours ? SPARES / L.map.ncolours : 0;
  for (; *tries > 0; (*tries)--) {
    void* p = fresh_page();
    if (p == NULL) return NULL;
    int c = _ca_colour_page(p);
    if (c >= 0 && (mask >> c) & 1) { (*tries)--; *colour = c; return p; }
    if (c >= 0 && S.spare[c].count < per && _ca_pool_push(&S.spare[c], p)) S.spares++;
    else _ca_os_unmap(p, CA_OS_PAGE);
  }
  return NULL;
}

int _ca_colour_move_to(void* page, uint64_t mask, uint32_t* tries) {
  if (atomic_load_explicit(&L.state, ca_acquire) != CA_COLOURS_READY || _ca_pool_moves_capped(1)) return -1;
  int c = -1;
  void* fresh = frame_of(mask, &c, tries);
  if (fresh == NULL) return -1;
  int e = errno;
  bool ok = _ca_recolour_page(page, fresh, 0, false) != 0;
  errno = e;
  S.moves += ok;
  S.move_fails += !ok;
  return ok ? c : -1;
}

uint64_t _ca_colour_known_mask(void) {
  uint32_t n = atomic_load_explicit(&L.state, ca_acquire) == CA_COLOURS_READY ? L.map.ncolours : 0;
  return n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1;
}

uint32_t _ca_colour_ways(void) { return L.map.ways; }

uint64_t _ca_colour_reserved_mask(void) {
  int f = _ca_protect_from();
  return f > 0 && f <= CA_COLOUR_SETS && L.sets[f].used ? L.sets[f].mask : 0;
}

uint64_t _ca_colour_spares(void) {
  uint64_t m = 0;
  for (uint32_t c = 0; c < CA_COLOURS_MAX; c++) if (S.spare[c].count > 0) m |= (uint64_t)1 << c;
  return m;
}

void _ca_colour_spread_stats_json(ca_buf_t* b) {
  ca_buf_str(b, "{\"classified\":"); ca_buf_u64(b, S.classified);
  ca_buf_field_u64(b, "unknown", S.unknown);
  ca_buf_field_u64(b, "moves", S.moves);
  ca_buf_field_u64(b, "move_failures", S.move_fails);
  ca_buf_field_u64(b, "spares", S.spares);
  ca_buf_str(b, "}");
}

/* a fork child: its spares are copies (not the frames measured); the worker starts again */
void _ca_colour_spread_fork_child(void) {
  for (uint32_t c = 0; c < CA_COLOURS_MAX; c++) S.spare[c].count = 0;
  S.spares = 0;
  S.next = CHUNK;
}
