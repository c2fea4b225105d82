/* `kvtrace prompts TASK`: needle-in-a-haystack prompt sets for capture
 * --prompts (docs/study.md, "Needle prompts" and "RULER's synthetic tasks").
 * For each length (tokens of the model's tokenizer, BOS included), depth and
 * (for the RULER families) seed: as many of the haystack's whole sentences as
 * fit (n words), each needle at the sentence boundary nearest round(its depth
 * * n), then the question and the answer; the needles and the answer marked
 * as spans. The needles, question and answer are cli/prompts_tasks.c's. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/prompts_cwe.h"
#include "cli/prompts_tasks.h"
#include "core/cli_args.h"
#include "core/utf8.h"
#include "core/outfile.h"
#include "model/model.h"
#include "model/model_fetch.h"
#include "model/tokenizer/prompt.h"
#include "model/tokenizer/tokenizer.h"
#include "verbs.h"

static const char USAGE[] =
    "usage: kvtrace prompts needle --haystack FILE --needle TEXT --question TEXT --answer TEXT\n"
    "                              --depths LIST --lengths LIST [--model M] [--chat [--system TEXT]]\n"
    "                              [--force] -o P.jsonl\n"
    "       kvtrace prompts niah|multikey|multivalue|multiquery|vt --depths LIST --lengths LIST\n"
    "                              [--seeds LIST] [--haystack FILE] [--keys K] [--values V] [--queries Q]\n"
    "                              [--hops H] [--model M] [--chat [--system TEXT]] [--force] -o P.jsonl\n"
    "       kvtrace prompts cwe --lengths LIST [--seeds LIST] [--frequency F] [--model M]\n"
    "                              [--chat [--system TEXT]] [--force] -o P.jsonl\n"
    "\n"
    "Writes needle-in-a-haystack prompts for `kvtrace capture --prompts`: for each length in\n"
    "--lengths (tokens of the model's tokenizer, BOS included, at most its context) and each\n"
    "depth in --depths (0: the needle first, 1: right before the question), one prompt:\n"
    "the haystack's words (white space made single spaces; the file repeated when short)\n"
    "up to the last whole sentence that fits (n words), the needle at the sentence boundary\n"
    "nearest round(depth * n), the question, the answer. Each line marks the needle as the\n"
    "span 'needle', the question as the span 'question', and the answer as its answer.\n"
    "--model M: the model whose tokenizer counts (default: stories260K.gguf).\n"
    "--chat: prompts for an instruct model: each line gives \"messages\" (--system's message, if\n"
    "given, then a user message: the haystack with the needle, then the question) instead of\n"
    "\"text\"; capture puts them in the model's chat template and the answer after the assistant's\n"
    "turn opens. The lengths count the templated text's tokens, the answer's included.\n"
    "\n"
    "RULER's synthetic tasks (docs/study.md): a special magic number (7 digits) for a key word,\n"
    "asked back: niah one needle; multikey the asked one and K-1 distractors with other keys\n"
    "(--keys, 4); multivalue V numbers for one key, all asked (--values, 4); multiquery Q keys asked\n"
    "at once (--queries, 4); vt a chain of H+1 variable assignments (--hops, 4), every name asked.\n"
    "The asked needle goes at each depth, the others where the seed puts them (vt: evenly from\n"
    "the depth to the end). --seeds LIST (default 0): one prompt per seed, keys and numbers drawn\n"
    "from (seed, task, length, depth). --haystack: default RULER's noise (\"The grass is green. ...\").\n"
    "The question ends with RULER's answer prefix (\"The special magic number for KEY ... is\");\n"
    "with --chat the prefix opens the reply instead (the line's \"answer_prefix\").\n"
    "Ids TASK-LENGTH-DEPTH-SEED; the needles are spans needle, needle_2, ..., distractor_1, ...,\n"
    "the question the span question (capture --evict-until question: the context is what precedes it)\n"
    "cwe (common-words extraction): a numbered list of the model's whole-word tokens, 10 of them\n"
    "F times each (--frequency, 30), the others 3 times, shuffled, as long as fits; the answer is\n"
    "the 10, in the order they first occur. Ids cwe-LENGTH-SEED; no depths, no haystack.\n";

enum { MAX_ITEMS = 64 };

typedef struct {
    int task;   /* TASK_NEEDLE, ... (prompts_tasks.h) */
    const char *haystack, *needle, *question, *answer, *model, *output, *system;
    bool chat;
    double depths[MAX_ITEMS];
    int64_t lengths[MAX_ITEMS], seeds[MAX_ITEMS];
    int n_depths, n_lengths, n_seeds;
    prompt_task_sizes sizes;
    int frequency;   /* cwe: how often each common word occurs */
    bool force;
} needle_opts;

