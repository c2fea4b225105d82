/* alloc_registry: the one table of budget allocators, in the order
 * `kvtrace policies` lists them. Adding an allocator = one file
 * allocators/alloc_NAME.c defining `const alloc_iface alloc_NAME`, and one
 * line X(NAME) in ALLOCATORS below. */
#include "allocators/alloc.h"

#define ALLOCATORS(X) \
    X(uniform)        \
    X(pyramid)        \
    X(adakv)          \
    X(headkv)         \
    X(duo)            \
    X(cake)           \
    X(global)

#define DECLARE(name) extern const alloc_iface alloc_##name;
ALLOCATORS(DECLARE)
#undef DECLARE

#define ENTRY(name) &alloc_##name,
static const alloc_iface *const REGISTRY[] = {ALLOCATORS(ENTRY) NULL};
#undef ENTRY

const alloc_iface *const *alloc_all(void) { return REGISTRY; }
