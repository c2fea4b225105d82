#include "sim/sim_work.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/tmpname.h"
#include "plan/plan.h"

static const char MAGIC[8] = "KVSIMW3";   /* a result file's first bytes (with the NUL) */

/* The configurations c of allocator a: c = ((p·A + a)·n_chunks + k)·n_budgets + b. */
static int cfg_alloc_index(const sim_opts *o, int c)
{
    return c / o->n_budgets / sim_n_chunks(o) % o->n_allocators;
}

void sim_unit_want(const sim_unit *u, int n_cfg, uint8_t *want)
{
    for (int c = 0; c < n_cfg; c++) want[c] = c == u->c;
}

/* A unit's estimated cost (docs/mpi.md): per layer the reference, 2·H·D·T², and per
 * configuration the metrics over the candidates, 4·H·D·T·min(T/2, N + B); D, one per model,
 * left out. */
static int64_t unit_cost(const sim_opts *o, const sim_results *r, const sim_unit *u)
{
    const int64_t HDT = r->H * r->T, T = r->T;
    const int64_t nb = sim_cfg_budget(o, u->c) + sim_cfg_chunk(o, u->c);
    return (2 * HDT * T + 4 * HDT * (nb < T / 2 ? nb : T / 2)) * u->nl;
}

int sim_units_make(const study_set *s, const trace_run *runs, sim_unit **out, int *n, kv_err *err)
{
    int64_t count = 0;
    for (int i = 0; i < s->n; i++) {
        const sim_opts *o = sim_trace_opts(&runs[i]);
        for (int c = 0; c < runs[i].res.n_cfg; c++)
            count += plan_model_wide(&o->allocators[cfg_alloc_index(o, c)]) ? 1 : runs[i].res.L;
    }
    if (count > (1 << 30)) return kv_fail(err, KV_EUSAGE, "sim: %lld work units (at most 2^30)", (long long)count);
    sim_unit *u = kv_calloc((size_t)count + 1, sizeof *u, "sim", err);
    if (!u) return err->code;
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        const sim_opts *o = sim_trace_opts(&runs[i]);
        const int64_t L = runs[i].res.L;
        for (int c = 0; c < runs[i].res.n_cfg; c++) {
            const int a = cfg_alloc_index(o, c);
            const bool model = plan_model_wide(&o->allocators[a]);
            for (int64_t l = 0; l < (model ? 1 : L); l++) {
                u[k] = (sim_unit){.trace = i, .a = a, .c = c, .lockstep = model, .l0 = model ? 0 : l,
                                  .nl = model ? L : 1};
                u[k].cost = unit_cost(o, &runs[i].res, &u[k]), k++;
            }
        }
    }
    *out = u, *n = k;
    return KV_OK;
}

int sim_work_name(sim_work *w, const sim_opts *o, kv_err *err)
{
    size_t len = strlen(o->output);
    while (len > 1 && o->output[len - 1] == '/') len--;   /* "res/" names the directory res */
    if (len + 16 > sizeof w->dir) return kv_fail(err, KV_EUSAGE, "output path '%s' is too long", o->output);
    snprintf(w->dir, sizeof w->dir, "%.*s.work", (int)len, o->output);
    return KV_OK;
}

/* FNV-1a over bytes, continued from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* How a unit file's part goes into a trace's results: copied (its own slots), or added (the
 * timing sums, shared by the units of a configuration: int64 or double). */
enum { PART_COPY, PART_ADD_I64, PART_ADD_F64 };

typedef int (*part_fn)(void *ctx, void *p, size_t bytes, int how);

/* Calls f on every part of unit u's slots of r, in file order: per configuration of the unit,
 * per layer of it, its [c][l] blocks (stats, logdet, head_budget, head_mean, step counts, span
 * results, retained rows); then per configuration its timing sums [c][K]; then the times. */