/* --keys, --values, --queries, --hops: the family's size, refused with any other task */
static int parse_size(const char *opt, const char *arg, int task, int owner, int *out, kv_err *err)
{
    if (task != owner) return cli_usage(err, "prompts", "%s goes with prompts %s", opt, PROMPT_TASKS[owner]);
    int64_t v = 0;
    int rc = cli_parse_i64("prompts", opt, arg, 1, TASK_MAX_NEEDLES - 1, &v, err);
    *out = (int)v;
    return rc;
}

static int parse_depths(const char *list, needle_opts *o, kv_err *err)
{
    cli_list l;
    int rc = cli_list_split("prompts", "--depths", list, MAX_ITEMS, &l, err);
    for (int i = 0; !rc && i < l.n; i++) {
        rc = cli_parse_double("prompts", "--depths", l.item[i], 0.0, 1.0, &o->depths[i], err);
        for (int j = 0; !rc && j < i; j++)
            if (o->depths[j] == o->depths[i]) rc = cli_list_repeat("prompts", "--depths", &l, j, i, "a depth",
                                                                   l.item[j], err);
    }
    o->n_depths = rc ? 0 : l.n;
    return rc;
}

static int parse(int argc, char **argv, needle_opts *o, kv_err *err)
{
    static const struct option LONG[] = {
        {"haystack", required_argument, 0, 'y'}, {"needle", required_argument, 0, 'n'},
        {"question", required_argument, 0, 'q'}, {"answer", required_argument, 0, 'a'},
        {"depths", required_argument, 0, 'd'},   {"lengths", required_argument, 0, 'l'},
        {"model", required_argument, 0, 'm'},    {"output", required_argument, 0, 'o'},
        {"force", no_argument, 0, 'f'},          {"help", no_argument, 0, 'h'},
        {"chat", no_argument, 0, 'c'},           {"system", required_argument, 0, 's'},
        {"seeds", required_argument, 0, 'e'},    {"keys", required_argument, 0, 'K'},
        {"values", required_argument, 0, 'V'},   {"queries", required_argument, 0, 'Q'},
        {"hops", required_argument, 0, 'H'},     {"frequency", required_argument, 0, 'F'},
        {0, 0, 0, 0}};
    if (argc < 2 || (o->task = prompt_task_find(argv[1])) < 0) {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) return fputs(USAGE, stdout), -1;
        return cli_usage(err, "prompts", "the first word is the kind of prompt set: needle, niah, multikey, multivalue, "
                         "multiquery, vt or cwe");
    }
    o->sizes = (prompt_task_sizes){.keys = 4, .values = 4, .queries = 4, .hops = 4};
    o->frequency = 30;
    int rc = KV_OK;
    optind = 2;
    unsigned char seen[256] = {0};
    for (int c; !rc && (c = getopt_long(argc, argv, ":ho:", LONG, NULL)) != -1;) {
        if (cli_once(seen, LONG, c, "prompts", err)) return err->code;
        switch (c) {
        case 'y': o->haystack = optarg; break;
        case 'n': o->needle = optarg; break;
        case 'q': o->question = optarg; break;
        case 'a': o->answer = optarg; break;
        case 'd': rc = parse_depths(optarg, o, err); break;
        case 'l': rc = cli_parse_i64_list("prompts", "--lengths", optarg, 2, 1 << 24, o->lengths, MAX_ITEMS,
                                          &o->n_lengths, err); break;
        case 'm': o->model = optarg; break;
        case 'o': o->output = optarg; break;
        case 'f': o->force = true; break;
        case 'c': o->chat = true; break;
        case 's': o->system = optarg; break;
        case 'e': rc = cli_parse_i64_list("prompts", "--seeds", optarg, 0, INT64_MAX, o->seeds, MAX_ITEMS,
                                          &o->n_seeds, err); break;
        case 'K': rc = parse_size("--keys", optarg, o->task, TASK_MULTIKEY, &o->sizes.keys, err); break;
        case 'V': rc = parse_size("--values", optarg, o->task, TASK_MULTIVALUE, &o->sizes.values, err); break;
        case 'Q': rc = parse_size("--queries", optarg, o->task, TASK_MULTIQUERY, &o->sizes.queries, err); break;
        case 'H': rc = parse_size("--hops", optarg, o->task, TASK_VT, &o->sizes.hops, err); break;
        case 'F': {
            int64_t v = 0;
            if (o->task != TASK_CWE) return cli_usage(err, "prompts", "--frequency goes with prompts cwe");
            rc = cli_parse_i64("prompts", "--frequency", optarg, CWE_RARE_FREQ + 1, 1000, &v, err);
            o->frequency = (int)v;
            break;
        }
        case 'h': fputs(USAGE, stdout); return -1;
        default: return cli_bad_option(err, "prompts", c, optopt, argv[optind - 1]);
        }
    }
    if (rc) return rc;
    if (optind < argc) return cli_usage(err, "prompts", "unexpected argument '%s'", argv[optind]);
    if (o->task != TASK_NEEDLE) {
        if (o->needle || o->question || o->answer)
            return cli_usage(err, "prompts", "--needle, --question and --answer go with prompts needle (%s makes its "
                             "own)", PROMPT_TASKS[o->task]);
        if (o->task == TASK_CWE && (o->n_depths || o->haystack))
            return cli_usage(err, "prompts", "cwe takes no --depths or --haystack: its numbered list is the whole "
                             "context");
        if (o->task == TASK_CWE) o->n_depths = 1, o->depths[0] = 0;
        if (!o->n_depths || !o->n_lengths || !o->output)
            return cli_usage(err, "prompts", "%s needs --depths, --lengths and -o", PROMPT_TASKS[o->task]);
        if (!o->n_seeds) o->n_seeds = 1, o->seeds[0] = 0;
    } else {
        if (o->n_seeds) return cli_usage(err, "prompts", "--seeds goes with the RULER tasks (niah, ...)");
        if (!o->haystack || !o->needle || !o->question || !o->answer || !o->n_depths || !o->n_lengths || !o->output)
            return cli_usage(err, "prompts", "needle needs --haystack, --needle, --question, --answer, --depths, "
                             "--lengths and -o");
        if (!*o->needle || !*o->question || !*o->answer)
            return cli_usage(err, "prompts", "--needle, --question and --answer must not be empty");
        o->n_seeds = 1;
    }
    if (o->system && !o->chat) return cli_usage(err, "prompts", "--system goes with --chat");
    const char *texts[][2] = {{"--needle", o->needle}, {"--question", o->question}, {"--answer", o->answer},
                              {"--system", o->system}};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {   /* prompts are UTF-8 (docs/study.md) */
        const int64_t bad = texts[i][1] ? kv_utf8_invalid(texts[i][1], strlen(texts[i][1])) : -1;
        if (bad >= 0)
            return cli_usage(err, "prompts", "%s is not valid UTF-8 at byte offset %lld (byte 0x%02X)", texts[i][0],
                             (long long)bad, (unsigned char)texts[i][1][bad]);
    }
    return KV_OK;
}

