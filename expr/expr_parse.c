/* expr_parse: "NAME = EXPR [; protect = ITEM, ...]" into a stack program
 * (expr.h). Recursive descent, lowest precedence first:
 *   cond   := cmp ['?' cond ':' cond]
 *   cmp    := sum [('<' | '<=' | '>' | '>=' | '==' | '!=') sum]
 *   sum    := prod {('+' | '-') prod}
 *   prod   := unary {('*' | '/') unary}
 *   unary  := '-' unary | power
 *   power  := atom ['^' unary]                       (right-associative)
 *   atom   := NUMBER | inf | '(' cond ')' | FEATURE ['(' NUMBER {',' NUMBER} ')'] | FUNCTION '(' cond {',' cond} ')'
 * Every error names the column (from 1, in the whole definition) and, for an
 * unknown name, the nearest known one when it is close (nearest()); NAME(
 * is an unknown function, a feature's arguments are counted. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli_args.h"
#include "expr/expr.h"

typedef struct {
    const char *name;
    expr_opcode op;
    int min_args, max_args;
} expr_func;

static const expr_func FUNCS[] = {
    {"log", EO_LOG, 1, 1},   {"exp", EO_EXP, 1, 1},       {"sqrt", EO_SQRT, 1, 1}, {"abs", EO_ABS, 1, 1},
    {"min", EO_MIN, 2, 8},   {"max", EO_MAX, 2, 8},       {"clamp", EO_CLAMP, 3, 3}, {"z", EO_Z, 1, 1},
    {"rank", EO_RANK, 1, 1}, {"minmax", EO_MINMAX, 1, 1}, {"softmax", EO_SOFTMAX, 1, 1},
};
#define N_FUNCS ((int)(sizeof FUNCS / sizeof FUNCS[0]))

typedef struct {
    const char *text;   /* the whole definition (columns count from its start) */
    const char *s;      /* the cursor */
    const char *end;    /* the end of the part being parsed */
    const char *name;
    expr_prog *p;
    int sp;             /* stack depth at the cursor */
    kv_err *err;
} parser;

static int col(const parser *ps, const char *at) { return (int)(at - ps->text) + 1; }

static int fail_at(const parser *ps, const char *at, const char *fmt, const char *a, const char *b)
{
    char what[256];
    snprintf(what, sizeof what, fmt, a, b);
    return kv_fail(ps->err, KV_EUSAGE, "--define %s: col %d: %s", ps->name, col(ps, at), what);
}

static void skip(parser *ps)
{
    while (ps->s < ps->end && isspace((unsigned char)*ps->s)) ps->s++;
}

static bool eat(parser *ps, const char *tok)
{
    skip(ps);
    size_t len = strlen(tok);
    if ((size_t)(ps->end - ps->s) < len || strncmp(ps->s, tok, len) != 0) return false;
    if (len == 1 && strchr("<>=!", tok[0]) && ps->s + 1 < ps->end && ps->s[1] == '=') return false;
    ps->s += len;
    return true;
}

/* What stands at the cursor, for "expected X, found Y". */
static void found(const parser *ps, char *buf, size_t cap)
{
    if (ps->s >= ps->end) snprintf(buf, cap, "the end");
    else snprintf(buf, cap, "'%.*s'", (int)strcspn(ps->s, " \t") > 12 ? 12 : (int)strcspn(ps->s, " \t"), ps->s);
}

static int expect(parser *ps, const char *tok)
{
    if (eat(ps, tok)) return KV_OK;
    char f[32], t[8];
    found(ps, f, sizeof f);
    snprintf(t, sizeof t, "'%s'", tok);
    return fail_at(ps, ps->s, "expected %s, found %s", t, f);
}

static int emit(parser *ps, expr_opcode op, int slot, double c, int pops, const char *at)
{
    if (ps->p->n_ins >= EXPR_MAX_INS) return fail_at(ps, at, "the expression is longer than %s%s", "256 steps", "");
    ps->p->ins[ps->p->n_ins++] = (expr_ins){op, slot, c};
    ps->sp += 1 - pops;
    if (ps->sp > EXPR_MAX_DEPTH) return fail_at(ps, at, "the expression nests deeper than %s%s", "64", "");
    if (ps->sp > ps->p->depth) ps->p->depth = ps->sp;
    return KV_OK;
}

/* Levenshtein distance, for "did you mean". */
static int distance(const char *a, size_t la, const char *b)
{
    size_t lb = strlen(b);
    if (la > 31 || lb > 31) return 99;
    int d[32][32];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int x = d[i - 1][j] + 1, y = d[i][j - 1] + 1, z = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            d[i][j] = x < y ? (x < z ? x : z) : (y < z ? y : z);
        }
    return d[la][lb];
}

