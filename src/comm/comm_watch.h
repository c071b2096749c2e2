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

/* Work the host polls itself instead of blocking in the runtime, as
 * ProcessGroupNCCL waits for a non-blocking communicator: NCCL's set-up
 * (ncclCommInitRankConfig), a launch NCCL has not finished enqueuing
 * (ncclInProgress), a finalize (nccl_watch.c). The same reasons end it as
 * a watched wait: its own failure, the group's abort flag, a second SIGINT
 * or SIGTERM, and the timeout, counted from the call. */
typedef enum comm_poll_state { COMM_POLL_DONE, COMM_POLL_BUSY, COMM_POLL_FAILED } comm_poll_state;

typedef struct comm_poll_ops {
    /* Whether the work is done, still running, or failed (why filled). */
    comm_poll_state (*poll)(void *ctx, char *why, size_t len);
    /* Ends the work after a failure (code and why: the failure's); once. */
    void (*abort)(void *ctx, dps_status code, const char *why);
    /* The clock (ms) and the pause between two polls; NULL: the monotonic
     * clock and a sleep (sched_yield for 0 ms). Tests pass fakes. */
    double (*now_ms)(void *ctx);
    void (*sleep_ms)(void *ctx, double ms);
} comm_poll_ops;

typedef struct comm_poll_spec {
    _Atomic int *abort_flag;  /* the group's (NULL: none) */
    double timeout_ms;        /* 0: no limit */
    const char *who;          /* where: "rank 1 (device 1)" */
    const char *what;         /* "NCCL's set-up (ncclCommInitRankConfig)" */
    const char *aborted;      /* what the abort did: "the NCCL communicator was aborted" */
} comm_poll_spec;

/* The pause before the next poll, `waited_ms` into the wait: none (a yield)
 * for the first 0.1 ms, as a launch takes tens of microseconds, then a
 * quarter of the time waited (the wait overshoots by at most that), at
 * most COMM_WATCH_TICK_MS. */
double comm_poll_pause_ms(double waited_ms);
/* Polls until the work is done: DPS_OK; or, aborted, the failure, with the
 * message "<who>: <what> did not complete: <why>; <aborted>" (a timeout's
 * why as a watched wait's, DPS_ERR_TIMEOUT). */
dps_status comm_poll_wait(const comm_poll_ops *ops, void *ctx, const comm_poll_spec *spec)
    DPS_MUST_USE;

#endif