/* The haystack's words: w[i] points into buf (white space replaced by NULs). */
typedef struct {
    char *buf;
    char **w;
    int64_t n;
} words;

static int split_words(char *text, words *out, kv_err *err)
{
    out->buf = text, out->n = 0;
    size_t len = strlen(text), cap = len / 2 + 1;
    if (!(out->w = malloc(sizeof *out->w * cap))) return kv_fail(err, KV_EFAIL, "out of memory");
    for (size_t i = 0; i < len;) {
        while (i < len && strchr(" \t\r\n\v\f", text[i])) text[i++] = '\0';
        if (i < len) out->w[out->n++] = text + i;
        while (i < len && !strchr(" \t\r\n\v\f", text[i])) i++;
    }
    return KV_OK;
}

/* Whether word w ends a sentence: its last character, after closing quotes and brackets, is . ! or ?
 * (or the ellipsis); the haystack's last word (the file's end) counts as one too. */
static bool ends_sentence(const words *h, int64_t i)
{
    if (i % h->n == h->n - 1) return true;
    const char *w = h->w[i % h->n];
    size_t len = strlen(w);
    static const char *const CLOSERS[] = {"\"", "'", ")", "]", "}", "\xE2\x80\x9D", "\xE2\x80\x99", "\xC2\xBB"};
    for (bool cut = true; cut && len;) {   /* strip trailing closers (ASCII and the UTF-8 quotes) */
        cut = false;
        for (size_t k = 0; k < sizeof CLOSERS / sizeof CLOSERS[0]; k++) {
            const size_t c = strlen(CLOSERS[k]);
            if (len >= c && memcmp(w + len - c, CLOSERS[k], c) == 0) len -= c, cut = true;
        }
    }
    if (len >= 3 && memcmp(w + len - 3, "\xE2\x80\xA6", 3) == 0) return true;
    return len && strchr(".!?", w[len - 1]);
}

