/* What CUDA devices and library versions there are, asked in a short-lived
 * child process so that the asking process never initialises CUDA (one that
 * forks rank processes must not). Only built when the toolkit is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include <cublas_api.h>

#include "build_config.h"
#include "backend/backend.h"
#include "core/util.h"
#ifdef DPS_HAVE_NCCL
#include <nccl.h>
#endif

typedef struct probe_reply {
    int count;
    char why[256];
    be_cuda_versions versions;
    be_device_info info[DPS_MAX_DEVICES];
    unsigned char peer[DPS_MAX_DEVICES][DPS_MAX_DEVICES];
} probe_reply;

static void fmt_cuda(char *buf, size_t len, int v)
{
    if (v <= 0) snprintf(buf, len, "none");
    else snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* In the child: driver, runtime, cuBLAS and NCCL; none opens a device.
 * cuBLAS is asked only where a driver is installed: asking opens the
 * library (src/backend/cublas_lazy.c), half a second of CPU; without a
 * driver, where no CUDA can run, its version is the one the build was
 * compiled against. */
static void probe_versions(be_cuda_versions *v)
{
    int drv = 0, rt = 0, major = CUBLAS_VER_MAJOR, minor = CUBLAS_VER_MINOR,
        patch = CUBLAS_VER_PATCH;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    fmt_cuda(v->driver, sizeof v->driver, drv);
    fmt_cuda(v->runtime, sizeof v->runtime, rt);
    if (drv > 0) {
        cublasGetProperty(MAJOR_VERSION, &major);
        cublasGetProperty(MINOR_VERSION, &minor);
        cublasGetProperty(PATCH_LEVEL, &patch);
    }
    snprintf(v->cublas, sizeof v->cublas, "%d.%d.%d", major, minor, patch);
    snprintf(v->nccl, sizeof v->nccl, "not built");
#ifdef DPS_HAVE_NCCL
    int nv = 0;
    if (ncclGetVersion(&nv) == ncclSuccess)
        snprintf(v->nccl, sizeof v->nccl, "%d.%d.%d", nv / 10000, (nv / 100) % 100, nv % 100);
#endif
}

/* Why cudaGetDeviceCount found nothing, and what to do about a driver. */
static void no_device_reason(cudaError_t rc, char *why, size_t len)
{
    int drv = 0;
    if (rc == cudaErrorInsufficientDriver) cudaDriverGetVersion(&drv);
    if (rc == cudaErrorInsufficientDriver && drv == 0)
        snprintf(why, len, "no NVIDIA driver is installed (cudaGetDeviceCount: %s)",
                 cudaGetErrorString(rc));
    else if (rc == cudaErrorInsufficientDriver)
        snprintf(why, len, "the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d "
                 "runtime dpscale was built with; install driver 580 or newer (CUDA 13), or build "
                 "against the CUDA toolkit the driver supports (-Dcuda-root=DIR)",
                 drv / 1000, (drv % 1000) / 10, CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
    else
        snprintf(why, len, "cudaGetDeviceCount: %s", cudaGetErrorString(rc));
}

/* In the child: the devices, their names, memory, compute capability, bus
 * ids and peer access. */
static void probe_devices(probe_reply *r)
{
    cudaError_t rc = cudaGetDeviceCount(&r->count);
    if (rc != cudaSuccess) {
        no_device_reason(rc, r->why, sizeof r->why);
        r->count = 0;
    } else if (r->count == 0) {
        snprintf(r->why, sizeof r->why, "cudaGetDeviceCount found 0 devices");
    }
    if (r->count > DPS_MAX_DEVICES) r->count = DPS_MAX_DEVICES;
    for (int d = 0; d < r->count; d++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, d) == cudaSuccess) {
            dps_strlcpy(r->info[d].name, p.name, sizeof r->info[d].name);
            r->info[d].total_bytes = p.totalGlobalMem;
            r->info[d].cc_major = p.major;
        }
        cudaDeviceGetPCIBusId(r->info[d].bus_id, sizeof r->info[d].bus_id, d);
        for (int e = 0; e < r->count; e++) {
            int can = 0;
            if (e != d && cudaDeviceCanAccessPeer(&can, d, e) == cudaSuccess) r->peer[d][e] = can != 0;
        }
    }
}

static void probe_child(int fd, int devices)
{
    probe_reply r;
    memset(&r, 0, sizeof r);
    probe_versions(&r.versions);
    if (devices) probe_devices(&r);
    ssize_t w = write(fd, &r, sizeof r);
    _exit(w == (ssize_t)sizeof r ? 0 : 1);
}

/* Runs probe_child in a child process and reads its reply into r; 0, with
 * why said, when there is no reply. */
static int probe_run(int devices, probe_reply *r, char *why, size_t len)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, len, "cannot probe for CUDA devices: pipe failed");
        return 0;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        probe_child(fds[1], devices);
    }
    close(fds[1]);
    size_t got = 0;
    while (pid > 0 && got < sizeof *r) {
        ssize_t n = read(fds[0], (char *)r + got, sizeof *r - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fds[0]);
    int ws = 0;
    if (pid > 0) waitpid(pid, &ws, 0);
    if (got == sizeof *r) return 1;
    snprintf(why, len, "the CUDA probe process failed (%s)",
             pid > 0 && WIFSIGNALED(ws) ? dps_signal_name(WTERMSIG(ws)) : "no reply");
    return 0;
}

int cuda_probe_devices(be_device_info *info, be_cuda_versions *versions, backend *be, char *why,
                   size_t len)
{
    probe_reply *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(why, len, "out of host memory probing for CUDA devices");
        return 0;
    }
    int count = 0;
    if (probe_run(1, r, why, len)) {
        count = r->count;
        snprintf(why, len, "%s", count ? "" : r->why);
        if (info) memcpy(info, r->info, sizeof r->info);
        if (versions) *versions = r->versions;
        if (be) memcpy(be->peer, r->peer, sizeof r->peer);
    }
    free(r);
    return count;
}

void cuda_probe_versions(be_cuda_versions *versions)
{
    probe_reply *r = calloc(1, sizeof *r);
    char why[256] = "out of host memory";
    if (r && probe_run(0, r, why, sizeof why)) {
        *versions = r->versions;
    } else {
        dps_log("CUDA versions: %s; recording them as unknown", why);
        snprintf(versions->driver, sizeof versions->driver, "unknown");
        snprintf(versions->runtime, sizeof versions->runtime, "unknown");
        snprintf(versions->cublas, sizeof versions->cublas, "unknown");
        snprintf(versions->nccl, sizeof versions->nccl, "unknown");
    }
    free(r);
}
