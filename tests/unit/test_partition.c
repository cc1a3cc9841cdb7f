/* Partitions of the L2's colours between processes (internal interfaces: built static only;
   a described machine, a set file of the test's own).

   Pinned to one CPU, a process alone gets every colour; a second process pinned there too
   splits them with it (disjoint halves, each seen from its own side); killed with SIGKILL while
   it holds its half, it leaves the first with every colour again; pinned to a CPU with an L2 of
   its own, it shares nothing. */
#include "check.h"
#include "../../src/color/colour.h"
#include <sched.h>
#include <signal.h>

static void pin(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  sched_setaffinity(0, sizeof one, &one);
}

/* a child pinned to `cpu` takes its slice, sends it, and waits to be killed */
static pid_t holder(int cpu, uint32_t colours, uint64_t* mask) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    pin(cpu);
    uint64_t m = _ca_colour_partition(colours);
    if (write(fd[1], &m, sizeof m) != sizeof m) _exit(1);
    for (;;) { pause(); _ca_colour_partition(colours); }
  }
  close(fd[1]);
  *mask = 0;
  if (read(fd[0], mask, sizeof *mask) != sizeof *mask) *mask = 0;
  close(fd[0]);
  return pid;
}

/* the L2 of cpu: its shared_cpu_list in sysfs ("" when unknown) */
static void l2_of(int cpu, char* out, size_t len) {
  out[0] = 0;
  for (int i = 0; i < 8; i++) {
    char path[128], lvl[8] = "";
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/level", cpu, i);
    FILE* f = fopen(path, "r");
    if (!f) return;
    if (!fgets(lvl, sizeof lvl, f)) lvl[0] = 0;
    fclose(f);
    if (lvl[0] != '2') continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list", cpu, i);
    f = fopen(path, "r");
    if (f && fgets(out, (int)len, f)) out[strcspn(out, "\n")] = 0;
    if (f) fclose(f);
    return;
  }
}

int main(void) {
  require_chromalloc("test_partition");
  /* the layer ready, with its sets in the set file (they name the colours alike everywhere) */
  int id = _ca_colour_set(0, 1, 8);
  CHECK(id > 0 && _ca_colour_prepare(id, 8, 60000) == 0);
  uint32_t colours = (uint32_t)_ca_colour_count();
  CHECK(colours >= 16);
  uint64_t all = colours >= 64 ? ~0ull : (1ull << colours) - 1;
  pin(0);
  CHECK_EQ(_ca_colour_partition(colours), all);            /* alone */
  CHECK_EQ(_ca_colour_partition_sharing(), 1);

  uint64_t theirs = 0;
  pid_t a = holder(0, colours, &theirs);
  uint64_t ours = _ca_colour_partition(colours);
  fprintf(stderr, "test_partition: %u colours; on one CPU: ours %#llx, theirs %#llx\n", colours,
          (unsigned long long)ours, (unsigned long long)theirs);
  CHECK_EQ(_ca_colour_partition_sharing(), 2);
  CHECK(ours != 0 && theirs != 0);
  CHECK_EQ(ours & theirs, 0);                               /* disjoint ... */
  CHECK_EQ(ours | theirs, all);                             /* ... and all of them between the two */
  CHECK_EQ(__builtin_popcountll(ours), colours / 2);

  kill(a, SIGKILL);                                         /* holding its half */
  waitpid(a, NULL, 0);
  CHECK_EQ(_ca_colour_partition(colours), all);
  CHECK_EQ(_ca_colour_partition_sharing(), 1);

  char l2a[64], l2b[64];
  l2_of(0, l2a, sizeof l2a);
  l2_of(1, l2b, sizeof l2b);
  cpu_set_t allowed;
  sched_getaffinity(0, sizeof allowed, &allowed);
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 2 && l2a[0] && l2b[0] && strcmp(l2a, l2b) != 0) {
    pid_t b = holder(1, colours, &theirs);                  /* another L2 */
    CHECK_EQ(theirs, all);
    CHECK_EQ(_ca_colour_partition(colours), all);
    kill(b, SIGKILL);
    waitpid(b, NULL, 0);
  } else {
    fprintf(stderr, "test_partition: not checked: a process on an L2 of its own (CPUs 0 and 1 share one, or one CPU)\n");
  }
  _ca_colour_partition_leave();
  return check_done("test_partition");
}
