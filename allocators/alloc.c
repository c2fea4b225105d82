/* alloc: allocator specs parsed against the registry (alloc_registry.c),
 * labels, and the checks shared by every allocator (alloc.h). */
#include "allocators/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"

/* The allocator named by spec's first nlen bytes: the registry's, then the user table's; NULL: none. */
static const alloc_iface *find(const alloc_iface *const *user, const char *spec, size_t nlen)
{
    for (const alloc_iface *const *a = alloc_all(); *a; a++)
        if (strlen((*a)->name) == nlen && strncmp((*a)->name, spec, nlen) == 0) return *a;
    for (const alloc_iface *const *a = user; a && *a; a++)
        if (strlen((*a)->name) == nlen && strncmp((*a)->name, spec, nlen) == 0) return *a;
    return NULL;
}

int alloc_parse_in(const alloc_iface *const *user, const char *spec, alloc_config *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    const size_t nlen = strcspn(spec, ":");
    if (!(out->iface = find(user, spec, nlen))) {
        char known[512];
        size_t used = 0;
        for (int pass = 0; pass < 2; pass++)
            for (const alloc_iface *const *a = pass ? user : alloc_all(); a && *a && used < sizeof known; a++)
                used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", (*a)->name);
        return kv_fail(err, KV_EUSAGE, "unknown allocator '%.*s' (known: %s)", (int)nlen, spec, known);
    }
    out->n = policy_params_count(out->iface->params);
    return policy_params_parse(out->iface->name, out->iface->params, spec, spec + nlen, out->num, out->choice,
                               out->canonical, sizeof out->canonical, err);
}

/* "name[:key=value...]"; unknown names or parameters are KV_EUSAGE naming what is valid. */
static int alloc_parse(const char *spec, alloc_config *out, kv_err *err)
{
    return alloc_parse_in(NULL, spec, out, err);
}

void alloc_label(const alloc_config *ac, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s", ac->iface->name, ac->canonical[0] ? ":" : "", ac->canonical);
}

int alloc_parse_list_in(const alloc_iface *const *user, const char *verb, const char *list, alloc_config *out,
                        int max, int *n, kv_err *err)
{
    cli_list l;
    *n = 0;
    int rc = cli_list_split(verb, "--allocators", list, max, &l, err);
    for (int i = 0; !rc && i < l.n; i++) {
        if ((rc = alloc_parse_in(user, l.item[i], &out[i], err))) return rc;
        for (int j = 0; !rc && j < i; j++)   /* one configuration, two spellings: refused before any work */
            if (out[j].iface == out[i].iface && strcmp(out[j].canonical, out[i].canonical) == 0) {
                char label[sizeof out[i].canonical + 64];
                alloc_label(&out[i], label, sizeof label);
                rc = cli_list_repeat(verb, "--allocators", &l, j, i, "the same configuration", label, err);
            }
    }
    if (!rc) *n = l.n;
    return rc;
}

bool alloc_is_uniform(const alloc_config *ac)
{
    return strcmp(ac->iface->name, "uniform") == 0;
}

int alloc_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t layer, int64_t *cap,
                     kv_err *err)
{
    if (ac->iface->kind == ALLOC_STATIC) return ac->iface->capacities(ac, N, L, K, layer, cap, err);
    for (int64_t g = 0; g < K; g++) cap[g] = N;
    return KV_OK;
}

int alloc_check(const alloc_config *ac, int64_t N, int64_t L, int64_t K, kv_err *err)
{
    const int64_t S = ac->iface->kind == ALLOC_DYNAMIC_MODEL ? L * K : K;
    if (ac->iface->kind != ALLOC_STATIC)   /* alloc_scope_step's fixed tables */
        return S > ALLOC_MAX_STREAMS || K > 256
                   ? kv_fail(err, KV_EUSAGE, "%s: %lld streams in one scope is beyond what a dynamic allocator "
                             "handles (%d, and 256 kv heads per layer)", ac->iface->name, (long long)S,
                             ALLOC_MAX_STREAMS) : KV_OK;
    int64_t *cap = kv_calloc((size_t)K, sizeof *cap, "allocator", err);
    if (!cap) return err->code;
    int rc = KV_OK;
    for (int64_t l = 0; !rc && l < L; l++) rc = ac->iface->capacities(ac, N, L, K, l, cap, err);
    free(cap);
    return rc;
}

