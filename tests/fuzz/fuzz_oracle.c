/* fuzz_oracle.c: is the model a valid trace?
 *
 * Written from docs/trace.md and trace.h, not from core/: it shares no code with
 * the validation layer it judges. It reads only the model (never the HDF5
 * file) and says valid or invalid; when valid it also says what the
 * attributes hold and which datasets a reader must find (`expect`), and when
 * invalid, why, in fz_oracle_ctx (printed with every failure report).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_model.h"

char fz_oracle_ctx[4096];

static bool why(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool why(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fz_oracle_ctx, sizeof fz_oracle_ctx, fmt, ap);
    va_end(ap);
    return false;
}

/* ---- attributes -------------------------------------------------------- */

static bool o_int(const model *m, attr_id id, int n, int64_t *out)
{
    const amodel *a = &m->a[id];
    if (!a->present) return why("attribute %s missing", FZ_ATTR_NAME[id]);
    if (fz_kind_of(a->et) != K_INT)
        return why("attribute %s is not an integer (type %d)", FZ_ATTR_NAME[id], a->et);
    if (a->n != n) return why("attribute %s has %d elements", FZ_ATTR_NAME[id], a->n);
    for (int i = 0; i < n; i++) fz_decode_int(a->et, a->raw[i], &out[i]); /* > INT64_MAX reads as INT64_MAX */
    return true;
}

static bool o_range(const char *name, int64_t v, int64_t lo, int64_t hi)
{
    if (v < lo || v > hi) return why("%s = %lld outside [%lld, %lld]", name, (long long)v, (long long)lo, (long long)hi);
    return true;
}

/* What a reader sees of a string attribute (NUL ends it; SPACEPAD trims). */
static bool o_str(const model *m, attr_id id, size_t cap, char *out)
{
    const amodel *a = &m->a[id];
    if (!a->present) return why("attribute %s missing", FZ_ATTR_NAME[id]);
    if (a->et != ET_STR) return why("attribute %s is not a string", FZ_ATTR_NAME[id]);
    if (a->n != 1) return why("attribute %s has %d elements", FZ_ATTR_NAME[id], a->n);
    size_t len = a->slen;
    if ((a->sflavor & ~S_FIX_UTF8) == S_FIX_SPACEPAD)
        while (len && a->s[len - 1] == ' ') len--;
    memcpy(out, a->s, len);
    out[len] = '\0';
    if (strlen(out) >= cap) return why("attribute %s too long (%zu)", FZ_ATTR_NAME[id], strlen(out));
    return true;
}

static bool o_word(const char *name, const char *v, const char *const *ok)
{
    for (; *ok; ok++)
        if (strcmp(v, *ok) == 0) return true;
    return why("%s = '%s' not allowed", name, v);
}

/* ---- datasets ---------------------------------------------------------- */

static bool elem_fits(const expect *e, int which, etype et)
{
    okind k = fz_kind_of(et);
    switch (which) {
    case TRACE_TOKENS:
    case TRACE_EVICT_RETAINED:
    case TRACE_EVICT_STEP_END: return k == K_INT;
    case TRACE_KEYS:
    case TRACE_VALUES:
    case TRACE_QUERIES: return k == (e->f16 ? K_F16 : K_F32);
    default: return k == K_F16 || k == K_F32 || k == K_F64;
    }
}

