/* `kvtrace tokenize`: text to token ids (or pieces, or offsets) with a
 * model's tokenizer or a tokenizer.json, and ids back to text (--decode). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "model/formats/format.h"
#include "model/formats/hf.h"
#include "model/model.h"
#include "model/model_fetch.h"
#include "model/tokenizer/chat.h"
#include "model/tokenizer/prompt.h"
#include "model/tokenizer/token_file.h"
#include "model/tokenizer/tokenizer.h"
#include "verbs.h"

static const char USAGE[] =
    "usage: kvtrace tokenize (--model M | --tokenizer FILE) (--text T | --file F | --messages F.json)\n"
    "                        [--no-special] [--pieces] [--offsets] [--decode] [--batch]\n"
    "                        [--chat [--system TEXT]] [--chat-date TEXT] [--no-thinking] [--rendered]\n"
    "\n"
    "Prints the token ids of the text as one JSON array, as the model's own tokenizer\n"
    "gives them (its post-processor applied: e.g. Llama 3's BOS). --tokenizer FILE is a\n"
    "Hugging Face tokenizer.json or a GGUF file (its tokenizer.ggml.*). --no-special adds\n"
    "no special tokens (special tokens written in the text are still matched).\n"
    "--pieces: the pieces as the vocabulary "
    "spells them; --offsets: each token's [start, end) byte offsets into the text;\n"
    "--decode: the text is a JSON array of ids, printed back as text.\n"
    "--batch: many texts in one run: each line of the input (--file or --text) is one JSON\n"
    "string (for --decode one JSON array of ids), and each prints one JSON value on its\n"
    "own line (the array; for --decode the text as a JSON string). A bad line is refused\n"
    "naming it, and nothing is printed.\n"
    "Text that is not valid UTF-8 is refused (exit 3, naming the byte offset).\n"
    "--chat: the text is a user message, put in the model's chat template (the GGUF's\n"
    "tokenizer.chat_template, or tokenizer_config.json / chat_template.jinja beside a\n"
    "tokenizer.json) with the assistant's turn opened; the ids are those of the templated\n"
    "text, no special tokens added (the template writes them). With --batch a line may also\n"
    "be a JSON array of {\"role\", \"content\"}: a whole conversation. --rendered prints the\n"
    "templated text (a JSON string) instead of its ids.\n"
    PROMPT_CHAT_HELP
    "The chat templates kvtrace knows (family, sha256 of the template's text, where it is from):\n";

typedef struct {
    const char *model, *tokenizer, *text, *file;
    bool no_special, pieces, offsets, decode, batch, rendered;
    prompt_source chat; /* the chat options, and --messages */
} tok_opts;

