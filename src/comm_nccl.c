/* GPU collectives through NCCL (see comm.h): one rank per process, the
 * unique id made by rank 0 and handed over in the ranks' shared region.
 * Collectives run on the communicator's own stream; while one runs, the
 * caller polls ncclCommGetAsyncError and the group's abort flag, so a
 * broken communicator or a dead peer ends the wait instead of hanging. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "dps_config.h"
#include "comm.h"
#include "util.h"
#ifdef DPS_HAVE_NVTX
#include <nvtx3/nvToolsExtCudaRt.h>
#endif

#define NCCL_TRY(call)                                                            \
    do {                                                                          \
        ncclResult_t nccl_rc_ = (call);                                           \
        if (nccl_rc_ != ncclSuccess && nccl_rc_ != ncclInProgress)                \
            return dps_fail(DPS_ERR_RUNTIME, "%s:%d: %s failed: %s (%s)", __FILE__, \
                            __LINE__, #call, ncclGetErrorString(nccl_rc_),        \
                            ncclGetLastError(NULL));                              \
    } while (0)

#define CUDA_TRY(call)                                                            \
    do {                                                                          \
        cudaError_t cuda_rc_ = (call);                                            \
        if (cuda_rc_ != cudaSuccess)                                              \
            return dps_fail(DPS_ERR_RUNTIME, "%s:%d: %s failed: %s", __FILE__,     \
                            __LINE__, #call, cudaGetErrorString(cuda_rc_));       \
    } while (0)

static void nap(void)
{
    struct timespec ts = {0, 200 * 1000};
    nanosleep(&ts, NULL);
}

/* Rank 0 publishes the unique id; the others wait for it. */
static dps_status share_id(comm *c, ncclUniqueId *id, double timeout_ms)
{
    comm_shared *sh = c->sh;
    if (c->rank == 0) {
        NCCL_TRY(ncclGetUniqueId(id));
        memcpy(sh->nccl_id, id, sizeof *id);
        atomic_store(&sh->nccl_id_ready, 1);
        return DPS_OK;
    }
    double start = dps_now_ms();
    while (!atomic_load(&sh->nccl_id_ready)) {
        if (atomic_load(&sh->abort))
            return dps_fail(DPS_ERR_RUNTIME, "rank %d: aborted while waiting for rank 0's NCCL id",
                            c->rank);
        if (timeout_ms > 0 && dps_now_ms() - start > timeout_ms)
            return dps_fail(DPS_ERR_TIMEOUT, "rank %d: no NCCL id from rank 0 within %.0f ms",
                            c->rank, timeout_ms);
        nap();
    }
    memcpy(id, sh->nccl_id, sizeof *id);
    return DPS_OK;
}

dps_status comm_nccl_init(comm *c, int dev, double timeout_ms)
{
    ncclUniqueId id;
    DPS_TRY(share_id(c, &id, timeout_ms));
    CUDA_TRY(cudaSetDevice(dev));
    cudaStream_t s;
    CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    c->nccl_stream = s;
#ifdef DPS_HAVE_NVTX
    char name[32];
    snprintf(name, sizeof name, "comm-%d", dev);
    nvtxNameCudaStreamA(s, name);
#endif
    ncclComm_t nc;
    NCCL_TRY(ncclCommInitRank(&nc, c->nranks, id, c->rank));
    c->nccl = nc;
    c->wait_timeout_ms = timeout_ms;
    return DPS_OK;
}

void comm_nccl_free(comm *c)
{
    if (c->nccl) ncclCommDestroy((ncclComm_t)c->nccl);
    if (c->nccl_stream) cudaStreamDestroy((cudaStream_t)c->nccl_stream);
    c->nccl = NULL;
    c->nccl_stream = NULL;
}

