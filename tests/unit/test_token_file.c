/* --tokens files: the accepted forms, and one-line KV_EINPUT errors naming
 * the file for everything else. */
#include "testutil.h"

#include "model/tokenizer/token_file.h"

enum { V = 512 };

static void write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Writes text to a file, reads it, returns the code; ids compared on success. */
static int check_file(const char *text, size_t len, const int32_t *want, int64_t nwant,
                      const char *needle)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tokens.txt", tu_dir);
    write_file(path, text, len);
    int32_t *ids = (int32_t *)&ids; /* must be overwritten */
    int64_t n = -1;
    kv_err err = {0};
    int rc = token_file_read(path, V, &ids, &n, &err);
    if (rc == KV_OK) {
        assert_int_equal(n, nwant);
        assert_memory_equal(ids, want, (size_t)n * sizeof *ids);
        free(ids);
    } else {
        printf("# %s\n", err.msg);
        assert_int_equal(rc, KV_EINPUT);
        assert_null(ids);
        assert_int_equal(n, 0);
        assert_non_null(strstr(err.msg, path));
        assert_null(strchr(err.msg, '\n'));
        if (needle && !strstr(err.msg, needle)) printf("# (wanted \"%s\")\n", needle);
        if (needle) assert_non_null(strstr(err.msg, needle));
    }
    return rc;
}

#define OK(text, ...)                                                                        \
    do {                                                                                     \
        static const int32_t w_[] = {__VA_ARGS__};                                           \
        assert_int_equal(check_file(text, strlen(text), w_, sizeof w_ / sizeof *w_, NULL), KV_OK); \
    } while (0)
#define BAD(text, needle) assert_int_equal(check_file(text, sizeof text - 1, NULL, 0, needle), KV_EINPUT)

static void accepted_forms(void **state)
{
    (void)state;
    OK("1 403 407 261 378", 1, 403, 407, 261, 378);
    OK("1 403 407 261 378\n", 1, 403, 407, 261, 378);
    OK("1,403,407", 1, 403, 407);
    OK("1, 403 ,407\n261\t378\r\n", 1, 403, 407, 261, 378);
    OK("\n\n  7  \n\n", 7);
    OK("0 511", 0, 511);
    OK("[1, 2, 3]", 1, 2, 3);
    OK("[\n  1,\n  403,\n  407\n]\n", 1, 403, 407);
    OK("  [511]  ", 511);
    OK("[1,2 , 3 ,4]", 1, 2, 3, 4);
    OK("\xef\xbb\xbf" "5 6", 5, 6); /* UTF-8 byte-order mark */
    OK("007", 7);
    OK("-0", 0);
}

static void syntax_errors(void **state)
{
    (void)state;
    BAD("", "empty");
    BAD("  \n\t\n", "no token ids");
    BAD("[]", "no token ids");
    BAD("[ \n ]\n", "no token ids");
    BAD("1 2 x", "line 1, column 5: unexpected 'x'");
    BAD("1 2\n3 x4", "line 2, column 3: unexpected 'x'");
    BAD("12x", "column 3: unexpected 'x'");
    BAD("[1, [2]]", "column 5: unexpected '['");
    BAD("[1.5]", "column 3: unexpected '.'");
    BAD("1.5", "unexpected '.'");
    BAD("[1e3]", "unexpected 'e'");
    BAD("[\"1\"]", "unexpected '\"'");
    BAD("1,,2", "column 3: empty field");
    BAD(",1", "column 1: empty field");
    BAD("1,", "column 2: empty field");
    BAD("1, 2,\n", "line 1, column 5: empty field");
    BAD("[1,]", "unexpected ']'");
    BAD("[1 2]", "unexpected '2'");
    BAD("[1, 2", "unexpected end of file");
    BAD("[1, 2,", "unexpected end of file");
    BAD("[", "unexpected end of file");
    BAD("[1] 2", "unexpected '2'");
    BAD("[1][2]", "unexpected '['");
    BAD("1 [2]", "unexpected '['");
    BAD("+1", "unexpected '+'");
    BAD("-", "unexpected end of file");
    BAD("- 1", "unexpected byte 0x20");
    BAD("1\0 2", "unexpected byte 0x00");
    BAD("1 \xc3\xa9", "unexpected byte 0xC3");
    BAD("1 2]", "unexpected ']'");
}

static void range_errors(void **state)
{
    (void)state;
    BAD("1 2 3 600", "token id 600 at position 3 is outside the vocabulary [0, 512)");
    BAD("[1, 512]", "token id 512 at position 1 is outside the vocabulary [0, 512)");
    BAD("-1", "token id -1 at position 0 is outside");
    BAD("5, -3", "token id -3 at position 1");
    BAD("99999999999999999999", "token id 99999999999999999999 at position 0");
    BAD("[4294967296]", "token id 4294967296 at");
    BAD("18446744073709551617", "token id 18446744073709551617 at");
    BAD("1 1234567890123456789012345678901234567890", "12345678901234567890123456789012... at position 1");
    OK("1 0000000000000000000000000000000000000000000000000000000000000000000000002", 1, 2);
    /* ids beyond int32 are refused even with a huge vocabulary */
    int32_t *ids = NULL;
    int64_t n = 0;
    kv_err err = {0};
    assert_int_equal(token_file_parse("mem", "2147483647", 10, (int64_t)1 << 40, &ids, &n, &err), KV_OK);
    assert_int_equal(ids[0], INT32_MAX);
    free(ids);
    assert_int_equal(token_file_parse("mem", "2147483648", 10, (int64_t)1 << 40, &ids, &n, &err), KV_EINPUT);
    assert_string_equal(err.msg, "mem: token id 2147483648 at position 0 is outside the 32-bit id range [0, 2147483648)");
    kv_err_clear(&err);
    assert_int_equal(token_file_parse("mem", "1", 1, 0, &ids, &n, &err), KV_EFAIL);
}

static void many_ids(void **state)
{
    (void)state;
    /* 200000 ids: the array grows geometrically */
    enum { N = 200000 };
    char *text = malloc((size_t)N * 5 + 2);
    size_t len = 0;
    text[len++] = '[';
    for (int i = 0; i < N; i++) len += (size_t)sprintf(text + len, i ? ",%d" : "%d", i % V);
    text[len++] = ']';
    int32_t *ids = NULL;
    int64_t n = 0;
    kv_err err = {0};
    assert_int_equal(token_file_parse("mem", text, len, V, &ids, &n, &err), KV_OK);
    assert_int_equal(n, N);
    for (int i = 0; i < N; i++)
        if (ids[i] != i % V) fail_msg("ids[%d] = %d", i, ids[i]);
    free(ids);
    free(text);
    assert_int_equal(token_file_read("/nonexistent/tokens.txt", V, &ids, &n, &err), KV_EFAIL);
    assert_null(ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(accepted_forms),
        cmocka_unit_test(syntax_errors),
        cmocka_unit_test(range_errors),
        cmocka_unit_test(many_ids),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
