/* A user program built against an installed chromalloc (pkg-config or CMake). */
#include <chromalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char* p = malloc(100);
  strcpy(p, "hello");
  char json[1 << 16];
  chromalloc_stats_json(json, sizeof json);
  printf("%s from chromalloc %s: %s\n", p, chromalloc_version(), strstr(json, "\"size_classes\"") ? "stats ok" : "no stats");
  free(p);
  return 0;
}
