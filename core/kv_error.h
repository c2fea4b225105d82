/* kv_error: one error record per operation, with the exit code it maps to.
 *
 * Library code never exits: it fills a kv_err and returns its code. Only
 * main() prints "kvtrace: error: <msg>" and exits with err.code.
 */
#ifndef KV_ERROR_H
#define KV_ERROR_H

#include <stddef.h>

/* enum kv_status and kv_err: public (plug-ins fill it), include/kvtrace/error.h */
#include "kvtrace/error.h"

/* Records the first error only (later calls keep the original cause) and
 * returns `code`, so callers can write `return kv_fail(err, KV_EINPUT, ...)`. */
int kv_fail(kv_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void kv_err_clear(kv_err *err);

/* A plug-in's hook returned rc != 0 (C or Python: docs/plugins.md): whatever the hook left in err
 * (its message read within the buffer, up to the first line break; "returned N" when it wrote none;
 * its code, set or not, ignored) becomes one line "WHO: HOOK failed: MESSAGE" with code KV_EFAIL,
 * so that any failure of a plug-in is exit 1 with its name and hook. Returns KV_EFAIL. */
int kv_fail_hook(kv_err *err, int rc, const char *who, const char *hook);

/* calloc(n, size) with overflow check; on failure records a KV_EFAIL naming `what`. */
void *kv_calloc(size_t n, size_t size, const char *what, kv_err *err);

/* Assertion that is never compiled out (NDEBUG does not remove it). */
#define KV_ASSERT(cond)                                                      \
    do {                                                                     \
        if (!(cond)) kv_assert_fail(#cond, __FILE__, __LINE__);              \
    } while (0)

_Noreturn void kv_assert_fail(const char *cond, const char *file, int line);

#endif
