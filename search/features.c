/* features: the columns (--features) and the run: each trace replayed by
 * sim_run under the tapped driving policy (features_tap.c) into a scratch
 * results directory that is then removed, its streams' spools copied into
 * the output in (layer, kv_head, step) order (features_out.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/outfile.h"
#include "core/tmpname.h"
#include "provenance/provenance.h"
#include "search/features.h"
#include "sim/sim.h"
#include "trace/trace.h"

/* The name of a feature use as the expression language reads it back: arguments written whenever
 * the feature takes any ("attn_window(32)"), so a column says what it was computed with. */
static void col_name(const expr_feat_use *u, char *buf, size_t cap)
{
    const expr_feature *f = &EXPR_FEATURES[u->id];
    if (f->n_args == 0) snprintf(buf, cap, "%s", f->name);
    else if (f->n_args == 1) snprintf(buf, cap, "%s(%.17g)", f->name, u->a);
    else snprintf(buf, cap, "%s(%.17g,%.17g)", f->name, u->a, u->b);
}

void feat_cols_default(feat_cols *c)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < EF_COUNT && c->n < FEAT_MAX; i++) {
        if (EXPR_FEATURES[i].offline) continue;   /* future_attn: a target */
        expr_feat_use *u = &c->use[c->n];
        *u = (expr_feat_use){(expr_feature_id)i, EXPR_FEATURES[i].def[0], EXPR_FEATURES[i].def[1]};
        col_name(u, c->name[c->n++], FEAT_NAME_MAX);
    }
}

/* One item of --features through the expression parser: exactly one feature. */
static int parse_item(const char *item, feat_cols *c, kv_err *err)
{
    char text[300], name[64];
    if (strlen(item) > 200) return kv_fail(err, KV_EUSAGE, "features: --features: '%.40s...' is too long", item);
    snprintf(text, sizeof text, "column = %s", item);
    expr_prog *p = kv_calloc(1, sizeof *p, "features: columns", err);
    if (!p) return err->code;
    int rc = expr_parse(text, name, p, err);
    if (rc) {   /* "--define column: col C: what": the what, for this item */
        const char *what = strstr(err->msg, ": col ");
        what = what ? strchr(what + 6, ':') : NULL;
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", what ? what + 2 : err->msg);
        err->code = KV_OK;
        rc = kv_fail(err, KV_EUSAGE, "features: --features: '%s': %s (kvtrace policies --features lists them)",
                     item, why);
    } else if (p->n_ins != 1 || p->n_feats != 1 || p->ins[0].op != EO_FEAT || p->n_protect) {
        rc = kv_fail(err, KV_EUSAGE, "features: --features: '%s' is not one feature (name or name(args))", item);
    } else if (EXPR_FEATURES[p->feat[0].id].offline) {
        rc = kv_fail(err, KV_EUSAGE, "features: --features: '%s' reads the future: it is a target (the future_attn "
                     "dataset), not a feature", item);
    } else if (c->n >= FEAT_MAX) {
        rc = kv_fail(err, KV_EUSAGE, "features: --features: more than %d features", FEAT_MAX);
    } else {
        c->use[c->n] = p->feat[0];
        col_name(&c->use[c->n], c->name[c->n], FEAT_NAME_MAX);
        for (int i = 0; i < c->n && !rc; i++)
            if (strcmp(c->name[i], c->name[c->n]) == 0)
                rc = kv_fail(err, KV_EUSAGE, "features: --features: %s is listed twice", c->name[i]);
        if (!rc) c->n++;
    }
    free(p);
    return rc;
}

int feat_cols_parse(const char *list, feat_cols *c, kv_err *err)
{
    memset(c, 0, sizeof *c);
    char item[256];
    size_t len = 0;
    int depth = 0, rc = KV_OK;
    for (const char *s = list;; s++) {
        if (*s == '\0' || (*s == ',' && depth == 0)) {
            item[len] = '\0';
            if (len == 0) return kv_fail(err, KV_EUSAGE, "features: --features '%s': an empty item", list);
            if ((rc = parse_item(item, c, err))) return rc;
            len = 0;
            if (*s == '\0') break;
            continue;
        }
        depth += *s == '(' ? 1 : *s == ')' ? -1 : 0;
        if (len + 1 >= sizeof item) return kv_fail(err, KV_EUSAGE, "features: --features: an item is too long");
        item[len++] = *s;
    }
    return KV_OK;
}

/* The trace's sha256 (from the record, else hashed here; checked against its study's index) and
 * model name; its T against the index's `tokens`, and its model and shape against the first
 * trace's (*first, filled from trace 0) unless --mixed-models, as sim checks a study. */
