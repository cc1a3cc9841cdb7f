/* The PMU backend of the locality monitor (pmu.c): where the hardware can say which level of the
   memory hierarchy served a load, the monitor can use sampled data addresses instead of page
   traps and timed reloads.  Two sources, both through perf_event_open(2):

     AMD IBS op     the `ibs_op` PMU: every Nth dispatched op is tagged; a load or store reports
                    its linear address and whether it missed the L1d / the L2 (IbsOpData3) and
                    where the data came from (IbsOpData2).  Recent kernels decode this into
                    PERF_SAMPLE_DATA_SRC; the raw registers come with PERF_SAMPLE_RAW.
     Intel PEBS     the `mem-loads` event of the `cpu` (or hybrid `cpu_core`) PMU: load-latency
                    sampling, with address, latency (WEIGHT) and data source (DATA_SRC).

   A thread opens the event for itself (pid 0, cpu -1) and maps its ring: one header page
   (struct perf_event_mmap_page) and 2^k data pages into which the kernel writes records.  The
   kernel advances data_head (read with acquire) and never writes past data_tail, which the
   reader advances (stored with release) after consuming.  Head and tail are byte counters that
   only grow; the position in the ring is the counter modulo the data size.  A record is a
   struct perf_event_header {u32 type; u16 misc; u16 size} and `size` bytes in all, 8-aligned,
   and may wrap around the end of the data area.

   _ca_pmu_parse is the pure part: it walks the records between a tail and a head in such a
   buffer and decodes PERF_RECORD_SAMPLE fields in the ABI order of linux/perf_event.h into
   ca_pmu_sample_t, with the level that served the access reduced to the classes the colour
   layer cares about.  It is tested with recorded bytes (tests/unit/test_pmu.c).  Nothing here
   allocates: the info, ring and sample arrays are the caller's. */
#ifndef CA_PMU_H
#define CA_PMU_H

#include <linux/perf_event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ca_pmu_kind_e { CA_PMU_NONE, CA_PMU_IBS_OP, CA_PMU_PEBS_LDLAT } ca_pmu_kind_t;

/* Where a sampled access was served from.  L1, LFB (a line fill buffer / miss-handling buffer
   already fetching the line) and L2 are hits for the colour layer, which controls the L2; the
   others are misses except UNKNOWN. */
typedef enum ca_pmu_level_e {
  CA_PMU_UNKNOWN = 0,   /* no data source (not a memory op, NA, I/O, uncached) */
  CA_PMU_L1,
  CA_PMU_LFB,
  CA_PMU_L2,
  CA_PMU_L3,            /* L3 or any other cache beyond the L2 (a peer's, a remote node's) */
  CA_PMU_BEYOND_L2,     /* missed the L2; where it came from was not reported */
  CA_PMU_DRAM,          /* memory: local or remote DRAM, PMEM, CXL (see `remote`) */
  CA_PMU_LEVELS
} ca_pmu_level_t;

#define CA_PMU_F_IBS        1u     /* PERF_SAMPLE_RAW holds AMD IBS op registers */
#define CA_PMU_RING_PAGES   8      /* data pages of a thread's ring (a power of two) */
#define CA_PMU_RECORD_MAX   512    /* a wrapped sample larger than this is skipped */

typedef struct ca_pmu_info_s {
  ca_pmu_kind_t          kind;
  uint32_t               flags;    /* CA_PMU_F_* for the parser */
  struct perf_event_attr attr;     /* the sampling event; sample_period is set at open */
  struct perf_event_attr leader;   /* Intel mem-loads-aux group leader, when leader.size != 0 */
  char                   name[32];     /* "ibs_op", "cpu/mem-loads" */
  char                   reason[128];  /* why there is no backend (empty when there is one) */
} ca_pmu_info_t;