/* The nearest known name within a distance that fits the name's length (none under 3 characters, 1 edit
 * under 5, else 2): a suggestion, never a guess. A call (NAME followed by '(') is compared with what takes
 * arguments, the functions and the features with parameters. */
static const char *nearest(const char *at, size_t len, bool call)
{
    const char *best = NULL;
    int bd = len < 3 ? 0 : len < 5 ? 1 : 2;
    for (int i = 0; i < EF_COUNT + N_FUNCS; i++) {
        const char *c = i < EF_COUNT ? EXPR_FEATURES[i].name : FUNCS[i - EF_COUNT].name;
        if (call && i < EF_COUNT && EXPR_FEATURES[i].n_args == 0) continue;
        int d = distance(at, len, c);
        if (d <= bd && (!best || d < bd)) bd = d, best = c;
    }
    return best;
}

static int unknown_name(parser *ps, const char *at, size_t len)
{
    skip(ps);
    const bool call = ps->s < ps->end && *ps->s == '(';
    char what[64], hint[200] = "; kvtrace policies --features lists them";
    snprintf(what, sizeof what, "%.*s", (int)len, at);
    static const char *const PROTECT[] = {"sinks", "recent", "recent_n"};
    for (int i = 0; i < 3; i++)
        if (strcmp(what, PROTECT[i]) == 0)
            snprintf(hint, sizeof hint, " (%s is a protect item: EXPR; protect = %s(...))", what, what);
    const char *best = hint[0] == ';' ? nearest(at, len, call) : NULL;
    if (best) snprintf(hint, sizeof hint, " (did you mean %s?)", best);
    return fail_at(ps, at, call ? "unknown function '%s'%s" : "unknown feature '%s'%s", what, hint);
}

static int parse_cond(parser *ps);

/* A literal number (a feature's argument, a protect item's). */
static int number(parser *ps, double *x)
{
    skip(ps);
    /* the command line's number grammar (core/cli_args.h): no hex, no inf or nan */
    const size_t n = ps->s < ps->end ? kv_number_len(ps->s, (size_t)(ps->end - ps->s), false) : 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : 0), ps->s);
    *x = n && n < sizeof buf ? strtod(buf, NULL) : NAN;
    const char *e = ps->s + n;
    if (!isfinite(*x)) {
        char f[32];
        found(ps, f, sizeof f);
        return fail_at(ps, ps->s, "expected a number, found %s%s", f, "");
    }
    ps->s = e;
    return KV_OK;
}

static int feature(parser *ps, int id, const char *at)
{
    const expr_feature *f = &EXPR_FEATURES[id];
    expr_feat_use u = {(expr_feature_id)id, f->def[0], f->def[1]};
    skip(ps);
    if (eat(ps, "(")) {
        if (f->n_args == 0) return fail_at(ps, at, "feature '%s' takes no arguments%s", f->name, "");
        double arg[3] = {u.a, u.b, 0};
        int n = 0, rc = KV_OK;
        skip(ps);
        if (!eat(ps, ")")) {
            do {
                if ((rc = number(ps, &arg[n < 2 ? n : 2]))) return rc;
                n++;
                skip(ps);
            } while (eat(ps, ","));
            if ((rc = expect(ps, ")"))) return rc;
        }
        if (n == 0 || n > f->n_args) {
            char what[96], given[96];
            snprintf(what, sizeof what, "%s%s", f->name, f->args);
            snprintf(given, sizeof given, "%s, %d given (%s alone: the default%s)",
                     f->n_args == 2 ? "1 or 2 arguments" : "1 argument", n, f->name, f->n_args == 2 ? "s" : "");
            return fail_at(ps, at, "feature %s takes %s", what, given);
        }
        for (int k = 0; k < n; k++)
            if (arg[k] < (id == EF_IS_SINK ? 0 : 1) || arg[k] != floor(arg[k]) || arg[k] > 1 << 20)
                return fail_at(ps, at, "%s%s: an argument is not an integer in range", f->name, f->args);
        u.a = arg[0], u.b = arg[1];
    }
    int slot = -1;
    for (int i = 0; i < ps->p->n_feats; i++)
        if (ps->p->feat[i].id == u.id && ps->p->feat[i].a == u.a && ps->p->feat[i].b == u.b) slot = i;
    if (slot < 0 && ps->p->n_feats >= EXPR_MAX_FEATS)
        return fail_at(ps, at, "more than %s different features%s", "16", "");
    if (slot < 0) ps->p->feat[slot = ps->p->n_feats++] = u;
    return emit(ps, EO_FEAT, slot, 0, 0, at);
}