static int trace_facts(const feat_opts *o, int i, char sha[65], char *model, size_t cap, trace_meta *first,
                       kv_err *err)
{
    const study_set *set = o->set;
    trace *tr = NULL;
    int rc = trace_open(set->t[i].path, &tr, err);   /* says what is wrong with one that cannot be read */
    const prov_input *in = NULL;
    for (int j = 0; o->prov && j < o->prov->n_inputs; j++)
        if (strcmp(o->prov->inputs[j].role, "trace") == 0 && strcmp(o->prov->inputs[j].path, set->t[i].path) == 0)
            in = &o->prov->inputs[j];
    prov_record p = {0};
    if (!rc && !in && !(rc = prov_add_file(&p, "trace", set->t[i].path, NULL, err))) in = &p.inputs[0];
    if (!rc) snprintf(sha, 65, "%s", in->sha256);
    prov_free(&p);
    if (!rc) rc = study_check_sha256(set, i, sha, err);
    if (!rc) snprintf(model, cap, "%s", trace_get_meta(tr)->model_name);
    if (!rc && i == 0) *first = *trace_get_meta(tr);
    if (!rc) rc = sim_study_trace_check(set, i, trace_get_meta(tr), first, o->mixed_models, err);
    trace_close(tr);
    return rc;
}

typedef struct {
    char sha[65], model[256];
} trace_fact;

/* One trace under the tap into out. */
static int one_trace(const feat_opts *o, int i, const trace_fact *fact, feat_tap *tap, policy_config *cfg,
                     const char *scratch, feat_out *out, kv_err *err)
{
    feat_sink sink;
    int rc = feat_sink_init(&sink, err);
    if (rc) return rc;
    tap->sink = &sink, tap->trace_key = feat_key(o->set->t[i].id);
    study_set one = {.t = &o->set->t[i], .n = 1, .index = o->set->index};
    int64_t budget = o->budget;
    sim_opts so = {.trace = o->set->t[i].path, .study = &one, .output = scratch, .policies = cfg, .n_policies = 1,
                   .budgets = &budget, .n_budgets = 1, .chunk = o->chunk, .decode_chunk = 1,
                   .eval_stride = (int64_t)1 << 30, .threads = o->threads, .force = true, .quiet = true};
    rc = sim_run(&so, NULL, err);
    if (!rc) rc = feat_out_trace(out, &o->set->t[i], fact->model, fact->sha, &sink, err);
    feat_sink_free(&sink);
    tap->sink = NULL;
    return rc;
}

int feat_run(const feat_opts *o, kv_err *err)
{
    feat_tap tap = {.seed = o->seed, .sample_steps = o->sample_steps, .sample_candidates = o->sample_candidates};
    policy_config cfg;
    int rc = feat_tap_init(&tap, o->driver, &o->cols, &cfg, err);
    const char **inputs = rc ? NULL : kv_calloc((size_t)o->set->n, sizeof *inputs, "features", err);
    trace_fact *facts = inputs ? kv_calloc((size_t)o->set->n, sizeof *facts, "features", err) : NULL;
    if (!rc && !facts) rc = err->code;
    for (int i = 0; !rc && i < o->set->n; i++) inputs[i] = o->set->t[i].path;
    if (!rc) rc = outfile_check_inputs(o->output, inputs, o->set->n, err);
    free(inputs);
    trace_meta first = {0};
    for (int i = 0; !rc && i < o->set->n; i++)   /* every trace readable before any work */
        rc = trace_facts(o, i, facts[i].sha, facts[i].model, sizeof facts[i].model, &first, err);
    const char *tmp = getenv("TMPDIR");
    char dir[4096], scratch[4200];
    snprintf(dir, sizeof dir, "%s/kvtrace-features.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!rc && !mkdtemp(dir)) rc = kv_fail(err, KV_EFAIL, "features: cannot make a scratch directory in %s",
                                           tmp && *tmp ? tmp : "/tmp");
    const bool made = !rc;
    snprintf(scratch, sizeof scratch, "%s/sim", dir);
    feat_out *out = NULL;
    if (!rc) rc = feat_out_open(&out, o, o->output, err);
    for (int i = 0; !rc && i < o->set->n; i++) {
        if (!o->quiet && o->set->n > 1) fprintf(stderr, "features: %s (%d of %d)\n", o->set->t[i].id, i + 1, o->set->n);
        rc = one_trace(o, i, &facts[i], &tap, &cfg, scratch, out, err);
    }
    if (!rc) rc = feat_out_close(out, err);
    else feat_out_abort(out);
    if (made) kv_remove_tree(dir);
    free(facts);
    return rc;
}
