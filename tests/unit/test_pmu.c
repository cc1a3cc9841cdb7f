/* The PMU backend (internal interfaces: built static only).

   The parser is fed ring images laid out exactly as the kernel writes them (linux/perf_event.h):
   a record is struct perf_event_header {u32 type; u16 misc; u16 size} followed by the fields of
   its type, all little-endian, 8-byte aligned; a PERF_RECORD_SAMPLE carries the fields its
   sample_type selects in the ABI order (IP, TID, ..., ADDR, ..., RAW, ..., WEIGHT, DATA_SRC).
   The tables below give the field values; the writers lay them out word by word, and one record
   is also spelled out byte by byte to pin the layout.

   Then a real ring: the kernel's software page-fault event (available without a hardware PMU)
   samples the test's own first touches of fresh pages, with the PEBS sample layout, so the
   mmap/drain/tail path runs against records the kernel wrote.  Detection must say "no" on a
   machine without a PMU; where there is one, a sampled loop over 64 MiB must see its addresses.

   Last, the monitor's PMU method: chunks judged by samples fed to it (as the monitor thread
   feeds what it drains from the rings), attributed by address, judged by level, converged in
   rounds and handed to the verdict callback. */
#include "check.h"
#include "../../src/core/internal.h"
#include "../../src/monitor/pmu.h"
#include "../../src/monitor/monitor.h"
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define HDR(type, misc, size) ((uint64_t)(type) | (uint64_t)(misc) << 32 | (uint64_t)(size) << 48)
#define TIDW(pid, tid)        ((uint64_t)(pid) | (uint64_t)(tid) << 32)
#define MISC_UX               (PERF_RECORD_MISC_USER | PERF_RECORD_MISC_EXACT_IP)
#define PEBS_TYPE (PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC)
#define IBS_TYPE  (PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_ADDR | PERF_SAMPLE_RAW | \
                   PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC)
#define IBS_RAW_TYPE (PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_RAW)

/* ---- data_src values -------------------------------------------------------------------------
   Intel: arch/x86/events/intel/ds.c pebs_data_source[] (Sandy Bridge and later), indexed by the
   PEBS load-latency record's data-source field, OR'ed with pebs_set_tlb_lock()'s STLB-hit bits
   (TLB HIT|L1|L2).  AMD: arch/x86/events/amd/ibs.c perf_ibs_get_mem_lvl() (Zen 4 table) with
   perf_ibs_get_tlb_lvl / _mem_lock / _mem_snoop.  MEM_NA is the kernel's PERF_MEM_NA, written
   when the PMU supplies no data source.  Each literal is checked against its composition. */
#define P(a, b)     PERF_MEM_S(a, b)
#define OP_LH       (P(OP, LOAD) | P(LVL, HIT))
#define LEVEL(x)    P(LVLNUM, x)
#define REM         P(REMOTE, REMOTE)
#define STLB_HIT    (P(TLB, HIT) | P(TLB, L1) | P(TLB, L2))
#define SNOOP_NM    (P(SNOOP, NONE) | P(SNOOP, MISS))
#define IBS_L(x)    (P(LVL, x) | P(LVL, HIT))
#define IBS_NA      (P(SNOOP, NA) | P(LOCK, NA))
#define DS_L1       0x0000000268100142ull   /* 0x01 L1 hit */
#define DS_LFB      0x0000001868100242ull   /* 0x02 LFB hit */
#define DS_L2       0x0000000468100442ull   /* 0x03 L2 hit */
#define DS_L3       0x0000000668100842ull   /* 0x04 L3 hit, no snoop */
#define DS_DRAM     0x0000001a68501042ull   /* 0x0c L3 miss, local DRAM */
#define DS_RDRAM    0x0000003a68502042ull   /* 0x0d L3 miss, remote DRAM */
#define DS_UKN_L3   0x0000000668080082ull   /* 0x00 unknown L3 miss */
#define DS_OLD_L3   0x0000000068100842ull   /* 0x04 from a kernel without mem_lvl_num */
#define DS_OLD_RRAM 0x0000000068502042ull   /* 0x0d likewise: mem_lvl only */
#define MEM_NA      0x0000000005080021ull
#define DS_IBS_L1   0x0000000229080142ull   /* DcMiss clear */
#define DS_IBS_L2   0x0000000429080442ull   /* L2Miss clear */
#define DS_IBS_DRAM 0x0000001a29081042ull   /* DataSrc 3 */
#define DS_IBS_RRAM 0x0000103a51082042ull   /* DataSrc 3 + RmtNode, L2 TLB miss */
#define DS_IBS_CCX  0x0000083629088042ull   /* DataSrc 2: another CCX, same node */
_Static_assert(DS_L1 == (OP_LH | P(LVL, L1) | LEVEL(L1) | P(SNOOP, NONE) | STLB_HIT), "L1");
_Static_assert(DS_LFB == (OP_LH | P(LVL, LFB) | LEVEL(LFB) | P(SNOOP, NONE) | STLB_HIT), "LFB");
_Static_assert(DS_L2 == (OP_LH | P(LVL, L2) | LEVEL(L2) | P(SNOOP, NONE) | STLB_HIT), "L2");
_Static_assert(DS_L3 == (OP_LH | P(LVL, L3) | LEVEL(L3) | P(SNOOP, NONE) | STLB_HIT), "L3");
_Static_assert(DS_DRAM == (OP_LH | P(LVL, LOC_RAM) | LEVEL(RAM) | SNOOP_NM | STLB_HIT), "DRAM");
_Static_assert(DS_RDRAM == (OP_LH | P(LVL, REM_RAM1) | LEVEL(RAM) | REM | SNOOP_NM | STLB_HIT), "RDRAM");
_Static_assert(DS_UKN_L3 == (P(OP, LOAD) | P(LVL, MISS) | LEVEL(L3) | P(SNOOP, NA) | STLB_HIT), "ukn");
_Static_assert(DS_OLD_L3 == (OP_LH | P(LVL, L3) | P(SNOOP, NONE) | STLB_HIT), "old L3");
_Static_assert(DS_OLD_RRAM == (OP_LH | P(LVL, REM_RAM1) | SNOOP_NM | STLB_HIT), "old RRAM");
_Static_assert(MEM_NA == (P(OP, NA) | P(LVL, NA) | P(SNOOP, NA) | P(LOCK, NA) | P(TLB, NA)), "NA");
_Static_assert(DS_IBS_L1 == (P(OP, LOAD) | IBS_L(L1) | LEVEL(L1) | IBS_NA | P(TLB, L1) | P(TLB, HIT)), "ibs L1");
_Static_assert(DS_IBS_L2 == (P(OP, LOAD) | IBS_L(L2) | LEVEL(L2) | IBS_NA | P(TLB, L1) | P(TLB, HIT)), "ibs L2");
_Static_assert(DS_IBS_DRAM == (P(OP, LOAD) | IBS_L(LOC_RAM) | LEVEL(RAM) | IBS_NA | P(TLB, L1) | P(TLB, HIT)), "ibs DRAM");
_Static_assert(DS_IBS_RRAM == (P(OP, LOAD) | IBS_L(REM_RAM1) | LEVEL(RAM) | REM | P(HOPS, 1) | IBS_NA |
                               P(TLB, L2) | P(TLB, MISS)), "ibs RDRAM");
