/* The table of backends (backend.h). */
#include "model/backend.h"

#include <stdio.h>
#include <string.h>

static const backend_iface *const ALL[] = {&BACKEND_CPU, &BACKEND_CUDA, NULL};

const backend_iface *const *backend_all(void)
{
    return ALL;
}

const backend_iface *backend_or_default(const backend_iface *be)
{
    return be ? be : backend_all()[0];
}

const backend_iface *backend_find(const char *name)
{
    for (const backend_iface *const *b = ALL; *b; b++)
        if (strcmp((*b)->name, name) == 0) return *b;
    return NULL;
}

void backend_names(char *buf, size_t cap)
{
    size_t n = 0, len = 0;
    while (ALL[n]) n++;
    buf[0] = '\0';
    for (size_t i = 0; i < n && len < cap; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
        int w = snprintf(buf + len, cap - len, "%s%s", sep, ALL[i]->name);
        len += w > 0 ? (size_t)w : 0;
    }
}

int backend_open(const backend_iface *b, const backend_request *req, void **ctx, kv_err *err)
{
    *ctx = NULL;
    int rc = b->check ? b->check(req, err) : KV_OK;
    return rc || !b->open ? rc : b->open(req, ctx, err);
}

void backend_close(const backend_iface *b, void *ctx)
{
    if (ctx && b->close) b->close(ctx);
}
