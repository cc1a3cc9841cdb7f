/* Invalid frees abort with one line "chromalloc: ..." naming the pointer: a pointer that is not
   chromalloc's (stack), an interior pointer of a small block, a medium one and a large object, a
   double free by the owner, by another thread, of a medium block and of a large object, a write into blocks another
   thread freed that cuts their list short, a free into a span that was
   already given back, a pointer above user space that names one of our segments modulo 2^47, and
   realloc of a foreign pointer.  Each case runs in a child whose
   SIGABRT handler prints the pointer the case used, so the test can check it was named. */
#include "check.h"
#include <pthread.h>

static char hex[32];

static void* thread_free(void* p) { free(p); return NULL; }
static void name(const void* p) { snprintf(hex, sizeof hex, "%p", p); }

static void stack_ptr(void)      { int x; name(&x); free(&x); }
static void interior(void)       { char* p = malloc(64); name(p + 16); free(p + 16); }
static void large_interior(void) { char* p = malloc(1 << 20); name(p + 4096); free(p + 4096); }
static void double_local(void)   { void* p = malloc(40); name(p); free(p); free(p); }
static void double_after_remote(void) {       /* owner frees a block another thread freed */
  void* p = malloc(40);
  name(p);
  pthread_t t; pthread_create(&t, NULL, thread_free, p); pthread_join(t, NULL);
  free(p);
}
static void double_remote(void) {             /* another thread frees a block already freed */
  void* p = malloc(40);
  name(p);
  free(p);
  pthread_t t; pthread_create(&t, NULL, thread_free, p); pthread_join(t, NULL);
}
/* a write into blocks another thread freed (a use after free) cuts the span's remote list short:
   the owner finds it shorter than the frees counted when it takes the list back */
static void* volatile sink;
static void* free_ten(void* arg) {
  void** p = arg;
  for (int i = 0; i < 10; i++) free(p[i]);
  return NULL;
}
static void remote_list_cut(void) {
  static void* p[3000];
  for (int i = 0; i < 3000; i++) p[i] = malloc(56);     /* the first span fills up */
  pthread_t t; pthread_create(&t, NULL, free_ten, p); pthread_join(t, NULL);
  *(void**)p[5] = NULL;                                  /* the list runs 9 -> 8 -> ... -> 1 */
  name(p[9]);
  for (int i = 0; i < 100000; i++) sink = malloc(56);    /* until the owner takes the list back */
}
/* medium blocks past a segment's first 64 KiB: free() first reads them as a small span's */
static char* medium_far(void) {
  static void* p[40];
  for (int i = 0; i < 40; i++) p[i] = malloc(24000);
  return p[39];
}
static void medium_interior(void) { char* p = medium_far(); name(p + 16); free(p + 16); }
static void double_medium(void)   { char* p = medium_far(); name(p); free(p); free(p); }
static void double_large(void)   { void* p = malloc(3 << 20); name(p); free(p); free(p); }
static void freed_span(void) {
  static void* p[2000];
  for (int i = 0; i < 2000; i++) p[i] = malloc(3000);   /* several spans of one class */
  for (int i = 0; i < 2000; i++) free(p[i]);            /* the early spans are given back */
  name(p[0]);
  free(p[0]);
}
static void wild_high(void) {      /* above user space, and naming one of our segments modulo 2^47 */
  char* p = malloc(64);
  p += (uintptr_t)1 << 47;
  name(p);
  free(p);
}
static void realloc_foreign(void) { static char buf[64]; name(buf); (void)!realloc(buf, 100); }

static void on_abort(int sig) {
  (void)!write(2, "PTR ", 4);
  (void)!write(2, hex, strlen(hex));
  (void)!write(2, "\n", 1);
  signal(SIGABRT, SIG_DFL);
  raise(SIGABRT);
}

static void run(void* fn) {
  signal(SIGABRT, on_abort);
  ((void (*)(void))fn)();
}

static void expect_abort(const char* label, void (*fn)(void), const char* what) {
  char out[2048];
  int status = run_child(run, (void*)fn, out, sizeof out);
  bool aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  char* line = strstr(out, "chromalloc: ");
  char* ptr = strstr(out, "PTR ");
  char want[40] = "?";
  if (ptr) sscanf(ptr + 4, "%39s", want);
  char* eol = line ? strchr(line, '\n') : NULL;
  bool named = line && eol && strstr(line, what) && strstr(line, want) && strstr(line, want) < eol;
  if (!aborted || !named) fprintf(stderr, "%s: status 0x%x, wanted '%s' naming %s, got: %s\n", label, status, what, want, out);
  CHECK(aborted);
  CHECK(named);
}

int main(void) {
  require_chromalloc("test_invalid_free");
  expect_abort("stack pointer", stack_ptr, "free(): invalid pointer");
  expect_abort("interior pointer", interior, "not the start of an allocated block");
  expect_abort("large interior", large_interior, "inside a large object");
  expect_abort("double free", double_local, "double free");
  expect_abort("double free after a remote free", double_after_remote, "double free");
  expect_abort("double free by another thread", double_remote, "double free");
  expect_abort("double free of a large object", double_large, "double free");
  expect_abort("interior pointer of a medium block", medium_interior, "not the start of an allocated block");
  expect_abort("double free of a medium block", double_medium, "double free");
  expect_abort("remote free list cut short", remote_list_cut, "corrupted remote free list");
  expect_abort("free into a released span", freed_span, "free(): ");
  expect_abort("pointer above user space", wild_high, "not allocated by chromalloc");
  expect_abort("realloc of a foreign pointer", realloc_foreign, "invalid pointer");
  return check_done("test_invalid_free");
}
