/* The colour sets: the registry (a set is a slice [from/den, to/den) of the controlled level's
   colours: the first eighth of the L2 is (0, 1, 8), the rest (1, 8, 8); its id is the flavour the
   core allocates it as), the colour API's entry points, the core hooks that fill spans with
   pooled pages and take them back, reservation of a slice as a pollute buffer, and fork.
   Nothing is measured until the first set is registered: that starts the worker (worker.c).
   Until a set's pool has pages, its spans are ordinary memory (counted as fallbacks).  After
   fork() the child's pages are copy-on-write copies with new frames, so the child's pools are
   dropped and its sets serve ordinary memory until stocked again. */
#define _GNU_SOURCE
#include "layer.h"
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>

ca_colour_layer_t _ca_cs = { .wake_lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .worker_cpu = -1,
        .retry_ms = 1000, .file = { .fd = -1, .lock_fd = -1 }, .src = { .fd = -1 } };

int _ca_colour_state(void) { return atomic_load_explicit(&L.state, ca_acquire); }
int _ca_colour_count(void) { return _ca_colour_state() == CA_COLOURS_READY ? (int)L.cal.colours : -1; }

void _ca_cs_set_state(int s, const char* why) {
  if (why && !L.reason[0]) { ca_buf_t b = ca_buf(L.reason, sizeof L.reason); ca_buf_str(&b, why); }
  atomic_store_explicit(&L.state, s, ca_release);
  if (s == CA_COLOURS_UNAVAILABLE) {
    char line[256];
    ca_buf_t b = ca_buf(line, sizeof line);
    ca_buf_str(&b, "cache colours cannot be controlled here (");
    ca_buf_str(&b, L.reason);
    ca_buf_str(&b, "): coloured memory is ordinary memory");
    _ca_warn(line);
  }
}


/* ---- the core hooks ----------------------------------------------------------------------- */

/* What set id can hand out now (L.lock held): its pool, unless its slice audit has not vouched
   for it yet (then nothing). */
static ca_page_pool_t* vouched_pool(int id) {
  return L.sets[id].unvouched ? NULL : &L.sets[id].pool;
}

static bool hook_span_memory(void* base, size_t bytes, uint32_t flavour) {
  if (flavour == 0) {                                                        /* ordinary memory */
    _ca_protect_add(base, base, bytes);
    if (_ca_cs_client() != NULL) _ca_cs_client()->range(base, bytes, true, 0);
    return false;
  }
  if (flavour == CA_FLAVOUR_SPREAD) {               /* the client spreads it: of its flavour as it is */
    if (_ca_cs_client() != NULL) _ca_cs_client()->range(base, bytes, true, flavour);
    return true;
  }
  if (flavour > CA_COLOUR_SETS) return false;
  ca_colour_set_t* s = &L.sets[flavour];
  _ca_lock(&L.lock);
  ca_page_pool_t* pool = vouched_pool((int)flavour);
  bool ok = atomic_load_explicit(&L.state, ca_relaxed) == CA_COLOURS_READY && pool != NULL && _ca_pool_fill(pool, base, bytes);
  if (ok) s->filled_spans++; else s->fallback_spans++;
  /* the stock must cover a request it could not fill (up to STOCK_MAX): the next one of that size
     is then filled.  Once it is, the stock goes back to colour_pool: a polluter's buffer freed
     is kept whole for the next one (large.c), and a stock kept for it too held 4 MiB of a
     process's 13 (a 4 MiB buffer per round, bench/colour/vp.c) */
  size_t need = bytes / CA_OS_PAGE + STOCK_CHUNK / 8, stock0 = (size_t)_ca_colour_opt(CA_COPT_POOL) * 256;
  if (!ok && s->target < need) s->target = need < STOCK_MAX ? need : STOCK_MAX;
  if (ok && s->target > stock0) s->target = stock0;
  size_t stock = s->pool.count, target = s->target;
  _ca_unlock(&L.lock);
  if (stock < target / 2 || !ok) _ca_cs_wake_worker();
  return ok;
}

