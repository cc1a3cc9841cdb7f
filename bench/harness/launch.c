/* launch: runs one benchmark process and reports its wall time and peak RSS.
   run.py starts every benchmark through this small program instead of measuring the child
   itself, because Linux charges a process's ru_maxrss with the high-water RSS of the address
   space it had before exec (exec_mmap keeps the old mm's peak): a benchmark forked or
   vforked straight from the Python runner would report at least Python's own RSS.  Forked
   from this launcher, it starts from about 1 MB, below any benchmark's own baseline.
   Usage: launch [-p PRELOAD] REPORT PROGRAM [ARGS...]
   The child runs PROGRAM with LD_PRELOAD=PRELOAD, or with LD_PRELOAD removed when -p is not
   given, and otherwise this environment; stdout and stderr are inherited.  When it ends,
   launch writes "<wall_seconds> <maxrss_kib> <status> <user_seconds> <sys_seconds>" to
   REPORT, where status is the exit code or minus the signal number, and exits 0; it exits 2
   when it cannot do that. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv)
{
    const char *preload = NULL;
    int a = 1;
    if (a + 1 < argc && strcmp(argv[a], "-p") == 0) {
        preload = argv[a + 1];
        a += 2;
    }
    if (argc - a < 2) {
        fprintf(stderr, "usage: launch [-p PRELOAD] REPORT PROGRAM [ARGS...]\n");
        return 2;
    }
    const char *report = argv[a];
    char **child_argv = argv + a + 1;

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