_Static_assert(DS_IBS_CCX == (P(OP, LOAD) | IBS_L(REM_CCE1) | LEVEL(ANY_CACHE) | REM | P(HOPS, 0) | IBS_NA |
                              P(TLB, L1) | P(TLB, HIT)), "ibs CCX");

/* ---- ring images ------------------------------------------------------------------------------ */
typedef struct img_s { uint8_t buf[4096]; uint64_t size, head; } img_t;

static void img_init(img_t* r, uint64_t size, uint64_t start) {
  memset(r->buf, 0xee, sizeof r->buf);
  r->size = size;
  r->head = start;
}
static void emit(img_t* r, const uint64_t* w, size_t n) {
  for (size_t i = 0; i < n; i++, r->head += 8) memcpy(r->buf + (r->head & (r->size - 1)), &w[i], 8);
}

/* PEBS load latency, sample_type IP|TID|ADDR|WEIGHT|DATA_SRC: 6 words */
static size_t pebs_rec(uint64_t* w, uint64_t ip, uint32_t tid, uint64_t addr, uint64_t weight, uint64_t ds) {
  uint64_t rec[6] = { HDR(PERF_RECORD_SAMPLE, MISC_UX, 48), ip, TIDW(1234, tid), addr, weight, ds };
  memcpy(w, rec, sizeof rec);
  return 6;
}

/* IBS op: RAW is the kernel's perf_ibs_data from `caps` on: u32 size (4 + 8 * nregs, already a
   multiple of 8 with the size word), u32 caps, u64 IbsOpCtl IbsOpRip IbsOpData IbsOpData2
   IbsOpData3 IbsDcLinAd IbsDcPhysAd [IbsBrTarget if caps bit 5] [IbsOpData4 if caps bit 10].
   with_ds: sample_type IP|TID|ADDR|RAW|WEIGHT|DATA_SRC, else IP|TID|RAW. */
#define CAPS_ZEN3 0x3ffu    /* bits 0-9: ... BRNTRGT(5) ... FETCHCTLEXTD(9): 8 registers */
#define CAPS_ZEN4 0xfffu    /* + OPDATA4(10), ZEN4(11): 9 registers */
#define OPCTL     0x00000000000e0100ull   /* IbsOpMaxCnt 0x100, IbsOpEn, IbsOpVal, IbsOpCntCtl */
#define LD  (1ull << 0)
#define ST  (1ull << 1)
#define L2TLBMISS (3ull << 2)
#define DCMISS (1ull << 7)
#define LINV (1ull << 17)
#define L2MISS (1ull << 20)
#define SWPF (1ull << 21)
#define LAT(c) ((uint64_t)(c) << 32)
#define RMT (1ull << 4)
static size_t ibs_rec(uint64_t* w, bool with_ds, uint32_t caps, uint64_t ip, uint64_t addr, uint64_t d2,
                      uint64_t d3, uint64_t linad, uint64_t weight, uint64_t ds) {
  size_t n = 1, nregs = 7 + ((caps >> 5) & 1) + ((caps >> 10) & 1);
  w[n++] = ip;
  w[n++] = TIDW(1234, 1300);
  if (with_ds) w[n++] = addr;
  w[n++] = (uint64_t)(4 + 8 * nregs) | (uint64_t)caps << 32;
  uint64_t regs[9] = { OPCTL, ip, 0, d2, d3, linad, 0, 0, 0 };
  for (size_t i = 0; i < nregs; i++) w[n++] = regs[i];
  if (with_ds) { w[n++] = weight; w[n++] = ds; }
  w[0] = HDR(PERF_RECORD_SAMPLE, MISC_UX, n * 8);
  return n;
}

static size_t parse_img(img_t* r, uint64_t* tail, uint64_t type, uint32_t flags, ca_pmu_sample_t* out,
                        size_t max, ca_pmu_stats_t* st) {
  return _ca_pmu_parse(r->buf, r->size, tail, r->head, type, flags, out, max, st);
}

/* ---- (a) PEBS load latency ------------------------------------------------------------------ */
static const struct { uint64_t ds; ca_pmu_level_t level; bool remote, miss; } pebs_cases[] = {
  { DS_L1, CA_PMU_L1, false, false },      { DS_LFB, CA_PMU_LFB, false, false },
  { DS_L2, CA_PMU_L2, false, false },      { DS_L3, CA_PMU_L3, false, true },
  { DS_DRAM, CA_PMU_DRAM, false, true },   { DS_RDRAM, CA_PMU_DRAM, true, true },
  { MEM_NA, CA_PMU_UNKNOWN, false, false }, { DS_UKN_L3, CA_PMU_BEYOND_L2, false, true },
  { DS_OLD_L3, CA_PMU_L3, false, true },   { DS_OLD_RRAM, CA_PMU_DRAM, true, true },
  { 0, CA_PMU_UNKNOWN, false, false },
};
#define NPEBS (sizeof pebs_cases / sizeof pebs_cases[0])

