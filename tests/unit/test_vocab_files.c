/* llama2.c tokenizer.bin reading: the real tok512.bin (from
 * $KVTRACE_MODEL_DIR/derived; those tests skip when it is unset) and hand-made files that
 * are truncated, hold absurd lengths or the wrong number of tokens; a Hugging Face
 * tokenizer.json whose ids disagree. */
#include "testutil.h"

#include <math.h>

#include "model/formats/hf.h"
#include "model/tokenizer/vocab.h"

#define SP "\xe2\x96\x81"

static unsigned char *tok_data; /* tok512.bin, or NULL when skipped */
static size_t tok_size;

static int setup(void **state)
{
    tu_group_setup(state);
    const char *dir = getenv("KVTRACE_MODEL_DIR");
    if (!dir || !*dir) return 0; /* the tests that need tok512.bin skip */
    char path[4096];
    snprintf(path, sizeof path, "%s/derived/tok512.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    tok_data = malloc(1 << 16);
    tok_size = fread(tok_data, 1, 1 << 16, f);
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    free(tok_data);
    return tu_group_teardown(state);
}

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
}

/* Loads path expecting `code`; on error the message is one line naming the file. */
static void expect_load(const char *path, int32_t n, int code, const char *needle)
{
    kv_vocab v;
    kv_err err = {0};
    int rc = vocab_load_llama2c(path, n, &v, &err);
    if (rc != code) printf("# %s: got %d (%s), want %d\n", path, rc, err.msg, code);
    assert_int_equal(rc, code);
    if (code) {
        printf("# %s\n", err.msg);
        assert_non_null(strstr(err.msg, path));
        assert_null(strchr(err.msg, '\n'));
        if (needle) assert_non_null(strstr(err.msg, needle));
        assert_null(v.pieces); /* freed on failure */
    } else {
        vocab_free(&v);
    }
}

static void loads_tok512(void **state)
{
    (void)state;
    if (!tok_data) tu_skip("no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)");
    kv_vocab v;
    kv_err err = {0};
    assert_int_equal(vocab_load_llama2c_buf(tok_data, tok_size, "tok512.bin", 512, &v, &err), KV_OK);
    assert_int_equal(v.n, 512);
    assert_int_equal(v.bos, 1);
    assert_int_equal(v.eos, 2);
    assert_int_equal(v.unk, 0);
    assert_int_equal(v.types[0], VOCAB_UNKNOWN);
    assert_int_equal(v.types[1], VOCAB_CONTROL);
    assert_int_equal(v.types[2], VOCAB_CONTROL);
    assert_string_equal(v.pieces[1], "\n<s>\n");
    for (int b = 0; b < 256; b++) {
        assert_int_equal(v.byte_id[b], 3 + b);
        assert_int_equal(v.types[3 + b], VOCAB_BYTE);
    }
    assert_string_equal(v.pieces[259], SP "t");
    assert_string_equal(v.pieces[410], SP);
    assert_int_equal(v.types[259], VOCAB_NORMAL);
    assert_true(v.scores[259] == 0.0f && v.scores[260] == -1.0f && v.scores[511] == -252.0f);
    assert_int_equal(vocab_find(&v, SP "Once", strlen(SP "Once")), 403);
    assert_int_equal(vocab_find(&v, " Once", 5), -1);
    assert_int_equal(vocab_find(&v, "<0x0A>", 6), 13);
    vocab_free(&v);
}

static void truncated(void **state)
{
    (void)state;
    if (!tok_data) tu_skip("no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)");
    char path[512];
    snprintf(path, sizeof path, "%s/cut.bin", tu_dir);
    /* header, inside the header, inside a score, a length, a piece, near the end */
    size_t cuts[] = {0, 2, 4, 7, 10, 12, 13, 100, tok_size / 2, tok_size - 8, tok_size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        write_file(path, tok_data, cuts[i]);
        expect_load(path, 512, KV_EINPUT, NULL);
    }
    /* a cut that still holds 8 bytes per token reaches the per-token checks */
    write_file(path, tok_data, tok_size - 3);
    expect_load(path, 512, KV_EINPUT, "token 511");
    write_file(path, tok_data, tok_size);
    expect_load(path, 512, KV_OK, NULL);
}

static void count_mismatch(void **state)
{
    (void)state;
    if (!tok_data) tu_skip("no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)");
    char path[512];
    snprintf(path, sizeof path, "%s/tok.bin", tu_dir);
    write_file(path, tok_data, tok_size);
    expect_load(path, 513, KV_EINPUT, NULL); /* fewer tokens than the model has */
    expect_load(path, 511, KV_EINPUT, "bytes left"); /* more */
    expect_load(path, 0, KV_EINPUT, NULL);
    expect_load(path, -5, KV_EINPUT, NULL);
}

/* One token with the given length field, followed by `have` bytes. */
static size_t one_token(unsigned char *buf, uint32_t len, size_t have)
{
    uint32_t max_len = 8;
    float score = -1.0f;
    memcpy(buf, &max_len, 4);
    memcpy(buf + 4, &score, 4);
    memcpy(buf + 8, &len, 4);
    memset(buf + 12, 'a', have);
    return 12 + have;
}