/* Shape docs/trace.md#datasets wants from the attributes (-1: free axis). */
static int want_dims(const expect *e, int which, int64_t w[4])
{
    const int64_t L = e->L, H = e->H, K = e->K, D = e->D, T = e->T;
    int64_t s[NDS][5] = {
        [TRACE_TOKENS] = {1, T},
        [TRACE_KEYS] = {4, L, K, T, D},
        [TRACE_VALUES] = {4, L, K, T, D},
        [TRACE_QUERIES] = {4, L, H, T, D},
        [TRACE_COLSUM] = {3, L, H, T},
        [TRACE_ATTN_FULL] = {4, L, H, T, T},
        [TRACE_LOGITS] = {2, T, e->V},
        [TRACE_LOGPROBS] = {1, T},
        [TRACE_EVICT_RETAINED] = {4, -1, L, K, -1},
        [TRACE_EVICT_STEP_END] = {1, -1},
        [TRACE_KVZIP] = {3, L, H, T},
        [TRACE_ATTN_OUT] = {4, L, H, T, D},
        [TRACE_ATTN_LSE] = {3, L, H, T},
        [TRACE_ATTN_MAX] = {3, L, H, T},
    };
    memcpy(w, &s[which][1], 4 * sizeof(int64_t));
    return (int)s[which][0];
}

/* Datasets against the attributes: presence, mode, kind, element type,
 * shape, the eviction pair, and the token ids. */
static bool o_datasets(const model *m, expect *e)
{
    for (int i = 0; i < NDS; i++) {
        const dmodel *d = &m->d[i];
        bool required = i == TRACE_TOKENS || i == TRACE_KEYS || i == TRACE_VALUES;
        e->present[i] = fz_visible(m, i);
        if (!e->present[i]) {
            if (required) return why("%s missing", FZ_DS_PATH[i]);
            continue;
        }
        if ((i == TRACE_COLSUM || i == TRACE_KVZIP || i == TRACE_ATTN_OUT || i == TRACE_ATTN_LSE ||
             i == TRACE_ATTN_MAX) && e->evict)
            return why("%s in evict mode", FZ_DS_PATH[i]);
        if ((i == TRACE_EVICT_RETAINED || i == TRACE_EVICT_STEP_END) && !e->evict)
            return why("%s in full mode", FZ_DS_PATH[i]);
        if (d->obj != OBJ_DSET) return why("%s is not a dataset", FZ_DS_PATH[i]);
        if (!elem_fits(e, i, d->et)) return why("%s has element type %d", FZ_DS_PATH[i], d->et);
        int64_t w[4];
        int rank = want_dims(e, i, w);
        if (d->rank != rank) return why("%s has rank %d", FZ_DS_PATH[i], d->rank);
        for (int a = 0; a < rank; a++)
            if (w[a] >= 0 && (int64_t)d->dims[a] != w[a])
                return why("%s axis %d is %llu, want %lld", FZ_DS_PATH[i], a, (unsigned long long)d->dims[a],
                           (long long)w[a]);
    }
    if (e->present[TRACE_EVICT_RETAINED] != e->present[TRACE_EVICT_STEP_END]) return why("evict pair incomplete");
    if (e->present[TRACE_EVICT_RETAINED] &&
        (m->d[TRACE_EVICT_RETAINED].dims[0] != m->d[TRACE_EVICT_STEP_END].dims[0] ||
         m->d[TRACE_EVICT_RETAINED].dims[3] < 1))
        return why("evict S mismatch or N < 1");
    if (e->present[TRACE_ATTN_OUT] != e->present[TRACE_ATTN_LSE]) return why("reference pair incomplete");
    if (e->present[TRACE_ATTN_MAX] && !e->present[TRACE_ATTN_LSE]) return why("row maxima without lse");
    const dmodel *tok = &m->d[TRACE_TOKENS];
    if (tok->unwritten && tok->fill_never && tok->nelem) return why("/tokens never written, no fill value");
    for (size_t i = 0; i < tok->nelem; i++) {
        int64_t v;
        bool fits = fz_decode_int(tok->et, tok->raw + i * fz_esize(tok->et), &v);
        if (!fits || v < 0 || v >= e->V) return why("token %zu = %lld outside [0, %lld)", i, (long long)v, (long long)e->V);
    }
    return true;
}

/* ---- the whole file ---------------------------------------------------- */

