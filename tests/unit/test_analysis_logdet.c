/* log det(K̂ᵀK̂/n + 1e-6·I) (analysis/logdet.c, the one owner) against key sets
 * whose Gram matrix is known in closed form: orthonormal keys of any norms,
 * axis-aligned keys with multiplicities (a diagonal Gram matrix), and a
 * rank-deficient set, full rank only through the ridge. */
#include "testutil.h"

#include <math.h>

#include "analysis/logdet.h"
#include "orthonormal.h"

enum { D = 8 };
static const double EPS = 1e-6;

static void check(const char *what, const float *keys, int64_t n, double want)
{
    double scratch[D * D];
    const double got = logdet_keys(keys, n, D, scratch);
    printf("# %s: logdet %.12f, closed form %.12f\n", what, got, want);
    assert_true(fabs(got - want) <= 1e-6 + 1e-6 * fabs(want));
}

/* D orthonormal keys scaled by norms 0.5 .. 4: K̂ᵀK̂/D = I/D. */
static void orthonormal_keys(void **state)
{
    (void)state;
    double q[D][D];
    tu_orthonormal(&q[0][0], D, D, 1);
    float keys[D * D];
    for (int a = 0; a < D; a++)
        for (int d = 0; d < D; d++) keys[a * D + d] = (float)((0.5 + 0.5 * a) * q[a][d]);
    check("orthonormal", keys, D, D * log(1.0 / D + EPS));
}

/* c_a copies of c_a·e_a (scaled, normalisation removes it): diag(c_a / n). */
static void diagonal_gram(void **state)
{
    (void)state;
    float keys[64 * D];
    memset(keys, 0, sizeof keys);
    int n = 0;
    double want = 0.0;
    const int counts[D] = {1, 2, 3, 4, 5, 6, 7, 8}; /* n = 36 */
    for (int a = 0; a < D; a++)
        for (int c = 0; c < counts[a]; c++) keys[n++ * D + a] = (float)(a + 1) * (c % 2 ? -1.0f : 1.0f);
    for (int a = 0; a < D; a++) want += log((double)counts[a] / n + EPS);
    check("diagonal", keys, n, want);
}

/* u1, u2, 3(u1+u2)/√2 in a random plane: in the basis (u1, u2) the Gram
 * matrix is [[1.5, 0.5], [0.5, 1.5]] / 3, eigenvalues 2/3 and 1/3; the other
 * D − 2 directions hold only the ridge. */
static void rank_deficient_made_full_rank_by_ridge(void **state)
{
    (void)state;
    double q[D][D];
    tu_orthonormal(&q[0][0], D, D, 2);
    float keys[3 * D];
    for (int d = 0; d < D; d++) {
        keys[d] = (float)q[0][d];
        keys[D + d] = (float)(2.0 * q[1][d]);
        keys[2 * D + d] = (float)(3.0 * (q[0][d] + q[1][d]) / sqrt(2.0));
    }
    check("rank 2", keys, 3, log(2.0 / 3 + EPS) + log(1.0 / 3 + EPS) + (D - 2) * log(EPS));
    /* one key repeated: rank 1 */
    float one[4 * D];
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < D; d++) one[i * D + d] = (float)((i + 1) * q[3][d]);
    check("rank 1", one, 4, log(1.0 + EPS) + (D - 1) * log(EPS));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(orthonormal_keys),
        cmocka_unit_test(diagonal_gram),
        cmocka_unit_test(rank_deficient_made_full_rank_by_ridge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
