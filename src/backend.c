/* Backend selection, versions, and the accounting shared by every backend:
 * each allocation counts against its device (in use, peak, capacity), so
 * alloc_peak_bytes is exact and out-of-memory names the device and sizes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dps_config.h"
#include "backend.h"
#include "util.h"

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

dps_status be_buf_alloc(backend *be, int dev, size_t bytes, const char *what, dps_buf *buf)
{
    memset(buf, 0, sizeof *buf);
    buf->dev = dev;
    if (bytes == 0) return DPS_OK;
    be_mem *m = &be->mem[dev];
    pthread_mutex_lock(&be->mem_lock);
    size_t in_use = m->in_use;
    int over = m->capacity && (bytes > m->capacity || in_use > m->capacity - bytes);
    pthread_mutex_unlock(&be->mem_lock);
    char need[32], used[32], cap[32];
    if (over) {
        dps_fmt_bytes(bytes, need, sizeof need);
        dps_fmt_bytes(in_use, used, sizeof used);
        dps_fmt_bytes(m->capacity, cap, sizeof cap);
        return dps_fail(DPS_ERR_OOM, "device %d: out of memory allocating %s for %s "
                        "(%s in use of %s capacity set by --device-mem)",
                        dev, need, what, used, cap);
    }
    dps_status rc = be->ops->raw_alloc(be, dev, bytes, &buf->ptr);
    if (rc != DPS_OK) {
        if (rc != DPS_ERR_OOM) return rc;
        dps_fmt_bytes(bytes, need, sizeof need);
        dps_fmt_bytes(in_use, used, sizeof used);
        return dps_fail(DPS_ERR_OOM, "device %d: out of memory allocating %s for %s "
                        "(%s allocated by dpscale): %s", dev, need, what, used, dps_errmsg());
    }
    buf->bytes = bytes;
    pthread_mutex_lock(&be->mem_lock);
    m->in_use += bytes;
    if (m->in_use > m->peak) m->peak = m->in_use;
    pthread_mutex_unlock(&be->mem_lock);
    return DPS_OK;
}

void be_buf_free(backend *be, dps_buf *buf)
{
    if (!buf->ptr) return;
    be->ops->raw_free(be, buf->dev, buf->ptr);
    pthread_mutex_lock(&be->mem_lock);
    be->mem[buf->dev].in_use -= buf->bytes;
    pthread_mutex_unlock(&be->mem_lock);
    buf->ptr = NULL;
    buf->bytes = 0;
}

dps_status be_sample_mem(backend *be, int dev)
{
    size_t used = 0;
    DPS_TRY(be->ops->mem_used(be, dev, &used));
    pthread_mutex_lock(&be->mem_lock);
    if (used > be->mem[dev].device_peak) be->mem[dev].device_peak = used;
    pthread_mutex_unlock(&be->mem_lock);
    return DPS_OK;
}

dps_status be_mark_baseline(backend *be, int dev)
{
    size_t used = 0;
    DPS_TRY(be->ops->mem_used(be, dev, &used));
    pthread_mutex_lock(&be->mem_lock);
    be->mem[dev].device_base = used >= be->mem[dev].in_use ? used - be->mem[dev].in_use : 0;
    pthread_mutex_unlock(&be->mem_lock);
    return DPS_OK;
}

void be_reset_peaks(backend *be)
{
    pthread_mutex_lock(&be->mem_lock);
    for (int d = 0; d < be->ndev; d++) {
        be->mem[d].peak = be->mem[d].in_use;
        be->mem[d].device_peak = 0;
    }
    pthread_mutex_unlock(&be->mem_lock);
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
