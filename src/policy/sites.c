/* Which allocation context a chunk comes from, cheaply (NightWatch, paper 000 section 5.2).

   A context is a hash of the ~10 return addresses of the call stack (monitor/context.c scans
   the stack for them: 0.3-2 us, more than allocating the chunk).  Four tables keep scans rare:

     contexts    hash -> context id (open addressing), with the frames, for reports.
     sites       the entry point's return address (the program's call site) -> context, once
                 LEAF_AGREE scans from that site all found the same context (a *leaf* site).
                 Each site also learns its caller's slot: where the second frame lies above the
                 entry point's frame, fixed while the function holding the call site has a fixed
                 frame (LEAF_AGREE scans must find it there).  A leaf is re-checked by a scan
                 when the word in that slot is not the caller it was learned from (the function
                 is now called from elsewhere) and in 1 of VERIFY uses at random.  A site whose
                 scans disagree is a *wrapper* (xmalloc, operator new, a helper called from many
                 places).
     callers     for wrapper sites with a known slot: (site, the word in the slot) -> context,
                 once CONFIDENT scans agreed (re-checked in 1 of VERIFY uses); a pair seen with
                 two contexts (a wrapper of a wrapper) is ambiguous.
     sizes       the paper's size-to-context table (64K entries), keyed by site and size: for
                 the rest, a size whose last CONFIDENT scans from a site all found the same
                 context names it without a scan (re-checked in 1 of VERIFY uses), unless the
                 caller is new at the site (size_may_answer); a size seen from two contexts is
                 ambiguous.  (Keyed by size alone, as in the paper, a size
                 learned at one wrapper named the chunks of another.)

   All are lock-free for readers; a race costs at most one wrongly attributed chunk. */
#define _GNU_SOURCE
#include "sites.h"
#include "../core/hooks.h"
#include "../monitor/context.h"
#include <pthread.h>

#define CTX_SLOTS   (2 * CA_NW_CONTEXTS)     /* hash -> context id, open addressing */
#define SITES       4096
#define SIZE_TABLE  65536
#define CALLERS     4096
#define LEAF_AGREE  4
#define CONFIDENT   8
#define VERIFY      256

/* site word: context id + 1 (16 bits) | agreeing scans (8) | state (2) */
enum { SITE_LEARNING, SITE_LEAF, SITE_WRAPPER };
#define SITE_CTX(v)    ((v) & 0xFFFF)
#define SITE_AGREE(v)  (((v) >> 16) & 0xFF)
#define SITE_STATE(v)  ((v) >> 24)
#define SITE_WORD(ctx1, agree, state) ((uint32_t)(ctx1) | (uint32_t)(agree) << 16 | (uint32_t)(state) << 24)
/* a wrapper's caller slot, in the same layout: bytes above the entry frame | agreeing scans | state */
enum { SLOT_LEARNING, SLOT_KNOWN, SLOT_NONE };

/* learned entry (sizes, callers): key (40 bits) | context id + 1 (12) | agreeing scans (4) | ambiguous (1) */
#define KEY_BITS    40
#define KEY_MASK    ((1ull << KEY_BITS) - 1)
#define AMBIGUOUS   (1ull << 63)
#define AGREE_SHIFT 52

/* 32 bytes, so that a site never straddles two cache lines (every chunk reads its site) */
typedef struct site_s { _Atomic(uintptr_t) ret, caller; _Atomic(uint32_t) v, slot; } __attribute__((aligned(32))) site_t;

static struct {
  ca_lock_t         lock;                     /* creating contexts */
  ca_nw_context_t   ctx[CA_NW_CONTEXTS];
  _Atomic(int)      nctx;
  _Atomic(int16_t)  slot[CTX_SLOTS];          /* context id + 1 */
  site_t            sites[SITES];
  _Atomic(uint64_t) sizes[SIZE_TABLE];
  _Atomic(uint64_t) callers[CALLERS];
  _Atomic(uint64_t) scans, scan_ns, site_hits, caller_hits, size_hits;
} S;

