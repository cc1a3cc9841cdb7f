/* cxxmap: a C++ program's allocations: std::string, std::unordered_map, std::map and
   std::vector, one thread.  Each step takes a "line" of random words (lengths 2-40: half fit
   the string's inline buffer, half are heap blocks), splits it into a vector of strings, counts
   them in an unordered_map<string, long>, keeps the last KEEP lines in a map<long, string> keyed
   by step (the oldest erased), and now and then drops the rare words from the counts.  Every
   node, bucket array and string is operator new / delete; their sizes are the library's, not
   ours.  The checksum (its RESULT line) depends on the data only: every allocator prints the
   same one.
   Usage: cxxmap [STEPS=400000] [KEEP=2048] [SEED=1] */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

static uint64_t rng_state;
static uint64_t next_rand() {                 /* xorshift64*: the same words for every allocator */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 400000;
    long keep = argc > 2 ? atol(argv[2]) : 2048;
    rng_state = argc > 3 ? strtoull(argv[3], nullptr, 10) * 0x9E3779B97F4A7C15ull + 1 : 0x9E3779B97F4A7C15ull;
    if (steps <= 0 || keep <= 0) { fprintf(stderr, "usage: cxxmap [STEPS>0] [KEEP>0] [SEED]\n"); return 2; }

    std::vector<std::string> vocab;               /* 20000 words, lengths 2-40 */
    for (int i = 0; i < 20000; i++) {
        size_t len = 2 + next_rand() % 39;
        std::string w;
        for (size_t k = 0; k < len; k++) w += (char)('a' + next_rand() % 26);
        vocab.push_back(w);
    }
    std::unordered_map<std::string, long> counts;
    std::map<long, std::string> recent;
    uint64_t sum = 0;
    for (long step = 0; step < steps; step++) {
        std::string line;
        size_t words = 4 + next_rand() % 12;
        for (size_t k = 0; k < words; k++) {
            if (k) line += ' ';
            line += vocab[(size_t)(next_rand() % vocab.size())];
        }
        std::vector<std::string> tokens;
        for (size_t at = 0; at <= line.size();) {
            size_t end = line.find(' ', at);
            if (end == std::string::npos) end = line.size();
            tokens.emplace_back(line.substr(at, end - at));
            at = end + 1;
        }
        for (const std::string &t : tokens) sum += (uint64_t)++counts[t];
        recent.emplace(step, std::move(line));
        if ((long)recent.size() > keep) {
            sum += recent.begin()->second.size();
            recent.erase(recent.begin());
        }
        if (step % 50000 == 49999) {               /* drop the rare words: the map shrinks and grows again */
            for (auto it = counts.begin(); it != counts.end();) it = it->second < 4 ? counts.erase(it) : std::next(it);
            sum += counts.size();
        }
    }
    printf("cxxmap steps=%ld keep=%ld words=%zu\nRESULT cxxmap %llx\n", steps, keep, counts.size(), (unsigned long long)sum);
    return 0;
}
