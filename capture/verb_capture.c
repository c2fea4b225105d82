/* `kvtrace capture`: command line of the model runner. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "capture/capture.h"
#include "model/model_fetch.h"
#include "core/cli_args.h"
#include "core/kv_mpi.h"
#include "core/cli_opts.h"
#include "userpol/user_policies.h"
#include "expr/expr.h"
#include "plan/plan.h"
#include "policies/policy.h"

static const char USAGE[] =
    "usage: kvtrace capture [--model M] [--tokenizer F] [--prompt TEXT | --prompt-file F | --tokens F |\n"
    "                       --messages F.json] [--chat [--system TEXT]] [--generate N] [--chunk B] [options]\n"
    "                       -o trace.h5\n"
    "\n"
    "Runs a model on the CPU (OpenBLAS) and records a trace: the prompt is processed in\n"
    "chunks of B tokens against the growing KV cache, then N tokens are generated one at\n"
    "a time (greedy, or sampled with --temperature). Memory: model + KV cache + O(B*T).\n"
    "\n"
    "  --model M            GGUF file (llama, qwen2, qwen3; F32/F16/BF16, Q4_0..Q8_0, Q2_K..Q6_K), Hugging Face\n"
    "                       checkpoint directory (config.json + safetensors; llama, mistral, qwen2,\n"
    "                       qwen3), llama2.c checkpoint (.bin, with --tokenizer), or random:NAME[:SEED][:TYPE]\n"
    "                       (NAME as synth --like). Default: stories260K.gguf from $KVTRACE_MODEL_DIR\n"
    "                       or ~/.cache/kvtrace (downloaded there, sha256 checked, when absent)\n"
    "  --tokenizer F        llama2.c tokenizer.bin for a .bin checkpoint (a GGUF and a Hugging Face\n"
    "                       directory carry their own: the GGUF's vocabulary, tokenizer.json)\n"
    "  --prompt TEXT        prompt text, UTF-8, encoded with the model's own tokenizer (SentencePiece or\n"
    "                       byte-level BPE such as Llama 3's and Qwen's; special tokens such as BOS added\n"
    "                       as the tokenizer does, docs/tokenize.md); the trace keeps it as /prompt_text\n"
    "  --prompt-file F      prompt text from a file, all of it (not UTF-8, or a NUL byte: exit 3)\n"
    "  --tokens F           token ids (whitespace/comma separated, or a JSON array); none of the\n"
    "                       four: BOS alone\n"
    PROMPT_CHAT_HELP
    "                       (the trace keeps the templated text as /prompt_text, the messages and the\n"
    "                       template's family and sha256 as /prompt_chat; with --prompts, --chat puts\n"
    "                       each text prompt in the template)\n"
    "  --prompts FILE.jsonl many prompts, one JSON object a line ({\"id\": ..., \"text\": ...} or \"tokens\":\n"
    "                       [ids], optional \"generate\": N): -o is then a directory that gets one trace per\n"
    "                       prompt, ID.h5, and index.jsonl; the model is loaded once (docs/study.md)\n"
    "  --generate N         tokens to generate after the prompt (default 0)\n"
    "  --chunk B            prefill chunk (default 128)\n"
    "  --record LIST        keys,values,queries (default all three; keys and values always); wo adds\n"
    "                       /wo, each layer's attention output projection (criticalkv reads it)\n"
    "  --attention MODE     colsum (default) | full | none: /attention/colsum, plus full weights\n"
    "  --max-attention-gib X  refuse --attention full above X GiB (default 4)\n"
    "  --logits             record /logits [T, V] (/logprobs is recorded unless --no-logprobs)\n"
    "  --no-logprobs        no /logprobs: the output layer runs only where a next token is chosen (the\n"
    "                       prompt's last row, with --generate, and each generated one), as llama.cpp's\n"
    "                       prompt evaluation does; a faster prefill where the vocabulary is large\n"
    "                       (docs/capture.md). Not with --logits\n"
    "  --dtype f32|f16      storage of keys, values, queries (default f32)\n"
    "  --temperature X      sample with temperature X (default 0: greedy)\n"
    "  --seed S             sampling seed (default 0)\n"
    "  --threads N          CPU threads (default: one per CPU); the trace does not depend on it\n"
    "  --device cpu|cuda    where the model runs (default cpu). cuda: the same walk on the GPU\n"
    "                       (build/libkvtrace_cuda.so beside kvtrace, or $KVTRACE_CUDA_LIB; exit 1 when\n"
    "                       no usable GPU is found; not with --evict or --attention full; docs/cuda.md)\n"
    "  --weights f32|f16|bf16  type of the weight matrices in memory (CPU default: the file's, 16-bit\n"
    "                       and quantised GGUF matrices stay as they are, decoded a tile at a time;\n"
    "                       GPU default f32); products accumulate in f32 (docs/capture.md)\n"
    "  --compute float|int8 products of the GGUF file's Q8_0, Q4_0 and Q4_1 matrices: float (default:\n"
    "                       each block decoded to float32 for sgemm) or int8 (the rows quantised to int8\n"
    "                       per block of 32, integer dot products as llama.cpp computes them; other\n"
    "                       matrices stay float; recorded as the trace's compute attribute; CPU only;\n"
    "                       docs/capture.md#compute-int8)\n"
    "  --dry-run            run the model but record and write nothing (benchmarks)\n"
    "  --allow-beyond-context  run past the model's trained context (GGUF context_length,\n"
    "                       config.json max_position_embeddings, llama2.c seq_len): those positions'\n"
    "                       RoPE angles were never trained (extrapolation). Without it: exit 2\n"
    "  --evict P[:k=v...]   evict inside the run with policy P (kvtrace policies; not oracle): after\n"
    "                       every prefill chunk and decode step each layer's kv head (tova:scope=layer:\n"
    "                       each layer) keeps N of its cache plus the chunk, as sim replays it; the\n"
    "                       cache never holds more than N + B rows; RoPE positions stay the original\n"
    "                       ones. The trace gets capture_mode=evict (no /attention: off by default)\n"
    "  --alias NAME=SPEC    a name for one configuration (policy[:key=value...]): --evict NAME, or\n"
    "                       chunkkv/criticalkv base=NAME; repeat for more\n"
    "  --plugin FILE.so     load policies and allocators from a plug-in built against kvtrace/policy.h\n"
    "                       (docs/plugins.md), or policies from FILE.py written in Python\n"
    "                       (docs/python-policies.md): --evict NAME, --allocator NAME; repeat for more\n"
    "  --define 'NAME = EXPR [; protect = ...]'\n"
    "                       a policy from a score expression (docs/expressions.md), usable in --evict NAME;\n"
    "                       repeat for more (future_attn is refused here: offline only)\n"
    "  --defines FILE       one definition per line ('#' comments)\n"
    "  --budget N           the cache budget N (required with --evict): the average per (layer, kv head)\n"
    "  --allocator A[:k=v...]  with --evict: how the total L*K*N is shared by the (layer, kv head)\n"
    "                       caches (kvtrace policies lists them; default uniform: each keeps N; cake\n"
    "                       and global evict every layer together at each chunk's end; caches are\n"
    "                       allocated at the most one head can keep; docs/allocators.md, \"In the model\")\n"
    "  --head-scores FILE   with --allocator headkv or duo (required by both): per-(layer, kv head)\n"
    "                       importance, a CSV whose header has layer,kv_head,score (one row per head;\n"
    "                       kvtrace analyze writes head_importance.csv); exit 3 naming file and row\n"
    "  --retained           with --evict: /evict/retained, the kept positions after every chunk\n"
    "  --evict-until POS|NAME  with --evict: evict only after the chunks that end at or before prompt\n"
    "                       position POS, or the start of the prompt's span NAME (--prompts: e.g. question);\n"
    "                       a chunk ends there; later positions join the cache unevicted (kvpress's\n"
    "                       pipeline: the context compressed once, the question and answer kept; docs/fidelity.md)\n"
    "  --kvzip              after the run, KVzip's reconstruction pass (\"Repeat the previous context\n"
    "                       exactly.\" then the sequence again) and /attention/kvzip [L, H, T]: the largest\n"
    "                       attention each key got from that pass (the kvzip policy ranks by it). The pass\n"
    "                       needs T + R positions (R = the template's ids + T) within the model's context;\n"
    "                       CPU only, not with --evict (docs/trace.md)\n"
    "  --print              print the decoded text of all tokens to stdout\n"
    "  --stats              print the up-front cost (always) and throughput and GEMM/attention GFLOP/s to stderr\n"
    "  -o, --output PATH    output trace (required)\n"
    "  --timestamp          record the time in the trace's /provenance (SOURCE_DATE_EPOCH, when set,\n"
    "                       gives it; otherwise no time is recorded, docs/provenance.md)\n"
    "  --force, --quiet, -h/--help\n";

/* What the command line fills: the options, and what their checks need to know. */
typedef struct {
    capture_opts o;
    bool attention_given;
    bool help;
    user_policies user;           /* --alias, --plugin, --define, --defines (userpol/) */
    const char *evict;        /* --evict, parsed once every --alias is known */
    const char *allocator;    /* --allocator, parsed once every --plugin is loaded */
} capture_args;

