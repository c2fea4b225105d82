/* `kvtrace tokenize`: text to token ids (or pieces, or offsets) with a
 * model's tokenizer or a tokenizer.json, and ids back to text (--decode). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "model/formats/hf.h"
#include "model/model.h"
#include "model/tokenizer/prompt.h"
#include "model/tokenizer/token_file.h"
#include "model/tokenizer/tokenizer.h"
#include "verbs.h"

static const char USAGE[] =
    "usage: kvtrace tokenize (--model M | --tokenizer FILE) (--text T | --file F)\n"
    "                        [--no-special] [--pieces] [--offsets] [--decode]\n"
    "\n"
    "Prints the token ids of the text as one JSON array, as the model's own tokenizer\n"
    "gives them (its post-processor applied: e.g. Llama 3's BOS). --tokenizer FILE is a\n"
    "Hugging Face tokenizer.json. --no-special adds no special tokens (special tokens\n"
    "written in the text are still matched). --pieces: the pieces as the vocabulary\n"
    "spells them; --offsets: each token's [start, end) byte offsets into the text;\n"
    "--decode: the text is a JSON array of ids, printed back as text.\n"
    "Text that is not valid UTF-8 is refused (exit 3, naming the byte offset).\n";

typedef struct {
    const char *model, *tokenizer, *text, *file;
    bool no_special, pieces, offsets, decode;
} tok_opts;

static int parse(int argc, char **argv, tok_opts *o, kv_err *err)
{
    static const struct option LONG[] = {
        {"model", required_argument, 0, 'm'}, {"tokenizer", required_argument, 0, 't'},
        {"text", required_argument, 0, 'x'},  {"file", required_argument, 0, 'f'},
        {"no-special", no_argument, 0, 'n'},  {"pieces", no_argument, 0, 'p'},
        {"offsets", no_argument, 0, 'o'},     {"decode", no_argument, 0, 'd'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, ":h", LONG, NULL)) != -1;) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 't': o->tokenizer = optarg; break;
        case 'x': o->text = optarg; break;
        case 'f': o->file = optarg; break;
        case 'n': o->no_special = true; break;
        case 'p': o->pieces = true; break;
        case 'o': o->offsets = true; break;
        case 'd': o->decode = true; break;
        case 'h': fputs(USAGE, stdout); return -1;
        default: return cli_bad_option(err, "tokenize", c, optopt, argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage(err, "tokenize", "unexpected argument '%s'", argv[optind]);
    if (!o->model == !o->tokenizer) return cli_usage(err, "tokenize", "give one of --model and --tokenizer");
    if (!o->text == !o->file) return cli_usage(err, "tokenize", "give one of --text and --file");
    if (o->pieces + o->offsets + o->decode > 1)
        return cli_usage(err, "tokenize", "--pieces, --offsets and --decode exclude each other");
    return KV_OK;
}

static void json_string(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

static void print_result(const tok_opts *o, const kv_vocab *v, const int32_t *ids, const int64_t *off, int64_t n)
{
    putchar('[');
    for (int64_t i = 0; i < n; i++) {
        if (i) putchar(',');
        if (o->pieces) json_string(ids[i] >= 0 && ids[i] < v->n ? v->pieces[ids[i]] : "");
        else if (o->offsets) printf("[%lld,%lld]", (long long)off[2 * i], (long long)off[2 * i + 1]);
        else printf("%d", (int)ids[i]);
    }
    puts("]");
}

static int run(const tok_opts *o, const kv_vocab *v, const char *text, size_t len, kv_err *err)
{
    int32_t *ids = NULL;
    int64_t n = 0, *off = NULL;
    int rc;
    if (o->decode) {
        rc = token_file_parse(o->file ? o->file : "--text", text, len, v->n, &ids, &n, err);
        size_t out_len = 0;
        char *s = rc ? NULL : tokenizer_decode_len(v, ids, n, &out_len);
        if (!rc && !s) rc = kv_fail(err, KV_EFAIL, "out of memory");
        if (s) fwrite(s, 1, out_len, stdout), putchar('\n');
        free(s);
    } else {
        rc = tokenizer_encode_offsets(v, text, len, !o->no_special, &ids, o->offsets ? &off : NULL, &n, err);
        if (!rc) print_result(o, v, ids, off, n);
    }
    free(ids);
    free(off);
    return rc;
}

int verb_tokenize(int argc, char **argv)
{
    kv_err err = {0};
    tok_opts o = {0};
    int rc = parse(argc, argv, &o, &err);
    if (rc) return rc < 0 ? 0 : cli_report(&err);
    kv_model m = {0};
    kv_vocab v = {0};
    bool has = false;
    const kv_vocab *use = &v;
    if (o.tokenizer) {
        rc = hf_read_tokenizer(o.tokenizer, 0, &v, &has, &err);
        if (!rc && !has) rc = kv_fail(&err, KV_EINPUT, "%s: not a BPE tokenizer kvtrace reads", o.tokenizer);
    } else {
        rc = model_load(o.model, NULL, &m, &err);
        if (!rc && !m.has_vocab) rc = kv_fail(&err, KV_EINPUT, "%s: the model has no tokenizer", o.model);
        use = &m.vocab;
    }
    char *text = NULL;
    size_t len = 0;
    if (!rc && o.file) rc = prompt_read_text(o.file, &text, &len, &err);
    if (!rc) rc = run(&o, use, text ? text : o.text, text ? len : strlen(o.text), &err);
    free(text);
    vocab_free(&v);
    if (o.model) model_free(&m);
    return rc ? cli_report(&err) : 0;
}