/* The first PEBS record of test_pebs, byte by byte. */
static const uint8_t pebs_l1_bytes[48] = {
  0x09, 0x00, 0x00, 0x00, 0x02, 0x40, 0x30, 0x00,   /* type 9 (SAMPLE), misc USER|EXACT_IP, size 48 */
  0x36, 0x11, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00,   /* ip 0x401136 */
  0xd2, 0x04, 0x00, 0x00, 0xf4, 0x01, 0x00, 0x00,   /* pid 1234, tid 500 */
  0x40, 0x10, 0x00, 0x00, 0x00, 0x7f, 0x00, 0x00,   /* addr 0x7f0000001040 */
  0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,   /* weight 5 cycles */
  0x42, 0x01, 0x10, 0x68, 0x02, 0x00, 0x00, 0x00,   /* data_src DS_L1 */
};

static void test_pebs(void) {
  static img_t r;
  uint64_t w[8];
  img_init(&r, 4096, 0);
  for (size_t i = 0; i < NPEBS; i++) {
    pebs_rec(w, 0x401136 + i, 500 + (uint32_t)i, 0x7f0000001040 + 64 * i, 5 + 10 * i, pebs_cases[i].ds);
    emit(&r, w, 6);
  }
  CHECK(memcmp(r.buf, pebs_l1_bytes, sizeof pebs_l1_bytes) == 0);
  ca_pmu_sample_t out[16];
  ca_pmu_stats_t st = { 0 };
  uint64_t tail = 0;
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 16, &st), NPEBS);
  CHECK_EQ(tail, r.head);
  CHECK_EQ(st.samples, NPEBS);
  CHECK_EQ(st.records, NPEBS);
  CHECK_EQ(st.malformed + st.no_addr + st.lost + st.other, 0);
  for (size_t i = 0; i < NPEBS; i++) {
    CHECK_EQ(out[i].ip, 0x401136 + i);
    CHECK_EQ(out[i].pid, 1234);
    CHECK_EQ(out[i].tid, 500 + i);
    CHECK_EQ(out[i].addr, 0x7f0000001040 + 64 * i);
    CHECK_EQ(out[i].weight, 5 + 10 * i);
    CHECK_EQ(out[i].data_src, pebs_cases[i].ds);
    if (out[i].level != pebs_cases[i].level) fprintf(stderr, "case %zu: %s\n", i, _ca_pmu_level_name(out[i].level));
    CHECK_EQ(out[i].level, pebs_cases[i].level);
    CHECK_EQ(out[i].remote, pebs_cases[i].remote);
    CHECK_EQ(_ca_pmu_is_miss(out[i].level), pebs_cases[i].miss);
  }
  /* WEIGHT_STRUCT: var1_dw (the latency) is the low word; var2_w/var3_w above it are not latency */
  img_init(&r, 4096, 0);
  pebs_rec(w, 1, 2, 0x1000, 0x0007000300000123ull, DS_L2);
  emit(&r, w, 6);
  tail = 0;
  CHECK_EQ(parse_img(&r, &tail, (PEBS_TYPE & ~(uint64_t)PERF_SAMPLE_WEIGHT) | PERF_SAMPLE_WEIGHT_STRUCT,
                     0, out, 16, NULL), 1);
  CHECK_EQ(out[0].weight, 0x123);
}

