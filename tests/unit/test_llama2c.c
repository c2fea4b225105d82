/* llama2.c checkpoints, random:NAME models and model_load's dispatch.
 *
 * derived/stories260K.bin + tok512.bin (from $KVTRACE_MODEL_DIR; those tests skip
 * when unset) hold the same weights as stories260K.gguf: they must load
 * bitwise equal. Tiny checkpoints written here check the section order
 * (shared and unshared classifier) and the refusals: truncation, trailing
 * bytes, impossible headers. random:NAME[:SEED] is deterministic by seed. */
#include "testutil.h"

#include <math.h>

#include "model/arch.h"
#include "model/model.h"
#include "core/model_shapes.h"

/* ---- tiny checkpoints ------------------------------------------------------ */

enum { T_DIM = 8, T_HID = 12, T_L = 2, T_H = 2, T_K = 1, T_V = 16, T_SEQ = 4 };
#define T_D (T_DIM / T_H)
#define T_KVD (T_K * T_D)

/* Floats of the tiny model in file order, without the classifier. */
static size_t tiny_floats(void)
{
    return T_V * T_DIM + T_L * (T_DIM + T_DIM * T_DIM + 2 * T_KVD * T_DIM + T_DIM * T_DIM + T_DIM +
                                3 * T_HID * T_DIM) +
           T_DIM + 2 * T_SEQ * T_D / 2;
}

static float tiny_value(size_t i)
{
    return (float)sin(0.37 * (double)i) * 0.5f;
}

/* Writes a tiny checkpoint: header h[7], then n float values (tiny_value). */
static void write_ckpt(const char *path, const int32_t *h, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(h, 4, 7, f), 7);
    for (size_t i = 0; i < n; i++) {
        float v = tiny_value(i);
        assert_int_equal(fwrite(&v, 4, 1, f), 1);
    }
    assert_int_equal(fclose(f), 0);
}

static void tiny_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s.bin", tu_dir, name);
}

static void tiny_layout(void **state)
{
    (void)state;
    char path[512];
    tiny_path(path, sizeof path, "tiny");
    const int32_t h[7] = {T_DIM, T_HID, T_L, T_H, T_K, T_V, T_SEQ};
    write_ckpt(path, h, tiny_floats());
    kv_model m;
    kv_err err = {0};
    assert_int_equal(model_load(path, NULL, &m, &err), KV_OK);
    const model_config *c = &m.cfg;
    assert_true(c->dim == T_DIM && c->ffn_dim == T_HID && c->n_layers == T_L);
    assert_true(c->n_heads == T_H && c->n_kv_heads == T_K && c->head_dim == T_D);
    assert_true(c->vocab_size == T_V && c->context_len == T_SEQ && !m.has_vocab);
    assert_string_equal(c->name, "tiny.bin");
    /* offsets of a few tensors, counted here from the format */
    size_t embd = T_V * T_DIM, rms = T_L * T_DIM, wq = T_L * T_DIM * T_DIM;
    size_t wk = T_L * T_KVD * T_DIM, wo = wq, w1 = T_L * T_HID * T_DIM;
    size_t at_wk1 = embd + rms + wq + T_KVD * T_DIM;
    size_t at_rms_ffn0 = embd + rms + wq + 2 * wk + wo;
    size_t at_w2_1 = at_rms_ffn0 + rms + w1 + T_DIM * T_HID;
    size_t at_final = at_rms_ffn0 + rms + 3 * w1;
    assert_true(((const float *)m.layers[1].wk)[0] == tiny_value(at_wk1));
    assert_true(m.layers[0].ffn_norm[0] == tiny_value(at_rms_ffn0));
    assert_true(((const float *)m.layers[1].w_down)[5] == tiny_value(at_w2_1 + 5));
    assert_true(m.output_norm[0] == tiny_value(at_final));
    assert_true(m.output == m.tok_embd);
    model_free(&m);

    /* negative vocab_size: an unshared classifier follows the freq_cis tables */
    const int32_t hu[7] = {T_DIM, T_HID, T_L, T_H, T_K, -T_V, T_SEQ};
    write_ckpt(path, hu, tiny_floats() + T_V * T_DIM);
    assert_int_equal(model_load(path, NULL, &m, &err), KV_OK);
    assert_true(m.output != m.tok_embd && m.cfg.vocab_size == T_V);
    assert_true(((const float *)m.output)[0] == tiny_value(tiny_floats()));
    model_free(&m);
}

