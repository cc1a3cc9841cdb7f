/* Allocation contexts: a hash of the ~10 innermost return addresses of the call stack that
   reached malloc, outside chromalloc.

   Unwinding with DWARF call-frame information (_Unwind_Backtrace) is exact but costs ~3.8 us
   for 10 frames here - more than allocating the chunk.  Walking frame pointers is cheap but
   most distribution binaries have none.  So this is a stack *scan*: read the words above the
   stack pointer (at most 4 KiB, never past the thread's stack top) and keep those that are
   return addresses, i.e. point into executable code of a loaded object just after a call
   instruction (e8 rel32, ff /2 in its register, disp8, disp32 and SIB forms).  The code ranges
   come from dl_iterate_phdr (which does not allocate) and are rebuilt when an address falls
   outside them (dlopen) at most once per 4096 captures.  The bytes before a word can look like
   a call by chance, so every slot a "call" names (a PLT stub's GOT entry, `call *disp32(%rip)`)
   is read only when it lies in a loaded segment.

   A scan also meets stale return addresses, left in unused stack slots by earlier calls.  So
   the frames must form a chain: the first is the entry point's own return address (the
   program's call site, known exactly), and a word is the next frame only when the call before
   it leads to the function holding the previous frame: a direct call (`call rel32`, through a
   PLT stub or `call *GOT` to the real function) whose target lies at most MAX_FUNC bytes before
   the previous return address.  Indirect calls cannot be checked and are taken as they come.
   Only when no direct call in the window leads to the previous frame is a word after an
   indirect call taken, and only when a later direct call leads to the function holding it.
   A stale word rarely passes (it would have to return from a call to that same function), so
   the same call path gives the same hash run after run; a tail call ends the chain early (its
   caller's call leads elsewhere), which makes that context shorter, not different.  For C++,
   libstdc++'s `operator new` is one more frame; the frames above it still differ per call
   site, so `new` does not make one context of all. */
#define _GNU_SOURCE
#include "context.h"
#include "next.h"
#include "../core/hooks.h"
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#define MAX_RANGES 256
#define SCAN_WORDS 2048
#define MAX_FUNC   (256 * 1024)                 /* a return address this far into its function */
#define MAX_CANDIDATES 128

typedef struct { uintptr_t lo, hi; bool libc; } code_range_t;

/* The loaded objects' segments, rebuilt into the table not in use and then published: a capture
   reads one table throughout (a rebuild in another thread meanwhile writes the other one). */
typedef struct {
  int          ncode, nread;
  code_range_t code[MAX_RANGES];              /* executable segments, by start */
  code_range_t read[MAX_RANGES];              /* every readable segment (code, data, GOT), by start */
} range_table_t;

static range_table_t            tables[2];
static _Atomic(range_table_t*)  current;       /* NULL: not built */
static ca_lock_t                ranges_lock;
static _Atomic(uint32_t)        misses_since_build;

__thread uintptr_t _ca_stack_lo __attribute__((tls_model("initial-exec")));
__thread uintptr_t _ca_stack_top __attribute__((tls_model("initial-exec")));

static int collect(struct dl_phdr_info* info, size_t size, void* arg) {
  range_table_t* t = arg;
  const char* name = info->dlpi_name ? info->dlpi_name : "";
  const char* slash = strrchr(name, '/');
  bool libc = strncmp(slash ? slash + 1 : name, "libc.so", 7) == 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    code_range_t r = { info->dlpi_addr + ph->p_vaddr, info->dlpi_addr + ph->p_vaddr + ph->p_memsz, libc };
    if ((ph->p_flags & PF_R) && t->nread < MAX_RANGES) t->read[t->nread++] = r;
    if ((ph->p_flags & PF_X) && t->ncode < MAX_RANGES) t->code[t->ncode++] = r;
  }
  return 0;
}

static void sort_ranges(code_range_t* r, int n) {       /* insertion sort by start */
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && r[j].lo < r[j - 1].lo; j--) { code_range_t t = r[j]; r[j] = r[j - 1]; r[j - 1] = t; }
}