/* ---- (b) IBS op --------------------------------------------------------------------------- */
static const struct {
  bool with_ds; uint32_t caps; uint64_t d2, d3, addr, linad, weight, ds;
  ca_pmu_level_t level; bool remote, kept; uint32_t want_weight;
} ibs_cases[] = {
  /* the kernel decoded the data source (Linux 6.1+, Zen 4) */
  { true, CAPS_ZEN4, 0, LD | LINV, 0x10000, 0x10000, 0, DS_IBS_L1, CA_PMU_L1, false, true, 0 },
  { true, CAPS_ZEN4, 0, LD | DCMISS | LINV | LAT(40), 0x10040, 0x10040, 40, DS_IBS_L2, CA_PMU_L2, false, true, 40 },
  { true, CAPS_ZEN4, 3, LD | DCMISS | L2MISS | LINV | LAT(300), 0x10080, 0x10080, 300, DS_IBS_DRAM, CA_PMU_DRAM, false, true, 300 },
  { true, CAPS_ZEN4, 3 | RMT, LD | L2TLBMISS | DCMISS | L2MISS | LINV | LAT(600), 0x100c0, 0x100c0, 600,
    DS_IBS_RRAM, CA_PMU_DRAM, true, true, 600 },
  { true, CAPS_ZEN4, 2, LD | DCMISS | L2MISS | LINV | LAT(120), 0x10100, 0x10100, 120, DS_IBS_CCX, CA_PMU_L3, true, true, 120 },
  /* not a memory op: no address, no data source */
  { true, CAPS_ZEN4, 0, 0, 0, 0, 0, MEM_NA, CA_PMU_UNKNOWN, false, false, 0 },
  /* a kernel before 6.1: DATA_SRC is NA, ADDR 0, WEIGHT 0; the raw registers say it all */
  { true, CAPS_ZEN3, 3, LD | DCMISS | L2MISS | LINV | LAT(280), 0, 0x10140, 0, MEM_NA, CA_PMU_DRAM, false, true, 280 },
  /* RAW only (sample_type IP|TID|RAW), Zen 2/3 DataSrc */
  { false, CAPS_ZEN3, 0, LD | LINV, 0, 0x20000, 0, 0, CA_PMU_L1, false, true, 0 },
  { false, CAPS_ZEN3, 0, LD | DCMISS | LINV | LAT(35), 0, 0x20040, 0, 0, CA_PMU_L2, false, true, 35 },
  { false, CAPS_ZEN3, 3, LD | DCMISS | L2MISS | LINV | LAT(250), 0, 0x20080, 0, 0, CA_PMU_DRAM, false, true, 250 },
  { false, CAPS_ZEN3, 3 | RMT, LD | DCMISS | L2MISS | LINV | LAT(500), 0, 0x200c0, 0, 0, CA_PMU_DRAM, true, true, 500 },
  { false, CAPS_ZEN3, 2, LD | DCMISS | L2MISS | LINV | LAT(90), 0, 0x20100, 0, 0, CA_PMU_L3, false, true, 90 },
  { false, CAPS_ZEN3, 4, LD | DCMISS | L2MISS | LINV | LAT(200), 0, 0x20140, 0, 0, CA_PMU_L3, true, true, 200 },
  { false, CAPS_ZEN3, 0, LD | DCMISS | L2MISS | LINV | LAT(99), 0, 0x20180, 0, 0, CA_PMU_BEYOND_L2, false, true, 99 },
  { false, CAPS_ZEN3, 3, ST | DCMISS | L2MISS | LINV, 0, 0x201c0, 0, 0, CA_PMU_BEYOND_L2, false, true, 0 },  /* Data2: loads only */
  { false, CAPS_ZEN3, 0, LD | DCMISS, 0, 0x20200, 0, 0, CA_PMU_UNKNOWN, false, false, 0 },  /* no valid address */
  { false, CAPS_ZEN3, 0, LD | SWPF | LINV, 0, 0x20240, 0, 0, CA_PMU_UNKNOWN, false, false, 0 },  /* prefetch */
  /* RAW only, Zen 4 extended DataSrc: 1 local L3, 5 other CCX on another node, 8 extension memory */
  { false, CAPS_ZEN4, 1, LD | DCMISS | L2MISS | LINV, 0, 0x30000, 0, 0, CA_PMU_L3, false, true, 0 },
  { false, CAPS_ZEN4, 5, LD | DCMISS | L2MISS | LINV, 0, 0x30040, 0, 0, CA_PMU_L3, true, true, 0 },
  { false, CAPS_ZEN4, 1ull << 6, LD | DCMISS | L2MISS | LINV, 0, 0x30080, 0, 0, CA_PMU_DRAM, false, true, 0 },
};
#define NIBS (sizeof ibs_cases / sizeof ibs_cases[0])

static void test_ibs(void) {
  for (int pass = 0; pass < 2; pass++) {               /* with DATA_SRC, then RAW only */
    static img_t r;
    uint64_t w[20];
    size_t want = 0, dropped = 0, total = 0;
    img_init(&r, 4096, 0);
    for (size_t i = 0; i < NIBS; i++) {
      if (ibs_cases[i].with_ds != (pass == 0)) continue;
      size_t n = ibs_rec(w, ibs_cases[i].with_ds, ibs_cases[i].caps, 0x5000 + i, ibs_cases[i].addr, ibs_cases[i].d2,
                         ibs_cases[i].d3, ibs_cases[i].linad, ibs_cases[i].weight, ibs_cases[i].ds);
      CHECK_EQ(n, (ibs_cases[i].with_ds ? 7u : 4u) + 7 + ((ibs_cases[i].caps >> 5) & 1) + ((ibs_cases[i].caps >> 10) & 1));
      emit(&r, w, n);
      total++;
      if (ibs_cases[i].kept) want++; else dropped++;
    }
    ca_pmu_sample_t out[32];
    ca_pmu_stats_t st = { 0 };
    uint64_t tail = 0;
    CHECK_EQ(parse_img(&r, &tail, pass == 0 ? IBS_TYPE : IBS_RAW_TYPE, CA_PMU_F_IBS, out, 32, &st), want);
    CHECK_EQ(tail, r.head);
    CHECK_EQ(st.samples, total);
    CHECK_EQ(st.no_addr, dropped);
    CHECK_EQ(st.malformed, 0);
    size_t k = 0;
    for (size_t i = 0; i < NIBS && k < want; i++) {
      if (ibs_cases[i].with_ds != (pass == 0) || !ibs_cases[i].kept) continue;
      if (out[k].level != ibs_cases[i].level) fprintf(stderr, "ibs case %zu: %s\n", i, _ca_pmu_level_name(out[k].level));
      CHECK_EQ(out[k].ip, 0x5000 + i);
      CHECK_EQ(out[k].tid, 1300);
      CHECK_EQ(out[k].addr, ibs_cases[i].linad);
      CHECK_EQ(out[k].level, ibs_cases[i].level);
      CHECK_EQ(out[k].remote, ibs_cases[i].remote);
      CHECK_EQ(out[k].weight, ibs_cases[i].want_weight);
      k++;
    }
    CHECK_EQ(k, want);
  }
  /* without CA_PMU_F_IBS the raw bytes are opaque: a RAW-only record then has no address */
  static img_t r;
  uint64_t w[20];
  img_init(&r, 4096, 0);
  emit(&r, w, ibs_rec(w, false, CAPS_ZEN3, 0x5000, 0, 0, LD | LINV, 0x20000, 0, 0));
  uint64_t tail = 0;
  ca_pmu_stats_t st = { 0 };
  ca_pmu_sample_t out[2];
  CHECK_EQ(parse_img(&r, &tail, IBS_RAW_TYPE, 0, out, 2, &st), 0);
  CHECK_EQ(st.no_addr, 1);
}

/* ---- (c) wrapping, other records, malformed records ----------------------------------------- */
static size_t lost_rec(uint64_t* w, uint64_t lost) { w[0] = HDR(PERF_RECORD_LOST, 0, 24); w[1] = 0x55; w[2] = lost; return 3; }
static size_t throttle_rec(uint64_t* w, uint32_t type) {
  w[0] = HDR(type, 0, 32); w[1] = 123456789; w[2] = 0x55; w[3] = 0x55;           /* time, id, stream_id */
  return 4;
}
/* MMAP2: pid, tid, addr, len, pgoff, maj, min, ino, ino_generation, prot, flags, filename (NUL,
   padded to 8) */
