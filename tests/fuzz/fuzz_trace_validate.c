/* fuzz_trace_validate: a structure-aware libFuzzer harness for the trace
 * validation layer (trace_open_hid, trace_read_*, trace_describe).
 *
 * The input bytes are a sequence of decisions (fuzz_input.c). A header picks
 * a well-formed small trace (L, H, K, D <= 6, T <= 40, f32 or f16 storage,
 * full or evict mode, which optional datasets exist); every following group
 * of bytes is one mutation of a *model* of the file (fuzz_model.c):
 * attributes (deleted, re-valued, re-typed, turned into strings/arrays/null
 * dataspaces), datasets (absent, replaced by a group, another shape, rank or
 * element type, chunking and filters, unwritten with a fill value) and single
 * values (NaN, inf, negative, random bits, token ids outside the vocabulary).
 * Missing bytes read as 0, and an empty input is "no mutation": a valid trace.
 *
 * The model is then written into an in-memory HDF5 file (fuzz_write.c: core
 * driver, no backing store, optionally re-opened read-only from its file
 * image) and given to trace_open_hid. An independent oracle (fuzz_oracle.c),
 * written from docs/trace.md and trace.h rather than from core/, says whether the
 * file is valid. This file checks core/ against it:
 *   - valid   => trace_open_hid must succeed (no false rejection), the meta
 *                must equal the attributes, trace_read_tokens/rows/head must
 *                return exactly the stored numbers, or fail with KV_EINPUT
 *                exactly when a value in the slice is NaN/inf (or a negative
 *                column sum / attention weight);
 *   - invalid => trace_open_hid must fail (no false acceptance).
 * Every failure must be code 1 or 3 with a non-empty one-line message, and no
 * HDF5 id may outlive the run. Any violation calls abort().
 */
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5util.h"
#include "core/kv_error.h"
#include "trace/trace.h"
#include "fuzz_model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
const char *__ubsan_default_options(void);

/* `make fuzz` builds with recoverable UBSan checks: stop at the first report
 * so that libFuzzer saves the input (UBSAN_OPTIONS still overrides this). */
const char *__ubsan_default_options(void) { return "halt_on_error=1:print_stacktrace=1"; }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- failure reporting ----------------------------------------------- */

void fz_fail_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "\n%s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  oracle: %s\n", fz_oracle_ctx);
    abort();
}

static void check_err(const kv_err *err, const char *what)
{
    CHECK(err->code == KV_EINPUT || err->code == KV_EFAIL, "%s: err.code = %d (msg '%s')", what,
          err->code, err->msg);
    CHECK(err->msg[0] != '\0', "%s: empty error message", what);
    CHECK(memchr(err->msg, '\0', sizeof err->msg) != NULL, "%s: unterminated message", what);
#ifndef FUZZ_IGNORE_CONTROL_CHARS /* only to look past this while it is being fixed */
    CHECK(strchr(err->msg, '\n') == NULL && strchr(err->msg, '\r') == NULL,
          "%s: message is not one line: '%s'", what, err->msg);
#endif
}

#ifdef FUZZ_STATS /* -DFUZZ_STATS: how often each outcome happens (tuning aid) */
static unsigned long g_stat[8];
static const char *const STAT_NAME[8] = {"runs", "valid", "invalid", "f16 valid", "evict valid",
                                         "reads ok", "reads refused (bad value)", "reopened"};
static void print_stats(void)
{
    for (int i = 0; i < 8; i++) fprintf(stderr, "stat %-28s %lu\n", STAT_NAME[i], g_stat[i]);
}
#define STAT(i) (g_stat[i]++)
#else
#define STAT(i) ((void)0)
#endif

/* ---- what a successful open must give ---------------------------------- */

static void check_meta(const trace_meta *t, const expect *e)
{
    CHECK(t->schema_major == 1, "schema_major %d", t->schema_major);
    int64_t minor = e->sminor >= 0 && e->sminor <= 1000000 ? e->sminor : 0;
    CHECK(t->schema_minor == minor, "schema_minor %d want %lld", t->schema_minor, (long long)minor);
    CHECK(t->n_layers == e->L && t->n_heads == e->H && t->n_kv_heads == e->K && t->head_dim == e->D,
          "L/H/K/D %lld/%lld/%lld/%lld", (long long)t->n_layers, (long long)t->n_heads,
          (long long)t->n_kv_heads, (long long)t->head_dim);
    CHECK(t->n_tokens == e->T && t->prompt_len == e->prompt && t->vocab_size == e->V &&
          t->capture_chunk == e->chunk, "T/prompt/V/chunk");
    CHECK(t->rope_theta == e->theta, "rope_theta %.17g want %.17g", t->rope_theta, e->theta);
    CHECK(strcmp(t->creator, e->creator) == 0, "creator '%s' want '%s'", t->creator, e->creator);
    CHECK(strcmp(t->model_name, e->model_name) == 0, "model_name");
    CHECK(strcmp(t->architecture, e->arch) == 0 && strcmp(t->rope_style, e->rope) == 0 &&
          strcmp(t->capture_mode, e->mode) == 0, "architecture/rope_style/capture_mode");
    CHECK(t->storage == (e->f16 ? TRACE_F16 : TRACE_F32), "storage");
    if (e->evict)
        CHECK(strcmp(t->evict_policy, e->policy) == 0 && strcmp(t->evict_params, e->params) == 0 &&
              t->evict_budget == e->budget && t->evict_chunk == e->evchunk, "evict_*");
}