static __thread uint32_t verify_rng __attribute__((tls_model("initial-exec")));
static __thread uint32_t verify_left __attribute__((tls_model("initial-exec")));

/* Is this use one of the 1 in VERIFY re-checked by a scan?  The uses between two checks are
   drawn at random per thread (uniform in 1..2 VERIFY - 1, xorshift): a counter shared by all
   sites aliases with a program's own rhythm (four sites called in turn with VERIFY a multiple
   of four: one site is checked every time, three never).  Most uses only count down. */
static ca_cold bool verify_draw(void) {
  uint32_t x = verify_rng;
  if (x == 0) x = (uint32_t)(uintptr_t)&verify_rng ^ (uint32_t)_ca_clock_ns() ^ 0x9E3779B9u;
  x ^= x << 13; x ^= x >> 17; x ^= x << 5;
  verify_rng = x;
  bool now = verify_left == 1;                /* 0: the thread's first use draws the first gap */
  verify_left = 1 + x % (2 * VERIFY - 1);
  return now;
}
static inline bool verify_now(void) {
  if (ca_likely(verify_left > 1)) { verify_left--; return false; }
  return verify_draw();
}

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

/* a scan: the context, and where its second frame lay (for the caller slot) */
typedef struct { int ctx; uint32_t at1; uintptr_t caller; } found_t;

static found_t scan(const void* frame, const void* ret) {
  uint64_t t0 = _ca_clock_ns();
  ca_context_t k;
  /* the capture may allocate (pthread_getattr_np reads /proc/self/maps): those allocations are
     the core's alone, never placed or sampled by the policy (that would scan again, inside
     glibc's lock) */
  bool was = _ca_no_policy;
  _ca_no_policy = true;
  _ca_context_capture(&k, frame, ret);
  _ca_no_policy = was;
  found_t f = { _ca_nw_context(k.hash, k.frames, k.nframes, k.in_libc), k.at1, k.nframes > 1 ? k.frames[1] : 0 };
  atomic_fetch_add_explicit(&S.scans, 1, ca_relaxed);
  atomic_fetch_add_explicit(&S.scan_ns, _ca_clock_ns() - t0, ca_relaxed);
  return f;
}

static void count(_Atomic(uint64_t)* c) {
  atomic_store_explicit(c, atomic_load_explicit(c, ca_relaxed) + 1, ca_relaxed);
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
  return NULL;                                /* table crowded here: wrapper without a slot */
}

static void site_learn(site_t* s, uint32_t v, found_t f) {
  uint32_t want, ctx1 = (uint32_t)f.ctx + 1;
  if (SITE_STATE(v) == SITE_LEAF) want = SITE_CTX(v) == ctx1 ? v : SITE_WORD(0, 0, SITE_WRAPPER);
  else if (SITE_CTX(v) == 0) { want = SITE_WORD(ctx1, 1, SITE_LEARNING); atomic_store_explicit(&s->caller, f.caller, ca_relaxed); }
  else if (SITE_CTX(v) != ctx1) want = SITE_WORD(0, 0, SITE_WRAPPER);
  else want = SITE_WORD(ctx1, SITE_AGREE(v) + 1, SITE_AGREE(v) + 1 >= LEAF_AGREE ? SITE_LEAF : SITE_LEARNING);
  atomic_compare_exchange_strong(&s->v, &v, want);
}

/* the caller's slot: known once LEAF_AGREE scans found the second frame at one place */
static void slot_learn(site_t* s, uint32_t at1) {
  uint32_t v = atomic_load_explicit(&s->slot, ca_relaxed);
  if (SITE_STATE(v) != SLOT_LEARNING) return;
  uint32_t want = at1 == 0 || (SITE_AGREE(v) != 0 && SITE_CTX(v) != at1) ? SITE_WORD(0, 0, SLOT_NONE)
                : SITE_WORD(at1, SITE_AGREE(v) + 1, SITE_AGREE(v) + 1 >= LEAF_AGREE ? SLOT_KNOWN : SLOT_LEARNING);
  atomic_compare_exchange_strong(&s->slot, &v, want);
}