/* The sentence boundary of words [0, n) nearest to word m (0, n, and after every sentence's last
 * word; ties: the earlier), so the needle never splits a sentence of the haystack. */
static int64_t needle_at(const words *h, int64_t n, int64_t m)
{
    int64_t best = 0;
    for (int64_t k = 1; k <= n; k++)
        if ((k == n || ends_sentence(h, k - 1)) && llabs(k - m) < llabs(best - m)) best = k;
    return best;
}

/* The prompt of words [0, n) of the (cyclic) haystack, each needle at the sentence boundary nearest
 * round(its depth * n) of them (needles at one boundary in the task's order), then the question and (but
 * with --chat: it follows the template) the reply: the answer prefix, if any, and the answer. */
static char *assemble(const needle_opts *o, const prompt_task *t, const char *reply, const words *h, int64_t n)
{
    int64_t at[TASK_MAX_NEEDLES];
    size_t len = strlen(t->question) + strlen(reply) + 4;
    for (int k = 0; k < t->n; k++) {
        at[k] = needle_at(h, n, (int64_t)llround(t->depth[k] * (double)n));
        len += strlen(t->needle[k]) + 1;
    }
    for (int64_t i = 0; i < n; i++) len += strlen(h->w[i % h->n]) + 1;
    char *s = malloc(len), *p = s;
    if (!s) return NULL;
    *p = '\0';
    for (int64_t i = 0; i <= n; i++) {
        for (int k = 0; k < t->n; k++)
            if (at[k] == i) p += sprintf(p, "%s%s", p == s ? "" : " ", t->needle[k]);
        if (i < n) p += sprintf(p, "%s%s", p == s ? "" : " ", h->w[i % h->n]);
    }
    if (o->chat) sprintf(p, " %s", t->question);
    else sprintf(p, " %s %s", t->question, reply);
    return s;
}

/* With --chat: the user message text in the chat template, then the answer. */
static int templated(const needle_opts *o, const char *answer, const kv_model *m, const char *text, char **out,
                     kv_err *err)
{
    const prompt_source src = {.text = text, .chat = {.on = true, .system = o->system}};
    char *t = NULL;
    int rc = prompt_chat_render(&src, text, m, o->model ? o->model : "prompts", &t, NULL, err);
    *out = rc ? NULL : malloc(strlen(t) + strlen(answer) + 1);
    if (!rc && !*out) rc = kv_fail(err, KV_EFAIL, "out of memory");
    if (!rc) sprintf(*out, "%s%s", t, answer);
    free(t);
    return rc;
}

static int count_tokens(const needle_opts *o, const char *answer, const kv_model *m, const char *text, int64_t *n,
                        kv_err *err)
{
    char *t = NULL;
    int rc = o->chat ? templated(o, answer, m, text, &t, err) : KV_OK;
    const prompt_source src = {.text = t ? t : text, .templated = o->chat};
    int32_t *ids = NULL;
    if (!rc) rc = prompt_tokens(&src, m, "prompts", &ids, n, err);
    free(ids), free(t);
    return rc;
}

/* The most words whose prompt has at most `length` tokens (binary search; counts grow with words),
 * then cut back to the last whole sentence among them (when there is one), so that the haystack
 * never stops mid-sentence before the question. */
