/* On a GPU with NCCL: dpscale's non-blocking communicators (comm/nccl_watch.h,
 * comm/comm_group.h) on device 0 alone. A set-up whose peer never comes ends
 * at the timeout, or when the group's flag rises, with its communicator
 * aborted; a launch is enqueued before the next work on its stream (a copy
 * right after an all-reduce reads its result); dp's group sets up, launches,
 * syncs and closes; and the host time of a launch, blocking against
 * non-blocking, is printed. Exit 0 pass, 1 fail, 77 without a CUDA device.
 * Usage: nccl_nonblocking */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/comm_group.h"
#include "comm/nccl_watch.h"
#include "core/util.h"

#define N_FLOATS 4096
/* The bound on a wait that only a hang reaches, far above a loaded machine's times */
#define HANG_GUARD_MS 300000.0
#define LAUNCHES 200

static int failures;

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: expected %s (%s)\n", __FILE__, __LINE__, #cond, \
                    dps_errmsg());                                          \
            failures++;                                                     \
        }                                                                   \
    } while (0)

/* Rank 0 of 2 begins its set-up; rank 1 never does (a peer that died first). */
static ncclResult_t begin_alone(ncclComm_t *comm)
{
    ncclUniqueId id;
    ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) return rc;
    ncclConfig_t cfg = nccl_watch_config();
    return ncclCommInitRankConfig(comm, 2, id, 0, &cfg);
}

/* Polled to --timeout, then aborted: the abort ends NCCL's wait for rank 1. */
static void setup_times_out(void)
{
    ncclComm_t comm = NULL;
    ncclResult_t rc = begin_alone(&comm);
    CHECK(rc == ncclInProgress || rc == ncclSuccess);
    double t0 = dps_now_ms();
    dps_status st = nccl_wait_setup(&comm, 1, NULL, 2000.0, "rank 0 (device 0)",
                                    "ncclCommInitRankConfig");
    double ms = dps_now_ms() - t0;
    printf("set-up without its peer: %s after %.0f ms: %s\n", dps_status_name(st), ms,
           dps_errmsg());
    CHECK(st == DPS_ERR_TIMEOUT && comm == NULL);
    CHECK(strstr(dps_errmsg(), "rank 0 (device 0): NCCL's set-up (ncclCommInitRankConfig) did "
                               "not complete: not done ") == dps_errmsg());
    CHECK(strstr(dps_errmsg(), "beyond --timeout (2000 ms)") != NULL);
    CHECK(ms >= 2000.0); /* not before the timeout; the abort ended the endless set-up */
}

static void *raise_later(void *flag)
{
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
    atomic_store((_Atomic int *)flag, 1);
    return NULL;
}

/* The group's flag (a peer gone, the launcher says) ends it at once. */
static void setup_aborted(void)
{
    ncclComm_t comm = NULL;
    _Atomic int flag = 0;
    pthread_t t;
    ncclResult_t rc = begin_alone(&comm);
    CHECK(rc == ncclInProgress || rc == ncclSuccess);
    double t0 = dps_now_ms(); /* before the flag's 300 ms begin */
    CHECK(pthread_create(&t, NULL, raise_later, &flag) == 0);
    dps_status st = nccl_wait_setup(&comm, 1, &flag, HANG_GUARD_MS, "rank 0 (device 0)",
                                    "ncclCommInitRankConfig");
    double ms = dps_now_ms() - t0;
    pthread_join(t, NULL);
    printf("set-up, the group aborted: %s after %.0f ms\n", dps_status_name(st), ms);
    CHECK(st == DPS_ERR_RUNTIME && comm == NULL);
    CHECK(strstr(dps_errmsg(), "the group was aborted while this process waited") != NULL);
    CHECK(ms >= 300.0); /* at the flag, not before; the endless set-up ended by it */
}

typedef struct check_bufs {
    cudaStream_t s;
    float *send, *recv, *host;
} check_bufs;

/* LAUNCHES out-of-place all-reduces of one rank (a copy): each of value k,
 * its result copied back right after the launch on the same stream, with no
 * host wait between; the mean host time of a launch (and its poll). */