static size_t mmap2_rec(uint64_t* w) {
  char name[16] = "/usr/lib/x.so";
  uint64_t rec[9] = { HDR(PERF_RECORD_MMAP2, PERF_RECORD_MISC_USER, 88), TIDW(1234, 1234), 0x7f0000000000, 0x21000,
                      0, TIDW(8, 1), 0x1234, 0, TIDW(PROT_READ | PROT_EXEC, MAP_PRIVATE) };
  memcpy(w, rec, sizeof rec);
  memcpy(w + 9, name, 16);
  return 11;
}

static void test_wrap_and_records(void) {
  static img_t r;
  uint64_t w[20];
  ca_pmu_sample_t out[8];
  /* a 256-byte ring whose counters have gone round 7 times; the second sample's header is the
     ring's last word and its body wraps, the IBS sample (128 bytes) wraps in its RAW data */
  uint64_t start = 7 * 256 + 200;
  img_init(&r, 256, start);
  pebs_rec(w, 0xa, 1, 0xa000, 1, DS_L1);  emit(&r, w, 6);        /* 200..248 */
  pebs_rec(w, 0xb, 1, 0xb000, 2, DS_DRAM); emit(&r, w, 6);       /* 248..296: wraps */
  emit(&r, w, lost_rec(w, 17));
  emit(&r, w, throttle_rec(w, PERF_RECORD_THROTTLE));
  emit(&r, w, throttle_rec(w, PERF_RECORD_UNTHROTTLE));
  uint64_t tail = start;
  ca_pmu_stats_t st = { 0 };
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 8, &st), 2);
  CHECK_EQ(tail, r.head);
  CHECK_EQ(out[0].addr, 0xa000);
  CHECK_EQ(out[1].addr, 0xb000);
  CHECK_EQ(out[1].level, CA_PMU_DRAM);
  CHECK_EQ(out[1].weight, 2);
  CHECK_EQ(st.lost, 17);
  CHECK_EQ(st.throttle, 1);
  CHECK_EQ(st.unthrottle, 1);
  CHECK_EQ(st.records, 5);
  /* next: an MMAP2 record (skipped by size) that wraps */
  CHECK_EQ(r.head & 255, 128);
  emit(&r, w, lost_rec(w, 1));
  emit(&r, w, lost_rec(w, 1));
  emit(&r, w, mmap2_rec(w));                                      /* 176..264 */
  memset(&st, 0, sizeof st);
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 8, &st), 0);
  CHECK_EQ(tail, r.head);
  CHECK_EQ(st.other, 1);
  CHECK_EQ(st.lost, 2);
  CHECK_EQ(st.records, 3);
  /* then an IBS sample (128 bytes) at 192..320, which wraps in its RAW registers (IbsOpData2
     is the first word of the ring) */
  for (int i = 0; i < 5; i++) emit(&r, w, throttle_rec(w, PERF_RECORD_THROTTLE));
  emit(&r, w, lost_rec(w, 1));
  CHECK_EQ(r.head & 255, 192);
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 8, &st), 0);
  CHECK_EQ(st.throttle, 5);
  size_t n = ibs_rec(w, true, CAPS_ZEN4, 0xc, 0x10000, 3, LD | DCMISS | L2MISS | LINV | LAT(300), 0x10000, 300, DS_IBS_DRAM);
  CHECK_EQ(n, 16);
  emit(&r, w, n);
  memset(&st, 0, sizeof st);
  CHECK_EQ(parse_img(&r, &tail, IBS_TYPE, CA_PMU_F_IBS, out, 8, &st), 1);
  CHECK_EQ(tail, r.head);
  CHECK_EQ(st.records, 1);
  CHECK_EQ(out[0].addr, 0x10000);
  CHECK_EQ(out[0].ip, 0xc);
  CHECK_EQ(out[0].level, CA_PMU_DRAM);
  CHECK_EQ(out[0].weight, 300);
  CHECK_EQ(out[0].data_src, DS_IBS_DRAM);

  /* malformed: a record of size 0 stops the walk; the tail jumps to head */
  img_init(&r, 256, 0);
  pebs_rec(w, 0xa, 1, 0xa000, 1, DS_L1); emit(&r, w, 6);
  w[0] = HDR(PERF_RECORD_SAMPLE, 0, 0); emit(&r, w, 1);
  pebs_rec(w, 0xc, 1, 0xc000, 1, DS_L1); emit(&r, w, 6);
  memset(&st, 0, sizeof st);
  tail = 0;
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 8, &st), 1);
  CHECK_EQ(out[0].addr, 0xa000);
  CHECK_EQ(st.malformed, 1);
  CHECK_EQ(tail, r.head);
  /* a size past the published head, and a size that is not a multiple of 8 */
  img_init(&r, 256, 0);
  pebs_rec(w, 0xa, 1, 0xa000, 1, DS_L1); emit(&r, w, 3);          /* only half of it published */
  memset(&st, 0, sizeof st);
  tail = 0;
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 8, &st), 0);
  CHECK_EQ(st.malformed, 1);
  CHECK_EQ(tail, r.head);
  img_init(&r, 256, 0);
  pebs_rec(w, 0xa, 1, 0xa000, 1, DS_L1);
  w[0] = HDR(PERF_RECORD_SAMPLE, 0, 44);
  emit(&r, w, 6);
  memset(&st, 0, sizeof st);
  tail = 0;
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 8, &st), 0);
  CHECK_EQ(st.malformed, 1);
  /* a sample shorter than its sample_type: counted and skipped, the next one is still read */
  img_init(&r, 256, 0);
  w[0] = HDR(PERF_RECORD_SAMPLE, 0, 24); w[1] = 0xa; w[2] = TIDW(1, 1); emit(&r, w, 3);
  pebs_rec(w, 0xc, 1, 0xc000, 1, DS_L1); emit(&r, w, 6);
  memset(&st, 0, sizeof st);
  tail = 0;
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 8, &st), 1);
  CHECK_EQ(out[0].addr, 0xc000);
  CHECK_EQ(st.malformed, 1);
  CHECK_EQ(tail, r.head);
  /* head more than a ring ahead of tail (a corrupt tail): nothing is read, tail = head */
  memset(&st, 0, sizeof st);
  tail = 0;
  CHECK_EQ(_ca_pmu_parse(r.buf, r.size, &tail, 1024, PEBS_TYPE, 0, out, 8, &st), 0);
  CHECK_EQ(st.malformed, 1);
  CHECK_EQ(tail, 1024);
}

