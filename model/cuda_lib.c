/* Loading the CUDA library (cuda_lib.h). */
#include "model/cuda_lib.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The library beside the running executable, into buf; false if unknown. */
static bool beside_exe(char *buf, size_t cap)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return false;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return false;
    *slash = '\0';
    return snprintf(buf, cap, "%s/%s", exe, CUDA_LIB_NAME) < (int)cap;
}

static void *try_open(const char *path, char *why, size_t cap)
{
    /* never unloaded: cudart and libstdc++ keep process-lifetime state (and a
     * leak checker would see it as lost once the mapping went away) */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, cap, "%s", e ? e : "dlopen failed");
    }
    return h;
}

int cuda_lib_load(cuda_lib *b, const char *lib, kv_err *err)
{
    memset(b, 0, sizeof *b);
    char why[1024] = "", cand[4096];
    const char *env = getenv(CUDA_LIB_ENV);
    if (!lib && env && *env) lib = env;
    if (lib) {
        snprintf(b->path, sizeof b->path, "%s", lib);
        b->dl = try_open(lib, why, sizeof why);
    } else if (beside_exe(cand, sizeof cand) && access(cand, F_OK) == 0) {
        snprintf(b->path, sizeof b->path, "%s", cand);
        b->dl = try_open(cand, why, sizeof why);
    } else {
        snprintf(b->path, sizeof b->path, "%s", CUDA_LIB_NAME);
        b->dl = try_open(CUDA_LIB_NAME, why, sizeof why);
    }
    if (!b->dl)
        return kv_fail(err, KV_EFAIL, "--device cuda: cannot load the CUDA backend %s: %s (it is built by make where "
                       "nvcc and cuBLAS are found; set %s to its path, and put CUDA's lib64 on LD_LIBRARY_PATH)",
                       b->path, why, CUDA_LIB_ENV);
    kvcuda_get_api_fn get = NULL;
    *(void **)&get = dlsym(b->dl, "kvcuda_get_api");
    b->api = get ? get(KVCUDA_ABI) : NULL;
    if (!b->api || b->api->size != sizeof(kvcuda_api)) {
        cuda_lib_close(b);
        return kv_fail(err, KV_EFAIL, "--device cuda: %s is not a CUDA backend of this kvtrace (ABI %d): rebuild it "
                       "with make", lib ? lib : CUDA_LIB_NAME, (int)KVCUDA_ABI);
    }
    return KV_OK;
}

int cuda_lib_open(cuda_lib *b, const char *lib, int device, kv_err *err)
{
    int rc = cuda_lib_load(b, lib, err);
    if (rc) return rc;
    kv_err e = {0};
    rc = b->api->open(device, &b->ctx, &b->info, &e);
    if (rc) {
        cuda_lib_close(b);
        return kv_fail(err, KV_EFAIL, "--device cuda: %s", e.msg);
    }
    return KV_OK;
}

void cuda_lib_close(cuda_lib *b)
{
    if (b->ctx && b->api) b->api->close(b->ctx);
    if (b->dl) dlclose(b->dl);
    memset(b, 0, sizeof *b);
}

int cuda_lib_dtype_size(kvcuda_dtype dt)
{
    return dt == KVCUDA_F32 ? 4 : 2;
}
