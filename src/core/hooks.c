/* The hook table (see hooks.h).  Installed once by a layer at start-up, read on slow paths. */
#include "internal.h"
#include "hooks.h"

const ca_hooks_t*  _ca_hooks;
const ca_policy_t* _ca_policy;

void _ca_hooks_install(const ca_hooks_t* hooks) {
  __atomic_store_n(&_ca_hooks, hooks, __ATOMIC_RELEASE);
}

void _ca_policy_install(const ca_policy_t* policy) {
  __atomic_store_n(&_ca_policy, policy, __ATOMIC_RELEASE);
}
