// C++ standard-library workload for chromalloc's real-program tests.  Every operator new and
// delete in libstdc++ ends in malloc/free (and the over-aligned forms in aligned_alloc or
// posix_memalign), exceptions are allocated with malloc by __cxa_allocate_exception, and
// threads allocate and free concurrently, so this program checks that a preloaded allocator
// serves typical C++ code correctly: std::map<std::string,int> word counting, an
// std::unordered_map that grows, shrinks and rehashes, std::vector growth and shrinking,
// std::string concatenation, std::shared_ptr/std::weak_ptr/std::unique_ptr object graphs,
// new/delete of arrays and objects including alignas(64) and alignas(4096) types (whose
// alignment is verified), exceptions thrown, caught and carried across threads, and
// std::threads that build maps and hand them to other threads which free them.  All results
// are printed as checksums computed in an order that does not depend on thread scheduling,
// hash-table iteration order or the allocator; tests/programs/run.sh compares the output of
// a preloaded run with a plain run and with the expected output embedded in run.sh.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

// splitmix64: a fixed, portable generator (std distributions are implementation-defined).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t n) { return static_cast<uint32_t>(next() % n); }
};

// FNV-1a 64, fed piece by piece.
struct Fnv {
  uint64_t h = 0xcbf29ce484222325ULL;
  void bytes(const void* p, size_t n) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; i++) {
      h ^= c[i];
      h *= 0x100000001b3ULL;
    }
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); bytes("\0", 1); }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
};

uint64_t hash_str(const std::string& s) {
  Fnv f;
  f.str(s);
  return f.h;
}

int failures = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::printf("CHECK FAILED: %s\n", what);
    failures++;
  }
}

std::string make_word(Rng& r) {
  static const char* const syll[] = {"ka", "lo", "mi", "re", "tu", "zan", "qui", "ox", "el", "pra",
                                     "st", "ung"};
  std::string w;
  unsigned n = 1 + r.below(4);
  for (unsigned i = 0; i < n; i++) w += syll[r.below(12)];
  return w;
}

// ------------------------------------------------------------------ std::map word counting
void test_word_count() {
  Rng r(1);
  std::string text;
  for (int i = 0; i < 300000; i++) {
    text += make_word(r);
    text += (i % 17 == 16) ? '\n' : ' ';
  }
  std::map<std::string, int> counts;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); i++) {
    if (i == text.size() || text[i] == ' ' || text[i] == '\n') {
      if (i > start) counts[text.substr(start, i - start)]++;
      start = i + 1;
    }
  }
  Fnv f;
  long total = 0;
  for (const auto& kv : counts) {
    f.str(kv.first);
    f.u64(static_cast<uint64_t>(kv.second));
    total += kv.second;
  }
  std::vector<std::pair<int, std::string>> top;
  for (const auto& kv : counts) top.emplace_back(-kv.second, kv.first);
  std::sort(top.begin(), top.end());
  // Erase every other entry, then re-insert with a different key shape.
  int i = 0;
  for (auto it = counts.begin(); it != counts.end();) {
    if (i++ % 2) it = counts.erase(it);
    else ++it;
  }
  for (int j = 0; j < 20000; j++) counts["extra-" + std::to_string(j)] = j;
  std::printf("map: text=%zu distinct=%zu total=%ld after=%zu top=%s:%d,%s:%d,%s:%d sum=%016llx\n",
              text.size(), top.size(), total, counts.size(), top[0].second.c_str(), -top[0].first,
              top[1].second.c_str(), -top[1].first, top[2].second.c_str(), -top[2].first,
              static_cast<unsigned long long>(f.h));
}

// ------------------------------------------------------------------ std::unordered_map
void test_unordered() {
  Rng r(2);
  std::unordered_map<uint64_t, std::string> m;
  std::vector<uint64_t> keys;
  for (int i = 0; i < 200000; i++) {
    uint64_t k = r.next();
    keys.push_back(k);
    m.emplace(k, std::string(1 + k % 40, static_cast<char>('a' + k % 26)));
  }
  for (size_t i = 0; i < keys.size(); i += 2) m.erase(keys[i]);
  m.rehash(0);
  for (int i = 0; i < 50000; i++) m[static_cast<uint64_t>(i)] = std::to_string(i * 31);
  m.reserve(400000);
  uint64_t sum = 0, xr = 0;
  for (const auto& kv : m) {  // order-independent combination
    uint64_t h = kv.first * 0x9e3779b97f4a7c15ULL ^ hash_str(kv.second);
    sum += h;
    xr ^= h;
  }
  std::unordered_set<std::string> us;
  for (int i = 0; i < 100000; i++) us.insert("s" + std::to_string(i % 70001));
  std::printf("unordered: size=%zu sum=%016llx xor=%016llx set=%zu\n", m.size(),
              static_cast<unsigned long long>(sum), static_cast<unsigned long long>(xr), us.size());
}

