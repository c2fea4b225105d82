/* SentencePiece-BPE encoding and decoding: against stories260K's golden ids
 * (tok512.bin from $KVTRACE_MODEL_DIR/derived; those tests skip when it is unset), against
 * a naive O(n^2) merge written here, and on hand-made vocabularies for merge
 * priority, tie-breaking and fallbacks. */
#include "testutil.h"

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

#define SP "\xe2\x96\x81" /* "▁" */
#include "tests/spm_reference.h"

static kv_vocab tok512;
static bool have_tok512;

static int load_tok512(void **state)
{
    (void)state;
    const char *dir = getenv("KVTRACE_MODEL_DIR");
    if (!dir || !*dir) return 0; /* the tests that need tok512.bin skip */
    char path[4096];
    snprintf(path, sizeof path, "%s/derived/tok512.bin", dir);
    kv_err err = {0};
    if (vocab_load_llama2c(path, 512, &tok512, &err)) {
        printf("# cannot load %s: %s\n", path, err.msg);
        return -1;
    }
    have_tok512 = true;
    return 0;
}

static int free_tok512(void **state)
{
    (void)state;
    if (have_tok512) vocab_free(&tok512);
    return 0;
}

/* Encodes text and compares with want[0..nwant), printing both on mismatch. */
static void expect_ids(const kv_vocab *v, const char *text, bool bos, const int32_t *want, int64_t nwant)
{
    int32_t *ids = NULL;
    int64_t n = -1;
    kv_err err = {0};
    assert_int_equal(tokenizer_encode(v, text, strlen(text), bos, &ids, &n, &err), KV_OK);
    bool same = n == nwant && (n == 0 || memcmp(ids, want, (size_t)n * sizeof *ids) == 0);
    if (!same) {
        printf("# encode(\"%s\"): got", text);
        for (int64_t i = 0; i < n; i++) printf(" %d", ids[i]);
        printf("; want");
        for (int64_t i = 0; i < nwant; i++) printf(" %d", want[i]);
        printf("\n");
    }
    free(ids);
    assert_true(same);
}

static void golden_sentence(void **state)
{
    (void)state;
    if (!have_tok512) tu_skip("no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)");
    static const int32_t want[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};
    expect_ids(&tok512, "Once upon a time, there was a little girl named Lily.", true, want, 16);
    static const int32_t once[] = {1, 403, 407, 261, 378};
    expect_ids(&tok512, "Once upon a time", true, once, 5);
    expect_ids(&tok512, "Once upon a time", false, once + 1, 4);
}

static void empty_prompt(void **state)
{
    (void)state;
    if (!have_tok512) tu_skip("no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)");
    static const int32_t bos[] = {1};
    expect_ids(&tok512, "", true, bos, 1);
    expect_ids(&tok512, "", false, bos, 0);
}

static void byte_fallback(void **state)
{
    (void)state;
    if (!have_tok512) tu_skip("no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)");
    /* "é" is a piece (485); "中" (E4 B8 AD) and "\n" are not: bytes, id = 3 + byte */
    const char *text = "\xc3\xa9\xe4\xb8\xad\n";
    const int32_t want[] = {1, 410, 485, 3 + 0xe4, 3 + 0xb8, 3 + 0xad, 3 + '\n'};
    expect_ids(&tok512, text, true, want, 7);
    char *back = tokenizer_decode(&tok512, want, 7);
    assert_non_null(back);
    assert_string_equal(back, text);
    free(back);
    /* a malformed UTF-8 byte is a symbol of its own, and its byte token */
    const int32_t bad[] = {1, 410, 3 + 0xc3, 411};
    expect_ids(&tok512, "\xc3" "e", true, bad, 4);
}

/* greedy_from_bos.tokens[0..20) of stories260K.golden.json, whose "text" is
 * the decoded ids after BOS with the leading dummy-prefix space kept:
 * " Once upon a time, there was a little girl named Lily. She loved to play ..." */
