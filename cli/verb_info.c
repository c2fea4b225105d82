/* `kvtrace info FILE`: a trace's metadata, datasets, shapes, storage, size. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileopen.h"
#include "core/cli_args.h"
#include "core/h5util.h"
#include "trace/trace.h"
#include "provenance/provenance.h"
#include "results/fidelity_schema.h"
#include "results/results_schema.h"
#include "verbs.h"

static const char USAGE[] =
    "usage: kvtrace info FILE\n"
    "       kvtrace info --schema | --columns\n"
    "\n"
    "Validates a trace and prints its schema version, model, dimensions, token count,\n"
    "capture mode, every dataset with its shape, element type, filters and size on disk,\n"
    "and its provenance (the command that made it, its inputs' sha256; docs/provenance.md).\n"
    "On a sim results.h5: the trace and command that made it, its runs, its provenance.\n"
    "Exit 3 (with one line saying what is wrong) if the file is neither.\n"
    "\n"
    "  --schema    the trace schema: every dataset with its type, shape, when it is present and\n"
    "              its description attribute, as a markdown table (docs/trace.md#datasets)\n"
    "  --columns   the columns of every CSV that sim, analyze and fidelity write, one line per\n"
    "              file: [VERB] FILE: COLUMN,...\n"
    "              (docs/outputs.md)\n";

/* One line per CSV: "[VERB] FILE: col,col,..." in the order the writers write them. */
static void print_columns(void)
{
    const results_schema *const *lists[] = {RESULTS_SCHEMAS, FID_SCHEMAS};
    const int counts[] = {RESULTS_N_SCHEMAS, FID_N_SCHEMAS};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < counts[l]; i++) {
            const results_schema *s = lists[l][i];
            printf("[%s] %s:", s->maker, s->file);
            for (int c = 0; c < s->n_cols; c++) printf("%s%s", c ? "," : " ", s->cols[c].name);
            putchar('\n');
        }
}

static void human_bytes(uint64_t b, char *buf, size_t cap)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static void print_meta(const trace_meta *m, const char *path, long long file_bytes)
{
    char size[32];
    human_bytes((uint64_t)file_bytes, size, sizeof size);
    printf("file          %s (%s)\n", path, size);
    printf("schema        %d.%d\n", m->schema_major, m->schema_minor);
    printf("creator       %s\n", m->creator);
    printf("model         %s (%s)\n", m->model_name, m->architecture);
    printf("dimensions    L=%lld layers, H=%lld heads, K=%lld kv heads, D=%lld head dim, V=%lld vocab\n",
           (long long)m->n_layers, (long long)m->n_heads, (long long)m->n_kv_heads,
           (long long)m->head_dim, (long long)m->vocab_size);
    printf("tokens        T=%lld (prompt %lld, generated %lld)\n", (long long)m->n_tokens,
           (long long)m->prompt_len, (long long)(m->n_tokens - m->prompt_len));
    printf("rope          %s, theta %g%s%s\n", m->rope_style, m->rope_theta, m->rope_scaling[0] ? ", scaling " : "",
           m->rope_scaling);
    printf("capture       mode %s, chunk %lld%s%s%s\n", m->capture_mode, (long long)m->capture_chunk,
           m->capture_chunk == 0 ? " (synthetic: no model run)" : "",
           m->compute[0] ? ", compute " : "", m->compute[0] ? m->compute : "");
    if (strcmp(m->capture_mode, "evict") == 0) {
        printf("eviction      %s (%s), budget %lld, chunk %lld", m->evict_policy, m->evict_params,
               (long long)m->evict_budget, (long long)m->evict_chunk);
        if (m->evict_until) printf(", only up to position %lld", (long long)m->evict_until);
        printf("\n");
    }
    if (m->evict_definition[0]) printf("definition    %s\n", m->evict_definition);
    printf("storage       %s\n", trace_dtype_name(m->storage));
}

/* The trace's /prompt_chat: the template's family and sha256, the messages' roles. */
static void print_prompt_chat(const char *record)
{
    json_t *r = record ? json_loads(record, 0, NULL) : NULL, *m;
    if (!r) return;
    size_t i;
    printf("chat          %s template (sha256 %.12s...), messages:", json_string_value(json_object_get(r, "family")),
           json_string_value(json_object_get(r, "template_sha256")));
    json_array_foreach(json_object_get(r, "messages"), i, m) printf(" %s", json_string_value(json_object_get(m, "role")));
    const char *date = json_string_value(json_object_get(r, "date"));
    if (date) printf("; date %s", date);
    json_t *think = json_object_get(r, "enable_thinking");
    if (think) printf("; enable_thinking %s", json_is_true(think) ? "true" : "false");
    putchar('\n');
    json_decref(r);
}

/* The trace's /prompt_text (valid UTF-8, checked on open): its size and its
 * start, cut at a character boundary, control characters escaped. */
static void print_prompt_text(const char *text)
{
    if (!text) return;
    const size_t len = strlen(text), show = 60;
    size_t end = len < show ? len : show;
    while (end < len && ((unsigned char)text[end] & 0xC0) == 0x80) end--; /* not inside a character */
    printf("prompt text   %zu bytes: \"", len);
    for (size_t i = 0; i < end; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else putchar(c);
    }
    printf("\"%s\n", end < len ? "..." : "");
}

/* The trace's /spans: each name and token range (the first 16). */
static void print_spans(const trace *tr)
{
    int64_t n = 0;
    const trace_span *s = trace_spans(tr, &n);
    if (!n) return;
    printf("spans         %lld:", (long long)n);
    for (int64_t i = 0; i < n && i < 16; i++)
        printf(" %s [%lld, %lld)", s[i].name, (long long)s[i].start, (long long)s[i].end);
    printf("%s\n", n > 16 ? " ..." : "");
}

