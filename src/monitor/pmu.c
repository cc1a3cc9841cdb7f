/* The PMU backend of the locality monitor: detection, per-thread sampling rings and the sample
   parser (read pmu.h first for the ring and the record format).

   Detection reads sysfs (/sys/bus/event_source/devices/<pmu>/: type, events/<name>,
   format/<term>) and opens the event once for the calling thread (pid 0, cpu -1, user space
   only, disabled), then closes it.  AMD first: the `ibs_op` PMU, counting dispatched ops when
   its format has `cnt_ctl`.  Else Intel's `mem-loads` event of the `cpu` or `cpu_core` PMU,
   whose terms (e.g. "event=0xcd,umask=0x1,ldlat=3") go into attr.config / config1 through the
   PMU's format files, with precise_ip as high as accepted (3, 2, 1) and the `mem-loads-aux`
   group leader that Sapphire Rapids and later require when the PMU lists it.  IBS in kernels
   before about 6.12 (2024) does not filter by privilege level (exclude_kernel gives EINVAL): the
   event is then retried with kernel samples, which only a privileged process gets.

   Data sources.  perf_mem_data_src (linux/perf_event.h) is reduced to ca_pmu_level_t from its
   mem_lvl_num field (PERF_MEM_LVLNUM_*, plus mem_remote) when set, else from the older mem_lvl
   bits (PERF_MEM_LVL_HIT/MISS with L1 LFB L2 L3 LOC_RAM REM_RAM1/2 REM_CCE1/2).  A MISS at the
   L2 or beyond means "beyond the L2, source unknown"; a MISS at the L1 says nothing useful.

   IBS raw registers, used when the kernel did not decode a data source (before Linux 6.1, or
   sample_type without DATA_SRC).  PERF_SAMPLE_RAW of an ibs_op event is the kernel's
   struct perf_ibs_data from `caps` on: u32 caps (CPUID Fn8000_001B_EAX), then u64 IbsOpCtl,
   IbsOpRip, IbsOpData, IbsOpData2, IbsOpData3, IbsDcLinAd, IbsDcPhysAd (MSRC001_1033..1039),
   then IbsBrTarget / IbsOpData4 when caps say so (arch/x86/events/amd/ibs.c).  Register bits
   from AMD's PPR for Family 19h Model 01h (doc 55898, MSRC001_1036/1037), as transcribed in the
   kernel's arch/x86/include/asm/amd-ibs.h; the fields are also described in the AMD64 APM vol. 2
   ("Instruction-Based Sampling"):
     IbsOpData3: 0 IbsLdOp, 1 IbsStOp, 7 IbsDcMiss, 14 IbsDcUcMemAcc, 17 IbsDcLinAddrValid,
                 20 IbsL2Miss (Family 17h and later; reserved, i.e. 0, before), 21 IbsSwPf,
                 47:32 IbsDcMissLat;
     IbsDcLinAd: the linear address, valid when IbsDcLinAddrValid;
     IbsOpData2 (loads only): 2:0 DataSrc, 4 RmtNode, 7:6 DataSrcHi (caps bit 11, Zen 4):
                 legacy 2 local cache, 3 DRAM, 4 remote cache; extended 1 local L3/CCX, 2 other
                 CCX same node, 3 DRAM, 5 other CCX other node, 6 long-latency DRAM, 8 extension
                 memory.
   Hence: not a load/store (or a software prefetch): no level; IbsDcMiss clear: L1; IbsL2Miss
   clear: L2; else beyond the L2, refined to L3 / DRAM by DataSrc.  Erratum 1293 (Family 19h
   models 00h-0Fh: IbsL2Miss unreliable for some DC misses) is not corrected for. */
#define _GNU_SOURCE
#include "pmu.h"
#include "../core/hooks.h"
#include "../core/buf.h"
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define PMU_DIR(name) "/sys/bus/event_source/devices/" name
#define PROBE_PERIOD  ((uint64_t)1 << 20)

/* mem_lvl_num values newer than some installed headers */
#define LVLNUM_L2_MHB 0x05
#define LVLNUM_MSC    0x06
#define LVLNUM_CXL    0x09