static void check_describe(trace *tr, const model *m, const expect *e)
{
    for (int i = 0; i < NDS; i++) {
        CHECK(trace_has(tr, (trace_dset)i) == e->present[i], "trace_has(%s)", FZ_DS_PATH[i]);
        trace_dset_info info;
        kv_err err;
        kv_err_clear(&err);
        int rc = trace_describe(tr, (trace_dset)i, &info, &err);
        if (!e->present[i]) {
            CHECK(rc != KV_OK, "describe of absent %s succeeded", FZ_DS_PATH[i]);
            check_err(&err, "trace_describe");
            continue;
        }
        const dmodel *d = &m->d[i];
        CHECK(rc == KV_OK, "describe %s: %s", FZ_DS_PATH[i], err.msg);
        CHECK(info.rank == d->rank, "describe rank");
        for (int a = 0; a < d->rank; a++) CHECK(info.dims[a] == (int64_t)d->dims[a], "describe dims");
        CHECK(memchr(info.type, '\0', sizeof info.type) && strcmp(info.type, fz_type_label(d->et)) == 0,
              "describe %s type '%s' want '%s'", FZ_DS_PATH[i], info.type, fz_type_label(d->et));
        char want[64] = "";
        if (d->chunked && d->rank > 0 && d->filters) {
            if (d->filters & F_SHUFFLE) strcat(want, "+shuffle");
            if (d->filters & F_DEFLATE) strcat(want, "+deflate");
            if (d->filters & F_FLETCHER) strcat(want, "+fletcher32");
        } else {
            strcpy(want, "+none");
        }
        CHECK(memchr(info.filters, '\0', sizeof info.filters) && strcmp(info.filters, want + 1) == 0,
              "describe %s filters '%s' want '%s'", FZ_DS_PATH[i], info.filters, want + 1);
    }
}

/* Rows [t0, t0+n) of (layer, head) of dataset `which` as the reader must return them. */
static bool expected_rows(const model *m, int which, int64_t nheads, int64_t width, int64_t layer,
                          int64_t head, int64_t t0, int64_t n, float *out)
{
    const dmodel *d = &m->d[which];
    const int64_t T = (int64_t)d->dims[2];
    bool nonneg = which == TRACE_COLSUM || which == TRACE_ATTN_FULL || which == TRACE_KVZIP, ok = true;
    size_t es = fz_esize(d->et);
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < width; c++) {
            size_t idx = (size_t)((((layer * nheads + head) * T) + t0 + r) * width + c);
            float v = fz_decode_f32(d->et, d->raw + idx * es);
            out[r * width + c] = v;
            if (!isfinite(v) || (nonneg && v < 0) || (which == TRACE_KVZIP && v > 1)) ok = false;
        }
    return ok;
}

static void check_one_read(trace *tr, const model *m, int which, int64_t nheads, int64_t width,
                           int64_t layer, int64_t head, int64_t t0, int64_t n, bool whole, float *got,
                           float *want)
{
    kv_err err;
    kv_err_clear(&err);
    int rc = whole ? trace_read_head(tr, (trace_dset)which, layer, head, got, &err)
                   : trace_read_rows(tr, (trace_dset)which, layer, head, t0, n, got, &err);
    bool ok = expected_rows(m, which, nheads, width, layer, head, t0, n, want);
    STAT(ok ? 5 : 6);
    if (!ok) {
        CHECK(rc == KV_EINPUT, "%s[%lld,%lld] rows %lld+%lld has a bad value but read returned %d",
              FZ_DS_PATH[which], (long long)layer, (long long)head, (long long)t0, (long long)n, rc);
        check_err(&err, "trace_read_rows");
        return;
    }
    CHECK(rc == KV_OK, "%s[%lld,%lld] rows %lld+%lld: rejected: %s", FZ_DS_PATH[which], (long long)layer,
          (long long)head, (long long)t0, (long long)n, err.msg);
    for (int64_t i = 0; i < n * width; i++)
        CHECK(memcmp(&got[i], &want[i], sizeof(float)) == 0,
              "%s[%lld,%lld] element %lld = %a, stored %a", FZ_DS_PATH[which], (long long)layer, (long long)head,
              (long long)i, (double)got[i], (double)want[i]);
}