/* One line of the dataset list: path, shape, element type, filters, size. */
static void dataset_line(const char *path, const char *shape, const char *type, const char *filters, uint64_t bytes)
{
    char size[32];
    human_bytes(bytes, size, sizeof size);
    printf("  %-20s %-26s %-8s %-16s %s\n", path, shape, type, filters, size);
}

static int print_datasets(trace *tr, kv_err *err)
{
    printf("datasets\n");
    for (int d = 0; d < TRACE_NDSETS; d++) {
        if (!trace_has(tr, (trace_dset)d)) continue;
        trace_dset_info info;
        int rc = trace_describe(tr, (trace_dset)d, &info, err);
        if (rc) return rc;
        char shape[128];
        size_t used = 0;
        for (int a = 0; a < info.rank; a++)
            used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%lld", a ? ", " : "[",
                                     (long long)info.dims[a]);
        snprintf(shape + used, sizeof shape - used, "]");
        dataset_line(trace_dset_path((trace_dset)d), shape, info.type, info.filters, info.storage_bytes);
    }
    /* the datasets and groups outside the table of T-long datasets (docs/trace.md#datasets) */
    const trace_meta *m = trace_get_meta(tr);
    char shape[128];
    const char *texts[][2] = {{"/prompt_text", trace_prompt_text(tr)}, {"/prompt_chat", trace_prompt_chat(tr)}};
    for (int i = 0; i < 2; i++)
        if (texts[i][1]) dataset_line(texts[i][0], "scalar", "string", "-", (uint64_t)strlen(texts[i][1]));
    if (m->wo_dim > 0) {
        snprintf(shape, sizeof shape, "[%lld, %lld, %lld]", (long long)m->n_layers, (long long)m->wo_dim,
                 (long long)(m->n_heads * m->head_dim));
        dataset_line("/wo", shape, "float32", "-", (uint64_t)(4 * m->n_layers * m->wo_dim * m->n_heads * m->head_dim));
    }
    int64_t n_spans = 0;
    trace_spans(tr, &n_spans);
    if (n_spans) {
        snprintf(shape, sizeof shape, "group of %lld spans", (long long)n_spans);
        printf("  %-20s %s\n", "/spans", shape);
    }
    return KV_OK;
}

/* FILE's /provenance, when it has one (a trace from h5py scripts need not). */
static int print_provenance(const char *path, kv_err *err)
{
    prov_record p;
    bool present = false;
    int rc = prov_read_h5(path, &p, &present, err);
    if (rc) return rc;
    if (!present) printf("provenance    none (no /provenance group)\n");
    else prov_print(stdout, &p);
    if (present) prov_free(&p);
    return KV_OK;
}

/* True for a file with /runs and no kvtrace_schema: a sim results.h5. */
static bool is_results(const char *path)
{
    h5u_quiet();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return false;
    bool yes = h5u_exists(f, "runs") && H5Aexists(f, "kvtrace_schema") == 0;
    H5Fclose(f);
    return yes;
}

/* A results.h5: what made it (root attributes) and how many runs it holds. */
static int print_results(const char *path, kv_err *err)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return kv_fail(err, KV_EINPUT, "%s: cannot open", path);
    static const char *const ATTRS[] = {"trace_path", "trace_sha256", "study_index", "study_index_sha256", "command"};
    printf("file          %s (a kvtrace sim results file)\n", path);
    int rc = KV_OK;
    for (size_t i = 0; !rc && i < sizeof ATTRS / sizeof ATTRS[0]; i++) {
        char v[8192];
        bool present = false;
        rc = h5u_read_attr_str(f, path, ATTRS[i], v, sizeof v, &present, err);
        if (!rc && present) printf("%-13s %s\n", ATTRS[i], v);
    }
    int64_t traces = 0;
    bool has_traces = false;
    if (!rc) rc = h5u_read_attr_i64(f, path, "n_traces", &traces, 1, &has_traces, err);
    if (!rc && has_traces) printf("%-13s %lld (a study)\n", "traces", (long long)traces);
    H5G_info_t gi;
    hid_t g = rc ? -1 : H5Gopen2(f, "runs", H5P_DEFAULT);
    if (g >= 0 && H5Gget_info(g, &gi) >= 0) printf("runs          %llu\n", (unsigned long long)gi.nlinks);
    if (g >= 0) H5Gclose(g);
    H5Fclose(f);
    return rc ? rc : print_provenance(path, err);
}

int info_main(int argc, char **argv)
{
    kv_err err = {0};
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--schema") == 0) {
        trace_schema_markdown(stdout);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--columns") == 0) {
        print_columns();
        return 0;
    }
    if (argc == 2 && argv[1][0] == '-' && argv[1][1] != '\0') {
        cli_usage(&err, "info", "unknown option '%s'", argv[1]);
        return cli_report(&err);
    }
    if (argc != 2) {
        cli_usage(&err, "info", argc < 2 ? "missing FILE" : "expects exactly one FILE");
        return cli_report(&err);
    }
    if (kv_input_check(argv[1], false, &err)) return cli_report(&err);
    if (is_results(argv[1])) return print_results(argv[1], &err) ? cli_report(&err) : 0;
    trace *tr = NULL;
    int rc = trace_open(argv[1], &tr, &err);
    if (!rc) {
        struct stat st;
        print_meta(trace_get_meta(tr), argv[1], stat(argv[1], &st) == 0 ? (long long)st.st_size : 0);
        print_prompt_text(trace_prompt_text(tr));
        print_prompt_chat(trace_prompt_chat(tr));
        print_spans(tr);
        rc = print_datasets(tr, &err);
        trace_close(tr);
    }
    if (!rc) rc = print_provenance(argv[1], &err);
    return cli_exit(rc, &err);
}
