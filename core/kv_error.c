#include "kv_error.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kv_fail(kv_err *err, int code, const char *fmt, ...)
{
    if (err && err->code == KV_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        /* One line whatever a file holds: messages echo attribute values and
         * paths, so control characters (\n, \r, ESC, ...) become '?'. */
        for (char *p = err->msg; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
        err->code = code;
    }
    return code;
}

int kv_fail_hook(kv_err *err, int rc, const char *who, const char *hook)
{
    char said[sizeof err->msg];
    size_t n = 0;
    while (n < sizeof err->msg - 1 && err->msg[n] && err->msg[n] != '\n' && err->msg[n] != '\r') n++;
    if (n) memcpy(said, err->msg, n);
    said[n] = '\0';
    if (!n) snprintf(said, sizeof said, "returned %d without a message", rc);
    err->code = KV_OK;
    const size_t w = strlen(who);
    if (strncmp(said, who, w) == 0) /* the hook named itself already (a Python policy's message) */
        return kv_fail(err, KV_EFAIL, "%s: %s failed%s", who, hook, said + w);
    return kv_fail(err, KV_EFAIL, "%s: %s failed: %s", who, hook, said);
}

void kv_err_clear(kv_err *err)
{
    err->code = KV_OK;
    err->msg[0] = '\0';
}

void *kv_calloc(size_t n, size_t size, const char *what, kv_err *err)
{
    if (size != 0 && n > SIZE_MAX / size) {
        kv_fail(err, KV_EFAIL, "%s: size overflow (%zu x %zu bytes)", what, n, size);
        return NULL;
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) kv_fail(err, KV_EFAIL, "%s: out of memory (%zu bytes)", what, n * size);
    return p;
}

_Noreturn void kv_assert_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "kvtrace: internal error: assertion '%s' failed at %s:%d\n", cond, file, line);
    abort();
}