/* IBS op registers and bits (see the top comment) */
#define IBS_REG_DATA2   3
#define IBS_REG_DATA3   4
#define IBS_REG_LINAD   5
#define IBS_CAPS_ZEN4   (1u << 11)
#define D3_LD_OP        (1ull << 0)
#define D3_ST_OP        (1ull << 1)
#define D3_DC_MISS      (1ull << 7)
#define D3_DC_UC        (1ull << 14)
#define D3_LIN_VALID    (1ull << 17)
#define D3_L2_MISS      (1ull << 20)
#define D3_SW_PF        (1ull << 21)
#define D2_RMT_NODE     (1ull << 4)

/* ---- data sources ------------------------------------------------------------------------- */

#define LVL(x)    PERF_MEM_LVL_##x
#define LVLNUM(x) PERF_MEM_LVLNUM_##x
#define LVL_REMOTE (LVL(REM_RAM1) | LVL(REM_RAM2) | LVL(REM_CCE1) | LVL(REM_CCE2))

ca_pmu_level_t _ca_pmu_level(uint64_t ds, bool* remote) {
  uint32_t lvl = (uint32_t)(ds >> PERF_MEM_LVL_SHIFT) & 0x3fff;
  uint32_t num = (uint32_t)(ds >> PERF_MEM_LVLNUM_SHIFT) & 0xf;
  bool miss = (lvl & LVL(MISS)) && !(lvl & LVL(HIT));
  ca_pmu_level_t l = CA_PMU_UNKNOWN;
  if (num != 0 && num != LVLNUM(NA)) {
    switch (num) {
    case LVLNUM(L1):    l = miss ? CA_PMU_UNKNOWN : CA_PMU_L1; break;
    case LVLNUM(LFB):   l = CA_PMU_LFB; break;
    case LVLNUM(L2):    l = miss ? CA_PMU_BEYOND_L2 : CA_PMU_L2; break;
    case LVLNUM_L2_MHB: l = CA_PMU_L2; break;
    case LVLNUM(L3): case LVLNUM(L4): case LVLNUM_MSC: case LVLNUM(ANY_CACHE):
      l = miss ? CA_PMU_BEYOND_L2 : CA_PMU_L3; break;
    case LVLNUM(RAM): case LVLNUM(PMEM): case LVLNUM_CXL:
      l = CA_PMU_DRAM; break;
    default: break;                                   /* I/O, uncached */
    }
  } else if (lvl != 0 && !(lvl & LVL(NA))) {
    if (miss) l = lvl & ~(LVL(MISS) | LVL(L1) | LVL(LFB)) ? CA_PMU_BEYOND_L2 : CA_PMU_UNKNOWN;
    else if (lvl & LVL(L1)) l = CA_PMU_L1;
    else if (lvl & LVL(LFB)) l = CA_PMU_LFB;
    else if (lvl & LVL(L2)) l = CA_PMU_L2;
    else if (lvl & (LVL(L3) | LVL(REM_CCE1) | LVL(REM_CCE2))) l = CA_PMU_L3;
    else if (lvl & (LVL(LOC_RAM) | LVL(REM_RAM1) | LVL(REM_RAM2))) l = CA_PMU_DRAM;
  }
  if (remote != NULL)
    *remote = l != CA_PMU_UNKNOWN && (((ds >> PERF_MEM_REMOTE_SHIFT) & 1) || (lvl & LVL_REMOTE));
  return l;
}

bool _ca_pmu_is_miss(ca_pmu_level_t l) {
  return l == CA_PMU_L3 || l == CA_PMU_BEYOND_L2 || l == CA_PMU_DRAM;
}

const char* _ca_pmu_level_name(ca_pmu_level_t l) {
  static const char* const names[CA_PMU_LEVELS] =
    { "unknown", "L1", "LFB", "L2", "L3", "beyond-L2", "DRAM" };
  return (unsigned)l < CA_PMU_LEVELS ? names[l] : "?";
}

