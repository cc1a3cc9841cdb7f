/* Allocation contexts: a hash of the ~10 innermost return addresses of the call stack that
   reached malloc, outside chromalloc.

   Unwinding with DWARF call-frame information (_Unwind_Backtrace) is exact but costs ~3.8 us
   for 10 frames here - more than allocating the chunk.  Walking frame pointers is cheap but
   most distribution binaries have none.  So this is a stack *scan*: read the words above the
   stack pointer (at most 4 KiB, never past the thread's stack top) and keep those that are
   return addresses, i.e. point into executable code of a loaded object just after a call
   instruction (e8 rel32, ff /2 in its register, disp8, disp32 and SIB forms).  The code ranges
   come from dl_iterate_phdr (which does not allocate) and are rebuilt when an address falls
   outside them (dlopen) at most once per 4096 captures.

   A scan may also pick up stale return addresses left in unused stack slots by earlier calls;
   they are as deterministic as the code path that left them, so the same call path still gives
   the same hash, but a hash is a context fingerprint, not an exact backtrace.  The scan starts
   at the frame of chromalloc's entry point (malloc's slow path or calloc, which keep a frame
   pointer), so nothing left in chromalloc's own frames below it is read, and the first frame
   is the program's call site.  For C++, libstdc++'s `operator new` is one more frame; the
   frames above it still differ per call site, so `new` does not make one context of all. */
#define _GNU_SOURCE
#include "context.h"
#include "../core/internal.h"
#include "../core/buf.h"
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#define MAX_RANGES 256
#define SCAN_WORDS 512

typedef struct { uintptr_t lo, hi; bool libc; } code_range_t;

static code_range_t     ranges[MAX_RANGES];
static _Atomic(int)     nranges = -1;          /* -1: not built */
static ca_lock_t        ranges_lock;
static _Atomic(uint32_t) misses_since_build;

static __thread uintptr_t stack_top __attribute__((tls_model("initial-exec")));

static int collect(struct dl_phdr_info* info, size_t size, void* arg) {
  int* n = arg;
  for (int i = 0; i < info->dlpi_phnum && *n < MAX_RANGES; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    const char* name = info->dlpi_name ? info->dlpi_name : "";
    const char* slash = strrchr(name, '/');
    ranges[*n] = (code_range_t){ lo, lo + ph->p_memsz, strncmp(slash ? slash + 1 : name, "libc.so", 7) == 0 };
    (*n)++;
  }
  return 0;
}

static void build_ranges(void) {
  _ca_lock(&ranges_lock);
  atomic_store_explicit(&nranges, 0, ca_release);      /* readers see no ranges meanwhile */
  int n = 0;
  dl_iterate_phdr(collect, &n);
  for (int i = 1; i < n; i++)                           /* insertion sort by start */
    for (int j = i; j > 0 && ranges[j].lo < ranges[j - 1].lo; j--) {
      code_range_t t = ranges[j]; ranges[j] = ranges[j - 1]; ranges[j - 1] = t;
    }
  atomic_store_explicit(&misses_since_build, 0, ca_relaxed);
  atomic_store_explicit(&nranges, n, ca_release);
  _ca_unlock(&ranges_lock);
}

void _ca_context_refresh(void) { build_ranges(); }

/* the range holding pc, or NULL */
static const code_range_t* range_of(uintptr_t pc, int n) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (pc < ranges[mid].lo) hi = mid - 1;
    else if (pc >= ranges[mid].hi) lo = mid + 1;
    else return &ranges[mid];
  }
  return NULL;
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

static uintptr_t find_stack_top(uintptr_t sp) {
  pthread_attr_t a;
  void* base = NULL;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &a) == 0) {   /* may allocate: it is under our guard */
    pthread_attr_getstack(&a, &base, &size);
    pthread_attr_destroy(&a);
  }
  uintptr_t top = (uintptr_t)base + size;
  if (base == NULL || sp >= top || sp < (uintptr_t)base) {
    extern void* __libc_stack_end;
    top = (uintptr_t)__libc_stack_end;                  /* main thread: argv lies above */
    if (sp >= top) top = sp;                            /* unknown: scan nothing */
  }
  return top;
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}

ca_noinline void _ca_context_capture(ca_context_t* ctx, const void* from) {
  uintptr_t here = (uintptr_t)__builtin_frame_address(0);
  uintptr_t sp = from != NULL && (uintptr_t)from > here ? (uintptr_t)from : here;
  ctx->nframes = 0;
  ctx->hash = 0;
  ctx->in_libc = false;
  int n = atomic_load_explicit(&nranges, ca_acquire);
  if (n < 0) { build_ranges(); n = atomic_load_explicit(&nranges, ca_acquire); }
  if (stack_top == 0) stack_top = find_stack_top(sp);
  uintptr_t end = stack_top;
  if (end > sp + SCAN_WORDS * sizeof(uintptr_t)) end = sp + SCAN_WORDS * sizeof(uintptr_t);
  uint64_t h = 0x84222325CBF29CE4ull;
  bool unknown = false;
  for (const uintptr_t* w = (const uintptr_t*)sp; (uintptr_t)(w + 1) <= end && ctx->nframes < CA_CONTEXT_FRAMES; w++) {
    uintptr_t pc = *w;
    if (pc < 4096) continue;
    const code_range_t* r = range_of(pc, n);
    if (r == NULL) {
      /* code the list does not know (dlopen since the last build) would look like data */
      if (pc >= 0x400000 && (pc >> 47) == 0 && (pc & 7) != 0) unknown = true;
      continue;
    }
    if (!after_call(pc, r->lo)) continue;
    if (ctx->nframes == 0) ctx->in_libc = r->libc;
    ctx->frames[ctx->nframes++] = pc;
    h = mix(h, pc);
  }
  ctx->hash = h | 1;
  if (unknown && atomic_fetch_add_explicit(&misses_since_build, 1, ca_relaxed) >= 4096) build_ranges();
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
