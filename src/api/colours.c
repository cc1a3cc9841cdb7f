/* Exported colour API of the cache runtime (include/chromalloc.h): colour sets, coloured
   allocation, recolouring, calibration for the `chromalloc calibrate` tool, and hot pages. */
#include "../color/colour.h"
#include "../policy/hot.h"
#include "../policy/rocs.h"
#include "../../include/chromalloc.h"

#define ca_export __attribute__((visibility("default")))

ca_export int chromalloc_colours(unsigned level, unsigned from, unsigned to, unsigned den) {
  _ca_started();
  if (level != 0 && level != 2) { errno = EINVAL; return -1; }   /* the L2 is what is coloured */
  return _ca_colour_set(from, to, den);
}

ca_export void* chromalloc_malloc_coloured(size_t size, int colours) {
  if (colours < 1 || colours > CA_COLOUR_SETS) { errno = EINVAL; return NULL; }
  _ca_started();
  _ca_colour_reserve_first(colours);
  return _ca_malloc_flavour(size, (uint8_t)colours);
}

ca_export int chromalloc_colours_prepare(int colours, size_t bytes, int timeout_ms) {
  return _ca_colour_prepare(colours, (bytes + CA_OS_PAGE - 1) / CA_OS_PAGE, timeout_ms);
}

ca_export int chromalloc_colour_of(const void* p) { return _ca_colour_of(p); }

ca_export int chromalloc_colour_count(void) { return _ca_colour_count(); }

ca_export long chromalloc_recolour(void* p, size_t len, int colours) {
  if (colours < 1 || colours > CA_COLOUR_SETS || p == NULL) { errno = EINVAL; return -1; }
  _ca_protect_release(p, len);      /* the program places this memory itself: protection lets it be */
  return _ca_recolour(p, len, colours, 0, false);
}

ca_export int chromalloc_colours_reserve(int colours) { return _ca_colour_reserve(colours); }

ca_export int chromalloc_calibrate(const char* profile, int flags, char* summary, size_t len) {
  _ca_started();
  static ca_calibration_t cal;
  bool usable = _ca_calibrate(&cal, (flags & CHROMALLOC_CALIBRATE_QUICK) != 0, (flags & CHROMALLOC_CALIBRATE_NO_SAVE) == 0);
  ca_buf_t b = ca_buf(summary, len);
  if (flags & CHROMALLOC_CALIBRATE_JSON) _ca_calibration_json(&cal, &b);
  else _ca_calibration_summary(&cal, &b);
  char path[512];
  if (!(flags & CHROMALLOC_CALIBRATE_NO_SAVE)) {
    if (profile == NULL || profile[0] == 0) profile = _ca_profile_path(path, sizeof path) ? path : NULL;
    if (profile == NULL || !_ca_profile_save(&cal, profile)) return -2;
  }
  return usable ? 0 : -1;
}

ca_export int chromalloc_heat(const void* p) { return _ca_hot_heat_of(p); }

ca_export int chromalloc_hot_threshold(void) { return _ca_hot_threshold_now(); }

ca_export void chromalloc_progress(unsigned long units) { _ca_rocs_progress(units); }