static int parse(int argc, char **argv, tok_opts *o, kv_err *err)
{
    static const struct option LONG[] = {
        {"model", required_argument, 0, 'm'}, {"tokenizer", required_argument, 0, 't'},
        {"text", required_argument, 0, 'x'},  {"file", required_argument, 0, 'f'},
        {"no-special", no_argument, 0, 'n'},  {"pieces", no_argument, 0, 'p'},
        {"offsets", no_argument, 0, 'o'},     {"decode", no_argument, 0, 'd'},
        {"batch", no_argument, 0, 'b'},       {"help", no_argument, 0, 'h'},
        {"chat", no_argument, 0, 'c'},        {"system", required_argument, 0, 's'},
        {"messages", required_argument, 0, 'M'}, {"chat-date", required_argument, 0, 'D'},
        {"no-thinking", no_argument, 0, 'T'}, {"rendered", no_argument, 0, 'r'},
        {0, 0, 0, 0}};
    optind = 1;
    unsigned char seen[256] = {0};
    for (int c; (c = getopt_long(argc, argv, ":h", LONG, NULL)) != -1;) {
        if (cli_once(seen, LONG, c, "tokenize", err)) return err->code;
        switch (c) {
        case 'm': o->model = optarg; break;
        case 't': o->tokenizer = optarg; break;
        case 'x': o->text = optarg; break;
        case 'f': o->file = optarg; break;
        case 'n': o->no_special = true; break;
        case 'p': o->pieces = true; break;
        case 'o': o->offsets = true; break;
        case 'd': o->decode = true; break;
        case 'b': o->batch = true; break;
        case 'c': o->chat.chat.on = true; break;
        case 's': o->chat.chat.system = optarg; break;
        case 'M': o->chat.messages_file = optarg; break;
        case 'D': o->chat.chat.date = optarg; break;
        case 'T': o->chat.chat.no_thinking = true; break;
        case 'r': o->rendered = true; break;
        case 'h': fputs(USAGE, stdout), chat_print_known(stdout); return -1;
        default: return cli_bad_option(err, "tokenize", c, optopt, argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage(err, "tokenize", "unexpected argument '%s'", argv[optind]);
    if (!o->model == !o->tokenizer) return cli_usage(err, "tokenize", "give one of --model and --tokenizer");
    if (!!o->text + !!o->file + !!o->chat.messages_file != 1)
        return cli_usage(err, "tokenize", "give one of --text, --file and --messages");
    if (o->pieces + o->offsets + o->decode > 1)
        return cli_usage(err, "tokenize", "--pieces, --offsets and --decode exclude each other");
    o->chat.text = o->text, o->chat.text_file = o->file;
    int rc = prompt_chat_check(&o->chat, "tokenize", false, err);
    if (rc) return rc;
    const bool chat = prompt_is_chat(&o->chat);
    if (chat && (o->decode || o->no_special))
        return cli_usage(err, "tokenize", "--chat and --messages encode a templated text: not with --decode or "
                         "--no-special (the template writes the special tokens)");
    if (o->rendered && !chat) return cli_usage(err, "tokenize", "--rendered goes with --chat or --messages");
    if (o->chat.messages_file && o->batch) return cli_usage(err, "tokenize", "--messages is one conversation: not "
                                                            "with --batch (give conversations as --batch lines)");
    return KV_OK;
}

/* The length of the valid UTF-8 sequence at p[0..n), 0 if there is none. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    size_t k = p[0] < 0x80 ? 1 : p[0] >= 0xC2 && p[0] < 0xE0 ? 2 : p[0] >= 0xE0 && p[0] < 0xF0 ? 3
             : p[0] >= 0xF0 && p[0] < 0xF5 ? 4 : 0;
    if (!k || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if (k == 3 && ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] >= 0xA0))) return 0;
    if (k == 4 && ((p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] >= 0x90))) return 0;
    return k;
}

/* s[0..n) as a JSON string; a byte that is not part of valid UTF-8 is
 * written as U+FFFD (JSON cannot hold it). */
static void json_str(FILE *out, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', out);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len(p + i, n - i);
        if (!k) fputs("\xEF\xBF\xBD", out), k = 1;
        else if (p[i] == '"' || p[i] == '\\') fprintf(out, "\\%c", p[i]);
        else if (p[i] < 0x20 || p[i] == 0x7F) fprintf(out, "\\u%04x", p[i]);
        else fwrite(p + i, 1, k, out);
        i += k;
    }
    fputc('"', out);
}

/* v in decimal: fprintf's "%d" costs more than encoding a token (make bench). */
static void put_int(FILE *out, long long v)
{
    char b[24];
    int k = sizeof b;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do b[--k] = (char)('0' + u % 10); while (u /= 10);
    if (v < 0) b[--k] = '-';
    fwrite(b + k, 1, sizeof b - (size_t)k, out);
}

static void print_result(FILE *out, const tok_opts *o, const kv_vocab *v, const int32_t *ids, const int64_t *off,
                         int64_t n)
{
    fputc('[', out);
    for (int64_t i = 0; i < n; i++) {
        if (i) fputc(',', out);
        const char *piece = ids[i] >= 0 && ids[i] < v->n ? v->pieces[ids[i]] : "";
        if (o->pieces) json_str(out, piece, strlen(piece));
        else if (o->offsets) {
            fputc('[', out), put_int(out, off[2 * i]), fputc(',', out), put_int(out, off[2 * i + 1]);
            fputc(']', out);
        } else put_int(out, ids[i]);
    }
    fputs("]\n", out);
}

/* The chat options' conversation (a user message `text` after --system, or
 * conv: a JSON array of messages, or --messages' file) rendered in v's
 * template into *out. */
static int chat_text(const tok_opts *o, const kv_vocab *v, const char *text, size_t len, json_t *conv, char **out,
                     kv_err *err)
{
    const char *where = o->model ? o->model : o->tokenizer;
    if (!conv && text && strlen(text) != len)
        return kv_fail(err, KV_EINPUT, "%s: the message holds a NUL byte", o->file ? o->file : "--text");
    chat_message *m = NULL;
    int n = 0;
    int rc = conv ? chat_messages_from_json(conv, o->file ? o->file : "--text", &m, &n, err)
                  : prompt_conversation(&o->chat, text, &m, &n, err);
    const chat_options co = {.date = o->chat.chat.date, .no_thinking = o->chat.chat.no_thinking};
    const chat_known *k = NULL;
    if (!rc) rc = chat_render(v, where, m, n, &co, out, &k, err);
    chat_messages_free(m, n);
    return rc;
}

/* Encodes text[0..len) (or, for --decode, decodes the ids) and prints the
 * result: raw text for --decode unless as_json. With --chat the text is a
 * message (conv: a conversation) and the templated text is encoded. */
static int run_ids(FILE *out, const tok_opts *o, const kv_vocab *v, const char *text, size_t len,
                   const int32_t *dec_ids, int64_t dec_n, bool as_json, json_t *conv, kv_err *err)
{
    int rc = KV_OK;
    if (prompt_is_chat(&o->chat)) {
        char *t = NULL;
        rc = chat_text(o, v, text, len, conv, &t, err);
        if (!rc && o->rendered) json_str(out, t, strlen(t)), fputc('\n', out);
        else if (!rc) {
            tok_opts plain = *o;
            plain.chat = (prompt_source){0}, plain.no_special = true;
            rc = run_ids(out, &plain, v, t, strlen(t), NULL, 0, as_json, NULL, err);
        }
        free(t);
        return rc;
    }
    if (o->decode) {
        size_t out_len = 0;
        char *s = tokenizer_decode_len(v, dec_ids, dec_n, &out_len);
        if (!s) return kv_fail(err, KV_EFAIL, "out of memory");
        if (as_json) json_str(out, s, out_len);
        else fwrite(s, 1, out_len, out);
        fputc('\n', out);
        free(s);
        return KV_OK;
    }
    int32_t *ids = NULL;
    int64_t n = 0, *off = NULL;
    rc = tokenizer_encode_offsets(v, text, len, !o->no_special, &ids, o->offsets ? &off : NULL, &n, err);
    if (!rc) print_result(out, o, v, ids, off, n);
    free(ids);
    free(off);
    return rc;
}

static int run(const tok_opts *o, const kv_vocab *v, const char *text, size_t len, kv_err *err)
{
    if (!o->decode) return run_ids(stdout, o, v, text, len, NULL, 0, false, NULL, err);
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc = token_file_parse(o->file ? o->file : "--text", text, len, v->n, &ids, &n, err);
    if (!rc) rc = run_ids(stdout, o, v, NULL, 0, ids, n, false, NULL, err);
    free(ids);
    return rc;
}

/* One --batch line's JSON array of ids (--decode). */
static int batch_ids(const json_t *j, const kv_vocab *v, int32_t **ids, int64_t *n)
{
    if (!json_is_array(j)) return -1;
    size_t count = json_array_size(j);
    *ids = malloc((count ? count : 1) * sizeof(int32_t));
    if (!*ids) return -1;
    for (size_t i = 0; i < count; i++) {
        const json_t *x = json_array_get(j, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= v->n) return -1;
        (*ids)[i] = (int32_t)json_integer_value(x);
    }
    *n = (int64_t)count;
    return 0;
}

/* One --batch line: a JSON string (or, for --decode, an array of ids). */
static int batch_line(FILE *out, const tok_opts *o, const kv_vocab *v, const char *line, size_t len,
                      const char *name, long lineno, kv_err *err)
{
    json_error_t je;
    json_t *j = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    int rc = KV_OK;
    if (!j) return kv_fail(err, KV_EINPUT, "%s: line %ld: not JSON (%s)", name, lineno, je.text);
    if (o->decode) {
        int32_t *ids = NULL;
        int64_t n = 0;
        if (batch_ids(j, v, &ids, &n))
            rc = kv_fail(err, KV_EINPUT, "%s: line %ld: not a JSON array of token ids below %d", name, lineno, v->n);
        else rc = run_ids(out, o, v, NULL, 0, ids, n, true, NULL, err);
        free(ids);
    } else if (!json_is_string(j) && !(json_is_array(j) && prompt_is_chat(&o->chat))) {
        rc = kv_fail(err, KV_EINPUT, "%s: line %ld: not a JSON string%s", name, lineno,
                     prompt_is_chat(&o->chat) ? " or an array of messages" : "");
    } else {
        const bool conv = json_is_array(j);
        rc = run_ids(out, o, v, conv ? NULL : json_string_value(j), conv ? 0 : json_string_length(j), NULL, 0, false,
                     conv ? j : NULL, err);
        if (rc) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            rc = kv_fail(err, rc, "%s: line %ld: %s", name, lineno, msg);
        }
    }
    json_decref(j);
    return rc;
}

/* --batch: every non-empty line of text[0..len) through batch_line; the
 * output goes to stdout only when every line worked. */
static int run_batch(const tok_opts *o, const kv_vocab *v, const char *text, size_t len, kv_err *err)
{
    char *buf = NULL;
    size_t buf_len = 0;
    FILE *out = open_memstream(&buf, &buf_len);
    if (!out) return kv_fail(err, KV_EFAIL, "out of memory");
    const char *name = o->file ? o->file : "--text";
    int rc = KV_OK;
    long lineno = 0;
    for (size_t at = 0; !rc && at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        lineno++;
        if (end > at) rc = batch_line(out, o, v, text + at, end - at, name, lineno, err);
        at = end + 1;
    }
    if (fclose(out) && !rc) rc = kv_fail(err, KV_EFAIL, "out of memory");
    if (!rc) fwrite(buf, 1, buf_len, stdout);
    free(buf);
    return rc;
}

/* --tokenizer FILE is a GGUF file (by its magic) rather than a tokenizer.json. */
static bool is_gguf(const char *path)
{
    char head[4] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(head, 1, 4, f) : 0;
    if (f) fclose(f);
    return n == 4 && memcmp(head, "GGUF", 4) == 0;
}

int tokenize_main(int argc, char **argv)
{
    kv_err err = {0};
    tok_opts o = {0};
    int rc = parse(argc, argv, &o, &err);
    if (rc) return rc < 0 ? 0 : cli_report(&err);
    kv_model m = {0};
    kv_vocab v = {0};
    bool has = false;
    const kv_vocab *use = &v;
    char path[4096];
    if (o.tokenizer) {
        rc = is_gguf(o.tokenizer) ? gguf_read_tokenizer(o.tokenizer, &v, &has, &err)
                                  : hf_read_tokenizer(o.tokenizer, 0, &v, &has, &err);
        if (!rc && !has) rc = kv_fail(&err, KV_EINPUT, "%s: not a BPE tokenizer kvtrace reads", o.tokenizer);
    } else {
        rc = model_resolve(o.model, path, sizeof path, &o.model, &err);
        if (!rc) rc = model_load(o.model, NULL, &m, &err);
        if (!rc && !m.has_vocab) rc = kv_fail(&err, KV_EINPUT, "%s: the model has no tokenizer", o.model);
        use = &m.vocab;
    }
    char *text = NULL;
    size_t len = 0;
    if (!rc && o.file) rc = prompt_read_text(o.file, &text, &len, &err);
    const char *t = text ? text : o.text;
    if (!rc) rc = (o.batch ? run_batch : run)(&o, use, t, text ? len : t ? strlen(t) : 0, &err);
    free(text);
    vocab_free(&v);
    if (o.model) model_free(&m);
    return cli_exit(rc, &err);
}
