#include "sim/results.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5util.h"

static const char *const PHASE_NAMES[N_PHASES] = {"prefill", "decode", "all"};

int sim_results_alloc(sim_results *r, const sim_opts *o, int64_t L, int64_t H, int64_t K, int64_t T, kv_err *err)
{
    memset(r, 0, sizeof *r);
    r->L = L, r->H = H, r->K = K, r->T = T;
    r->n_cfg = o->n_policies * o->n_budgets;
    const size_t C = (size_t)r->n_cfg;
    if (!(r->stats = kv_calloc(C * (size_t)(L * H * N_PHASES), sizeof *r->stats, "results", err)) ||
        !(r->logdet = kv_calloc(C * (size_t)(L * K), sizeof *r->logdet, "results", err)) ||
        !(r->retained = kv_calloc(C, sizeof *r->retained, "results", err)) ||
        !(r->width = kv_calloc(C, sizeof *r->width, "results", err)) ||
        !(r->calls = kv_calloc(C * (size_t)K, sizeof *r->calls, "timing", err)) ||
        !(r->candidates = kv_calloc(C * (size_t)K, sizeof *r->candidates, "timing", err)) ||
        !(r->score_ns = kv_calloc(C * (size_t)K, sizeof *r->score_ns, "timing", err)))
        goto fail;
    for (int c = 0; c < r->n_cfg; c++) {
        int64_t N = o->budgets[c % o->n_budgets];
        r->width[c] = o->policies[c / o->n_budgets].iface->never_evicts || N > T ? T : N;
        if (!(r->retained[c] = kv_calloc((size_t)(L * K * r->width[c]), sizeof(int64_t), "results", err))) goto fail;
    }
    return KV_OK;
fail:
    sim_results_free(r);
    return err->code;
}

void sim_results_free(sim_results *r)
{
    for (int c = 0; r->retained && c < r->n_cfg; c++) free(r->retained[c]);
    free(r->stats), free(r->logdet), free(r->retained), free(r->width);
    free(r->calls), free(r->candidates), free(r->score_ns);
    memset(r, 0, sizeof *r);
}

static FILE *open_csv(const char *dir, const char *name, const char *header, kv_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) kv_fail(err, KV_EFAIL, "%s: cannot create", path);
    else fprintf(f, "%s\n", header);
    return f;
}

static int close_csv(FILE *f, const char *name, kv_err *err)
{
    if (ferror(f) | (fclose(f) != 0)) return kv_fail(err, KV_EFAIL, "%s: write failed", name);
    return KV_OK;
}

/* "policy,params,budget,chunk,decode_chunk,eval_stride" of configuration c */
static void cfg_prefix(const sim_opts *o, int c, char *buf, size_t cap)
{
    const policy_config *pc = &o->policies[c / o->n_budgets];
    snprintf(buf, cap, "%s,%s,%lld,%lld,%lld,%lld", pc->iface->name, pc->canonical,
             (long long)o->budgets[c % o->n_budgets], (long long)o->chunk, (long long)o->decode_chunk,
             (long long)o->eval_stride);
}

static const sim_stats *stat_at(const sim_results *r, int c, int64_t l, int64_t h, int p)
{
    return &r->stats[(((size_t)c * (size_t)r->L + (size_t)l) * (size_t)r->H + (size_t)h) * N_PHASES + (size_t)p];
}

static int write_results_csv(const sim_results *r, const sim_opts *o, const char *dir, kv_err *err)
{
    FILE *f = open_csv(dir, "results.csv", "policy,params,budget,chunk,decode_chunk,eval_stride,layer,head,phase,"
                       "n_queries,out_rel_err_mean,out_rel_err_p95,attn_recall_mean,attn_recall_min", err);
    if (!f) return err->code;
    char pre[512];
    for (int c = 0; c < r->n_cfg; c++) {
        cfg_prefix(o, c, pre, sizeof pre);
        for (int64_t l = 0; l < r->L; l++)
            for (int64_t h = 0; h < r->H; h++)
                for (int p = 0; p < N_PHASES; p++) {
                    const sim_stats *s = stat_at(r, c, l, h, p);
                    fprintf(f, "%s,%lld,%lld,%s,%lld,%.9g,%.9g,%.9g,%.9g\n", pre, (long long)l, (long long)h,
                            PHASE_NAMES[p], (long long)s->n, s->err_mean, s->err_p95, s->recall_mean, s->recall_min);
                }
    }
    return close_csv(f, "results.csv", err);
}

