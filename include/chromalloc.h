/* chromalloc: a cache-aware malloc for Linux, in two libraries.
   - libchromalloc (-lchromalloc, pkg-config chromalloc): the allocator alone.  Use it unchanged
     through LD_PRELOAD=libchromalloc.so or link it: it provides malloc, free, calloc, realloc,
     reallocarray, posix_memalign, aligned_alloc, memalign, valloc, pvalloc, malloc_usable_size,
     malloc_trim and the glibc __libc_* aliases, and the functions of the first part of this
     header.  No thread, no signal handler, no other libc function replaced.
   - libchromalloc-colour (-lchromalloc-colour, pkg-config chromalloc-colour): the cache
     runtime, the same allocator plus cache colours and the NightWatch policy.  It provides
     everything above and the colour API of the second part; it runs a worker thread, a monitor
     thread and a SIGSEGV/SIGBUS handler, and wraps the libc calls that take buffers.
   Link one of them, never both.  Options: CHROMALLOC_OPTIONS="key=value,..." (docs/options.md);
   statistics: CHROMALLOC_STATS=path.json (written at exit, "%p" in the path becomes the pid). */
#ifndef CHROMALLOC_H
#define CHROMALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHROMALLOC_VERSION "0.1.0"

/* ---- both libraries ------------------------------------------------------------------------ */

/* Version string of the loaded library. */
const char* chromalloc_version(void);

/* Statistics as JSON (the same document CHROMALLOC_STATS writes).  Writes at most `size` bytes
   including the terminating NUL and returns the full length, like snprintf. */
size_t chromalloc_stats_json(char* buf, size_t size);

/* Write the statistics JSON to `path` ("%p" becomes the pid).  0 on success, -1 with errno. */
int chromalloc_stats_write(const char* path);

/* Current value of an option by name, e.g. chromalloc_option("purge_delay"); -1 and errno
   EINVAL for an unknown name.  Enumerated options return their index (layout: 0 aware, 1 ciu). */
long chromalloc_option(const char* name);

/* The options table as tab-separated lines "name, default, accepted values, description"
   (what `chromalloc options` prints).  Returns the full length, like snprintf. */
size_t chromalloc_options_describe(char* buf, size_t size);

/* Return free memory to the OS now (all delays skipped) for the calling thread and the global
   caches.  malloc_trim(0) does the same. */
void chromalloc_collect(void);

/* ---- cache colours: libchromalloc-colour only ------------------------------------------- */
/* A colour is the group of L2 sets one 4 KiB page maps to (16 or 32 on the development machines).
   chromalloc finds them by timing (docs/colours.md) and hands out memory made of pages of
   chosen colours, so that data that would pollute the cache can be kept in a small slice of it.

   A colour set is the slice [from/den, to/den) of the colours of the L2: chromalloc_colours(0,
   0, 1, 8) is the first eighth, chromalloc_colours(0, 1, 8, 8) the other seven eighths.  `level`
   is 2, or 0 for the level chromalloc colours.  Returns a handle >= 1, or -1 with errno EINVAL
   (a bad slice), ENOTSUP (colours cannot be controlled here, or option colours=0) or ENOSPC
   (15 sets in use).  The first call starts a background thread that calibrates (or loads the
   machine profile) and stocks the set with classified pages. */
int chromalloc_colours(unsigned level, unsigned from, unsigned to, unsigned den);

/* malloc from pages of a colour set; free() and realloc() work as usual (realloc keeps the set).
   While the set has no pages in stock the memory is ordinary (counted in the statistics as
   spans_ordinary): call chromalloc_colours_prepare first to wait for stock. */
void* chromalloc_malloc_coloured(size_t size, int colours);

/* Wait until `bytes` of pages of the set are in stock, at most timeout_ms.  0 when ready, -1 with
   errno ETIMEDOUT or ENOTSUP. */
int chromalloc_colours_prepare(int colours, size_t bytes, int timeout_ms);

/* How many colours the coloured level has, as measured here; -1 while not known yet. */
int chromalloc_colour_count(void);

/* Colour index of the page holding p (as discovered here, 0 .. colours-1), -1 when unknown. */
int chromalloc_colour_of(const void* p);

/* Move the pages covering [p, p + len) to pages of a colour set, safely while other threads use
   them (write-protect, copy, remap).  Returns the number of pages moved (fewer when the set's
   stock runs out), or -1 with errno.  Protection (NightWatch's, or a reserved slice's) leaves
   these pages where the program put them from then on. */
long chromalloc_recolour(void* p, size_t len, int colours);

/* Reserve a colour set (a slice at either end of the level, such as the first 1/8) for memory
   asked for with it, as a pollute buffer: ordinary memory is moved out of its colours, in the
   background, to the complement set.  Covers spans and objects up to the L2's size, 4 times the
   L2 in all, oldest first, recorded since start-up (with options colour_reserve=0 and
   nightwatch=0: since this call); pages the program has not touched, and memory passed to
   system calls, are left alone.  One set per process.  The first chromalloc_malloc_coloured
   from a slice of at most 1/4 at either end reserves it by itself (option colour_reserve), and
   NightWatch reserves its restrictive 1/8.  Returns 0, or -1 with errno: EINVAL (no such set, or
   a slice in the middle), EBUSY (another set is reserved), ENOTSUP (colours are off). */
int chromalloc_colours_reserve(int colours);

#define CHROMALLOC_CALIBRATE_QUICK    1   /* skip the pool and agreement measurements */
#define CHROMALLOC_CALIBRATE_JSON     2   /* summary as JSON (the profile) instead of text */
#define CHROMALLOC_CALIBRATE_NO_SAVE  4   /* do not write the profile */

/* Measure how this machine's cache colours can be controlled (what `chromalloc calibrate`
   runs: seconds), write a readable summary (or JSON) into summary[len], and save the profile
   to `profile` (NULL: the default path, see docs/colours.md).  Returns 0 when colours are
   usable here, -1 when they are not (the summary says why), -2 when the profile could not be
   written. */
int chromalloc_calibrate(const char* profile, int flags, char* summary, size_t len);

/* Hot pages (option hot=1, docs/hot.md): the heat of the page holding p, from 0 (not touched in
   the sampling windows it was looked at in lately) to 255 (touched in every one); -1 when hot
   pages are off or p is not heap memory chromalloc tracks.  chromalloc_hot_threshold() is the
   heat at or above which a page is among the hot ones now (-1: off, or none found yet). */
int chromalloc_heat(const void* p);
int chromalloc_hot_threshold(void);

/* ROCS (option rocs=1, docs/rocs.md): tell the runtime the program did `units` of its own work
   (iterations, requests...).  Its search for the pollute buffer's size then scores each
   configuration by units per CPU second instead of by its timed reloads.  Cheap (one atomic add);
   a no-op with ROCS off. */
void chromalloc_progress(unsigned long units);

#ifdef __cplusplus
}
#endif

#endif