static int call(parser *ps, const expr_func *fn, const char *at)
{
    int rc = expect(ps, "(");
    int n = 0;
    while (!rc) {
        if ((rc = parse_cond(ps))) return rc;
        n++;
        if (!eat(ps, ",")) break;
    }
    if (!rc) rc = expect(ps, ")");
    if (!rc && (n < fn->min_args || n > fn->max_args)) {
        char want[32];
        snprintf(want, sizeof want, fn->min_args == fn->max_args ? "%d" : "%d or more", fn->min_args);
        return fail_at(ps, at, "%s() takes %s argument(s)", fn->name, want);
    }
    if (rc) return rc;
    if (fn->op == EO_MIN || fn->op == EO_MAX) {
        for (int i = 1; !rc && i < n; i++) rc = emit(ps, fn->op, 0, 0, 2, at);
        return rc;
    }
    return emit(ps, fn->op, 0, 0, fn->min_args, at);
}

static int parse_atom(parser *ps)
{
    skip(ps);
    const char *at = ps->s;
    if (eat(ps, "(")) {
        int rc = parse_cond(ps);
        return rc ? rc : expect(ps, ")");
    }
    if (at < ps->end && (isdigit((unsigned char)*at) || *at == '.')) {
        double x;
        int rc = number(ps, &x);
        return rc ? rc : emit(ps, EO_CONST, 0, x, 0, at);
    }
    size_t len = 0;
    while (at + len < ps->end && (isalnum((unsigned char)at[len]) || at[len] == '_')) len++;
    if (len == 0) {
        char f[32];
        found(ps, f, sizeof f);
        return fail_at(ps, at, "expected a number, a feature or '(', found %s%s", f, "");
    }
    ps->s = at + len;
    if (len == 3 && strncmp(at, "inf", 3) == 0) return emit(ps, EO_CONST, 0, INFINITY, 0, at);
    int id = expr_feature_index(at, len);
    if (id >= 0) return feature(ps, id, at);
    for (int i = 0; i < N_FUNCS; i++)
        if (strlen(FUNCS[i].name) == len && strncmp(FUNCS[i].name, at, len) == 0) return call(ps, &FUNCS[i], at);
    return unknown_name(ps, at, len);
}

static int parse_unary(parser *ps);

static int parse_power(parser *ps)
{
    int rc = parse_atom(ps);
    skip(ps);
    const char *at = ps->s;
    if (!rc && eat(ps, "^") && !(rc = parse_unary(ps))) rc = emit(ps, EO_POW, 0, 0, 2, at);
    return rc;
}

static int parse_unary(parser *ps)
{
    skip(ps);
    const char *at = ps->s;
    if (!eat(ps, "-")) return parse_power(ps);
    int rc = parse_unary(ps);
    return rc ? rc : emit(ps, EO_NEG, 0, 0, 1, at);
}

/* A left-associative level: operand (next), then any of ops[i] giving codes[i]. */
static int parse_level(parser *ps, int (*next)(parser *), const char *const *ops, const expr_opcode *codes, int n_ops,
                       bool once)
{
    int rc = next(ps);
    for (bool more = true; !rc && more;) {
        more = false;
        skip(ps);
        const char *at = ps->s;
        for (int i = 0; i < n_ops && !more; i++)
            if (eat(ps, ops[i])) {
                more = !once;
                if (!(rc = next(ps))) rc = emit(ps, codes[i], 0, 0, 2, at);
                if (once) return rc;
            }
    }
    return rc;
}

static int parse_prod(parser *ps)
{
    static const char *const OPS[] = {"*", "/"};
    static const expr_opcode CODES[] = {EO_MUL, EO_DIV};
    return parse_level(ps, parse_unary, OPS, CODES, 2, false);
}

static int parse_sum(parser *ps)
{
    static const char *const OPS[] = {"+", "-"};
    static const expr_opcode CODES[] = {EO_ADD, EO_SUB};
    return parse_level(ps, parse_prod, OPS, CODES, 2, false);
}

static int parse_cmp(parser *ps)
{
    static const char *const OPS[] = {"<=", ">=", "==", "!=", "<", ">"};
    static const expr_opcode CODES[] = {EO_LE, EO_GE, EO_EQ, EO_NE, EO_LT, EO_GT};
    return parse_level(ps, parse_sum, OPS, CODES, 6, true);
}

static int parse_cond(parser *ps)
{
    int rc = parse_cmp(ps);
    skip(ps);
    const char *at = ps->s;
    if (rc || !eat(ps, "?")) return rc;
    if ((rc = parse_cond(ps)) || (rc = expect(ps, ":")) || (rc = parse_cond(ps))) return rc;
    return emit(ps, EO_COND, 0, 0, 3, at);
}