static void hook_span_released(void* base, size_t bytes, uint32_t flavour) {
  if (flavour == 0 || flavour == CA_FLAVOUR_SPREAD) {
    if (flavour == 0) _ca_protect_remove(base);
    if (_ca_cs_client() != NULL) _ca_cs_client()->range(base, bytes, false, flavour);
    return;
  }
  if (flavour > CA_COLOUR_SETS) return;
  _ca_lock(&L.lock);
  _ca_pool_take_back(&L.sets[flavour].pool, base, bytes);
  _ca_unlock(&L.lock);
}

static bool hook_span_ready(size_t bytes, uint32_t flavour) {
  if (flavour == CA_FLAVOUR_SPREAD) return true;
  return flavour >= 1 && flavour <= CA_COLOUR_SETS && atomic_load_explicit(&L.state, ca_relaxed) == CA_COLOURS_READY &&
         L.sets[flavour].pool.count >= bytes / CA_OS_PAGE;
}

static const ca_hooks_t colour_hooks = { hook_span_memory, hook_span_released, hook_span_ready };

void _ca_colour_fork_child(void) {
  /* the child's pooled pages are copies: their frames (colours) are not the parent's */
  atomic_store_explicit(&L.lock.v, 0, ca_relaxed);
  _ca_sim_fork(false);
  /* the worker does not exist here: it may have held the wake-up lock, or slept on the
     condition, at the fork (a child that asked for stock then waited on that lock for ever) */
  pthread_mutex_init(&L.wake_lock, NULL);
  pthread_cond_init(&L.wake, NULL);
  _ca_move_fork_child();
  for (int i = 1; i <= CA_COLOUR_SETS; i++) L.sets[i].pool.count = 0;
  L.worker_running = false;
  L.pace_from_ns = L.pace_cpu_ns = L.pace_program_ns = 0;   /* a new worker, on its own clock, */
  L.stocked_ns = L.stocked_cpu_ns = 0;          /* ... stocking the child's pools afresh */
  L.niced = false;
  atomic_store(&L.preparing, 0);                /* the threads waiting there are the parent's */
  _ca_protect_fork_child();
  _ca_colour_spread_fork_child();
  _ca_frames_fork_child();
  _ca_setfile_fork_child(&L.file);
  if (atomic_load_explicit(&L.state, ca_relaxed) == CA_COLOURS_READY)
    atomic_store_explicit(&L.state, CA_COLOURS_CALIBRATING, ca_relaxed);
}

void _ca_colour_fork_parent(void) { _ca_sim_fork(false); _ca_move_fork_release(); }

static void install_hooks(void) {
  static _Atomic(bool) done;
  if (atomic_exchange(&done, true)) return;
  _ca_hooks_install(&colour_hooks);
}

/* Record ordinary spans and large objects, from now on, to be kept out of a colour set once a
   policy arms protection (protect.c): those up to the L2's size, PROTECT_L2S times the L2. */
#define PROTECT_L2S 4
void _ca_colour_protect_default(void) {
  size_t l2 = 0;
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++)
    if (_ca_machine.levels[i].level == 2) l2 = _ca_machine.levels[i].size;
  if (l2 == 0 || _ca_colour_opt(CA_COPT_COLOURS) == 0) return;
  _ca_protect_init(l2, PROTECT_L2S * l2 / CA_OS_PAGE);
  install_hooks();
}

/* Set id (1..CA_COLOUR_SETS) when it is a slice at either end of the level, else one not used. */
static ca_colour_set_t end_slice(int id) {
  _ca_lock(&L.lock);
  ca_colour_set_t s = L.sets[id];
  _ca_unlock(&L.lock);
  if (s.from != 0 && s.to != s.den) s.used = false;
  return s;
}

/* Keep ordinary memory out of set id, a slice at either end of the level: the worker moves the
   recorded pages in its colours to the complement set.  0, or -1 with errno. */
int _ca_colour_reserve(int id) {
  if (_ca_colour_opt(CA_COPT_COLOURS) == 0 || atomic_load_explicit(&L.state, ca_acquire) == CA_COLOURS_UNAVAILABLE) { errno = ENOTSUP; return -1; }
  if (id < 1 || id > CA_COLOUR_SETS) { errno = EINVAL; return -1; }
  ca_colour_set_t s = end_slice(id);
  if (!s.used || (s.from == 0 && s.to == s.den)) { errno = EINVAL; return -1; }
  int comp = s.from == 0 ? _ca_colour_set(s.to, s.den, s.den) : _ca_colour_set(0, s.from, s.den);
  if (comp < 0) return -1;
  if (!_ca_protect_recording()) _ca_colour_protect_default();
  if (!_ca_protect_arm(id, comp)) { errno = EBUSY; return -1; }
  _ca_cs_wake_worker();
  return 0;
}

