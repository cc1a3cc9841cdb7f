/* API unit test: the whole malloc family with glibc's edge cases (malloc(0), free(NULL),
   realloc(p, 0), calloc overflow, alignments up to 4 MiB, errno kept by free), index-aware
   placement (256 blocks of every size 16..4096 start on every L1 set; the ciu layout does not),
   options parsing and its warnings, and the statistics file. */
#include "check.h"
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>

/* ---- index-aware placement ---------------------------------------------------------------- */

static unsigned sets_covered(void** p, int n, unsigned line, unsigned sets) {
  unsigned char seen[1024] = {0};
  unsigned count = 0;
  for (int i = 0; i < n; i++) {
    unsigned s = (unsigned)(((uintptr_t)p[i] / line) % sets);
    if (!seen[s]) { seen[s] = 1; count++; }
  }
  return count;
}

/* smallest number of sets covered over sizes 16..4096 step 16; *at = a size where it happens */
static unsigned min_sets(unsigned line, unsigned sets, size_t* at) {
  void* p[256];
  unsigned worst = sets;
  *at = 0;
  for (size_t size = 16; size <= 4096; size += 16) {
    for (int i = 0; i < 256; i++) p[i] = malloc(size);
    unsigned c = sets_covered(p, 256, line, sets);
    if (c < worst || *at == 0) { if (c < worst) worst = c; if (c < sets) *at = size; }
    for (int i = 0; i < 256; i++) free(p[i]);
  }
  return worst;
}

static void* index_thread(void* arg) {
  unsigned line, sets;
  l1d_geometry(&line, &sets);
  size_t at;
  unsigned worst = min_sets(line, sets, &at);
  if (worst != sets) fprintf(stderr, "index-aware: only %u of %u sets at size %zu\n", worst, sets, at);
  *(unsigned*)arg = worst == sets;
  return NULL;
}

/* in this thread and in four concurrent ones: each heap starts its spans at other offsets */
static void test_index(void) {
  unsigned ok[5];
  index_thread(&ok[0]);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, index_thread, &ok[i + 1]);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 5; i++) CHECK(ok[i]);
}

/* ---- children started with other options -------------------------------------------------- */

static const char* self_path;

/* Run this binary again with `mode` as argument and CHROMALLOC_OPTIONS/CHROMALLOC_STATS set;
   capture its stderr and stdout. */
typedef struct self_args_s { const char* mode; const char* options; const char* stats; } self_args_t;

static void exec_self_child(void* arg) {
  const self_args_t* a = arg;
  dup2(2, 1);                                  /* stdout into the same pipe as stderr */
  if (a->options) setenv("CHROMALLOC_OPTIONS", a->options, 1); else unsetenv("CHROMALLOC_OPTIONS");
  if (a->stats) setenv("CHROMALLOC_STATS", a->stats, 1); else unsetenv("CHROMALLOC_STATS");
  execl(self_path, self_path, a->mode, (char*)NULL);
  _exit(127);
}

static int exec_self(const char* mode, const char* options, const char* stats, char* out, size_t outlen) {
  self_args_t a = { mode, options, stats };
  return run_child(exec_self_child, &a, out, outlen);
}

static int child_mode(const char* mode) {
  if (strcmp(mode, "--min-sets") == 0) {
    unsigned line, sets;
    size_t at;
    l1d_geometry(&line, &sets);
    printf("min_sets=%u layout=%ld\n", min_sets(line, sets, &at), chromalloc_option("layout"));
    return 0;
  }
  if (strcmp(mode, "--options") == 0) {
    printf("layout=%ld purge_delay=%ld colour=%ld\n", chromalloc_option("layout"),
           chromalloc_option("purge_delay"), chromalloc_option("colour"));
    return 0;
  }
  if (strcmp(mode, "--work") == 0) {
    void* p[1000];
    for (int i = 0; i < 1000; i++) p[i] = malloc((size_t)(i % 200) * 8 + 1);
    for (int i = 0; i < 1000; i += 2) free(p[i]);
    char* volatile big = malloc(5 << 20);
    big[0] = 1;
    free(big);
    return 0;
  }
  return 64;
}

