/* Exported colour API (include/chromalloc.h): calibration for the `chromalloc calibrate` tool. */
#include "../color/colour.h"
#include "../../include/chromalloc.h"

#define ca_export __attribute__((visibility("default")))

ca_export int chromalloc_calibrate(const char* profile, int flags, char* summary, size_t len) {
  _ca_ensure_init();
  static ca_calibration_t cal;
  bool usable = _ca_calibrate(&cal, (flags & CHROMALLOC_CALIBRATE_QUICK) != 0);
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