/* The first coloured allocation from a slice of at most a quarter at either end of the level
   reserves it, once per process (option colour_reserve): what a program confines there should
   evict nothing else.  Failure (another set reserved, colours off) changes nothing. */
void _ca_colour_reserve_first(int id) {
  static _Atomic(bool) tried;
  if (_ca_colour_opt(CA_COPT_RESERVE) == 0 || atomic_load_explicit(&tried, ca_relaxed)) return;
  ca_colour_set_t s = end_slice(id);
  if (!s.used || 4 * (s.to - s.from) > s.den) return;
  if (atomic_exchange(&tried, true)) return;
  int e = errno;
  _ca_colour_reserve(id);
  errno = e;
}


/* ---- registering sets ------------------------------------------------------------------------ */

/* A colour set id (the flavour), or -1 with errno. */
int _ca_colour_set(uint32_t from, uint32_t to, uint32_t den) {
  if (den == 0 || den > 64 || from >= to || to > den) { errno = EINVAL; return -1; }
  if (_ca_colour_opt(CA_COPT_COLOURS) == 0) { errno = ENOTSUP; return -1; }
  if (atomic_load_explicit(&L.state, ca_acquire) == CA_COLOURS_UNAVAILABLE) { errno = ENOTSUP; return -1; }
  _ca_lock(&L.lock);
  int id = -1;
  for (int i = 1; i <= CA_COLOUR_SETS && id < 0; i++)
    if (L.sets[i].used && L.sets[i].from == from && L.sets[i].to == to && L.sets[i].den == den) id = i;
  for (int i = 1; i <= CA_COLOUR_SETS && id < 0; i++)
    if (!L.sets[i].used) {
      L.sets[i] = (ca_colour_set_t){ .used = true, .from = from, .to = to, .den = den,
                                     .target = (size_t)_ca_colour_opt(CA_COPT_POOL) * 256 };
      L.generation++;
      id = i;
    }
  _ca_unlock(&L.lock);
  if (id < 0) { errno = ENOSPC; return -1; }
  _ca_cs_start_worker();
  return id;
}

/* The layer is wanted: calibrating from now on (the worker's start, or a waiting client's ask). */
void _ca_cs_ask(void) {
  int st = CA_COLOURS_OFF;
  if (L.asked_ns == 0) L.asked_ns = _ca_clock_ns() - L.born_ns;
  atomic_compare_exchange_strong(&L.state, &st, CA_COLOURS_CALIBRATING);
}

/* a client that wants colours now: every colour's eviction set */
bool _ca_cs_client_wants(void) {
  const ca_colour_client_t* c = _ca_cs_client();
  return c != NULL && (c->wants == NULL || c->wants());
}

/* a client alone that needs no colours yet: the worker gives it its time without the layer */
bool _ca_cs_client_waits(void) {
  return _ca_cs_client() != NULL && L.generation == 0 && !_ca_cs_client_wants();
}

/* The worker, started once (a set registered, or a client), else woken. */
void _ca_cs_start_worker(void) {
  _ca_lock(&L.lock);
  bool start = !L.worker_running;
  L.worker_running = true;
  _ca_unlock(&L.lock);
  if (!start) { _ca_cs_wake_worker(); return; }
  install_hooks();
  if (!_ca_cs_client_waits()) _ca_cs_ask();
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&a, 1u << 20);
  uint64_t mask;
  _ca_os_signals_block(&mask);                   /* the program's signals are never the worker's */
  bool made = pthread_create(&L.worker, &a, _ca_cs_worker_main, (void*)(intptr_t)sched_getcpu()) == 0;
  _ca_os_signals_restore(mask);
  if (!made) _ca_cs_set_state(CA_COLOURS_UNAVAILABLE, "no worker thread");
  pthread_attr_destroy(&a);
}