static void decode_golden(void **state)
{
    (void)state;
    if (!have_tok512) tu_skip("no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)");
    static const int32_t ids[20] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376,
                                    298, 315, 421, 395, 317, 426, 338, 401, 396, 267};
    const char *json_prefix = " Once upon a time, there was a little girl named Lily. She loved to";
    char *text = tokenizer_decode(&tok512, ids + 1, 19);
    assert_string_equal(text, json_prefix);
    free(text);
    /* with BOS first, the space after it goes, as llama2.c prints it */
    text = tokenizer_decode(&tok512, ids, 20);
    assert_string_equal(text, json_prefix + 1);
    free(text);
    char buf[8];
    assert_int_equal(tokenizer_piece_text(&tok512, 1, 403, buf, sizeof buf), 4);
    assert_string_equal(buf, "Once");
    assert_int_equal(tokenizer_piece_text(&tok512, 403, 407, buf, 3), 5); /* " upon", truncated */
    assert_string_equal(buf, " u");
    assert_int_equal(tokenizer_piece_text(&tok512, -1, 1, buf, sizeof buf), 0); /* BOS: nothing */
    assert_int_equal(tokenizer_piece_text(&tok512, -1, 3 + 'A', buf, sizeof buf), 1);
    assert_string_equal(buf, "A");
    assert_int_equal(tokenizer_piece_text(&tok512, -1, 512, buf, sizeof buf), 0);
}

static char *random_text(size_t size, uint64_t seed)
{
    static const char *words[] = {"Once", "upon", "a", "time", "there", "was", "little", "girl",
                                  "named", "Lily", "She", "loved", "to", "play", "park", ",",
                                  ".", "\n", "  ", "caf\xc3\xa9", "\xe2\x82\xac", "\xe4\xb8\xad",
                                  "x", "qz", "The", "!", "'", "\"", "\xf0\x9f\x99\x82", "tree"};
    char *t = malloc(size + 16);
    size_t n = 0;
    while (n < size) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        const char *w = words[seed % (sizeof words / sizeof *words)];
        size_t k = strlen(w);
        memcpy(t + n, w, k), n += k;
        if (seed % 3) t[n++] = ' ';
    }
    t[n] = '\0';
    return t;
}

static void matches_naive_merge(void **state)
{
    (void)state;
    if (!have_tok512) tu_skip("no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)");
    for (uint64_t seed = 1; seed <= 20; seed++) {
        char *text = random_text(seed == 20 ? 6000 : 50 * seed, seed * 0x9e3779b97f4a7c15ull);
        int32_t *ids = NULL, *ref = malloc((3 * strlen(text) + 5) * sizeof *ref);
        int64_t n = 0;
        kv_err err = {0};
        assert_int_equal(tokenizer_encode(&tok512, text, strlen(text), true, &ids, &n, &err), KV_OK);
        int64_t nref = naive_encode(&tok512, (const uint8_t *)text, strlen(text), ref);
        assert_int_equal(n, nref);
        assert_memory_equal(ids, ref, (size_t)n * sizeof *ids);
        free(ids), free(ref), free(text);
    }
}

static void long_prompt_round_trip(void **state)
{
    (void)state;
    if (!have_tok512) tu_skip("no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)");
    char *text = random_text(100 * 1024, 42);
    size_t len = strlen(text);
    int32_t *ids = NULL;
    int64_t n = 0;
    kv_err err = {0};
    assert_int_equal(tokenizer_encode(&tok512, text, len, true, &ids, &n, &err), KV_OK);
    printf("# %zu bytes -> %lld tokens\n", len, (long long)n);
    assert_true(n > 1000 && n <= (int64_t)len + 1);
    size_t blen = 0;
    char *back = tokenizer_decode_len(&tok512, ids, n, &blen);
    assert_int_equal(blen, len);
    assert_memory_equal(back, text, len);
    free(back), free(ids), free(text);
}

/* ---- a hand-made vocabulary ---- */

typedef struct {
    const char *piece;
    float score;
    uint8_t type;
} tiny_token;

