#include "sim/sim_work.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/tmpname.h"

static const char MAGIC[8] = "KVSIMW1";   /* a result file's first bytes (with the NUL) */

int sim_work_name(sim_work *w, const sim_opts *o, kv_err *err)
{
    size_t len = strlen(o->output);
    while (len > 1 && o->output[len - 1] == '/') len--;   /* "res/" names the directory res */
    if (len + 16 > sizeof w->dir) return kv_fail(err, KV_EUSAGE, "output path '%s' is too long", o->output);
    snprintf(w->dir, sizeof w->dir, "%.*s.work", (int)len, o->output);
    return KV_OK;
}

/* The arrays of a trace's results in the order a result file holds them (the retained rows
 * per configuration follow); *n set. */
typedef struct {
    void *p;
    size_t bytes;
} part;

enum { N_PARTS = 16 };

static void parts_of(const sim_results *r, part *pt)
{
    const size_t C = (size_t)r->n_cfg, LK = (size_t)(r->L * r->K), S = (size_t)r->n_spans;
    const part all[N_PARTS] = {
        {r->stats, C * (size_t)(r->L * r->H * N_PHASES) * sizeof *r->stats},
        {r->logdet, C * LK * sizeof *r->logdet},
        {r->head_budget, C * LK * sizeof *r->head_budget},
        {r->head_mean, C * LK * sizeof *r->head_mean},
        {r->step_cand, r->step_cand ? C * LK * (size_t)r->n_steps * sizeof(int32_t) : 0},
        {r->step_kept, r->step_kept ? C * LK * (size_t)r->n_steps * sizeof(int32_t) : 0},
        {r->span_ret, r->span_ret ? C * LK * S * sizeof(double) : 0},
        {r->span_recall, r->span_recall ? C * LK * S * sizeof(double) : 0},
        {r->calls, C * (size_t)r->K * sizeof *r->calls},
        {r->candidates, C * (size_t)r->K * sizeof *r->candidates},
        {r->score_ns, C * (size_t)r->K * sizeof *r->score_ns},
        {(void *)&r->load_s, sizeof r->load_s}, {(void *)&r->reference_s, sizeof r->reference_s},
        {(void *)&r->replay_s, sizeof r->replay_s}, {(void *)&r->metrics_s, sizeof r->metrics_s},
        {(void *)&r->wall_s, sizeof r->wall_s},
    };
    memcpy(pt, all, sizeof all);
}

static size_t payload_bytes(const sim_results *r)
{
    part pt[N_PARTS];
    parts_of(r, pt);
    size_t n = 0;
    for (int i = 0; i < N_PARTS; i++) n += pt[i].bytes;
    for (int c = 0; c < r->n_cfg; c++) n += (size_t)(r->L * r->K * r->width[c]) * sizeof(int64_t);
    return n;
}

/* FNV-1a over bytes, continued from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Calls f(ctx, p, bytes) on every array of r in file order. */
static int each_array(const sim_results *r, int (*f)(void *, void *, size_t), void *ctx)
{
    part pt[N_PARTS];
    parts_of(r, pt);
    int rc = 0;
    for (int i = 0; !rc && i < N_PARTS; i++)
        if (pt[i].bytes) rc = f(ctx, pt[i].p, pt[i].bytes);
    for (int c = 0; !rc && c < r->n_cfg; c++)
        rc = f(ctx, r->retained[c], (size_t)(r->L * r->K * r->width[c]) * sizeof(int64_t));
    return rc;
}

static int hash_one(void *ctx, void *p, size_t n)
{
    *(uint64_t *)ctx = fnv(*(uint64_t *)ctx, p, n);
    return 0;
}

static int write_one(void *ctx, void *p, size_t n)
{
    return fwrite(p, 1, n, ctx) == n ? 0 : -1;
}

/* Copies the next n bytes of a read payload into p. */
typedef struct {
    const unsigned char *at;
} cursor;

static int read_one(void *ctx, void *p, size_t n)
{
    cursor *c = ctx;
    memcpy(p, c->at, n), c->at += n;
    return 0;
}

static void unit_path(const sim_work *w, int i, const char *tail, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/units/t%06d.bin%s", w->dir, i, tail);
}

