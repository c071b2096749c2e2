/* A watchdog thread beside a host that blocks in a device wait, as
 * PyTorch's ProcessGroupNCCL watchdog does: the host arms it and waits in
 * the runtime (cudaStreamSynchronize: no polling, no sleeping on the step's
 * path), the watch looks every COMM_WATCH_TICK_MS at what the collectives
 * report themselves (NCCL's asynchronous errors), the group's abort flag,
 * a second SIGINT or SIGTERM (dps_escalated) and the wait's deadline, and
 * on any of them aborts the collectives
 * (ncclCommAbort), which ends their kernels, so the host's wait returns and
 * the host learns why when it disarms. No NCCL here: nccl_watch.c binds it
 * to communicators, and tests/unit/test_comm.c drives it with a fake. */
#ifndef DPS_COMM_WATCH_H
#define DPS_COMM_WATCH_H

#include <stdatomic.h>
#include <stddef.h>

#include "core/err.h"

#define COMM_WATCH_TICK_MS 5.0

typedef struct comm_watch_ops {
    /* A failure the collectives report themselves: DPS_OK, or its code
     * with `why` filled. Called on the watch's thread while armed. */
    dps_status (*check)(void *ctx, char *why, size_t len);
    /* Ends the collectives so that the host's wait returns; called once. */
    void (*abort)(void *ctx);
} comm_watch_ops;

typedef struct comm_watch comm_watch;

/* Starts the watch's thread; abort_flag: the group's (NULL: none). */
dps_status comm_watch_start(comm_watch **out, const comm_watch_ops *ops, void *ctx,
                            _Atomic int *abort_flag) DPS_MUST_USE;
/* The host is about to wait: watched from now, for at most timeout_ms
 * (0: no limit). */
void comm_watch_arm(comm_watch *w, double timeout_ms);
/* The host's wait returned: DPS_OK, or the failure the watch saw (why
 * filled), after which it had aborted the collectives. */
dps_status comm_watch_disarm(comm_watch *w, char *why, size_t len) DPS_MUST_USE;
/* A failure the host saw itself: the collectives aborted now (once). */
void comm_watch_fail(comm_watch *w, dps_status code, const char *why);
/* Whether the collectives have been aborted. */
int comm_watch_aborted(comm_watch *w);
/* Ends the thread and frees the watch. NULL is a no-op. */
void comm_watch_stop(comm_watch *w);

#endif