int alloc_buf_init(alloc_buf *b, int64_t cap, kv_err *err)
{
    memset(b, 0, sizeof *b);
    if (!(b->order = kv_calloc((size_t)cap, sizeof *b->order, "allocator", err)) ||
        !(b->scratch = kv_calloc((size_t)cap, sizeof *b->scratch, "allocator", err)) ||
        !(b->weight = kv_calloc(ALLOC_MAX_STREAMS, sizeof *b->weight, "allocator", err)) ||
        !(b->work = kv_calloc((size_t)cap * 3, sizeof *b->work, "allocator", err)) ||
        !(b->row = kv_calloc((size_t)cap, sizeof *b->row, "allocator", err))) {
        alloc_buf_free(b);
        return err->code;
    }
    b->cap = cap;
    return KV_OK;
}

void alloc_buf_free(alloc_buf *b)
{
    free(b->order), free(b->scratch), free(b->weight), free(b->work), free(b->row);
    memset(b, 0, sizeof *b);
}

/* Every stream's capacity when streams hold ng kv heads each: the mean of
 * its heads' capacities, by largest remainder over the model's L·K/ng
 * streams (ties to the lower stream), so the total stays L·K·N. */
static int mean_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t ng, int64_t layer,
                           int64_t *cap, kv_err *err)
{
    const int64_t per = K / ng, S = L * per;
    int64_t *head = kv_calloc((size_t)K, sizeof *head, "allocator", err);
    int64_t *sum = head ? kv_calloc((size_t)S, sizeof *sum, "allocator", err) : NULL;
    int rc = sum ? KV_OK : err->code;
    int64_t floors = 0;
    for (int64_t l = 0; !rc && l < L; l++) {
        rc = ac->iface->capacities(ac, N, L, K, l, head, err);
        for (int64_t g = 0; !rc && g < K; g++) sum[l * per + g / ng] += head[g];
    }
    for (int64_t x = 0; !rc && x < S; x++) floors += sum[x] / ng;
    for (int64_t x = layer * per; !rc && x < (layer + 1) * per; x++) {
        int64_t ahead = 0;   /* streams whose remainder ranks before x's */
        for (int64_t y = 0; y < S; y++)
            ahead += sum[y] % ng > sum[x] % ng || (sum[y] % ng == sum[x] % ng && y < x);
        cap[x - layer * per] = sum[x] / ng + (ahead < S * N - floors);
    }
    free(head), free(sum);
    return rc;
}

int alloc_stream_capacities(const alloc_config *ac, int64_t N, int64_t L, int64_t K, int64_t ng, int64_t layer,
                            int64_t *cap, kv_err *err)
{
    if (ng > 1 && ac->iface->kind == ALLOC_STATIC && ac->iface->per_head)
        return mean_capacities(ac, N, L, K, ng, layer, cap, err);
    int64_t *head = kv_calloc((size_t)K, sizeof *head, "allocator", err);
    int rc = head ? alloc_capacities(ac, N, L, K, layer, head, err) : err->code;
    for (int64_t x = 0; !rc && x < K / ng; x++) cap[x] = head[x * ng];   /* the heads of a stream are alike */
    free(head);
    return rc;
}

int alloc_default(alloc_config *out, kv_err *err)
{
    return alloc_parse("uniform", out, err);
}

int alloc_streaming_policy(const alloc_config *ac, policy_config *out, kv_err *err)
{
    char spec[64];
    snprintf(spec, sizeof spec, "streaming:sinks=%lld", (long long)alloc_num(ac, "sinks"));
    return policy_parse(spec, out, err);
}