static uint64_t rd64(const uint8_t* p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* IBS op registers from PERF_SAMPLE_RAW: address, latency and, unless the kernel's data source
   already said, the level. */
static void ibs_decode(const uint8_t* raw, uint32_t size, ca_pmu_sample_t* s) {
  if (size < 4 + 8 * (IBS_REG_LINAD + 1)) return;
  uint32_t caps;
  memcpy(&caps, raw, 4);
  uint64_t d2 = rd64(raw + 4 + 8 * IBS_REG_DATA2), d3 = rd64(raw + 4 + 8 * IBS_REG_DATA3);
  if (!(d3 & (D3_LD_OP | D3_ST_OP)) || (d3 & D3_SW_PF)) return;
  if (s->addr == 0 && (d3 & D3_LIN_VALID)) s->addr = rd64(raw + 4 + 8 * IBS_REG_LINAD);
  if (s->weight == 0 && (d3 & D3_DC_MISS)) s->weight = (uint32_t)(d3 >> 32) & 0xffff;
  if (s->level != CA_PMU_UNKNOWN || (d3 & D3_DC_UC)) return;
  if (!(d3 & D3_DC_MISS)) { s->level = CA_PMU_L1; return; }
  if (!(d3 & D3_L2_MISS)) { s->level = CA_PMU_L2; return; }
  s->level = CA_PMU_BEYOND_L2;
  if (!(d3 & D3_LD_OP)) return;                       /* IbsOpData2 is valid for loads only */
  bool zen4 = (caps & IBS_CAPS_ZEN4) != 0, rmt = (d2 & D2_RMT_NODE) != 0;
  unsigned src = (unsigned)(d2 & 7) | (zen4 ? (unsigned)((d2 >> 6) & 3) << 3 : 0);
  if (src == 3 || (zen4 && (src == 6 || src == 8))) { s->level = CA_PMU_DRAM; s->remote = rmt; }
  else if (src == 2 || (zen4 && src == 1)) s->level = CA_PMU_L3;
  else if (src == (zen4 ? 5u : 4u)) { s->level = CA_PMU_L3; s->remote = true; }
}

/* ---- the record parser -------------------------------------------------------------------- */

typedef struct cursor_s { const uint8_t* p; size_t left; bool bad; } cursor_t;

static const uint8_t* take(cursor_t* c, uint64_t n) {
  const uint8_t* p = c->p;
  if (n > c->left) { c->bad = true; c->left = 0; return NULL; }
  c->p += n;
  c->left -= n;
  return p;
}
static uint64_t take64(cursor_t* c) { const uint8_t* p = take(c, 8); return p ? rd64(p) : 0; }
static uint32_t take32(cursor_t* c) {
  uint32_t v = 0;
  const uint8_t* p = take(c, 4);
  if (p != NULL) memcpy(&v, p, 4);
  return v;
}

/* Fields whose layout depends on other attr settings: decoding stops there. */
#define SAMPLE_OPAQUE_1 (PERF_SAMPLE_READ)
#define SAMPLE_OPAQUE_2 (PERF_SAMPLE_BRANCH_STACK | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER)
#define SAMPLE_OPAQUE_3 (PERF_SAMPLE_REGS_INTR)

/* The body of a PERF_RECORD_SAMPLE (after its header), fields in linux/perf_event.h order.
   False when it is dropped (no address) or shorter than its sample_type says. */
static bool decode_sample(const uint8_t* body, size_t len, uint64_t type, uint32_t flags,
                          ca_pmu_sample_t* s, ca_pmu_stats_t* st) {
  cursor_t c = { body, len, false };
  const uint8_t* raw = NULL;
  uint32_t raw_size = 0;
  memset(s, 0, sizeof *s);
  if (type & PERF_SAMPLE_IDENTIFIER) take64(&c);
  if (type & PERF_SAMPLE_IP)         s->ip = take64(&c);
  if (type & PERF_SAMPLE_TID)        { s->pid = take32(&c); s->tid = take32(&c); }
  if (type & PERF_SAMPLE_TIME)       take64(&c);
  if (type & PERF_SAMPLE_ADDR)       s->addr = take64(&c);
  if (type & PERF_SAMPLE_ID)         take64(&c);
  if (type & PERF_SAMPLE_STREAM_ID)  take64(&c);
  if (type & PERF_SAMPLE_CPU)        take64(&c);                 /* u32 cpu, u32 res */
  if (type & PERF_SAMPLE_PERIOD)     take64(&c);
  if (type & SAMPLE_OPAQUE_1) goto done;
  if (type & PERF_SAMPLE_CALLCHAIN) {
    uint64_t nr = take64(&c);
    if (nr > c.left / 8) c.bad = true; else take(&c, nr * 8);
  }
  if (type & PERF_SAMPLE_RAW) {                                   /* u32 size, then size bytes */
    raw_size = take32(&c);
    raw = take(&c, raw_size);
  }
  if (type & SAMPLE_OPAQUE_2) goto done;
  if (type & PERF_SAMPLE_WEIGHT_TYPE) {
    uint64_t w = take64(&c);                /* WEIGHT_STRUCT: var1_dw (latency) is the low word */
    s->weight = (type & PERF_SAMPLE_WEIGHT_STRUCT) || w <= UINT32_MAX ? (uint32_t)w : UINT32_MAX;
  }
  if (type & PERF_SAMPLE_DATA_SRC)    s->data_src = take64(&c);
  if (type & PERF_SAMPLE_TRANSACTION) take64(&c);
  if (type & SAMPLE_OPAQUE_3) goto done;
  if (type & PERF_SAMPLE_PHYS_ADDR)   s->phys_addr = take64(&c);
done:
  if (c.bad) { st->malformed++; return false; }
  st->samples++;
  s->level = _ca_pmu_level(s->data_src, &s->remote);
  if ((flags & CA_PMU_F_IBS) && raw != NULL) ibs_decode(raw, raw_size, s);
  if (s->addr == 0) { st->no_addr++; return false; }
  return true;
}

/* n bytes at ring position pos, across the end of the data area if need be */
static void ring_copy(const uint8_t* data, uint64_t size, uint64_t pos, void* dst, size_t n) {
  uint64_t off = pos & (size - 1);
  size_t first = size - off < n ? (size_t)(size - off) : n;
  memcpy(dst, data + off, first);
  memcpy((uint8_t*)dst + first, data, n - first);
}

size_t _ca_pmu_parse(const uint8_t* data, uint64_t data_size, uint64_t* tail, uint64_t head,
                     uint64_t sample_type, uint32_t flags, ca_pmu_sample_t* out, size_t max,
                     ca_pmu_stats_t* st) {
  ca_pmu_stats_t scratch = { 0 };
  if (st == NULL) st = &scratch;
  uint64_t t = *tail;
  size_t n = 0;
  if (data_size < 8 || (data_size & (data_size - 1)) || head - t > data_size || (t & 7)) {
    if (head != t) st->malformed++;
    *tail = head;
    return 0;
  }
  while (t != head) {
    struct perf_event_header h;
    uint64_t avail = head - t;
    if (avail < sizeof h) { st->malformed++; t = head; break; }
    ring_copy(data, data_size, t, &h, sizeof h);
    if (h.size < sizeof h || h.size > avail || (h.size & 7)) { st->malformed++; t = head; break; }
    if (h.type == PERF_RECORD_SAMPLE) {
      if (n == max) break;                            /* left for the next call */
      uint64_t local[CA_PMU_RECORD_MAX / 8];
      uint64_t off = t & (data_size - 1);
      const uint8_t* rec = data + off;
      if (off + h.size > data_size) {                 /* wraps: copy it out first */
        if (h.size > sizeof local) { st->oversize++; st->records++; t += h.size; continue; }
        ring_copy(data, data_size, t, local, h.size);
        rec = (const uint8_t*)local;
      }
      if (decode_sample(rec + sizeof h, h.size - sizeof h, sample_type, flags, &out[n], st)) n++;
    } else if (h.type == PERF_RECORD_LOST && h.size >= 24) {   /* header, u64 id, u64 lost */
      uint64_t lost;
      ring_copy(data, data_size, t + 16, &lost, 8);
      st->lost += lost;
    } else if (h.type == PERF_RECORD_THROTTLE) {
      st->throttle++;
    } else if (h.type == PERF_RECORD_UNTHROTTLE) {
      st->unthrottle++;
    } else {
      st->other++;
    }
    st->records++;
    t += h.size;
  }
  *tail = t;
  return n;
}

/* ---- sysfs -------------------------------------------------------------------------------- */

/* The first line of a small file, without its newline; the read is the system call itself
   (read() is interposed by syscalls.c). */
static bool read_line(const char* path, char* buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = (ssize_t)syscall(SYS_read, fd, buf, len - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  char* nl = strchr(buf, '\n');
  if (nl != NULL) *nl = 0;
  return true;
}

/* <dir>/<a><b> */
static bool read_pmu(const char* dir, const char* a, const char* b, char* buf, size_t len) {
  char path[192];
  ca_buf_t p = ca_buf(path, sizeof path);
  ca_buf_str(&p, dir);
  ca_buf_char(&p, '/');
  ca_buf_str(&p, a);
  ca_buf_str(&p, b);
  return p.len < sizeof path && read_line(path, buf, len);
}

static bool parse_u64(const char** s, uint64_t* v) {
  const char* p = *s;
  unsigned base = 10, digits = 0;
  uint64_t x = 0;
  if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) { base = 16; p += 2; }
  for (;; p++, digits++) {
    unsigned d, c = (unsigned char)*p | 0x20;
    if (*p >= '0' && *p <= '9') d = (unsigned)(*p - '0');
    else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else break;
    x = x * base + d;
  }
  *s = p;
  *v = x;
  return digits > 0;
}

/* Put v into the attr bits a format file names: "config:0-7", "config1:0-15", "config:0-7,32-35"
   (the value's low bits fill the first range, the next bits the second). */
static bool apply_format(struct perf_event_attr* a, const char* fmt, uint64_t v) {
  __u64* field;
  if (strncmp(fmt, "config:", 7) == 0) { field = &a->config; fmt += 7; }
  else if (strncmp(fmt, "config1:", 8) == 0) { field = &a->config1; fmt += 8; }
  else if (strncmp(fmt, "config2:", 8) == 0) { field = &a->config2; fmt += 8; }
  else return false;
  for (;;) {
    uint64_t lo, hi;
    if (!parse_u64(&fmt, &lo)) return false;
    hi = lo;
    if (*fmt == '-') { fmt++; if (!parse_u64(&fmt, &hi)) return false; }
    if (hi < lo || hi > 63) return false;
    unsigned w = (unsigned)(hi - lo + 1);
    uint64_t m = w == 64 ? ~(uint64_t)0 : ((uint64_t)1 << w) - 1;
    *field = (*field & ~(m << lo)) | ((v & m) << lo);
    v = w == 64 ? 0 : v >> w;
    if (*fmt != ',') return *fmt == 0;
    fmt++;
  }
}

bool _ca_pmu_encode(struct perf_event_attr* a, const char* dir, const char* spec) {
  while (*spec != 0) {
    char term[32], fmt[64];
    size_t n = 0;
    uint64_t v = 1;                                   /* a bare term is a flag */
    while (*spec != 0 && *spec != '=' && *spec != ',') {
      if (n + 1 >= sizeof term) return false;
      term[n++] = *spec++;
    }
    term[n] = 0;
    if (*spec == '=') { spec++; if (!parse_u64(&spec, &v)) return false; }
    if (*spec == ',') spec++;
    else if (*spec != 0) return false;
    if (strcmp(term, "config") == 0 || strcmp(term, "config1") == 0 || strcmp(term, "config2") == 0) {
      ca_buf_t f = ca_buf(fmt, sizeof fmt);           /* perf's own terms: the whole field */
      ca_buf_str(&f, term);
      ca_buf_str(&f, ":0-63");
    } else if (!read_pmu(dir, "format/", term, fmt, sizeof fmt)) {
      return false;
    }
    if (!apply_format(a, fmt, v)) return false;
  }
  return true;
}

/* ---- opening events ----------------------------------------------------------------------- */

static void attr_init(struct perf_event_attr* a, uint32_t type, uint64_t sample_type) {
  memset(a, 0, sizeof *a);
  a->size = sizeof *a;
  a->type = type;
  a->sample_type = sample_type;
  a->exclude_kernel = 1;
  a->exclude_hv = 1;
  a->disabled = 1;
}

static int perf_open(const struct perf_event_attr* a, int group) {
  return (int)syscall(SYS_perf_event_open, a, 0, -1, group, PERF_FLAG_FD_CLOEXEC);
}

/* The event (after its group leader, if any) for the calling thread: its fd, or -errno. */
static int open_event(const ca_pmu_info_t* info, uint64_t period, int* leader_fd) {
  *leader_fd = -1;
  if (info->leader.size != 0 && (*leader_fd = perf_open(&info->leader, -1)) < 0) return -errno;
  struct perf_event_attr a = info->attr;
  a.sample_period = period;
  a.disabled = *leader_fd < 0;                        /* a group member follows its leader */
  int fd = perf_open(&a, *leader_fd);
  if (fd < 0) {
    int e = errno;
    if (*leader_fd >= 0) close(*leader_fd);
    *leader_fd = -1;
    return -e;
  }
  return fd;
}

static int probe(const ca_pmu_info_t* info) {
  int leader, fd = open_event(info, PROBE_PERIOD, &leader);
  if (fd < 0) return -fd;
  close(fd);
  if (leader >= 0) close(leader);
  return 0;
}

static void why_errno(ca_buf_t* b, const char* what, int e) {
  static const struct { int e; const char* name; } names[] = {
    { EACCES, "EACCES" }, { EPERM, "EPERM" }, { ENOENT, "ENOENT" }, { ENODEV, "ENODEV" },
    { EINVAL, "EINVAL" }, { EOPNOTSUPP, "EOPNOTSUPP" }, { ENOSYS, "ENOSYS" }, { EBUSY, "EBUSY" },
    { EMFILE, "EMFILE" }, { E2BIG, "E2BIG" }, { ENODATA, "ENODATA" } };
  const char* name = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].e == e) name = names[i].name;
  ca_buf_str(b, "perf_event_open(");
  ca_buf_str(b, what);
  ca_buf_str(b, "): ");
  if (name != NULL) ca_buf_str(b, name); else { ca_buf_str(b, "errno "); ca_buf_i64(b, e); }
  char par[16];
  if ((e == EACCES || e == EPERM) &&
      read_line("/proc/sys/kernel/perf_event_paranoid", par, sizeof par)) {
    ca_buf_str(b, " (perf_event_paranoid=");
    ca_buf_str(b, par);
    ca_buf_char(b, ')');
  }
}