/* this process runs under the cache runtime (libchromalloc-colour), not the allocator alone */
extern int chromalloc_colours(unsigned, unsigned, unsigned, unsigned) __attribute__((weak));
static bool runtime_loaded(void) { return chromalloc_colours != NULL; }

static void test_ciu_and_options(void) {
  char out[4096];
  unsigned line, sets;
  l1d_geometry(&line, &sets);
  int st = exec_self("--min-sets", "layout=ciu", NULL, out, sizeof out);
  unsigned ciu = 0;
  long layout = -1;
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK(sscanf(out, "min_sets=%u layout=%ld", &ciu, &layout) == 2);
  CHECK_EQ(layout, 1);
  CHECK(ciu < sets / 4);                       /* power-of-two classes land on few sets */

  /* unknown option and bad value: one warning each, defaults kept, the rest applied */
  st = exec_self("--options", "bogus=1,purge_delay=abc,colour=off,purge_delay=xyz", NULL, out, sizeof out);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK(strstr(out, "chromalloc: unknown option 'bogus' ignored\n") != NULL);
  CHECK(strstr(out, "chromalloc: option purge_delay: bad value 'abc' (expected an integer from -1 to 3600000), using the default 10\n") != NULL);
  CHECK(strstr(out, "'xyz'") == NULL);       /* warned once per option */
  CHECK(strstr(out, "layout=0 purge_delay=10 colour=0") != NULL);

  /* the cache runtime's options: the allocator alone names the library that has them, once
     each; the cache runtime takes them */
  st = exec_self("--options", "nightwatch=0,colours=1,nightwatch=1", NULL, out, sizeof out);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  const char* nw = strstr(out, "chromalloc: option 'nightwatch' is the cache runtime's (libchromalloc-colour.so");
  if (runtime_loaded()) {
    CHECK(strstr(out, "chromalloc:") == NULL);
  } else {
    CHECK(nw != NULL && strstr(strchr(nw, '\n'), "'nightwatch'") == NULL);
    CHECK(strstr(out, "chromalloc: option 'colours' is the cache runtime's") != NULL);
  }

  /* statistics file, with %p replaced by the pid */
  char path[128];
  snprintf(path, sizeof path, "/tmp/chromalloc-test-stats-%d-%%p.json", (int)getpid());
  st = exec_self("--work", NULL, path, out, sizeof out);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  char cmd[256], found[256] = "";
  snprintf(cmd, sizeof cmd, "ls /tmp/chromalloc-test-stats-%d-*.json 2>/dev/null", (int)getpid());
  FILE* ls = popen(cmd, "r");
  if (ls) { if (!fgets(found, sizeof found, ls)) found[0] = 0; pclose(ls); }
  found[strcspn(found, "\n")] = 0;
  CHECK(found[0] != 0);
  if (found[0]) {
    FILE* f = fopen(found, "r");
    static char json[1 << 16];
    size_t n = f ? fread(json, 1, sizeof json - 1, f) : 0;
    json[n] = 0;
    if (f) fclose(f);
    CHECK(strstr(json, "\"size_classes\":[") != NULL);
    CHECK(strstr(json, "\"allocations\":") != NULL);
    CHECK(strstr(json, "\"rss_peak_bytes\":") != NULL);
    CHECK(strstr(json, "\"large\":{\"allocations\":1,") != NULL);
    unlink(found);
  }
  errno = 0;
  CHECK_EQ(chromalloc_option("no_such_option"), -1);
  CHECK_EQ(errno, EINVAL);
}

/* ---- the API ---------------------------------------------------------------------------------- */

static bool all_bytes(const unsigned char* p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++) if (p[i] != v) return false;
  return true;
}

