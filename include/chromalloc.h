/* chromalloc: a cache-aware malloc for Linux.
   Use it unchanged through LD_PRELOAD=libchromalloc.so, or link with -lchromalloc: it then
   provides malloc, free, calloc, realloc, reallocarray, posix_memalign, aligned_alloc, memalign,
   valloc, pvalloc, malloc_usable_size, malloc_trim and the glibc __libc_* aliases.  This header
   adds chromalloc's own extensions.  Options: CHROMALLOC_OPTIONS="key=value,..." (docs/options.md);
   statistics: CHROMALLOC_STATS=path.json (written at exit, "%p" in the path becomes the pid). */
#ifndef CHROMALLOC_H
#define CHROMALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHROMALLOC_VERSION "0.1.0"

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

/* ---- cache colours ----------------------------------------------------------------------- */

#define CHROMALLOC_CALIBRATE_QUICK    1   /* skip the pool and agreement measurements */
#define CHROMALLOC_CALIBRATE_JSON     2   /* summary as JSON (the profile) instead of text */
#define CHROMALLOC_CALIBRATE_NO_SAVE  4   /* do not write the profile */

/* Measure how this machine's cache colours can be controlled (what `chromalloc calibrate`
   runs: seconds), write a readable summary (or JSON) into summary[len], and save the profile
   to `profile` (NULL: the default path, see docs/colours.md).  Returns 0 when colours are
   usable here, -1 when they are not (the summary says why), -2 when the profile could not be
   written. */
int chromalloc_calibrate(const char* profile, int flags, char* summary, size_t len);

#ifdef __cplusplus
}
#endif

#endif
