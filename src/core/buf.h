/* A bounded string builder that never allocates: used for warnings, fatal messages, option
   descriptions and the statistics JSON, all of which may run inside malloc.  Like snprintf,
   `len` counts everything appended even past the capacity, so callers can size a retry. */
#ifndef CA_BUF_H
#define CA_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct ca_buf_s {
  char*  p;
  size_t cap;     /* bytes available, including the terminating NUL */
  size_t len;     /* bytes appended (may exceed cap - 1) */
} ca_buf_t;

static inline ca_buf_t ca_buf(char* p, size_t cap) {
  if (cap > 0) p[0] = 0;
  return (ca_buf_t){ p, cap, 0 };
}

static inline void ca_buf_mem(ca_buf_t* b, const char* s, size_t n) {
  for (size_t i = 0; i < n; i++, b->len++)
    if (b->len + 1 < b->cap) b->p[b->len] = s[i];
  if (b->cap > 0) b->p[b->len + 1 < b->cap ? b->len : b->cap - 1] = 0;
}
static inline void ca_buf_str(ca_buf_t* b, const char* s) { ca_buf_mem(b, s, strlen(s)); }
static inline void ca_buf_char(ca_buf_t* b, char c) { ca_buf_mem(b, &c, 1); }

static inline void ca_buf_u64(ca_buf_t* b, uint64_t v) {
  char tmp[24];
  size_t n = 0;
  do { tmp[sizeof tmp - 1 - n++] = (char)('0' + v % 10); v /= 10; } while (v != 0);
  ca_buf_mem(b, tmp + sizeof tmp - n, n);
}
static inline void ca_buf_i64(ca_buf_t* b, int64_t v) {
  if (v < 0) { ca_buf_char(b, '-'); ca_buf_u64(b, (uint64_t)0 - (uint64_t)v); }
  else ca_buf_u64(b, (uint64_t)v);
}
static inline void ca_buf_hex(ca_buf_t* b, uintptr_t v) {
  static const char digits[] = "0123456789abcdef";
  char tmp[18];
  size_t n = 0;
  do { tmp[sizeof tmp - 1 - n++] = digits[v & 15]; v >>= 4; } while (v != 0);
  ca_buf_str(b, "0x");
  ca_buf_mem(b, tmp + sizeof tmp - n, n);
}
/* `,"name":v` - one field of a JSON object after its first */
static inline void ca_buf_field_u64(ca_buf_t* b, const char* name, uint64_t v) {
  ca_buf_str(b, ",\""); ca_buf_str(b, name); ca_buf_str(b, "\":"); ca_buf_u64(b, v);
}
/* fixed-point: v / 10^digits, e.g. (1234, 2) -> "12.34" */
static inline void ca_buf_fixed(ca_buf_t* b, int64_t v, int digits) {
  int64_t scale = 1;
  for (int i = 0; i < digits; i++) scale *= 10;
  if (v < 0) { ca_buf_char(b, '-'); v = -v; }
  ca_buf_u64(b, (uint64_t)(v / scale));
  if (digits == 0) return;
  ca_buf_char(b, '.');
  char tmp[20];
  int64_t f = v % scale;
  for (int i = digits - 1; i >= 0; i--) { tmp[i] = (char)('0' + f % 10); f /= 10; }
  ca_buf_mem(b, tmp, (size_t)digits);
}

#endif
