/* NCCL on GPUs (see comm_impl.h): one rank per process, the unique id made
 * by rank 0 and handed over in the group's region. Collectives run on the
 * communicator's own stream. The async all-reduce is stream-ordered, as
 * PyTorch's reducer does it: the stream waits for the gradients' event on
 * the device, the all-reduce is enqueued between two timing events, and the
 * host returns at once; comm_wait_async makes the caller's stream wait on
 * the device for the last one's end event (WorkNCCL::synchronizeStream), so
 * the host never blocks before the optimizer. The host waits once, at the
 * end of the step (comm_sync), in cudaStreamSynchronize under a watchdog
 * (nccl_watch.h) that polls ncclCommGetAsyncError, the group's abort flag
 * and the timeout from its own thread and aborts the communicator on any of
 * them, so a broken communicator or a dead peer ends the wait. The
 * communicator is non-blocking: its set-up and each launch return at once
 * and are polled until done (nccl_watch_launched), within --timeout and
 * until the group's abort flag rises, before the stream is used again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nccl.h>

#include "build_config.h"
#include "comm/comm_impl.h"
#include "comm/nccl_watch.h"
#include "comm/store.h"
#include "backend/cuda_check.h"
#include "core/util.h"

_Static_assert(sizeof(ncclUniqueId) <= COMM_ID_BYTES, "ncclUniqueId must fit the region's id slot");

typedef struct nccl_rank {
    ncclComm_t comm;            /* NULL once the watch has aborted it */
    nccl_watch *watch;
    be_stream *stream;          /* the communicator's stream */
    be_event **start, **end;    /* [cap]: timing events of the async collectives */
    size_t *bytes;              /* [cap]: their sizes, for the trace */
    comm_op *op;                /* [cap]: which collective each was */
    int pending, cap;           /* async collectives since the last comm_sync */
} nccl_rank;

static nccl_rank *nccl_of(comm *c) { return c->impl; }
static cudaStream_t native(comm *c) { return c->be->ops->native_stream(c->be, nccl_of(c)->stream); }
static ncclDataType_t nccl_type(comm_dtype dt) { return dt == COMM_BF16 ? ncclBfloat16 : ncclFloat32; }

/* An all-reduce of `bytes` in nccl-tests' bus bytes: 2 (n - 1) / n of it
 * each way, a bandwidth-optimal ring's traffic, from which busbw is
 * defined. NCCL may pick another algorithm (tree, NVLS: the switch reduces)
 * that moves more or less; which, only NCCL knows: NVML's counters are what
 * the links carried. */
static void count_allreduce(comm *c, size_t bytes)
{
    uint64_t moved = 2 * (uint64_t)bytes * (uint64_t)(c->nranks - 1) / (uint64_t)c->nranks;
    c->bytes_sent += moved;
    c->bytes_received += moved;
}

/* The host waits until the communicator's stream and `also` (NULL: none)
 * are idle, watched (nccl_watch.h); marked as waiting in a collective, for
 * the launcher's timeout message, unless `what` has none (a step of one rank). */
static dps_status watched_sync(comm *c, be_stream *also, const char *what, int collective)
{
    void *streams[2];
    int ns = 0;
    if (also) streams[ns++] = c->be->ops->native_stream(c->be, also);
    streams[ns++] = native(c);
    comm_shared_waiting(c->sh, c->rank, collective);
    dps_status rc = nccl_watch_sync(nccl_of(c)->watch, streams, ns, c->timeout_ms, what);
    comm_shared_waiting(c->sh, c->rank, 0);
    return rc;
}

static dps_status nccl_allreduce_enqueue(comm *c, void *buf, size_t n, comm_dtype dt)
{
    nccl_rank *nr = nccl_of(c);
    NCCL_LAUNCH(nr->watch, ncclAllReduce(buf, buf, n, nccl_type(dt), ncclSum, nr->comm, native(c)));
    count_allreduce(c, n * comm_dtype_bytes(dt));
    return DPS_OK;
}

/* A reduce-scatter's or all-gather's `bytes` (the whole buffer) in
 * nccl-tests' bus bytes: (n - 1) / n of it each way, as a ring moves it. */
static void count_sharded(comm *c, size_t bytes)
{
    uint64_t moved = (uint64_t)bytes * (uint64_t)(c->nranks - 1) / (uint64_t)c->nranks;
    c->bytes_sent += moved;
    c->bytes_received += moved;
}

