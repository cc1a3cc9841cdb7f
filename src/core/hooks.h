/* The one interface between the core allocator and the layers above it (colour layer,
   policies).  The core never includes their headers; they install a table of callbacks here.
   Every callback runs on a slow path only (a new span, a span given back, a large object), so
   with no hooks installed - or with policies switched off - the core runs bare.

   - span_memory: a span (or a large object's pages) is about to be used: the hook may replace
     the pages of [base, base + bytes) with memory of its choosing (pages of chosen cache colours)
     for the span's flavour.  Returns false when it did not, and the span stays ordinary memory.
   - span_released: the range is free again; called before the core would purge it, so a hook
     that placed special pages there can take them back first.
   - chunk: a large object was allocated or freed (the events a locality monitor samples). */
#ifndef CA_HOOKS_H
#define CA_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ca_chunk_event_e { CA_CHUNK_ALLOC, CA_CHUNK_FREE } ca_chunk_event_t;

typedef struct ca_hooks_s {
  bool (*span_memory)(void* base, size_t bytes, uint32_t flavour);
  void (*span_released)(void* base, size_t bytes, uint32_t flavour);
  void (*chunk)(ca_chunk_event_t event, void* p, size_t size);
} ca_hooks_t;

#pragma GCC visibility push(hidden)
extern const ca_hooks_t* _ca_hooks;
void _ca_hooks_install(const ca_hooks_t* hooks);   /* NULL uninstalls */
#pragma GCC visibility pop

#define CA_HOOK(name, ...) do { const ca_hooks_t* h_ = _ca_hooks; if (h_ != NULL && h_->name != NULL) h_->name(__VA_ARGS__); } while (0)

#endif