static void build_ranges(void) {
  _ca_lock(&ranges_lock);
  range_table_t* t = atomic_load_explicit(&current, ca_relaxed) == &tables[0] ? &tables[1] : &tables[0];
  t->ncode = t->nread = 0;
  dl_iterate_phdr(collect, t);
  sort_ranges(t->code, t->ncode);
  sort_ranges(t->read, t->nread);
  atomic_store_explicit(&misses_since_build, 0, ca_relaxed);
  atomic_store_explicit(&current, t, ca_release);
  _ca_unlock(&ranges_lock);
}

void _ca_context_refresh(void) { build_ranges(); }

/* fork(): no thread may hold the lock across it */
void _ca_context_fork_prepare(void) { _ca_lock(&ranges_lock); }
void _ca_context_fork_release(void) { _ca_unlock(&ranges_lock); }

/* the range of r[0..n) holding a, or NULL */
static const code_range_t* find_range(const code_range_t* r, int n, uintptr_t a) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (a < r[mid].lo) hi = mid - 1;
    else if (a >= r[mid].hi) lo = mid + 1;
    else return &r[mid];
  }
  return NULL;
}

/* the code range holding pc, or NULL */
static const code_range_t* range_of(const range_table_t* T, uintptr_t pc) { return find_range(T->code, T->ncode, pc); }

/* The word at a, when [a, a + 8) lies in a loaded segment, else 0.  The bytes before a return
   address can look like a call by chance (they belong to another instruction, or the word is
   stale); the slot such a "call" names can be anywhere (cc1 faulted on one). */
static uintptr_t word_at(const range_table_t* T, uintptr_t a) {
  const code_range_t* r = find_range(T->read, T->nread, a);
  return r != NULL && a + sizeof(uintptr_t) <= r->hi ? *(const uintptr_t*)a : 0;
}

/* Is there a call instruction ending just before pc? */
static bool after_call(uintptr_t pc, uintptr_t lo) {
  if (pc - lo < 7) return false;
  const uint8_t* c = (const uint8_t*)pc;
  if (c[-5] == 0xE8) return true;                                    /* call rel32 */
  if (c[-2] == 0xFF && (c[-1] & 0xF8) == 0xD0) return true;           /* call reg */
  if (c[-3] == 0xFF && (c[-2] & 0xF8) == 0x50) return true;           /* call [reg+d8] */
  if (c[-6] == 0xFF && (c[-5] == 0x15 || (c[-5] & 0xF8) == 0x90)) return true;  /* [rip+d32], [reg+d32] */
  if (c[-4] == 0xFF && c[-3] == 0x54) return true;                    /* call [sib+d8] */
  if (c[-7] == 0xFF && c[-6] == 0x94) return true;                    /* call [sib+d32] */
  if (c[-3] == 0xFF && c[-2] == 0x14) return true;                    /* call [sib] */
  return false;
}

/* The function a direct call ending at pc calls (through a PLT stub or a GOT slot to the real
   function); 0 when the call is indirect or leads outside known code. */
static uintptr_t call_target(const range_table_t* T, uintptr_t pc) {
  const uint8_t* c = (const uint8_t*)pc;
  uintptr_t t;
  if (c[-5] == 0xE8) {                                              /* call rel32 */
    int32_t rel;
    memcpy(&rel, c - 4, 4);
    t = pc + (uintptr_t)(intptr_t)rel;
    const code_range_t* r = range_of(T, t);
    if (r == NULL) return 0;
    if (t + 16 > r->hi) return t;                                    /* too near the end for a stub */
    const uint8_t* s = (const uint8_t*)t;
    size_t k = s[0] == 0xF3 && s[1] == 0x0F && s[2] == 0x1E && s[3] == 0xFA ? 4 : 0;   /* endbr64 */
    if (s[k] == 0xF2) k++;                                           /* bnd */
    if (s[k] != 0xFF || s[k + 1] != 0x25) return t;                  /* not a PLT stub */
    int32_t d;
    memcpy(&d, s + k + 2, 4);
    t = word_at(T, t + k + 6 + (uintptr_t)(intptr_t)d);                 /* its GOT slot */
  } else if (c[-6] == 0xFF && c[-5] == 0x15) {                       /* call *disp32(%rip) */
    int32_t d;
    memcpy(&d, c - 4, 4);
    t = word_at(T, pc + (uintptr_t)(intptr_t)d);
  } else {
    return 0;
  }
  return range_of(T, t) != NULL ? t : 0;
}