static int parse_record(const char *verb, const char *list, void *args, kv_err *err)
{
    static const char *const ITEMS[] = {"keys", "values", "queries", "wo"};
    capture_opts *o = &((capture_args *)args)->o;
    bool given[4] = {false};
    cli_list l;
    int rc = cli_list_split(verb, "--record", list, CLI_LIST_MAX, &l, err);
    for (int i = 0; !rc && i < l.n; i++) {
        int k = 0;
        while (k < 4 && strcmp(l.item[i], ITEMS[k]) != 0) k++;
        if (k == 4) return cli_usage(err, verb, "--record: unknown item '%s' (keys, values, queries, wo)", l.item[i]);
        if (given[k]) return cli_usage(err, verb, "--record names '%s' twice", ITEMS[k]);
        given[k] = true;
    }
    if (rc) return rc;
    if (!given[0] || !given[1])
        return cli_usage(err, verb, "--record must include keys and values (the trace schema requires them)");
    o->record_queries = given[2];
    o->record_wo = given[3];
    return KV_OK;
}

static int parse_attention(const char *verb, const char *arg, void *args, kv_err *err)
{
    capture_args *a = args;
    a->attention_given = true;
    if (strcmp(arg, "colsum") == 0) a->o.attention = ATTN_COLSUM;
    else if (strcmp(arg, "full") == 0) a->o.attention = ATTN_FULL;
    else if (strcmp(arg, "none") == 0) a->o.attention = ATTN_NONE;
    else return cli_usage(err, verb, "--attention must be colsum, full or none, got '%s'", arg);
    return KV_OK;
}

