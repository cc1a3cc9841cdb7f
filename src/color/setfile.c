/* The shared set file: eviction sets kept in a file on tmpfs, so that every process of a user on
   this machine (since boot) uses the same ones instead of building its own.

   An eviction set is a property of physical frames, and a page of a shared file has the same
   frame in every process that maps it: the sets one process found are the sets of all.  Building
   the few sets a process needs took 0.3-1 s of its worker's time on a quiet host and failed for
   seconds on a loud one (issue 47); loading and checking them takes milliseconds.

     file:   [ header: 4 pages ][ page 0 ][ page 1 ] ...          (tmpfs; pages no set uses are
     header: machine, ways, colours, known                          holes, given back)
             ref[c], set[c][0..ways) = page numbers, c < known     colour c's reference and set

   A colour's number is its place in the file, the same in every process that loads it (the
   slices of two programs name the same colours).  Reference pages are shared too: the probe's
   chase holds distances, not addresses, in one order for all (probe.c), so a reference is the
   same bytes wherever it is mapped and is never written again.

   Path: $CHROMALLOC_SETS (on tmpfs), else /dev/shm/chromalloc-<uid>-<machine hash>.sets (mode
   0600).  A file is written whole under a temporary name and renamed into place: a reader sees a
   complete file or none; after that it only grows, by sets appended (below).  Its frames can
   move (the host migrates guest memory, or the guest compacts it), so a process checks the sets
   it uses before trusting them (start.c) and writes new ones over a file that no longer checks
   out.  The option colour_share=0 keeps a process's sets
   its own. */
#define _GNU_SOURCE
#include "layer.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define MAGIC          "CASETS02"            /* 01: references alike (merged by KSM) */
#define HEADER_PAGES   4
#define NO_PAGE        0xffffffffu

typedef struct setfile_header_s {
  char     magic[8];
  uint32_t header_pages, npages;                 /* pages after the header */
  uint32_t ways, colours, known;                 /* colours of the level; sets 0..known-1 here */
  uint32_t set_ratio_pct, passes;                /* what the sets read when they were found */
  uint64_t written_ns;                           /* CLOCK_REALTIME */
  char     machine[256];
  uint32_t ref[CA_COLOURS_MAX];
  uint32_t set[CA_COLOURS_MAX][CA_WAYS_MAX];
} setfile_header_t;

_Static_assert(sizeof(setfile_header_t) <= HEADER_PAGES * CA_OS_PAGE, "header pages");

/* The path of this machine's set file into out (false: too long). */
bool _ca_setfile_path(char* out, size_t len) {
  ca_buf_t b = ca_buf(out, len);
  const char* env = _ca_env(CA_ENV_SETS);
  if (env && env[0]) { ca_buf_str(&b, env); return b.len < len; }
  char key[256];
  _ca_machine_key(key, sizeof key);
  uint64_t h = 0xcbf29ce484222325ull;              /* FNV-1a */
  for (const char* k = key; *k; k++) { h ^= (uint8_t)*k; h *= 0x100000001b3ull; }
  ca_buf_str(&b, "/dev/shm/chromalloc-");
  ca_buf_u64(&b, (uint64_t)getuid());
  ca_buf_char(&b, '-');
  ca_buf_hex(&b, h);
  ca_buf_str(&b, ".sets");
  return b.len < len;
}

/* Only tmpfs keeps a file's frames: sets in a file on ext4 (/tmp here) stopped evicting their
   references within 10-20 s while other processes of the cache runtime ran, where those in
   /dev/shm held for 20 minutes.  A described machine's frames are simulated: any file serves. */
static bool keeps_frames(int fd) {
  struct statfs fs;
  if (_ca_machine.simulated) return true;
  if (fstatfs(fd, &fs) == 0 && (uint32_t)fs.f_type == 0x01021994u) return true;   /* TMPFS_MAGIC */
  static _Atomic(bool) warned;
  if (!atomic_exchange(&warned, true))
    _ca_warn("the set file is not on tmpfs ($CHROMALLOC_SETS): eviction sets stay this process's own");
  return false;
}

/* A described machine's L2 is simulated by frame: the file's pages get frames of their own
   (named by the file, so that every process mapping it sees the same ones). */
static void name_frames(int fd, uint8_t* pages, size_t npages) {
  struct stat st;
  if (!_ca_machine.simulated || fstat(fd, &st) != 0) return;
  _ca_sim_file_frames(pages, npages, (uint64_t)st.st_ino);
}

