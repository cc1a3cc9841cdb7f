"""Allocation-heavy CPython workload for chromalloc's real-program tests.

CPython sends every object larger than 512 bytes, every list/dict/set table, every bytes
and str buffer and all of its own bookkeeping straight to malloc/realloc/free, so this script
exercises the allocator through the whole size range with realistic patterns: hundreds of
thousands of small objects in dicts, lists and sets that are built, mutated and torn down;
strings built and split; a class with many instances; a json round trip; sorting;
collections.Counter; bytes/bytearray growth (realloc); garbage-collected reference cycles;
threads that allocate concurrently and hand objects to each other through a queue.Queue (so
memory is freed by a thread other than the one that allocated it); and os.fork /
multiprocessing children that allocate after fork and report back through pipes.  Every
result is printed as a deterministic checksum that does not depend on thread scheduling, the
str hash seed or the allocator, so tests/programs/run.sh can compare the output of a run
under LD_PRELOAD with a plain run and with the expected output embedded in run.sh.
"""

import collections
import gc
import hashlib
import json
import multiprocessing
import os
import queue
import random
import sys
import threading
import weakref


def digest(data):
    """First 16 hex digits of the SHA-256 of a str or bytes value."""
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()[:16]


def out(label, *values):
    print(label + ":", *values)
    sys.stdout.flush()


def rng(seed):
    # random.Random(int).getrandbits is stable across CPython versions.
    return random.Random(seed)


# ---------------------------------------------------------------- dicts, lists and sets
def section_containers():
    r = rng(1)
    d = {}
    for i in range(200_000):
        d["k%d" % i] = (i, str(i * 7))
    for i in range(0, 200_000, 3):
        del d["k%d" % i]
    for i in range(1, 200_000, 5):
        key = "k%d" % i
        if key in d:
            d[key] = [i, "v" * (i % 17), {"n": i}]
    for i in range(200_000, 230_000):
        d["n%d" % i] = r.getrandbits(40)
    items = sorted((k, repr(v)) for k, v in d.items())
    out("dict", len(d), digest("\n".join("%s=%s" % kv for kv in items)))
    del items, d

    lst = [r.getrandbits(31) for _ in range(200_000)]
    nested = [[x, x + 1, str(x)] for x in lst[:60_000]]
    for i in range(0, 60_000, 7):
        nested[i].append(tuple(range(i % 13)))
    while len(lst) > 150_000:
        lst.pop()
    lst[1000:2000] = [-1] * 3000
    lst.extend(range(5000))
    del lst[::11]
    out("list", len(lst), sum(lst) % 1_000_000_007, digest(repr(nested[::997])))
    del nested

    s = set(lst)
    s2 = {x * 3 % 100_003 for x in range(120_000)}
    fs = frozenset(str(x) for x in range(0, 120_000, 3))
    inter = s & s2
    uni = s2 | set(range(150_000))
    s.difference_update(range(0, 1 << 31, 1 << 20))
    strs = {x for x in fs if x.endswith("7")}
    out("set", len(s), len(s2), len(inter), len(uni), len(strs),
        digest(",".join(sorted(strs))))


# ---------------------------------------------------------------- strings
def section_strings():
    r = rng(2)
    syll = ["ka", "lo", "mi", "re", "tu", "zan", "qui", "ox", "el", "pra"]
    words = []
    for _ in range(100_000):
        n = 1 + r.getrandbits(2)
        words.append("".join(syll[r.getrandbits(3) + r.getrandbits(1)] for _ in range(n)))
    text = " ".join(words)
    lines = []
    acc = ""
    for i, w in enumerate(words[:20_000]):
        acc += w
        if i % 50 == 49:
            lines.append(acc)
            acc = ""
    parts = text.split(" ")
    upper = text.upper().replace("KA", "<ka>")
    pieces = upper.split("<ka>")
    fmt = ["%05d:%s:%r" % (i, w, w[::-1]) for i, w in enumerate(words[:30_000])]
    joined = "\n".join(fmt)
    enc = joined.encode("utf-8")
    uni = "".join(chr(0x3b1 + (i % 24)) for i in range(100_000))
    out("strings", len(text), len(parts), len(pieces), len(lines), digest(upper),
        digest(enc), digest(uni.encode("utf-8")))
    return words


