/* NCCL communicators under a watchdog (see nccl_watch.h): the watch's
 * check is ncclCommGetAsyncError over every communicator, its abort
 * ncclCommAbort on each; the host's polls (comm_poll_wait) read the same
 * state, in which ncclInProgress is work NCCL has not finished. */
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm_watch.h"
#include "comm/nccl_watch.h"
#include "backend/cuda_check.h"
#include "core/util.h"

struct nccl_watch {
    comm_watch *w;
    ncclComm_t *comms;
    int n;
    _Atomic int *abort_flag;
    double timeout_ms;
    char who[NCCL_WATCH_WHO_MAX];
};

ncclConfig_t nccl_watch_config(void)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    return cfg;
}

/* NCCL's failure `rc` on communicator i of n, in words (why filled), with
 * NCCL's last error message. */
static void describe(ncclComm_t comm, ncclResult_t rc, int i, int n, char *why, size_t len)
{
    const char *last = ncclGetLastError(comm);
    snprintf(why, len, "NCCL reported an error on communicator %d of %d: %s%s%s%s "
             "(NCCL_DEBUG=WARN prints NCCL's own account)", i, n, ncclGetErrorString(rc),
             last && *last ? " (" : "", last && *last ? last : "", last && *last ? ")" : "");
}

/* A communicator's state: ncclSuccess, ncclInProgress or its failure. */
static ncclResult_t state_of(ncclComm_t comm)
{
    ncclResult_t state = ncclSuccess, rc = ncclCommGetAsyncError(comm, &state);
    return rc != ncclSuccess ? rc : state;
}

/* The communicators, the host's poll (comm_poll_ops) and how it aborts
 * them: through the watch when there is one, so that it knows. */
typedef struct comm_set {
    ncclComm_t *comms;
    int n;
    comm_watch *w;
} comm_set;

static comm_poll_state poll_set(void *ctx, char *why, size_t len)
{
    comm_set *s = ctx;
    comm_poll_state st = COMM_POLL_DONE;
    for (int i = 0; i < s->n; i++) {
        if (!s->comms[i]) continue;
        ncclResult_t rc = state_of(s->comms[i]);
        if (rc == ncclInProgress) st = COMM_POLL_BUSY;
        else if (rc != ncclSuccess) {
            describe(s->comms[i], rc, i, s->n, why, len);
            return COMM_POLL_FAILED;
        }
    }
    return st;
}

static void abort_each(ncclComm_t *comms, int n)
{
    for (int i = 0; i < n; i++) {
        if (comms[i]) ncclCommAbort(comms[i]);
        comms[i] = NULL;
    }
}

static void abort_set(void *ctx, dps_status code, const char *why)
{
    comm_set *s = ctx;
    if (s->w) comm_watch_fail(s->w, code, why); /* aborts them, once */
    else abort_each(s->comms, s->n);
}

static const comm_poll_ops set_ops = {poll_set, abort_set, NULL, NULL};

static const char *aborted_text(int n)
{
    return n > 1 ? "the NCCL communicators were aborted" : "the NCCL communicator was aborted";
}

dps_status nccl_wait_setup(ncclComm_t *comms, int n, _Atomic int *abort_flag, double timeout_ms,
                           const char *who, const char *call)
{
    char what[96];
    snprintf(what, sizeof what, "NCCL's set-up (%s)", call);
    comm_set s = {comms, n, NULL};
    comm_poll_spec spec = {abort_flag, timeout_ms, who, what, aborted_text(n)};
    return comm_poll_wait(&set_ops, &s, &spec);
}

/* A communicator's asynchronous error (why filled), or DPS_OK. */
static dps_status async_error(void *ctx, char *why, size_t len)
{
    nccl_watch *nw = ctx;
    for (int i = 0; i < nw->n; i++) {
        if (!nw->comms[i]) continue;
        ncclResult_t rc = state_of(nw->comms[i]);
        if (!cuda_check_nccl_failed(rc)) continue;
        describe(nw->comms[i], rc, i, nw->n, why, len);
        return DPS_ERR_RUNTIME;
    }
    return DPS_OK;
}

/* Ends the communicators' kernels and frees them; runs on the watch's thread
 * while the host is blocked in its wait, or on the host's. */
static void abort_all(void *ctx)
{
    nccl_watch *nw = ctx;
    abort_each(nw->comms, nw->n);
}

