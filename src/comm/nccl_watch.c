/* NCCL communicators under a watchdog (see nccl_watch.h): the watch's
 * check is ncclCommGetAsyncError over every communicator, its abort
 * ncclCommAbort on each. */
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm_watch.h"
#include "comm/nccl_watch.h"
#include "backend/cuda_check.h"
#include "core/util.h"

struct nccl_watch {
    comm_watch *w;
    ncclComm_t *comms;
    int n;
};

/* A communicator's asynchronous error (why filled), or DPS_OK. */
static dps_status async_error(void *ctx, char *why, size_t len)
{
    nccl_watch *nw = ctx;
    for (int i = 0; i < nw->n; i++) {
        if (!nw->comms[i]) continue;
        ncclResult_t async = ncclSuccess, rc = ncclCommGetAsyncError(nw->comms[i], &async);
        if (cuda_check_nccl_failed(rc)) async = rc;
        if (!cuda_check_nccl_failed(async)) continue;
        snprintf(why, len, "NCCL reported an asynchronous error on communicator %d of %d: %s "
                 "(NCCL_DEBUG=WARN prints NCCL's own account)", i, nw->n,
                 ncclGetErrorString(async));
        return DPS_ERR_RUNTIME;
    }
    return DPS_OK;
}

/* Ends the communicators' kernels and frees them; runs on the watch's thread
 * while the host is blocked in its wait, or on the host's. */
static void abort_all(void *ctx)
{
    nccl_watch *nw = ctx;
    for (int i = 0; i < nw->n; i++) {
        if (nw->comms[i]) ncclCommAbort(nw->comms[i]);
        nw->comms[i] = NULL;
    }
}

dps_status nccl_watch_open(nccl_watch **out, ncclComm_t *comms, int n, _Atomic int *abort_flag)
{
    *out = NULL;
    nccl_watch *nw = calloc(1, sizeof *nw);
    if (!nw) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for NCCL's watchdog");
    *nw = (nccl_watch){NULL, comms, n};
    static const comm_watch_ops ops = {async_error, abort_all};
    dps_status rc = comm_watch_start(&nw->w, &ops, nw, abort_flag);
    if (rc) free(nw);
    else *out = nw;
    return rc;
}

/* cudaStreamSynchronize on each stream; the first error. */
static cudaError_t sync_all(void *const *streams, int ns)
{
    cudaError_t first = cudaSuccess;
    for (int i = 0; i < ns; i++) {
        cudaError_t e = cudaStreamSynchronize((cudaStream_t)streams[i]);
        if (first == cudaSuccess) first = e;
    }
    return first;
}

dps_status nccl_watch_sync(nccl_watch *nw, void *const *streams, int ns, double timeout_ms,
                           const char *who, const char *what)
{
    char why[DPS_ERRMSG_MAX];
    comm_watch_arm(nw->w, timeout_ms);
    cudaError_t e = sync_all(streams, ns);
    dps_status rc = comm_watch_disarm(nw->w, why, sizeof why);
    if (!rc && e != cudaSuccess) {
        cudaGetLastError(); /* later calls are not blamed for it */
        snprintf(why, sizeof why, "%s:%d: cudaStreamSynchronize failed: %s (%s)", __FILE__,
                 __LINE__, cudaGetErrorName(e), cudaGetErrorString(e));
        rc = e == cudaErrorMemoryAllocation ? DPS_ERR_OOM : DPS_ERR_RUNTIME;
        comm_watch_fail(nw->w, rc, why);
    }
    if (!rc && (rc = async_error(nw, why, sizeof why))) /* an error that hung nothing */
        comm_watch_fail(nw->w, rc, why);
    if (!rc) return DPS_OK;
    return dps_fail(rc, "%s: %s did not complete: %s; the NCCL communicator%s aborted, not "
                    "destroyed with work pending", who, what, why, nw->n > 1 ? "s were" : " was");
}

void nccl_watch_close(nccl_watch *nw, int abort)
{
    if (!nw) return;
    comm_watch_stop(nw->w);
    for (int i = 0; i < nw->n; i++) {
        if (!nw->comms[i]) continue;
        if (abort) ncclCommAbort(nw->comms[i]);
        else ncclCommDestroy(nw->comms[i]);
        nw->comms[i] = NULL;
    }
    free(nw);
}