/* A new set file under construction: `npages` pages after the header, mapped shared (a page
   source faults them in).  The file has no name until it is published.  False: no tmpfs here,
   or sharing is off (the sets stay the process's own). */
bool _ca_setfile_create(ca_setfile_t* f, size_t npages) {
  char path[512];
  memset(f, 0, sizeof *f);
  f->fd = f->lock_fd = -1;
  if (_ca_colour_opt(CA_COPT_SHARE) == 0 || !_ca_setfile_path(path, sizeof path)) return false;
  char dir[512];
  memcpy(dir, path, sizeof dir);
  char* slash = strrchr(dir, '/');
  if (slash == NULL) return false;
  if (slash == dir) slash[1] = 0;                  /* a file in / */
  else *slash = 0;
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  size_t len = (HEADER_PAGES + npages) * CA_OS_PAGE;
  if (fd < 0 || !keeps_frames(fd) || ftruncate(fd, (off_t)len) != 0) { if (fd >= 0) close(fd); return false; }
  uint8_t* base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) { close(fd); return false; }
  struct stat st;
  f->fd = fd;
  f->base = base;
  f->len = len;
  f->pages = base + HEADER_PAGES * CA_OS_PAGE;
  f->npages = npages;
  f->built = true;
  if (fstat(fd, &st) == 0) { f->dev = (uint64_t)st.st_dev; f->ino = (uint64_t)st.st_ino; }
  name_frames(fd, f->pages, npages);
  return true;
}

static uint32_t page_no(const ca_setfile_t* f, const void* p) {
  size_t i = (size_t)((const uint8_t*)p - f->pages) / CA_OS_PAGE;
  return (const uint8_t*)p >= f->pages && i < f->npages ? (uint32_t)i : NO_PAGE;
}

/* Give back the pages of f that neither map's sets nor references use (holes in the file). */
static void punch_unused(ca_setfile_t* f, const ca_colour_map_t* map) {
  uint8_t* used = _ca_os_map(f->npages);
  if (used == NULL) return;
  for (uint32_t c = 0; c < map->ncolours; c++) {
    uint32_t r = page_no(f, map->ref[c]);
    if (r != NO_PAGE) used[r] = 1;
    for (uint32_t w = 0; w < map->ways; w++) { uint32_t k = page_no(f, map->set[c][w]); if (k != NO_PAGE) used[k] = 1; }
  }
  for (size_t i = 0, run; i < f->npages; i += run ? run : 1) {
    for (run = 0; i + run < f->npages && !used[i + run]; run++) {}
    if (run) fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                       (off_t)((HEADER_PAGES + i) * CA_OS_PAGE), (off_t)(run * CA_OS_PAGE));
  }
  _ca_os_unmap(used, f->npages);
}

/* Publish the sets of map (all of them pages of f) as this machine's set file, replacing any
   there; the unused pages are given back.  `colours` is the level's colour count. */
bool _ca_setfile_publish(ca_setfile_t* f, const ca_colour_map_t* map, uint32_t colours, const ca_timing_probe_t* tp) {
  if (f->fd < 0 || map->ncolours == 0) return false;
  setfile_header_t* h = (setfile_header_t*)f->base;
  for (uint32_t c = 0; c < map->ncolours; c++) {
    h->ref[c] = page_no(f, map->ref[c]);
    for (uint32_t w = 0; w < map->ways; w++) h->set[c][w] = page_no(f, map->set[c][w]);
    if (h->ref[c] == NO_PAGE) return false;        /* a set of other pages: not this file's */
  }
  punch_unused(f, map);
  h->header_pages = HEADER_PAGES;
  h->npages = (uint32_t)f->npages;
  h->ways = map->ways;
  h->colours = colours;
  h->known = map->ncolours;
  h->set_ratio_pct = tp->set_ratio_pct;
  h->passes = (uint32_t)tp->passes;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  h->written_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
  _ca_machine_key(h->machine, sizeof h->machine);
  memcpy(h->magic, MAGIC, 8);
  char path[512], tmp[540], fdpath[64];
  if (!_ca_setfile_path(path, sizeof path)) return false;
  ca_buf_t b = ca_buf(tmp, sizeof tmp);
  ca_buf_str(&b, path); ca_buf_str(&b, ".new."); ca_buf_u64(&b, (uint64_t)getpid());
  b = ca_buf(fdpath, sizeof fdpath);
  ca_buf_str(&b, "/proc/self/fd/"); ca_buf_u64(&b, (uint64_t)f->fd);
  unlink(tmp);
  if (linkat(AT_FDCWD, fdpath, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) != 0) return false;
  bool renamed = rename(tmp, path) == 0;
  unlink(tmp);         /* rename() between two links of one inode (a file published twice: by a fork child
                          as well as its parent) does nothing: the temporary name would stay */
  if (!renamed) return false;
  f->published = true;
  return true;
}

