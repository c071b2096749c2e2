/* Collectives between the ranks of a group, behind one table of operations
 * (comm_ops), as backend.h does for devices. Each implementation is one
 * file that fills the table (comm_shm.c: NCCL's ring over shared memory
 * between processes; comm_nccl.c: one NCCL rank per process on GPUs; comm_gloo.c: Gloo over
 * TCP between hosts);
 * comm_open (comm.c) chooses one. Strategies call the comm_* functions
 * below only. */
#ifndef DPS_COMM_H
#define DPS_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "comm/comm_shared.h"

typedef enum comm_dtype { COMM_F32, COMM_BF16 } comm_dtype;

/* The collectives an async call runs (comm_collective_async). */
typedef enum comm_op { COMM_ALLREDUCE, COMM_REDUCE_SCATTER, COMM_ALL_GATHER, COMM_OP_COUNT } comm_op;
/* As the trace and messages name them: "all-reduce", "reduce-scatter", "all-gather". */
extern const char *const comm_op_names[COMM_OP_COUNT];

/* Bytes of one element of dt. */
static inline size_t comm_dtype_bytes(comm_dtype dt) { return dt == COMM_BF16 ? 2 : sizeof(float); }

typedef struct comm comm;
typedef struct comm_async comm_async; /* comm_async.c */

/* One async collective of a traced wait, in issue order: where it began
 * (ms after the trace's reference, once comm_spans_read has run), how long
 * it ran, its bytes and which collective it was. */
typedef struct comm_span {
    double begin_ms, ms;
    uint64_t bytes;
    comm_op op;
} comm_span;

/* A trace of the waits' async all-reduces, owned by the caller, who zeroes
 * it, sets ref and hands it to comm_trace (comm_span.c). */
typedef struct comm_spans {
    be_event *ref;     /* an event on the comm's device: begins are ms after it */
    comm_span *span;   /* [n] */
    be_event **begin;  /* [n]: the event each began at, read by comm_spans_read */
    int n, cap;
} comm_spans;

typedef struct comm_ops {
    const char *name;  /* as results and messages name it: "shm", "gloo", "nccl", as --comm */
    /* Blocking collectives: the data is in place when they return. */
    dps_status (*allreduce)(comm *c, void *buf, size_t n, comm_dtype dt);      /* sum */
    dps_status (*broadcast)(comm *c, void *buf, size_t bytes, int root);
    dps_status (*barrier)(comm *c);
    /* In place over n elements split in comm_chunk_range's chunks: after
     * reduce_scatter rank r's chunk r holds the sum of every rank's chunk r
     * (the rest is scratch); all_gather copies each rank's chunk r into
     * every rank's buffer. NULL where the implementation has none. */
    dps_status (*reduce_scatter)(comm *c, void *buf, size_t n, comm_dtype dt);
    dps_status (*all_gather)(comm *c, void *buf, size_t n, comm_dtype dt);
    /* Stream-ordered collective `op` (all-reduce, reduce-scatter or
     * all-gather, as the blocking ones): starts once `after` (an event
     * recorded on the caller's stream) has completed, after every earlier
     * one, and returns at once; NULL when the implementation has none, and
     * then comm_async.c runs the blocking one on a thread. */
    dps_status (*collective_async)(comm *c, comm_op op, void *buf, size_t n, comm_dtype dt,
                                   be_event *after);
    /* Work issued on s from now on starts after every async collective, on
     * the device: returns at once (NULL with collective_async NULL: the host
     * waits for comm_async.c's thread instead). */
    dps_status (*wait_async)(comm *c, be_stream *s);
    /* Work issued on s from now on starts after the async collective the
     * step issued as number `ticket` (and those before it), on the device
     * (NULL with collective_async NULL: the host waits for the thread). */
    dps_status (*wait_ticket)(comm *c, be_stream *s, int ticket);
    /* The end of a step: the host waits until s and the collectives are
     * done, while a watchdog looks for asynchronous errors, the group's abort
     * and the timeout; adds to *busy_ms the milliseconds the async
     * all-reduces ran and leaves their spans (NULL: s's stream_sync). */
    dps_status (*sync)(comm *c, be_stream *s, double *busy_ms);
    /* From any thread: makes the blocked and every later collective fail
     * now (NULL: the shared region's abort flag is enough). */
    void (*abort)(comm *c);
    /* frees c->impl; after a failure of c or of its group it aborts, not waits */
    void (*destroy)(comm *c);
} comm_ops;

/* One rank's end of a group. */
struct comm {
    const comm_ops *ops;
    comm_shared *sh;            /* the group's shared region */
    backend *be;                /* buffers are this backend's device memory */
    int dev;                    /* ... on this device */
    int rank, nranks;
    double timeout_ms;          /* a collective longer than this fails; 0: until the group aborts */
    uint64_t bytes_sent, bytes_received;
    double waited_ms;           /* comm_async.c's all-reduces of the step's waits, until comm_sync */
    int waits;                  /* comm_wait_async calls since the last comm_sync */
    int issued;                 /* async collectives issued since the last comm_sync */
    dps_status failed;          /* the first failure: every later collective returns it */
    int secondary;              /* the group had been aborted before that failure */
    char failed_msg[DPS_ERRMSG_MAX];
    void *impl;                 /* the implementation's state */
    comm_async *async;          /* the thread of implementations without allreduce_async */
    struct dps_store *store;    /* the ranks' rendezvous across hosts (store.h); NULL: none */
    comm_spans *trace;          /* comm_trace's, the caller's; NULL: not traced */
    be_stream *strict_st;       /* strict mode: the collectives' stream (comm_strict.c); NULL: off */
    be_event **strict_ev;       /* ... the end event of each of a step's async collectives */
    int strict_nev;
};

