"""The bundled workload of `make demo`: a small in-memory index (dicts of records, strings,
sorting, JSON round trips) built and rebuilt a few times, so the statistics show a realistic
spread of size classes, frees and reuse.  Prints a checksum."""
import json
import random

random.seed(42)
words = ["".join(random.choice("abcdefghij") for _ in range(random.randint(3, 12))) for _ in range(5000)]
checksum = 0
for round_ in range(4):
    index = {}
    for i in range(60000):
        w = words[i % len(words)]
        index.setdefault(w, []).append({"id": i, "score": (i * 7919) % 1000, "tag": w[::-1]})
    ranked = sorted(index.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:500]
    blob = json.dumps(ranked)
    back = json.loads(blob)
    checksum = (checksum * 31 + len(blob) + sum(len(v) for _, v in back)) % 1000000007
print("demo workload checksum", checksum)
