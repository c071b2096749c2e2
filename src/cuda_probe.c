/* What CUDA devices there are, asked in a short-lived child process so that
 * the asking process never initialises CUDA (a process that forks rank
 * processes must not), and the library versions for `info` and meta.json.
 * Only built when the toolkit is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include <cublas_api.h>

#include "dps_config.h"
#include "backend.h"
#include "util.h"
#ifdef DPS_HAVE_NCCL
#include <nccl.h>
#endif

typedef struct probe_reply {
    int count;
    char why[256];
    char versions[256];
    be_device_info info[DPS_MAX_DEVICES];
    unsigned char peer[DPS_MAX_DEVICES][DPS_MAX_DEVICES];
} probe_reply;

static void probe_child(int fd)
{
    probe_reply r;
    memset(&r, 0, sizeof r);
    cudaError_t rc = cudaGetDeviceCount(&r.count);
    if (rc != cudaSuccess) {
        snprintf(r.why, sizeof r.why, "cudaGetDeviceCount: %s", cudaGetErrorString(rc));
        r.count = 0;
    } else if (r.count == 0) {
        snprintf(r.why, sizeof r.why, "cudaGetDeviceCount found 0 devices");
    }
    if (r.count > DPS_MAX_DEVICES) r.count = DPS_MAX_DEVICES;
    dps_cuda_versions(r.versions, sizeof r.versions);
    for (int d = 0; d < r.count; d++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, d) == cudaSuccess) {
            dps_strlcpy(r.info[d].name, p.name, sizeof r.info[d].name);
            r.info[d].total_bytes = p.totalGlobalMem;
        }
        cudaDeviceGetPCIBusId(r.info[d].bus_id, sizeof r.info[d].bus_id, d);
        for (int e = 0; e < r.count; e++) {
            int can = 0;
            if (e != d && cudaDeviceCanAccessPeer(&can, d, e) == cudaSuccess) r.peer[d][e] = can != 0;
        }
    }
    ssize_t w = write(fd, &r, sizeof r);
    _exit(w == (ssize_t)sizeof r ? 0 : 1);
}

int dps_cuda_probe(be_device_info *info, char *versions, backend *be, char *why, size_t len)
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
        probe_child(fds[1]);
    }
    close(fds[1]);
    probe_reply *r = calloc(1, sizeof *r);
    size_t got = 0;
    while (r && pid > 0 && got < sizeof *r) {
        ssize_t n = read(fds[0], (char *)r + got, sizeof *r - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fds[0]);
    int ws = 0;
    if (pid > 0) waitpid(pid, &ws, 0);
    int count = 0;
    if (!r || got != sizeof *r) {
        snprintf(why, len, "the CUDA probe process failed (%s)",
                 pid > 0 && WIFSIGNALED(ws) ? dps_signal_name(WTERMSIG(ws)) : "no reply");
    } else {
        count = r->count;
        snprintf(why, len, "%s", count ? "" : r->why);
        if (info) memcpy(info, r->info, sizeof r->info);
        if (versions) dps_strlcpy(versions, r->versions, sizeof r->versions);
        if (be) memcpy(be->peer, r->peer, sizeof r->peer);
    }
    free(r);
    return count;
}

int dps_cuda_device_count(char *why, size_t len) { return dps_cuda_probe(NULL, NULL, NULL, why, len); }

static void fmt_cuda(char *buf, size_t len, int v)
{
    if (v <= 0) snprintf(buf, len, "none");
    else snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

void dps_cuda_versions(char *buf, size_t len)
{
    int drv = 0, rt = 0, major = 0, minor = 0, patch = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cublasGetProperty(MAJOR_VERSION, &major);
    cublasGetProperty(MINOR_VERSION, &minor);
    cublasGetProperty(PATCH_LEVEL, &patch);
    char d[16], r[16], nccl[32] = "not built";
#ifdef DPS_HAVE_NCCL
    int nv = 0;
    if (ncclGetVersion(&nv) == ncclSuccess)
        snprintf(nccl, sizeof nccl, "%d.%d.%d", nv / 10000, (nv / 100) % 100, nv % 100);
#endif
    fmt_cuda(d, sizeof d, drv);
    fmt_cuda(r, sizeof r, rt);
    snprintf(buf, len, "CUDA driver %s, runtime %s, cuBLAS %d.%d.%d, NCCL %s", d, r, major,
             minor, patch, nccl);
}
