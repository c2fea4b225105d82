/* primekv: a RECONSTRUCTION of PrimeKV (docs/policies.md#the-first-ten-policies),
 * not the paper's formula.
 * PrimeKV ("PrimeKV: Preserving Critical KV Cache Without Attention Scores for
 * Long-Context Inference", Neurocomputing) keeps the pairs whose removal would
 * perturb the output most, estimated without attention from key-side
 * irreplaceability and value-side contribution. Its summary in seeds/ gives
 * the principle but not the final formula; this is our reconstruction from
 * it: removing pair j changes the output by a_j (o − v_j)/(1 − a_j); r_j
 * stands in for a_j and c_j for ‖o − v_j‖:
 *   s_j = r_j · c_j
 *   key=anchor  r_j = 1 − cos(k_j, μ_norm), μ_norm the mean of k_m/‖k_m‖
 *   key=nn      r_j = 1 − max_{m≠j} cos(k_j, k_m)   (O(n²·D); 1 when n = 1)
 *   value=dev   c_j = ‖v_j − v̄‖
 *   value=proj  c_j = |⟨v_j, v̄⟩| / ‖v̄‖            (0 when ‖v̄‖ = 0)
 * with v̄ the mean value of C; a zero vector has cos 0 with everything.
 * Parameters: key (anchor|nn, anchor), value (dev|proj, dev). */
#include <math.h>
#include <stdlib.h>

#include "policies/policy.h"
#include "core/vecmath.h"

enum { KEY_ANCHOR, KEY_NN };
enum { VALUE_DEV, VALUE_PROJ };

/* r[j] = 1 − max_{m≠j} cos(k_j, k_m); norms[n] precomputed. */
static void nn_irreplaceability(const policy_view *v, const double *norms, double *r)
{
    int64_t n = v->n, D = v->D;
    for (int64_t j = 0; j < n; j++) r[j] = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        for (int64_t m = j + 1; m < n; m++) {
            double c = vm_cos(vm_dot_ff(v->keys + j * D, v->keys + m * D, D), norms[j], norms[m]);
            if (c > r[j]) r[j] = c;
            if (c > r[m]) r[m] = c;
        }
    for (int64_t j = 0; j < n; j++) r[j] = n < 2 ? 1.0 : 1.0 - r[j];
}

static int primekv_score(const policy_config *cfg, void *state, const policy_view *v, double *scores,
                         kv_err *err)
{
    (void)state;
    int64_t n = v->n, D = v->D;
    double *buf = kv_calloc((size_t)(2 * D + 2 * n), sizeof(double), "primekv scores", err);
    if (!buf) return err->code;
    double *mu = buf, *vbar = buf + D, *norms = buf + 2 * D, *w = norms + n; /* [D] [D] [n] [n] */
    for (int64_t j = 0; j < n; j++) norms[j] = vm_norm(v->keys + j * D, D);
    if (policy_choice(cfg, "key") == KEY_NN) {
        nn_irreplaceability(v, norms, scores);
    } else {
        vm_weighted_mean(v->keys, n, D, norms, mu, w); /* the mean of k_j/‖k_j‖ */
        double nmu = vm_norm_d(mu, D);
        for (int64_t j = 0; j < n; j++)
            scores[j] = 1.0 - vm_cos(vm_dot(v->keys + j * D, mu, D), norms[j], nmu);
    }
    vm_weighted_mean(v->values, n, D, NULL, vbar, w);
    double nvbar = vm_norm_d(vbar, D);
    bool proj = policy_choice(cfg, "value") == VALUE_PROJ;
    for (int64_t j = 0; j < n; j++) {
        const float *val = v->values + j * D;
        double c = 0;
        if (proj) {
            c = nvbar == 0 ? 0 : fabs(vm_dot(val, vbar, D)) / nvbar;
        } else {
            for (int64_t d = 0; d < D; d++) c += ((double)val[d] - vbar[d]) * ((double)val[d] - vbar[d]);
            c = sqrt(c);
        }
        scores[j] *= c;
    }
    free(buf);
    return KV_OK;
}

const policy_iface policy_primekv = {
    .name = "primekv",
    .summary = "PrimeKV RECONSTRUCTED from its principle (not the paper's formula): "
               "key irreplaceability x value deviation",
    .params = {
        {.key = "key", .kind = PARAM_CHOICE, .def = "anchor", .choices = "anchor|nn",
         .doc = "r = 1 - cos(k, mean normalised key) (anchor) or 1 - max cos to another key (nn)"},
        {.key = "value", .kind = PARAM_CHOICE, .def = "dev", .choices = "dev|proj",
         .doc = "c = |v - mean v| (dev) or |<v, mean v>| / |mean v| (proj)"},
    },
    .score = primekv_score,
};
