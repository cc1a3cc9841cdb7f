#!/usr/bin/env bash
# gcc under the allocator: the driver, cc1 (a big C++ program with its own SIGSEGV handler,
# whose stack a context scan once faulted in), as and ld.  Compiles five of chromalloc's own
# sources to assembly (their checksums go to stderr: the same in both runs, not in the expected
# output, as they depend on gcc's version), then builds and runs a small program (stdout).
# Usage: cc_workload.sh REPO_ROOT
set -euo pipefail
root=$1
for f in core/heap.c monitor/context.c monitor/monitor.c color/calibrate.c policy/nightwatch.c; do
  gcc -O2 -std=gnu11 -w -I"$root/include" -S "$root/src/$f" -o "$(basename "$f" .c).s"
  echo "$f $(sha256sum <"$(basename "$f" .c).s" | cut -c1-16)" >&2
done
cat >prog.c <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct node { struct node* next; unsigned key; char name[24]; };
int main(void) {
  struct node* head = NULL;
  unsigned long sum = 0;
  for (unsigned i = 0; i < 200000; i++) {
    struct node* n = malloc(sizeof *n);
    n->key = i * 2654435761u;
    snprintf(n->name, sizeof n->name, "node-%u", i);
    n->next = head;
    head = n;
  }
  for (struct node* n = head; n; n = n->next) sum += n->key % 1000 + strlen(n->name);
  while (head) { struct node* n = head->next; free(head); head = n; }
  printf("nodes 200000 sum %lu\n", sum);
  return 0;
}
C
gcc -O2 -o prog prog.c
./prog
echo ok