// ------------------------------------------------------------------ std::vector growth
void test_vectors() {
  Rng r(3);
  std::vector<std::vector<int>> vv;
  for (int i = 0; i < 20000; i++) {
    vv.emplace_back();
    unsigned n = r.below(64);
    for (unsigned j = 0; j < n; j++) vv.back().push_back(static_cast<int>(r.below(1000)));
  }
  long s = 0;
  for (auto& v : vv) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    v.shrink_to_fit();
    for (int x : v) s += x;
  }
  std::vector<uint64_t> big;
  for (int i = 0; i < 3000000; i++) big.push_back(static_cast<uint64_t>(i) * i);  // ~24 MB by doubling
  uint64_t bs = 0;
  for (uint64_t x : big) bs += x;
  big.resize(1000);
  big.shrink_to_fit();
  std::vector<std::string> vs;
  for (int i = 0; i < 100000; i++) vs.push_back(std::string(static_cast<size_t>(i % 100), 'x') + std::to_string(i));
  vs.erase(vs.begin(), vs.begin() + 50000);
  size_t len = 0;
  for (auto& x : vs) len += x.size();
  std::deque<int> dq;
  for (int i = 0; i < 200000; i++) {
    if (i % 3) dq.push_back(i);
    else dq.push_front(i);
    if (i % 5 == 0) dq.pop_front();
  }
  std::list<std::string> lst;
  for (int i = 0; i < 50000; i++) lst.push_back(std::to_string(i));
  lst.sort();
  std::printf("vector: inner=%ld big=%016llx cap=%zu strings=%zu deque=%zu list_front=%s\n", s,
              static_cast<unsigned long long>(bs), big.capacity(), len, dq.size(),
              lst.front().c_str());
}

// ------------------------------------------------------------------ std::string
void test_strings() {
  std::string s;
  for (int i = 0; i < 100000; i++) {
    s += std::to_string(i);
    s += ',';
  }
  std::string t;
  for (int i = 0; i < 2000; i++) t = t + "<" + std::to_string(i) + ">";  // operator+ temporaries
  size_t commas = std::count(s.begin(), s.end(), ',');
  std::string rev(s.rbegin(), s.rend());
  std::vector<std::string> parts;
  size_t pos = 0, next;
  while ((next = s.find(',', pos)) != std::string::npos) {
    parts.push_back(s.substr(pos, next - pos));
    pos = next + 1;
  }
  std::string joined;
  joined.reserve(16);
  for (size_t i = 0; i < parts.size(); i += 3) joined.append(parts[i]).append("|");
  joined.shrink_to_fit();
  std::printf("string: len=%zu commas=%zu t=%zu parts=%zu joined=%zu h=%016llx hr=%016llx\n",
              s.size(), commas, t.size(), parts.size(), joined.size(),
              static_cast<unsigned long long>(hash_str(joined)),
              static_cast<unsigned long long>(hash_str(rev)));
}

// ------------------------------------------------------------------ smart-pointer graphs
struct Node {
  static long alive;
  static long made;
  int id;
  std::vector<std::shared_ptr<Node>> kids;
  std::weak_ptr<Node> parent;
  std::unique_ptr<std::string> label;
  explicit Node(int i) : id(i), label(new std::string("node-" + std::to_string(i))) {
    alive++;
    made++;
  }
  ~Node() { alive--; }
};
long Node::alive = 0;
long Node::made = 0;

long sum_tree(const std::shared_ptr<Node>& n) {
  long s = n->id + static_cast<long>(n->label->size());
  for (auto& k : n->kids) s += sum_tree(k);
  return s;
}