static bool in_vm(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c >> 31) & 1;    /* CPUID.1:ECX.hypervisor */
#else
  return false;
#endif
}

static bool detect_ibs(ca_pmu_info_t* info, ca_buf_t* why) {
  char buf[64];
  uint64_t type;
  const char* p = buf;
  if (!read_pmu(PMU_DIR("ibs_op"), "type", "", buf, sizeof buf) || !parse_u64(&p, &type)) return false;
  info->kind = CA_PMU_IBS_OP;
  info->flags = CA_PMU_F_IBS;
  memcpy(info->name, "ibs_op", 7);
  attr_init(&info->attr, (uint32_t)type, PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_ADDR |
            PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC | PERF_SAMPLE_RAW);
  _ca_pmu_encode(&info->attr, PMU_DIR("ibs_op"), "cnt_ctl");     /* absent: IBS counts cycles */
  int e = probe(info);
  if (e == EINVAL) {                                  /* no privilege filtering in this kernel */
    info->attr.exclude_kernel = info->attr.exclude_hv = 0;
    e = probe(info);
    if (e != 0) memcpy(info->name, "ibs_op incl. kernel", 20);
  }
  if (e != 0) why_errno(why, info->name, e);
  return true;
}

static bool detect_pebs(ca_pmu_info_t* info, ca_buf_t* why) {
  static const char* const pmus[2][2] = { { "cpu", PMU_DIR("cpu") }, { "cpu_core", PMU_DIR("cpu_core") } };
  for (size_t i = 0; i < 2; i++) {
    const char* dir = pmus[i][1];
    char spec[128], buf[32];
    const char* p = buf;
    uint64_t type;
    if (!read_pmu(dir, "events/", "mem-loads", spec, sizeof spec)) continue;
    if (!read_pmu(dir, "type", "", buf, sizeof buf) || !parse_u64(&p, &type)) continue;
    info->kind = CA_PMU_PEBS_LDLAT;
    ca_buf_t name = ca_buf(info->name, sizeof info->name);
    ca_buf_str(&name, pmus[i][0]);
    ca_buf_str(&name, "/mem-loads");
    attr_init(&info->attr, (uint32_t)type, PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_ADDR |
              PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC);
    if (!_ca_pmu_encode(&info->attr, dir, spec)) {
      ca_buf_str(why, "cannot encode mem-loads with the format files: ");
      ca_buf_str(why, spec);
      return true;
    }
    if (read_pmu(dir, "events/", "mem-loads-aux", spec, sizeof spec)) {
      attr_init(&info->leader, (uint32_t)type, 0);
      if (!_ca_pmu_encode(&info->leader, dir, spec)) info->leader.size = 0;
    }
    int e = 0;
    for (int precise = 3; precise >= 1; precise--) {
      info->attr.precise_ip = (uint64_t)precise & 3;
      if ((e = probe(info)) == 0 || (e != EINVAL && e != EOPNOTSUPP)) break;
    }
    if (e != 0) why_errno(why, info->name, e);
    return true;
  }
  return false;
}

