/* Progress lines (core/progress.c) with an injected clock, terminal test and
 * stream: not on a terminal, nothing in the first 10 s (short runs stay
 * silent), then plain lines (no \r) at most every 10 s with the stage, the
 * fraction done and an estimate of the time left, checked against the
 * arithmetic here; on a terminal one \r line cleared at the end; --quiet
 * silences both; KVTRACE_PROGRESS_INTERVAL sets the interval (test-only). */
#include "testutil.h"

#include <math.h>

#include "core/progress.h"

typedef struct {
    double t;          /* the fake clock, seconds */
    char *buf;         /* what was printed (open_memstream) */
    size_t len;
    FILE *out;
    progress_env env;
} fake;

static double fake_clock(void *ctx) { return ((fake *)ctx)->t; }

static void fake_open(fake *f, bool tty)
{
    memset(f, 0, sizeof *f);
    f->out = open_memstream(&f->buf, &f->len);
    assert_non_null(f->out);
    f->env = (progress_env){.clock = fake_clock, .clock_ctx = f, .tty = tty, .interval = 10.0, .out = f->out};
}

/* Closes the stream; returns the text printed (caller frees). */
static char *fake_close(fake *f)
{
    assert_int_equal(fclose(f->out), 0);
    return f->buf;
}

/* Shows printed text as TAP comments, one "# " per line. */
static void show(const char *s)
{
    for (const char *line = s; *line;) {
        const char *nl = strchr(line, '\n');
        int n = nl ? (int)(nl - line) : (int)strlen(line);
        printf("# %.*s\n", n, line);
        line += n + (nl != NULL);
    }
}