/* ---- (d) more samples than `max` ------------------------------------------------------------ */
static void test_max(void) {
  static img_t r;
  uint64_t w[8];
  ca_pmu_sample_t out[8];
  ca_pmu_stats_t st = { 0 };
  img_init(&r, 512, 0);
  emit(&r, w, lost_rec(w, 3));                                   /* 0..24 */
  for (int i = 0; i < 5; i++) {
    pebs_rec(w, 0x100 + (uint64_t)i, 1, 0x1000 * (uint64_t)(i + 1), 1, DS_L2);
    emit(&r, w, 6);
    if (i == 1) emit(&r, w, lost_rec(w, 4));
  }
  uint64_t tail = 0;
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 0, &st), 0);  /* max 0: only the LOST goes */
  CHECK_EQ(tail, 24);
  CHECK_EQ(st.lost, 3);
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 2, &st), 2);
  CHECK_EQ(tail, 24 + 2 * 48 + 24);              /* the LOST goes too; stops before sample 3 */
  CHECK_EQ(out[0].addr, 0x1000);
  CHECK_EQ(out[1].addr, 0x2000);
  CHECK_EQ(st.lost, 7);
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 2, &st), 2);
  CHECK_EQ(tail, 24 + 2 * 48 + 24 + 2 * 48);
  CHECK_EQ(out[0].addr, 0x3000);
  CHECK_EQ(out[1].addr, 0x4000);
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 2, &st), 1);
  CHECK_EQ(out[0].addr, 0x5000);
  CHECK_EQ(tail, r.head);
  CHECK_EQ(parse_img(&r, &tail, PEBS_TYPE, 0, out, 2, &st), 0);
  CHECK_EQ(tail, r.head);
  CHECK_EQ(st.samples, 5);
  CHECK_EQ(st.records, 7);
}

static void test_levels(void) {
  bool remote = true;
  CHECK_EQ(_ca_pmu_level(0, &remote), CA_PMU_UNKNOWN);
  CHECK(!remote);
  /* mem_lvl_num wins over mem_lvl; LVLNUM_NA falls back to mem_lvl */
  CHECK_EQ(_ca_pmu_level(P(LVL, HIT) | P(LVL, L1) | LEVEL(L3), NULL), CA_PMU_L3);
  CHECK_EQ(_ca_pmu_level(P(LVL, HIT) | P(LVL, L2) | LEVEL(NA), NULL), CA_PMU_L2);
  CHECK_EQ(_ca_pmu_level(P(LVL, HIT) | P(LVL, REM_CCE2), &remote), CA_PMU_L3);
  CHECK(remote);
  CHECK_EQ(_ca_pmu_level(P(LVL, MISS) | P(LVL, L1), NULL), CA_PMU_UNKNOWN);
  CHECK_EQ(_ca_pmu_level(P(LVL, MISS) | P(LVL, L2), NULL), CA_PMU_BEYOND_L2);
  CHECK_EQ(_ca_pmu_level(LEVEL(PMEM), NULL), CA_PMU_DRAM);
  CHECK_EQ(_ca_pmu_level(LEVEL(IO) | REM, &remote), CA_PMU_UNKNOWN);
  CHECK(!remote);
  CHECK_EQ(_ca_pmu_level(P(LVL, HIT) | P(LVL, UNC), NULL), CA_PMU_UNKNOWN);
  CHECK_EQ(_ca_pmu_level((uint64_t)5 << PERF_MEM_LVLNUM_SHIFT, NULL), CA_PMU_L2);   /* L2_MHB */
  int misses = 0;
  for (int l = 0; l < CA_PMU_LEVELS; l++) misses += _ca_pmu_is_miss((ca_pmu_level_t)l);
  CHECK_EQ(misses, 3);
  CHECK(_ca_pmu_is_miss(CA_PMU_BEYOND_L2) && !_ca_pmu_is_miss(CA_PMU_LFB) && !_ca_pmu_is_miss(CA_PMU_UNKNOWN));
  CHECK(strcmp(_ca_pmu_level_name(CA_PMU_DRAM), "DRAM") == 0);
}

/* ---- event specs through format files: a PMU directory made up like sysfs's ------------------ */
static void put_file(const char* dir, const char* name, const char* text) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "w");
  if (f == NULL) { perror(path); exit(2); }
  fputs(text, f);
  fclose(f);
}

