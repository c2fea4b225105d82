/* plot's HTML escaper (plots/plot_html.c) and the series labels and colours
 * every figure shares (plots/plot_series.c, plots/plot_style.c). */
#include "testutil.h"

#include "plots/plot_html.h"
#include "plots/plot_series.h"
#include "plots/plot_style.h"

static void escapes_markup(void **state)
{
    (void)state;
    char buf[256];
    assert_int_equal(plot_html_escape_buf(buf, sizeof buf, "plain text 1.5"), 14);
    assert_string_equal(buf, "plain text 1.5");
    plot_html_escape_buf(buf, sizeof buf, "<script>alert('x & y')</script>");
    assert_string_equal(buf, "&lt;script&gt;alert(&#39;x &amp; y&#39;)&lt;/script&gt;");
    plot_html_escape_buf(buf, sizeof buf, "a=\"b\"\x01\x1b[31m\tρ\n");
    assert_string_equal(buf, "a=&quot;b&quot;[31m\tρ\n"); /* control characters dropped, UTF-8 kept */
    plot_html_escape_buf(buf, sizeof buf, "&amp;");
    assert_string_equal(buf, "&amp;amp;"); /* escaped again, never trusted */
}

static void truncates_at_entity_boundary(void **state)
{
    (void)state;
    char buf[8];
    size_t need = plot_html_escape_buf(buf, sizeof buf, "ab<cd");
    assert_int_equal(need, 8);
    assert_string_equal(buf, "ab&lt;c"); /* fits 7 characters */
    need = plot_html_escape_buf(buf, 5, "ab<cd");
    assert_string_equal(buf, "ab"); /* "&lt;" would not fit whole */
    assert_int_equal(need, 8);
}

static void escapes_to_a_stream(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    plot_html_escape(f, "model <a & b>");
    assert_int_equal(fclose(f), 0);
    assert_string_equal(text, "model &lt;a &amp; b&gt;");
    free(text);
}

static void labels_show_the_params_that_differ(void **state)
{
    (void)state;
    plot_series_set set = {0};
    kv_err err = {0};
    int id[6];
    assert_int_equal(plot_series_id(&set, "keydiff", "anchor=norm:metric=cos:window=0", "uniform", "x", &id[0], &err), KV_OK);
    assert_int_equal(plot_series_id(&set, "streaming", "sinks=4", "uniform", "x", &id[1], &err), KV_OK);
    assert_int_equal(plot_series_id(&set, "keydiff", "anchor=norm:metric=cos:window=0.2", "uniform", "x", &id[2], &err), KV_OK);
    assert_int_equal(plot_series_id(&set, "keydiff", "anchor=raw:metric=cos:window=0.2", "uniform", "x", &id[3], &err), KV_OK);
    assert_int_equal(plot_series_id(&set, "full_cache", "", "uniform", "x", &id[4], &err), KV_OK);
    assert_int_equal(plot_series_id(&set, "keydiff", "anchor=norm:metric=cos:window=0", "uniform", "x", &id[5], &err), KV_OK);
    assert_int_equal(id[5], id[0]);
    assert_int_equal(set.n, 5);
    plot_series_label(&set);
    assert_string_equal(set.s[id[0]].label, "keydiff anchor=norm window=0");
    assert_string_equal(set.s[id[2]].label, "keydiff anchor=norm window=0.2");
    assert_string_equal(set.s[id[3]].label, "keydiff anchor=raw window=0.2");
    assert_string_equal(set.s[id[1]].label, "streaming");
    assert_string_equal(set.s[id[4]].label, "full cache");
    assert_int_equal(set.s[id[0]].variant, 0);
    assert_int_equal(set.s[id[2]].variant, 1);
    assert_int_equal(set.s[id[3]].variant, 2);
    assert_int_equal(set.s[id[1]].variant, 0);
    assert_int_equal(plot_series_id(&set, "", "", "uniform", "f.csv:3", &id[0], &err), KV_EINPUT);
    assert_non_null(strstr(err.msg, "f.csv:3: empty policy name"));
    /* another allocator: a series of its own, and every label names its allocator */
    assert_int_equal(plot_series_id(&set, "streaming", "sinks=4", "pyramid:beta=20:window=32", "x", &id[0], &err),
                     KV_OK);
    assert_int_not_equal(id[0], id[1]);
    plot_series_label(&set);
    assert_string_equal(set.s[id[0]].label, "streaming / pyramid:beta=20:window=32");
    assert_string_equal(set.s[id[1]].label, "streaming / uniform");
    assert_string_equal(set.s[id[4]].label, "full cache");
    plot_series_free(&set);
}

static void one_colour_per_policy(void **state)
{
    (void)state;
    const char *names[] = {"full", "keydiff", "knorm", "streaming", "random", "primekv", "h2o", "tova", "snapkv", "oracle"};
    int n = sizeof names / sizeof names[0];
    for (int i = 0; i < n; i++) {
        const char *c = plot_policy_colour(names[i]);
        assert_int_equal(strlen(c), 7);
        assert_true(c[0] == '#');
        assert_string_not_equal(c, plot_policy_colour("no-such-policy")); /* grey is for unknown names */
        for (int j = 0; j < i; j++) assert_string_not_equal(c, plot_policy_colour(names[j]));
    }
    assert_string_equal(plot_policy_colour("full_cache"), plot_policy_colour("full"));
    assert_string_equal(plot_policy_colour("mine"), plot_policy_colour("other"));
    char tint[8];
    plot_tint("#000000", 0.4, tint);
    assert_string_equal(tint, "#999999");
    plot_tint("#d62728", 1.0, tint);
    assert_string_equal(tint, "#d62728");
    plot_tint("#d62728", 0.0, tint);
    assert_string_equal(tint, "#ffffff");
    assert_int_not_equal(plot_dash_type(0), plot_dash_type(1));
    assert_int_not_equal(plot_point_type(0), plot_point_type(1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(escapes_markup),
        cmocka_unit_test(truncates_at_entity_boundary),
        cmocka_unit_test(escapes_to_a_stream),
        cmocka_unit_test(labels_show_the_params_that_differ),
        cmocka_unit_test(one_colour_per_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