/* "protect = sinks(k), recent(f), recent_n(k)" */
static int parse_protect(parser *ps)
{
    static const char *const KINDS[] = {"sinks", "recent", "recent_n"};
    skip(ps);
    if (!eat(ps, "protect")) {
        char f[32];
        found(ps, f, sizeof f);
        return fail_at(ps, ps->s, "expected 'protect = ...' after ';', found %s%s", f, "");
    }
    int rc = expect(ps, "=");
    do {
        skip(ps);
        const char *at = ps->s;
        size_t len = 0;
        while (!rc && at + len < ps->end && (isalnum((unsigned char)at[len]) || at[len] == '_')) len++;
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (strlen(KINDS[i]) == len && strncmp(KINDS[i], at, len) == 0) k = i;
        if (!rc && k < 0) {
            char w[64];
            snprintf(w, sizeof w, "%.*s", (int)(len ? len : 1), at);
            return fail_at(ps, at, "unknown protect '%s' (known: sinks(k), recent(fraction of N), recent_n(k))%s", w,
                           "");
        }
        ps->s = at + len;
        double x = 0;
        if (!rc && !(rc = expect(ps, "(")) && !(rc = number(ps, &x))) rc = expect(ps, ")");
        if (!rc && (x < 0 || (k == PR_RECENT ? x > 1 : x != floor(x))))
            return fail_at(ps, at, "%s: the argument is not %s", KINDS[k], k == PR_RECENT ? "in [0, 1]" : "an integer >= 0");
        if (!rc && ps->p->n_protect >= EXPR_MAX_PROTECT) return fail_at(ps, at, "more than %s protect items%s", "4", "");
        if (!rc) ps->p->protect[ps->p->n_protect++] = (expr_protect){(expr_protect_kind)k, x};
    } while (!rc && eat(ps, ","));
    return rc;
}

static int check_name(const char *text, size_t nlen, char *name, kv_err *err)
{
    size_t a = 0;
    while (a < nlen && isspace((unsigned char)text[a])) a++;
    while (nlen > a && isspace((unsigned char)text[nlen - 1])) nlen--;
    snprintf(name, 64, "%.*s", (int)(nlen - a < 63 ? nlen - a : 63), text + a);
    bool ok = nlen > a && nlen - a < 64 && (isalpha((unsigned char)text[a]) || text[a] == '_');
    for (size_t i = a; ok && i < nlen; i++) ok = isalnum((unsigned char)text[i]) || strchr("_.-", text[i]);
    if (!ok)
        return kv_fail(err, KV_EUSAGE, "--define '%s': not NAME = EXPR (NAME: a letter or _, then letters, digits, "
                       "_ . -; at most 63)", text);
    return KV_OK;
}

/* The slot that can be computed straight into the scores: the first instruction pushes it at the
 * bottom of the stack (the scores' row), and nothing else reads it, so every op that overwrites that
 * row has consumed it. */
static int direct_slot(const expr_prog *p)
{
    if (p->n_ins < 1 || p->ins[0].op != EO_FEAT) return -1;
    for (int i = 1; i < p->n_ins; i++)
        if (p->ins[i].op == EO_FEAT && p->ins[i].slot == p->ins[0].slot) return -1;
    return p->ins[0].slot;
}

int expr_parse(const char *text, char *name, expr_prog *prog, kv_err *err)
{
    memset(prog, 0, sizeof *prog);
    const char *eq = strchr(text, '=');
    int rc = check_name(text, eq ? (size_t)(eq - text) : strlen(text), name, err);
    if (rc || !eq) return rc ? rc : kv_fail(err, KV_EUSAGE, "--define '%s': not NAME = EXPR", text);
    const char *semi = strchr(eq, ';');
    parser ps = {text, eq + 1, semi ? semi : eq + strlen(eq), name, prog, 0, err};
    skip(&ps);
    if (ps.s >= ps.end) return fail_at(&ps, ps.s, "the expression is empty%s%s", "", "");
    rc = parse_cond(&ps);
    skip(&ps);
    if (!rc && ps.s < ps.end) {
        char f[32];
        found(&ps, f, sizeof f);
        rc = fail_at(&ps, ps.s, "unexpected %s (an operator missing?)%s", f, "");
    }
    if (!rc && semi) {
        ps.s = semi + 1, ps.end = semi + strlen(semi);
        rc = parse_protect(&ps);
        skip(&ps);
        if (!rc && ps.s < ps.end) rc = fail_at(&ps, ps.s, "unexpected '%s' after the protect items%s", ps.s, "");
    }
    prog->direct = rc ? -1 : direct_slot(prog);
    return rc;
}