void test_smart_pointers() {
  Rng r(4);
  long tree_sum = 0, shared_uses = 0;
  for (int round = 0; round < 10; round++) {
    std::vector<std::shared_ptr<Node>> all;
    auto root = std::make_shared<Node>(0);
    all.push_back(root);
    for (int i = 1; i < 20000; i++) {
      auto n = std::make_shared<Node>(i);
      auto& p = all[r.below(static_cast<uint32_t>(all.size()))];
      n->parent = p;
      p->kids.push_back(n);
      all.push_back(std::move(n));
    }
    // Share some nodes in a second structure (a DAG view) and drop half of the tree.
    std::vector<std::shared_ptr<Node>> view;
    for (size_t i = 0; i < all.size(); i += 7) view.push_back(all[i]);
    all.clear();
    tree_sum += sum_tree(root);
    for (auto& v : view) shared_uses += v.use_count();
    root->kids.resize(root->kids.size() / 2);
    view.clear();
    long expired = 0;
    std::vector<std::weak_ptr<Node>> weak;
    for (auto& k : root->kids) weak.push_back(k);
    root.reset();
    for (auto& w : weak) expired += w.expired();
    check(expired == static_cast<long>(weak.size()), "weak pointers expired");
  }
  std::vector<std::unique_ptr<int[]>> arrays;
  long asum = 0;
  for (int i = 0; i < 10000; i++) {
    arrays.emplace_back(new int[static_cast<size_t>(1 + i % 300)]());
    arrays.back()[0] = i;
  }
  for (auto& a : arrays) asum += a[0];
  arrays.clear();
  check(Node::alive == 0, "all nodes destroyed");
  std::printf("smart: made=%ld alive=%ld tree=%ld uses=%ld arrays=%ld\n", Node::made, Node::alive,
              tree_sum, shared_uses, asum);
}

// ------------------------------------------------------------------ over-aligned new/delete
struct alignas(64) Line {
  double v[8];
  Line() { for (int i = 0; i < 8; i++) v[i] = i; }
};
struct alignas(4096) Page {
  unsigned char data[4096];
  int id;
  explicit Page(int i = 0) : id(i) { std::memset(data, i & 0xff, sizeof data); }
};
static_assert(alignof(Page) == 4096, "page alignment");

template <class T>
bool aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(T) == 0;
}

void test_aligned() {
  int bad = 0;
  long sum = 0;
  std::vector<Line*> lines;
  for (int i = 0; i < 5000; i++) {
    Line* l = new Line();
    bad += !aligned(l);
    lines.push_back(l);
  }
  for (int i = 0; i < 200; i++) {
    Line* arr = new Line[static_cast<size_t>(1 + i)];
    bad += !aligned(arr) + !aligned(&arr[i]);
    sum += static_cast<long>(arr[i].v[7]);
    delete[] arr;
  }
  for (Line* l : lines) delete l;
  std::vector<Page*> pages;
  for (int i = 0; i < 300; i++) {
    Page* p = new Page(i);
    bad += !aligned(p);
    pages.push_back(p);
  }
  for (size_t i = 0; i < pages.size(); i += 2) {
    sum += pages[i]->id + pages[i]->data[100];
    delete pages[i];
    pages[i] = nullptr;
  }
  for (int i = 0; i < 20; i++) {
    Page* arr = new Page[static_cast<size_t>(1 + i % 5)];
    bad += !aligned(arr);
    sum += arr[0].id;
    delete[] arr;
  }
  for (Page* p : pages) delete p;
  std::vector<Line> vl(1000);  // std::allocator uses aligned new for over-aligned types
  bad += !aligned(vl.data());
  vl.resize(5000);
  bad += !aligned(vl.data());
  auto sp = std::make_shared<Page>(7);
  bad += !aligned(sp.get());
  auto up = std::make_unique<Page>(9);
  bad += !aligned(up.get());
  sum += sp->id + up->id;
  void* raw = ::operator new(100000, std::align_val_t(4096));
  bad += reinterpret_cast<uintptr_t>(raw) % 4096 != 0;
  ::operator delete(raw, std::align_val_t(4096));
  check(bad == 0, "over-aligned allocations are aligned");
  std::printf("aligned: misaligned=%d sum=%ld\n", bad, sum);
}

// ------------------------------------------------------------------ exceptions
struct ParseError : std::runtime_error {
  int code;
  ParseError(const std::string& m, int c) : std::runtime_error(m), code(c) {}
};

int parse(int i) {
  if (i % 3 == 0) throw ParseError("bad value " + std::to_string(i) + std::string(static_cast<size_t>(i % 200), '!'), i % 7);
  if (i % 5 == 0) throw std::out_of_range("range " + std::to_string(i));
  return i;
}

