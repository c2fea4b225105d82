/* `kvtrace synth`: command line of the synthetic trace generator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "core/cli_opts.h"
#include "core/model_shapes.h"
#include "core/version.h"
#include "provenance/provenance.h"
#include "synth.h"

static const char USAGE[] =
    "usage: kvtrace synth (--like NAME | --layers L --heads H --kv-heads K --head-dim D)\n"
    "                     --tokens T [options] -o trace.h5\n"
    "\n"
    "Writes a synthetic trace in the exact shapes of a real model: keys nearly collinear\n"
    "around a shared mean direction, sink keys at the first positions, rare distinctive\n"
    "keys, queries leaning against the mean key, RoPE by position, tight key norms\n"
    "(docs/synth.md). /attention/colsum is exact for the generated Q and K.\n"
    "\n"
    "  --like NAME          model shape: %s\n"
    "  --layers L, --heads H, --kv-heads K, --head-dim D\n"
    "                       explicit shape instead of --like (D even, H a multiple of K)\n"
    "  --vocab V            vocabulary size for explicit shapes (default 32000)\n"
    "  --rope-theta X       RoPE base for explicit shapes (default 10000)\n"
    "  --rope-style S       interleaved | neox (default: the model's; explicit: interleaved)\n"
    "  --tokens T           number of tokens (required)\n"
    "  --prompt-len P       tokens counted as prompt, the rest as generated (default T)\n"
    "  --seed S             generator seed (default 0); same seed, same values\n"
    "  --sinks N            sink positions at the start (default 4)\n"
    "  --dtype f32|f16      storage type of keys, values, queries (default f32)\n"
    "  --threads N          worker threads (default: one per CPU); values do not depend on it\n"
    "  --deflate N          deflate+shuffle level 1..9 (default 0: off)\n"
    "  -o, --output PATH    output trace (required)\n"
    "  --force              replace an existing output\n"
    "  --quiet              no progress line\n"
    "  --timestamp          record the time in /provenance (SOURCE_DATE_EPOCH, when set, gives it;\n"
    "                       otherwise no time is recorded, docs/provenance.md)\n"
    "  -h, --help           this text\n";

typedef struct {
    const char *like, *output, *rope_style, *dtype;
    int64_t layers, heads, kv_heads, head_dim, vocab, tokens, prompt_len, sinks, deflate, threads;
    double theta;
    uint64_t seed;
    bool force, quiet, timestamp, help;
} synth_args;

#define BIG ((double)((int64_t)1 << 31))
static const cli_opt OPTIONS[] = {
    {CLI_ROW("like", CLI_TEXT, synth_args, like)},
    {CLI_ROW("layers", CLI_I64, synth_args, layers), .lo = 1, .hi = 1024},
    {CLI_ROW("heads", CLI_I64, synth_args, heads), .lo = 1, .hi = 1024},
    {CLI_ROW("kv-heads", CLI_I64, synth_args, kv_heads), .lo = 1, .hi = 1024},
    {CLI_ROW("head-dim", CLI_I64, synth_args, head_dim), .lo = 2, .hi = 4096},
    {CLI_ROW("vocab", CLI_I64, synth_args, vocab), .lo = 1, .hi = 1 << 24},
    {CLI_ROW("rope-theta", CLI_F64, synth_args, theta), .lo = 1e-6, .hi = 1e12},
    {CLI_ROW("rope-style", CLI_TEXT, synth_args, rope_style)},
    {CLI_ROW("tokens", CLI_I64, synth_args, tokens), .lo = 1, .hi = BIG},
    {CLI_ROW("prompt-len", CLI_I64, synth_args, prompt_len), .lo = 1, .hi = BIG},
    {CLI_ROW("seed", CLI_U64, synth_args, seed)},
    {CLI_ROW("sinks", CLI_I64, synth_args, sinks), .lo = 0, .hi = BIG},
    {CLI_ROW("dtype", CLI_TEXT, synth_args, dtype)}, /* checked after the shape, as before */
    {CLI_ROW("threads", CLI_I64, synth_args, threads), .lo = 1, .hi = 256},
    {CLI_ROW("deflate", CLI_I64, synth_args, deflate), .lo = 0, .hi = 9},
    {CLI_ROW("output", CLI_TEXT, synth_args, output)},
    {CLI_ROW("force", CLI_FLAG, synth_args, force)},
    {CLI_ROW("quiet", CLI_FLAG, synth_args, quiet)},
    {CLI_ROW("timestamp", CLI_FLAG, synth_args, timestamp)},
    {0},
};
#undef BIG

static int parse_args(int argc, char **argv, synth_args *a, kv_err *err)
{
    memset(a, 0, sizeof *a);
    a->vocab = 32000, a->theta = 10000.0, a->sinks = -1, a->prompt_len = -1, a->dtype = "f32";
    int first;
    int rc = cli_opts_parse("synth", argc, argv, OPTIONS, a, &a->help, &first, err);
    if (rc || a->help) return rc;
    if (first < argc) return cli_usage(err, "synth", "unexpected argument '%s'", argv[first]);
    return KV_OK;
}