/* Wait until the set's pool holds `pages`, or timeout.  0, or -1 with errno. */
int _ca_colour_prepare(int id, size_t pages, int timeout_ms) {
  if (id < 1 || id > CA_COLOUR_SETS || !L.sets[id].used) { errno = EINVAL; return -1; }
  _ca_lock(&L.lock);
  if (L.sets[id].target < pages) L.sets[id].target = pages;
  _ca_unlock(&L.lock);
  atomic_fetch_add(&L.preparing, 1);
  _ca_cs_wake_worker();
  uint64_t deadline = _ca_clock_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
  int r;
  for (;;) {
    int st = atomic_load_explicit(&L.state, ca_acquire);
    if (st == CA_COLOURS_UNAVAILABLE) { errno = ENOTSUP; r = -1; break; }
    _ca_lock(&L.lock);
    ca_page_pool_t* pool = vouched_pool(id);
    size_t have = pool != NULL ? pool->count : 0;
    _ca_unlock(&L.lock);
    if (st == CA_COLOURS_READY && have >= pages) { r = 0; break; }
    if (_ca_clock_ms() >= deadline) { errno = ETIMEDOUT; r = -1; break; }
    pthread_mutex_lock(&L.wake_lock);
    _ca_cs_wait_wake(50);
    pthread_mutex_unlock(&L.wake_lock);
  }
  atomic_fetch_sub(&L.preparing, 1);
  return r;
}

/* Colour index of the page holding p among the known colours, or -1, measured pinned. */
int _ca_colour_of(const void* p) {
  if (atomic_load_explicit(&L.state, ca_acquire) != CA_COLOURS_READY) return -1;
  const void* page = (const void*)((uintptr_t)p & ~(uintptr_t)(CA_OS_PAGE - 1));
  int f = _ca_frames_colour(page);
  if (f >= 0) return f;
  cpu_set_t was;
  bool pinned = _ca_cs_pin_here(&was);
  int c = _ca_colour_of_live(&L.probe.base, &L.map, page, ~(uint64_t)0, 3, 3, CA_ASK_FULLY);
  if (pinned) sched_setaffinity(0, sizeof was, &was);
  _ca_frames_teach(page, c);
  return c;
}

/* Take one pooled page of set id (for recolouring); NULL when the pool is empty. */
void* _ca_colour_take_page(int id) {
  if (id < 1 || id > CA_COLOUR_SETS || atomic_load_explicit(&L.state, ca_acquire) != CA_COLOURS_READY) return NULL;
  _ca_lock(&L.lock);
  ca_page_pool_t* pool = vouched_pool(id);
  void* p = pool != NULL ? _ca_pool_pop(pool) : NULL;
  _ca_unlock(&L.lock);
  _ca_cs_wake_worker();
  return p;
}

void* _ca_colour_slot(void) {
  _ca_lock(&L.lock);
  void* slot = _ca_pool_slot();
  _ca_unlock(&L.lock);
  return slot;
}

/* A recoloured page's old frame, parked at slot, is of set id: it joins that set's pool (made
   writable again: it was parked read-only), after the pool's re-test if `test` (test_kept), or
   the slot is given back unused (id 0). */
void _ca_colour_keep_frame(int id, void* slot, bool test) {
  bool writable = id > 0 && _ca_syscall6(SYS_mprotect, (long)slot, CA_OS_PAGE, PROT_READ | PROT_WRITE, 0, 0, 0) == 0;
  _ca_lock(&L.lock);
  if (!writable) _ca_pool_unslot(slot);
  else if (test && K.n < KEPT_MAX) { K.page[K.n] = slot; K.set[K.n++] = (uint8_t)id; }
  else if (!test && _ca_pool_push(&L.sets[id].pool, slot)) { L.sets[id].pool.returned++; L.frames_kept++; }
  else _ca_pool_drop(slot);
  _ca_unlock(&L.lock);
}

/* A parked frame nobody keeps: released, its slot free again. */
void _ca_colour_drop_slot(void* slot) {
  _ca_lock(&L.lock);
  _ca_pool_drop(slot);
  _ca_unlock(&L.lock);
}

/* A page was recoloured: by mremap, it is a VMA of its own from now on (pool.c caps those). */
void _ca_colour_note_recolour(uint64_t ns, bool remapped) {
  _ca_lock(&L.lock);
  L.recolours++;
  L.recolour_ns += ns;
  if (remapped) _ca_pool_note_moved(1);
  _ca_unlock(&L.lock);
}

