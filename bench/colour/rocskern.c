/* rocskern: the other kernels of the ROCS benchmark (bench/rocs.py), sized from the machine's L2.

     cg     a sparse matrix-vector loop (CG's core): y = A x over rows in order, x gathered at
            random columns; x and y together 3/4 of the L2 (reused every lap), the matrix (CSR:
            values, column indices) 8x the L2, streamed once a lap
     swim   a shallow-water-like stencil: nine grids of one L2 each (u, v, p, their new and old
            steps), a five-point update of each and a time filter every lap
     reuse  adversary: one buffer of 4x the L2 read line by line every lap (its data comes back
            from the L3: confining it would make it miss there too)
     chase  adversary: a random ring through every line of 64 MiB, 65536 steps a lap (no reuse:
            nothing to gain, nothing may be lost)

   Every second prints the laps run; the result is the median of the seconds from the 5th on:

     SECOND n laps=L
     RESULT laps_per_s_from5s=L

   --progress: chromalloc_progress(1) after every lap (the opt-in progress call, when loaded).
   Build: cc -O2 -o build/bench/rocskern bench/colour/rocskern.c
   Run:   LD_PRELOAD=build/libchromalloc-colour.so CHROMALLOC_OPTIONS=rocs=1 build/bench/rocskern cg */
#define _GNU_SOURCE
#include "l2reading.h"
#include <stdio.h>