static void test_basic(void) {
  void* a = malloc(0);
  void* b = malloc(0);
  CHECK(a != NULL && b != NULL && a != b);
  free(a); free(b);
  free(NULL);
  for (size_t n = 1; n < 300000; n = n * 5 / 4 + 1) {
    unsigned char* p = malloc(n);
    CHECK(p != NULL);
    CHECK(((uintptr_t)p & 15) == 0);
    CHECK(malloc_usable_size(p) >= n);
    memset(p, 0xab, n);
    free(p);
  }
  CHECK_EQ(malloc_usable_size(NULL), 0);
}

static void test_calloc(void) {
  for (size_t n = 8; n < (4u << 20); n *= 3) {
    unsigned char* d = malloc(n);
    memset(d, 0xff, n);
    free(d);
    unsigned char* p = calloc(1, n);               /* likely the dirty block just freed */
    CHECK(p != NULL && all_bytes(p, n, 0));
    free(p);
  }
  errno = 0;
  CHECK(calloc(SIZE_MAX / 2, 3) == NULL);
  CHECK_EQ(errno, ENOMEM);
  errno = 0;
  CHECK(calloc((size_t)1 << 40, (size_t)1 << 40) == NULL);
  CHECK_EQ(errno, ENOMEM);
}

static void test_realloc(void) {
  unsigned char* p = realloc(NULL, 10);
  CHECK(p != NULL);
  for (int i = 0; i < 10; i++) p[i] = (unsigned char)i;
  size_t n = 10;
  for (size_t m = 17; m < (8u << 20); m = m * 2 + 3) {   /* grow through small, medium, large */
    p = realloc(p, m);
    CHECK(p != NULL);
    bool ok = true;
    for (size_t i = 0; i < n && i < 10; i++) ok &= p[i] == (unsigned char)i;
    CHECK(ok);
    memset(p + 10, 0x5a, m - 10);
    n = m;
  }
  for (size_t m = n; m > 10; m /= 3) {                    /* and shrink back */
    p = realloc(p, m);
    CHECK(p != NULL && p[0] == 0 && p[9] == 9 && (m <= 10 || p[m - 1] == 0x5a));
  }
  CHECK(realloc(p, 0) == NULL);                           /* glibc: frees */
  errno = 0;
  void* q = malloc(100);
  CHECK(realloc(q, SIZE_MAX - 4096) == NULL && errno == ENOMEM);
  free(q);                                                /* still valid after a failed realloc */
  errno = 0;
  CHECK(reallocarray(NULL, SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
  int* r = reallocarray(NULL, 100, sizeof(int));
  CHECK(r != NULL);
  free(r);
}

static void test_aligned(void) {
  void* p = (void*)1;
  CHECK_EQ(posix_memalign(&p, 3, 10), EINVAL);
  CHECK_EQ(posix_memalign(&p, 4, 10), EINVAL);
  CHECK(p == (void*)1);
  size_t sizes[] = { 1, 24, 100, 1000, 5000, 70000, 3u << 20 };
  for (size_t align = 8; align <= ((size_t)4 << 20); align *= 2) {
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
      size_t n = sizes[k];
      void* q = NULL;
      CHECK_EQ(posix_memalign(&q, align, n), 0);
      CHECK(q != NULL && ((uintptr_t)q % align) == 0);
      CHECK(malloc_usable_size(q) >= n);
      memset(q, 0x11, n);
      unsigned char* r = aligned_alloc(align, n);
      CHECK(r != NULL && ((uintptr_t)r % align) == 0);
      memset(r, 0x22, n);
      r = realloc(r, n + 100);                            /* moving an aligned block keeps data */
      CHECK(r != NULL && all_bytes(r, n, 0x22));
      free(q);
      free(r);
    }
  }
  void* m = memalign(24, 100);                            /* glibc rounds 24 up to 32 */
  CHECK(m != NULL && ((uintptr_t)m % 32) == 0);
  free(m);
  long page = sysconf(_SC_PAGESIZE);
  void* v = valloc(10);
  CHECK(v != NULL && ((uintptr_t)v % (uintptr_t)page) == 0);
  free(v);
  void* pv = pvalloc(10);
  CHECK(pv != NULL && ((uintptr_t)pv % (uintptr_t)page) == 0 && malloc_usable_size(pv) >= (size_t)page);
  free(pv);
  /* many small aligned blocks in one span, freed out of order */
  void* many[500];
  for (int i = 0; i < 500; i++) { CHECK_EQ(posix_memalign(&many[i], 128, 40), 0); memset(many[i], i, 40); }
  bool ok = true;
  for (int i = 0; i < 500; i++) ok &= ((unsigned char*)many[i])[39] == (unsigned char)i;
  CHECK(ok);
  for (int i = 499; i >= 0; i -= 2) free(many[i]);
  for (int i = 0; i < 500; i += 2) free(many[i]);
}

static void test_large(void) {
  size_t sizes[] = { 100000, 1u << 20, 3u << 20, 40u << 20, 300u << 20 };
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    unsigned char* p = malloc(sizes[k]);
    CHECK(p != NULL);
    CHECK(malloc_usable_size(p) >= sizes[k]);
    /* the request up to its last page, not the mapping (programs account memory by it) */
    CHECK(malloc_usable_size(p) < sizes[k] + 4096);
    for (size_t i = 0; i < sizes[k]; i += 4096) p[i] = 1;
    p[sizes[k] - 1] = 2;
    free(p);
  }
  /* in place while the 2 MiB mapping has room; the usable size follows the request */
  unsigned char* p = malloc(100000);
  CHECK(p != NULL);
  memset(p, 7, 100000);
  unsigned char* q = realloc(p, 150000);
  CHECK(q == p && malloc_usable_size(q) >= 150000 && malloc_usable_size(q) < 150000 + 4096);
  CHECK(all_bytes(q, 100000, 7));
  memset(q, 8, malloc_usable_size(q));
  q = realloc(q, 70000);
  CHECK(q == p && malloc_usable_size(q) >= 70000 && malloc_usable_size(q) < 70000 + 4096);
  q = realloc(q, 5u << 20);                                 /* past the mapping: moved or grown */
  CHECK(q != NULL && all_bytes(q, 70000, 8) && malloc_usable_size(q) < (5u << 20) + 4096);
  free(q);
}

