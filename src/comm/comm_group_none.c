/* dp's collective group in a build without NCCL (see comm_group.h): there
 * is none, and asking for one says so. */
#include "comm/comm_group.h"

int comm_group_available(void) { return 0; }

dps_status comm_group_open(comm_group **g, const int *devs, int n, double timeout_ms)
{
    (void)devs, (void)timeout_ms;
    *g = NULL;
    return dps_fail(DPS_ERR_RUNTIME, "dp over %d GPUs through NCCL: this dpscale was built without "
                    "NCCL; rebuild with -Dnccl=enabled, or use --dp-comm p2p", n);
}

void comm_group_close(comm_group *g, dps_status run) { (void)g, (void)run; }

dps_status comm_group_broadcast(comm_group *g, void *const *bufs, size_t count,
                                void *const *streams)
{
    (void)g, (void)bufs, (void)count, (void)streams;
    return dps_fail(DPS_ERR_RUNTIME, "dp: NCCL is not built in");
}

dps_status comm_group_reduce(comm_group *g, void *const *bufs, void *root_out, size_t count,
                             void *const *streams)
{
    (void)g, (void)bufs, (void)root_out, (void)count, (void)streams;
    return dps_fail(DPS_ERR_RUNTIME, "dp: NCCL is not built in");
}

dps_status comm_group_sync(comm_group *g, void *const *streams, double timeout_ms)
{
    (void)g, (void)streams, (void)timeout_ms;
    return dps_fail(DPS_ERR_RUNTIME, "dp: NCCL is not built in");
}