extern void chromalloc_progress(unsigned long units) __attribute__((weak));

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + (double)t.tv_nsec * 1e-9; }
static int cmp_double(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
static void* must(size_t n) {
  void* p = malloc(n);
  if (p == NULL) { fprintf(stderr, "rocskern: no memory for %zu bytes\n", n); exit(1); }
  memset(p, 0, n);
  return p;
}

/* ---- cg ---- */
static size_t cg_n, cg_nnz;
static double *cg_val, *cg_x, *cg_y;
static uint32_t *cg_col, *cg_row;
static void cg_init(size_t l2) {
  cg_n = l2 * 3 / 8 / sizeof(double);                       /* x and y: 3/4 of the L2 */
  cg_nnz = l2 * 8 / (sizeof(double) + sizeof(uint32_t));     /* values and columns: 8x the L2 */
  cg_val = must(cg_nnz * sizeof(double));
  cg_col = must(cg_nnz * sizeof(uint32_t));
  cg_row = must((cg_n + 1) * sizeof(uint32_t));
  cg_x = must(cg_n * sizeof(double));
  cg_y = must(cg_n * sizeof(double));
  for (size_t i = 0; i <= cg_n; i++) cg_row[i] = (uint32_t)(i * cg_nnz / cg_n);
  for (size_t k = 0; k < cg_nnz; k++) { cg_val[k] = 1.0 / (double)(1 + k % 7); cg_col[k] = (uint32_t)(next_rand() % cg_n); }
  for (size_t i = 0; i < cg_n; i++) cg_x[i] = 1.0;
}
static double cg_lap(void) {
  for (size_t i = 0; i < cg_n; i++) {
    double s = 0;
    for (uint32_t k = cg_row[i]; k < cg_row[i + 1]; k++) s += cg_val[k] * cg_x[cg_col[k]];
    cg_y[i] = s;
  }
  double top = 0;                                            /* scaled to at most 1: no overflow, no denormals */
  for (size_t i = 0; i < cg_n; i++) top = cg_y[i] > top ? cg_y[i] : -cg_y[i] > top ? -cg_y[i] : top;
  double f = top > 0 ? 1.0 / top : 1;
  for (size_t i = 0; i < cg_n; i++) cg_x[i] = cg_y[i] * f;
  return cg_x[0];
}

/* ---- swim ---- */
enum { U, V, P, UN, VN, PN, UO, VO, PO, GRIDS };
static size_t sw_m;                                           /* a grid is sw_m x sw_m doubles */
static double* sw[GRIDS];
static void swim_init(size_t l2) {
  sw_m = 1;
  while ((sw_m + 1) * (sw_m + 1) * sizeof(double) <= l2) sw_m++;
  for (int g = 0; g < GRIDS; g++) {
    sw[g] = must(sw_m * sw_m * sizeof(double));
    for (size_t i = 0; i < sw_m * sw_m; i++) sw[g][i] = (double)((i * (g + 3)) % 17) * 0.01;
  }
}
static double swim_lap(void) {
  size_t m = sw_m;
  for (size_t i = 1; i + 1 < m; i++)
    for (size_t j = 1; j + 1 < m; j++) {
      size_t c = i * m + j;
      sw[UN][c] = sw[UO][c] + 0.1 * (sw[P][c + 1] - sw[P][c - 1]) + 0.05 * (sw[V][c + m] + sw[V][c - m]);
      sw[VN][c] = sw[VO][c] - 0.1 * (sw[P][c + m] - sw[P][c - m]) + 0.05 * (sw[U][c + 1] + sw[U][c - 1]);
      sw[PN][c] = sw[PO][c] - 0.1 * (sw[U][c + 1] - sw[U][c] + sw[V][c + m] - sw[V][c]);
    }
  for (size_t c = 0; c < m * m; c++) {                       /* the time filter, then the step turns */
    sw[UO][c] = sw[U][c] + 0.01 * (sw[UN][c] - 2 * sw[U][c] + sw[UO][c]);
    sw[VO][c] = sw[V][c] + 0.01 * (sw[VN][c] - 2 * sw[V][c] + sw[VO][c]);
    sw[PO][c] = sw[P][c] + 0.01 * (sw[PN][c] - 2 * sw[P][c] + sw[PO][c]);
    sw[U][c] = sw[UN][c] * 0.999;
    sw[V][c] = sw[VN][c] * 0.999;
    sw[P][c] = sw[PN][c] * 0.999;
  }
  return sw[P][m + 1];
}

/* ---- reuse ---- */
static size_t re_bytes;
static char* re_buf;
static void reuse_init(size_t l2) { re_bytes = 4 * l2; re_buf = must(re_bytes); memset(re_buf, 1, re_bytes); }
static double reuse_lap(void) {
  uint64_t s = 0;
  for (size_t o = 0; o < re_bytes; o += 64) s += (uint8_t)re_buf[o];
  return (double)s;
}

/* ---- chase ---- */
static void** ch_p;
static void chase_init(size_t l2) {
  (void)l2;
  size_t bytes = (size_t)64 << 20, lines = bytes / 64;
  char* b = must(bytes);
  uint32_t* order = must(lines * sizeof *order);
  for (size_t i = 0; i < lines; i++) order[i] = (uint32_t)i;
  for (size_t i = lines - 1; i > 0; i--) { size_t j = next_rand() % (i + 1); uint32_t t = order[i]; order[i] = order[j]; order[j] = t; }
  for (size_t i = 0; i < lines; i++) *(void**)(b + (size_t)order[i] * 64) = b + (size_t)order[(i + 1) % lines] * 64;
  ch_p = (void**)(b + (size_t)order[0] * 64);
  free(order);
}
static double chase_lap(void) {
  void** p = ch_p;
  for (int i = 0; i < 65536; i++) p = (void**)*p;
  ch_p = p;
  return (double)(uintptr_t)p;
}

int main(int argc, char** argv) {
  static const struct { const char* name; void (*init)(size_t); double (*lap)(void); } kernels[] = {
    { "cg", cg_init, cg_lap }, { "swim", swim_init, swim_lap }, { "reuse", reuse_init, reuse_lap }, { "chase", chase_init, chase_lap },
  };
  int seconds = 12, k = -1;
  bool progress = false;
  for (int i = 1; i < argc; i++) {
    if (sscanf(argv[i], "--seconds=%d", &seconds) == 1) continue;
    if (strcmp(argv[i], "--progress") == 0) { progress = true; continue; }
    for (int j = 0; j < 4; j++) if (strcmp(argv[i], kernels[j].name) == 0) k = j;
    if (k < 0 || strcmp(argv[i], kernels[k].name) != 0) {
      fprintf(stderr, "usage: rocskern cg|swim|reuse|chase [--seconds=12] [--progress]\n");
      return 2;
    }
  }
  if (k < 0) { fprintf(stderr, "usage: rocskern cg|swim|reuse|chase [--seconds=12] [--progress]\n"); return 2; }
  size_t l2 = l2_bytes();
  kernels[k].init(l2);
  printf("ROCSKERN %s l2_kib=%zu\n", kernels[k].name, l2 >> 10);
  double laps_s[3600], sink = 0, mark = now() + 1;
  int nsec = 0;
  size_t laps = 0;
  while (nsec < seconds && nsec < 3600) {
    sink += kernels[k].lap();
    laps++;
    if (progress && chromalloc_progress) chromalloc_progress(1);
    double t = now();
    if (t >= mark) {
      laps_s[nsec] = (double)laps / (t - mark + 1);
      printf("SECOND %d laps=%zu\n", nsec + 1, laps);
      fflush(stdout);
      nsec++, laps = 0, mark = t + 1;
    }
  }
  int from = nsec > 5 ? 4 : 0;
  qsort(laps_s + from, (size_t)(nsec - from), sizeof(double), cmp_double);
  printf("RESULT laps_per_s_from5s=%.2f\n", laps_s[from + (nsec - from) / 2]);
  return sink == 0.123456789 ? 1 : 0;
}
