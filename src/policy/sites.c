/* Which allocation context a chunk comes from, cheaply (NightWatch, paper 000 section 5.2).

   A context is a hash of the ~10 return addresses of the call stack (monitor/context.c scans
   the stack for them: about a microsecond, more than allocating the chunk).  Three tables keep
   scans rare:

     contexts    hash -> context id (open addressing), with the frames, for reports.
     sites       the entry point's return address (the program's call site) -> context, once
                 LEAF_AGREE scans from that site all found the same context (a *leaf* site, re-
                 checked by a scan every VERIFY uses).  A site whose scans disagree is a *wrapper*
                 (xmalloc, operator new, a request allocator called from many places): its
                 chunks fall through to the size table and scans.
     sizes       the paper's size-to-context table (64K entries, indexed by size): for wrapper
                 sites, a size whose last CONFIDENT scans all found the same context names it
                 without a scan (re-checked every VERIFY uses); a size seen from two contexts is
                 ambiguous and always scanned.

   All three are lock-free for readers; a race costs at most one wrongly attributed chunk. */
#define _GNU_SOURCE
#include "sites.h"
#include "../core/internal.h"
#include "../monitor/context.h"
#include <pthread.h>

#define CTX_SLOTS   (2 * CA_NW_CONTEXTS)     /* hash -> context id, open addressing */
#define SITES       4096
#define SIZE_TABLE  65536
#define LEAF_AGREE  4
#define CONFIDENT   8
#define VERIFY      256

/* site word: context id + 1 (16 bits) | agreeing scans (8) | state (2) */
enum { SITE_LEARNING, SITE_LEAF, SITE_WRAPPER };
#define SITE_CTX(v)    ((v) & 0xFFFF)
#define SITE_AGREE(v)  (((v) >> 16) & 0xFF)
#define SITE_STATE(v)  ((v) >> 24)
#define SITE_WORD(ctx1, agree, state) ((uint32_t)(ctx1) | (uint32_t)(agree) << 16 | (uint32_t)(state) << 24)

/* size word: size (40 bits) | context id + 1 (12) | agreeing scans (4) | ambiguous (1) */
#define SIZE_BITS   40
#define SIZE_MASK   ((1ull << SIZE_BITS) - 1)
#define AMBIGUOUS   (1ull << 63)
#define AGREE_SHIFT 52

typedef struct site_s { _Atomic(uintptr_t) ret; _Atomic(uint32_t) v; } site_t;

static struct {
  ca_lock_t         lock;                     /* creating contexts */
  ca_nw_context_t   ctx[CA_NW_CONTEXTS];
  _Atomic(int)      nctx;
  _Atomic(int16_t)  slot[CTX_SLOTS];          /* context id + 1 */
  site_t            sites[SITES];
  _Atomic(uint64_t) sizes[SIZE_TABLE];
  _Atomic(uint64_t) scans, scan_ns, site_hits, size_hits;
} S;

static __thread uint32_t verify_tick __attribute__((tls_model("initial-exec")));

/* ---- contexts ------------------------------------------------------------------------------- */
int _ca_nw_context(uint64_t hash, const uintptr_t* frames, uint32_t nframes, bool in_libc) {
  for (uint32_t i = (uint32_t)(hash >> 7) % CTX_SLOTS, probes = 0; probes < CTX_SLOTS; i = (i + 1) % CTX_SLOTS, probes++) {
    int s = atomic_load_explicit(&S.slot[i], ca_acquire);
    if (s == 0) {
      _ca_lock(&S.lock);
      s = atomic_load_explicit(&S.slot[i], ca_relaxed);
      if (s == 0) {
        int n = atomic_load_explicit(&S.nctx, ca_relaxed);
        if (n >= CA_NW_CONTEXTS) { _ca_unlock(&S.lock); return -1; }
        ca_nw_context_t* c = &S.ctx[n];
        c->hash = hash;
        c->nframes = nframes > CA_CONTEXT_FRAMES ? CA_CONTEXT_FRAMES : nframes;
        c->in_libc = in_libc;
        for (uint32_t f = 0; f < c->nframes; f++) c->frames[f] = frames[f];
        atomic_store_explicit(&S.nctx, n + 1, ca_release);
        atomic_store_explicit(&S.slot[i], (int16_t)(n + 1), ca_release);
        _ca_unlock(&S.lock);
        return n;
      }
      _ca_unlock(&S.lock);
    }
    if (S.ctx[s - 1].hash == hash) return s - 1;
  }
  return -1;
}

const ca_nw_context_t* _ca_nw_context_info(int id) { return &S.ctx[id]; }
int _ca_nw_contexts(void) { return atomic_load_explicit(&S.nctx, ca_acquire); }

static int scan(const void* frame, const void* ret) {
  uint64_t t0 = _ca_clock_ns();
  ca_context_t k;
  _ca_context_capture(&k, frame, ret);
  int ctx = _ca_nw_context(k.hash, k.frames, k.nframes, k.in_libc);
  atomic_fetch_add_explicit(&S.scans, 1, ca_relaxed);
  atomic_fetch_add_explicit(&S.scan_ns, _ca_clock_ns() - t0, ca_relaxed);
  return ctx;
}