/* Waits for the communicator's stream, polling for asynchronous errors. */
static dps_status wait_done(comm *c, const char *what)
{
    ncclComm_t nc = c->nccl;
    cudaStream_t s = c->nccl_stream;
    double start = dps_now_ms();
    atomic_store(&c->sh->box[c->rank].waiting, 1);
    dps_status rc = DPS_OK;
    for (;;) {
        cudaError_t q = cudaStreamQuery(s);
        if (q == cudaSuccess) break;
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(nc, &async);
        if (q != cudaErrorNotReady || (async != ncclSuccess && async != ncclInProgress) ||
            atomic_load(&c->sh->abort) ||
            (c->wait_timeout_ms > 0 && dps_now_ms() - start > c->wait_timeout_ms)) {
            rc = dps_fail(DPS_ERR_RUNTIME, "rank %d: %s did not complete: %s%s%s", c->rank, what,
                          q != cudaErrorNotReady ? cudaGetErrorString(q) : "",
                          async != ncclSuccess ? ncclGetErrorString(async) : "",
                          atomic_load(&c->sh->abort) ? "the group was aborted" : "");
            ncclCommAbort(nc);
            c->nccl = NULL;
            break;
        }
        nap();
    }
    atomic_store(&c->sh->box[c->rank].waiting, 0);
    return rc;
}

dps_status comm_nccl_allreduce(comm *c, void *buf, size_t n, comm_dtype dt)
{
    ncclDataType_t t = dt == COMM_BF16 ? ncclBfloat16 : ncclFloat32;
    NCCL_TRY(ncclAllReduce(buf, buf, n, t, ncclSum, (ncclComm_t)c->nccl,
                           (cudaStream_t)c->nccl_stream));
    size_t bytes = n * (dt == COMM_BF16 ? 2 : 4);
    c->bytes_sent += 2 * bytes * (size_t)(c->nranks - 1) / (size_t)c->nranks;
    c->bytes_received += 2 * bytes * (size_t)(c->nranks - 1) / (size_t)c->nranks;
    return wait_done(c, "ncclAllReduce");
}

dps_status comm_nccl_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    NCCL_TRY(ncclBroadcast(buf, buf, bytes, ncclChar, root, (ncclComm_t)c->nccl,
                           (cudaStream_t)c->nccl_stream));
    return wait_done(c, "ncclBroadcast");
}

struct comm_group {
    int n;
    ncclComm_t comm[DPS_MAX_DEVICES];
};

dps_status comm_group_init(comm_group **out, const int *devs, int n)
{
    comm_group *g = calloc(1, sizeof *g);
    if (!g) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for the NCCL communicator");
    g->n = n;
    ncclResult_t rc = ncclCommInitAll(g->comm, n, devs);
    if (rc != ncclSuccess) {
        free(g);
        return dps_fail(DPS_ERR_RUNTIME, "ncclCommInitAll over %d devices failed: %s (%s)", n,
                        ncclGetErrorString(rc), ncclGetLastError(NULL));
    }
    *out = g;
    return DPS_OK;
}

void comm_group_free(comm_group *g)
{
    if (!g) return;
    for (int i = 0; i < g->n; i++) ncclCommDestroy(g->comm[i]);
    free(g);
}

dps_status comm_group_broadcast(comm_group *g, void *const *bufs, size_t count,
                                void *const *streams)
{
    NCCL_TRY(ncclGroupStart());
    for (int i = 0; i < g->n; i++)
        NCCL_TRY(ncclBroadcast(bufs[i], bufs[i], count, ncclFloat32, 0, g->comm[i],
                               (cudaStream_t)streams[i]));
    NCCL_TRY(ncclGroupEnd());
    return DPS_OK;
}

dps_status comm_group_reduce(comm_group *g, void *const *bufs, size_t count,
                             void *const *streams)
{
    NCCL_TRY(ncclGroupStart());
    for (int i = 0; i < g->n; i++)
        NCCL_TRY(ncclReduce(bufs[i], bufs[i], count, ncclFloat32, ncclSum, 0, g->comm[i],
                            (cudaStream_t)streams[i]));
    NCCL_TRY(ncclGroupEnd());
    return DPS_OK;
}