/* ---- learned entries: callers and sizes --------------------------------------------------- */
/* the context an entry names for `key` without a scan, or -1 (unknown, unsure, ambiguous, or
   this use is a check) */
static inline int entry_known(uint64_t v, uint64_t key) {
  uint64_t known = (v >> KEY_BITS) & 0xFFF, agree = (v >> AGREE_SHIFT) & 0xF;
  if ((v & AMBIGUOUS) || (v & KEY_MASK) != key || known == 0 || agree < CONFIDENT) return -1;
  return verify_now() ? -1 : (int)known - 1;
}

static void entry_learn(_Atomic(uint64_t)* e, uint64_t v, uint64_t key, int ctx) {
  uint64_t known = (v >> KEY_BITS) & 0xFFF, agree = (v >> AGREE_SHIFT) & 0xF;
  uint64_t mine = key | ((uint64_t)(ctx + 1) << KEY_BITS);
  if ((v & KEY_MASK) == key && (v & AMBIGUOUS)) mine = v;
  else if ((v & KEY_MASK) == key && known != 0 && known != (uint64_t)(ctx + 1)) mine = v | AMBIGUOUS;
  else if ((v & KEY_MASK) == key && known != 0) mine |= (agree < 15 ? agree + 1 : 15) << AGREE_SHIFT;
  atomic_store_explicit(e, mine, ca_relaxed);
}

/* a wrapper site's entry for (site, x) in a table of `size` entries, and its key */
typedef struct { _Atomic(uint64_t)* e; uint64_t key, v; } entry_t;
static entry_t entry_of(_Atomic(uint64_t)* table, uint32_t size, uintptr_t ret, uint64_t x) {
  uint64_t h = ((uint64_t)ret * 0x9E3779B97F4A7C15ull ^ x) * 0xBF58476D1CE4E5B9ull;
  entry_t t = { &table[(h >> 8) % size], (h >> 24) & KEY_MASK, 0 };
  t.v = atomic_load_explicit(t.e, ca_relaxed);
  return t;
}

/* May the size table name the chunk of a wrapper site whose caller pair ce is not known?  Not
   when the pair is news: its slot empty (a caller never seen at the site: a new thread's chunks
   of a size the main thread's chunks had there were named the main thread's context until a
   re-check), or the pair learning towards another context.  A slot that holds another pair is
   a collision in the direct-mapped table: the size answers, as before, rather than two pairs
   scanning in turn for ever. */
static bool size_may_answer(entry_t ce, int ctx) {
  if (ce.e == NULL) return true;                                /* no caller word */
  if ((ce.v & KEY_MASK) != ce.key) return ce.v != 0;
  if (ce.v & AMBIGUOUS) return true;                            /* a wrapper of a wrapper */
  return ((ce.v >> KEY_BITS) & 0xFFF) == (uint64_t)ctx + 1;
}

/* Everything but the fast path: the size table, scans, learning.  v and caller: the site's word
   and its caller (0: none known) as the fast path read them; s NULL: no room for the site. */
static ca_noinline int context_slow(site_t* s, uint32_t v, uintptr_t caller, size_t n, const void* frame, const void* ret) {
  /* a leaf reached from a caller it never had (else this is a leaf's check) */
  bool stranger = SITE_STATE(v) == SITE_LEAF && caller != 0 && caller != atomic_load_explicit(&s->caller, ca_relaxed);
  entry_t ce = { 0 }, se = { 0 };
  if (SITE_STATE(v) == SITE_WRAPPER) {
    if (caller != 0) ce = entry_of(S.callers, CALLERS, (uintptr_t)ret, caller);   /* not known yet: learn */
    se = entry_of(S.sizes, SIZE_TABLE, (uintptr_t)ret, n);
    int ctx = entry_known(se.v, se.key);
    if (ctx >= 0 && size_may_answer(ce, ctx)) { count(&S.size_hits); return ctx; }
  }
  found_t f = scan(frame, ret);
  if (f.ctx < 0) return f.ctx;
  if (se.e != NULL) entry_learn(se.e, se.v, se.key, f.ctx);
  if (ce.e != NULL) entry_learn(ce.e, ce.v, ce.key, f.ctx);
  if (s == NULL) return f.ctx;                                /* no room for the site: sizes only */
  slot_learn(s, f.at1);
  if (stranger && (uint32_t)f.ctx + 1 == SITE_CTX(v))         /* the slot misled: forget it */
    atomic_store_explicit(&s->slot, SITE_WORD(0, 0, SLOT_NONE), ca_relaxed);
  if (SITE_STATE(v) != SITE_WRAPPER) site_learn(s, v, f);
  return f.ctx;
}

