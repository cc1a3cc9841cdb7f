/* Partitions: co-running processes of the cache runtime that share an L2 give their hot pages
   disjoint slices of its colours (paper 002's partitions, without its kernel).

   An advisory registry per set file, in shared memory beside it (the set file's path and
   ".part"): colour names agree between processes only when their eviction sets are the same
   file's, so the file's identity is part of every entry.

     header { magic, lock (the holder's pid), slots }
     slot[i] { pid, its start time (pid reuse), set file (dev, inode), L2 domains it may run in,
               last seen (ms, CLOCK_MONOTONIC) }

   Two processes share an L2 when the L2 domains (sysfs: the CPUs sharing each L2) their CPU
   affinity reaches meet: two processes pinned to one CPU time-share its L2; on a machine whose
   CPUs each have an L2 of their own, processes that may run anywhere meet on every L2.  The
   processes that share an L2 with this one, itself included, in slot order, split the colours
   evenly: the k-th of m takes [k C/m, (k+1) C/m).  Each process recomputes its slice every
   period from what the registry says then, so all agree once each has looked.

   Robust to a process dying: a slot whose pid is gone, whose pid now names a process started
   later, or that has not been seen for STALE_MS is free; the lock word holds its holder's pid
   and a waiter takes it over when that process is gone.  Advisory: a process of another user,
   or one not using hot pages, is not in it, and nothing stops a process ignoring its slice. */
#define _GNU_SOURCE
#include "layer.h"
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLOTS     64
#define STALE_MS  10000              /* not seen for this long: gone (stopped, or a lost update) */
#define MAGIC     0x43415254u        /* "CART" */

typedef struct part_slot_s {
  _Atomic(int32_t) pid;              /* 0: free */
  uint64_t         started;          /* /proc/PID/stat's start time (clock ticks after boot) */
  uint64_t         dev, ino;         /* the set file */
  uint64_t         domains;          /* L2 domains its affinity reaches */
  _Atomic(uint64_t) seen_ms;
} part_slot_t;

typedef struct part_file_s {
  uint32_t         magic, nslots;
  _Atomic(int32_t) lock;
  part_slot_t      slot[SLOTS];
} part_file_t;

static struct {
  part_file_t* f;
  int          self;                 /* our slot, -1 */
  bool         tried;
  uint64_t     dev, ino, domains, started;
  uint64_t     mask;                 /* our slice, as last computed */
  uint32_t     sharing;              /* processes sharing our L2, us included */
} P = { .self = -1 };

/* field 22 of /proc/PID/stat: when the process started (0: no such process) */
static uint64_t start_time(int pid) {
  char path[64], buf[1024];
  ca_buf_t b = ca_buf(path, sizeof path);
  ca_buf_str(&b, "/proc/");
  ca_buf_u64(&b, (uint64_t)pid);
  ca_buf_str(&b, "/stat");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char* p = strrchr(buf, ')');                     /* the name may hold spaces */
  for (int field = 2; p != NULL && field < 22; field++) p = strchr(p + 1, ' ');
  return p != NULL ? strtoull(p + 1, NULL, 10) : 0;
}

/* the L2 domains (by the lowest CPU sharing each L2) that the CPUs in `cpus` belong to */
static uint64_t domains_of(const cpu_set_t* cpus) {
  uint64_t m = 0;
  for (int c = 0; c < CPU_SETSIZE && c < 1024; c++) {
    if (!CPU_ISSET(c, cpus)) continue;
    int first = c;
    for (int i = 0; i < 8; i++) {                  /* cache/indexI with level 2: its shared_cpu_list */
      char path[128], buf[64];
      ca_buf_t b = ca_buf(path, sizeof path);
      ca_buf_str(&b, "/sys/devices/system/cpu/cpu");
      ca_buf_u64(&b, (uint64_t)c);
      ca_buf_str(&b, "/cache/index");
      ca_buf_u64(&b, (uint64_t)i);
      size_t at = b.len;
      ca_buf_str(&b, "/level");
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) break;
      ssize_t n = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (n <= 0 || buf[0] != '2') continue;
      path[at] = 0;
      b.len = at;
      ca_buf_str(&b, "/shared_cpu_list");
      fd = open(path, O_RDONLY | O_CLOEXEC);
      n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
      if (fd >= 0) close(fd);
      if (n > 0) { buf[n] = 0; first = atoi(buf); }
      break;
    }
    m |= (uint64_t)1 << (first % 64);
  }
  return m;
}