static void make_vocab(kv_vocab *v, const tiny_token *t, int32_t n, bool prefix)
{
    kv_err err = {0};
    assert_int_equal(vocab_init(v, n, &err), KV_OK);
    for (int32_t i = 0; i < n; i++)
        assert_int_equal(vocab_set(v, i, t[i].piece, strlen(t[i].piece), t[i].score, t[i].type, &err), KV_OK);
    v->add_space_prefix = prefix;
    v->bos = 1;
    v->unk = t[0].type == VOCAB_UNKNOWN ? 0 : -1;
    assert_int_equal(vocab_finish(v, "tiny", &err), KV_OK);
}

static void merge_priority_and_ties(void **state)
{
    (void)state;
    static const tiny_token t[] = {
        {"<unk>", 0, VOCAB_UNKNOWN}, {"<s>", 0, VOCAB_CONTROL}, {"a", 0, VOCAB_NORMAL},  /* 0-2 */
        {"b", 0, VOCAB_NORMAL},      {"c", 0, VOCAB_NORMAL},    {"ab", -1, VOCAB_NORMAL}, /* 3-5 */
        {"bc", 0, VOCAB_NORMAL},     {"aa", -3, VOCAB_NORMAL},  {"aab", -9, VOCAB_NORMAL}, /* 6-8 */
        {"cc", -1, VOCAB_NORMAL},    {"ccc", -5, VOCAB_NORMAL}, {SP, -2, VOCAB_NORMAL},    /* 9-11 */
        {SP "a", -4, VOCAB_NORMAL},  {"<0x7A>", 0, VOCAB_BYTE},                            /* 12-13 */
    };
    kv_vocab v;
    make_vocab(&v, t, 14, false);
    expect_ids(&v, "abc", false, (const int32_t[]){2, 6}, 2);        /* bc (0) beats ab (-1) */
    expect_ids(&v, "aaa", false, (const int32_t[]){7, 2}, 2);        /* equal pairs: leftmost */
    expect_ids(&v, "aaaa", false, (const int32_t[]){7, 7}, 2);
    expect_ids(&v, "aab", false, (const int32_t[]){8}, 1);           /* a + ab, then aab */
    expect_ids(&v, "ccccc", false, (const int32_t[]){9, 10}, 2);     /* cc,c,c,c; cc,cc,c; cc,ccc */
    expect_ids(&v, "abab", false, (const int32_t[]){5, 5}, 2);
    expect_ids(&v, "a b", false, (const int32_t[]){2, 11, 3}, 3);     /* ' ' is "▁" */
    expect_ids(&v, "z", true, (const int32_t[]){1, 13}, 2);           /* byte token */
    expect_ids(&v, "y", false, (const int32_t[]){0}, 1);              /* no byte token: unk */
    v.add_space_prefix = true;
    expect_ids(&v, "a", true, (const int32_t[]){1, 12}, 2);           /* "▁a" */
    char *s = tokenizer_decode(&v, (const int32_t[]){1, 12, 0, 13, 11}, 5);
    assert_string_equal(s, "a<unk>z ");
    free(s);
    vocab_free(&v);
}

static void vocab_lookup(void **state)
{
    (void)state;
    static const tiny_token t[] = {
        {"b", 0, VOCAB_NORMAL}, {"a", 0, VOCAB_NORMAL}, {"ab", 0, VOCAB_NORMAL},
        {"a", -1, VOCAB_NORMAL}, {"", 0, VOCAB_UNUSED}, {"<0x41>", 0, VOCAB_BYTE},
    };
    kv_vocab v;
    make_vocab(&v, t, 6, true);
    assert_int_equal(vocab_find(&v, "a", 1), 3); /* duplicate piece: the highest id, as llama.cpp */
    assert_int_equal(vocab_find(&v, "ab", 2), 2);
    assert_int_equal(vocab_find(&v, "abc", 2), 2);
    assert_int_equal(vocab_find(&v, "b", 1), 0);
    assert_int_equal(vocab_find(&v, "c", 1), -1);
    assert_int_equal(vocab_find(&v, "a\0", 2), -1);
    assert_int_equal(vocab_find(&v, "", 0), 4);
    assert_int_equal(v.byte_id['A'], 5);
    assert_int_equal(v.byte_id['B'], -1);
    assert_int_equal(v.max_piece_len, 6);
    vocab_free(&v);
    /* no byte token, no one-byte piece, no unk: the byte cannot be encoded */
    make_vocab(&v, t, 3, false);
    int32_t *ids = NULL;
    int64_t n = 0;
    kv_err err = {0};
    assert_int_equal(tokenizer_encode(&v, "az", 2, false, &ids, &n, &err), KV_EINPUT);
    assert_null(ids);
    assert_non_null(strstr(err.msg, "0x7A"));
    kv_err_clear(&err);
    v.bos = -1;
    assert_int_equal(tokenizer_encode(&v, "a", 1, true, &ids, &n, &err), KV_EINPUT);
    vocab_free(&v);
}

