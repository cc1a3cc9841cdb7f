/* probe: prints the path of the shared object that provides malloc in this process.
   run.py runs it under each allocator's LD_PRELOAD before benchmarking, because the dynamic
   loader only warns and carries on with glibc when a preload cannot be loaded: without this
   check a broken preload would be measured as glibc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "malloc");
    if (!sym || !dladdr(sym, &info) || !info.dli_fname) {
        fprintf(stderr, "probe: cannot tell which object provides malloc\n");
        return 1;
    }
    void *p = malloc(100);
    if (!p) {
        fprintf(stderr, "probe: malloc(100) failed\n");
        return 1;
    }
    free(p);
    printf("%s\n", info.dli_fname);
    return 0;
}
