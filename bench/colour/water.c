/* water: an n-body step with a lock per molecule, after SPLASH-2's water-nsquared
   (bench/locksets.py).

   Molecules of three atoms (a malloc'd struct of 4 cache lines: positions, forces, velocity) fill
   --pct percent of the L2 (read from sysfs).  At the start each of --threads workers allocates its
   share of them, each while holding that molecule's mutex (the mutexes are an array allocated
   outside any lock), and places it at random in a periodic unit box.  Every step each worker
   takes its molecules i and, for the half of the others after i, reads j's oxygen; within the
   cutoff it computes the 9 atom pairs' (soft, repulsive) forces and adds j's share to j under j's
   lock (i's own is summed privately and added under i's lock once).  A barrier; each worker then
   moves its own molecules; a barrier.  Every molecule is read on every step: the set is hot.

     SECOND k pairs=<molecule pairs examined per second, all workers>
     RESULT water pct=P molecules=N threads=T steps=S pairs_from3s=X

   Build: cc -std=gnu11 -O2 -pthread -o build/bench/water bench/colour/water.c
   Run:   LD_PRELOAD=build/libchromalloc-colour.so CHROMALLOC_OPTIONS=locksets=1 build/bench/water --pct=85 */
#include "lockset.h"

typedef struct { double pos[3][3], force[3][3], vel[3], pad[11]; } mol_t;   /* 256 bytes */

#define CUTOFF 0.25                 /* about 1 pair in 15 interacts (the box's side is 1) */
#define DT 1e-3

static mol_t** mol;
static pthread_mutex_t* locks;
static size_t n;
static int nthreads;
static counter_t* done;
static pthread_barrier_t ready, step;
static atomic_bool halt;            /* the workers' common decision to end, taken at a barrier */
static _Atomic uint64_t steps;

/* the nearest image's offset along one axis (positions are in [0, 1)) */
static inline double wrap(double d) { return d - (d > 0.5) + (d < -0.5); }

/* the forces of the 9 atom pairs of a and b: onto fa, and the opposite onto fb */
static void interact(const mol_t* a, const mol_t* b, double fa[3][3], double fb[3][3]) {
  for (int x = 0; x < 3; x++)
    for (int y = 0; y < 3; y++) {
      double d[3], r2 = 0;
      for (int k = 0; k < 3; k++) { d[k] = wrap(a->pos[x][k] - b->pos[y][k]); r2 += d[k] * d[k]; }
      if (r2 >= CUTOFF * CUTOFF) continue;
      double f = CUTOFF * CUTOFF - r2;
      for (int k = 0; k < 3; k++) { fa[x][k] += f * d[k]; fb[y][k] -= f * d[k]; }
    }
}

