/* alloc_num: an allocator's numeric parameter by key (alloc.h). Its own
 * file: the allocators call it, and alloc.c calls the allocators. */
#include "allocators/alloc.h"

#include <string.h>

double alloc_num(const alloc_config *ac, const char *key)
{
    int i = policy_params_index(ac->iface->params, key, strlen(key));
    KV_ASSERT(i >= 0 && ac->iface->params[i].kind == PARAM_NUMBER);
    return ac->num[i];
}