# ---------------------------------------------------------------- class instances
class Point:
    count = 0

    def __init__(self, x, y, tag):
        self.x = x
        self.y = y
        self.tag = tag
        self.next = None
        Point.count += 1


class Slotted:
    __slots__ = ("a", "b", "c")

    def __init__(self, a, b, c):
        self.a = a
        self.b = b
        self.c = c


def section_objects():
    head = None
    pts = []
    for i in range(80_000):
        p = Point(i, i * i % 1009, "p%d" % (i % 97))
        p.next = head
        head = p
        if i % 3 == 0:
            pts.append(p)
    total = 0
    n = 0
    node = head
    while node is not None:
        total += node.x * 3 + node.y
        n += 1
        node = node.next
    for p in pts[::2]:
        p.extra = {"sq": p.x * p.x, "name": p.tag * 2}
    extra = sum(p.extra["sq"] % 1000 for p in pts if hasattr(p, "extra"))
    slotted = [Slotted(i, str(i), (i,)) for i in range(60_000)]
    ssum = sum(s.a + len(s.b) + len(s.c) for s in slotted)
    out("objects", n, Point.count, total, extra, ssum)


# ---------------------------------------------------------------- json
def section_json():
    r = rng(3)
    records = []
    for i in range(15_000):
        records.append({
            "id": i,
            "name": "user-%06d" % r.getrandbits(20),
            "tags": ["t%d" % r.getrandbits(4) for _ in range(r.getrandbits(3))],
            "score": r.getrandbits(16) / 8.0,
            "active": bool(r.getrandbits(1)),
            "nested": {"a": [i, i + 1, None], "b": {"c": "x" * (i % 23)}},
        })
    doc = json.dumps({"records": records, "count": len(records)}, sort_keys=True)
    back = json.loads(doc)
    again = json.dumps(back["records"][::-1], separators=(",", ":"))
    pretty = json.dumps(back["records"][:1000], sort_keys=True, indent=1)
    same = back["records"] == records
    out("json", len(doc), len(again), len(pretty), same, digest(doc), digest(again),
        digest(pretty))


# ---------------------------------------------------------------- sorting
def section_sorting(words):
    r = rng(4)
    tuples = [(r.getrandbits(10), "s%d" % r.getrandbits(24), i) for i in range(100_000)]
    tuples.sort()
    by_name = sorted(tuples, key=lambda t: (t[1], -t[2]))
    ws = sorted(words, key=lambda w: (len(w), w), reverse=True)
    nums = [r.getrandbits(62) for _ in range(100_000)]
    nums.sort(reverse=True)
    out("sort", digest(repr(tuples[::1000])), digest(repr(by_name[::1000])),
        digest(" ".join(ws[::100])), nums[0] % 1_000_003, nums[-1] % 1_000_003)


# ---------------------------------------------------------------- Counter
def section_counter(words):
    c = collections.Counter(words)
    c.update(w[:2] for w in words)
    c2 = collections.Counter("".join(words[:30_000]))
    top = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    dd = collections.defaultdict(list)
    for i, w in enumerate(words):
        dd[len(w)].append(i)
    dq = collections.deque(maxlen=1000)
    for w in words:
        dq.append(w)
    od = collections.OrderedDict((w, i) for i, w in enumerate(words[:20_000]))
    for w in words[:3_000]:
        od.move_to_end(w, last=False)
    out("counter", len(c), sum(c.values()), top, sorted(c2.items())[:3],
        {k: len(v) for k, v in sorted(dd.items())}, len(dq), digest(",".join(od)))