/* sets [from, to) of the header into map */
static void read_sets(const ca_setfile_t* f, const setfile_header_t* h, ca_colour_map_t* map, uint32_t from, uint32_t to) {
  for (uint32_t c = from; c < to; c++) {
    map->ref[c] = f->pages + (size_t)h->ref[c] * CA_OS_PAGE;
    for (uint32_t w = 0; w < h->ways; w++) map->set[c][w] = f->pages + (size_t)h->set[c][w] * CA_OS_PAGE;
  }
}

static bool sets_valid(const setfile_header_t* h, uint32_t from, uint32_t to) {
  bool ok = true;
  for (uint32_t c = from; ok && c < to; c++) {
    ok = h->ref[c] < h->npages;
    for (uint32_t w = 0; ok && w < h->ways; w++) ok = h->set[c][w] < h->npages;
  }
  return ok;
}

/* Map this machine's set file: its sets into map (known colours, in its order), the level's
   colour count into *colours.  False when there is none, or one for another machine. */
bool _ca_setfile_open(ca_setfile_t* f, ca_colour_map_t* map, uint32_t* colours) {
  char path[512], key[256];
  memset(f, 0, sizeof *f);
  f->fd = f->lock_fd = -1;
  if (_ca_colour_opt(CA_COPT_SHARE) == 0 || !_ca_setfile_path(path, sizeof path)) return false;
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  struct stat st;
  if (fd < 0) return false;
  if (fstat(fd, &st) != 0 || st.st_uid != getuid() || (size_t)st.st_size < HEADER_PAGES * CA_OS_PAGE ||
      !keeps_frames(fd)) {
    close(fd);
    return false;
  }
  size_t len = (size_t)st.st_size;
  uint8_t* base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) { close(fd); return false; }
  const setfile_header_t* h = (const setfile_header_t*)base;
  _ca_machine_key(key, sizeof key);
  uint32_t known = __atomic_load_n(&h->known, __ATOMIC_ACQUIRE);   /* a builder raises it last */
  bool ok = memcmp(h->magic, MAGIC, 8) == 0 && h->header_pages == HEADER_PAGES &&
            (size_t)(HEADER_PAGES + h->npages) * CA_OS_PAGE <= len && h->ways >= 1 && h->ways <= CA_WAYS_MAX &&
            known >= 1 && known <= CA_COLOURS_MAX && known <= h->colours && h->colours <= CA_COLOURS_MAX &&
            strncmp(h->machine, key, sizeof h->machine) == 0;
  ok = ok && sets_valid(h, 0, known);
  if (!ok) { munmap(base, len); close(fd); return false; }
  f->fd = fd;
  f->base = base;
  f->len = len;
  f->pages = base + HEADER_PAGES * CA_OS_PAGE;
  f->npages = h->npages;
  f->published = true;
  f->dev = (uint64_t)st.st_dev;
  f->ino = (uint64_t)st.st_ino;
  name_frames(fd, f->pages, f->npages);
  memset(map, 0, sizeof *map);
  map->ways = h->ways;
  read_sets(f, h, map, 0, known);
  map->ncolours = known;
  *colours = h->colours;
  f->hint_ratio_pct = h->set_ratio_pct;
  f->hint_passes = h->passes;
  return true;
}

/* ---- growing a published file ----------------------------------------------------------------
   A process whose colours the file lacks builds them from the file's holes, so that the next
   processes load them instead of building them too (each built 16 of 32 for itself, 5 s of its
   worker's CPU here).  The pages are every process's: one process builds there at a time
   (flock), after taking the sets another added meanwhile, and raises `known` after writing the
   sets, so a reader sees the old count or the new one with its sets. */

/* Hold f (published, and still the file at the path) to build in it, waiting up to wait_ms
   while another process does.  False: busy for longer, or replaced.  The lock is taken on a
   descriptor of its own: the file's mapping holds the descriptor f->fd was opened as, and a
   fork child holding that mapping would keep a lock on it alive after this process died. */
