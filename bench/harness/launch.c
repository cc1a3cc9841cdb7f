/* launch: runs one benchmark process and reports its wall time and peak RSS.
   run.py starts every benchmark through this small program instead of measuring the child
   itself, because Linux charges a process's ru_maxrss with the high-water RSS of the address
   space it had before exec (exec_mmap keeps the old mm's peak): a benchmark forked or
   vforked straight from the Python runner would report at least Python's own RSS.  Forked
   from this launcher, it starts from about 1 MB, below any benchmark's own baseline.
   Usage: launch [-p PRELOAD] [-w MIB] REPORT PROGRAM [ARGS...]
   The child runs PROGRAM with LD_PRELOAD=PRELOAD, or with LD_PRELOAD removed when -p is not
   given, and otherwise this environment; stdout and stderr are inherited.  When it ends,
   launch writes "<wall_seconds> <maxrss_kib> <status> <user_seconds> <sys_seconds>" to
   REPORT, where status is the exit code or minus the signal number, and exits 0; it exits 2
   when it cannot do that.

   -w MIB washes the kernel's free page lists before the run (not timed): a child touches MIB
   and gives the pages back one at a time in random order.  A process of the cache runtime
   that confined memory to a few colours frees those frames at exit, on top of the lists, and
   the next process's first faults take them: a glibc chase run right after an art4 ROCS run
   had 115 of its 169 pages in the buffer's one colour and read 25 ns a line against 6.4
   (docs/colours.md, Limits).  Washed, each configuration starts from frames of every colour,
   whatever ran before it. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int wash(size_t mib)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        size_t n = mib << 8;
        char *p = mmap(NULL, n << 12, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        uint32_t *order = malloc(n * sizeof *order);
        if (p == MAP_FAILED || order == NULL)
            _exit(1);
        for (size_t i = 0; i < n; i++) {
            p[i << 12] = 1;
            order[i] = (uint32_t)i;
        }
        uint64_t r = 0x9E3779B97F4A7C15ull;
        for (size_t i = n - 1; i > 0; i--) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            size_t j = r % (i + 1);
            uint32_t t = order[i];
            order[i] = order[j], order[j] = t;
        }
        for (size_t i = 0; i < n; i++)
            madvise(p + ((size_t)order[i] << 12), 4096, MADV_DONTNEED);
        _exit(0);
    }
    int status;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *preload = NULL;
    int a = 1;
    if (a + 1 < argc && strcmp(argv[a], "-p") == 0) {
        preload = argv[a + 1];
        a += 2;
    }
    size_t wash_mib = 0;
    if (a + 1 < argc && strcmp(argv[a], "-w") == 0) {
        wash_mib = strtoul(argv[a + 1], NULL, 10);
        a += 2;
    }
    if (argc - a < 2) {
        fprintf(stderr, "usage: launch [-p PRELOAD] [-w MIB] REPORT PROGRAM [ARGS...]\n");
        return 2;
    }
    const char *report = argv[a];
    char **child_argv = argv + a + 1;

    if (wash_mib > 0 && wash(wash_mib) != 0) {
        fprintf(stderr, "launch: could not wash %zu MiB of free pages\n", wash_mib);
        return 2;
    }
    double t0 = seconds();
    pid_t pid = fork();
    if (pid < 0) {
        perror("launch: fork");
        return 2;
    }
    if (pid == 0) {
        if (preload ? setenv("LD_PRELOAD", preload, 1) : unsetenv("LD_PRELOAD"))
            _exit(127);
        execv(child_argv[0], child_argv);
        perror("launch: exec");
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) {
        perror("launch: wait4");
        return 2;
    }
    double wall = seconds() - t0;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);

    FILE *f = fopen(report, "w");
    double user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
    double sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
    if (!f || fprintf(f, "%.6f %ld %d %.6f %.6f\n", wall, ru.ru_maxrss, code, user, sys) < 0
        || fclose(f)) {
        perror("launch: writing the report");
        return 2;
    }
    return 0;
}
