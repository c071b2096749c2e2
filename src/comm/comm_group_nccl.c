/* dp's collective group through NCCL (see comm_group.h). Every call of a
 * group is issued between ncclGroupStart and ncclGroupEnd; an error inside
 * still closes the group before it is returned. The communicators are
 * non-blocking (nccl_watch.h): their set-up and each group's launch are
 * polled within --timeout. The step ends as ddp's does: the host blocks in
 * cudaStreamSynchronize while nccl_watch.h's thread watches the
 * communicators. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nccl.h>

#include "comm/comm_group.h"
#include "comm/nccl_watch.h"
#include "backend/cuda_check.h"
#include "core/util.h"

struct comm_group {
    int n;
    ncclComm_t comm[DPS_MAX_DEVICES];  /* NULL once the watch has aborted them */
    nccl_watch *watch;
    int unsettled;                     /* collectives issued since the last good sync */
    dps_status failed;                 /* after an abort: every call returns it */
    char failed_msg[DPS_ERRMSG_MAX];
};

int comm_group_available(void) { return 1; }

/* What ncclCommInitAll does, non-blocking: one unique id, one
 * ncclCommInitRankConfig a device inside one group, then the host polls
 * the set-up within timeout_ms; who names the group in messages. The
 * calling thread's device is kept. */
static dps_status init_all(comm_group *g, const int *devs, double timeout_ms, const char *who)
{
    ncclUniqueId id;
    NCCL_TRY(ncclGetUniqueId(&id));
    int dev0 = 0;
    CUDA_TRY(cudaGetDevice(&dev0));
    ncclConfig_t cfg = nccl_watch_config();
    cudaError_t set = cudaSuccess;
    ncclResult_t rc = ncclSuccess;
    NCCL_TRY(ncclGroupStart());
    for (int i = 0; i < g->n && set == cudaSuccess && !cuda_check_nccl_failed(rc); i++) {
        set = cudaSetDevice(devs[i]);
        if (set == cudaSuccess) rc = ncclCommInitRankConfig(&g->comm[i], g->n, id, i, &cfg);
    }
    ncclResult_t end = ncclGroupEnd(); /* even after a failure: the group is closed */
    cudaSetDevice(dev0);
    if (set != cudaSuccess) return cuda_check_fail(set, __FILE__, __LINE__, "cudaSetDevice");
    if (cuda_check_nccl_failed(rc))
        return cuda_check_nccl_fail(rc, __FILE__, __LINE__, "ncclCommInitRankConfig");
    if (cuda_check_nccl_failed(end)) return cuda_check_nccl_fail(end, __FILE__, __LINE__, "ncclGroupEnd");
    return nccl_wait_setup(g->comm, g->n, NULL, timeout_ms, who,
                           "ncclCommInitRankConfig, one a device, in a group");
}

dps_status comm_group_open(comm_group **out, const int *devs, int n, double timeout_ms)
{
    *out = NULL;
    comm_group *g = calloc(1, sizeof *g);
    if (!g) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for the NCCL communicator");
    g->n = n;
    char who[NCCL_WATCH_WHO_MAX] = "dp (devices ";
    for (int i = 0; i < n; i++) {
        size_t at = strlen(who);
        snprintf(who + at, sizeof who - at, "%d%s", devs[i], i + 1 < n ? "," : ")");
    }
    dps_status rc = init_all(g, devs, timeout_ms, who);
    if (!rc) rc = nccl_watch_open(&g->watch, g->comm, n, NULL, timeout_ms, who);
    if (rc) {
        for (int i = 0; i < n; i++)
            if (g->comm[i]) ncclCommAbort(g->comm[i]);
        free(g);
        return rc;
    }
    *out = g;
    return DPS_OK;
}

/* A group that failed, or that a run left with collectives not seen done
 * (it failed elsewhere mid-step), is aborted: a destroy would wait for
 * their work. */
void comm_group_close(comm_group *g, dps_status run)
{
    if (!g) return;
    nccl_watch_close(g->watch, run != DPS_OK || g->failed != DPS_OK || g->unsettled);
    free(g);
}

/* The group's failure (the watch has aborted the communicators), kept for
 * every later call. */
static dps_status group_abort(comm_group *g, dps_status rc)
{
    g->failed = rc;
    dps_strlcpy(g->failed_msg, dps_errmsg(), sizeof g->failed_msg);
    return rc;
}

dps_status comm_group_sync(comm_group *g, void *const *streams, double timeout_ms)
{
    if (g->failed) return dps_fail_copy(g->failed, g->failed_msg);
    dps_status rc = nccl_watch_sync(g->watch, streams, g->n, timeout_ms,
                                    "the step, with its NCCL broadcasts and reduces,");
    if (rc) return group_abort(g, rc);
    g->unsettled = 0;
    return DPS_OK;
}

/* One collective per device, grouped; the first error is returned after
 * the group is closed, and the group's launch is waited for (polled) before
 * the streams are used again. */
static dps_status grouped(comm_group *g, int reduce, void *const *bufs, void *root_out,
                          size_t count, void *const *streams)
{
    if (g->failed) return dps_fail_copy(g->failed, g->failed_msg);
    g->unsettled = 1;
    ncclResult_t first = ncclGroupStart();
    if (cuda_check_nccl_failed(first)) return cuda_check_nccl_fail(first, __FILE__, __LINE__, "ncclGroupStart");
    for (int i = 0; i < g->n && !cuda_check_nccl_failed(first); i++)
        first = reduce ? ncclReduce(bufs[i], i == 0 && root_out ? root_out : bufs[i], count,
                                    ncclFloat32, ncclSum, 0, g->comm[i], (cudaStream_t)streams[i])
                       : ncclBroadcast(bufs[i], bufs[i], count, ncclFloat32, 0, g->comm[i],
                                       (cudaStream_t)streams[i]);
    ncclResult_t end = ncclGroupEnd();
    if (cuda_check_nccl_failed(first))
        return cuda_check_nccl_fail(first, __FILE__, __LINE__, reduce ? "ncclReduce" : "ncclBroadcast");
    dps_status launched = nccl_watch_launched(g->watch, end, "ncclGroupEnd", __FILE__, __LINE__);
    return launched ? group_abort(g, launched) : DPS_OK;
}

dps_status comm_group_broadcast(comm_group *g, void *const *bufs, size_t count,
                                void *const *streams)
{
    return grouped(g, 0, bufs, NULL, count, streams);
}

dps_status comm_group_reduce(comm_group *g, void *const *bufs, void *root_out, size_t count,
                             void *const *streams)
{
    return grouped(g, 1, bufs, root_out, count, streams);
}