static void check_tokens(trace *tr, const model *m, const expect *e)
{
    const int64_t T = e->T;
    int32_t *tok = calloc((size_t)T, sizeof *tok);
    CHECK(tok, "out of memory");
    kv_err err;
    kv_err_clear(&err);
    CHECK(trace_read_tokens(tr, tok, &err) == KV_OK, "trace_read_tokens: %s", err.msg);
    const dmodel *td = &m->d[TRACE_TOKENS];
    for (int64_t t = 0; t < T; t++) {
        int64_t v;
        fz_decode_int(td->et, td->raw + (size_t)t * fz_esize(td->et), &v);
        CHECK(tok[t] == v, "token %lld = %d, stored %lld", (long long)t, tok[t], (long long)v);
    }
    free(tok);
}

/* The tokens; every (layer, head) of each per-head dataset, whole, and a
 * few partial and out-of-range reads of it; rows of a dataset that has none. */
static void check_reads(trace *tr, const model *m, const expect *e)
{
    const int64_t T = e->T;
    check_tokens(tr, m, e);

    static const int PER_HEAD[] = {TRACE_KEYS, TRACE_VALUES, TRACE_QUERIES, TRACE_COLSUM, TRACE_ATTN_FULL,
                                   TRACE_KVZIP, TRACE_ATTN_OUT, TRACE_ATTN_LSE, TRACE_ATTN_MAX};
    const size_t cap = (size_t)(T * (T > e->D ? T : e->D) + 1); /* floats: the widest head */
    float *got = malloc(sizeof(float) * cap);
    float *want = malloc(sizeof(float) * cap);
    kv_err err;
    CHECK(got && want, "out of memory");
    for (size_t k = 0; k < sizeof PER_HEAD / sizeof PER_HEAD[0]; k++) {
        int which = PER_HEAD[k];
        int64_t nheads = which == TRACE_KEYS || which == TRACE_VALUES ? e->K : e->H;
        int64_t width = which == TRACE_COLSUM || which == TRACE_KVZIP || which == TRACE_ATTN_LSE ||
                                which == TRACE_ATTN_MAX ? 1
                        : which == TRACE_ATTN_FULL                                            ? T
                                                                                              : e->D;
        if (!e->present[which]) {
            kv_err_clear(&err);
            CHECK(trace_read_head(tr, (trace_dset)which, 0, 0, got, &err) != KV_OK, "read of absent %s",
                  FZ_DS_PATH[which]);
            check_err(&err, "read of an absent dataset");
            continue;
        }
        for (int64_t l = 0; l < e->L; l++)
            for (int64_t h = 0; h < nheads; h++)
                check_one_read(tr, m, which, nheads, width, l, h, 0, T, true, got, want);
        /* a few partial reads, some outside the dataset */
        for (int i = 0; i < 4; i++) {
            int64_t l = (int64_t)(fz_rnd() % (uint64_t)(e->L + 1)) - (i == 3);
            int64_t h = (int64_t)(fz_rnd() % (uint64_t)(nheads + 1));
            int64_t t0 = (int64_t)(fz_rnd() % (uint64_t)(T + 1)) - (i == 2);
            int64_t n = (int64_t)(fz_rnd() % (uint64_t)(T + 2));
            if (l >= 0 && l < e->L && h < nheads && t0 >= 0 && n >= 1 && t0 + n <= T) {
                check_one_read(tr, m, which, nheads, width, l, h, t0, n, false, got, want);
            } else {
                kv_err_clear(&err);
                CHECK(trace_read_rows(tr, (trace_dset)which, l, h, t0, n, got, &err) == KV_EFAIL,
                      "out-of-range read (%lld, %lld, %lld, %lld) not refused", (long long)l, (long long)h,
                      (long long)t0, (long long)n);
                check_err(&err, "out-of-range read");
            }
        }
    }
    kv_err_clear(&err);
    CHECK(trace_read_rows(tr, TRACE_LOGITS, 0, 0, 0, 1, got, &err) == KV_EFAIL, "read_rows on logits");
    check_err(&err, "read_rows on logits");
    free(got);
    free(want);
}

/* ---- HDF5 id accounting ------------------------------------------------ */

