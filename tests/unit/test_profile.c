/* The machine profile (internal interfaces, static link only): where it is looked for
   ($CHROMALLOC_PROFILE, else $XDG_CACHE_HOME/chromalloc/profile.json, else
   $HOME/.cache/chromalloc/profile.json, else nowhere), that a saved profile reads back and one
   made for another machine is ignored, that `chromalloc_calibrate` writes where it is told and
   nowhere else, and that the colour layer starts from a profile it finds (no discovery) and
   not from one it must not use.  Every file is the test's own, under $TEST_WORK (tests/run.py).
   And that the environment is read once, on the thread that starts the process: this program
   defines getenv, so every call chromalloc makes comes here, and none may come from another
   thread (the worker's getenv beside git's setenv crashed git); a CHROMALLOC_STATS changed
   before exit changes nothing. */
#include "check.h"
#include "../../src/color/colour.h"
#include "../../include/chromalloc.h"
#include <sys/stat.h>
#include <sys/syscall.h>

static char work[400];

static _Atomic int getenv_elsewhere;
extern char** environ;
char* getenv(const char* name) {
  if (syscall(SYS_gettid) != getpid()) atomic_fetch_add(&getenv_elsewhere, 1);
  size_t n = strlen(name);
  for (char** e = environ; e != NULL && *e != NULL; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}

static const char* path_in(const char* rel) {
  static char p[4][512];
  static int k;
  char* out = p[k++ & 3];
  snprintf(out, 512, "%s/%s", work, rel);
  return out;
}

static bool exists(const char* p) { struct stat st; return stat(p, &st) == 0; }

static void test_path(void) {
  char got[512];
  setenv("CHROMALLOC_PROFILE", path_in("given.json"), 1);
  _ca_env_init();                                 /* chromalloc reads its copy */
  setenv("XDG_CACHE_HOME", path_in("xdg"), 1);
  _ca_env_init();                                 /* chromalloc reads its copy */
  setenv("HOME", path_in("home"), 1);
  _ca_env_init();                                 /* chromalloc reads its copy */
  CHECK(_ca_profile_path(got, sizeof got) && strcmp(got, path_in("given.json")) == 0);
  unsetenv("CHROMALLOC_PROFILE");
  _ca_env_init();                                 /* chromalloc reads its copy */
  CHECK(_ca_profile_path(got, sizeof got) && strcmp(got, path_in("xdg/chromalloc/profile.json")) == 0);
  unsetenv("XDG_CACHE_HOME");
  _ca_env_init();                                 /* chromalloc reads its copy */
  CHECK(_ca_profile_path(got, sizeof got) && strcmp(got, path_in("home/.cache/chromalloc/profile.json")) == 0);
  unsetenv("HOME");
  _ca_env_init();                                 /* chromalloc reads its copy */
  CHECK(!_ca_profile_path(got, sizeof got));
  setenv("HOME", path_in("home"), 1);
  _ca_env_init();                                 /* chromalloc reads its copy */
}

static void test_save_load(void) {
  ca_calibration_t a, b;
  memset(&a, 0, sizeof a);
  _ca_machine_key(a.cpu, sizeof a.cpu);
  a.usable = true; a.level = 2; a.method = CA_METHOD_TIMING; a.colours = 16; a.ways = 8; a.line = 64;
  setenv("CHROMALLOC_PROFILE", path_in("deep/dir/p.json"), 1);
  _ca_env_init();                                 /* chromalloc reads its copy */
  CHECK(_ca_profile_save(&a, path_in("deep/dir/p.json")));        /* the parent is made */
  CHECK(_ca_profile_load(&b));
  CHECK(b.colours == 16 && b.ways == 8 && b.usable && strcmp(a.cpu, b.cpu) == 0);
  /* made on another machine: ignored */
  strcpy(a.cpu, "Another CPU 1");
  CHECK(_ca_profile_save(&a, path_in("deep/dir/p.json")));
  CHECK(!_ca_profile_load(&b));
  /* not there: nothing */
  setenv("CHROMALLOC_PROFILE", path_in("absent.json"), 1);
  _ca_env_init();                                 /* chromalloc reads its copy */
  CHECK(!_ca_profile_load(&b));
}

/* a quick calibration of the machine (simulated when described), saved where it is told */
static void test_calibrate(void) {
  char summary[8192];
  setenv("CHROMALLOC_PROFILE", path_in("unused.json"), 1);
  _ca_env_init();                                 /* chromalloc reads its copy */
  int rc = chromalloc_calibrate(path_in("cal/profile.json"), CHROMALLOC_CALIBRATE_QUICK, summary, sizeof summary);
  fprintf(stderr, "%s", summary);
  if (machine_described()) CHECK_EQ(rc, 0);
  CHECK(exists(path_in("cal/profile.json")));
  CHECK(!exists(path_in("unused.json")));
  CHECK(!exists(path_in("home/.cache/chromalloc")));
  CHECK(!exists(path_in("xdg/chromalloc")));
}

/* A child's colour layer started with the profile at `path`: ready, and its statistics hold
   every text of `want` (NULL-terminated). */
typedef struct { const char* path; const char* want[3]; } start_case_t;
static int start_with(void* arg) {
  const start_case_t* c = arg;
  static char json[1 << 16];
  setenv("CHROMALLOC_PROFILE", c->path, 1);
  _ca_env_init();                                 /* chromalloc reads its copy */
  int id = _ca_colour_set(0, 1, 8);
  CHECK(id > 0 && _ca_colour_prepare(id, 8, 30000) == 0);
  ca_buf_t b = ca_buf(json, sizeof json);
  _ca_colour_stats_json(&b);
  for (int i = 0; c->want[i] != NULL; i++) CHECK(strstr(json, c->want[i]) != NULL);
  return check_failures;
}

static void test_layer_uses_profile(void) {
  /* with the profile: no colour count estimated; without: measured */
  start_case_t with = { path_in("cal/profile.json"), { "\"profile\":true", "\"estimate_chunks\":0", NULL } };
  start_case_t without = { path_in("absent.json"), { "\"profile\":false", NULL } };
  CHECK_EQ(fork_children(1, start_with, &with, "the layer with a profile"), 1);
  CHECK_EQ(fork_children(1, start_with, &without, "the layer without one"), 1);
}

/* the worker starts (profile, set file, machine key) while this thread changes HOME */
static int worker_reads_none(void* arg) {
  (void)arg;
  int id = _ca_colour_set(0, 1, 8);
  for (int i = 0; i < 30000 && _ca_colour_state() == CA_COLOURS_CALIBRATING; i++) {
    setenv("HOME", i % 2 ? path_in("home") : path_in("other"), 1);
    usleep(1000);
  }
  CHECK(id > 0 && _ca_colour_state() == CA_COLOURS_READY);
  CHECK_EQ(atomic_load(&getenv_elsewhere), 0);
  return check_failures;
}

/* the statistics go where CHROMALLOC_STATS said when the environment was read */
static int stats_where_said(void* arg) {
  (void)arg;
  setenv("CHROMALLOC_STATS", path_in("said.json"), 1);
  _ca_env_init();                                 /* as at start */
  setenv("CHROMALLOC_STATS", path_in("later.json"), 1);
  free(malloc(100));
  exit(check_failures);                           /* exit's handlers write the file */
}

static void test_env_once(void) {
  CHECK_EQ(fork_children(1, worker_reads_none, NULL, "getenv on the worker"), 1);
  CHECK_EQ(fork_children(1, stats_where_said, NULL, "CHROMALLOC_STATS changed"), 1);
  CHECK(exists(path_in("said.json")) && !exists(path_in("later.json")));
}

int main(void) {
  require_chromalloc("test_profile");
  const char* w = getenv("TEST_WORK");
  if (w == NULL || !machine_described()) {
    fprintf(stderr, "test_profile: run it from tests/run.py (TEST_WORK, CHROMALLOC_MACHINE)\n");
    return 2;
  }
  snprintf(work, sizeof work, "%s", w);
  test_path();
  test_save_load();
  test_calibrate();
  test_layer_uses_profile();
  test_env_once();
  return check_done("test_profile");
}
