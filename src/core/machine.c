/* Machine cache model: the data cache levels of this machine (size, ways, line, sets, sharing),
   read from sysfs, else from cpuid (Intel leaf 4 / AMD leaf 0x8000001D), else a documented
   default.  Index-aware placement needs the L1d line size and set count; the colour layer builds
   on the same table.  Read once at start-up with raw open/read: no stdio, no allocation.

   CHROMALLOC_MACHINE="l1d=48K/12,l2=1M/16,l3=32M/16,index=hashed" describes a machine instead
   (sizes with K or M, "/ways"; line 64 unless line=N): the tests run every geometry's logic on
   any host this way.  A described machine is not this one, so nothing may time it: the colour
   layer then answers its eviction questions from a simulated L2 of that geometry (simcache.c),
   whose page colours are the frame number's low bits (index=linear) or a hash of it (hashed),
   whose frame numbers a process can read with frames=1 (as root can pagemap's), and each of
   whose tests takes probe_us (0) of the worker's CPU, as a timed one would. */
#include "internal.h"
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

ca_machine_t _ca_machine;

static bool read_small(const char* path, char* buf, size_t len) {
  int fd = _ca_os_open(path, O_RDONLY, 0);
  if (fd < 0) return false;
  long n = _ca_os_read(fd, buf, len - 1);
  _ca_os_close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  return true;
}

/* "32K" -> 32768, "8" -> 8 */
static uint32_t parse_size(const char* s) {
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') v = v * 10 + (uint64_t)(*s++ - '0');
  if (*s == 'K') v <<= 10;
  else if (*s == 'M') v <<= 20;
  return (uint32_t)v;
}

/* "0-1" or "0,2,4" -> number of cpus */
static uint32_t parse_cpu_list(const char* s) {
  uint32_t count = 0;
  while (*s >= '0' && *s <= '9') {
    uint32_t a = 0, b;
    while (*s >= '0' && *s <= '9') a = a * 10 + (uint32_t)(*s++ - '0');
    b = a;
    if (*s == '-') { s++; b = 0; while (*s >= '0' && *s <= '9') b = b * 10 + (uint32_t)(*s++ - '0'); }
    count += b >= a ? b - a + 1 : 1;
    if (*s == ',') s++;
  }
  return count;
}

static bool from_sysfs(ca_machine_t* m) {
  char path[96], buf[64];
  const char base[] = "/sys/devices/system/cpu/cpu0/cache/index";
  for (int idx = 0; idx < 10 && m->nlevels < 4; idx++) {
    size_t n = sizeof base - 1;
    memcpy(path, base, n);
    path[n++] = (char)('0' + idx);
    path[n++] = '/';
#define FIELD(name) (memcpy(path + n, name, sizeof name), read_small(path, buf, sizeof buf))
    if (!FIELD("type")) break;
    if (buf[0] == 'I') continue;                       /* instruction cache */
    ca_cache_level_t c = {0};
    if (FIELD("level")) c.level = parse_size(buf);
    if (FIELD("size")) c.size = parse_size(buf);
    if (FIELD("ways_of_associativity")) c.ways = parse_size(buf);
    if (FIELD("coherency_line_size")) c.line = parse_size(buf);
    if (FIELD("number_of_sets")) c.sets = parse_size(buf);
    if (FIELD("shared_cpu_list")) c.shared_cpus = parse_cpu_list(buf);
#undef FIELD
    if (c.sets == 0 && c.ways && c.line) c.sets = c.size / (c.ways * c.line);
    if (c.level == 0 || c.line == 0 || c.sets == 0) continue;
    m->levels[m->nlevels++] = c;
  }
  return m->nlevels > 0;
}

#if defined(__x86_64__) || defined(__i386__)
static bool from_cpuid(ca_machine_t* m) {
  unsigned a, b, c, d, leaf;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  bool amd = (b == 0x68747541);                        /* "Auth"enticAMD */
  leaf = amd ? 0x8000001D : 4;
  if (amd && __get_cpuid_max(0x80000000, NULL) < 0x8000001D) return false;
  if (!amd && a < 4) return false;
  for (unsigned i = 0; i < 8 && m->nlevels < 4; i++) {
    __cpuid_count(leaf, i, a, b, c, d);
    unsigned type = a & 31;
    if (type == 0) break;
    if (type == 2) continue;                           /* instruction cache */
    ca_cache_level_t l = {0};
    l.level = (a >> 5) & 7;
    l.line = (b & 0xfff) + 1;
    l.ways = ((b >> 22) & 0x3ff) + 1;
    l.sets = c + 1;
    l.size = l.line * l.ways * l.sets * (((b >> 12) & 0x3ff) + 1);
    l.shared_cpus = ((a >> 14) & 0xfff) + 1;
    m->levels[m->nlevels++] = l;
  }
  return m->nlevels > 0;
}
#else
static bool from_cpuid(ca_machine_t* m) { (void)m; return false; }
#endif