/* HDF5 1.10 has no public count of transient ids (H5Inmembers refuses
 * library types), but it hands out ids of one type with increasing serial
 * numbers: an id of that type made before the run and one made after it
 * bracket every id the run created, and each of those must be gone. Files,
 * groups, datasets and attributes are also counted by H5Fget_obj_count. */
enum { PROBE_SPACE, PROBE_TYPE, PROBE_PLIST, NPROBE };

static hid_t probe(int k)
{
    hid_t id = k == PROBE_SPACE ? H5Screate(H5S_SCALAR)
             : k == PROBE_TYPE  ? H5Tcopy(H5T_NATIVE_INT)
                                : H5Pcreate(H5P_DATASET_XFER);
    H5OK(id);
    H5OK(k == PROBE_SPACE ? H5Sclose(id) : k == PROBE_TYPE ? H5Tclose(id) : H5Pclose(id));
    return id;
}

static void probe_all(hid_t *out)
{
    for (int k = 0; k < NPROBE; k++) out[k] = probe(k);
}

static void check_no_leaked_ids(const hid_t *before)
{
    static const char *const WHAT[NPROBE] = {"dataspace", "datatype", "property list"};
    hid_t after[NPROBE];
    probe_all(after);
    for (int k = 0; k < NPROBE; k++) {
        CHECK(after[k] > before[k] && after[k] - before[k] < 10000000, "id probe order");
        for (hid_t id = before[k] + 1; id < after[k]; id++)
            CHECK(H5Iis_valid(id) <= 0, "a %s id (%lld) outlived the run", WHAT[k], (long long)id);
    }
}

static void run_one(const uint8_t *data, size_t size)
{
    src in = {data, size};
    model m;
    fz_build_valid(&m, &in);
    bool mutated = in.n > 0;
    fz_mutate(&m, &in);
    fz_finalize(&m);
    expect e;
    bool valid = fz_oracle(&m, &e);
    CHECK(valid || mutated, "the unmutated trace must be valid");
    STAT(0);
    STAT(valid ? 1 : 2);
    if (valid && e.f16) STAT(3);
    if (valid && e.evict) STAT(4);
    if (m.reopen) STAT(7);

    hid_t ids_before[NPROBE];
    probe_all(ids_before);
    char name[64];
    hid_t file = fz_write_model(&m, name, sizeof name);
    trace *tr = (trace *)0x1;
    kv_err err;
    kv_err_clear(&err);
    int rc = trace_open_hid(file, name, &tr, &err);
    if (rc != KV_OK) {
        CHECK(tr == NULL, "failed open left *out set");
        check_err(&err, "trace_open_hid");
        CHECK(rc == err.code, "rc %d != err.code %d", rc, err.code);
        CHECK(!valid, "valid trace rejected: %s", err.msg);
        /* an error names the file, then the object and the problem (README.md#using-it) */
        if (err.code == KV_EINPUT)
            CHECK(strncmp(err.msg, name, strlen(name)) == 0, "message does not name the file: '%s'", err.msg);
    } else {
        CHECK(tr != NULL && err.code == KV_OK, "open succeeded without a trace");
        CHECK(valid, "invalid trace accepted");
        check_meta(trace_get_meta(tr), &e);
        CHECK(strcmp(trace_path(tr), name) == 0, "trace_path");
        check_describe(tr, &m, &e);
        check_reads(tr, &m, &e);
        trace_close(tr);
    }
    H5OK(H5Fclose(file));
    ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    CHECK(open == 0, "%zd HDF5 objects still open after closing the file", open);
    check_no_leaked_ids(ids_before);
    fz_free_model(&m);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    h5u_quiet();
#ifdef FUZZ_STATS
    atexit(print_stats);
#endif
    /* Warm HDF5 up on a few well-formed traces: it initialises packages and
     * registers some ids once, lazily, and those must not count as leaks. */
    static const uint8_t warm[][10] = {
        {0, 0, 0, 0, 0, 0, 0x00, 0x10, 0, 0},
        {1, 2, 3, 4, 5, 6, 0x77, 0x10, 1, 0},
        {2, 3, 1, 0, 9, 9, 0x0E, 0x00, 2, 0},
    };
    for (size_t w = 0; w < sizeof warm / sizeof warm[0]; w++) {
        src in = {warm[w], sizeof warm[w]};
        model m;
        fz_build_valid(&m, &in);
        char name[64];
        hid_t f = fz_write_model(&m, name, sizeof name);
        trace *tr;
        kv_err err;
        kv_err_clear(&err);
        if (trace_open_hid(f, name, &tr, &err) == KV_OK) trace_close(tr);
        H5Fclose(f);
        fz_free_model(&m);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run_one(data, size);
    return 0;
}