static void absurd_lengths(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/absurd.bin", tu_dir);
    unsigned char buf[64];
    uint32_t lens[] = {0x7fffffffu, 0x80000000u, 0xffffffffu, 53, 5};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        write_file(path, buf, one_token(buf, lens[i], 4));
        expect_load(path, 1, KV_EINPUT, "length");
    }
    write_file(path, buf, one_token(buf, 4, 4));
    expect_load(path, 1, KV_OK, NULL);
    /* the count is checked against the file size before anything is allocated */
    expect_load(path, INT32_MAX, KV_EINPUT, "cannot hold");
    /* a NUL inside a piece, a NaN score */
    one_token(buf, 4, 4);
    buf[13] = '\0';
    write_file(path, buf, 16);
    expect_load(path, 1, KV_EINPUT, "NUL");
    float not_a_number = NAN;
    one_token(buf, 4, 4);
    memcpy(buf + 4, &not_a_number, 4);
    write_file(path, buf, 16);
    expect_load(path, 1, KV_EINPUT, "NaN");
}

/* a patched length in the middle of the real file */
static void patched_length(void **state)
{
    (void)state;
    if (!tok_data) tu_skip("no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)");
    char path[512];
    snprintf(path, sizeof path, "%s/patched.bin", tu_dir);
    unsigned char *copy = malloc(tok_size);
    memcpy(copy, tok_data, tok_size);
    uint32_t big = 0x7fffffffu;
    memcpy(copy + 4 + 4, &big, 4); /* token 0's length */
    write_file(path, copy, tok_size);
    expect_load(path, 512, KV_EINPUT, "token 0 has length 2147483647");
    free(copy);
}

static void pieces_converted(void **state)
{
    (void)state;
    /* ' ' -> "▁" in normal pieces only; "<0x41>" a byte (upper-case hex only) */
    const char *pieces[] = {"<unk>", "\n<s> \n", "</s>", "a b", "<0x41>", "<0x4a>", " "};
    unsigned char buf[256];
    size_t off = 4;
    memset(buf, 0, 4);
    for (int i = 0; i < 7; i++) {
        float score = (float)-i;
        uint32_t len = (uint32_t)strlen(pieces[i]);
        memcpy(buf + off, &score, 4), memcpy(buf + off + 4, &len, 4);
        memcpy(buf + off + 8, pieces[i], len);
        off += 8 + len;
    }
    kv_vocab v;
    kv_err err = {0};
    assert_int_equal(vocab_load_llama2c_buf(buf, off, "mem", 7, &v, &err), KV_OK);
    assert_string_equal(v.pieces[1], "\n<s> \n");
    assert_string_equal(v.pieces[3], "a" SP "b");
    assert_string_equal(v.pieces[6], SP);
    assert_int_equal(v.types[4], VOCAB_BYTE);
    assert_int_equal(v.types[5], VOCAB_NORMAL);
    assert_int_equal(v.byte_id['A'], 4);
    assert_int_equal(v.byte_id['J'], -1);
    assert_int_equal(v.max_piece_len, 6);
    vocab_free(&v);
    expect_load("/nonexistent/tok.bin", 7, KV_EFAIL, "cannot open");
}

/* tokenizer.json: an added token may repeat its vocab entry, but an id given
 * two texts is refused (found by fuzz_hf_tokenizer: the last one used to win). */
static void hf_id_two_texts(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", tu_dir);
    const char *same = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"<s>\":0,\"a\":1},\"merges\":[]},"
                       "\"added_tokens\":[{\"id\":0,\"content\":\"<s>\",\"special\":true}]}";
    write_file(path, same, strlen(same));
    kv_vocab v;
    bool has = false;
    kv_err err = {0};
    assert_int_equal(hf_read_tokenizer(path, 2, &v, &has, &err), KV_OK);
    assert_true(has && strcmp(v.pieces[0], "<s>") == 0 && v.types[0] == VOCAB_CONTROL);
    vocab_free(&v);
    const char *two[] = {
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"<s>\":0,\"a\":1},\"merges\":[]},"
        "\"added_tokens\":[{\"id\":0,\"content\":\"</s>\",\"special\":true}]}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1,\"b\":1},\"merges\":[]}}",
    };
    for (int i = 0; i < 2; i++) {
        write_file(path, two[i], strlen(two[i]));
        assert_int_equal(hf_read_tokenizer(path, 2, &v, &has, &err), KV_EINPUT);
        printf("# %s\n", err.msg);
        assert_non_null(strstr(err.msg, "is given to two tokens"));
        assert_true(!has && !v.pieces);
        kv_err_clear(&err);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loads_tok512),   cmocka_unit_test(truncated),
        cmocka_unit_test(count_mismatch), cmocka_unit_test(absurd_lengths),
        cmocka_unit_test(patched_length), cmocka_unit_test(pieces_converted),
        cmocka_unit_test(hf_id_two_texts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