/* Means over layers and heads of configuration c, phase p; n_queries summed. */
static void summarize(const sim_results *r, int c, int p, sim_stats *out, double *logdet_mean)
{
    sim_stats m = {0};
    const double cells = (double)(r->L * r->H);
    for (int64_t l = 0; l < r->L; l++)
        for (int64_t h = 0; h < r->H; h++) {
            const sim_stats *s = stat_at(r, c, l, h, p);
            m.n += s->n;
            m.err_mean += s->err_mean / cells, m.err_p95 += s->err_p95 / cells;
            m.recall_mean += s->recall_mean / cells, m.recall_min += s->recall_min / cells;
        }
    double ld = 0.0;
    for (int64_t i = 0; i < r->L * r->K; i++) ld += r->logdet[(size_t)c * (size_t)(r->L * r->K) + (size_t)i];
    *out = m;
    *logdet_mean = ld / (double)(r->L * r->K);
}

static int write_summary_csv(const sim_results *r, const sim_opts *o, const char *dir, kv_err *err)
{
    FILE *f = open_csv(dir, "summary.csv", "policy,params,budget,chunk,decode_chunk,eval_stride,phase,n_queries,"
                       "out_rel_err_mean,out_rel_err_p95,attn_recall_mean,attn_recall_min,final_logdet_mean", err);
    if (!f) return err->code;
    char pre[512];
    for (int c = 0; c < r->n_cfg; c++) {
        cfg_prefix(o, c, pre, sizeof pre);
        for (int p = 0; p < N_PHASES; p++) {
            sim_stats s;
            double ld;
            summarize(r, c, p, &s, &ld);
            fprintf(f, "%s,%s,%lld,%.9g,%.9g,%.9g,%.9g,%.9g\n", pre, PHASE_NAMES[p], (long long)s.n, s.err_mean,
                    s.err_p95, s.recall_mean, s.recall_min, ld);
        }
    }
    return close_csv(f, "summary.csv", err);
}

static int write_timing_csv(const sim_results *r, const sim_opts *o, const char *dir, kv_err *err)
{
    FILE *f = open_csv(dir, "timing.csv", "policy,params,budget,chunk,calls,candidates,score_ns_per_candidate", err);
    if (!f) return err->code;
    for (int c = 0; c < r->n_cfg; c++) {
        const policy_config *pc = &o->policies[c / o->n_budgets];
        int64_t calls = 0, cands = 0;
        double ns = 0.0;
        for (int64_t g = 0; g < r->K; g++) {
            size_t i = (size_t)c * (size_t)r->K + (size_t)g;
            calls += r->calls[i], cands += r->candidates[i], ns += r->score_ns[i];
        }
        fprintf(f, "%s,%s,%lld,%lld,%lld,%lld,%.3f\n", pc->iface->name, pc->canonical,
                (long long)o->budgets[c % o->n_budgets], (long long)o->chunk, (long long)calls, (long long)cands,
                cands ? ns / (double)cands : 0.0);
    }
    return close_csv(f, "timing.csv", err);
}