static void test_encode(void) {
  char dir[] = "/tmp/test_pmu.XXXXXX", fmt[64];
  if (mkdtemp(dir) == NULL) { perror("mkdtemp"); exit(2); }
  snprintf(fmt, sizeof fmt, "%s/format", dir);
  mkdir(fmt, 0700);
  /* Intel cpu/format (event, umask, ldlat) and AMD's split event field */
  put_file(dir, "format/event", "config:0-7\n");
  put_file(dir, "format/umask", "config:8-15\n");
  put_file(dir, "format/ldlat", "config1:0-15\n");
  put_file(dir, "format/cnt_ctl", "config:19\n");
  put_file(dir, "format/amdevent", "config:0-7,32-35\n");
  put_file(dir, "format/bad", "config9:0-3\n");
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  CHECK(_ca_pmu_encode(&a, dir, "event=0xcd,umask=0x1,ldlat=3"));      /* cpu/events/mem-loads */
  CHECK_EQ(a.config, 0x1cd);
  CHECK_EQ(a.config1, 3);
  memset(&a, 0, sizeof a);
  a.config = 0xff;
  CHECK(_ca_pmu_encode(&a, dir, "cnt_ctl"));                             /* a bare term is 1 */
  CHECK_EQ(a.config, 0x800ff);
  memset(&a, 0, sizeof a);
  CHECK(_ca_pmu_encode(&a, dir, "amdevent=0x1d4,umask=0x2"));
  CHECK_EQ(a.config, 0x1000002d4ull);
  memset(&a, 0, sizeof a);
  CHECK(_ca_pmu_encode(&a, dir, "config=0x123,config1=7"));             /* perf's own terms */
  CHECK_EQ(a.config, 0x123);
  CHECK_EQ(a.config1, 7);
  CHECK(!_ca_pmu_encode(&a, dir, "nosuch=1"));
  CHECK(!_ca_pmu_encode(&a, dir, "event="));
  CHECK(!_ca_pmu_encode(&a, dir, "bad=1"));
  CHECK(!_ca_pmu_encode(&a, "/nonexistent", "event=1"));
  const char* names[] = { "event", "umask", "ldlat", "cnt_ctl", "amdevent", "bad" };
  for (size_t i = 0; i < 6; i++) { char path[300]; snprintf(path, sizeof path, "%s/%s", fmt, names[i]); unlink(path); }
  rmdir(fmt);
  rmdir(dir);
}

/* ---- a real ring: the software page-fault event ---------------------------------------------- */
static void touch(uint8_t* p, size_t pages) { for (size_t i = 0; i < pages; i++) ((volatile uint8_t*)p)[i * 4096] = 1; }

static uint8_t* fresh(size_t pages) {
  uint8_t* p = mmap(NULL, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) { perror("mmap"); exit(2); }
  madvise(p, pages * 4096, MADV_NOHUGEPAGE);                      /* one fault per page */
  return p;
}

static void test_software_ring(void) {
  ca_pmu_info_t info;
  memset(&info, 0, sizeof info);
  info.attr.size = sizeof info.attr;
  info.attr.type = PERF_TYPE_SOFTWARE;
  info.attr.config = PERF_COUNT_SW_PAGE_FAULTS;
  info.attr.sample_type = PEBS_TYPE;
  info.attr.exclude_kernel = info.attr.exclude_hv = info.attr.disabled = 1;
  ca_pmu_ring_t ring;
  int e = _ca_pmu_thread_open(&info, &ring, 1);
  if (e == EACCES || e == EPERM || e == ENOSYS) {
    fprintf(stderr, "test_pmu: software perf events not allowed here (%s): ring test skipped\n", strerror(e));
    return;
  }
  CHECK_EQ(e, 0);
  if (e != 0) return;
  CHECK_EQ(ring.data_size, CA_PMU_RING_PAGES * 4096);
  const size_t pages = 256;
  uint8_t* buf = fresh(pages);
  touch(buf, pages);
  ca_pmu_sample_t out[16];
  ca_pmu_stats_t st = { 0 };
  size_t inside = 0, in_order = 0, ours = 0, n, calls = 0;
  uint64_t next = (uint64_t)(uintptr_t)buf;
  pid_t tid = (pid_t)syscall(SYS_gettid);
  while ((n = _ca_pmu_drain(&ring, out, 16, &st)) > 0) {
    calls++;
    for (size_t i = 0; i < n; i++) {
      if (out[i].addr >= (uintptr_t)buf && out[i].addr < (uintptr_t)buf + pages * 4096) inside++;
      if (out[i].addr == next) { in_order++; next += 4096; }
      if ((pid_t)out[i].tid == tid && (pid_t)out[i].pid == getpid() && out[i].ip != 0 &&
          out[i].level == CA_PMU_UNKNOWN && out[i].weight == 0) ours++;
    }
    if (calls > 10000) break;
  }
  const struct perf_event_mmap_page* pg = ring.base;
  CHECK_EQ(inside, pages);                   /* one fault per page, each sampled (period 1) */
  CHECK_EQ(in_order, pages);                 /* at the faulting address, in order */
  CHECK(ours >= pages);
  CHECK(calls >= pages / 16);                /* drained 16 at a time */
  CHECK_EQ(st.malformed + st.oversize + st.lost, 0);
  CHECK_EQ(pg->data_tail, pg->data_head);
  /* overflow: more faults than the ring holds; the kernel reports the loss once there is room */
  const size_t many = 4 * CA_PMU_RING_PAGES * 4096 / 48;
  uint8_t* big = fresh(many);
  touch(big, many);
  while (_ca_pmu_drain(&ring, out, 16, &st) > 0) {}
  uint8_t* more = fresh(8);
  touch(more, 8);
  while (_ca_pmu_drain(&ring, out, 16, &st) > 0) {}
  CHECK(st.lost > 0);
  CHECK(st.lost < many);
  CHECK_EQ(st.malformed, 0);
  fprintf(stderr, "test_pmu: software ring: %zu page-fault samples in %zu drains, then %llu lost of %zu\n",
          inside, calls, (unsigned long long)st.lost, many);
  _ca_pmu_thread_close(&ring);
  CHECK_EQ(ring.fd, -1);
  CHECK(ring.base == NULL);
  _ca_pmu_thread_close(&ring);                                    /* idempotent */
  CHECK_EQ(_ca_pmu_drain(&ring, out, 16, &st), 0);
  munmap(buf, pages * 4096);
  munmap(big, many * 4096);
  munmap(more, 8 * 4096);
}

/* ---- detection, and a hardware PMU where there is one ----------------------------------------- */
static bool exists(const char* path) { return access(path, F_OK) == 0; }

