#!/bin/bash
# Git workload for chromalloc's real-program tests, run by tests/programs/run.sh in an empty
# directory with HOME pointing into the test's temporary directory, GIT_CONFIG_NOSYSTEM=1 and
# a clean environment.  Git allocates for every object it hashes, compresses, diffs and packs,
# runs many short-lived processes (all of which inherit LD_PRELOAD) and uses threads in
# pack-objects, index-pack and fsck, so building a repository of a few hundred files of
# different sizes, making several commits with fixed identities and dates, branching and
# merging, printing the log and diffs, repacking with `git gc`, verifying everything with
# `git fsck --full` and cloning over the pack protocol checks the allocator under a real,
# multi-process program.  With fixed names, emails and dates every commit hash is
# deterministic, so the output is compared with a plain run and with expected values.
set -euo pipefail

export GIT_AUTHOR_NAME="Chroma Tester" GIT_AUTHOR_EMAIL="tester@chromalloc.invalid"
export GIT_COMMITTER_NAME="Chroma Committer" GIT_COMMITTER_EMAIL="committer@chromalloc.invalid"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 GIT_PAGER=cat
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY 2>/dev/null || true

# set_date "YYYY-MM-DD HH:MM:SS": the author and committer date of what follows.
set_date() {
  export GIT_AUTHOR_DATE="$1 +0000" GIT_COMMITTER_DATE="$1 +0000"
}

# gen SEED COUNT DIR...: writes COUNT files spread over the directories, with sizes from a few
# bytes to ~40 KB, from a Park-Miller generator (products stay below 2^53, so any awk agrees).
gen() {
  local seed=$1 count=$2
  shift 2
  mkdir -p "$@"
  awk -v seed="$seed" -v count="$count" -v dirs="$*" '
    function rnd(n) { state = (state * 16807) % 2147483647; return state % n }
    BEGIN {
      ndirs = split(dirs, d, " ")
      nw = split("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi " \
                 "omicron pi rho sigma tau upsilon phi chi psi omega malloc free realloc " \
                 "span segment page color heap arena", w, " ")
      state = seed + 1
      for (i = 0; i < count; i++) {
        f = sprintf("%s/file-%d-%03d.txt", d[1 + i % ndirs], seed, i)
        lines = 1 + rnd(3) * rnd(12) * rnd(25)
        for (l = 0; l < lines; l++) {
          s = sprintf("%05d", l)
          n = 1 + rnd(12)
          for (k = 0; k < n; k++) s = s " " w[1 + rnd(nw)]
          print s > f
        }
        close(f)
      }
    }'
}

# big FILE LINES: one large, highly repetitive file (delta and zlib work).
big() {
  awk -v lines="$2" 'BEGIN { for (i = 0; i < lines; i++) printf "%08d the quick brown fox %d jumps over %d lazy dogs\n", i, i % 97, i % 13 }' > "$1"
}

hash() { git hash-object --stdin; }

git init -q -b main repo
cd repo
git config gc.auto 0
git config gc.autoDetach false
git config maintenance.auto false
git config core.abbrev 12
git config diff.renames true
git config merge.conflictStyle merge

# Commit 1: ~300 files in 6 directories plus a ~1 MB file.
set_date "2024-01-01 10:00:00"
gen 1 300 src/core src/index src/color docs tests/unit tests/data
mkdir -p data
big data/big.txt 20000
printf 'chromalloc test repository\n' > README
git add -A
git commit -q -m "initial import"
c1=$(git rev-parse HEAD)

# Commit 2: edit 60 files, append to 40, add 30.
set_date "2024-01-02 11:30:00"
mapfile -t files < <(git ls-files src docs tests | sort)
sed -i -e 's/alpha/ALPHA/g' -e 's/ omega$/ omega!/' "${files[@]:0:60}"
for f in "${files[@]:100:40}"; do printf 'appended to %s\n' "$f" >> "$f"; done
gen 2 30 src/api tests/data
git add -A
git commit -q -m "edit, append and add files"
c2=$(git rev-parse HEAD)

# Commit 3: rename 10 files, delete 10.
set_date "2024-01-03 09:15:00"
mkdir -p src/moved
for f in "${files[@]:150:10}"; do git mv "$f" "src/moved/$(basename "$f" .txt).md"; done
git rm -q "${files[@]:200:10}"
git commit -q -m "rename and delete"
c3=$(git rev-parse HEAD)

# A feature branch that touches only docs/ and adds files, two commits.
git checkout -q -b feature
set_date "2024-01-04 14:00:00"
sed -i 's/beta/BETA/g' docs/*.txt
git commit -q -a -m "feature: docs in capitals"
set_date "2024-01-04 15:00:00"
gen 3 25 docs/feature
git add -A
git commit -q -m "feature: new documents"

# Meanwhile main changes only src/core and the big file.
git checkout -q main
set_date "2024-01-05 08:00:00"
sed -i 's/gamma/GAMMA/g' src/core/*.txt
big data/big.txt 20500
git commit -q -a -m "main: core changes"

set_date "2024-01-06 12:00:00"
git merge -q --no-ff -m "Merge branch 'feature'" feature
set_date "2024-01-07 12:00:00"
printf 'release notes\n' > NOTES
git add NOTES
git commit -q -m "notes"
git tag -a -m "version 1" v1

echo "== log"
git log --oneline
echo "== graph"
git log --graph --format='%h %an %ad %s' --date=iso-strict main
echo "== counts"
echo "commits $(git rev-list --count HEAD) all-objects $(git rev-list --all --objects | wc -l)"
echo "files $(git ls-files | wc -l) head $(git rev-parse HEAD) tree $(git rev-parse 'HEAD^{tree}')"
echo "tag $(git rev-parse v1)"
echo "== diff --stat c1 c2 (tail)"
git diff --stat "$c1" "$c2" | tail -n 5
echo "== diff --stat c2 c3"
git diff --stat -M "$c2" "$c3"
echo "== diff --shortstat c1 HEAD"
git diff --shortstat "$c1" HEAD
echo "== content checksums"
echo "patch $(git diff "$c1" HEAD | hash)"
echo "blame $(git blame -s -l src/core/file-1-000.txt | hash)"
echo "grep $(git grep -c GAMMA HEAD -- src | hash)"
echo "archive $(git archive --format=tar v1 | hash)"
echo "cat-file $(git cat-file --batch-all-objects --batch-check | sort | hash)"

echo "== gc"
git gc -q --prune=now
git count-objects -v | grep -E '^(count|in-pack|packs|garbage):'
echo "== fsck"
git fsck --full --strict --no-progress
echo "fsck ok"

echo "== clone"
cd ..
git clone -q --no-local repo clone
git -C clone fsck --full --no-progress
echo "clone head $(git -C clone rev-parse HEAD) files $(git -C clone ls-files | wc -l)"
echo "clone log $(git -C clone log --format='%H %s' | hash)"