static void* worker(void* arg) {
  int id = (int)(intptr_t)arg;
  rng_t r = rng_seed((uint64_t)id + 1);
  for (size_t i = (size_t)id; i < n; i += (size_t)nthreads) {
    pthread_mutex_lock(&locks[i]);
    mol_t* m = check_alloc(malloc(sizeof *m), sizeof *m);      /* allocated under its lock */
    memset(m, 0, sizeof *m);
    for (int k = 0; k < 3; k++) {
      m->pos[0][k] = (double)(rng_next(&r) >> 11) / 9007199254740992.0;
      m->pos[1][k] = m->pos[0][k] + (k == 0 ? 0.002 : 0);      /* the hydrogens, close by */
      m->pos[2][k] = m->pos[0][k] + (k == 1 ? 0.002 : 0);
    }
    mol[i] = m;
    pthread_mutex_unlock(&locks[i]);
  }
  pthread_barrier_wait(&ready);                 /* every molecule is there: the clock starts */
  uint64_t pairs = 0;
  for (;;) {
    for (size_t i = (size_t)id; i < n; i += (size_t)nthreads) {
      const mol_t* a = mol[i];
      double fi[3][3] = { { 0 } };
      /* the half of the others after i (with an even n, the opposite one from one side only) */
      size_t half = (n - 1) / 2 + (n % 2 == 0 && i < n / 2);
      for (size_t o = 1; o <= half; o++) {
        size_t j = i + o < n ? i + o : i + o - n;
        mol_t* b = mol[j];
        double d[3], r2 = 0;
        for (int k = 0; k < 3; k++) { d[k] = wrap(a->pos[0][k] - b->pos[0][k]); r2 += d[k] * d[k]; }
        if (r2 >= CUTOFF * CUTOFF) continue;
        double fj[3][3] = { { 0 } };
        interact(a, b, fi, fj);
        pthread_mutex_lock(&locks[j]);
        for (int x = 0; x < 3; x++) for (int k = 0; k < 3; k++) b->force[x][k] += fj[x][k];
        pthread_mutex_unlock(&locks[j]);
      }
      pthread_mutex_lock(&locks[i]);
      for (int x = 0; x < 3; x++) for (int k = 0; k < 3; k++) mol[i]->force[x][k] += fi[x][k];
      pthread_mutex_unlock(&locks[i]);
      publish(&done[id], pairs += half);
    }
    pthread_barrier_wait(&step);
    for (size_t i = (size_t)id; i < n; i += (size_t)nthreads) {     /* move: a rigid molecule */
      mol_t* m = mol[i];
      for (int k = 0; k < 3; k++) {
        double v = 0.98 * (m->vel[k] + DT * (m->force[0][k] + m->force[1][k] + m->force[2][k]));
        m->vel[k] = v < -1e-3 ? -1e-3 : v > 1e-3 ? 1e-3 : v;     /* damped and bounded: stays a gas */
        for (int x = 0; x < 3; x++) {
          double p = m->pos[x][k] + m->vel[k];
          m->pos[x][k] = p >= 1 ? p - 1 : p < 0 ? p + 1 : p;
          m->force[x][k] = 0;
        }
      }
    }
    if (id == 0) {
      atomic_store(&halt, stopped());   /* read by all after the barrier, written again only
                                           after the next one: every worker ends on the same step */
      steps++;
    }
    pthread_barrier_wait(&step);
    if (atomic_load(&halt)) break;
  }
  return NULL;
}

int main(int argc, char** argv) {
  bench_name = "water";
  opts_t o = { 85, 10, 2, 0 };
  parse(argc, argv, &o, true, true, NULL, "[--pct=85] [--seconds=10] [--threads=2]");
  n = (size_t)(l2_sysfs_bytes() * o.pct / 100) / sizeof(mol_t);
  nthreads = (int)o.threads;
  if (n < 2) fail("too few molecules");
  mol = check_alloc(calloc(n, sizeof *mol), n * sizeof *mol);
  locks = check_alloc(malloc(n * sizeof *locks), n * sizeof *locks);
  for (size_t i = 0; i < n; i++) pthread_mutex_init(&locks[i], NULL);
  done = check_alloc(aligned_alloc(64, (size_t)nthreads * sizeof *done), (size_t)nthreads * sizeof *done);
  memset(done, 0, (size_t)nthreads * sizeof *done);
  pthread_barrier_init(&ready, NULL, (unsigned)nthreads + 1);
  pthread_barrier_init(&step, NULL, (unsigned)nthreads);
  pthread_t* t = check_alloc(calloc((size_t)nthreads, sizeof *t), (size_t)nthreads * sizeof *t);
  for (int i = 0; i < nthreads; i++)
    if (pthread_create(&t[i], NULL, worker, (void*)(intptr_t)i)) fail("pthread_create");
  pthread_barrier_wait(&ready);
  double rate = report("pairs", done, nthreads, (int)o.seconds);
  for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
  printf("RESULT water pct=%g molecules=%zu threads=%d steps=%llu pairs_from3s=%.0f\n",
         o.pct, n, nthreads, (unsigned long long)steps, rate);
  return 0;
}