bool _ca_setfile_lock(ca_setfile_t* f, uint64_t wait_ms) {
  char path[512];
  struct stat st;
  if (f->fd < 0 || !f->published || !_ca_setfile_path(path, sizeof path)) return false;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  bool ok = fstat(fd, &st) == 0 && (uint64_t)st.st_dev == f->dev && (uint64_t)st.st_ino == f->ino;
  for (uint64_t t0 = _ca_clock_ms(); ok && flock(fd, LOCK_EX | LOCK_NB) != 0;) {
    ok = (errno == EWOULDBLOCK || errno == EINTR) && _ca_clock_ms() - t0 < wait_ms;
    struct timespec t = { 0, 20000000 };
    if (ok) nanosleep(&t, NULL);
  }
  if (!ok) { close(fd); return false; }
  f->lock_fd = fd;
  return true;
}

void _ca_setfile_unlock(ca_setfile_t* f) {
  if (f->lock_fd < 0) return;
  flock(f->lock_fd, LOCK_UN);
  close(f->lock_fd);
  f->lock_fd = -1;
}

/* A fork child does not build until its own worker has started: a lock descriptor it inherited
   (forked while this process built) goes, if it still is ours (the program may have put a file
   of its own under its number meanwhile: not in a child's first moments, but checked). */
void _ca_setfile_fork_child(ca_setfile_t* f) {
  struct stat st;
  if (f->lock_fd >= 0 && fstat(f->lock_fd, &st) == 0 && (uint64_t)st.st_dev == f->dev && (uint64_t)st.st_ino == f->ino)
    close(f->lock_fd);
  f->lock_fd = -1;
}

/* (held) The sets another process added since map was read, appended to map: how many. */
uint32_t _ca_setfile_adopt(const ca_setfile_t* f, ca_colour_map_t* map) {
  const setfile_header_t* h = (const setfile_header_t*)f->base;
  uint32_t from = map->ncolours, to = __atomic_load_n(&h->known, __ATOMIC_ACQUIRE);
  if (to <= from || to > CA_COLOURS_MAX || h->ways != map->ways || !sets_valid(h, from, to)) return 0;
  read_sets(f, h, map, from, to);
  map->ncolours = to;
  return to - from;
}

/* (held) map's sets beyond the file's known ones, all pages of f, added to it: how many. */
uint32_t _ca_setfile_extend(ca_setfile_t* f, const ca_colour_map_t* map) {
  setfile_header_t* h = (setfile_header_t*)f->base;
  uint32_t c = h->known;
  if (h->ways != map->ways) return 0;
  for (; c < map->ncolours && c < h->colours; c++) {
    uint32_t ref = page_no(f, map->ref[c]), set[CA_WAYS_MAX];
    bool ours = ref != NO_PAGE;
    for (uint32_t w = 0; w < map->ways && ours; w++) ours = (set[w] = page_no(f, map->set[c][w])) != NO_PAGE;
    if (!ours) break;
    h->ref[c] = ref;
    memcpy(h->set[c], set, map->ways * sizeof *set);
  }
  uint32_t added = c - h->known;
  if (added) __atomic_store_n(&h->known, c, __ATOMIC_RELEASE);
  return added;
}

void _ca_setfile_close(ca_setfile_t* f) {
  _ca_setfile_unlock(f);
  if (f->base) munmap(f->base, f->len);
  if (f->fd >= 0) close(f->fd);
  memset(f, 0, sizeof *f);
  f->fd = f->lock_fd = -1;
}

/* The set file of this machine goes (chromalloc calibrate writes a new one; tests). */
void _ca_setfile_remove(void) {
  char path[512];
  if (_ca_setfile_path(path, sizeof path)) unlink(path);
}

#ifdef CA_TEST_HOOKS
/* tests: the published file's sets of colours 0 and 2 trade a member, so that neither holds
   (not 0 and 1: the check reads them as a pair, whose union still holds 8 pages of each) */
bool _ca_setfile_test_spoil(void) {
  ca_setfile_t f;
  ca_colour_map_t m;
  uint32_t colours;
  if (!_ca_setfile_open(&f, &m, &colours) || m.ncolours < 3) return false;
  setfile_header_t* h = (setfile_header_t*)f.base;
  uint32_t t = h->set[0][0];
  h->set[0][0] = h->set[2][0];
  h->set[2][0] = t;
  _ca_setfile_close(&f);
  return true;
}
#endif
