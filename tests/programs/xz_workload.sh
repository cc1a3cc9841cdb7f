#!/usr/bin/env bash
# xz with two threads: liblzma starts its threads with every signal blocked, so a trap on a
# page NightWatch samples killed the process until the masks stopped blocking SIGSEGV.
# Compresses 24 MB of generated text into blocks and decompresses them in parallel.
set -euo pipefail
awk 'BEGIN { srand(7); for (i = 0; i < 600000; i++) { w = ""; n = 3 + int(rand() * 9); for (j = 0; j < n; j++) w = w sprintf("%c", 97 + int(rand() * 26)); printf "%d\t%.6f\t%s\n", int(rand() * 2000000000) - 1000000000, rand(), w } }' >data.txt
md5sum <data.txt
xz -T2 -1 --block-size=1MiB -c data.txt >data.xz
for i in 1 2 3; do xz -T2 -dc data.xz | md5sum; done
echo ok
