/* chromalloc's fault handler (trap.c): clients resolve faults on pages they are working on. */
#ifndef CA_TRAP_H
#define CA_TRAP_H

#include <stdbool.h>

/* Returns true when the fault at `addr` was on one of the client's pages and the access may be
   retried (the client waited until the page was usable again). */
typedef bool (*ca_trap_fn)(void* addr, int sig);

#pragma GCC visibility push(hidden)
bool _ca_trap_register(ca_trap_fn fn);       /* installs the handler on first use */
void _ca_trap_quiet_thread(void);            /* the calling thread (ours) takes no signal but faults */
/* Valgrind runs the program on a JIT that does not resume a faulting instruction the way the
   CPU does: a memset over a page that a SIGSEGV handler makes writable leaves wrong bytes (199
   of 200 rounds in a test, none natively), so page traps would corrupt the program's data.  Its
   preload library is in LD_PRELOAD. */
bool _ca_trap_under_valgrind(void);
/* fork(): the lock every interposed sigaction() takes is held across it (a thread setting a
   handler while another forked left the child's next sigaction waiting for ever) */
struct ca_layer_s;
extern const struct ca_layer_s _ca_layer_trap;
#pragma GCC visibility pop

#endif
