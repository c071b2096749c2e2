/* dp's collectives: one process drives every GPU through a single-process
 * NCCL clique (as ncclCommInitAll makes it), broadcasting from and reducing onto
 * the first device, each device's part on its own stream, as
 * torch.nn.parallel's replicate and reduce_add_coalesced do. Without NCCL
 * in the build, opening one fails with a message (comm_group_none.c). */
#ifndef DPS_COMM_GROUP_H
#define DPS_COMM_GROUP_H

#include <stddef.h>

#include "backend/backend.h"

typedef struct comm_group comm_group;

/* Whether this build has the group (dp then uses peer copies without it). */
int comm_group_available(void);
/* Its set-up, polled, fails beyond timeout_ms (0: no limit), the same
 * --timeout the steps' collectives and their launches are held to. */
dps_status comm_group_open(comm_group **g, const int *devs, int n, double timeout_ms)
    DPS_MUST_USE;
/* Aborts the communicators when the run failed (`run` is its status), the
 * group failed or collectives were issued since the last comm_group_sync
 * that succeeded, else destroys them. NULL is a no-op. */
void comm_group_close(comm_group *g, dps_status run);
/* count floats from device 0's buffer to every device's; streams: native handles. */
dps_status comm_group_broadcast(comm_group *g, void *const *bufs, size_t count,
                                void *const *streams) DPS_MUST_USE;
/* Sum of every device's count floats onto device 0: into root_out, or into
 * device 0's buffer when root_out is NULL. */
dps_status comm_group_reduce(comm_group *g, void *const *bufs, void *root_out, size_t count,
                             void *const *streams) DPS_MUST_USE;

/* The end of a step: the host waits until every device's stream is idle
 * (cudaStreamSynchronize, as ddp's comm_sync does), while a watchdog thread
 * polls the communicators' asynchronous errors and timeout_ms (0: none);
 * a failure aborts them, and every later call fails with the first message. */
dps_status comm_group_sync(comm_group *g, void *const *streams, double timeout_ms)
    DPS_MUST_USE;

#endif
