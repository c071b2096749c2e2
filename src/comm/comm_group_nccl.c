/* dp's collective group through NCCL (see comm_group.h). Every call of a
 * group is issued between ncclGroupStart and ncclGroupEnd; an error inside
 * still closes the group before it is returned. The step ends as ddp's
 * does: the host blocks in cudaStreamSynchronize while nccl_watch.h's
 * thread watches the communicators. */
#include <stdlib.h>
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

dps_status comm_group_open(comm_group **out, const int *devs, int n)
{
    comm_group *g = calloc(1, sizeof *g);
    if (!g) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for the NCCL communicator");
    g->n = n;
    ncclResult_t rc = ncclCommInitAll(g->comm, n, devs);
    if (rc != ncclSuccess) {
        free(g);
        return cuda_check_nccl_fail(rc, __FILE__, __LINE__, "ncclCommInitAll");
    }
    dps_status watched = nccl_watch_open(&g->watch, g->comm, n, NULL);
    if (watched) {
        for (int i = 0; i < n; i++) ncclCommAbort(g->comm[i]);
        free(g);
        return watched;
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
    dps_status rc = nccl_watch_sync(g->watch, streams, g->n, timeout_ms, "dp",
                                    "the step, with its NCCL broadcasts and reduces,");
    if (rc) return group_abort(g, rc);
    g->unsettled = 0;
    return DPS_OK;
}

/* One collective per device, grouped; the first error is returned after
 * the group is closed. */
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
    if (cuda_check_nccl_failed(end)) return cuda_check_nccl_fail(end, __FILE__, __LINE__, "ncclGroupEnd");
    return DPS_OK;
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