static int each_part(const sim_results *r, const sim_unit *u, const uint8_t *want, part_fn f, void *ctx)
{
    const size_t H = (size_t)r->H, K = (size_t)r->K, L = (size_t)r->L, NS = (size_t)r->n_steps;
    const size_t S = (size_t)r->n_spans;
    int rc = 0;
    for (int c = 0; !rc && c < r->n_cfg; c++)
        for (int64_t l = u->l0; want[c] && !rc && l < u->l0 + u->nl; l++) {
            const size_t cl = (size_t)c * L + (size_t)l;
            rc = f(ctx, r->stats + cl * H * N_PHASES, H * N_PHASES * sizeof *r->stats, PART_COPY);
            if (!rc) rc = f(ctx, r->logdet + cl * K, K * sizeof *r->logdet, PART_COPY);
            if (!rc) rc = f(ctx, r->head_budget + cl * K, K * sizeof *r->head_budget, PART_COPY);
            if (!rc) rc = f(ctx, r->head_mean + cl * K, K * sizeof *r->head_mean, PART_COPY);
            if (!rc) rc = f(ctx, r->kept_hash + cl * K, K * sizeof *r->kept_hash, PART_COPY);
            if (!rc && r->step_cand) rc = f(ctx, r->step_cand + cl * K * NS, K * NS * sizeof(int32_t), PART_COPY);
            if (!rc && r->step_kept) rc = f(ctx, r->step_kept + cl * K * NS, K * NS * sizeof(int32_t), PART_COPY);
            if (!rc && r->span_ret) rc = f(ctx, r->span_ret + cl * K * S, K * S * sizeof(double), PART_COPY);
            if (!rc && r->span_recall) rc = f(ctx, r->span_recall + cl * K * S, K * S * sizeof(double), PART_COPY);
            const size_t w = (size_t)r->width[c];
            if (!rc) rc = f(ctx, r->retained[c] + (size_t)l * K * w, K * w * sizeof(int64_t), PART_COPY);
        }
    for (int c = 0; !rc && c < r->n_cfg; c++) {
        if (!want[c]) continue;
        rc = f(ctx, r->calls + (size_t)c * K, K * sizeof(int64_t), PART_ADD_I64);
        if (!rc) rc = f(ctx, r->candidates + (size_t)c * K, K * sizeof(int64_t), PART_ADD_I64);
        if (!rc) rc = f(ctx, r->score_ns + (size_t)c * K, K * sizeof(double), PART_ADD_F64);
    }
    double *times[5] = {(double *)&r->load_s, (double *)&r->reference_s, (double *)&r->replay_s,
                        (double *)&r->metrics_s, (double *)&r->wall_s};
    for (int i = 0; !rc && i < 5; i++) rc = f(ctx, times[i], sizeof(double), PART_ADD_F64);
    return rc;
}

static int size_one(void *ctx, void *p, size_t n, int how)
{
    (void)p, (void)how;
    *(size_t *)ctx += n;
    return 0;
}

static int hash_one(void *ctx, void *p, size_t n, int how)
{
    (void)how;
    *(uint64_t *)ctx = fnv(*(uint64_t *)ctx, p, n);
    return 0;
}

static int write_one(void *ctx, void *p, size_t n, int how)
{
    (void)how;
    return fwrite(p, 1, n, ctx) == n ? 0 : -1;
}

/* Places the next n bytes of a read payload into p: copied, or added to what p holds. */
typedef struct {
    const unsigned char *at;
} cursor;

static int read_one(void *ctx, void *p, size_t n, int how)
{
    cursor *c = ctx;
    if (how == PART_COPY) memcpy(p, c->at, n);
    for (size_t i = 0; how == PART_ADD_I64 && i < n / sizeof(int64_t); i++) {
        int64_t x;
        memcpy(&x, c->at + i * sizeof x, sizeof x);
        ((int64_t *)p)[i] += x;
    }
    for (size_t i = 0; how == PART_ADD_F64 && i < n / sizeof(double); i++) {
        double x;
        memcpy(&x, c->at + i * sizeof x, sizeof x);
        ((double *)p)[i] += x;
    }
    c->at += n;
    return 0;
}

static void unit_path(const sim_work *w, int u, const char *tail, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/units/u%07d.bin%s", w->dir, u, tail);
}