static void test_errno_kept(void) {
  void* p[64];
  for (int i = 0; i < 64; i++) p[i] = malloc(i < 32 ? 64 : (size_t)(i) << 20);
  errno = 1234;
  for (int i = 0; i < 64; i++) free(p[i]);
  chromalloc_collect();                                   /* purges: madvise, munmap */
  errno = 1234;
  free(malloc(50u << 20));
  CHECK_EQ(errno, 1234);
}

static void test_libc_aliases(void) {
  void* (*lm)(size_t) = (void* (*)(size_t))dlsym(RTLD_DEFAULT, "__libc_malloc");
  void (*lf)(void*) = (void (*)(void*))dlsym(RTLD_DEFAULT, "__libc_free");
  void* (*lc)(size_t, size_t) = (void* (*)(size_t, size_t))dlsym(RTLD_DEFAULT, "__libc_calloc");
  CHECK(lm != NULL && lf != NULL && lc != NULL);
  if (lm && lf && lc) {
    void* p = lm(100);
    CHECK(p != NULL && malloc_usable_size(p) >= 100);    /* ours: the usable size is a class */
    free(p);
    p = lc(10, 10);
    CHECK(p != NULL && all_bytes(p, 100, 0));
    lf(p);
  }
}

int main(int argc, char** argv) {
  self_path = argv[0];
  require_chromalloc("test_api");
  if (argc > 1) return child_mode(argv[1]);
  test_index();
  test_basic();
  test_calloc();
  test_realloc();
  test_aligned();
  test_large();
  test_errno_kept();
  test_libc_aliases();
  test_ciu_and_options();
  return check_done("test_api");
}
