/* dp's collective group through NCCL (see comm_group.h). Every call of a
 * group is issued between ncclGroupStart and ncclGroupEnd; an error inside
 * still closes the group before it is returned. */
#include <stdlib.h>
#include <nccl.h>

#include "comm_group.h"
#include "cuda_check.h"

struct comm_group {
    int n;
    ncclComm_t comm[DPS_MAX_DEVICES];
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
        return dps_nccl_fail(rc, __FILE__, __LINE__, "ncclCommInitAll");
    }
    *out = g;
    return DPS_OK;
}

void comm_group_close(comm_group *g)
{
    if (!g) return;
    for (int i = 0; i < g->n; i++) ncclCommDestroy(g->comm[i]);
    free(g);
}

/* One collective per device, grouped; the first error is returned after
 * the group is closed. */
static dps_status grouped(comm_group *g, int reduce, void *const *bufs, size_t count,
                          void *const *streams)
{
    ncclResult_t first = ncclGroupStart();
    if (dps_nccl_failed(first)) return dps_nccl_fail(first, __FILE__, __LINE__, "ncclGroupStart");
    for (int i = 0; i < g->n && !dps_nccl_failed(first); i++)
        first = reduce ? ncclReduce(bufs[i], bufs[i], count, ncclFloat32, ncclSum, 0, g->comm[i],
                                    (cudaStream_t)streams[i])
                       : ncclBroadcast(bufs[i], bufs[i], count, ncclFloat32, 0, g->comm[i],
                                       (cudaStream_t)streams[i]);
    ncclResult_t end = ncclGroupEnd();
    if (dps_nccl_failed(first))
        return dps_nccl_fail(first, __FILE__, __LINE__, reduce ? "ncclReduce" : "ncclBroadcast");
    if (dps_nccl_failed(end)) return dps_nccl_fail(end, __FILE__, __LINE__, "ncclGroupEnd");
    return DPS_OK;
}

dps_status comm_group_broadcast(comm_group *g, void *const *bufs, size_t count,
                                void *const *streams)
{
    return grouped(g, 0, bufs, count, streams);
}

dps_status comm_group_reduce(comm_group *g, void *const *bufs, size_t count, void *const *streams)
{
    return grouped(g, 1, bufs, count, streams);
}