static bool direct_call(uintptr_t pc) {
  const uint8_t* c = (const uint8_t*)pc;
  return c[-5] == 0xE8 || (c[-6] == 0xFF && c[-5] == 0x15);
}

/* Did the (direct) call before `pc` lead to the function holding `inner`? */
static bool chains(const range_table_t* T, uintptr_t pc, uintptr_t inner) {
  uintptr_t t = call_target(T, pc);
  return t != 0 && t <= inner && inner - t < MAX_FUNC;
}

/* glibc's pthread_getattr_np allocates (calloc; fopen of /proc/self/maps for the main thread)
   while it holds the thread's own lock.  An allocation there that the policy sampled would scan
   the stack, and find_stack below calls pthread_getattr_np again and waits for that lock for
   ever (java hung at start-up).  So what it allocates is never placed or sampled. */
ca_interpose int pthread_getattr_np(pthread_t t, pthread_attr_t* a) {
  bool was = _ca_no_policy;
  _ca_no_policy = true;                      /* before the lookup too: dlsym may allocate */
  int (*f)(pthread_t, pthread_attr_t*) = NEXT(int (*)(pthread_t, pthread_attr_t*), pthread_getattr_np);
  int r = f != NULL ? f(t, a) : ENOSYS;
  _ca_no_policy = was;
  return r;
}

/* this thread's stack, [_ca_stack_lo, _ca_stack_top) (_ca_stack_lo 0: the main thread's when
   glibc cannot say, open below); not learned from a signal stack */
static void find_stack(uintptr_t sp) {
  pthread_attr_t a;
  void* base = NULL;
  size_t size = 0;
  bool known = pthread_getattr_np(pthread_self(), &a) == 0;   /* may allocate: it is under our guard */
  if (known) {
    pthread_attr_getstack(&a, &base, &size);
    pthread_attr_destroy(&a);
  }
  extern void* __libc_stack_end;
  uintptr_t end = (uintptr_t)__libc_stack_end;
  if (known && base != NULL) {
    if (sp < (uintptr_t)base || sp >= (uintptr_t)base + size) return;   /* on another stack */
    _ca_stack_lo = (uintptr_t)base;
    _ca_stack_top = (uintptr_t)base + size;
    if (end > sp && end < _ca_stack_top) _ca_stack_top = end;   /* main thread: no frames in argv, envp, auxv */
    return;
  }
  _ca_stack_lo = 0;
  _ca_stack_top = end > sp ? end : sp;                    /* argv lies above */
}

/* Is sp on this thread's own stack (not a signal stack, where the words above may be unmapped)? */
static bool on_stack(uintptr_t sp) { return sp >= _ca_stack_lo && sp < _ca_stack_top; }

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}

static void add_frame(ca_context_t* ctx, uintptr_t pc, uint64_t* h) {
  ctx->frames[ctx->nframes++] = pc;
  *h = mix(*h, pc);
}