bool fz_oracle(const model *m, expect *e)
{
    static const char *const ARCHS[] = {"llama", "qwen2", "qwen3", "mistral", NULL};
    static const char *const ROPES[] = {"interleaved", "neox", NULL};
    static const char *const MODES[] = {"full", "evict", NULL};
    static const char *const STORES[] = {"f32", "f16", NULL};
    const int64_t TMAX = (int64_t)1 << 31;
    memset(e, 0, sizeof *e);
    int64_t schema[2];
    if (!o_int(m, A_SCHEMA, 2, schema)) return false;
    if (schema[0] != 1) return why("schema major %lld", (long long)schema[0]);
    e->smajor = schema[0], e->sminor = schema[1];
    if (!o_int(m, A_LAYERS, 1, &e->L) || !o_int(m, A_HEADS, 1, &e->H) || !o_int(m, A_KV_HEADS, 1, &e->K) ||
        !o_int(m, A_HEAD_DIM, 1, &e->D) || !o_int(m, A_TOKENS, 1, &e->T) || !o_int(m, A_PROMPT, 1, &e->prompt) ||
        !o_int(m, A_VOCAB, 1, &e->V) || !o_int(m, A_CHUNK, 1, &e->chunk))
        return false;
    if (!o_str(m, A_CREATOR, 128, e->creator) || !o_str(m, A_MODEL, 256, e->model_name) ||
        !o_str(m, A_ARCH, 16, e->arch) || !o_str(m, A_ROPE_STYLE, 16, e->rope) ||
        !o_str(m, A_MODE, 8, e->mode) || !o_str(m, A_STORAGE, 8, e->storage))
        return false;
    const amodel *th = &m->a[A_THETA];
    if (!th->present || th->n != 1) return why("rope_theta missing or not one element");
    okind tk = fz_kind_of(th->et);
    if (tk != K_INT && tk != K_F16 && tk != K_F32 && tk != K_F64) return why("rope_theta not a number");
    e->theta = fz_decode_f64(th->et, th->raw[0]);
    if (!o_word("storage_dtype", e->storage, STORES)) return false;
    e->f16 = strcmp(e->storage, "f16") == 0;
    if (!o_range("n_layers", e->L, 1, 1024) || !o_range("n_heads", e->H, 1, 1024) ||
        !o_range("n_kv_heads", e->K, 1, e->H) || !o_range("head_dim", e->D, 1, 4096) ||
        !o_range("vocab_size", e->V, 1, 1 << 24) || !o_range("capture_chunk", e->chunk, 0, TMAX) ||
        !o_range("n_tokens", e->T, 1, TMAX) || !o_range("prompt_len", e->prompt, 1, e->T))
        return false;
    if (e->H % e->K) return why("H %% K != 0");
    if (!(isfinite(e->theta) && e->theta > 0)) return why("rope_theta = %g", e->theta);
    if (!o_word("architecture", e->arch, ARCHS) || !o_word("rope_style", e->rope, ROPES) ||
        !o_word("capture_mode", e->mode, MODES))
        return false;
    e->evict = strcmp(e->mode, "evict") == 0;
    if (e->evict) {
        if (!o_str(m, A_EV_POLICY, 64, e->policy) || !o_str(m, A_EV_PARAMS, 256, e->params) ||
            !o_int(m, A_EV_BUDGET, 1, &e->budget) || !o_int(m, A_EV_CHUNK, 1, &e->evchunk))
            return false;
        if (!o_range("evict_budget", e->budget, 1, TMAX) || !o_range("evict_chunk", e->evchunk, 1, TMAX))
            return false;
        if (!e->policy[0]) return why("evict_policy empty");
    }
    if (!o_datasets(m, e)) return false;
    snprintf(fz_oracle_ctx, sizeof fz_oracle_ctx, "valid (L=%lld H=%lld K=%lld D=%lld T=%lld V=%lld %s %s)",
             (long long)e->L, (long long)e->H, (long long)e->K, (long long)e->D, (long long)e->T,
             (long long)e->V, e->storage, e->mode);
    return true;
}
