/* The core's side of hooks.h: the tables the layers install (read on slow paths), and the
   functions they call to allocate memory of a flavour, ask what a pointer is, and change a live
   object's placement. */
#include "alloc.h"

const ca_hooks_t*  _ca_hooks;
const ca_policy_t* _ca_policy;
int64_t            _ca_sample_period;

void _ca_hooks_install(const ca_hooks_t* hooks) { __atomic_store_n(&_ca_hooks, hooks, __ATOMIC_RELEASE); }
/* every ordinary heap looks at the policy from its next generic call (heap.c) */
void _ca_policy_install(const ca_policy_t* policy) {
  __atomic_store_n(&_ca_policy, policy, __ATOMIC_RELEASE);
  atomic_fetch_add_explicit(&_ca_route_gen, 1, ca_release);
}

/* each heap reads it at its next sample */
void _ca_sample_set_period(int64_t bytes) { __atomic_store_n(&_ca_sample_period, bytes < 0 ? 0 : bytes, __ATOMIC_RELAXED); }
int64_t _ca_sample_period_bytes(void) { return __atomic_load_n(&_ca_sample_period, __ATOMIC_RELAXED); }

void _ca_free_chunk(void* p) { _ca_free(p); }

uint32_t _ca_class_of(size_t n) { return _ca_size_class(n); }

bool _ca_large_info(const void* p, size_t* size, uint8_t* flavour) {
  ca_segment_t* seg = _ca_segment_of(p);
  if (seg == NULL || seg->kind != CA_SEG_LARGE || seg->large_ptr != p || (seg->spans[0].flags & CA_SPAN_UNUSED)) return false;
  if (size) *size = seg->large_size;
  if (flavour) *flavour = __atomic_load_n(&seg->flavour, __ATOMIC_ACQUIRE);
  return true;
}

/* Read by the object's free (large.c), which the caller keeps from running meanwhile. */
void _ca_large_set_flavour(void* p, uint8_t flavour) {
  ca_segment_t* seg = _ca_segment_of(p);
  if (seg != NULL && seg->kind == CA_SEG_LARGE && seg->large_ptr == p) __atomic_store_n(&seg->flavour, flavour, __ATOMIC_RELEASE);
}

uint8_t _ca_flavour_of(const void* p) {
  ca_segment_t* seg = _ca_segment_of(p);
  if (seg == NULL) return 0;
  return seg->kind == CA_SEG_LARGE ? __atomic_load_n(&seg->flavour, __ATOMIC_ACQUIRE) : _ca_span_of(seg, p)->flavour;
}

uint32_t _ca_block_size_of(const void* p) {
  ca_segment_t* seg = _ca_segment_of(p);
  return seg == NULL || seg->kind == CA_SEG_LARGE ? 0 : _ca_span_of(seg, p)->block_size;
}

uint8_t* _ca_span_memory_of(const void* p) {
  ca_segment_t* seg = _ca_segment_of(p);
  return seg == NULL || seg->kind == CA_SEG_LARGE ? NULL : _ca_span_base(seg, _ca_span_of(seg, p));
}

size_t _ca_machine_l2(void) {
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++)
    if (_ca_machine.levels[i].level == 2) return _ca_machine.levels[i].size;
  return (size_t)1 << 20;
}

uint64_t _ca_process_seed(void) { return _ca_process.seed; }

void _ca_started(void) { _ca_ensure_init(); }