/* The header h with n floats must fail with KV_EINPUT and `word`. */
static void expect_bad_ckpt(const char *name, const int32_t *h, size_t n, const char *word)
{
    char path[512];
    tiny_path(path, sizeof path, name);
    write_ckpt(path, h, n);
    kv_model m;
    kv_err err = {0};
    int rc = model_load(path, NULL, &m, &err);
    printf("# %s: %s\n", name, err.msg);
    assert_int_equal(rc, KV_EINPUT);
    assert_non_null(strstr(err.msg, path));
    assert_null(strchr(err.msg, '\n'));
    if (!strstr(err.msg, word)) fail_msg("%s: message lacks '%s'", name, word);
    assert_null(m.layers);
}

static void bad_checkpoints(void **state)
{
    (void)state;
    const int32_t good[7] = {T_DIM, T_HID, T_L, T_H, T_K, T_V, T_SEQ};
    size_t n = tiny_floats();
    expect_bad_ckpt("truncated", good, n - 1, "truncated");
    expect_bad_ckpt("trailing", good, n + 3, "unexpected trailing bytes");
    int32_t h[7];
    memcpy(h, good, sizeof h);
    h[3] = 0;
    expect_bad_ckpt("heads0", h, n, "n_heads 0");
    memcpy(h, good, sizeof h);
    h[4] = 3;
    expect_bad_ckpt("kvheads3", h, n, "n_kv_heads = 3");
    memcpy(h, good, sizeof h);
    h[5] = 0;
    expect_bad_ckpt("vocab0", h, n, "vocab_size 0");
    memcpy(h, good, sizeof h);
    h[2] = 1 << 30;
    expect_bad_ckpt("layers", h, n, "n_layers = 1073741824 is outside");
    memcpy(h, good, sizeof h);
    h[0] = 0x616b3432; /* "ak42" */
    expect_bad_ckpt("versioned", h, n, "legacy format");
    char path[512];
    tiny_path(path, sizeof path, "short");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(good, 4, 3, f), 3);
    fclose(f);
    kv_model m;
    kv_err err = {0};
    assert_int_equal(model_load(path, NULL, &m, &err), KV_EINPUT);
    assert_non_null(strstr(err.msg, "28-byte header"));
}

/* ---- stories260K: the llama2.c files against the GGUF --------------------- */

static void same_floats(const char *what, const float *a, const float *b, size_t n)
{
    if (memcmp(a, b, n * sizeof *a) != 0) {
        for (size_t i = 0; i < n; i++)
            if (memcmp(&a[i], &b[i], sizeof *a) != 0)
                fail_msg("%s[%zu]: %.9g vs %.9g", what, i, (double)a[i], (double)b[i]);
    }
}

static void stories_bitwise(void **state)
{
    (void)state;
    const char *dir = tu_model_dir();
    char gguf[4096], bin[4096], tok[4096];
    snprintf(gguf, sizeof gguf, "%s/stories260K.gguf", dir);
    snprintf(bin, sizeof bin, "%s/derived/stories260K.bin", dir);
    snprintf(tok, sizeof tok, "%s/derived/tok512.bin", dir);
    kv_model a, b;
    kv_err err = {0};
    assert_int_equal(model_load(gguf, NULL, &a, &err), KV_OK);
    int rc = model_load(bin, tok, &b, &err);
    if (rc) printf("# %s\n", err.msg);
    assert_int_equal(rc, KV_OK);
    const model_config *c = &b.cfg;
    assert_true(c->dim == 64 && c->ffn_dim == 172 && c->n_layers == 5 && c->n_heads == 8);
    assert_true(c->n_kv_heads == 4 && c->head_dim == 8 && c->vocab_size == 512);
    assert_true(c->context_len == 512 && c->rope == ROPE_INTERLEAVED);
    assert_true(b.has_vocab && b.vocab.n == 512 && b.vocab.bos == 1 && b.vocab.eos == 2);
    size_t dim = 64, ffn = 172, kvd = 32, V = 512;
    same_floats("tok_embd", a.tok_embd, b.tok_embd, V * dim);
    same_floats("output", a.output, b.output, V * dim);
    same_floats("output_norm", a.output_norm, b.output_norm, dim);
    for (int l = 0; l < 5; l++) {
        const model_layer *x = &a.layers[l], *y = &b.layers[l];
        same_floats("attn_norm", x->attn_norm, y->attn_norm, dim);
        same_floats("ffn_norm", x->ffn_norm, y->ffn_norm, dim);
        same_floats("wq", x->wq, y->wq, dim * dim);
        same_floats("wk", x->wk, y->wk, kvd * dim);
        same_floats("wv", x->wv, y->wv, kvd * dim);
        same_floats("wo", x->wo, y->wo, dim * dim);
        same_floats("w_gate", x->w_gate, y->w_gate, ffn * dim);
        same_floats("w_up", x->w_up, y->w_up, ffn * dim);
        same_floats("w_down", x->w_down, y->w_down, dim * ffn);
    }
    printf("# stories260K.bin: every weight bitwise equal to stories260K.gguf\n");
    model_free(&a);
    model_free(&b);
}

