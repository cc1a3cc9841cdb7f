/* ocean: a red-black Gauss-Seidel sweep of a grid, after SPLASH-2's ocean (bench/locksets.py:
   the negative control of lock sets).

   One grid of doubles, --pct percent of the L2 (read from sysfs), malloc'd once by the main thread
   outside any lock; a Poisson problem with a fixed border and a constant source.  The --threads
   workers each own a band of rows; a sweep is the red points, a barrier, the black points, each
   worker's residual added to the global sum under one mutex, a barrier.  Nothing is allocated
   while a lock is held, so lock sets must leave it as it is: any difference is their cost.

     SECOND k sweeps=<sweeps per second>
     RESULT ocean pct=P side=N threads=T residual=R sweeps_from3s=X

   Build: cc -std=gnu11 -O2 -pthread -o build/bench/ocean bench/colour/ocean.c
   Run:   LD_PRELOAD=build/libchromalloc-colour.so CHROMALLOC_OPTIONS=locksets=1 build/bench/ocean */
#include "lockset.h"

static double* grid;
static size_t side;                 /* points per row, the border included */
static int nthreads;
static counter_t done;              /* sweeps, counted by worker 0 */
static pthread_barrier_t ready, half;
static pthread_mutex_t sum_lock = PTHREAD_MUTEX_INITIALIZER;
static double residual, last_residual;
static atomic_bool halt;            /* the workers' common decision to end, taken at a barrier */

#define SOURCE 1e-4

/* one colour of rows [r0, r1): the points whose row + column has that parity; the squared residual */
static double relax(size_t r0, size_t r1, size_t colour) {
  double res = 0;
  for (size_t r = r0; r < r1; r++) {
    double* u = grid + r * side;
    for (size_t c = 1 + (r + colour + 1) % 2; c < side - 1; c += 2) {
      double d = u[c - 1] + u[c + 1] + u[c - side] + u[c + side] + SOURCE - 4 * u[c];
      u[c] += 0.25 * d;
      res += d * d;
    }
  }
  return res;
}

static void* worker(void* arg) {
  int id = (int)(intptr_t)arg;
  size_t rows = side - 2, r0 = 1 + rows * (size_t)id / (size_t)nthreads, r1 = 1 + rows * (size_t)(id + 1) / (size_t)nthreads;
  uint64_t sweeps = 0;
  pthread_barrier_wait(&ready);
  for (;;) {
    double res = relax(r0, r1, 0);
    pthread_barrier_wait(&half);
    res += relax(r0, r1, 1);
    pthread_mutex_lock(&sum_lock);
    residual += res;
    pthread_mutex_unlock(&sum_lock);
    if (id == 0) atomic_store(&halt, stopped());   /* read by all after the barrier */
    pthread_barrier_wait(&half);
    if (id == 0) {        /* the others add to the sum again only after the next red barrier */
      last_residual = residual;
      residual = 0;
      publish(&done, ++sweeps);
    }
    if (atomic_load(&halt)) break;
  }
  return NULL;
}

int main(int argc, char** argv) {
  bench_name = "ocean";
  opts_t o = { 85, 10, 2, 0 };
  parse(argc, argv, &o, true, true, NULL, "[--pct=85] [--seconds=10] [--threads=2]");
  size_t bytes = (size_t)(l2_sysfs_bytes() * o.pct / 100);
  for (side = 3; (side + 1) * (side + 1) * sizeof(double) <= bytes; side++) {}
  nthreads = (int)o.threads;
  if ((size_t)nthreads > side - 2) fail("more threads than rows");
  grid = check_alloc(malloc(side * side * sizeof *grid), side * side * sizeof *grid);
  for (size_t r = 0; r < side; r++)          /* the border at 1 (the top at 2), the inside at 0 */
    for (size_t c = 0; c < side; c++)
      grid[r * side + c] = r == 0 ? 2 : (r == side - 1 || c == 0 || c == side - 1) ? 1 : 0;
  pthread_barrier_init(&ready, NULL, (unsigned)nthreads + 1);
  pthread_barrier_init(&half, NULL, (unsigned)nthreads);
  pthread_t* t = check_alloc(calloc((size_t)nthreads, sizeof *t), (size_t)nthreads * sizeof *t);
  for (int i = 0; i < nthreads; i++)
    if (pthread_create(&t[i], NULL, worker, (void*)(intptr_t)i)) fail("pthread_create");
  pthread_barrier_wait(&ready);
  double rate = report("sweeps", &done, 1, (int)o.seconds);
  for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
  printf("RESULT ocean pct=%g side=%zu threads=%d residual=%.3g sweeps_from3s=%.0f\n",
         o.pct, side, nthreads, last_residual, rate);
  return 0;
}