typedef struct ca_pmu_sample_s {
  uint64_t       addr;       /* data linear address, never 0 (samples without one are dropped) */
  uint64_t       ip;
  uint64_t       phys_addr;  /* PERF_SAMPLE_PHYS_ADDR when sampled (privileged), else 0 */
  uint64_t       data_src;   /* perf_mem_data_src as the kernel wrote it, 0 when not sampled */
  uint32_t       pid, tid;
  uint32_t       weight;     /* load latency in cycles (PEBS) or IBS DC miss latency; 0 unknown */
  ca_pmu_level_t level;
  bool           remote;     /* the source says remote: another node, or another core's cache */
} ca_pmu_sample_t;

typedef struct ca_pmu_stats_s {
  uint64_t records;          /* records consumed, of every type */
  uint64_t samples;          /* PERF_RECORD_SAMPLE records decoded (kept or not) */
  uint64_t no_addr;          /* samples dropped: no data address */
  uint64_t lost;             /* samples the kernel could not write (PERF_RECORD_LOST) */
  uint64_t throttle, unthrottle;
  uint64_t other;            /* other record types, skipped by size */
  uint64_t malformed;        /* bad sizes: the rest of the buffer was skipped */
  uint64_t oversize;         /* wrapped samples larger than CA_PMU_RECORD_MAX, skipped */
} ca_pmu_stats_t;

typedef struct ca_pmu_ring_s {
  int            fd, leader_fd;    /* -1 when closed / no group leader */
  void*          base;             /* perf_event_mmap_page, then the data pages */
  size_t         map_bytes;
  const uint8_t* data;
  uint64_t       data_size;        /* a power of two */
  uint64_t       sample_type;
  uint32_t       flags;
} ca_pmu_ring_t;

#pragma GCC visibility push(hidden)
/* Which backend works here: reads sysfs and opens (then closes) the event once.  False with a
   one-line info->reason when there is none.  Keeps errno. */
bool   _ca_pmu_detect(ca_pmu_info_t* info);
/* Open info's event for the calling thread with a sampling period, map its ring and enable
   it.  0, or the errno of the step that failed (the ring is then closed; ENODEV: no event).
   A ring is locked memory: 36 KiB of the user's perf_event_mlock_kb (516 KiB by default, then
   RLIMIT_MEMLOCK).  The fd and mapping survive fork(); a child must close, not drain, them. */
int    _ca_pmu_thread_open(const ca_pmu_info_t* info, ca_pmu_ring_t* ring, uint64_t period);
void   _ca_pmu_thread_close(ca_pmu_ring_t* ring);   /* idempotent */
/* Consume new records of the ring: up to `max` samples with an address into out[]. */
size_t _ca_pmu_drain(ca_pmu_ring_t* ring, ca_pmu_sample_t* out, size_t max, ca_pmu_stats_t* st);
/* The records in [*tail, head) of a circular buffer of data_size (a power of two) bytes; *tail
   ends after the last record consumed: a sample that did not fit in out[] is left for the next
   call.  st may be NULL; its counters are added to. */
size_t _ca_pmu_parse(const uint8_t* data, uint64_t data_size, uint64_t* tail, uint64_t head,
                     uint64_t sample_type, uint32_t flags, ca_pmu_sample_t* out, size_t max,
                     ca_pmu_stats_t* st);
/* Encode an event spec ("event=0xcd,umask=0x1,ldlat=3"; a bare term means 1) into attr through
   the format files of the PMU directory `dir` ("<dir>/format/<term>": "config:0-7",
   "config1:0-15", "config:0-7,32-35"), as perf does.  False on a term without a format. */
bool   _ca_pmu_encode(struct perf_event_attr* attr, const char* dir, const char* spec);
/* The class of a perf_mem_data_src value (mem_lvl_num when set, else mem_lvl). */
ca_pmu_level_t _ca_pmu_level(uint64_t data_src, bool* remote);
const char*    _ca_pmu_level_name(ca_pmu_level_t level);
/* Served from beyond the L2: the colour layer controls the L2. */
bool           _ca_pmu_is_miss(ca_pmu_level_t level);
#pragma GCC visibility pop

#endif