static int fit(const needle_opts *o, const prompt_task *t, const char *reply, const kv_model *m, const words *h,
               int64_t length, char **text, kv_err *err)
{
    int64_t lo = 0, hi = length, n = 0;
    char *s = assemble(o, t, reply, h, 0);
    int rc = s ? count_tokens(o, reply, m, s, &n, err) : kv_fail(err, KV_EFAIL, "out of memory");
    free(s);
    if (!rc && n > length)
        return kv_fail(err, KV_EUSAGE, "prompts: --lengths %lld is too short: the needle%s, question and answer "
                       "alone take %lld tokens", (long long)length, t->n > 1 ? "s" : "", (long long)n);
    while (!rc && lo < hi) { /* the answer lies in [lo, hi] */
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (!(s = assemble(o, t, reply, h, mid))) return kv_fail(err, KV_EFAIL, "out of memory");
        rc = count_tokens(o, reply, m, s, &n, err);
        free(s);
        if (!rc && n <= length) lo = mid;
        else hi = mid - 1;
    }
    int64_t cut = lo;
    while (cut > 0 && !ends_sentence(h, cut - 1)) cut--;
    if (cut == 0) cut = lo;   /* no sentence ends among them: as many words as fit */
    while (!rc) {   /* fewer words have fewer tokens, but check: a merge at the cut could differ */
        if (!(*text = assemble(o, t, reply, h, cut))) return kv_fail(err, KV_EFAIL, "out of memory");
        rc = count_tokens(o, reply, m, *text, &n, err);
        if (rc || n <= length || cut == 0) break;
        free(*text), *text = NULL;
        for (cut--; cut > 0 && !ends_sentence(h, cut - 1);) cut--;
    }
    if (rc) free(*text), *text = NULL;
    return rc;
}