/* ---- random:NAME[:SEED] ---------------------------------------------------- */

static void random_models(void **state)
{
    (void)state;
    kv_model a, b, c;
    kv_err err = {0};
    assert_int_equal(model_load("random:stories260k:7", NULL, &a, &err), KV_OK);
    assert_int_equal(model_load("random:stories260k:7", NULL, &b, &err), KV_OK);
    assert_int_equal(model_load("random:stories260k:8", NULL, &c, &err), KV_OK);
    assert_true(a.cfg.n_layers == 5 && a.cfg.vocab_size == 512 && a.cfg.head_dim == 8);
    assert_true(!a.has_vocab && a.cfg.rope == ROPE_INTERLEAVED);
    assert_string_equal(a.cfg.name, "random:stories260k:7");
    size_t dim = 64, ffn = 172;
    same_floats("tok_embd", a.tok_embd, b.tok_embd, 512 * dim);
    for (int l = 0; l < 5; l++) {
        same_floats("wq", a.layers[l].wq, b.layers[l].wq, dim * dim);
        same_floats("w_down", a.layers[l].w_down, b.layers[l].w_down, dim * ffn);
        assert_true(memcmp(a.layers[l].wk, c.layers[l].wk, 32 * dim * sizeof(float)) != 0);
        assert_true(a.layers[l].attn_norm[7] == 1.0f && a.layers[l].ffn_norm[0] == 1.0f);
    }
    /* variance 1/fan_in: w_down has fan-in 172 */
    double s = 0, s2 = 0;
    size_t n = dim * ffn;
    const float *w = a.layers[2].w_down; /* [dim][ffn] */
    for (size_t i = 0; i < n; i++) s += w[i], s2 += (double)w[i] * w[i];
    double var = s2 / (double)n - (s / (double)n) * (s / (double)n);
    printf("# random w_down: mean %.4f, var %.5f (want %.5f)\n", s / (double)n, var, 1.0 / 172);
    assert_true(fabs(var * 172 - 1) < 0.1 && fabs(s / (double)n) < 0.01);
    assert_true(memcmp(a.tok_embd, c.tok_embd, 512 * dim * sizeof(float)) != 0);
    assert_true(!a.layers[0].bq && !a.layers[0].q_norm && !a.rope_div && !a.cfg.rope_scaling[0]);
    model_free(&a);
    model_free(&b);
    model_free(&c);
    /* the big shapes carry their architecture's features, which random:NAME
     * takes from the architecture's row (loading them takes GiBs) */
    const model_shape *q2 = model_shape_find("qwen2.5-7b"), *q3 = model_shape_find("qwen3-8b");
    const model_shape *l1 = model_shape_find("llama-3.2-1b"), *l8 = model_shape_find("llama-3.1-8b");
    const model_arch *a2 = arch_find(q2->architecture), *a3 = arch_find(q3->architecture);
    const model_arch *al = arch_find(l1->architecture);
    assert_true(a2->qkv_bias && !a2->qk_norm && q2->llama3_factor == 0);
    assert_true(a3->qk_norm && !a3->qkv_bias && q3->llama3_factor == 0);
    assert_true(l1->llama3_factor == 32.0 && l8->llama3_factor == 8.0 && !al->qkv_bias);
    /* the shape table's rope style and architecture */
    assert_int_equal(model_load("random:stories260k", NULL, &a, &err), KV_OK);
    model_free(&a);
}