/* --device NAME: a backend of model/backend.h's table */
static int parse_device(const char *verb, const char *name, void *args, kv_err *err)
{
    capture_opts *o = &((capture_args *)args)->o;
    if ((o->backend = backend_find(name))) return KV_OK;
    char names[256];
    backend_names(names, sizeof names);
    return cli_usage(err, verb, "--device must be %s, got '%s'", names, name);
}

/* A parser's error as this verb's usage line, prefixed with the option. */
static int option_error(const char *verb, const char *option, int rc, kv_err *err)
{
    if (!rc) return rc;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return cli_usage(err, verb, "%s: %s", option, msg);
}

static int parse_allocator(const char *verb, const char *arg, void *args, kv_err *err)
{
    (void)verb;
    (void)err;
    ((capture_args *)args)->allocator = arg;
    return KV_OK;
}

/* --budget N: one budget, read as every verb reads budgets (core/cli_args.h). */
static int parse_budget(const char *verb, const char *arg, void *args, kv_err *err)
{
    int n = 0;
    return cli_parse_budgets(verb, "--budget", arg, 1, &((capture_args *)args)->o.budget, NULL, &n, err);
}

/* --evict-until POS|NAME: a prompt position (digits), or a span's name. */
static int parse_evict_until(const char *verb, const char *arg, void *args, kv_err *err)
{
    capture_opts *o = &((capture_args *)args)->o;
    if ((arg[0] >= '0' && arg[0] <= '9') || arg[0] == '+' || arg[0] == '-') { /* a number: the shared grammar */
        return cli_parse_i64(verb, "--evict-until", arg, 1, (int64_t)1 << 30, &o->evict_until, err);
    } else if (!arg[0] || strlen(arg) > TRACE_SPAN_NAME_MAX) {
        return cli_usage(err, verb, "--evict-until '%s': a position, or a span's name of 1 to %d bytes", arg,
                         TRACE_SPAN_NAME_MAX);
    } else {
        o->evict_until_span = arg;
    }
    return KV_OK;
}