/* The header of unit u's file: what it is (the unit), its payload's size and checksum. */
static void unit_head(int u, const sim_unit *x, size_t bytes, uint64_t *head)
{
    const uint64_t h[8] = {(uint64_t)u, (uint64_t)x->trace, (uint64_t)x->a, (uint64_t)x->c, (uint64_t)x->l0,
                           (uint64_t)x->nl, bytes, 14695981039346656037ull};
    memcpy(head, h, sizeof h);
}

int sim_work_put(const sim_work *w, int u, const sim_unit *x, const uint8_t *want, int rank, const sim_results *r,
                 kv_err *err)
{
    char tmp[4400], path[4400], tail[32];
    snprintf(tail, sizeof tail, ".tmp.%d", rank);
    unit_path(w, u, tail, tmp, sizeof tmp);
    unit_path(w, u, "", path, sizeof path);
    size_t bytes = 0;
    each_part(r, x, want, size_one, &bytes);
    uint64_t head[8];
    unit_head(u, x, bytes, head);
    each_part(r, x, want, hash_one, &head[7]);
    FILE *f = fopen(tmp, "wb");
    int bad = !f || fwrite(MAGIC, 1, sizeof MAGIC, f) != sizeof MAGIC || fwrite(head, sizeof head, 1, f) != 1 ||
              each_part(r, x, want, write_one, f) != 0;
    if (f && fclose(f) != 0) bad = 1;
    if (!bad && rename(tmp, path) == 0) return KV_OK;
    const int e = errno;
    unlink(tmp);
    return kv_fail(err, KV_EFAIL, "%s: cannot write a result: %s", path, strerror(e));
}

int sim_work_get(const sim_work *w, int u, const sim_unit *x, const uint8_t *want, sim_results *r, kv_err *err)
{
    char path[4400];
    unit_path(w, u, "", path, sizeof path);
    size_t want_bytes = 0;
    each_part(r, x, want, size_one, &want_bytes);
    char magic[sizeof MAGIC];
    uint64_t head[8], expect[8];
    unit_head(u, x, want_bytes, expect);
    unsigned char *buf = malloc(want_bytes + 1);
    FILE *f = buf ? fopen(path, "rb") : NULL;
    int rc = !buf ? kv_fail(err, KV_EFAIL, "sim: out of memory") :
             !f ? kv_fail(err, KV_EINPUT, "%s: cannot read: %s", path, strerror(errno)) : KV_OK;
    if (!rc && (fread(magic, 1, sizeof magic, f) != sizeof magic || memcmp(magic, MAGIC, sizeof MAGIC) != 0 ||
                fread(head, sizeof head, 1, f) != 1 || memcmp(head, expect, 7 * sizeof *head) != 0 ||
                fread(buf, 1, want_bytes + 1, f) != want_bytes ||
                fnv(14695981039346656037ull, buf, want_bytes) != head[7]))
        rc = kv_fail(err, KV_EINPUT, "%s: not a whole result of this run's unit %d", path, u);
    if (f) fclose(f);
    cursor c = {buf};
    if (!rc) each_part(r, x, want, read_one, &c);
    free(buf);
    return rc;
}

/* The command's plan: what a result in the folder depends on (malloc'ed text). */
static char *plan_text(const sim_opts *o, const study_set *s, const trace_run *runs)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    fprintf(f, "kvtrace sim work folder, format 4 (units: trace x configuration x layer)\n");
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
static int resume(const sim_work *w, const char *text, trace_run *runs, const sim_unit *units, int n_units,
                  uint8_t *done, kv_err *err)
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
    uint8_t *want = rc ? NULL : malloc((size_t)runs[0].res.n_cfg + 1);
    if (!rc && !want) rc = kv_fail(err, KV_EFAIL, "sim: out of memory");
    for (int u = 0; !rc && u < n_units; u++) {
        kv_err ignore = {0};   /* a missing or partial result is replayed */
        sim_results *r = &runs[units[u].trace].res;
        sim_unit_want(&units[u], r->n_cfg, want);
        done[u] = sim_work_get(w, u, &units[u], want, r, &ignore) == KV_OK;
    }
    free(want);
    return rc;
}

