/* The environment, read once: the variables chromalloc looks at are copied at process start, on
   the thread that starts it, and read from the copies after.  getenv() is not safe beside the
   program's setenv(), and the cache runtime's worker threads read these long after start-up
   (a worker's getenv walked the environ array that git's setenv had just reallocated, and
   crashed the program).  A later change of the program's environment changes nothing here. */
#include "internal.h"
#include <stdlib.h>

#define ENV_MAX 4096                     /* a longer value is ignored, with a warning */

static const char* const names[CA_ENV_COUNT] = {
  [CA_ENV_OPTIONS] = "CHROMALLOC_OPTIONS", [CA_ENV_MACHINE] = "CHROMALLOC_MACHINE",
  [CA_ENV_STATS] = "CHROMALLOC_STATS",     [CA_ENV_PROFILE] = "CHROMALLOC_PROFILE",
  [CA_ENV_SETS] = "CHROMALLOC_SETS",       [CA_ENV_XDG_CACHE_HOME] = "XDG_CACHE_HOME",
  [CA_ENV_HOME] = "HOME",                  [CA_ENV_LD_PRELOAD] = "LD_PRELOAD",
  [CA_ENV_THP] = "CA_THP",
};
static char values[CA_ENV_COUNT][ENV_MAX];
static bool present[CA_ENV_COUNT];

void _ca_env_init(void) {
  for (int i = 0; i < CA_ENV_COUNT; i++) {
    const char* v = getenv(names[i]);
    size_t n = v != NULL ? strlen(v) : 0;
    present[i] = v != NULL && n < ENV_MAX;
    if (present[i]) memcpy(values[i], v, n + 1);
    else if (v != NULL) {
      char msg[96];
      ca_buf_t b = ca_buf(msg, sizeof msg);
      ca_buf_str(&b, names[i]);
      ca_buf_str(&b, " longer than 4095 bytes: ignored");
      _ca_warn(msg);
    }
  }
}

const char* _ca_env(ca_env_t e) { return present[e] ? values[e] : NULL; }