/* Uneven chunks (n not a multiple of the ranks, which ncclReduceScatter and
 * ncclAllGather need): one collective per chunk, fused by a group,
 * ncclReduce to the chunk's owner or ncclBroadcast from it, each in place.
 * The group is ended even after a failed call; the first failure is returned. */
static dps_status nccl_by_chunk(comm *c, comm_op op, char *buf, size_t n, comm_dtype dt)
{
    nccl_rank *nr = nccl_of(c);
    size_t es = comm_dtype_bytes(dt), b, e;
    ncclResult_t rc = ncclSuccess;
    NCCL_TRY(ncclGroupStart());
    for (int r = 0; !cuda_check_nccl_failed(rc) && r < c->nranks; r++) {
        comm_chunk_range(n, c->nranks, r, &b, &e);
        char *p = buf + b * es;
        if (e > b && op == COMM_REDUCE_SCATTER)
            rc = ncclReduce(p, p, e - b, nccl_type(dt), ncclSum, r, nr->comm, native(c));
        else if (e > b)
            rc = ncclBroadcast(p, p, e - b, nccl_type(dt), r, nr->comm, native(c));
    }
    ncclResult_t end = ncclGroupEnd();
    if (cuda_check_nccl_failed(rc))
        return cuda_check_nccl_fail(rc, __FILE__, __LINE__,
                                    op == COMM_REDUCE_SCATTER ? "ncclReduce" : "ncclBroadcast");
    return nccl_watch_launched(nr->watch, end, "ncclGroupEnd", __FILE__, __LINE__);
}

/* Reduce-scatter in place over comm_chunk_range's chunks: rank r's chunk
 * gets the sum of every rank's chunk r (ncclReduceScatter's in-place form,
 * recvbuff = sendbuff + the chunk's offset, when the chunks are equal). */
static dps_status nccl_reduce_scatter_enqueue(comm *c, void *buf, size_t n, comm_dtype dt)
{
    nccl_rank *nr = nccl_of(c);
    size_t es = comm_dtype_bytes(dt), b, e;
    comm_chunk_range(n, c->nranks, c->rank, &b, &e);
    if (n % (size_t)c->nranks) DPS_TRY(nccl_by_chunk(c, COMM_REDUCE_SCATTER, buf, n, dt));
    else NCCL_LAUNCH(nr->watch, ncclReduceScatter(buf, (char *)buf + b * es, e - b, nccl_type(dt),
                                                  ncclSum, nr->comm, native(c)));
    count_sharded(c, n * es);
    return DPS_OK;
}

/* All-gather in place: every rank's chunk r into every buffer
 * (ncclAllGather's in-place form, sendbuff = recvbuff + the chunk's offset). */
static dps_status nccl_all_gather_enqueue(comm *c, void *buf, size_t n, comm_dtype dt)
{
    nccl_rank *nr = nccl_of(c);
    size_t es = comm_dtype_bytes(dt), b, e;
    comm_chunk_range(n, c->nranks, c->rank, &b, &e);
    if (n % (size_t)c->nranks) DPS_TRY(nccl_by_chunk(c, COMM_ALL_GATHER, buf, n, dt));
    else NCCL_LAUNCH(nr->watch, ncclAllGather((char *)buf + b * es, buf, e - b, nccl_type(dt),
                                              nr->comm, native(c)));
    count_sharded(c, n * es);
    return DPS_OK;
}

typedef dps_status (*nccl_enqueue_fn)(comm *c, void *buf, size_t n, comm_dtype dt);

/* What enqueues op on the communicator's stream, and what a wait names. */
static nccl_enqueue_fn enqueue_of(comm_op op, const char **call)
{
    *call = op == COMM_REDUCE_SCATTER ? "ncclReduceScatter"
          : op == COMM_ALL_GATHER ? "ncclAllGather" : "ncclAllReduce";
    return op == COMM_REDUCE_SCATTER ? nccl_reduce_scatter_enqueue
         : op == COMM_ALL_GATHER ? nccl_all_gather_enqueue : nccl_allreduce_enqueue;
}

/* A blocking collective: enqueued, then the host waits, watched. */
static dps_status nccl_blocking(comm *c, comm_op op, void *buf, size_t n, comm_dtype dt)
{
    const char *call;
    DPS_TRY(enqueue_of(op, &call)(c, buf, n, dt));
    return watched_sync(c, NULL, call, 1);
}

static dps_status nccl_allreduce(comm *c, void *buf, size_t n, comm_dtype dt)
{
    return nccl_blocking(c, COMM_ALLREDUCE, buf, n, dt);
}

