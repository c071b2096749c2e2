/* Backend selection (be_open: cuda when a GPU is visible, else host, but
 * never the host when the machine shows NVIDIA GPUs that CUDA cannot use)
 * and the versions of what it runs on. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "backend/backend.h"
#include "backend/nvml.h"
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

int be_nvidia_dev_nodes(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *p = e->d_name, *digits = p + 6;
        if (strncmp(p, "nvidia", 6) != 0) continue;
        for (p = digits; *p >= '0' && *p <= '9'; p++) {}
        n += p > digits && *p == '\0'; /* nvidia0, nvidia1, ...: not nvidiactl or nvidia-uvm */
    }
    closedir(d);
    return n;
}

dps_status be_auto_decide(const be_auto_signs *s)
{
    if (s->dev_nodes <= 0 && s->nvml_gpus <= 0) return DPS_OK;
    char seen[96], hidden[192] = "";
    if (s->nvml_gpus > 0)
        snprintf(seen, sizeof seen, "NVML sees %d GPU%s", s->nvml_gpus, s->nvml_gpus == 1 ? "" : "s");
    else
        snprintf(seen, sizeof seen, "%d /dev/nvidiaN device node%s", s->dev_nodes,
                 s->dev_nodes == 1 ? "" : "s");
    if (s->visible) snprintf(hidden, sizeof hidden, " (CUDA_VISIBLE_DEVICES=\"%.100s\" may hide them)", s->visible);
    if (!s->built_with_cuda)
        return dps_fail(DPS_ERR_RUNTIME, "--backend auto: this machine has NVIDIA GPUs (%s) but this "
                        "dpscale was built without CUDA (-Dcuda=disabled or no toolkit); rebuild it "
                        "with the CUDA toolkit to measure them, or pass --backend host to benchmark "
                        "the CPU's emulated devices on purpose", seen);
    return dps_fail(DPS_ERR_RUNTIME, "--backend auto: this machine has NVIDIA GPUs (%s) but CUDA "
                    "cannot use them: %s%s; fix that to measure the GPUs, or pass --backend host "
                    "to benchmark the CPU's emulated devices on purpose", seen,
                    s->cuda_why && *s->cuda_why ? s->cuda_why : "no reason given", hidden);
}

/* --backend auto without a CUDA device: the host backend, unless the
 * machine shows NVIDIA GPUs that CUDA could not start on. */
static dps_status open_auto_host(const be_options *opt, backend **out, const char *cuda_why)
{
    be_auto_signs s = {.cuda_why = cuda_why, .dev_nodes = be_nvidia_dev_nodes("/dev"),
                       .nvml_gpus = nvml_device_count(), .visible = getenv("CUDA_VISIBLE_DEVICES")};
#ifdef DPS_HAVE_CUDA
    s.built_with_cuda = 1;
#endif
    DPS_TRY(be_auto_decide(&s));
    char line[DPS_ERRMSG_MAX];
    if (s.built_with_cuda)
        snprintf(line, sizeof line, "backend auto: no CUDA device (%s); taking the host backend "
                 "(emulated devices on the CPU)", cuda_why);
    else
        snprintf(line, sizeof line, "backend auto: built without CUDA; taking the host backend "
                 "(emulated devices on the CPU)");
    if (!opt->quiet && opt->notice && opt->notice_len) dps_strlcpy(opt->notice, line, opt->notice_len);
    else if (!opt->quiet) dps_log("%s", line);
    return be_host_open(opt, out);
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
#endif
    return open_auto_host(opt, out, why);
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
    if (v->conv[0]) return; /* the backend's convolutions (cuDNN's) said what they run on */
    if (be->kind != BE_CUDA)
        dps_strlcpy(v->conv, "im2col-gemm (the host backend)", sizeof v->conv);
    else
        snprintf(v->conv, sizeof v->conv, "im2col-gemm (cuDNN not found at build: %s)",
                 DPS_CUDNN_WHY);
}

int be_conv_out_h(const be_conv *cv)
{
    return (cv->h + 2 * cv->pad_h - cv->dil_h * (cv->r - 1) - 1) / cv->str_h + 1;
}

int be_conv_out_w(const be_conv *cv)
{
    return (cv->w + 2 * cv->pad_w - cv->dil_w * (cv->s - 1) - 1) / cv->str_w + 1;
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
        {"conv", "convolutions", v->conv},
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