void test_exceptions() {
  long caught = 0, codes = 0, ok = 0, msglen = 0;
  for (int i = 0; i < 20000; i++) {
    try {
      try {
        ok += parse(i);
      } catch (const ParseError& e) {
        codes += e.code;
        msglen += static_cast<long>(std::strlen(e.what()));
        if (i % 9 == 0) std::throw_with_nested(std::logic_error("wrapped"));
        caught++;
      }
    } catch (const std::out_of_range& e) {
      msglen += static_cast<long>(std::strlen(e.what()));
      caught++;
    } catch (const std::logic_error& e) {
      try {
        std::rethrow_if_nested(e);
      } catch (const ParseError& inner) {
        codes += 100 * inner.code;
      }
      caught++;
    }
  }
  // An exception_ptr made in one thread, rethrown and freed in another.
  std::exception_ptr ep;
  std::thread t([&ep] {
    try {
      throw std::runtime_error(std::string(5000, 'e'));
    } catch (...) {
      ep = std::current_exception();
    }
  });
  t.join();
  size_t cross = 0;
  try {
    std::rethrow_exception(ep);
  } catch (const std::runtime_error& e) {
    cross = std::strlen(e.what());
  }
  ep = nullptr;
  std::printf("exceptions: caught=%ld codes=%ld ok=%ld msglen=%ld cross=%zu\n", caught, codes, ok,
              msglen, cross);
}

// ------------------------------------------------------------------ threads passing maps
using Batch = std::unique_ptr<std::map<int, std::string>>;

struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Batch> q;
  int producers_left;
  void push(Batch b) {
    {
      std::lock_guard<std::mutex> g(mu);
      q.push_back(std::move(b));
    }
    cv.notify_one();
  }
  void producer_done() {
    {
      std::lock_guard<std::mutex> g(mu);
      producers_left--;
    }
    cv.notify_all();
  }
  Batch pop() {  // nullptr when all producers are done and the queue is empty
    std::unique_lock<std::mutex> g(mu);
    cv.wait(g, [this] { return !q.empty() || producers_left == 0; });
    if (q.empty()) return nullptr;
    Batch b = std::move(q.front());
    q.pop_front();
    return b;
  }
};

void test_threads() {
  const int kProducers = 4, kConsumers = 3, kBatches = 150;
  Channel ch;
  ch.producers_left = kProducers;
  std::vector<uint64_t> consumer_sum(kConsumers, 0);
  std::vector<long> consumer_entries(kConsumers, 0);
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; p++) {
    threads.emplace_back([p, &ch] {
      Rng r(100 + static_cast<uint64_t>(p));
      for (int b = 0; b < kBatches; b++) {
        Batch m(new std::map<int, std::string>);
        unsigned n = 50 + r.below(300);
        for (unsigned i = 0; i < n; i++) {
          int k = static_cast<int>(r.below(100000));
          (*m)[k] = std::to_string(p) + ":" + std::to_string(k) + std::string(r.below(100), 'm');
        }
        ch.push(std::move(m));  // allocated here, freed by a consumer thread
      }
      ch.producer_done();
    });
  }
  for (int c = 0; c < kConsumers; c++) {
    threads.emplace_back([c, &ch, &consumer_sum, &consumer_entries] {
      std::map<std::string, int> mine;
      while (Batch b = ch.pop()) {
        for (auto& kv : *b) {
          consumer_sum[c] += static_cast<uint64_t>(kv.first) * 2654435761u ^ hash_str(kv.second);
          consumer_entries[c]++;
          if (kv.first % 10 == 0) mine[kv.second]++;
        }
        b.reset();
      }
      consumer_entries[c] += 0 * static_cast<long>(mine.size());
    });
  }
  for (auto& t : threads) t.join();
  uint64_t total = 0;
  long entries = 0;
  for (int c = 0; c < kConsumers; c++) {
    total += consumer_sum[c];
    entries += consumer_entries[c];
  }
  // Threads that each build a container and return it to the main thread through a future-like slot.
  std::vector<std::unique_ptr<std::vector<std::string>>> slots(4);
  std::vector<std::thread> builders;
  for (int i = 0; i < 4; i++) {
    builders.emplace_back([i, &slots] {
      auto v = std::make_unique<std::vector<std::string>>();
      for (int j = 0; j < 30000; j++) v->push_back(std::to_string(i * 1000000 + j));
      slots[static_cast<size_t>(i)] = std::move(v);
    });
  }
  for (auto& t : builders) t.join();
  size_t slot_len = 0;
  for (auto& s : slots)
    for (auto& x : *s) slot_len += x.size();
  slots.clear();
  std::printf("threads: entries=%ld sum=%016llx slots=%zu\n", entries,
              static_cast<unsigned long long>(total), slot_len);
}

}  // namespace

int main() {
  test_word_count();
  test_unordered();
  test_vectors();
  test_strings();
  test_smart_pointers();
  test_aligned();
  test_exceptions();
  test_threads();
  if (failures != 0) {
    std::printf("FAILED %d checks\n", failures);
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