int sim_work_put(const sim_work *w, int i, int rank, const sim_results *r, kv_err *err)
{
    char tmp[4400], path[4400], tail[32];
    snprintf(tail, sizeof tail, ".tmp.%d", rank);
    unit_path(w, i, tail, tmp, sizeof tmp);
    unit_path(w, i, "", path, sizeof path);
    uint64_t head[3] = {(uint64_t)i, payload_bytes(r), 14695981039346656037ull};
    each_array(r, hash_one, &head[2]);
    FILE *f = fopen(tmp, "wb");
    int bad = !f || fwrite(MAGIC, 1, sizeof MAGIC, f) != sizeof MAGIC || fwrite(head, sizeof head, 1, f) != 1 ||
              each_array(r, write_one, f) != 0;
    if (f && fclose(f) != 0) bad = 1;
    if (!bad && rename(tmp, path) == 0) return KV_OK;
    const int e = errno;
    unlink(tmp);
    return kv_fail(err, KV_EFAIL, "%s: cannot write a result: %s", path, strerror(e));
}

/* Reads trace i's result file whole into r when it is whole and of r's shapes: KV_OK;
 * otherwise nonzero with err saying why (r untouched). */
static int unit_read(const sim_work *w, int i, sim_results *r, kv_err *err)
{
    char path[4400];
    unit_path(w, i, "", path, sizeof path);
    const size_t want = payload_bytes(r);
    char magic[sizeof MAGIC];
    uint64_t head[3];
    unsigned char *buf = malloc(want + 1);
    FILE *f = buf ? fopen(path, "rb") : NULL;
    int rc = !buf ? kv_fail(err, KV_EFAIL, "sim: out of memory") :
             !f ? kv_fail(err, KV_EINPUT, "%s: cannot read: %s", path, strerror(errno)) : KV_OK;
    if (!rc && (fread(magic, 1, sizeof magic, f) != sizeof magic || memcmp(magic, MAGIC, sizeof MAGIC) != 0 ||
                fread(head, sizeof head, 1, f) != 1 || head[0] != (uint64_t)i || head[1] != want ||
                fread(buf, 1, want + 1, f) != want || fnv(14695981039346656037ull, buf, want) != head[2]))
        rc = kv_fail(err, KV_EINPUT, "%s: not a whole result of this run's trace %d", path, i);
    if (f) fclose(f);
    cursor c = {buf};
    if (!rc) each_array(r, read_one, &c);
    free(buf);
    return rc;
}

int sim_work_get(const sim_work *w, int i, sim_results *r, kv_err *err)
{
    return unit_read(w, i, r, err);
}

/* The command's plan: what a result in the folder depends on (malloc'ed text). */
static char *plan_text(const sim_opts *o, const study_set *s, const trace_run *runs)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    fprintf(f, "kvtrace sim work folder, format 1\n");
    for (int j = 0; o->prov && j < o->prov->n_inputs; j++)
        fprintf(f, "input %s %s %s\n", o->prov->inputs[j].role, o->prov->inputs[j].sha256, o->prov->inputs[j].path);
    for (int i = 0; i < s->n; i++) fprintf(f, "trace %d %s %s\n", i, s->t[i].id, s->t[i].path);
    const sim_opts *po = sim_trace_opts(&runs[0]);
    char pre[1400];
    for (int c = 0; c < runs[0].res.n_cfg; c++) {
        sim_cfg_prefix(po, c, pre, sizeof pre);
        fprintf(f, "config %d %s\n", c, pre);
    }
    fprintf(f, "options step_counts=%d max_memory=%.17g mixed_models=%d\n", o->step_counts, o->max_memory_gib,
            o->mixed_models);
    fclose(f);
    return text;
}

/* The first line where a and b differ (1-based) and those lines' text in la, lb. */
static int first_difference(const char *a, const char *b, char *la, char *lb, size_t cap)
{
    for (int line = 1;; line++) {
        const size_t na = strcspn(a, "\n"), nb = strcspn(b, "\n");
        if (na != nb || memcmp(a, b, na) != 0 || (!a[na]) != (!b[nb])) {
            snprintf(la, cap, "%.*s", (int)(na < 200 ? na : 200), a);
            snprintf(lb, cap, "%.*s", (int)(nb < 200 ? nb : 200), b);
            return line;
        }
        if (!a[na]) return 0;
        a += na + 1, b += nb + 1;
    }
}

