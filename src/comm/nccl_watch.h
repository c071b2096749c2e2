/* NCCL communicators under a watchdog (comm_watch.h): how the host waits
 * for device work that NCCL collectives are part of, the same for ddp's
 * rank (comm_nccl.c) and dp's group (comm_group_nccl.c). The host blocks
 * in cudaStreamSynchronize; the watch's thread polls
 * ncclCommGetAsyncError, the group's abort flag and --timeout, and aborts
 * the communicators (ncclCommAbort) on any of them, so a hung collective
 * ends the wait instead of the process. */
#ifndef DPS_NCCL_WATCH_H
#define DPS_NCCL_WATCH_H

#include <stdatomic.h>
#include <nccl.h>

#include "core/err.h"

typedef struct nccl_watch nccl_watch;

/* Watches comms[0..n), which the caller keeps (and calls NCCL through)
 * until a wait fails: the watch then aborts them and sets each to NULL.
 * abort_flag: the group's (NULL: none). */
dps_status nccl_watch_open(nccl_watch **out, ncclComm_t *comms, int n, _Atomic int *abort_flag)
    DPS_MUST_USE;
/* The host waits until streams[0..ns) (cudaStream_t) are idle, watched for
 * at most timeout_ms (0: no limit). A failure (an asynchronous NCCL error,
 * the group's abort, the timeout, a CUDA error of the wait) aborts the
 * communicators; its message is "<who>: <what> did not complete: <why>". */
dps_status nccl_watch_sync(nccl_watch *w, void *const *streams, int ns, double timeout_ms,
                           const char *who, const char *what) DPS_MUST_USE;
/* Ends the watch and the communicators left: aborted when `abort` (a run
 * that failed: a destroy could wait for peers that never come), else
 * destroyed. NULL is a no-op. */
void nccl_watch_close(nccl_watch *w, int abort);

#endif
