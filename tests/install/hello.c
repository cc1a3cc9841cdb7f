/* A user program built against an installed chromalloc (pkg-config or CMake), the allocator
   alone or (HELLO_COLOUR) the cache runtime, whose colour API it then calls.  It defines its
   own `error` and `sigset`, names glibc has too and the cache runtime's monitor wraps (weakly):
   it must link against the static libraries as well, and its own definitions must be the ones
   called. */
#include <chromalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int own_errors, own_sigsets;
void error(int status, int errnum, const char* fmt, ...) { (void)status; (void)errnum; (void)fmt; own_errors++; }
typedef void (*handler_t)(int);
handler_t sigset(int sig, handler_t fn) { (void)sig; own_sigsets++; return fn; }

int main(void) {
  char* p = malloc(100);
  strcpy(p, "hello");
  char json[1 << 16];
  chromalloc_stats_json(json, sizeof json);
  error(0, 0, "%s", p);
  sigset(11, NULL);
#ifdef HELLO_COLOUR
  if (chromalloc_colour_count() >= -1) strcat(p, " colour");     /* the colour API links */
#endif
  printf("%s from chromalloc %s: %s, %s, %s\n", p, chromalloc_version(), strstr(json, "\"size_classes\"") ? "stats ok" : "no stats",
         own_errors == 1 ? "own error" : "error not its own", own_sigsets == 1 ? "own sigset" : "sigset not its own");
  free(p);
  return 0;
}
