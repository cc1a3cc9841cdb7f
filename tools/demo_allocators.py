#!/usr/bin/env python3
"""Print the allocators `make demo` compares: glibc and chromalloc (both layouts), plus the
peers among jemalloc, mimalloc and tcmalloc that are installed (the demo installs nothing)."""
import os

LIBDIR = "/usr/lib/x86_64-linux-gnu"
PEERS = {"jemalloc": "libjemalloc.so.2", "mimalloc": "libmimalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4"}
names = ["glibc"] + [n for n, lib in PEERS.items() if os.path.exists(os.path.join(LIBDIR, lib))]
print(",".join(names + ["chromalloc", "chromalloc-ciu"]))