/* "32K/8" -> a level of that size and associativity (0 ways: not understood) */
static ca_cache_level_t parse_level(const char* v, size_t len, uint32_t level, uint32_t line) {
  char buf[32];
  if (len >= sizeof buf) len = sizeof buf - 1;
  memcpy(buf, v, len);
  buf[len] = 0;
  ca_cache_level_t c = { .level = level, .line = line, .shared_cpus = level >= 3 ? 2 : 1 };   /* the L3 is shared */
  c.size = parse_size(buf);
  const char* slash = strchr(buf, '/');
  c.ways = slash ? parse_size(slash + 1) : 0;
  if (c.size == 0 || c.ways == 0 || c.size % (c.ways * line) != 0) c.ways = 0;
  else c.sets = c.size / (c.ways * line);
  return c;
}

static bool described(ca_machine_t* m, const char* d) {
  uint32_t line = 64;
  const char* l = strstr(d, "line=");
  if (l != NULL) line = parse_size(l + 5);
  if (line < 16 || (line & (line - 1))) line = 64;
  ca_cache_level_t lv[3] = {{0}};
  for (const char* p = d; *p;) {
    const char* item = p;
    while (*p && *p != ',') p++;
    size_t n = (size_t)(p - item);
    if (*p == ',') p++;
    const char* eq = memchr(item, '=', n);
    if (eq == NULL) { _ca_warn("CHROMALLOC_MACHINE: an item without '=' ignored"); continue; }
    size_t k = (size_t)(eq - item), vl = n - k - 1;
    int li = k == 3 && memcmp(item, "l1d", 3) == 0 ? 0 : k == 2 && memcmp(item, "l2", 2) == 0 ? 1
           : k == 2 && memcmp(item, "l3", 2) == 0 ? 2 : -1;
    if (li >= 0) { lv[li] = parse_level(eq + 1, vl, (uint32_t)li + 1, line); continue; }
    if (k == 5 && memcmp(item, "index", 5) == 0) {
      if (vl == 6 && memcmp(eq + 1, "hashed", 6) == 0) m->hashed = true;
      else if (!(vl == 6 && memcmp(eq + 1, "linear", 6) == 0)) _ca_warn("CHROMALLOC_MACHINE: index is linear or hashed; linear used");
      continue;
    }
    if (k == 4 && memcmp(item, "line", 4) == 0) continue;
    if (k == 6 && memcmp(item, "frames", 6) == 0) { m->frames = vl == 1 && eq[1] == '1'; continue; }
    if (k == 8 && memcmp(item, "probe_us", 8) == 0) {
      char v[16];
      size_t len = vl < sizeof v - 1 ? vl : sizeof v - 1;
      memcpy(v, eq + 1, len);
      v[len] = 0;
      m->probe_ns = parse_size(v) * 1000;
      continue;
    }
    _ca_warn("CHROMALLOC_MACHINE: unknown item ignored (l1d, l2, l3, line, index, frames, probe_us)");
  }
  if (lv[0].ways == 0) { _ca_warn("CHROMALLOC_MACHINE: no valid l1d=SIZE/WAYS: the machine is read instead"); return false; }
  for (int i = 0; i < 3; i++) if (lv[i].ways != 0) m->levels[m->nlevels++] = lv[i];
  m->simulated = true;
  return true;
}

void _ca_machine_init(void) {
  ca_machine_t* m = &_ca_machine;
  memset(m, 0, sizeof *m);
  const char* d = _ca_env(CA_ENV_MACHINE);
  if (d != NULL && d[0] != 0 && described(m, d)) m->source = "described";
  else if ((memset(m, 0, sizeof *m), from_sysfs(m))) m->source = "sysfs";
  else if (from_cpuid(m)) m->source = "cpuid";
  else {
    /* a common L1d: 32 KiB, 8 ways, 64-byte lines */
    m->levels[0] = (ca_cache_level_t){ .level = 1, .size = 32768, .ways = 8, .line = 64, .sets = 64 };
    m->nlevels = 1;
    m->source = "default";
  }
  m->l1d = m->levels[0];
  for (uint32_t i = 0; i < m->nlevels; i++)
    if (m->levels[i].level == 1) { m->l1d = m->levels[i]; break; }
  /* the layout needs a power-of-two line and set count; anything else falls back to 64 x 64 */
  uint32_t line = m->l1d.line, sets = m->l1d.sets;
  if (line < 16 || (line & (line - 1)) || sets == 0 || (sets & (sets - 1))) {
    m->l1d.line = 64; m->l1d.sets = 64;
    m->source = "default";
  }
}
