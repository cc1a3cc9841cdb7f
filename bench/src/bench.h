/* Helpers shared by the benchmark programs: a fixed-seed PRNG and a hash for tags,
   positional argument parsing, failure reporting, the small-block stamp, a monotonic clock
   and a qsort comparator for doubles (medians).  Include this header first in every benchmark (it selects the POSIX/GNU
   interfaces the programs use). */
#ifndef BENCH_H
#define BENCH_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* xorshift64* (Vigna).  The state must be nonzero; rng_seed guarantees that. */
typedef struct { uint64_t s; } rng_t;

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static inline rng_t rng_seed(uint64_t seed)
{
    rng_t r = { mix64(seed + 0x9e3779b97f4a7c15ULL) | 1 };
    return r;
}

static inline uint64_t rng_next(rng_t *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dULL;
}

/* Uniform in [lo, hi] (the tiny modulo bias is irrelevant here). */
static inline uint64_t rng_range(rng_t *r, uint64_t lo, uint64_t hi)
{
    return lo + (rng_next(r) >> 11) % (hi - lo + 1);
}

static const char *bench_name = "bench";

static void fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", bench_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static inline void *check_alloc(void *p, size_t size)
{
    if (!p)
        fail("allocation of %zu bytes failed", size);
    return p;
}

/* Positional argument i (1-based) as an integer >= min, or def when absent. */
static inline long arg_long(int argc, char **argv, int i, long def, long min)
{
    if (i >= argc)
        return def;
    char *end;
    errno = 0;
    long v = strtol(argv[i], &end, 0);
    if (errno || *end || end == argv[i] || v < min)
        fail("argument %d (\"%s\") must be an integer >= %ld", i, argv[i], min);
    return v;
}

/* Small-block stamp used by churn, larson and threadchurn: the first 8 bytes hold the tag
   (high 32 bits) and the size (low 32 bits), the last byte repeats the tag's low byte.
   check_block validates a stamp and returns the tag; the size bounds catch wild headers. */
static inline void stamp_block(unsigned char *p, size_t size, uint32_t tag)
{
    uint64_t w = (uint64_t)tag << 32 | (uint32_t)size;
    memcpy(p, &w, sizeof w);
    if (size > sizeof w)
        p[size - 1] = (unsigned char)tag;
}

static inline uint32_t check_block(const unsigned char *p, size_t min, size_t max)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
    size_t size = (uint32_t)w;
    uint32_t tag = (uint32_t)(w >> 32);
    if (size < min || size > max)
        fail("corrupt block header: size %zu outside [%zu, %zu]", size, min, max);
    if (size > sizeof w && p[size - 1] != (unsigned char)tag)
        fail("corrupt block trailer (size %zu)", size);
    return tag;
}

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* qsort comparator for doubles, ascending. */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