static int write_run(const sim_results *r, const sim_opts *o, hid_t runs, int c, kv_err *err)
{
    const policy_config *pc = &o->policies[c / o->n_budgets];
    const int64_t budget = o->budgets[c % o->n_budgets], chunk = o->chunk;
    char name[400];
    snprintf(name, sizeof name, "%s%s%s:budget=%lld", pc->iface->name, pc->canonical[0] ? ":" : "", pc->canonical,
             (long long)budget);
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_obj_track_times(gcpl, 0);
    hid_t g = H5Gcreate2(runs, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    if (g < 0) return kv_fail(err, KV_EFAIL, "results.h5: cannot create group /runs/%s", name);
    int rc = h5u_write_attr_str(g, "policy", pc->iface->name, err);
    if (!rc) rc = h5u_write_attr_str(g, "params", pc->canonical, err);
    if (!rc) rc = h5u_write_attr_i64(g, "budget", &budget, 1, err);
    if (!rc) rc = h5u_write_attr_i64(g, "chunk", &chunk, 1, err);
    const size_t n = (size_t)(r->L * r->K * r->width[c]);
    int32_t *ret = malloc(sizeof(int32_t) * n);
    if (!rc && !ret) rc = kv_fail(err, KV_EFAIL, "results.h5: out of memory");
    for (size_t i = 0; !rc && i < n; i++) ret[i] = (int32_t)r->retained[c][i];
    hsize_t d3[3] = {(hsize_t)r->L, (hsize_t)r->K, (hsize_t)r->width[c]}, d2[2] = {(hsize_t)r->L, (hsize_t)r->K};
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(dcpl, 0);
    struct { const char *name; int rank; hsize_t *dims; hid_t ftype, mtype; const void *buf; } ds[2] = {
        {"retained", 3, d3, H5T_STD_I32LE, H5T_NATIVE_INT32, ret},
        {"final_logdet", 2, d2, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, r->logdet + (size_t)c * (size_t)(r->L * r->K)},
    };
    for (int i = 0; !rc && i < 2; i++) {
        hid_t sp = H5Screate_simple(ds[i].rank, ds[i].dims, NULL);
        hid_t d = H5Dcreate2(g, ds[i].name, ds[i].ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (d < 0 || H5Dwrite(d, ds[i].mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds[i].buf) < 0)
            rc = kv_fail(err, KV_EFAIL, "results.h5: cannot write /runs/%s/%s", name, ds[i].name);
        if (d >= 0) H5Dclose(d);
        H5Sclose(sp);
    }
    H5Pclose(dcpl);
    free(ret);
    H5Gclose(g);
    return rc;
}

static int write_results_h5(const sim_results *r, const sim_opts *o, const char *dir, kv_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/results.h5", dir);
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_obj_track_times(fcpl, 0);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    H5Pclose(fcpl);
    if (f < 0) return kv_fail(err, KV_EFAIL, "%s: cannot create", path);
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_obj_track_times(gcpl, 0);
    hid_t runs = H5Gcreate2(f, "runs", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    int rc = runs < 0 ? kv_fail(err, KV_EFAIL, "%s: cannot create /runs", path) : KV_OK;
    for (int c = 0; !rc && c < r->n_cfg; c++) rc = write_run(r, o, runs, c, err);
    if (runs >= 0) H5Gclose(runs);
    if (H5Fclose(f) < 0 && !rc) rc = kv_fail(err, KV_EFAIL, "%s: cannot close", path);
    return rc;
}

static void print_table(const sim_results *r, const sim_opts *o)
{
    printf("%-12s %-34s %7s %12s %12s %12s %12s\n", "policy", "params", "budget", "err_mean", "err_p95",
           "recall_mean", "logdet_mean");
    for (int c = 0; c < r->n_cfg; c++) {
        const policy_config *pc = &o->policies[c / o->n_budgets];
        sim_stats s;
        double ld;
        summarize(r, c, PHASE_ALL, &s, &ld);
        printf("%-12s %-34s %7lld %12.4g %12.4g %12.4f %12.4g\n", pc->iface->name, pc->canonical,
               (long long)o->budgets[c % o->n_budgets], s.err_mean, s.err_p95, s.recall_mean, ld);
    }
    double score_s = 0.0;
    for (size_t i = 0; i < (size_t)r->n_cfg * (size_t)r->K; i++) score_s += r->score_ns[i] * 1e-9;
    printf("time: %.3f s wall; trace reading %.3f s, full-cache reference %.3f s, replay %.3f s of thread time "
           "(metrics %.3f s, policy scoring %.3f s, cache bookkeeping %.3f s)\n", r->wall_s, r->load_s,
           r->reference_s, r->replay_s, r->metrics_s, score_s, r->replay_s - r->metrics_s - score_s);
}

/* command.txt: the command line that made this directory, one line. */
static int write_command(const char *command, const char *dir, kv_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/command.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) return kv_fail(err, KV_EFAIL, "%s: cannot create", path);
    fprintf(f, "%s\n", command);
    return fclose(f) == 0 ? KV_OK : kv_fail(err, KV_EFAIL, "%s: cannot write", path);
}

int sim_results_write(const sim_results *r, const sim_opts *o, const char *dir, kv_err *err)
{
    int rc = write_results_csv(r, o, dir, err);
    if (!rc) rc = write_summary_csv(r, o, dir, err);
    if (!rc) rc = write_timing_csv(r, o, dir, err);
    if (!rc) rc = write_results_h5(r, o, dir, err);
    if (!rc && o->command) rc = write_command(o->command, dir, err);
    if (!rc && !o->quiet) print_table(r, o);
    return rc;
}