/* The fast path, for every chunk of a page or more and every sampled small chunk: a leaf site
   reached from the caller it was learned from, or a wrapper site's known caller, when this use
   is not a check. */
int _ca_nw_context_of(size_t n, const void* frame, const void* ret) {
  site_t* s = site_of((uintptr_t)ret);
  uint32_t v = SITE_WORD(0, 0, SITE_WRAPPER);
  uintptr_t caller = 0;
  if (ca_likely(s != NULL)) {
    v = atomic_load_explicit(&s->v, ca_relaxed);
    uint32_t slot = atomic_load_explicit(&s->slot, ca_relaxed);
    if (SITE_STATE(slot) == SLOT_KNOWN) caller = _ca_context_word(frame, SITE_CTX(slot));
    if (SITE_STATE(v) == SITE_LEAF) {
      if ((caller == 0 || caller == atomic_load_explicit(&s->caller, ca_relaxed)) && !verify_now()) {
        count(&S.site_hits);
        return (int)SITE_CTX(v) - 1;
      }
    } else if (SITE_STATE(v) == SITE_WRAPPER && caller != 0) {
      entry_t ce = entry_of(S.callers, CALLERS, (uintptr_t)ret, caller);
      int ctx = entry_known(ce.v, ce.key);
      if (ctx >= 0) { count(&S.caller_hits); return ctx; }
    }
  }
  return context_slow(s, v, caller, n, frame, ret);
}

/* fork(): no thread may hold the lock across it */
void _ca_nw_sites_fork_prepare(void) { _ca_lock(&S.lock); }
void _ca_nw_sites_fork_release(void) { _ca_unlock(&S.lock); }

void _ca_nw_sites_reset(void) {
  _ca_lock(&S.lock);
  memset(S.ctx, 0, sizeof S.ctx);
  for (int i = 0; i < CTX_SLOTS; i++) atomic_store_explicit(&S.slot[i], 0, ca_relaxed);
  for (int i = 0; i < SITES; i++) {
    atomic_store_explicit(&S.sites[i].ret, 0, ca_relaxed);
    atomic_store_explicit(&S.sites[i].v, 0, ca_relaxed);
    atomic_store_explicit(&S.sites[i].slot, 0, ca_relaxed);
    atomic_store_explicit(&S.sites[i].caller, 0, ca_relaxed);
  }
  for (int i = 0; i < SIZE_TABLE; i++) atomic_store_explicit(&S.sizes[i], 0, ca_relaxed);
  for (int i = 0; i < CALLERS; i++) atomic_store_explicit(&S.callers[i], 0, ca_relaxed);
  atomic_store_explicit(&S.nctx, 0, ca_relaxed);
  _ca_unlock(&S.lock);
}

void _ca_nw_sites_stats(ca_nw_site_stats_t* st) {
  st->scans = S.scans;
  st->scan_ns = S.scan_ns;
  st->site_hits = S.site_hits;
  st->caller_hits = S.caller_hits;
  st->size_hits = S.size_hits;
  st->leaf_sites = st->wrapper_sites = 0;
  for (int i = 0; i < SITES; i++) {
    uint32_t v = atomic_load_explicit(&S.sites[i].v, ca_relaxed);
    st->leaf_sites += SITE_STATE(v) == SITE_LEAF;
    st->wrapper_sites += SITE_STATE(v) == SITE_WRAPPER;
  }
}