/* Fills the trace meta from --like or the explicit shape options. */
static int build_config(const synth_args *a, synth_config *cfg, kv_err *err)
{
    const char *v = "synth";
    memset(cfg, 0, sizeof *cfg);
    trace_meta *m = &cfg->meta;
    bool explicit_shape = a->layers || a->heads || a->kv_heads || a->head_dim;
    const char *style = "interleaved";
    if (a->like) {
        const model_shape *s = model_shape_find(a->like);
        if (!s) return cli_usage(err, v, "unknown --like '%s' (known: %s)", a->like, model_shape_names());
        if (explicit_shape) return cli_usage(err, v, "--like and explicit shape options exclude each other");
        m->n_layers = s->n_layers, m->n_heads = s->n_heads, m->n_kv_heads = s->n_kv_heads;
        m->head_dim = s->head_dim, m->vocab_size = s->vocab_size, m->rope_theta = s->rope_theta;
        snprintf(m->architecture, sizeof m->architecture, "%s", s->architecture);
        snprintf(m->model_name, sizeof m->model_name, "synth:%s", s->name);
        style = s->rope_style;
    } else {
        if (!(a->layers && a->heads && a->kv_heads && a->head_dim))
            return cli_usage(err, v, "give --like NAME, or all of --layers, --heads, --kv-heads, --head-dim");
        if (a->heads % a->kv_heads != 0)
            return cli_usage(err, v, "--heads %lld is not a multiple of --kv-heads %lld",
                             (long long)a->heads, (long long)a->kv_heads);
        if (a->head_dim % 2 != 0)
            return cli_usage(err, v, "--head-dim %lld must be even (RoPE rotates pairs)", (long long)a->head_dim);
        m->n_layers = a->layers, m->n_heads = a->heads, m->n_kv_heads = a->kv_heads;
        m->head_dim = a->head_dim, m->vocab_size = a->vocab, m->rope_theta = a->theta;
        snprintf(m->architecture, sizeof m->architecture, "llama");
        snprintf(m->model_name, sizeof m->model_name, "synth:L%lld-H%lld-K%lld-D%lld",
                 (long long)a->layers, (long long)a->heads, (long long)a->kv_heads, (long long)a->head_dim);
    }
    if (a->rope_style) {
        rope_style rs;
        if (!rope_style_parse(a->rope_style, &rs))
            return cli_usage(err, v, "--rope-style must be interleaved or neox, got '%s'", a->rope_style);
        style = a->rope_style;
    }
    snprintf(m->rope_style, sizeof m->rope_style, "%s", style);
    if (!a->tokens) return cli_usage(err, v, "--tokens T is required");
    m->n_tokens = a->tokens;
    m->prompt_len = a->prompt_len < 0 ? a->tokens : a->prompt_len;
    if (m->prompt_len > m->n_tokens)
        return cli_usage(err, v, "--prompt-len %lld exceeds --tokens %lld", (long long)m->prompt_len,
                         (long long)m->n_tokens);
    snprintf(m->creator, sizeof m->creator, "kvtrace %s synth (seed %llu)", KVTRACE_VERSION,
             (unsigned long long)a->seed);
    snprintf(m->capture_mode, sizeof m->capture_mode, "full");
    m->capture_chunk = 0;
    cfg->seed = a->seed;
    cfg->threads = (int)a->threads;
    synth_geometry_default(&cfg->geo);
    if (a->sinks >= 0) cfg->geo.sinks = a->sinks;
    return KV_OK;
}

int synth_main(int argc, char **argv)
{
    kv_err err = {0};
    synth_args a;
    prov_record prov;
    int rc = prov_begin(&prov, argc, argv, &err); /* the words as typed, before getopt permutes them */
    if (rc) return cli_exit(rc, &err);
    rc = parse_args(argc, argv, &a, &err);
    if (!rc && a.help) {
        printf(USAGE, model_shape_names());
        prov_free(&prov);
        return 0;
    }
    synth_config cfg;
    if (!rc) rc = build_config(&a, &cfg, &err);
    trace_create_opts opts = {0};
    if (!rc) rc = cli_parse_dtype("synth", "--dtype", a.dtype, &opts.storage, &err);
    if (!rc && !a.output) rc = cli_usage(&err, "synth", "-o PATH is required");
    if (!rc) rc = prov_set_time(&prov, a.timestamp, &err);
    if (!rc) {
        prov_set_seed(&prov, a.seed);
        opts.deflate = (int)a.deflate;
        opts.force = a.force;
        opts.annotate = prov_write_h5, opts.annotate_ctx = &prov;
        rc = synth_write(&cfg, a.output, &opts, a.quiet, &err);
    }
    prov_free(&prov);
    return cli_exit(rc, &err);
}
