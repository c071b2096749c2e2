/* Backend selection (be_open: cuda when a GPU is visible, else host) and
 * the versions of what it runs on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dps_config.h"
#include "backend/backend.h"
#include "core/util.h"

const char *const be_kind_names[BE_KIND_COUNT] = {"auto", "host", "cuda"};

static dps_status open_cuda(const be_options *opt, backend **out, char *why, size_t len)
{
#ifdef DPS_HAVE_CUDA
    return be_cuda_open(opt, out, why, len);
#else
    (void)opt; (void)out; (void)why; (void)len;
    return dps_fail(DPS_ERR_RUNTIME, "--backend cuda: this dpscale was built without CUDA "
                    "(-Dcuda=disabled or no toolkit); rebuild with the CUDA toolkit or use "
                    "--backend host");
#endif
}

dps_status be_open(const be_options *opt, backend **out)
{
    *out = NULL;
    if (opt->kind == BE_HOST) return be_host_open(opt, out);
    char why[256] = "";
    if (opt->kind == BE_CUDA) return open_cuda(opt, out, why, sizeof why);
#ifdef DPS_HAVE_CUDA
    if (open_cuda(opt, out, why, sizeof why) == DPS_OK) {
        if (!opt->quiet) dps_log("backend auto: %d CUDA device(s); taking the cuda backend", (*out)->ndev);
        return DPS_OK;
    }
    if (!opt->quiet)
        dps_log("backend auto: no CUDA device (%s); taking the host backend (emulated devices "
                "on the CPU)", why);
#else
    if (!opt->quiet)
        dps_log("backend auto: built without CUDA; taking the host backend "
                "(emulated devices on the CPU)");
#endif
    return be_host_open(opt, out);
}

void be_close(backend *be)
{
    if (be) be->ops->destroy(be);
}

void be_versions(const backend *be, be_version_info *v)
{
    memset(v, 0, sizeof *v);
    dps_strlcpy(v->nccl_build, DPS_NCCL_BUILD_VERSION, sizeof v->nccl_build);
    be->ops->versions(be, v);
#ifdef DPS_HAVE_CUDA
    if (be->kind != BE_CUDA) cuda_probe_versions(&v->cuda);
#endif
}

void be_version_fields(const be_version_info *v, be_version_field out[BE_VERSION_NFIELDS])
{
    const be_version_field f[BE_VERSION_NFIELDS] = {
        {"driver", "CUDA driver", v->cuda.driver},
        {"runtime", "CUDA runtime", v->cuda.runtime},
        {"cublas", "cuBLAS", v->cuda.cublas},
        {"nccl", "NCCL", v->cuda.nccl},
        {"nccl_build", "NCCL headers", v->nccl_build},
        {"blas", "host BLAS", v->blas},
    };
    memcpy(out, f, sizeof f);
}

int be_oversubscribed(const backend *be, int ndev, char *note, size_t len)
{
    if (!be->emulated || be->host_cores <= 0 || ndev <= be->host_cores) return 0;
    snprintf(note, len, "oversubscribed: %d devices on %d core%s: scaling beyond %d reflects the "
             "CPU", ndev, be->host_cores, be->host_cores == 1 ? "" : "s", be->host_cores);
    return 1;
}
