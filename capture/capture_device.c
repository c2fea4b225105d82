/* A capture on the GPU (capture_device.h). */
#include "capture/capture_device.h"

#include <string.h>

#include "model/kernels_cuda.h"

int capture_device_check_opts(const capture_opts *o, kv_err *err)
{
    if (o->evict.iface)
        return kv_fail(err, KV_EUSAGE, "capture: --evict runs on the CPU only so far (its policies read every head's "
                       "attention weights, which the GPU's tiled attention never forms): drop --device cuda");
    if (o->attention == ATTN_FULL)
        return kv_fail(err, KV_EUSAGE, "capture: --attention full is not available with --device cuda (the tiled "
                       "attention forms no weight matrix): use --attention colsum, or the CPU");
    return KV_OK;
}

int capture_device_open(capture_device *cd, const capture_opts *o, kv_err *err)
{
    memset(cd, 0, sizeof *cd);
    int rc = capture_device_check_opts(o, err);
    if (!rc) rc = kernels_cuda_open(NULL, (kvcuda_dtype)o->weights, err);
    if (!rc) cd->open = true;
    return rc;
}

int capture_device_start(capture_device *cd, const capture_opts *o, const kv_model *m, int64_t T, forward_state *fw,
                         kv_err *err)
{
    int rc = KV_OK;
    cd->colsum = o->attention != ATTN_NONE;
    const int64_t B = o->chunk < T ? o->chunk : T;
    const backend_cuda *b = kernels_cuda_backend();
    backend_budget need;
    backend_budget_compute(m, T, B, (kvcuda_dtype)o->weights, cd->colsum, &need);
    rc = backend_budget_check(&need, b->info.free_bytes, b->info.total_bytes, b->info.name, err);
    if (!rc) rc = kernels_cuda_upload_model(m, &cd->dev_model, err);
    if (!rc) rc = kernels_cuda_prepare(&m->cfg, T, B, cd->colsum, err);
    if (!rc) rc = forward_init(fw, &cd->dev_model, kernels_cuda_table(), T, o->chunk, err);
    return rc;
}

int capture_device_record(capture_device *cd, recorder *rec, int64_t B, kv_err *err)
{
    int rc = record_device_init(&cd->rd, rec, kernels_cuda_backend(), &rec->cfg, B, 2, err);
    if (rc) {
        kv_err ignored = {0};
        record_device_finish(&cd->rd, &ignored);
    } else {
        cd->recording = true;
    }
    return rc;
}

forward_observer capture_device_observer(capture_device *cd)
{
    return record_device_observer(&cd->rd);
}

void capture_device_known(capture_device *cd, int64_t known)
{
    cd->rd.known = known;
}

int capture_device_finish(capture_device *cd, recorder *rec, kv_err *err)
{
    int rc = cd->recording ? record_device_drain(&cd->rd, err) : KV_OK;
    if (!rc && rec->want.colsum) rc = kernels_cuda_colsum_download(rec->colsum, err);
    return rc;
}

double capture_device_peak_gib(const capture_device *cd)
{
    return cd->open ? (double)kernels_cuda_peak_bytes() / (1024.0 * 1024.0 * 1024.0) : 0.0;
}

void capture_device_free(capture_device *cd, forward_state *fw)
{
    kv_err ignored = {0};
    if (cd->recording) record_device_finish(&cd->rd, &ignored);
    forward_free(fw);
    if (cd->open) {
        kernels_cuda_free_model(&cd->dev_model);
        kernels_cuda_close();
    }
    memset(cd, 0, sizeof *cd);
}