/* What comm_open needs: the group's region (made before the ranks started)
 * and where this rank's buffers live. */
typedef struct comm_params {
    comm_shared *sh;
    int rank;
    backend *be;
    int dev;
    double timeout_ms;
    const char *impl;           /* "shm", "gloo", "nccl"; NULL: the first that suits */
    struct dps_store *store;    /* under a launcher: the ranks' store (gloo needs it) */
} comm_params;

/* The implementation for this backend (NCCL on GPUs when built in, else the
 * shared-memory ring), opened; collective with the other ranks. */
dps_status comm_open(const comm_params *p, comm **out) DPS_MUST_USE;
/* Ends the async thread and frees the implementation. A communicator that
 * failed, or whose group was aborted (comm_fail and comm_abort set the flag,
 * as every rank whose run fails must), is aborted rather than destroyed: a
 * destroy could wait for a peer that never comes. NULL is a no-op. */
void comm_close(comm *c);

/* The collectives. After one fails, every later one returns that failure. */
dps_status comm_allreduce(comm *c, void *buf, size_t n, comm_dtype dt)
    DPS_MUST_USE;
dps_status comm_broadcast(comm *c, void *buf, size_t bytes, int root)
    DPS_MUST_USE;
dps_status comm_barrier(comm *c) DPS_MUST_USE;
/* Rank i's chunk of n elements over nranks, [*begin, *end): n * i / nranks
 * to n * (i + 1) / nranks, so uneven counts differ by at most one element. */
static inline void comm_chunk_range(size_t n, int nranks, int i, size_t *begin, size_t *end)
{
    *begin = n * (size_t)i / (size_t)nranks;
    *end = n * (size_t)(i + 1) / (size_t)nranks;
}
/* Sharded collectives in place (comm_ops' reduce_scatter and all_gather):
 * the sum of every rank's chunk `rank` into this rank's chunk; every rank's
 * chunk into every buffer. DPS_ERR_USAGE where the implementation has none. */
dps_status comm_reduce_scatter(comm *c, void *buf, size_t n, comm_dtype dt) DPS_MUST_USE;
dps_status comm_all_gather(comm *c, void *buf, size_t n, comm_dtype dt) DPS_MUST_USE;
/* All-reduce after `after` completes, in issue order; returns at once. */
dps_status comm_allreduce_async(comm *c, void *buf, size_t n, comm_dtype dt, be_event *after)
    DPS_MUST_USE;
/* Any collective so, in place as the blocking one; *ticket (may be NULL)
 * gets its number in the step, for comm_wait_ticket (-1: nothing was
 * issued, one rank or no elements). */
dps_status comm_collective_async(comm *c, comm_op op, void *buf, size_t n, comm_dtype dt,
                                 be_event *after, int *ticket) DPS_MUST_USE;
/* Work issued on s from now on runs after async collective `ticket` of
 * this step (and every one issued before it), not those issued after it:
 * on the device where the implementation is stream-ordered, else the host
 * waits for the thread. -1 returns at once. Their times are the step's
 * waits' (comm_wait_async) to report. */
dps_status comm_wait_ticket(comm *c, be_stream *s, int ticket) DPS_MUST_USE;
/* Work issued on stream s from now on runs after every async all-reduce
 * issued since the last wait: on the device where the implementation is
 * stream-ordered (NCCL: s waits for the last one's end event, and the host
 * returns at once), else the host waits for them here (the ring's thread). */
dps_status comm_wait_async(comm *c, be_stream *s) DPS_MUST_USE;
/* The end of a step, the one place the host waits for the device: until
 * stream s (and with it every collective it waited for) is idle. With NCCL
 * a watchdog thread meanwhile polls its asynchronous errors, the group's
 * abort flag and the timeout, and aborts the communicator on any of them.
 * Then *busy_ms gets the milliseconds the async all-reduces of the last
 * comm_wait_async ran, and the trace their spans when traced. */
dps_status comm_sync(comm *c, be_stream *s, double *busy_ms) DPS_MUST_USE;

/* From now on the first comm_wait_async of a step (since the last
 * comm_sync) empties *t, and the step's waits (one a micro-step when every
 * micro-step all-reduces) and the comm_sync after them leave there the
 * spans of the all-reduces waited for (in issue order) and their begin
 * events; t stays the caller's and must outlive
 * the tracing (NULL: no more tracing). */
void comm_trace(comm *c, comm_spans *t);
/* After the step, outside its timing: each span's begin in ms after t->ref
 * (an event query per span on be, kept out of the timed wait). */
dps_status comm_spans_read(backend *be, comm_spans *t) DPS_MUST_USE;
/* Frees what the spans hold (the events are the implementation's). */
void comm_spans_free(comm_spans *t);

/* From any thread: the group is over; blocked collectives return. */
void comm_abort(comm *c);
/* Whether this build has the implementation --comm names. */
int comm_have(const char *impl);

/* Records a failure of c (first one wins) and tells the other ranks. */
dps_status comm_fail(comm *c, dps_status code) DPS_MUST_USE;

#endif