static int parse_evict(const char *verb, const char *arg, void *args, kv_err *err)
{
    (void)verb;
    (void)err;
    ((capture_args *)args)->evict = arg;
    return KV_OK;
}

#define ROW(NAME, KIND, FIELD) CLI_ROW(NAME, KIND, capture_args, o.FIELD)
static const cli_opt OPTIONS[] = {
    {ROW("model", CLI_TEXT, model)},
    {ROW("tokenizer", CLI_TEXT, tokenizer)},
    {ROW("prompt", CLI_TEXT, prompt.text)},
    {ROW("prompt-file", CLI_TEXT, prompt.text_file)},
    {ROW("tokens", CLI_TEXT, prompt.tokens_file)},
    PROMPT_CHAT_OPTIONS(capture_args, o.prompt),
    {ROW("prompts", CLI_TEXT, prompts)},
    {ROW("generate", CLI_I64, generate), .lo = 0, .hi = 1 << 30},
    {ROW("chunk", CLI_I64, chunk), .lo = 1, .hi = 1 << 20},
    {.name = "record", .kind = CLI_CUSTOM, .parse = parse_record},
    {.name = "attention", .kind = CLI_CUSTOM, .parse = parse_attention},
    {ROW("max-attention-gib", CLI_F64, max_attention_gib), .lo = 0, .hi = 1e6},
    {ROW("logits", CLI_FLAG, logits)},
    {ROW("no-logprobs", CLI_FLAG, no_logprobs)},
    {ROW("dtype", CLI_DTYPE, dtype)},
    {ROW("temperature", CLI_F64, temperature), .lo = 0, .hi = 1e3},
    {ROW("seed", CLI_U64, seed)},
    {ROW("threads", CLI_INT, threads), .lo = 1, .hi = 256},
    {.name = "device", .kind = CLI_CUSTOM, .parse = parse_device},
    {.name = "evict", .kind = CLI_CUSTOM, .parse = parse_evict},
    USER_POLICY_OPTIONS(capture_args, user),
    {.name = "budget", .kind = CLI_CUSTOM, .parse = parse_budget},
    {.name = "allocator", .kind = CLI_CUSTOM, .parse = parse_allocator},
    {ROW("head-scores", CLI_TEXT, head_scores)},
    {ROW("retained", CLI_FLAG, retained)},
    {.name = "evict-until", .kind = CLI_CUSTOM, .parse = parse_evict_until},
    {ROW("kvzip", CLI_FLAG, kvzip)},
    {ROW("print", CLI_FLAG, print_text)},
    {ROW("stats", CLI_FLAG, stats)},
    {ROW("weights", CLI_CHOICE, weights), .choices = "f32|f16|bf16"}, /* the kvcuda_dtype: 0, 1, 2 */
    {ROW("compute", CLI_CHOICE, compute), .choices = "float|int8"},
    {ROW("dry-run", CLI_FLAG, dry_run)},
    {ROW("allow-beyond-context", CLI_FLAG, beyond_context)},
    {ROW("output", CLI_TEXT, output)},
    {ROW("force", CLI_FLAG, force)},
    {ROW("quiet", CLI_FLAG, quiet)},
    {ROW("timestamp", CLI_FLAG, timestamp)},
    {0},
};
#undef ROW

/* --head-scores goes with an allocator that reads it, and one that needs it gets it: capture has no
 * full-cache column sums before the run to rank the heads by (sim takes them from the trace). */
static int check_head_scores(const capture_opts *o, kv_err *err)
{
    return plan_check_head_scores(&o->alloc, o->alloc.iface ? 1 : 0, o->head_scores != NULL, false, "capture",
                                  "--allocator", err);
}

