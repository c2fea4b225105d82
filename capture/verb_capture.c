/* `kvtrace capture`: command line of the model runner. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "capture/capture.h"
#include "model/model_fetch.h"
#include "core/cli_args.h"
#include "policies/policy.h"

static const char USAGE[] =
    "usage: kvtrace capture [--model M] [--tokenizer F] [--prompt TEXT | --prompt-file F | --tokens F]\n"
    "                       [--generate N] [--chunk B] [options] -o trace.h5\n"
    "\n"
    "Runs a model on the CPU (OpenBLAS) and records a trace: the prompt is processed in\n"
    "chunks of B tokens against the growing KV cache, then N tokens are generated one at\n"
    "a time (greedy, or sampled with --temperature). Memory: model + KV cache + O(B*T).\n"
    "\n"
    "  --model M            GGUF file (llama, qwen2, qwen3; F32/F16/BF16/Q8_0), Hugging Face\n"
    "                       checkpoint directory (config.json + safetensors; llama, mistral, qwen2,\n"
    "                       qwen3), llama2.c checkpoint (.bin, with --tokenizer), or random:NAME[:SEED]\n"
    "                       (NAME as synth --like). Default: stories260K.gguf from $KVTRACE_MODEL_DIR\n"
    "                       or ~/.cache/kvtrace (downloaded there, sha256 checked, when absent)\n"
    "  --tokenizer F        llama2.c tokenizer.bin for a .bin checkpoint\n"
    "  --prompt TEXT        prompt text (encoded with the model's SentencePiece vocabulary, BOS first;\n"
    "                       byte-level BPE vocabularies (Llama 3, Qwen): tokenize it yourself, --tokens)\n"
    "  --prompt-file F      prompt text from a file\n"
    "  --tokens F           token ids (whitespace/comma separated, or a JSON array); none of the\n"
    "                       three: BOS alone\n"
    "  --generate N         tokens to generate after the prompt (default 0)\n"
    "  --chunk B            prefill chunk (default 128)\n"
    "  --record LIST        keys,values,queries (default all three; keys and values always)\n"
    "  --attention MODE     colsum (default) | full | none: /attention/colsum, plus full weights\n"
    "  --max-attention-gib X  refuse --attention full above X GiB (default 4)\n"
    "  --logits             record /logits [T, V] (/logprobs is always recorded)\n"
    "  --dtype f32|f16      storage of keys, values, queries (default f32)\n"
    "  --temperature X      sample with temperature X (default 0: greedy)\n"
    "  --seed S             sampling seed (default 0)\n"
    "  --threads N          OpenBLAS threads (default: OpenBLAS's own)\n"
    "  --device cpu|cuda    where the model runs (default cpu). cuda: the same walk on the GPU\n"
    "                       (build/libkvtrace_cuda.so beside kvtrace, or $KVTRACE_CUDA_LIB; exit 1 when\n"
    "                       no usable GPU is found; not with --evict or --attention full; docs/cuda.md)\n"
    "  --weights f32|f16|bf16  type of the weights on the GPU (default f32; products accumulate in f32)\n"
    "  --dry-run            run the model but record and write nothing (benchmarks)\n"
    "  --evict P[:k=v...]   evict inside the run with policy P (kvtrace policies; not oracle): after\n"
    "                       every prefill chunk and decode step each layer's kv head (tova:scope=layer:\n"
    "                       each layer) keeps N of its cache plus the chunk, as sim replays it; the\n"
    "                       cache never holds more than N + B rows; RoPE positions stay the original\n"
    "                       ones. The trace gets capture_mode=evict (no /attention: off by default)\n"
    "  --budget N           the cache budget N (required with --evict)\n"
    "  --retained           with --evict: /evict/retained, the kept positions after every chunk\n"
    "  --print              print the decoded text of all tokens to stdout\n"
    "  --stats              print throughput and GEMM/attention GFLOP/s to stderr\n"
    "  -o, --output PATH    output trace (required)\n"
    "  --force, --quiet, -h/--help\n";

enum {
    OPT_MODEL = 256, OPT_TOKENIZER, OPT_PROMPT, OPT_PROMPT_FILE, OPT_TOKENS, OPT_GENERATE, OPT_CHUNK,
    OPT_RECORD, OPT_ATTENTION, OPT_MAX_ATTN, OPT_LOGITS, OPT_DTYPE, OPT_TEMPERATURE, OPT_SEED,
    OPT_THREADS, OPT_DEVICE, OPT_EVICT, OPT_BUDGET, OPT_RETAINED, OPT_PRINT, OPT_FORCE, OPT_QUIET, OPT_STATS,
    OPT_WEIGHTS, OPT_DRY_RUN,
};

static const struct option OPTIONS[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
    {"prompt", required_argument, NULL, OPT_PROMPT},
    {"prompt-file", required_argument, NULL, OPT_PROMPT_FILE},
    {"tokens", required_argument, NULL, OPT_TOKENS},
    {"generate", required_argument, NULL, OPT_GENERATE},
    {"chunk", required_argument, NULL, OPT_CHUNK},
    {"record", required_argument, NULL, OPT_RECORD},
    {"attention", required_argument, NULL, OPT_ATTENTION},
    {"max-attention-gib", required_argument, NULL, OPT_MAX_ATTN},
    {"logits", no_argument, NULL, OPT_LOGITS},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"temperature", required_argument, NULL, OPT_TEMPERATURE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"evict", required_argument, NULL, OPT_EVICT},
    {"budget", required_argument, NULL, OPT_BUDGET},
    {"retained", no_argument, NULL, OPT_RETAINED},
    {"print", no_argument, NULL, OPT_PRINT},
    {"stats", no_argument, NULL, OPT_STATS},
    {"weights", required_argument, NULL, OPT_WEIGHTS},
    {"dry-run", no_argument, NULL, OPT_DRY_RUN},
    {"output", required_argument, NULL, 'o'},
    {"force", no_argument, NULL, OPT_FORCE},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int parse_record(const char *list, capture_opts *o, kv_err *err)
{
    bool keys = false, values = false;
    o->record_queries = false;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        if (strcmp(item, "keys") == 0) keys = true;
        else if (strcmp(item, "values") == 0) values = true;
        else if (strcmp(item, "queries") == 0) o->record_queries = true;
        else return cli_usage(err, "capture", "--record: unknown item '%s' (keys, values, queries)", item);
    }
    if (!keys || !values)
        return cli_usage(err, "capture", "--record must include keys and values (the trace schema requires them)");
    return KV_OK;
}

/* --evict, --budget and --retained together, and what an evicting run cannot record. */
static int check_evict(capture_opts *o, bool attention_given, kv_err *err)
{
    const char *v = "capture";
    if (!o->evict.iface) {
        if (o->budget || o->retained) return cli_usage(err, v, "--budget and --retained need --evict POLICY");
        return KV_OK;
    }
    if (o->budget < 1) return cli_usage(err, v, "--evict needs --budget N");
    if (o->evict.iface->offline_only)
        return cli_usage(err, v, "--evict %s: it reads the future, so it is offline only (use kvtrace sim)",
                         o->evict.iface->name);
    if (o->retained && o->evict.iface->never_evicts)
        return cli_usage(err, v, "--retained: %s never evicts, its cache does not fit N = %lld", o->evict.iface->name,
                         (long long)o->budget);
    if (attention_given && o->attention != ATTN_NONE)
        return cli_usage(err, v, "--attention %s: attention column sums and weights are recorded for "
                         "full-cache runs only (SPEC §3); an evicting run's weights cover its cache, not every position",
                         o->attention == ATTN_FULL ? "full" : "colsum");
    o->attention = ATTN_NONE;
    return KV_OK;
}