# ---------------------------------------------------------------- bytes and bytearray
def section_bytes():
    ba = bytearray()
    for i in range(100_000):
        ba += (i * 2654435761 % 4294967296).to_bytes(4, "little")
        if i % 1000 == 999:
            ba.extend(b"\x00" * (i % 257))
    mv = memoryview(ba)
    chunks = [bytes(mv[i:i + 4096]) for i in range(0, len(ba), 4096)]
    mv.release()
    b = b""
    for i in range(3000):
        b += bytes([i % 256]) * (i % 50)
    del ba[1000:250_000]
    ba[0:0] = b"head" * 10_000
    big = bytes(8 << 20)  # one 8 MiB zeroed buffer (calloc-sized)
    grown = bytearray(16)
    for _ in range(16):
        grown = grown + grown  # doubles, up to 1 MiB
    out("bytes", len(ba), len(chunks), len(b), len(big), len(grown),
        digest(bytes(ba)), digest(b"".join(chunks)), digest(b))


# ---------------------------------------------------------------- garbage-collected cycles
class Cyclic:
    finalized = 0

    def __init__(self, i):
        self.i = i
        self.peer = None
        self.payload = [i] * (i % 8)

    def __del__(self):
        Cyclic.finalized += 1


def section_cycles():
    gc.collect()
    refs = []
    for i in range(30_000):
        a = Cyclic(i)
        b = Cyclic(i + 1)
        a.peer = b
        b.peer = a
        a.self_list = [a, b, {"back": a}]
        if i % 100 == 0:
            refs.append(weakref.ref(a))
    del a, b
    gc.collect()
    alive = sum(1 for w in refs if w() is not None)
    # A long cyclic chain plus a dict cycle.
    first = {"n": 0}
    cur = first
    for i in range(1, 30_000):
        nxt = {"n": i, "prev": cur}
        cur["next"] = nxt
        cur = nxt
    cur["next"] = first
    del first, cur, nxt
    gc.collect()
    out("cycles", Cyclic.finalized, alive, len(refs))


# ---------------------------------------------------------------- fork children
def child_work(seed):
    r = rng(seed)
    d = {}
    for i in range(20_000):
        d[r.getrandbits(32)] = ["c%d" % i] * (i % 5)
    return "%d:%s" % (len(d), digest(repr(sorted(d.items())[::500])))


def section_fork():
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rfd)
            msg = child_work(10).encode()
            os.write(wfd, msg)
            os.close(wfd)
            code = 0
        except BaseException:
            code = 3
        os._exit(code)
    os.close(wfd)
    data = b""
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        data += chunk
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    out("fork", code, data.decode())

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        results = pool.map(child_work, range(20, 26))
    out("multiprocessing", digest("|".join(results)), results[0])


# ---------------------------------------------------------------- threads and queue.Queue
def section_threads():
    n_producers, n_workers, per_producer = 4, 4, 3000
    work_q = queue.Queue(maxsize=256)
    done_q = queue.Queue()

    def producer(pid):
        r = rng(100 + pid)
        for j in range(per_producer):
            obj = {
                "from": pid,
                "seq": j,
                "data": [r.getrandbits(20) for _ in range(1 + j % 24)],
                "name": "item-%d-%d" % (pid, j),
            }
            work_q.put(obj)  # allocated here, freed by a worker thread

    def worker():
        local = []
        while True:
            obj = work_q.get()
            if obj is None:
                break
            data = sorted(obj["data"])
            text = ",".join(map(str, data)) + obj["name"]
            res = (obj["from"], obj["seq"], sum(data), digest(text))
            local.append(res)
            if len(local) >= 64:
                done_q.put(local)  # handed to the main thread in batches
                local = []
        if local:
            done_q.put(local)

    producers = [threading.Thread(target=producer, args=(p,)) for p in range(n_producers)]
    workers = [threading.Thread(target=worker) for _ in range(n_workers)]
    for t in workers + producers:
        t.start()
    for t in producers:
        t.join()
    for _ in workers:
        work_q.put(None)
    for t in workers:
        t.join()
    results = []
    while not done_q.empty():
        results.extend(done_q.get())
    results.sort()
    out("threads", len(results), sum(r[2] for r in results) % 1_000_000_007,
        digest(repr(results)))


def main():
    section_containers()
    words = section_strings()
    section_objects()
    section_json()
    section_sorting(words)
    section_counter(words)
    section_bytes()
    section_cycles()
    section_fork()  # before the threads, so no thread is alive at fork time
    section_threads()
    print("OK")


if __name__ == "__main__":
    main()