int sim_work_open(const sim_work *w, const sim_opts *o, const study_set *s, trace_run *runs, const sim_unit *units,
                  int n_units, uint8_t *done, kv_err *err)
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
        rc = resume(w, text, runs, units, n_units, done, err);
        free(text);
        return rc;
    }
    if (exists) kv_remove_tree(w->dir);
    char sub[4300], path[4400], tmp[4400];
    snprintf(sub, sizeof sub, "%s/units", w->dir);
    snprintf(path, sizeof path, "%s/plan.txt", w->dir);
    snprintf(tmp, sizeof tmp, "%s/plan.txt.tmp", w->dir);
    if (mkdir(w->dir, 0777) != 0 || mkdir(sub, 0777) != 0)
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

/* Whether the lock's owner (its "pid host" line) may still run: alive here, or on another host. */
static bool owner_alive(const char *path, char *who, size_t cap)
{
    FILE *f = fopen(path, "r");
    long pid = 0;
    char host[256] = "", me[256] = "";
    const int n = f ? fscanf(f, "%ld %255s", &pid, host) : 0;
    if (f) fclose(f);
    snprintf(who, cap, "pid %ld on %s", pid, host[0] ? host : "?");
    if (n != 2 || pid <= 0) return false;   /* gone meanwhile (free), or not a lock kvtrace wrote (a leftover) */
    gethostname(me, sizeof me - 1);
    if (strcmp(host, me) != 0) return true;  /* cannot tell: another host's process is taken as alive */
    if (kill((pid_t)pid, 0) != 0 && errno != EPERM) return false;
    char stat_path[64], state = 0;   /* a zombie (killed, not yet reaped) is gone */
    snprintf(stat_path, sizeof stat_path, "/proc/%ld/stat", pid);
    FILE *st = fopen(stat_path, "r");
    const bool zombie = st && fscanf(st, "%*d %*s %c", &state) == 1 && (state == 'Z' || state == 'X');
    if (st) fclose(st);
    return !zombie;
}

int sim_work_lock(sim_work *w, kv_err *err)
{
    char path[4300], tmp[4400], me[256] = "";
    snprintf(path, sizeof path, "%s.lock", w->dir);
    snprintf(tmp, sizeof tmp, "%s.lock.%ld", w->dir, (long)getpid());
    gethostname(me, sizeof me - 1);
    /* the lock's content first, in a file of this process's own, then linked to the lock's name: the
     * lock appears whole (a reader never sees it empty) or not at all (link refuses an existing name) */
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%ld %s\n", (long)getpid(), me[0] ? me : "localhost") < 0 || fclose(f) != 0) {
        if (f) fclose(f);
        unlink(tmp);
        return kv_fail(err, KV_EFAIL, "%s: cannot write: %s", tmp, strerror(errno));
    }
    int rc = KV_OK;
    for (int attempt = 0;; attempt++) {
        if (link(tmp, path) == 0) {
            w->locked = true;
            break;
        }
        if (errno != EEXIST || attempt == 2) {
            rc = kv_fail(err, KV_EFAIL, "%s: cannot create: %s", path, strerror(errno));
            break;
        }
        char who[320];
        bool alive = owner_alive(path, who, sizeof who);
        for (int wait = 0; alive && wait < 40; wait++) {   /* a run killed a moment ago may still be exiting */
            usleep(50 * 1000);
            alive = access(path, F_OK) == 0 && owner_alive(path, who, sizeof who);
        }
        if (alive) {
            rc = kv_fail(err, KV_EUSAGE, "%s: another kvtrace sim (%s) is writing this output; wait for it to end "
                         "(or remove %s if that process is gone)", w->dir, who, path);
            break;
        }
        if (access(path, F_OK) == 0) unlink(path);   /* its writer is gone: take the folder over */
    }
    unlink(tmp);
    return rc;
}

void sim_work_unlock(sim_work *w)
{
    if (!w->locked) return;
    char path[4300];
    snprintf(path, sizeof path, "%s.lock", w->dir);
    unlink(path);
    w->locked = false;
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