/* --weights f32|f16|bf16: the kvcuda_dtype (0, 1, 2) */
static int parse_weights(const char *s, capture_opts *o, kv_err *err)
{
    static const char *const names[] = {"f32", "f16", "bf16"};
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0) return o->weights = i, KV_OK;
    return cli_usage(err, "capture", "--weights must be f32, f16 or bf16, got '%s'", s);
}

/* --device NAME: a backend of model/backend.h's table */
static int parse_device(const char *name, capture_opts *o, kv_err *err)
{
    if ((o->backend = backend_find(name))) return KV_OK;
    char names[256];
    backend_names(names, sizeof names);
    return cli_usage(err, "capture", "--device must be %s, got '%s'", names, name);
}

static int parse_args(int argc, char **argv, capture_opts *o, bool *help, kv_err *err)
{
    const char *v = "capture";
    memset(o, 0, sizeof *o);
    o->chunk = 128, o->record_queries = true, o->attention = ATTN_COLSUM, o->max_attention_gib = 4.0;
    o->backend = backend_all()[0];
    optind = 1;
    opterr = 0;
    int c, rc = KV_OK;
    int64_t i64;
    bool attention_given = false;
    while (!rc && (c = getopt_long(argc, argv, ":o:h", OPTIONS, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: o->model = optarg; break;
        case OPT_TOKENIZER: o->tokenizer = optarg; break;
        case OPT_PROMPT: o->prompt.text = optarg; break;
        case OPT_PROMPT_FILE: o->prompt.text_file = optarg; break;
        case OPT_TOKENS: o->prompt.tokens_file = optarg; break;
        case OPT_GENERATE: rc = cli_parse_i64(v, "--generate", optarg, 0, (int64_t)1 << 30, &o->generate, err); break;
        case OPT_CHUNK: rc = cli_parse_i64(v, "--chunk", optarg, 1, (int64_t)1 << 20, &o->chunk, err); break;
        case OPT_RECORD: rc = parse_record(optarg, o, err); break;
        case OPT_ATTENTION:
            attention_given = true;
            if (strcmp(optarg, "colsum") == 0) o->attention = ATTN_COLSUM;
            else if (strcmp(optarg, "full") == 0) o->attention = ATTN_FULL;
            else if (strcmp(optarg, "none") == 0) o->attention = ATTN_NONE;
            else rc = cli_usage(err, v, "--attention must be colsum, full or none, got '%s'", optarg);
            break;
        case OPT_MAX_ATTN: rc = cli_parse_double(v, "--max-attention-gib", optarg, 0, 1e6, &o->max_attention_gib, err); break;
        case OPT_LOGITS: o->logits = true; break;
        case OPT_DTYPE: rc = cli_parse_dtype(v, "--dtype", optarg, &o->dtype, err); break;
        case OPT_TEMPERATURE: rc = cli_parse_double(v, "--temperature", optarg, 0, 1e3, &o->temperature, err); break;
        case OPT_SEED: rc = cli_parse_u64(v, "--seed", optarg, &o->seed, err); break;
        case OPT_THREADS:
            rc = cli_parse_i64(v, "--threads", optarg, 1, 256, &i64, err);
            o->threads = (int)i64;
            break;
        case OPT_DEVICE: rc = parse_device(optarg, o, err); break;
        case OPT_EVICT:
            if ((rc = policy_parse(optarg, &o->evict, err))) {
                char msg[sizeof err->msg];
                snprintf(msg, sizeof msg, "%s", err->msg);
                rc = cli_usage(err, v, "--evict: %s", msg);
            }
            break;
        case OPT_BUDGET: rc = cli_parse_i64(v, "--budget", optarg, 1, (int64_t)1 << 30, &o->budget, err); break;
        case OPT_RETAINED: o->retained = true; break;
        case OPT_PRINT: o->print_text = true; break;
        case OPT_STATS: o->stats = true; break;
        case OPT_WEIGHTS: rc = parse_weights(optarg, o, err); break;
        case OPT_DRY_RUN: o->dry_run = true; break;
        case 'o': o->output = optarg; break;
        case OPT_FORCE: o->force = true; break;
        case OPT_QUIET: o->quiet = true; break;
        case 'h': *help = true; break;
        default: rc = cli_bad_option(err, v, c, optopt, argv[optind - 1]); break;
        }
    }
    if (rc || *help) return rc;
    if (optind < argc) return cli_usage(err, v, "unexpected argument '%s'", argv[optind]);
    if (prompt_sources(&o->prompt) > 1)
        return cli_usage(err, v, "give at most one of --prompt, --prompt-file, --tokens");
    if (!o->output) return cli_usage(err, v, "-o PATH is required");
    if (o->weights && !o->backend->weight_types)
        return cli_usage(err, v, "--weights applies to --device cuda (the CPU computes in float32)");
    return check_evict(o, attention_given, err);
}

int capture_main(int argc, char **argv)
{
    kv_err err = {0};
    capture_opts o;
    bool help = false;
    int rc = parse_args(argc, argv, &o, &help, &err);
    if (!rc && help) {
        fputs(USAGE, stdout);
        return 0;
    }
    char model_path[4096];
    if (!rc && !o.model && !(rc = model_default_path(model_path, sizeof model_path, true, &err))) o.model = model_path;
    if (!rc) rc = capture_run(&o, &err);
    return rc ? cli_report(&err) : 0;
}
