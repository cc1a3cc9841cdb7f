// C++'s operator new and delete are chromalloc's: new reaches it in one call (the program's
// operator new is the library's, not libstdc++'s), the standard's semantics hold (a request
// that cannot be met throws std::bad_alloc, the new-handler is called first and may make room,
// nothrow new returns nullptr), the array and sized forms pair with free, and deleting a
// pointer chromalloc never gave out aborts naming it.
#include <dlfcn.h>
#include <malloc.h>
#include <new>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

extern "C" __attribute__((weak)) const char* chromalloc_version(void);

static int checks, failed;
#define CHECK(c) do { checks++; if (!(c)) { failed++; std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); } } while (0)

static char* reserve;
static int handler_calls;
static void give_back_reserve() {            // the new-handler: frees a reserve, then gives up
  handler_calls++;
  if (reserve != nullptr) { std::free(reserve); reserve = nullptr; }
  else std::set_new_handler(nullptr);
}

// operator new as the program binds it: the library's own (linked or preloaded), or this
// executable's when the archive is linked in; never libstdc++'s
static bool new_is_ours() {
  void* (*op)(std::size_t) = &::operator new;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(op), &info) == 0 || info.dli_fname == nullptr) return false;
  std::fprintf(stderr, "operator new comes from %s\n", info.dli_fname);
  return std::strstr(info.dli_fname, "libstdc++") == nullptr;
}

int main() {
  if (chromalloc_version == nullptr) { std::fprintf(stderr, "test_new: chromalloc is not loaded\n"); return 2; }
  CHECK(new_is_ours());

  // the forms pair with each other and with malloc's bookkeeping
  char* a = new char[100];
  CHECK(malloc_usable_size(a) >= 100);
  std::memset(a, 1, 100);
  delete[] a;
  long* b = new long(7);
  CHECK(*b == 7);
  delete b;
  struct S { long x[3]; };
  S* s = new S();
  ::operator delete(s, sizeof(S));                      // sized delete
  void* z = ::operator new(0);                          // size 0: a unique pointer
  void* z2 = ::operator new(0);
  CHECK(z != nullptr && z2 != nullptr && z != z2);
  ::operator delete(z);
  ::operator delete(z2);
  ::operator delete(nullptr);

  // a request no allocator can meet throws std::bad_alloc
  bool threw = false;
  try { volatile std::size_t huge = ~static_cast<std::size_t>(0) / 2; void* p = ::operator new(huge); ::operator delete(p); }
  catch (const std::bad_alloc&) { threw = true; }
  CHECK(threw);
  threw = false;
  try { volatile std::size_t huge = ~static_cast<std::size_t>(0) / 4; char* p = new char[huge]; delete[] p; }
  catch (const std::bad_alloc&) { threw = true; }
  CHECK(threw);

  // nothrow new returns nullptr instead
  volatile std::size_t huge = ~static_cast<std::size_t>(0) / 2;
  void* q = ::operator new(huge, std::nothrow);
  CHECK(q == nullptr);

  // the new-handler runs until it gives up (first call frees a reserve, second removes itself)
  reserve = static_cast<char*>(std::malloc(1 << 20));
  std::set_new_handler(give_back_reserve);
  threw = false;
  try { void* p = ::operator new(huge); ::operator delete(p); }
  catch (const std::bad_alloc&) { threw = true; }
  CHECK(threw);
  CHECK(handler_calls == 2);
  CHECK(reserve == nullptr);
  std::set_new_handler(nullptr);

  // deleting what chromalloc never gave out aborts, naming the pointer
  int fds[2];
  CHECK(pipe(fds) == 0);
  static long not_heap[4];
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    delete &not_heap[1];
    _exit(0);
  }
  close(fds[1]);
  char out[512] = {0};
  ssize_t got = read(fds[0], out, sizeof out - 1);
  int status = 0;
  waitpid(pid, &status, 0);
  char want[32];
  std::snprintf(want, sizeof want, "%p", static_cast<void*>(&not_heap[1]));
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  CHECK(got > 0 && std::strstr(out, "chromalloc: ") != nullptr && std::strstr(out, want) != nullptr);

  std::fprintf(stderr, "test_new: %d checks, %d failed\n", checks, failed);
  return failed == 0 ? 0 : 1;
}
