/* Allocation contexts for NightWatch (sites.c): call site, caller and size tables in front of stack scans. */
#ifndef CA_SITES_H
#define CA_SITES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "../monitor/context.h"

#define CA_NW_CONTEXTS 1024

typedef struct ca_nw_context_s {
  uint64_t  hash;
  uintptr_t frames[CA_CONTEXT_FRAMES];   /* innermost first */
  uint32_t  nframes;
  bool      in_libc;                     /* glibc's own buffers */
} ca_nw_context_t;

typedef struct ca_nw_site_stats_s {
  uint64_t scans, scan_ns, site_hits, caller_hits, size_hits, leaf_sites, wrapper_sites;
} ca_nw_site_stats_t;

#pragma GCC visibility push(hidden)
/* The context of a chunk of n bytes requested from call site `ret` by an entry point whose frame
   is `frame`; -1 when the tables are full. */
int  _ca_nw_context_of(size_t n, const void* frame, const void* ret);
/* The context id of a hash (created on first use); -1 when the table is full. */
int  _ca_nw_context(uint64_t hash, const uintptr_t* frames, uint32_t nframes, bool in_libc);
const ca_nw_context_t* _ca_nw_context_info(int id);
int  _ca_nw_contexts(void);
void _ca_nw_sites_fork_prepare(void);          /* fork: the tables' lock */
void _ca_nw_sites_fork_release(void);
void _ca_nw_sites_reset(void);
void _ca_nw_sites_stats(ca_nw_site_stats_t* st);
#pragma GCC visibility pop

#endif