static void vocab_errors(void **state)
{
    (void)state;
    kv_vocab v;
    kv_err err = {0};
    assert_int_equal(vocab_init(&v, 0, &err), KV_EINPUT);
    kv_err_clear(&err);
    assert_int_equal(vocab_init(&v, 3, &err), KV_OK);
    assert_int_equal(vocab_set(&v, 3, "x", 1, 0, VOCAB_NORMAL, &err), KV_EFAIL);
    kv_err_clear(&err);
    assert_int_equal(vocab_set(&v, 0, "x\0y", 3, 0, VOCAB_NORMAL, &err), KV_EINPUT);
    kv_err_clear(&err);
    assert_int_equal(vocab_set(&v, 0, "x", 1, 0, 9, &err), KV_EINPUT);
    kv_err_clear(&err);
    assert_int_equal(vocab_set(&v, 0, "x", 1, 0, VOCAB_NORMAL, &err), KV_OK);
    assert_int_equal(vocab_finish(&v, "f.gguf", &err), KV_EINPUT); /* tokens 1, 2 unset */
    assert_non_null(strstr(err.msg, "f.gguf: token 1"));
    kv_err_clear(&err);
    assert_int_equal(vocab_set(&v, 1, "y", 1, 0, VOCAB_NORMAL, &err), KV_OK);
    assert_int_equal(vocab_set(&v, 2, "z", 1, 0, VOCAB_NORMAL, &err), KV_OK);
    v.eos = 3;
    assert_int_equal(vocab_finish(&v, "f.gguf", &err), KV_EINPUT);
    assert_non_null(strstr(err.msg, "EOS"));
    vocab_free(&v);
}

static void byte_bpe(void **state)
{
    (void)state;
    static const tiny_token t[] = {
        {"<|begin_of_text|>", 0, VOCAB_CONTROL}, {"\xc4\xa0hello", 0, VOCAB_NORMAL},
        {"\xc4\x8a", 0, VOCAB_NORMAL}, {"caf\xc3\x83\xc2\xa9", 0, VOCAB_NORMAL},
    };
    kv_vocab v;
    make_vocab(&v, t, 4, false);
    v.kind = VOCAB_BYTE_BPE;
    v.bos = 0;
    int32_t *ids = NULL;
    int64_t n = 0;
    kv_err err = {0};
    assert_int_equal(tokenizer_encode(&v, "hi", 2, true, &ids, &n, &err), KV_EUSAGE);
    assert_non_null(strstr(err.msg, "--tokens"));
    assert_null(ids);
    /* "Ġ" is ' ', "Ċ" is '\n', "Ã©" is the two bytes of "é"; no space stripped after BOS,
     * which prints as its text (the reference decoders keep special tokens) */
    char *s = tokenizer_decode(&v, (const int32_t[]){0, 1, 2, 3}, 4);
    assert_string_equal(s, "<|begin_of_text|> hello\ncaf\xc3\xa9");
    free(s);
    vocab_free(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(golden_sentence),       cmocka_unit_test(empty_prompt),
        cmocka_unit_test(byte_fallback),         cmocka_unit_test(decode_golden),
        cmocka_unit_test(matches_naive_merge),   cmocka_unit_test(long_prompt_round_trip),
        cmocka_unit_test(merge_priority_and_ties), cmocka_unit_test(vocab_lookup),
        cmocka_unit_test(vocab_errors),          cmocka_unit_test(byte_bpe),
    };
    return cmocka_run_group_tests(tests, load_tok512, free_tok512);
}