static void expect_code(const char *spec, const char *tok, int code, const char *word)
{
    kv_model m;
    kv_err err = {0};
    int rc = model_load(spec, tok, &m, &err);
    printf("# %s: %s\n", spec ? spec : "(null)", err.msg);
    assert_int_equal(rc, code);
    if (!strstr(err.msg, word)) fail_msg("%s: message lacks '%s'", spec, word);
}

static void spec_errors(void **state)
{
    (void)state;
    expect_code("random:nope", NULL, KV_EUSAGE, "unknown model shape");
    expect_code("random:stories260k:-1", NULL, KV_EUSAGE, "seed '-1'");
    expect_code("random:stories260k:99999999999999999999", NULL, KV_EUSAGE, "seed");
    expect_code("random:stories260k:7", "tok.bin", KV_EFAIL, "tok.bin: cannot open"); /* a random model reads --tokenizer */
    expect_code("random:llama-3.1-8b", NULL, KV_EUSAGE, "GiB of float32 weights is over the 8 GiB");
    setenv("KVTRACE_RANDOM_MAX_GB", "0.0001", 1);
    expect_code("random:stories260k", NULL, KV_EUSAGE, "over the 0.0001 GiB limit");
    setenv("KVTRACE_RANDOM_MAX_GB", "lots", 1);
    expect_code("random:stories260k", NULL, KV_EUSAGE, "KVTRACE_RANDOM_MAX_GB");
    unsetenv("KVTRACE_RANDOM_MAX_GB");
    char path[512];
    snprintf(path, sizeof path, "%s/does-not-exist.bin", tu_dir);
    expect_code(path, NULL, KV_EFAIL, path);
    /* a directory is a Hugging Face checkpoint: without config.json, an input error */
    expect_code(tu_dir, NULL, KV_EINPUT, "needs config.json");
    expect_code(tu_dir, "tok.bin", KV_EUSAGE, "--tokenizer");
    expect_code("", NULL, KV_EUSAGE, "no model");
    expect_code(NULL, NULL, KV_EUSAGE, "no model");
    /* the table's order: an empty file is refused before any format sees it,
     * a .gguf name claims a file for GGUF (refusing --tokenizer before it is
     * read), anything else that opens is a llama2.c checkpoint */
    char empty[512], named[512];
    snprintf(empty, sizeof empty, "%s/empty.bin", tu_dir);
    snprintf(named, sizeof named, "%s/garbage.GGUF", tu_dir);
    FILE *f = fopen(empty, "wb");
    assert_non_null(f);
    fclose(f);
    expect_code(empty, NULL, KV_EINPUT, "empty file");
    expect_code(empty, "tok.bin", KV_EINPUT, "empty file");
    const int32_t h[7] = {T_DIM, T_HID, T_L, T_H, T_K, T_V, T_SEQ};
    write_ckpt(named, h, tiny_floats());
    expect_code(named, NULL, KV_EINPUT, "not a GGUF file");
    expect_code(named, "tok.bin", KV_EUSAGE, "a GGUF holds its own vocabulary");
    expect_code("/dev/null", NULL, KV_EINPUT, "not a regular file");
    expect_code("random:stories260k", "tok.bin", KV_EFAIL, "tok.bin: cannot open"); /* a random model reads it */
}

/* the same refusals on the real files */
static void stories_spec_errors(void **state)
{
    (void)state;
    const char *dir = tu_model_dir();
    char path[4096];
    snprintf(path, sizeof path, "%s/stories260K.gguf", dir);
    expect_code(path, "tok.bin", KV_EUSAGE, "--tokenizer");
    snprintf(path, sizeof path, "%s/derived/stories260K.bin", dir);
    expect_code(path, "/nonexistent/tok.bin", KV_EFAIL, "/nonexistent/tok.bin");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_layout),
        cmocka_unit_test(bad_checkpoints),
        cmocka_unit_test(stories_bitwise),
        cmocka_unit_test(random_models),
        cmocka_unit_test(spec_errors),
        cmocka_unit_test(stories_spec_errors),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
