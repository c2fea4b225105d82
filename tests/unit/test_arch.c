/* The table of architectures (model/arch.c): every row is an architecture
 * the trace format accepts and fits the config's and the trace's name
 * field; every model shape names a row; the look-ups by source and the
 * names the loaders' messages list; what a row puts into a config. The
 * behaviour each row's features select is tested end to end by
 * tests/scripts/test_hf.py and test_gguf_types.py. */
#include "testutil.h"

#include "model/arch.h"
#include "core/model_shapes.h"
#include "trace/trace.h"

/* A trace meta that trace_meta_check accepts, of architecture `arch`. */
static trace_meta meta_of(const char *arch)
{
    trace_meta m = {0};
    snprintf(m.architecture, sizeof m.architecture, "%s", arch);
    snprintf(m.rope_style, sizeof m.rope_style, "neox");
    snprintf(m.capture_mode, sizeof m.capture_mode, "full");
    m.n_layers = 2, m.n_heads = 4, m.n_kv_heads = 2, m.head_dim = 8, m.vocab_size = 32;
    m.n_tokens = 10, m.prompt_len = 4, m.rope_theta = 10000.0;
    return m;
}

static void rows_are_trace_architectures(void **state)
{
    (void)state;
    kv_err err = {0};
    int n = 0;
    for (const model_arch *a = arch_all(); a->name; a++, n++) {
        trace_meta m = meta_of(a->name);
        assert_true(strlen(a->name) < sizeof m.architecture);
        assert_true(strlen(a->name) < sizeof ((model_config *)0)->architecture);
        if (trace_meta_check(&m, "t.h5", true, &err) != KV_OK)
            fail_msg("architecture %s: the trace schema refuses it: %s", a->name, err.msg);
    }
    printf("# %d architectures, all accepted by the trace schema\n", n);
    assert_true(n >= 4);
    trace_meta bad = meta_of("gpt2"); /* the check does look at the name */
    assert_int_equal(trace_meta_check(&bad, "t.h5", true, &err), KV_EINPUT);
    assert_non_null(strstr(err.msg, "architecture"));
}

static void shapes_name_rows(void **state)
{
    (void)state;
    for (const model_shape *s = model_shape_all(); s->name; s++) {
        if (!arch_find(s->architecture))
            fail_msg("shape %s: architecture %s has no row", s->name, s->architecture);
        rope_style r;
        assert_true(rope_style_parse(s->rope_style, &r));
    }
}

static void lookups(void **state)
{
    (void)state;
    const model_arch *llama = arch_find("llama"), *mistral = arch_find("mistral");
    const model_arch *qwen2 = arch_find("qwen2"), *qwen3 = arch_find("qwen3");
    assert_true(llama && mistral && qwen2 && qwen3);
    assert_null(arch_find("gpt2"));
    assert_null(arch_find("LlamaForCausalLM")); /* a class name is the HF look-up's */
    /* Hugging Face: model_type or the class of architectures[0] */
    assert_ptr_equal(arch_find_hf("llama"), llama);
    assert_ptr_equal(arch_find_hf("LlamaForCausalLM"), llama);
    assert_ptr_equal(arch_find_hf("MistralForCausalLM"), mistral);
    assert_ptr_equal(arch_find_hf("Qwen2ForCausalLM"), qwen2);
    assert_ptr_equal(arch_find_hf("qwen3"), qwen3);
    assert_null(arch_find_hf("GPT2LMHeadModel"));
    /* GGUF: llama.cpp writes mistral as llama */
    assert_ptr_equal(arch_find_gguf("llama"), llama);
    assert_ptr_equal(arch_find_gguf("qwen2"), qwen2);
    assert_null(arch_find_gguf("mistral"));
    assert_null(arch_find_gguf("Qwen2ForCausalLM"));
    /* the loaders' messages list the rows */
    char buf[128];
    assert_string_equal(arch_names(buf, sizeof buf, false), "llama, mistral, qwen2 and qwen3");
    assert_string_equal(arch_names(buf, sizeof buf, true), "llama, qwen2 and qwen3");
    char small[8];
    assert_string_equal(arch_names(small, sizeof small, false), "llama, "); /* truncated */
}

static void features(void **state)
{
    (void)state;
    /* RoPE layout per source: llama.cpp's rope type, transformers' rotate-half */
    assert_int_equal(arch_find("llama")->gguf_rope, ROPE_INTERLEAVED);
    assert_int_equal(arch_find("qwen2")->gguf_rope, ROPE_NEOX);
    assert_int_equal(arch_find("qwen3")->gguf_rope, ROPE_NEOX);
    for (const model_arch *a = arch_all(); a->name; a++) assert_int_equal(a->hf_rope, ROPE_NEOX);
    /* sliding windows: LlamaConfig none, MistralConfig always, Qwen only when switched on */
    assert_null(arch_find("llama")->hf_window);
    assert_string_equal(arch_find("mistral")->hf_window, "sliding_window");
    assert_null(arch_find("mistral")->hf_window_switch);
    assert_string_equal(arch_find("qwen3")->hf_window_switch, "use_sliding_window");
    /* arch_apply: name and features, nothing else */
    model_config c = {.n_layers = 3, .rope = ROPE_INTERLEAVED, .sliding_window = 7};
    arch_apply(arch_find("qwen2"), &c);
    assert_string_equal(c.architecture, "qwen2");
    assert_true(c.qkv_bias && !c.qk_norm);
    assert_true(c.n_layers == 3 && c.rope == ROPE_INTERLEAVED && c.sliding_window == 7);
    arch_apply(arch_find("qwen3"), &c);
    assert_true(!c.qkv_bias && c.qk_norm);
    assert_true(model_has(&c, MODEL_NEED_QK_NORM) && !model_has(&c, MODEL_NEED_QKV_BIAS));
    assert_true(model_has(&c, MODEL_NEED_ALL));
    arch_apply(arch_find("llama"), &c);
    assert_string_equal(c.architecture, "llama");
    assert_true(!c.qkv_bias && !c.qk_norm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_are_trace_architectures),
        cmocka_unit_test(shapes_name_rows),
        cmocka_unit_test(lookups),
        cmocka_unit_test(features),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