/* --evict, --budget and --retained together, and what an evicting run cannot record. */
static int check_evict(capture_opts *o, bool attention_given, kv_err *err)
{
    const char *v = "capture";
    if (!o->evict.iface) {
        if (o->budget || o->retained || o->alloc.iface || o->head_scores || o->evict_until || o->evict_until_span)
            return cli_usage(err, v, "--budget, --allocator, --head-scores, --retained and --evict-until need --evict "
                             "POLICY");
        return KV_OK;
    }
    int rc = check_head_scores(o, err);
    if (rc) return rc;
    if (o->budget < 1) return cli_usage(err, v, "--evict needs --budget N");
    if ((rc = plan_check_online(&o->evict, v, "--evict", err))) return rc;
    if (o->retained && !plan_evicts(&o->evict))
        return cli_usage(err, v, "--retained: %s never evicts, its cache does not fit N = %lld", o->evict.iface->name,
                         (long long)o->budget);
    if (attention_given && o->attention != ATTN_NONE)
        return cli_usage(err, v, "--attention %s: attention column sums and weights are recorded for "
                         "full-cache runs only (docs/trace.md); an evicting run's weights cover its cache, not every position",
                         o->attention == ATTN_FULL ? "full" : "colsum");
    o->attention = ATTN_NONE;
    return KV_OK;
}

static int parse_args(int argc, char **argv, capture_args *a, kv_err *err)
{
    const char *v = "capture";
    capture_opts *o = &a->o;
    memset(a, 0, sizeof *a);
    o->chunk = 128, o->record_queries = true, o->attention = ATTN_COLSUM, o->max_attention_gib = 4.0;
    o->backend = backend_or_default(NULL);
    o->weights = -1; /* the file's type (CPU); f32 on a device */
    int first;
    int rc = cli_opts_parse(v, argc, argv, OPTIONS, a, &a->help, &first, err);
    if (rc || a->help) return rc;
    if ((rc = user_policies_ready(&a->user, err))) return rc;
    if (a->evict && (rc = option_error(v, "--evict", policy_parse_in(&a->user.aliases, a->evict, &o->evict, err), err)))
        return rc;
    if (a->allocator && (rc = option_error(v, "--allocator", alloc_parse_in(a->user.alloc_plugins.list, a->allocator,
                                                                            &o->alloc, err), err)))
        return rc;
    if (first < argc) return cli_usage(err, v, "unexpected argument '%s'", argv[first]);
    if (prompt_sources(&o->prompt) > 1)
        return cli_usage(err, v, "give at most one of --prompt, --prompt-file, --tokens, --messages");
    if (o->prompts && (prompt_sources(&o->prompt) || o->dry_run || o->print_text))
        return cli_usage(err, v, "--prompts takes the prompts from its file: not with --prompt, --prompt-file, "
                         "--tokens, --messages, --dry-run or --print");
    if ((rc = prompt_chat_check(&o->prompt, v, o->prompts != NULL, err))) return rc;
    if (!o->output) return cli_usage(err, v, "-o PATH is required");
    if (o->no_logprobs && o->logits) return cli_usage(err, v, "--no-logprobs computes no prompt logits: not with --logits");
    if (o->kvzip && o->evict.iface)
        return cli_usage(err, v, "--kvzip records attention over the full cache; not with --evict");
    if (o->kvzip && !o->backend->kernels->host_memory)
        return cli_usage(err, v, "--kvzip runs on --device cpu only (the reconstruction pass reads every "
                         "head's attention weights, which --device %s does not hand out)", o->backend->name);
    return check_evict(o, a->attention_given, err);
}

int capture_main(int argc, char **argv)
{
    kv_err err = {0};
    capture_args a;
    capture_opts *o = &a.o;
    prov_record prov;
    int rc = prov_begin(&prov, argc, argv, &err); /* the words as typed, before getopt permutes them */
    if (rc) return cli_exit(rc, &err);
    rc = parse_args(argc, argv, &a, &err);
    if (!rc && a.help) {
        fputs(USAGE, stdout);
        user_policies_close(&a.user);
        prov_free(&prov);
        return 0;
    }
    char model_path[4096];
    if (!rc) rc = model_resolve(o->model, model_path, sizeof model_path, &o->model, &err);
    if (!rc) rc = prov_set_time(&prov, o->timestamp, &err);
    if (!rc) {
        prov_set_seed(&prov, o->seed);
        prov_set_temperature(&prov, o->temperature);
        o->prov = &prov;
        rc = o->prompts ? capture_prompts(o, &err) : capture_run(o, &err);
    }
    prov_free(&prov);
    user_policies_close(&a.user);
    int rank, size;
    kv_mpi_world(&rank, &size);   /* under mpirun (capture --prompts): rank 0 alone says what failed */
    const int status = rc && rank != 0 ? cli_status(rc, &err) : cli_exit(rc, &err);
    kv_mpi_finalize();
    return status;
}