static bool alive(const part_slot_t* s, uint64_t now_ms) {
  int pid = atomic_load(&s->pid);
  if (pid <= 0) return false;
  if (now_ms - atomic_load(&s->seen_ms) > STALE_MS && now_ms > atomic_load(&s->seen_ms)) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  return start_time(pid) == s->started;
}

static void lock(part_file_t* f) {
  int32_t me = (int32_t)getpid();
  for (uint64_t t0 = _ca_clock_ms();;) {
    int32_t free_ = 0;
    if (atomic_compare_exchange_strong(&f->lock, &free_, me)) return;
    if (_ca_clock_ms() - t0 > 10) {                /* held for long: its holder may be gone */
      int32_t h = atomic_load(&f->lock);
      if (h > 0 && kill(h, 0) != 0 && errno == ESRCH && atomic_compare_exchange_strong(&f->lock, &h, me)) return;
      t0 = _ca_clock_ms();
    }
    sched_yield();
  }
}
static void unlock(part_file_t* f) { atomic_store(&f->lock, 0); }

static part_file_t* open_registry(void) {
  char path[512];
  struct stat st;
  if (L.file.fd < 0 || !L.file.published || fstat(L.file.fd, &st) != 0 || !_ca_setfile_path(path, sizeof path - 8)) return NULL;
  P.dev = (uint64_t)st.st_dev;
  P.ino = (uint64_t)st.st_ino;
  ca_buf_t b = ca_buf(path + strlen(path), 8);
  ca_buf_str(&b, ".part");
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return NULL;
  if (fstat(fd, &st) != 0 || st.st_uid != getuid() || ((size_t)st.st_size < sizeof(part_file_t) && ftruncate(fd, sizeof(part_file_t)) != 0)) {
    close(fd);
    return NULL;
  }
  part_file_t* f = mmap(NULL, sizeof(part_file_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (f == MAP_FAILED) return NULL;
  if (f->magic != MAGIC) {                         /* new (zeros), or not ours: made afresh */
    lock(f);
    if (f->magic != MAGIC) { memset(f->slot, 0, sizeof f->slot); f->nslots = SLOTS; f->magic = MAGIC; }
    unlock(f);
  }
  return f;
}

/* The colours (of `colours`) this process's hot pages may use; all of them when it is alone
   on its L2s or the registry cannot be used here.  Refreshes our entry. */
uint64_t _ca_colour_partition(uint32_t colours) {
  uint64_t all = colours >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << colours) - 1;
  if (!P.tried) {
    P.tried = true;
    P.f = open_registry();
  }
  if (P.started == 0) P.started = start_time((int)getpid());
  if (P.f == NULL || colours == 0) { P.mask = all; P.sharing = 1; return all; }
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0) P.domains = domains_of(&cpus);
  uint64_t now = _ca_clock_ms();
  part_file_t* f = P.f;
  lock(f);
  if (P.self >= 0 && atomic_load(&f->slot[P.self].pid) != (int32_t)getpid()) P.self = -1;   /* taken over */
  for (int i = 0; i < SLOTS && P.self < 0; i++)
    if (!alive(&f->slot[i], now)) {
      f->slot[i].started = P.started;
      f->slot[i].dev = P.dev;
      f->slot[i].ino = P.ino;
      atomic_store(&f->slot[i].pid, (int32_t)getpid());
      P.self = i;
    }
  if (P.self >= 0) {
    f->slot[P.self].domains = P.domains;
    atomic_store(&f->slot[P.self].seen_ms, now);
  }
  uint32_t k = 0, m = 0;
  for (int i = 0; i < SLOTS && P.self >= 0; i++) {
    part_slot_t* s = &f->slot[i];
    if (i != P.self && (!alive(s, now) || s->dev != P.dev || s->ino != P.ino || (s->domains & P.domains) == 0)) continue;
    k += i < P.self;
    m++;
  }
  unlock(f);
  if (m <= 1) { P.mask = all; P.sharing = 1; return all; }
  uint32_t lo = k * colours / m, hi = (k + 1) * colours / m;
  P.mask = (hi >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << hi) - 1) & ~(((uint64_t)1 << lo) - 1);
  P.sharing = m;
  return P.mask;
}

/* The process ends (or stops using hot pages): its slice is free at once. */
void _ca_colour_partition_leave(void) {
  if (P.f == NULL || P.self < 0) return;
  int32_t me = (int32_t)getpid();
  atomic_compare_exchange_strong(&P.f->slot[P.self].pid, &me, 0);
  P.self = -1;
}

uint32_t _ca_colour_partition_sharing(void) { return P.sharing; }

/* a fork child: not in the registry (its parent's slot is the parent's), started now */
void _ca_colour_partition_fork_child(void) { P.self = -1; P.started = 0; }