static int write_line(FILE *f, const needle_opts *o, const char *id, const prompt_task *t, const char *text,
                      kv_err *err)
{
    json_t *line = o->chat ? json_pack("{s:s, s:[], s:[], s:s}", "id", id, "messages", "spans", "answer", t->answer)
                           : json_pack("{s:s, s:s, s:[], s:s}", "id", id, "text", text, "spans", "answer", t->answer);
    json_t *spans = line ? json_object_get(line, "spans") : NULL;
    for (int k = 0; spans && k < t->n; k++)
        if (json_array_append_new(spans, json_pack("{s:s, s:s}", "name", t->name[k], "text", t->needle[k])))
            spans = NULL;
    /* the question too: where the context ends (capture --evict-until question compresses what is before it) */
    if (spans && json_array_append_new(spans, json_pack("{s:s, s:s}", "name", "question", "text", t->question)))
        spans = NULL;
    if (!spans) json_decref(line), line = NULL;
    if (o->chat && line && t->prefix && json_object_set_new(line, "answer_prefix", json_string(t->prefix)))
        json_decref(line), line = NULL;
    json_t *msgs = o->chat && line ? json_object_get(line, "messages") : NULL;
    if (msgs && o->system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", o->system));
    if (msgs) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", text));
    char *s = line ? json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(line);
    if (!s) return kv_fail(err, KV_EFAIL, "out of memory");
    const bool ok = fprintf(f, "%s\n", s) > 0;
    free(s);
    return ok ? KV_OK : kv_fail(err, KV_EFAIL, "%s: cannot write", o->output);
}

/* Every needle's text, and the question's, once in the prompt (the haystack must not hold one) */
static int needles_once(const needle_opts *o, const prompt_task *t, const char *text, kv_err *err)
{
    for (int k = 0; k <= t->n; k++) { /* the needles, then the question (a span too) */
        const char *what = k < t->n ? t->needle[k] : t->question, *at = strstr(text, what);
        if (at && strstr(at + 1, what))
            return kv_fail(err, KV_EINPUT, "%s: the haystack holds the %s's text (it must occur once)",
                           o->haystack ? o->haystack : "the haystack", k < t->n ? "needle" : "question");
    }
    return KV_OK;
}

/* The reply after the question: the answer prefix (if any), then the answer; NULL when out of memory. */
static char *reply_of(const prompt_task *t)
{
    const char *prefix = t->prefix ? t->prefix : "";
    char *r = malloc(strlen(prefix) + strlen(t->answer) + 1);
    if (r) sprintf(r, "%s%s", prefix, t->answer);
    return r;
}

/* One prompt of (length, depth, seed) */
static int one_prompt(const needle_opts *o, const kv_model *m, const words *h, FILE *f, int64_t length,
                      double depth, int64_t seed, kv_err *err)
{
    prompt_task t;
    int rc = o->task == TASK_NEEDLE ? prompt_task_user(o->needle, o->question, o->answer, depth, &t, err)
                                    : prompt_task_make(o->task, &o->sizes, (uint64_t)seed, length, depth, &t, err);
    if (rc) return rc;
    char id[96], *text = NULL, *reply = reply_of(&t);
    if (!reply) rc = kv_fail(err, KV_EFAIL, "out of memory");
    if (o->task == TASK_NEEDLE) snprintf(id, sizeof id, "needle-%lld-%g", (long long)length, depth);
    else snprintf(id, sizeof id, "%s-%lld-%g-%lld", PROMPT_TASKS[o->task], (long long)length, depth, (long long)seed);
    if (!rc) rc = fit(o, &t, reply, m, h, length, &text, err);
    if (!rc) rc = needles_once(o, &t, text, err);
    if (!rc) rc = write_line(f, o, id, &t, text, err);
    free(text), free(reply);
    prompt_task_free(&t);
    return rc;
}

/* cwe's text for u uncommon words: the instruction and list, the question (and without --chat the reply) */
static int cwe_text(const needle_opts *o, const cwe_words *cw, int64_t u, int64_t length, int64_t seed,
                    prompt_task *t, char **reply, char **text, kv_err *err)
{
    char *body = NULL;
    int rc = prompt_cwe_make(cw, CWE_COMMON, o->frequency, u, (uint64_t)seed, length, t, &body, err);
    *reply = rc ? NULL : reply_of(t);
    *text = *reply ? malloc(strlen(body) + strlen(t->question) + strlen(*reply) + 3) : NULL;
    if (!rc && !*text) rc = kv_fail(err, KV_EFAIL, "out of memory");
    if (!rc) {
        sprintf(*text, "%s\n%s%s%s", body, t->question, o->chat ? "" : " ", o->chat ? "" : *reply);
    }
    free(body);
    if (rc) prompt_task_free(t), free(*reply), free(*text), *reply = *text = NULL;
    return rc;
}

static int cwe_count(const needle_opts *o, const cwe_words *cw, const kv_model *m, int64_t u, int64_t length,
                     int64_t seed, int64_t *n, kv_err *err)
{
    prompt_task t;
    char *reply = NULL, *text = NULL;
    int rc = cwe_text(o, cw, u, length, seed, &t, &reply, &text, err);
    if (!rc) {
        rc = count_tokens(o, reply, m, text, n, err);
        prompt_task_free(&t);
    }
    free(reply), free(text);
    return rc;
}

/* cwe's prompt of (length, seed): the most uncommon words whose prompt fits (binary search, then down
 * while a shuffle's merges make it longer). */
static int cwe_prompt(const needle_opts *o, const kv_model *m, const cwe_words *cw, FILE *f, int64_t length,
                      int64_t seed, kv_err *err)
{
    if (cw->n < CWE_COMMON + 1)
        return kv_fail(err, KV_EUSAGE, "prompts: cwe draws its words from the model's whole-word tokens (a space "
                       "and 4-10 lowercase letters); this vocabulary has %lld", (long long)cw->n);
    int64_t lo = 0, hi = cw->n - CWE_COMMON, n = 0;
    int rc = cwe_count(o, cw, m, 0, length, seed, &n, err);
    if (!rc && n > length)
        return kv_fail(err, KV_EUSAGE, "prompts: --lengths %lld is too short for cwe: its %d common words, %d "
                       "times each, take %lld tokens (a lower --frequency fits)", (long long)length, CWE_COMMON,
                       o->frequency, (long long)n);
    while (!rc && lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        rc = cwe_count(o, cw, m, mid, length, seed, &n, err);
        if (!rc && n <= length) lo = mid;
        else hi = mid - 1;
    }
    while (!rc && lo > 0 && !(rc = cwe_count(o, cw, m, lo, length, seed, &n, err)) && n > length) lo--;
    if (!rc && lo == cw->n - CWE_COMMON && n < length)
        return kv_fail(err, KV_EUSAGE, "prompts: cwe at --lengths %lld: the model's %lld whole-word tokens fill only "
                       "%lld tokens (a larger --frequency fills more)", (long long)length, (long long)cw->n,
                       (long long)n);
    prompt_task t;
    char *reply = NULL, *text = NULL, id[96];
    if (!rc) rc = cwe_text(o, cw, lo, length, seed, &t, &reply, &text, err);
    snprintf(id, sizeof id, "cwe-%lld-%lld", (long long)length, (long long)seed);
    if (!rc) {
        rc = write_line(f, o, id, &t, text, err);
        prompt_task_free(&t);
    }
    free(reply), free(text);
    return rc;
}

static int generate(const needle_opts *o, const kv_model *m, const words *h, FILE *f, kv_err *err)
{
    int rc = KV_OK;
    if (o->task == TASK_NEEDLE && (strstr(o->question, o->needle) || strstr(o->answer, o->needle)))
        return kv_fail(err, KV_EUSAGE, "prompts: the needle's text is inside the question or the answer");
    cwe_words words_of_model = {0}, *cw = &words_of_model;
    if (o->task == TASK_CWE) rc = prompt_cwe_words(&m->vocab, cw, err);
    for (int a = 0; !rc && a < o->n_lengths; a++) {
        if (m->cfg.context_len > 0 && o->lengths[a] > m->cfg.context_len)
            rc = kv_fail(err, KV_EUSAGE, "prompts: --lengths %lld is past the model's context (%lld tokens)",
                         (long long)o->lengths[a], (long long)m->cfg.context_len);
        for (int d = 0; !rc && d < o->n_depths; d++)
            for (int e = 0; !rc && e < o->n_seeds; e++)
                rc = o->task == TASK_CWE ? cwe_prompt(o, m, cw, f, o->lengths[a], o->seeds[e], err)
                                         : one_prompt(o, m, h, f, o->lengths[a], o->depths[d], o->seeds[e], err);
    }
    prompt_cwe_words_free(cw);
    return rc;
}

static int needle_run(const needle_opts *o, kv_err *err)
{
    char model_path[4096];
    const char *model = o->model;
    int rc = model_resolve(o->model, model_path, sizeof model_path, &model, err);
    const char *inputs[] = {model, o->haystack};
    if (!rc) rc = outfile_check_inputs(o->output, inputs, o->haystack ? 2 : 1, err);
    char *text = NULL;
    size_t len = 0;
    words h = {0};
    if (!rc && o->haystack) rc = prompt_read_text(o->haystack, &text, &len, err);
    else if (!rc && !(text = strdup(PROMPT_NOISE_HAYSTACK))) rc = kv_fail(err, KV_EFAIL, "out of memory");
    if (!rc) len = o->haystack ? len : strlen(text);
    if (!rc && strlen(text) != len) rc = kv_fail(err, KV_EINPUT, "%s: the haystack holds a NUL byte", o->haystack);
    const int64_t bad = rc ? -1 : kv_utf8_invalid(text, len);
    if (bad >= 0)
        rc = kv_fail(err, KV_EINPUT, "%s: the haystack is not valid UTF-8 at byte offset %lld (byte 0x%02X)",
                     o->haystack, (long long)bad, (unsigned char)text[bad]);
    if (!rc) rc = split_words(text, &h, err);
    else free(text);
    if (!rc && h.n == 0) rc = kv_fail(err, KV_EINPUT, "%s: the haystack holds no words", o->haystack);
    kv_model m;
    memset(&m, 0, sizeof m);
    if (!rc) rc = model_load(model, NULL, &m, err);
    kv_outfile out;
    bool started = false;
    if (!rc) rc = outfile_begin(&out, o->output, o->force, err), started = rc == KV_OK;
    FILE *f = rc ? NULL : fopen(out.tmp_path, "w");
    if (!rc && !f) rc = kv_fail(err, KV_EFAIL, "%s: cannot create", o->output);
    if (!rc) rc = generate(o, &m, &h, f, err);
    if (f && fclose(f) != 0 && !rc) rc = kv_fail(err, KV_EFAIL, "%s: cannot write", o->output);
    if (!rc) rc = outfile_commit(&out, err);
    else if (started) outfile_abort(&out);
    model_free(&m);
    free(h.buf), free(h.w);
    return rc;
}

int prompts_main(int argc, char **argv)
{
    needle_opts o = {0};
    kv_err err = {0};
    int rc = parse(argc, argv, &o, &err);
    if (rc < 0) return 0;
    if (!rc) rc = needle_run(&o, &err);
    return cli_exit(rc, &err);
}