static void test_detect(void) {
  ca_pmu_info_t info;
  memset(&info, 0xa5, sizeof info);
  errno = 4321;
  bool ok = _ca_pmu_detect(&info);
  CHECK_EQ(errno, 4321);
  CHECK(strnlen(info.reason, sizeof info.reason) < sizeof info.reason);
  bool none_here = !exists("/sys/bus/event_source/devices/ibs_op") && !exists("/sys/bus/event_source/devices/cpu") &&
                   !exists("/sys/bus/event_source/devices/cpu_core");
  fprintf(stderr, "test_pmu: detect: %s%s%s\n", ok ? "available: " : "unavailable: ", ok ? info.name : "", info.reason);
  if (none_here) CHECK(!ok);
  if (!ok) {
    CHECK(info.reason[0] != 0);
    CHECK_EQ(info.kind, CA_PMU_NONE);
    CHECK_EQ(info.attr.size, 0);
    ca_pmu_ring_t ring;
    CHECK_EQ(_ca_pmu_thread_open(&info, &ring, 1000), ENODEV);
    CHECK_EQ(ring.fd, -1);
    CHECK_EQ(_ca_pmu_drain(&ring, NULL, 0, NULL), 0);
    _ca_pmu_thread_close(&ring);
    ca_pmu_info_t again;
    CHECK(!_ca_pmu_detect(&again));
    CHECK(strcmp(again.reason, info.reason) == 0);
    return;
  }
  /* a PMU: sample this thread's loads over 64 MiB */
  CHECK(info.kind != CA_PMU_NONE);
  CHECK_EQ(info.reason[0], 0);
  ca_pmu_ring_t ring;
  int e = _ca_pmu_thread_open(&info, &ring, info.kind == CA_PMU_IBS_OP ? 4096 : 1000);
  CHECK_EQ(e, 0);
  if (e != 0) return;
  const size_t len = (size_t)64 << 20;
  uint8_t* buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (buf == MAP_FAILED) { perror("mmap"); exit(2); }
  static ca_pmu_sample_t out[4096];
  ca_pmu_stats_t st = { 0 };
  size_t inside = 0, known = 0;
  uint64_t sum = 0;
  for (int pass = 0; pass < 8; pass++) {
    for (size_t i = 0; i < len; i += 64) sum += ((volatile uint8_t*)buf)[i];
    size_t n;
    while ((n = _ca_pmu_drain(&ring, out, 4096, &st)) > 0)
      for (size_t i = 0; i < n; i++) {
        if (out[i].addr >= (uintptr_t)buf && out[i].addr < (uintptr_t)buf + len) inside++;
        if (out[i].level != CA_PMU_UNKNOWN) known++;
      }
  }
  fprintf(stderr, "test_pmu: %s: %llu samples, %zu in the buffer, %zu with a level, %llu lost (%llu)\n", info.name,
          (unsigned long long)st.samples, inside, known, (unsigned long long)st.lost, (unsigned long long)sum);
  CHECK(inside > 0);
  CHECK(known > 0);
  CHECK_EQ(st.malformed, 0);
  _ca_pmu_thread_close(&ring);
  munmap(buf, len);
}

/* ---- the monitor judging chunks by samples ------------------------------------------------ */
static _Atomic(int) verdicts;
static ca_monitor_result_t last[2];
static void on_verdict(void* chunk, size_t size, uint64_t cookie, const ca_monitor_result_t* r) {
  (void)chunk; (void)size;
  if (cookie < 2) last[cookie] = *r;
  atomic_fetch_add(&verdicts, 1);
}

static ca_pmu_sample_t at(const uint8_t* p, ca_pmu_level_t level) {
  ca_pmu_sample_t s = { .addr = (uint64_t)(uintptr_t)p, .level = level };
  return s;
}

static void test_monitor_samples(void) {
  _ca_monitor_use_samples();
  _ca_monitor_init(on_verdict);
  size_t n = 64 * 4096;
  uint8_t* victim = _ca_large_alloc(n, 4096, true, 0);
  uint8_t* polluter = _ca_large_alloc(n, 4096, true, 0);
  CHECK(_ca_monitor_start(victim, n, 0));
  CHECK(_ca_monitor_start(polluter, n, 1));
  ca_pmu_sample_t s[64];
  int k = 0;
  for (int i = 0; i < 24; i++) s[k++] = at(victim + i * 4096 + 64, i % 6 ? CA_PMU_L2 : CA_PMU_L3);
  for (int i = 0; i < 24; i++) s[k++] = at(polluter + i * 4096, i % 6 ? CA_PMU_DRAM : CA_PMU_L1);
  s[k++] = at(victim, CA_PMU_UNKNOWN);                    /* no level: no evidence */
  s[k++] = at((uint8_t*)&k, CA_PMU_DRAM);                 /* not in a monitored chunk */
  _ca_monitor_feed(s, (size_t)k);
  for (int w = 0; w < 2000 && atomic_load(&verdicts) < 2; w++) usleep(1000);   /* delivered by the monitor thread */
  CHECK_EQ(atomic_load(&verdicts), 2);
  CHECK(!last[0].polluter);
  CHECK(last[1].polluter);
  CHECK(last[0].hits + last[0].misses >= 8 && last[0].hits + last[0].misses <= 24);
  CHECK(last[0].hits >= 3 * last[0].misses);            /* 5 of 6 samples hit */
  CHECK(last[1].misses >= 3 * last[1].hits);
  _ca_monitor_stop(victim);
  _ca_monitor_stop(polluter);
  CHECK_EQ(atomic_load(&verdicts), 2);                    /* judged once */
  _ca_large_free(_ca_segment_of(victim));
  _ca_large_free(_ca_segment_of(polluter));
}

int main(void) {
  free(malloc(1));
  test_monitor_samples();
  test_pebs();
  test_ibs();
  test_wrap_and_records();
  test_max();
  test_levels();
  test_encode();
  test_software_ring();
  test_detect();
  return check_done("test_pmu");
}