static int count(const char *s, char c)
{
    int n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

/* Runs n updates, one every dt seconds of the fake clock; returns what was
 * printed (caller frees) and its length in *len. */
static char *drive(bool tty, bool quiet, int n, double dt, size_t *len)
{
    fake f;
    fake_open(&f, tty);
    kv_progress p;
    progress_start_env(&p, "sim", n, quiet, &f.env);
    for (int i = 1; i <= n; i++) {
        f.t = dt * i;
        progress_update(&p, i);
    }
    progress_end(&p);
    char *out = fake_close(&f);
    *len = f.len;
    return out;
}

/* A run of 9.9 s, updated every 0.1 s, prints nothing when not on a terminal. */
static void short_runs_are_silent(void **state)
{
    (void)state;
    size_t len;
    char *out = drive(false, false, 99, 0.1, &len);
    assert_int_equal(len, 0);
    free(out);
}

/* A 60 s run updated every 0.25 s: lines at 10, 20, ... 60 s, never two within
 * 10 s, plain (no \r), each with the stage, fraction and time left. */
static void plain_lines_at_most_every_interval(void **state)
{
    (void)state;
    fake f;
    fake_open(&f, false);
    kv_progress p;
    const int n = 240;
    progress_start_env(&p, "capture", n, false, &f.env);
    progress_stage(&p, "prefill");
    for (int i = 1; i <= n; i++) {
        f.t = 0.25 * i;
        if (i == 120) progress_stage(&p, "generate");
        progress_update(&p, i);
    }
    progress_end(&p);
    char *out = fake_close(&f);
    show(out);
    assert_int_equal(count(out, '\r'), 0);
    assert_int_equal(count(out, '\n'), 6);
    double last = -1e9;
    int lines = 0;
    for (char *line = out; *line; line = strchr(line, '\n') + 1, lines++) {
        char stage[32];
        double pct, done, total, el, left;
        int got = sscanf(line, "kvtrace capture %31[a-z]: %lf%% (%lf/%lf), %lf s elapsed, about %lf s left", stage,
                         &pct, &done, &total, &el, &left);
        assert_int_equal(got, 6);
        assert_string_equal(stage, lines < 2 ? "prefill" : "generate");
        assert_true(el - last >= 10.0);
        assert_true(fabs(el - 10.0 * (lines + 1)) < 0.5);
        assert_true(fabs(done - el / 0.25) < 1e-9 && total == n);
        assert_true(fabs(pct - 100.0 * done / n) < 0.5);
        assert_true(fabs(left - (n - done) * 0.25) < 0.5); /* the same rate for the rest */
        last = el;
    }
    assert_int_equal(lines, 6);
    free(out);
}

/* The estimate: elapsed * (1 - f) / f; unknown before anything is done. */
static void eta_arithmetic(void **state)
{
    (void)state;
    assert_true(fabs(progress_eta(10.0, 0.25) - 30.0) < 1e-12);
    assert_true(fabs(progress_eta(40.0, 0.8) - 10.0) < 1e-12);
    assert_true(progress_eta(12.0, 1.0) == 0.0);
    assert_true(progress_eta(5.0, 0.0) < 0);
    /* long runs in minutes and hours */
    fake f;
    fake_open(&f, false);
    kv_progress p;
    progress_start_env(&p, "analyze", 1000, false, &f.env);
    f.t = 600.0;
    progress_update(&p, 100);  /* 10% in 10 min: 90 min left */
    f.t = 4000.0;
    progress_update(&p, 200);  /* 20% in 4000 s: 16000 s = 4.4 h left */
    char *out = fake_close(&f);
    show(out);
    assert_non_null(strstr(out, "kvtrace analyze:  10% (100/1000), 10 min elapsed, about 90 min left\n"));
    assert_non_null(strstr(out, " 20% (200/1000), 67 min elapsed, about 4.4 h left\n"));
    free(out);
}

/* A capture-like run (random:llama-3.2-1b, 347 tokens: the report that found it): a batched
 * prefill of 330 positions in 20 s, then 17 generated tokens at 1.1 s each. In the prefill the
 * line gives the prefill's own time left and the 17 after it; in the generation the time left is
 * the generation's rate times what is left, within 2x of the truth at every line (the run-wide
 * rate said "about 1 s left" at 23 s of a 39 s run). */
static void stages_at_their_own_rate(void **state)
{
    (void)state;
    fake f;
    fake_open(&f, false);
    f.env.interval = 0.0;   /* a line at every update */
    kv_progress p;
    const int P = 330, T = 347;
    const double prefill_s = 20.0, token_s = 1.1;
    progress_start_env(&p, "capture", T, false, &f.env);
    progress_stage_until(&p, "prefill", P);
    for (int p0 = 30; p0 <= P; p0 += 30) {
        f.t = prefill_s * p0 / P;
        progress_update(&p, p0);
    }
    progress_stage(&p, "generate");
    for (int t = P + 1; t <= T; t++) {
        f.t = prefill_s + token_s * (t - P);
        progress_update(&p, t);
    }
    char *out = fake_close(&f);
    show(out);
    int prefill = 0, generate = 0;
    for (char *line = out; *line; line = strchr(line, '\n') + 1) {
        double pct, done, total, el, left, more;
        if (sscanf(line, "kvtrace capture prefill: %lf%% (%lf/%lf), %lf s elapsed, about %lf s left in prefill, then "
                   "%lf more", &pct, &done, &total, &el, &left, &more) == 6) {
            assert_true(fabs(left - prefill_s * (P - done) / P) < 0.51 && more == T - P);
            prefill++;
        } else if (sscanf(line, "kvtrace capture generate: %lf%% (%lf/%lf), %lf s elapsed, about %lf s left", &pct,
                          &done, &total, &el, &left) == 5) {
            const double truth = token_s * (T - done);
            assert_true(truth == 0 ? left == 0 : left >= truth / 2 && left <= truth * 2);
            generate++;
        } else {
            fail_msg("an unexpected line: %.120s", line);
        }
    }
    assert_int_equal(prefill, 11);
    assert_int_equal(generate, T - P);
    free(out);
}

/* --quiet: nothing, on a terminal or not, however long the run; on a
 * terminal: \r lines from the start, at most ~10 a second, cleared at the end. */
static void quiet_and_terminal(void **state)
{
    (void)state;
    size_t len;
    for (int tty = 0; tty < 2; tty++) {
        char *out = drive(tty, true, 10, 30.0, &len);
        assert_int_equal(len, 0);
        free(out);
    }
    char *out = drive(true, false, 100, 0.01, &len);
    assert_int_equal(count(out, '\n'), 0);
    const int crs = count(out, '\r');
    printf("# %d carriage returns\n", crs);
    assert_true(crs >= 4 && crs <= 2 * 11 + 2);   /* ~10 lines in 1 s (the last always), then the clearing */
    assert_non_null(strstr(out, "\rkvtrace sim: 100% (100/100)"));
    assert_true(len >= 2 && out[len - 1] == '\r' && out[len - 2] == ' ');
    free(out);
}

/* KVTRACE_PROGRESS_INTERVAL: a test-only interval; anything not a number >= 0 is ignored. */
static void interval_from_the_environment(void **state)
{
    (void)state;
    static const struct { const char *value; double want; } CASES[] = {
        {"0", 0.0}, {"2.5", 2.5}, {"-1", PROGRESS_INTERVAL_S}, {"soon", PROGRESS_INTERVAL_S},
        {"", PROGRESS_INTERVAL_S}, {"inf", PROGRESS_INTERVAL_S},
    };
    progress_env env;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        assert_int_equal(setenv(PROGRESS_INTERVAL_ENV, CASES[i].value, 1), 0);
        progress_env_default(&env);
        assert_true(env.interval == CASES[i].want);
    }
    assert_int_equal(unsetenv(PROGRESS_INTERVAL_ENV), 0);
    progress_env_default(&env);
    assert_true(env.interval == PROGRESS_INTERVAL_S && env.out == stderr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(short_runs_are_silent),
        cmocka_unit_test(plain_lines_at_most_every_interval),
        cmocka_unit_test(eta_arithmetic),
        cmocka_unit_test(stages_at_their_own_rate),
        cmocka_unit_test(quiet_and_terminal),
        cmocka_unit_test(interval_from_the_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