/* ---- sites ---------------------------------------------------------------------------------- */
static site_t* site_of(uintptr_t ret) {
  if (ret == 0) return NULL;
  uint64_t h = (uint64_t)ret * 0x9E3779B97F4A7C15ull;
  for (uint32_t i = (uint32_t)(h >> 52) % SITES, probes = 0; probes < 16; i = (i + 1) % SITES, probes++) {
    site_t* s = &S.sites[i];
    uintptr_t r = atomic_load_explicit(&s->ret, ca_acquire);
    if (r == ret) return s;
    if (r == 0) {
      uintptr_t zero = 0;
      if (atomic_compare_exchange_strong(&s->ret, &zero, ret) || zero == ret) return s;
    }
  }
  return NULL;                                /* table crowded here: scan */
}

static void site_learn(site_t* s, uint32_t v, int ctx) {
  uint32_t want;
  if (SITE_STATE(v) == SITE_LEAF) want = SITE_CTX(v) == (uint32_t)ctx + 1 ? v : SITE_WORD(0, 0, SITE_WRAPPER);
  else if (SITE_CTX(v) == 0) want = SITE_WORD(ctx + 1, 1, SITE_LEARNING);
  else if (SITE_CTX(v) != (uint32_t)ctx + 1) want = SITE_WORD(0, 0, SITE_WRAPPER);
  else want = SITE_WORD(ctx + 1, SITE_AGREE(v) + 1, SITE_AGREE(v) + 1 >= LEAF_AGREE ? SITE_LEAF : SITE_LEARNING);
  atomic_compare_exchange_strong(&s->v, &v, want);
}

/* ---- sizes ---------------------------------------------------------------------------------- */
static int size_context(size_t n, const void* frame, const void* ret) {
  _Atomic(uint64_t)* e = &S.sizes[(n ^ (n >> 16)) % SIZE_TABLE];
  uint64_t v = atomic_load_explicit(e, ca_relaxed);
  uint64_t known = (v >> SIZE_BITS) & 0xFFF, agree = (v >> AGREE_SHIFT) & 0xF;
  if (!(v & AMBIGUOUS) && (v & SIZE_MASK) == n && known != 0 && agree >= CONFIDENT && (++verify_tick % VERIFY) != 0) {
    atomic_store_explicit(&S.size_hits, atomic_load_explicit(&S.size_hits, ca_relaxed) + 1, ca_relaxed);
    return (int)known - 1;
  }
  int ctx = scan(frame, ret);
  if (ctx < 0) return -1;
  uint64_t mine = (uint64_t)n | ((uint64_t)(ctx + 1) << SIZE_BITS);
  if ((v & SIZE_MASK) == n && known != 0 && known != (uint64_t)(ctx + 1)) mine = v | AMBIGUOUS;
  else if ((v & SIZE_MASK) == n && (v & AMBIGUOUS)) mine = v;
  else if ((v & SIZE_MASK) == n && known != 0) mine |= (agree < 15 ? agree + 1 : 15) << AGREE_SHIFT;
  atomic_store_explicit(e, mine, ca_relaxed);
  return ctx;
}

int _ca_nw_context_of(size_t n, const void* frame, const void* ret) {
  site_t* s = site_of((uintptr_t)ret);
  uint32_t v = s != NULL ? atomic_load_explicit(&s->v, ca_relaxed) : SITE_WORD(0, 0, SITE_WRAPPER);
  if (SITE_STATE(v) == SITE_WRAPPER) return size_context(n, frame, ret);
  if (SITE_STATE(v) == SITE_LEAF && (++verify_tick % VERIFY) != 0) {
    atomic_store_explicit(&S.site_hits, atomic_load_explicit(&S.site_hits, ca_relaxed) + 1, ca_relaxed);
    return (int)SITE_CTX(v) - 1;
  }
  int ctx = scan(frame, ret);
  if (ctx >= 0) site_learn(s, v, ctx);
  return ctx;
}

/* fork(): no thread may hold the lock across it */
static void fork_prepare(void) { _ca_lock(&S.lock); }
static void fork_release(void) { _ca_unlock(&S.lock); }
void _ca_nw_sites_init(void) { pthread_atfork(fork_prepare, fork_release, fork_release); }

void _ca_nw_sites_reset(void) {
  _ca_lock(&S.lock);
  memset(S.ctx, 0, sizeof S.ctx);
  for (int i = 0; i < CTX_SLOTS; i++) atomic_store_explicit(&S.slot[i], 0, ca_relaxed);
  for (int i = 0; i < SITES; i++) { atomic_store_explicit(&S.sites[i].ret, 0, ca_relaxed); atomic_store_explicit(&S.sites[i].v, 0, ca_relaxed); }
  for (int i = 0; i < SIZE_TABLE; i++) atomic_store_explicit(&S.sizes[i], 0, ca_relaxed);
  atomic_store_explicit(&S.nctx, 0, ca_relaxed);
  _ca_unlock(&S.lock);
}

void _ca_nw_sites_stats(ca_nw_site_stats_t* st) {
  st->scans = S.scans;
  st->scan_ns = S.scan_ns;
  st->site_hits = S.site_hits;
  st->size_hits = S.size_hits;
  st->leaf_sites = st->wrapper_sites = 0;
  for (int i = 0; i < SITES; i++) {
    uint32_t v = atomic_load_explicit(&S.sites[i].v, ca_relaxed);
    st->leaf_sites += SITE_STATE(v) == SITE_LEAF;
    st->wrapper_sites += SITE_STATE(v) == SITE_WRAPPER;
  }
}