/* Under --resume: plan.txt is this command's, every whole result read into runs. */
static int resume(const sim_work *w, const char *text, const study_set *s, trace_run *runs, uint8_t *done,
                  kv_err *err)
{
    char path[4400], la[256], lb[256];
    snprintf(path, sizeof path, "%s/plan.txt", w->dir);
    char *old = NULL;
    size_t cap = 0;
    FILE *f = fopen(path, "r");
    const ssize_t n = f ? getdelim(&old, &cap, '\0', f) : -1;
    if (f) fclose(f);
    int rc = n < 0 ? kv_fail(err, KV_EINPUT, "%s: cannot read the work folder's plan (remove %s to start anew)",
                             path, w->dir) : KV_OK;
    const int line = rc ? 0 : first_difference(old, text, la, lb, sizeof la);
    if (!rc && line)
        rc = kv_fail(err, KV_EUSAGE, "%s: made by another command (line %d: '%s', this command's: '%s'); run the "
                     "same command to resume, or remove %s", path, line, la, lb, w->dir);
    free(old);
    for (int i = 0; !rc && i < s->n; i++) {
        kv_err ignore = {0};   /* a missing or partial result is replayed */
        done[i] = unit_read(w, i, &runs[i].res, &ignore) == KV_OK;
    }
    return rc;
}

int sim_work_open(const sim_work *w, const sim_opts *o, const study_set *s, trace_run *runs, uint8_t *done,
                  kv_err *err)
{
    struct stat st;
    const bool exists = stat(w->dir, &st) == 0;
    if (exists && !o->resume && !o->force)
        return kv_fail(err, KV_EUSAGE, "%s: the work folder of an interrupted run (finish it with --resume, or "
                       "--force to start anew)", w->dir);
    char *text = plan_text(o, s, runs);
    if (!text) return kv_fail(err, KV_EFAIL, "sim: out of memory");
    int rc = KV_OK;
    if (exists && o->resume) {
        rc = resume(w, text, s, runs, done, err);
        free(text);
        return rc;
    }
    if (exists) kv_remove_tree(w->dir);
    char units[4300], path[4400], tmp[4400];
    snprintf(units, sizeof units, "%s/units", w->dir);
    snprintf(path, sizeof path, "%s/plan.txt", w->dir);
    snprintf(tmp, sizeof tmp, "%s/plan.txt.tmp", w->dir);
    if (mkdir(w->dir, 0777) != 0 || mkdir(units, 0777) != 0)
        rc = kv_fail(err, KV_EFAIL, "%s: cannot create the work folder: %s", w->dir, strerror(errno));
    FILE *f = rc ? NULL : fopen(tmp, "w");
    if (!rc && (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0))
        rc = kv_fail(err, KV_EFAIL, "%s: cannot write: %s", path, strerror(errno));
    free(text);
    return rc;
}

void sim_work_remove(const sim_work *w)
{
    kv_remove_tree(w->dir);
}

/* The address space this process maps now, bytes (0: unknown). */
static size_t mapped_bytes(void)
{
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%lu", &pages) != 1) pages = 0;
    if (f) fclose(f);
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

void sim_work_fault(int rank, int units_done)
{
    const char *spec = getenv("KVTRACE_TEST_FAULT");
    int r = -1, k = -1;
    char what[8] = "";
    if (!spec || sscanf(spec, "%d:%d:%7s", &r, &k, what) != 3) {
        if (!spec || sscanf(spec, "%d:oom:%d", &r, &k) != 2 || r != rank || units_done != -1) return;
        struct rlimit lim;
        if (getrlimit(RLIMIT_AS, &lim) != 0) return;
        lim.rlim_cur = mapped_bytes() + ((size_t)k << 20);
        setrlimit(RLIMIT_AS, &lim);
        return;
    }
    if (r == rank && k == units_done && strcmp(what, "kill") == 0) raise(SIGKILL);
}