static dps_status nccl_reduce_scatter(comm *c, void *buf, size_t n, comm_dtype dt)
{
    return nccl_blocking(c, COMM_REDUCE_SCATTER, buf, n, dt);
}

static dps_status nccl_all_gather(comm *c, void *buf, size_t n, comm_dtype dt)
{
    return nccl_blocking(c, COMM_ALL_GATHER, buf, n, dt);
}

static dps_status nccl_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    nccl_rank *nr = nccl_of(c);
    NCCL_LAUNCH(nr->watch, ncclBroadcast(buf, buf, bytes, ncclChar, root, nr->comm, native(c)));
    return watched_sync(c, NULL, "ncclBroadcast", 1);
}

static dps_status nccl_barrier(comm *c)
{
    float *one = NULL;
    CUDA_TRY(cudaMalloc((void **)&one, sizeof *one));
    dps_status rc = nccl_allreduce(c, one, 1, COMM_F32);
    cudaFree(one);
    return rc;
}

/* Timing events for the k-th async collective of a step, made once. */
static dps_status timing_events(comm *c, int k)
{
    nccl_rank *nr = nccl_of(c);
    if (k < nr->cap) return DPS_OK;
    int cap = nr->cap ? 2 * nr->cap : 64;
    be_event **s = realloc(nr->start, (size_t)cap * sizeof *s);
    if (s) nr->start = s;
    be_event **e = realloc(nr->end, (size_t)cap * sizeof *e);
    if (e) nr->end = e;
    size_t *b = realloc(nr->bytes, (size_t)cap * sizeof *b);
    if (b) nr->bytes = b;
    comm_op *op = realloc(nr->op, (size_t)cap * sizeof *op);
    if (op) nr->op = op;
    if (!s || !e || !b || !op) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory for events", c->rank);
    for (; nr->cap < cap; nr->cap++) {
        nr->start[nr->cap] = nr->end[nr->cap] = NULL;
        DPS_TRY(c->be->ops->event_create(c->be, c->dev, &nr->start[nr->cap]));
        DPS_TRY(c->be->ops->event_create(c->be, c->dev, &nr->end[nr->cap]));
    }
    return DPS_OK;
}

static dps_status nccl_collective_async(comm *c, comm_op op, void *buf, size_t n, comm_dtype dt,
                                       be_event *after)
{
    nccl_rank *nr = nccl_of(c);
    const be_ops *o = c->be->ops;
    const char *call;
    int k = nr->pending;
    DPS_TRY(timing_events(c, k));
    DPS_TRY(o->stream_wait(c->be, nr->stream, after)); /* on the device, not the host */
    DPS_TRY(o->event_record(c->be, nr->start[k], nr->stream));
    DPS_TRY(enqueue_of(op, &call)(c, buf, n, dt));
    DPS_TRY(o->event_record(c->be, nr->end[k], nr->stream));
    nr->bytes[k] = n * comm_dtype_bytes(dt);
    nr->op[k] = op;
    nr->pending++;
    return DPS_OK;
}

/* Work issued on s from now on waits, on the device, for the last async
 * all-reduce's end event (so for all of them: they run in issue order on
 * one stream), as WorkNCCL::synchronizeStream does; the host returns at once. */
static dps_status nccl_wait_async(comm *c, be_stream *s)
{
    nccl_rank *nr = nccl_of(c);
    if (!nr->pending) return DPS_OK;
    return c->be->ops->stream_wait(c->be, s, nr->end[nr->pending - 1]);
}

/* Work issued on s from now on waits, on the device, for async collective
 * `ticket` of the step (and so for those before it: one stream, in issue
 * order) by its end event; the host returns at once. */
static dps_status nccl_wait_ticket(comm *c, be_stream *s, int ticket)
{
    nccl_rank *nr = nccl_of(c);
    if (ticket >= nr->pending)
        return dps_fail(DPS_ERR_USAGE, "rank %d: no async collective %d in this step (%d issued)",
                        c->rank, ticket, nr->pending);
    return c->be->ops->stream_wait(c->be, s, nr->end[ticket]);
}

/* The step's end: the host waits for s and the collectives, watched; then
 * the async collectives' times, from their events, which are done. */
static dps_status nccl_sync(comm *c, be_stream *s, double *busy_ms)
{
    nccl_rank *nr = nccl_of(c);
    int n = nr->pending;
    nr->pending = 0;
    const char *what = n ? "the step, with its collectives," : "the step";
    DPS_TRY(watched_sync(c, s, what, n > 0));
    for (int k = 0; k < n; k++) {
        float ms = 0.0f;
        DPS_TRY(c->be->ops->event_ms(c->be, nr->start[k], nr->end[k], &ms));
        *busy_ms += ms;
        comm_span_add(c, nr->start[k], ms, nr->bytes[k], nr->op[k]);
    }
    return DPS_OK;
}

