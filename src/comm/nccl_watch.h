/* NCCL communicators under a watchdog (comm_watch.h): how the host waits
 * for NCCL, the same for ddp's rank (comm_nccl.c) and dp's group
 * (comm_group_nccl.c). Every communicator is non-blocking
 * (nccl_watch_config), so nothing NCCL does on the host blocks without a
 * bound: its set-up, a launch and a finalize return at once
 * (ncclInProgress) and the host polls ncclCommGetAsyncError until they are
 * done (comm_poll_wait), within --timeout and until the group's abort flag
 * rises. The step's device work is waited for in cudaStreamSynchronize,
 * while the watch's thread polls ncclCommGetAsyncError, the group's abort
 * flag and --timeout. Either aborts the communicators (ncclCommAbort) on a
 * failure, so a hung set-up or collective ends the wait instead of the
 * process. */
#ifndef DPS_NCCL_WATCH_H
#define DPS_NCCL_WATCH_H

#include <stdatomic.h>
#include <nccl.h>

#include "core/err.h"

typedef struct nccl_watch nccl_watch;

/* The longest name of where the communicators are, for messages. */
#define NCCL_WATCH_WHO_MAX 256

/* The configuration of every communicator: NCCL_CONFIG_INITIALIZER's,
 * non-blocking (config.blocking = 0). */
ncclConfig_t nccl_watch_config(void);
/* Waits until comms[0..n), just begun by ncclCommInitRankConfig with
 * nccl_watch_config's (several in one group), are set up, for at most
 * timeout_ms (0: no limit) and until abort_flag (the group's; NULL: none)
 * rises. A failure aborts them (each set to NULL) and says
 * "<who>: NCCL's set-up (<call>) did not complete: <why>; ...". */
dps_status nccl_wait_setup(ncclComm_t *comms, int n, _Atomic int *abort_flag, double timeout_ms,
                           const char *who, const char *call) DPS_MUST_USE;

/* Watches comms[0..n), set up, which the caller keeps (and calls NCCL
 * through) until a wait fails: the watch then aborts them and sets each to
 * NULL. abort_flag: the group's (NULL: none); timeout_ms: what a launch or
 * the finalize may take (0: no limit); who: what messages name ("rank 1
 * (device 1)", "dp"), copied. */
dps_status nccl_watch_open(nccl_watch **out, ncclComm_t *comms, int n, _Atomic int *abort_flag,
                           double timeout_ms, const char *who) DPS_MUST_USE;
/* What a launch (a collective, a group's end) on the communicators
 * returned: a failure names file:line and the call; ncclInProgress (NCCL
 * enqueues on a thread of its own) is polled until the launch is enqueued,
 * before anything else uses the communicators or their streams. A failure
 * of that wait aborts the communicators. */
dps_status nccl_watch_launched(nccl_watch *w, ncclResult_t rc, const char *call, const char *file,
                               int line) DPS_MUST_USE;
#define NCCL_LAUNCH(w, call) DPS_TRY(nccl_watch_launched((w), (call), #call, __FILE__, __LINE__))
/* The host waits until streams[0..ns) (cudaStream_t) are idle, watched for
 * at most timeout_ms (0: no limit). A failure (an asynchronous NCCL error,
 * the group's abort, the timeout, a CUDA error of the wait) aborts the
 * communicators; its message is "<who>: <what> did not complete: <why>". */
dps_status nccl_watch_sync(nccl_watch *w, void *const *streams, int ns, double timeout_ms,
                           const char *what) DPS_MUST_USE;
/* Ends the watch and the communicators left: aborted when `abort` (a run
 * that failed: a destroy could wait for peers that never come), else
 * finalized (ncclCommFinalize, polled within the timeout; aborted, with a
 * warning, if it fails) and destroyed. NULL is a no-op. */
void nccl_watch_close(nccl_watch *w, int abort);

#endif