dps_status nccl_watch_open(nccl_watch **out, ncclComm_t *comms, int n, _Atomic int *abort_flag,
                           double timeout_ms, const char *who)
{
    *out = NULL;
    nccl_watch *nw = calloc(1, sizeof *nw);
    if (!nw) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for NCCL's watchdog");
    *nw = (nccl_watch){NULL, comms, n, abort_flag, timeout_ms, ""};
    dps_strlcpy(nw->who, who, sizeof nw->who);
    static const comm_watch_ops ops = {async_error, abort_all};
    dps_status rc = comm_watch_start(&nw->w, &ops, nw, abort_flag);
    if (rc) free(nw);
    else *out = nw;
    return rc;
}

dps_status nccl_watch_launched(nccl_watch *nw, ncclResult_t rc, const char *call, const char *file,
                               int line)
{
    if (cuda_check_nccl_failed(rc)) return cuda_check_nccl_fail(rc, file, line, call);
    if (rc != ncclInProgress) return DPS_OK;
    char what[96];
    snprintf(what, sizeof what, "the launch of %s", call);
    comm_set s = {nw->comms, nw->n, nw->w};
    comm_poll_spec spec = {nw->abort_flag, nw->timeout_ms, nw->who, what, aborted_text(nw->n)};
    return comm_poll_wait(&set_ops, &s, &spec);
}

/* cudaStreamSynchronize on each stream; the first error. */
static cudaError_t sync_all(void *const *streams, int ns)
{
    cudaError_t first = cudaSuccess;
    for (int i = 0; i < ns; i++) {
        cudaError_t e = cudaStreamSynchronize((cudaStream_t)streams[i]);
        if (first == cudaSuccess) first = e;
    }
    return first;
}

dps_status nccl_watch_sync(nccl_watch *nw, void *const *streams, int ns, double timeout_ms,
                           const char *what)
{
    char why[DPS_ERRMSG_MAX];
    comm_watch_arm(nw->w, timeout_ms);
    cudaError_t e = sync_all(streams, ns);
    dps_status rc = comm_watch_disarm(nw->w, why, sizeof why);
    if (!rc && e != cudaSuccess) {
        cudaGetLastError(); /* later calls are not blamed for it */
        snprintf(why, sizeof why, "%s:%d: cudaStreamSynchronize failed: %s (%s)", __FILE__,
                 __LINE__, cudaGetErrorName(e), cudaGetErrorString(e));
        rc = e == cudaErrorMemoryAllocation ? DPS_ERR_OOM : DPS_ERR_RUNTIME;
        comm_watch_fail(nw->w, rc, why);
    }
    if (!rc && (rc = async_error(nw, why, sizeof why))) /* an error that hung nothing */
        comm_watch_fail(nw->w, rc, why);
    if (!rc) return DPS_OK;
    return dps_fail(rc, "%s: %s did not complete: %s; the NCCL communicator%s aborted, not "
                    "destroyed with work pending", nw->who, what, why, nw->n > 1 ? "s were" : " was");
}

/* An ok run's communicators flushed (ncclCommFinalize on each, polled within
 * the timeout), ready for ncclCommDestroy; on a failure, aborted (NULL). */
static dps_status finalize_all(nccl_watch *nw)
{
    for (int i = 0; i < nw->n; i++) {
        ncclResult_t rc = nw->comms[i] ? ncclCommFinalize(nw->comms[i]) : ncclSuccess;
        if (!cuda_check_nccl_failed(rc)) continue;
        abort_each(nw->comms, nw->n);
        return cuda_check_nccl_fail(rc, __FILE__, __LINE__, "ncclCommFinalize");
    }
    comm_set s = {nw->comms, nw->n, NULL};
    comm_poll_spec spec = {nw->abort_flag, nw->timeout_ms, nw->who,
                           "NCCL's finalize (ncclCommFinalize)", aborted_text(nw->n)};
    return comm_poll_wait(&set_ops, &s, &spec);
}

void nccl_watch_close(nccl_watch *nw, int abort)
{
    if (!nw) return;
    comm_watch_stop(nw->w);
    if (abort) abort_each(nw->comms, nw->n);
    else if (finalize_all(nw)) dps_warn("%s", dps_errmsg());
    for (int i = 0; i < nw->n; i++) {
        if (nw->comms[i]) ncclCommDestroy(nw->comms[i]);
        nw->comms[i] = NULL;
    }
    free(nw);
}