/* Whether the communicator must be aborted rather than destroyed: it
 * failed, or its group was aborted (a rank whose run failed, for any
 * reason, sets the flag), and a destroy would wait for work a peer may
 * never finish: under torchrun or mpirun nothing would end that wait. */
static int must_abort(comm *c) { return c->failed != DPS_OK || atomic_load(&c->sh->abort); }

static void nccl_destroy(comm *c)
{
    nccl_rank *nr = nccl_of(c);
    if (!nr) return;
    if (nr->watch) nccl_watch_close(nr->watch, must_abort(c)); /* and the communicator */
    else if (nr->comm) ncclCommAbort(nr->comm); /* opened, but never watched */
    for (int k = 0; k < nr->cap; k++) {
        if (nr->start[k]) c->be->ops->event_destroy(c->be, nr->start[k]);
        if (nr->end[k]) c->be->ops->event_destroy(c->be, nr->end[k]);
    }
    free(nr->start);
    free(nr->bytes);
    free(nr->op);
    free(nr->end);
    if (nr->stream) c->be->ops->stream_destroy(c->be, nr->stream);
    free(nr);
    c->impl = NULL;
}

static const comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .collective_async = nccl_collective_async,
    .wait_async = nccl_wait_async,
    .wait_ticket = nccl_wait_ticket,
    .sync = nccl_sync,
    .destroy = nccl_destroy,
};

static int nccl_suits(const backend *be) { return be->kind == BE_CUDA; }

/* The unique id of rank 0's: with NCCL_COMM_ID set every rank's own is
 * that address's (NCCL's bootstrap); else through the ranks' store when
 * they share no memory (under a launcher), else the shared region. */
static dps_status exchange_id(comm *c, ncclUniqueId *id)
{
    const char *fixed = getenv("NCCL_COMM_ID");
    if (c->rank == 0 || (fixed && *fixed)) NCCL_TRY(ncclGetUniqueId(id));
    if (fixed && *fixed) return DPS_OK;
    if (!c->store) return comm_shared_exchange_id(c->sh, c->rank, id, sizeof *id, c->timeout_ms);
    if (c->rank == 0) return store_set(c->store, "nccl-id", id, sizeof *id);
    void *val;
    size_t len;
    DPS_TRY(store_get(c->store, "nccl-id", 0, &val, &len, c->timeout_ms));
    if (len == sizeof *id) memcpy(id, val, sizeof *id);
    free(val);
    if (len == sizeof *id) return DPS_OK;
    return dps_fail(DPS_ERR_RUNTIME, "rank %d: rank 0's NCCL id has %zu bytes, this NCCL's %zu: "
                    "is every rank the same dpscale build?", c->rank, len, sizeof *id);
}

static dps_status nccl_open(comm *c)
{
    nccl_rank *nr = calloc(1, sizeof *nr);
    if (!nr) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory for NCCL", c->rank);
    c->impl = nr;
    c->ops = &nccl_ops;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    DPS_TRY(exchange_id(c, &id));
    DPS_TRY(c->be->ops->set_device(c->be, c->dev));
    DPS_TRY(c->be->ops->stream_create(c->be, c->dev, &nr->stream));
    char name[32];
    snprintf(name, sizeof name, "comm-%d", c->dev);
    c->be->ops->name_stream(c->be, nr->stream, name);
    /* non-blocking: the host polls the set-up within --timeout and until
     * the group's abort flag rises (a peer that died before it would
     * otherwise leave this rank waiting in ncclCommInitRank for ever) */
    ncclConfig_t cfg = nccl_watch_config();
    char who[48];
    snprintf(who, sizeof who, "rank %d (device %d)", c->rank, c->dev);
    NCCL_TRY(ncclCommInitRankConfig(&nr->comm, c->nranks, id, c->rank, &cfg));
    DPS_TRY(nccl_wait_setup(&nr->comm, 1, &c->sh->abort, c->timeout_ms, who,
                            "ncclCommInitRankConfig"));
    return nccl_watch_open(&nr->watch, &nr->comm, 1, &c->sh->abort, c->timeout_ms, who);
}

const comm_impl comm_nccl_impl = {"nccl", nccl_suits, nccl_open, 0};
