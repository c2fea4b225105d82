/* GGUF reader and llama-GGUF loader: tiny llama files written here (F32 and
 * F16) load with the right config, weights and vocabulary; corrupt and
 * contradictory files fail with KV_EINPUT and a one-line message that names
 * the file and says what is wrong; the real stories260K.gguf (from
 * $KVTRACE_MODEL_DIR; the test skips when it is unset) loads with its README's config. */
#include "testutil.h"

#include "core/filemap.h"

#include <math.h>

#include "model/formats/gguf.h"
#include "model/model.h"
#include "core/half.h"

/* ---- a small GGUF writer ----------------------------------------------- */

typedef struct {
    uint8_t *b;  /* [n] */
    size_t n, cap;
} wbuf;

static void wb_put(wbuf *w, const void *p, size_t n)
{
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 256;
        w->b = realloc(w->b, w->cap);
        assert_non_null(w->b);
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void wb_le(wbuf *w, uint64_t v, int nbytes)
{
    uint8_t b[8];
    for (int i = 0; i < nbytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    wb_put(w, b, (size_t)nbytes);
}

static void wb_str(wbuf *w, const char *s)
{
    wb_le(w, strlen(s), 8);
    wb_put(w, s, strlen(s));
}

static void wb_patch64(wbuf *w, size_t at, uint64_t v)
{
    for (int i = 0; i < 8; i++) w->b[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

/* What the tiny llama looks like, and the knobs that break it. */
typedef struct {
    uint32_t version, dim, ffn, L, H, K, V, rope_dims;
    uint32_t mat_type;          /* type of the 2-D tensors: 0 F32, 1 F16, or a bad one */
    const char *arch;
    bool output, tokenizer, dup_key, nan;
    const char *skip;           /* this tensor is left out */
    const char *reshape;        /* this tensor gets ne1 = reshape_ne1 */
    uint64_t reshape_ne1;
    /* filled by the writer */
    size_t at_tokens_count, at_last_offset, header_end;
    int n_tensors;
} tiny;

static tiny tiny_default(void)
{
    return (tiny){.version = 3, .dim = 8, .ffn = 12, .L = 2, .H = 2, .K = 1, .V = 16,
                  .rope_dims = 4, .mat_type = 0, .arch = "llama", .output = true,
                  .tokenizer = true};
}

typedef struct {
    char name[64];
    uint32_t n_dims;
    uint64_t ne[2];
} tinfo;

static const char *const LAYER_T[9] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                        "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};

/* The tensors of the tiny model in file order; returns how many. */
static int tiny_tensors(const tiny *t, tinfo *out)
{
    uint64_t D = t->dim / t->H, q = t->H * D, kv = t->K * D;
    uint64_t shapes[9][2] = {{t->dim, 0}, {t->dim, q},   {t->dim, kv},  {t->dim, kv}, {q, t->dim},
                             {t->dim, 0}, {t->dim, t->ffn}, {t->dim, t->ffn}, {t->ffn, t->dim}};
    int n = 0;
    out[n++] = (tinfo){"token_embd.weight", 2, {t->dim, t->V}};
    out[n++] = (tinfo){"output_norm.weight", 1, {t->dim, 1}};
    if (t->output) out[n++] = (tinfo){"output.weight", 2, {t->dim, t->V}};
    for (uint32_t l = 0; l < t->L; l++)
        for (int i = 0; i < 9; i++) {
            bool mat = shapes[i][1] != 0;
            out[n] = (tinfo){"", mat ? 2 : 1, {shapes[i][0], mat ? shapes[i][1] : 1}};
            snprintf(out[n].name, sizeof out[n].name, "blk.%u.%s.weight", l, LAYER_T[i]);
            n++;
        }
    return n;
}

/* Deterministic weights; norms near 1. Element j of the tensor called name. */
static float ref_value(const char *name, uint64_t j)
{
    uint32_t h = 2166136261u;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
    float v = (float)sin(0.7 * (double)j + (double)(h % 1000)) * 0.5f;
    return strstr(name, "norm") ? 1.0f + v / 4 : v;
}

static void write_kvs(tiny *t, wbuf *w, uint64_t *n_kv)
{
    wbuf k = {0};
    uint64_t n = 0;
#define KV_U32(key, v) (wb_str(&k, key), wb_le(&k, GGUF_UINT32, 4), wb_le(&k, v, 4), n++)
    wb_str(&k, "general.architecture"), wb_le(&k, GGUF_STRING, 4), wb_str(&k, t->arch), n++;
    wb_str(&k, "general.name"), wb_le(&k, GGUF_STRING, 4), wb_str(&k, "tiny"), n++;
    if (t->dup_key) wb_str(&k, "general.name"), wb_le(&k, GGUF_STRING, 4), wb_str(&k, "x"), n++;
    char key[80];
#define ARCH_KEY(suffix) (snprintf(key, sizeof key, "%s.%s", t->arch, suffix), key)
    KV_U32(ARCH_KEY("embedding_length"), t->dim);
    KV_U32(ARCH_KEY("feed_forward_length"), t->ffn);
    KV_U32(ARCH_KEY("block_count"), t->L);
    KV_U32(ARCH_KEY("attention.head_count"), t->H);
    KV_U32(ARCH_KEY("attention.head_count_kv"), t->K);
    KV_U32(ARCH_KEY("rope.dimension_count"), t->rope_dims);
    KV_U32(ARCH_KEY("context_length"), 64);
    float eps = 1e-5f;
    uint32_t eps_bits;
    memcpy(&eps_bits, &eps, 4);
    wb_str(&k, ARCH_KEY("attention.layer_norm_rms_epsilon")), wb_le(&k, GGUF_FLOAT32, 4);
    wb_le(&k, eps_bits, 4), n++;
    if (t->tokenizer) {
        wb_str(&k, "tokenizer.ggml.model"), wb_le(&k, GGUF_STRING, 4), wb_str(&k, "llama"), n++;
        wb_str(&k, "tokenizer.ggml.tokens"), wb_le(&k, GGUF_ARRAY, 4), wb_le(&k, GGUF_STRING, 4);
        t->at_tokens_count = 24 + k.n;  /* relative to the start of the KVs, fixed below */
        wb_le(&k, t->V, 8);
        for (uint32_t i = 0; i < t->V; i++) {
            static const char *const special[3] = {"<unk>", "<s>", "</s>"};
            char piece[16];
            snprintf(piece, sizeof piece, "\xe2\x96\x81%c", 'a' + i);
            wb_str(&k, i < 3 ? special[i] : piece);
        }
        wb_str(&k, "tokenizer.ggml.scores"), wb_le(&k, GGUF_ARRAY, 4), wb_le(&k, GGUF_FLOAT32, 4);
        wb_le(&k, t->V, 8);
        for (uint32_t i = 0; i < t->V; i++) {
            float s = -(float)i;
            uint32_t b;
            memcpy(&b, &s, 4);
            wb_le(&k, b, 4);
        }
        n++;
        wb_str(&k, "tokenizer.ggml.token_type"), wb_le(&k, GGUF_ARRAY, 4), wb_le(&k, GGUF_INT32, 4);
        wb_le(&k, t->V, 8);
        for (uint32_t i = 0; i < t->V; i++) wb_le(&k, i == 0 ? 2 : i < 3 ? 3 : 1, 4);
        n += 2;
        KV_U32("tokenizer.ggml.bos_token_id", 1);
        KV_U32("tokenizer.ggml.eos_token_id", 2);
    }
#undef KV_U32
#undef ARCH_KEY
    wb_put(w, k.b, k.n);
    free(k.b);
    *n_kv = n;
}

static uint64_t type_bytes(uint32_t type, uint64_t n)
{
    return type == 0 ? 4 * n : type == 1 || type == 30 ? 2 * n : 4 * n;
}

/* Serializes the tiny model into w. */
static void tiny_write(tiny *t, wbuf *w)
{
    tinfo ti[64];
    int nt = tiny_tensors(t, ti), kept = 0;
    for (int i = 0; i < nt; i++) if (!t->skip || strcmp(ti[i].name, t->skip)) ti[kept++] = ti[i];
    nt = t->n_tensors = kept;
    uint64_t n_kv = 0;
    wb_put(w, "GGUF", 4);
    wb_le(w, t->version, 4);
    wb_le(w, (uint64_t)nt, 8);
    wb_le(w, 0, 8); /* KV count, patched below */
    write_kvs(t, w, &n_kv);
    wb_patch64(w, 16, n_kv);
    uint64_t off = 0, offs[64];
    uint32_t types[64];
    for (int i = 0; i < nt; i++) {
        if (t->reshape && strcmp(ti[i].name, t->reshape) == 0) ti[i].ne[1] = t->reshape_ne1;
        types[i] = ti[i].n_dims == 2 ? t->mat_type : 0;
        wb_str(w, ti[i].name);
        wb_le(w, ti[i].n_dims, 4);
        for (uint32_t d = 0; d < ti[i].n_dims; d++) wb_le(w, ti[i].ne[d], 8);
        wb_le(w, types[i], 4);
        t->at_last_offset = w->n;
        wb_le(w, off, 8);
        offs[i] = off;
        off += (type_bytes(types[i], ti[i].ne[0] * ti[i].ne[1]) + 31) / 32 * 32;
    }
    t->header_end = w->n;
    while (w->n % 32) wb_le(w, 0, 1);
    size_t data = w->n;
    for (int i = 0; i < nt; i++) {
        while (w->n < data + offs[i]) wb_le(w, 0, 1);
        for (uint64_t j = 0; j < ti[i].ne[0] * ti[i].ne[1]; j++) {
            float v = t->nan && i == nt - 1 && j == 3 ? NAN : ref_value(ti[i].name, j);
            uint32_t b;
            memcpy(&b, &v, 4);
            if (types[i] == 1) wb_le(w, half_from_float(v), 2);
            else if (types[i] == 30) wb_le(w, b >> 16, 2);
            else wb_le(w, b, 4);
        }
    }
    while (w->n % 32) wb_le(w, 0, 1);
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static const char *tiny_file(tiny *t, const char *name, wbuf *w)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s.gguf", tu_dir, name);
    tiny_write(t, w);
    write_file(path, w->b, w->n);
    return path;
}

/* ---- checks -------------------------------------------------------------- */

static float *model_tensor(const kv_model *m, const char *name)
{
    if (!strcmp(name, "token_embd.weight")) return m->tok_embd;
    if (!strcmp(name, "output_norm.weight")) return m->output_norm;
    if (!strcmp(name, "output.weight")) return m->output;
    unsigned l;
    char what[32];
    assert_int_equal(sscanf(name, "blk.%u.%31[a-z_]", &l, what), 2);
    const model_layer *y = &m->layers[l];
    float *const p[9] = {y->attn_norm, y->wq, y->wk, y->wv, y->wo, y->ffn_norm, y->w_gate, y->w_up,
                         y->w_down};
    for (int i = 0; i < 9; i++) if (!strcmp(what, LAYER_T[i])) return p[i];
    fail_msg("no tensor %s", name);
    return NULL;
}

/* Loads t and checks config, every weight (exact for F32, half rounding for F16), vocab. */
static void check_good(tiny *t, const char *name)
{
    wbuf w = {0};
    const char *path = tiny_file(t, name, &w);
    kv_model m;
    kv_err err = {0};
    int rc = model_load(path, NULL, &m, &err);
    if (rc) printf("# %s\n", err.msg);
    assert_int_equal(rc, KV_OK);
    const model_config *c = &m.cfg;
    assert_string_equal(c->name, "tiny");
    assert_string_equal(c->architecture, "llama");
    assert_true(c->dim == 8 && c->ffn_dim == 12 && c->n_layers == 2 && c->n_heads == 2);
    assert_true(c->n_kv_heads == 1 && c->head_dim == 4 && c->vocab_size == 16);
    assert_true(c->context_len == 64 && c->rope_theta == 10000.0 && c->rope == ROPE_INTERLEAVED);
    assert_true(c->norm_eps == (double)1e-5f);
    tinfo ti[64];
    int nt = tiny_tensors(t, ti);
    double worst = 0;
    for (int i = 0; i < nt; i++) {
        const float *got = model_tensor(&m, ti[i].name);
        for (uint64_t j = 0; j < ti[i].ne[0] * ti[i].ne[1]; j++) {
            float ref = ref_value(ti[i].name, j);
            double tol = ti[i].n_dims != 2 ? 0 : t->mat_type == 1 ? fabs(ref) * 0x1p-11 + 0x1p-25
                       : t->mat_type == 30 ? fabs(ref) * 0x1p-7 : 0; /* the writer truncates */
            double d = fabs((double)got[j] - ref);
            if (d > worst) worst = d;
            if (d > tol) fail_msg("%s[%llu]: got %.9g want %.9g", ti[i].name, (unsigned long long)j,
                                  (double)got[j], (double)ref);
        }
    }
    printf("# %s: %d tensors, max abs diff %.3g\n", name, nt, worst);
    assert_true(t->output ? m.output != m.tok_embd : m.output == m.tok_embd);
    assert_true(m.has_vocab);
    assert_int_equal(m.vocab.n, 16);
    assert_string_equal(m.vocab.pieces[4], "\xe2\x96\x81" "e");
    assert_true(m.vocab.scores[5] == -5.0f && m.vocab.types[0] == VOCAB_UNKNOWN);
    assert_true(m.vocab.bos == 1 && m.vocab.eos == 2 && m.vocab.unk == 0 && m.vocab.add_bos);
    model_free(&m);
    free(w.b);
}

static void good_f32(void **state)
{
    (void)state;
    tiny t = tiny_default();
    check_good(&t, "good_f32");
}

static void good_f16_untied_v2(void **state)
{
    (void)state;
    tiny t = tiny_default();
    t.mat_type = 1;
    check_good(&t, "good_f16");
    t = tiny_default();
    t.output = false;
    t.version = 2;
    check_good(&t, "good_tied_v2");
    t = tiny_default();
    t.mat_type = 30;
    check_good(&t, "good_bf16");
}

/* The reader's own API on the good file: typed getters, lookups, errors. */
static void reader_api(void **state)
{
    (void)state;
    tiny t = tiny_default();
    wbuf w = {0};
    const char *path = tiny_file(&t, "api", &w);
    gguf_file *g;
    kv_err err = {0};
    assert_int_equal(gguf_open(path, &g, &err), KV_OK);
    assert_int_equal(gguf_version(g), 3);
    uint32_t u = 0;
    assert_int_equal(gguf_get_u32(g, "llama.block_count", true, &u, &err), KV_OK);
    assert_int_equal(u, 2);
    int32_t i32 = 0;
    assert_int_equal(gguf_get_i32(g, "llama.embedding_length", true, &i32, &err), KV_OK);
    assert_int_equal(i32, 8);
    u = 77; /* absent and optional: unchanged */
    assert_int_equal(gguf_get_u32(g, "llama.nothing", false, &u, &err), KV_OK);
    assert_int_equal(u, 77);
    const char *s = NULL;
    assert_int_equal(gguf_get_str(g, "general.architecture", true, &s, &err), KV_OK);
    assert_string_equal(s, "llama");
    const gguf_kv *kv;
    uint64_t n = 0;
    assert_int_equal(gguf_get_array(g, "tokenizer.ggml.tokens", true, GGUF_STRING, &kv, &n, &err),
                     KV_OK);
    size_t len;
    const char *p = gguf_array_str(g, kv, 1, &len);
    assert_true(n == 16 && len == 3 && memcmp(p, "<s>", 3) == 0);
    float sc[16];
    assert_int_equal(gguf_get_array(g, "tokenizer.ggml.scores", true, GGUF_FLOAT32, &kv, &n, &err),
                     KV_OK);
    assert_int_equal(gguf_array_f32(g, kv, sc, n, &err), KV_OK);
    assert_true(sc[15] == -15.0f);
    const gguf_tensor *te = gguf_find_tensor(g, "blk.1.ffn_down.weight");
    assert_non_null(te);
    assert_true(te->n_dims == 2 && te->ne[0] == 12 && te->ne[1] == 8 && te->type == GGML_TYPE_F32);
    assert_null(gguf_find_tensor(g, "blk.2.ffn_down.weight"));
    /* errors: missing required key, wrong type, out of range */
    assert_int_equal(gguf_get_u32(g, "llama.nothing", true, &u, &err), KV_EINPUT);
    assert_non_null(strstr(err.msg, "missing key 'llama.nothing'"));
    kv_err_clear(&err);
    assert_int_equal(gguf_get_f32(g, "general.name", true, sc, &err), KV_EINPUT);
    assert_non_null(strstr(err.msg, "is string, expected float32"));
    gguf_close(g);
    free(w.b);
}

/* A tensor of a type ggml has and kvtrace does not convert parses, and
 * reading it names the type; the bytes are parsed from memory. */
static void unsupported_type(void **state)
{
    (void)state;
    wbuf w = {0};
    wb_put(&w, "GGUF", 4);
    wb_le(&w, 3, 4), wb_le(&w, 1, 8), wb_le(&w, 1, 8);
    wb_str(&w, "general.alignment"), wb_le(&w, GGUF_UINT32, 4), wb_le(&w, 64, 4);
    wb_str(&w, "blk.0.attn_q.weight"), wb_le(&w, 1, 4), wb_le(&w, 512, 8);
    wb_le(&w, 15, 4), wb_le(&w, 0, 8); /* Q8_K (ggml's dot-product intermediate): 2 blocks of 292 bytes */
    while (w.n % 64) wb_le(&w, 0, 1);
    size_t data = w.n;
    for (int i = 0; i < 584; i++) wb_le(&w, (uint64_t)i, 1);
    gguf_file *g;
    kv_err err = {0};
    assert_int_equal(gguf_parse_buffer(w.b, w.n, "mem.gguf", &g, &err), KV_OK);
    const gguf_tensor *t = gguf_tensor_at(g, 0);
    assert_true(t->offset == data && t->nbytes == 584 && t->n_elems == 512);
    assert_string_equal(gguf_ggml_type_name(t->type), "Q8_K");
    float out[512];
    assert_int_equal(gguf_tensor_read_f32(g, t, out, 512, &err), KV_EINPUT);
    printf("# %s\n", err.msg);
    assert_string_equal(err.msg, "mem.gguf: tensor blk.0.attn_q.weight has type Q8_K (15), "
                                 "kvtrace reads F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and BF16");
    gguf_close(g);
    free(w.b);
}

/* Loads the bytes as a model: KV_EINPUT, one line naming the file, containing `word`. */
static void expect_bad(const char *name, const void *bytes, size_t n, const char *word)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.gguf", tu_dir, name);
    write_file(path, bytes, n);
    kv_model m;
    kv_err err = {0};
    int rc = model_load(path, NULL, &m, &err);
    printf("# %s: %s\n", name, err.msg);
    assert_int_equal(rc, KV_EINPUT);
    assert_int_equal(err.code, KV_EINPUT);
    assert_null(strchr(err.msg, '\n'));
    assert_non_null(strstr(err.msg, path));
    /* word may list alternatives: "a|b" */
    bool found = false;
    for (const char *p = word; *p && !found;) {
        size_t len = strcspn(p, "|");
        for (const char *q = err.msg; !found && (q = strchr(q, p[0])); q++)
            found = strncmp(q, p, len) == 0;
        p += len + (p[len] == '|');
    }
    if (!found) fail_msg("%s: message lacks '%s'", name, word);
    assert_null(m.layers); /* nothing left behind */
}

/* Builds the tiny model with `t` and expects the load to fail with `word`. */
static void expect_bad_tiny(tiny *t, const char *name, const char *word)
{
    wbuf w = {0};
    tiny_write(t, &w);
    expect_bad(name, w.b, w.n, word);
    free(w.b);
}

static void corrupt_headers(void **state)
{
    (void)state;
    tiny t = tiny_default();
    wbuf w = {0};
    tiny_write(&t, &w);
    expect_bad("empty", "", 0, "empty file");
    uint8_t *b = malloc(w.n);
    assert_non_null(b);
    memcpy(b, w.b, w.n);
    memcpy(b, "GGUX", 4);
    expect_bad("magic", b, w.n, "not a GGUF file");
    memcpy(b, w.b, w.n);
    b[4] = 1;
    expect_bad("version1", b, w.n, "version 1 is not supported");
    memcpy(b, w.b, w.n);
    wb_patch64(&(wbuf){b, w.n, w.n}, 8, 1ull << 60);
    expect_bad("tensor_count", b, w.n, "tensor count 1152921504606846976 exceeds the file");
    memcpy(b, w.b, w.n);
    wb_patch64(&(wbuf){b, w.n, w.n}, 24, 1ull << 60); /* the first key's length */
    expect_bad("string_length", b, w.n, "string length 1152921504606846976 at offset 24 exceeds");
    memcpy(b, w.b, w.n);
    wb_patch64(&(wbuf){b, w.n, w.n}, t.at_tokens_count, 1ull << 62);
    expect_bad("array_count", b, w.n, "array count 4611686018427387904");
    memcpy(b, w.b, w.n);
    wb_patch64(&(wbuf){b, w.n, w.n}, t.at_last_offset, 1ull << 40);
    expect_bad("past_end", b, w.n, "runs past the end of the file");
    memcpy(b, w.b, w.n);
    wb_patch64(&(wbuf){b, w.n, w.n}, t.at_last_offset, 32 + 4);
    expect_bad("misaligned", b, w.n, "not a multiple of the alignment 32");
    memcpy(b, w.b, w.n);
    wb_patch64(&(wbuf){b, w.n, w.n}, t.at_last_offset, 0);
    expect_bad("overlap", b, w.n, "overlap");
    /* cut anywhere: in the header, the KVs, the tensor infos, the data */
    size_t cuts[] = {3, 7, 12, 20, 30, 100, t.at_tokens_count + 4, t.header_end - 5,
                     t.header_end + 40, w.n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "cut%zu", cuts[i]);
        /* a count the rest cannot hold, a read past the end, or data past the end */
        expect_bad(name, w.b, cuts[i], cuts[i] < 4 ? "not a GGUF file" :
                                       cuts[i] > t.header_end ? "past the end of the file" :
                                       "truncated|exceeds the file");
    }
    free(b);
    free(w.b);
}

static void contradictions(void **state)
{
    (void)state;
    tiny t = tiny_default();
    t.skip = "blk.1.ffn_up.weight";
    expect_bad_tiny(&t, "missing", "missing tensor blk.1.ffn_up.weight");
    t = tiny_default();
    t.reshape = "blk.1.attn_k.weight", t.reshape_ne1 = 8;
    expect_bad_tiny(&t, "shape", "tensor blk.1.attn_k.weight has shape [8, 8], expected [8, 4] "
                                 "from the metadata");
    t = tiny_default();
    t.mat_type = 12;
    expect_bad_tiny(&t, "q4k", "Q4_K");
    t = tiny_default();
    t.mat_type = 8;
    expect_bad_tiny(&t, "q8_0_width", "ne[0] = 8 is not a multiple of the Q8_0 block size 32");
    t = tiny_default();
    t.mat_type = 99;
    expect_bad_tiny(&t, "type99", "unknown ggml type 99");
    t = tiny_default();
    t.arch = "gpt2";
    expect_bad_tiny(&t, "gpt2", "architecture 'gpt2' is not supported");
    t = tiny_default();
    t.dup_key = true;
    expect_bad_tiny(&t, "dup", "duplicate key 'general.name'");
    t = tiny_default();
    t.rope_dims = 2;
    expect_bad_tiny(&t, "rope", "dimension_count 2 differs from head_dim 4");
    t = tiny_default();
    t.nan = true;
    expect_bad_tiny(&t, "nan", "element 3 is NaN");
    t = tiny_default();
    t.K = 3;
    expect_bad_tiny(&t, "gqa", "n_kv_heads = 3 is outside [1, 2]");
}

/* ---- the real model --------------------------------------------------------- */

static void stories260k(void **state)
{
    (void)state;
    const char *dir = tu_model_dir();
    char path[4096];
    snprintf(path, sizeof path, "%s/stories260K.gguf", dir);
    kv_model m;
    kv_err err = {0};
    int rc = model_load(path, NULL, &m, &err);
    if (rc) printf("# %s\n", err.msg);
    assert_int_equal(rc, KV_OK);
    const model_config *c = &m.cfg;
    assert_true(c->dim == 64 && c->ffn_dim == 172 && c->n_layers == 5 && c->n_heads == 8);
    assert_true(c->n_kv_heads == 4 && c->head_dim == 8 && c->vocab_size == 512);
    assert_true(c->norm_eps == (double)1e-5f && c->rope_theta == 10000.0);
    assert_true(m.has_vocab && m.vocab.n == 512 && m.vocab.bos == 1 && m.vocab.eos == 2);
    assert_true(m.vocab.types[3] == VOCAB_BYTE && m.vocab.scores[260] == -1.0f);
    gguf_file *g;
    assert_int_equal(gguf_open(path, &g, &err), KV_OK);
    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(te);
    assert_int_equal(te->offset, 14176);
    assert_int_equal(gguf_kv_count(g), 19);
    assert_int_equal(gguf_tensor_count(g), 48);
    gguf_close(g);
    FILE *f = fopen(path, "rb");
    float first[64];
    assert_non_null(f);
    assert_int_equal(fseek(f, 14176, SEEK_SET), 0);
    assert_int_equal(fread(first, sizeof(float), 64, f), 64);
    fclose(f);
    assert_memory_equal(first, m.tok_embd, sizeof first);
    printf("# stories260K: token_embd[0..2] = %g %g %g\n", (double)first[0], (double)first[1],
           (double)first[2]);
    model_free(&m);
}

/* kv_filemap_drop: a mapped file's pages dropped from memory read the same bytes again, and a range
 * within one page (or empty) drops nothing and changes nothing. */
static void filemap_drop(void **state)
{
    (void)state;
    enum { N = 5 * 4096 + 123 };
    unsigned char *bytes = malloc(N);
    for (size_t i = 0; i < N; i++) bytes[i] = (unsigned char)(i * 131u + 7u);
    char path[512];
    snprintf(path, sizeof path, "%s/drop.bin", tu_dir);
    write_file(path, bytes, N);
    kv_filemap fm;
    kv_err err = {0};
    assert_int_equal(kv_filemap_open(path, &fm, &err), KV_OK);
    assert_memory_equal(fm.data, bytes, N); /* every page touched */
    kv_filemap_drop(fm.data + 100, N - 200);
    kv_filemap_drop(fm.data + 10, 20);
    kv_filemap_drop(fm.data, 0);
    assert_memory_equal(fm.data, bytes, N);
    kv_filemap_close(&fm);
    free(bytes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_f32),
        cmocka_unit_test(good_f16_untied_v2),
        cmocka_unit_test(reader_api),
        cmocka_unit_test(unsupported_type),
        cmocka_unit_test(corrupt_headers),
        cmocka_unit_test(contradictions),
        cmocka_unit_test(stories260k),
        cmocka_unit_test(filemap_drop),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