static double all_reduces(ncclComm_t comm, nccl_watch *w, check_bufs *b, int *in_progress)
{
    double launch_ms = 0.0;
    size_t bytes = N_FLOATS * sizeof(float);
    for (int k = 1; k <= LAUNCHES; k++) {
        for (int i = 0; i < N_FLOATS; i++) b->host[i] = (float)k;
        CHECK(cudaMemcpyAsync(b->send, b->host, bytes, cudaMemcpyHostToDevice, b->s) == cudaSuccess);
        CHECK(cudaMemsetAsync(b->recv, 0, bytes, b->s) == cudaSuccess);
        CHECK(cudaStreamSynchronize(b->s) == cudaSuccess);
        double t0 = dps_now_ms();
        ncclResult_t rc = ncclAllReduce(b->send, b->recv, N_FLOATS, ncclFloat32, ncclSum, comm, b->s);
        if (w) {
            *in_progress += rc == ncclInProgress;
            CHECK(nccl_watch_launched(w, rc, "ncclAllReduce", __FILE__, __LINE__) == DPS_OK);
        } else {
            CHECK(rc == ncclSuccess);
        }
        launch_ms += dps_now_ms() - t0;
        CHECK(cudaMemcpyAsync(b->host, b->recv, bytes, cudaMemcpyDeviceToHost, b->s) == cudaSuccess);
        void *streams[1] = {b->s};
        if (w) CHECK(nccl_watch_sync(w, streams, 1, HANG_GUARD_MS, "the check's all-reduce") == DPS_OK);
        else CHECK(cudaStreamSynchronize(b->s) == cudaSuccess);
        if (b->host[0] != (float)k || b->host[N_FLOATS - 1] != (float)k) {
            fprintf(stderr, "all-reduce %d: read %g, %g after it (the copy ran before it?)\n", k,
                    (double)b->host[0], (double)b->host[N_FLOATS - 1]);
            failures++;
            break;
        }
    }
    return launch_ms / LAUNCHES;
}

/* ddp's way: set up, launched and polled, synced under the watch, finalized. */
static void launches(void)
{
    check_bufs b = {0};
    CHECK(cudaSetDevice(0) == cudaSuccess);
    CHECK(cudaStreamCreate(&b.s) == cudaSuccess);
    CHECK(cudaMalloc((void **)&b.send, N_FLOATS * sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&b.recv, N_FLOATS * sizeof(float)) == cudaSuccess);
    CHECK(cudaMallocHost((void **)&b.host, N_FLOATS * sizeof(float)) == cudaSuccess);
    if (failures) return;

    ncclUniqueId id;
    ncclComm_t nb = NULL, blocking = NULL;
    ncclConfig_t cfg = nccl_watch_config();
    CHECK(ncclGetUniqueId(&id) == ncclSuccess);
    ncclResult_t rc = ncclCommInitRankConfig(&nb, 1, id, 0, &cfg);
    CHECK(rc == ncclSuccess || rc == ncclInProgress);
    CHECK(nccl_wait_setup(&nb, 1, NULL, HANG_GUARD_MS, "rank 0 (device 0)", "ncclCommInitRankConfig")
          == DPS_OK);
    nccl_watch *w = NULL;
    CHECK(nccl_watch_open(&w, &nb, 1, NULL, HANG_GUARD_MS, "rank 0 (device 0)") == DPS_OK);
    if (!w) return;
    int in_progress = 0;
    double nb_ms = all_reduces(nb, w, &b, &in_progress);
    nccl_watch_close(w, 0); /* finalized and destroyed: a warning on stderr if not */
    CHECK(nb == NULL);

    CHECK(ncclGetUniqueId(&id) == ncclSuccess);
    CHECK(ncclCommInitRank(&blocking, 1, id, 0) == ncclSuccess);
    double b_ms = blocking ? all_reduces(blocking, NULL, &b, &in_progress) : 0.0;
    if (blocking) ncclCommDestroy(blocking);
    printf("launches: %d of %d returned ncclInProgress; host time a launch: non-blocking %.1f us "
           "(with its poll), blocking %.1f us\n", in_progress, LAUNCHES, nb_ms * 1e3, b_ms * 1e3);
    cudaFreeHost(b.host);
    cudaFree(b.send);
    cudaFree(b.recv);
    cudaStreamDestroy(b.s);
}

/* dp's group on one device: set up, a broadcast and a reduce, synced, closed. */
static void group(void)
{
    int devs[1] = {0};
    comm_group *g = NULL;
    float *buf = NULL, *root = NULL;
    cudaStream_t s = NULL;
    CHECK(comm_group_open(&g, devs, 1, HANG_GUARD_MS) == DPS_OK);
    if (!g) return;
    CHECK(cudaSetDevice(0) == cudaSuccess && cudaStreamCreate(&s) == cudaSuccess);
    CHECK(cudaMalloc((void **)&buf, N_FLOATS * sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&root, N_FLOATS * sizeof(float)) == cudaSuccess);
    void *bufs[1] = {buf}, *streams[1] = {s};
    CHECK(comm_group_broadcast(g, bufs, N_FLOATS, streams) == DPS_OK);
    CHECK(comm_group_reduce(g, bufs, root, N_FLOATS, streams) == DPS_OK);
    CHECK(comm_group_sync(g, streams, HANG_GUARD_MS) == DPS_OK);
    comm_group_close(g, DPS_OK);
    printf("dp's group on device 0: set up, launched, synced, closed\n");
    cudaFree(buf);
    cudaFree(root);
    cudaStreamDestroy(s);
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    setup_times_out();
    setup_aborted();
    launches();
    group();
    if (failures) fprintf(stderr, "%d expectation(s) failed\n", failures);
    return failures ? 1 : 0;
}
