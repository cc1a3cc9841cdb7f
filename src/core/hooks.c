/* The hook table (see hooks.h).  Installed once by a layer at start-up, read on slow paths. */
#include "internal.h"
#include "hooks.h"

const ca_hooks_t* _ca_hooks;

void _ca_hooks_install(const ca_hooks_t* hooks) {
  __atomic_store_n(&_ca_hooks, hooks, __ATOMIC_RELEASE);
}