ca_noinline void _ca_context_capture(ca_context_t* ctx, const void* from, const void* ret) {
  uintptr_t here = (uintptr_t)__builtin_frame_address(0);
  uintptr_t sp = from != NULL && (uintptr_t)from > here ? (uintptr_t)from : here;
  ctx->nframes = 0;
  ctx->at1 = 0;
  ctx->hash = 0;
  ctx->in_libc = false;
  const range_table_t* T = atomic_load_explicit(&current, ca_acquire);
  if (T == NULL) { build_ranges(); T = atomic_load_explicit(&current, ca_acquire); }
  if (_ca_stack_top == 0) find_stack(sp);
  uintptr_t end = on_stack(sp) ? _ca_stack_top : sp;
  if (end > sp + SCAN_WORDS * sizeof(uintptr_t)) end = sp + SCAN_WORDS * sizeof(uintptr_t);
  /* the words that return just after a call, in stack order */
  uintptr_t cand[MAX_CANDIDATES];
  uint16_t off[MAX_CANDIDATES];                       /* byte offset of each from sp */
  int nc = 0;
  bool unknown = false;
  for (const uintptr_t* w = (const uintptr_t*)sp; (uintptr_t)(w + 1) <= end && nc < MAX_CANDIDATES; w++) {
    uintptr_t pc = *w;
    if (pc < 4096) continue;
    const code_range_t* r = range_of(T, pc);
    if (r == NULL) {
      /* code the list does not know (dlopen since the last build) would look like data */
      if (pc >= 0x400000 && (pc >> 47) == 0 && (pc & 7) != 0) unknown = true;
      continue;
    }
    if (after_call(pc, r->lo)) { off[nc] = (uint16_t)((uintptr_t)w - sp); cand[nc++] = pc; }
  }
  uint64_t h = 0x84222325CBF29CE4ull;
  const code_range_t* r0 = range_of(T, ret != NULL ? (uintptr_t)ret : nc > 0 ? cand[0] : 0);
  if (r0 != NULL) {                                  /* the program's call site */
    ctx->in_libc = r0->libc;
    add_frame(ctx, ret != NULL ? (uintptr_t)ret : cand[0], &h);
  }
  /* the chain: the next frame is the first direct call leading to the previous frame's
     function; only when there is none, a word after an indirect call, when a later direct
     call leads to it */
  for (int at = 0; ctx->nframes > 0 && ctx->nframes < CA_CONTEXT_FRAMES && at < nc;) {
    uintptr_t prev = ctx->frames[ctx->nframes - 1];
    int next = -1, ind = -1;
    for (int i = at; i < nc && next < 0; i++) {
      if (cand[i] == prev) continue;
      if (!direct_call(cand[i])) { if (ind < 0) ind = i; continue; }
      if (chains(T, cand[i], prev)) next = i;
    }
    if (next < 0) {
      /* reached by an indirect call: the first word after one that a later direct call leads
         to.  A word after an indirect call that nothing leads to is stale: the next one is
         tried (one left above main by start-up code cut the first contexts of pv requests at
         main, and later ones, its slot overwritten, went on to _start: two contexts for one
         call path) */
      int via = -1;
      for (int j = ind; j >= 0 && j < nc && via < 0; j++) {
        if (cand[j] == prev || direct_call(cand[j])) continue;
        for (int i = j + 1; i < nc && via < 0; i++)
          if (direct_call(cand[i]) && chains(T, cand[i], cand[j])) { via = j; next = i; }
      }
      if (via < 0) break;
      if (ctx->nframes == 1 && sp == (uintptr_t)from) ctx->at1 = off[via];
      add_frame(ctx, cand[via], &h);
      if (ctx->nframes == CA_CONTEXT_FRAMES) break;
    }
    if (ctx->nframes == 1 && sp == (uintptr_t)from) ctx->at1 = off[next];
    add_frame(ctx, cand[next], &h);
    at = next + 1;
  }
  ctx->hash = h | 1;
  if (unknown && atomic_fetch_add_explicit(&misses_since_build, 1, ca_relaxed) >= 4096) build_ranges();
}

/* the first read on this thread: find its stack (a thread that never allocated a chunk NightWatch
   scanned does not know it yet) */
ca_noinline uintptr_t _ca_context_word_first(const void* from, uint32_t at) {
  find_stack((uintptr_t)from);
  return _ca_stack_top != 0 ? _ca_context_word(from, at) : 0;
}

void _ca_context_symbol(uintptr_t pc, char* out, size_t len) {
  ca_buf_t b = ca_buf(out, len);
  Dl_info info;
  if (pc != 0 && dladdr((void*)(pc - 1), &info) != 0) {
    const char* obj = info.dli_fname ? info.dli_fname : "?";
    const char* slash = strrchr(obj, '/');
    if (slash) obj = slash + 1;
    if (info.dli_sname != NULL) {
      ca_buf_str(&b, info.dli_sname);
      ca_buf_str(&b, "+");
      ca_buf_hex(&b, pc - (uintptr_t)info.dli_saddr);
    } else {
      ca_buf_hex(&b, pc - (uintptr_t)info.dli_fbase);
    }
    ca_buf_str(&b, " (");
    ca_buf_str(&b, obj[0] ? obj : "main");
    ca_buf_str(&b, ")");
    return;
  }
  ca_buf_hex(&b, pc);
}