bool _ca_pmu_detect(ca_pmu_info_t* info) {
  int saved = errno;
  memset(info, 0, sizeof *info);
  ca_buf_t why = ca_buf(info->reason, sizeof info->reason);
  if (!detect_ibs(info, &why) && !detect_pebs(info, &why)) {
    char buf[16];
    ca_buf_str(&why, "no ibs_op or cpu/mem-loads PMU event");
    if (read_pmu(PMU_DIR("cpu"), "type", "", buf, sizeof buf) ||
        read_pmu(PMU_DIR("cpu_core"), "type", "", buf, sizeof buf))
      ca_buf_str(&why, " (the cpu PMU has no PEBS load latency)");
    else
      ca_buf_str(&why, in_vm() ? " (virtual machine without a PMU)" : " (no hardware PMU driver)");
  }
  if (why.len != 0) {
    info->kind = CA_PMU_NONE;
    memset(&info->attr, 0, sizeof info->attr);
    memset(&info->leader, 0, sizeof info->leader);
  }
  errno = saved;
  return why.len == 0;
}

/* ---- per-thread rings --------------------------------------------------------------------- */

int _ca_pmu_thread_open(const ca_pmu_info_t* info, ca_pmu_ring_t* ring, uint64_t period) {
  int saved = errno;
  memset(ring, 0, sizeof *ring);
  ring->fd = ring->leader_fd = -1;
  if (info->attr.size == 0) return ENODEV;
  if (info->flags & CA_PMU_F_IBS)                     /* IbsOpMaxCnt: multiples of 16 */
    period = period < 256 ? 256 : (period + 15) & ~(uint64_t)15;
  int fd = open_event(info, period == 0 ? 1 : period, &ring->leader_fd);
  if (fd < 0) { errno = saved; return -fd; }
  ring->fd = fd;
  ring->map_bytes = (1 + CA_PMU_RING_PAGES) * CA_OS_PAGE;
  void* base = mmap(NULL, ring->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = 0;
  if (base == MAP_FAILED) e = errno;
  else {
    ring->base = base;
    const struct perf_event_mmap_page* pg = base;
    ring->data = (const uint8_t*)base + (pg->data_offset != 0 ? pg->data_offset : CA_OS_PAGE);
    ring->data_size = pg->data_size != 0 ? pg->data_size : CA_PMU_RING_PAGES * CA_OS_PAGE;
    ring->sample_type = info->attr.sample_type;
    ring->flags = info->flags;
    int lead = ring->leader_fd;                      /* enabling the leader enables its group */
    if (ioctl(lead >= 0 ? lead : fd, PERF_EVENT_IOC_ENABLE, lead >= 0 ? PERF_IOC_FLAG_GROUP : 0))
      e = errno;
  }
  if (e != 0) _ca_pmu_thread_close(ring);
  errno = saved;
  return e;
}

void _ca_pmu_thread_close(ca_pmu_ring_t* ring) {
  int saved = errno;
  if (ring->base != NULL) syscall(SYS_munmap, ring->base, ring->map_bytes);  /* not interposed */
  if (ring->fd >= 0) close(ring->fd);
  if (ring->leader_fd >= 0) close(ring->leader_fd);
  memset(ring, 0, sizeof *ring);
  ring->fd = ring->leader_fd = -1;
  errno = saved;
}

size_t _ca_pmu_drain(ca_pmu_ring_t* ring, ca_pmu_sample_t* out, size_t max, ca_pmu_stats_t* st) {
  if (ring->base == NULL) return 0;
  struct perf_event_mmap_page* pg = ring->base;
  uint64_t head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE);  /* records before it: written */
  uint64_t tail = pg->data_tail;                                     /* only this thread writes it */
  size_t n = _ca_pmu_parse(ring->data, ring->data_size, &tail, head, ring->sample_type, ring->flags,
                           out, max, st);
  __atomic_store_n(&pg->data_tail, tail, __ATOMIC_RELEASE);          /* the kernel may reuse them */
  return n;
}
