/* The collectives' entry points (see comm.h): the chooser of an
 * implementation, and the calls every strategy makes, which dispatch to
 * the table and keep the first failure, so that every later collective
 * returns it instead of running on a broken group. The host collectives
 * read and write the host backend's device buffers as NCCL reads a GPU's:
 * each buffer goes through host_dev_rw, strict mode's alias. */
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "backend/host_devmem.h"
#include "comm/comm_impl.h"
#include "comm/comm_strict.h"
#include "core/util.h"

/* In order of preference; a new implementation is one more line. */
static const comm_impl *const impls[] = {
#ifdef DPS_HAVE_NCCL
    &comm_nccl_impl,
#endif
    &comm_shm_impl,
#ifdef DPS_HAVE_GLOO
    &comm_gloo_impl,
#endif
};
#define NIMPLS (sizeof impls / sizeof impls[0])

static const comm_impl *find(const char *name)
{
    for (size_t i = 0; i < NIMPLS; i++)
        if (strcmp(impls[i]->name, name) == 0) return impls[i];
    return NULL;
}

int comm_have(const char *impl) { return find(impl) != NULL; }

/* The implementation p asks for by name, else the first that suits. */
static dps_status choose(const comm_params *p, const comm_impl **out)
{
    *out = NULL;
    for (size_t i = 0; !p->impl && !*out && i < NIMPLS; i++)
        if (!impls[i]->needs_store && impls[i]->suits(p->be)) *out = impls[i];
    if (p->impl) *out = find(p->impl);
    if (p->impl && !*out)
        return dps_fail(DPS_ERR_USAGE, "rank %d: this build has no %s collectives (rebuild with "
                        "it found: `scripts/setup.sh` installs it)", p->rank, p->impl);
    if (*out && !(*out)->suits(p->be))
        return dps_fail(DPS_ERR_USAGE, "rank %d: %s cannot move %s-backend buffers: choose "
                        "another --comm", p->rank, p->impl, p->be->ops->name);
    if (!*out)
        return dps_fail(DPS_ERR_RUNTIME, "rank %d: no collective implementation moves %s-backend "
                        "buffers in this build (NCCL is needed on GPUs; rebuild with -Dnccl=enabled)",
                        p->rank, p->be->ops->name);
    return DPS_OK;
}

dps_status comm_open(const comm_params *p, comm **out)
{
    const comm_impl *impl;
    DPS_TRY(choose(p, &impl));
    comm *c = calloc(1, sizeof *c);
    if (!c) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory", p->rank);
    *c = (comm){.sh = p->sh, .be = p->be, .dev = p->dev, .rank = p->rank,
                .nranks = p->sh->nranks, .timeout_ms = p->timeout_ms, .store = p->store};
    *out = c;
    dps_status rc = impl->open(c);
    if (!rc) rc = comm_strict_open(c);
    return rc ? comm_fail(c, rc) : DPS_OK;
}

void comm_close(comm *c)
{
    if (!c) return;
    comm_async_stop(c);
    comm_strict_close(c);
    if (c->ops) c->ops->destroy(c);
    free(c);
}

void comm_abort(comm *c)
{
    comm_shared_abort(c->sh);
    if (c->ops && c->ops->abort) c->ops->abort(c);
}

dps_status comm_fail(comm *c, dps_status code)
{
    if (!c->failed) {
        c->failed = code;
        dps_strlcpy(c->failed_msg, dps_errmsg(), sizeof c->failed_msg);
        c->secondary = comm_shared_abort(c->sh); /* the others would wait for this rank forever */
    }
    return dps_fail_copy(code, dps_errmsg());
}

/* The failure every collective returns once one has failed. */
static dps_status failed(comm *c) { return dps_fail_copy(c->failed, c->failed_msg); }

#define COMM_CALL(c, call)                         \
    do {                                           \
        if ((c)->failed) return failed(c);         \
        dps_status comm_rc_ = (call);              \
        return comm_rc_ ? comm_fail(c, comm_rc_) : DPS_OK; \
    } while (0)

dps_status comm_allreduce(comm *c, void *buf, size_t n, comm_dtype dt)
{
    if (c->nranks == 1 || n == 0) return c->failed ? failed(c) : DPS_OK;
    DPS_TRY(comm_strict_blocking(c, "all-reduce", buf, n * comm_dtype_bytes(dt)));
    COMM_CALL(c, c->ops->allreduce(c, host_dev_rw(buf), n, dt));
}

dps_status comm_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    if (c->nranks == 1 || bytes == 0) return c->failed ? failed(c) : DPS_OK;
    DPS_TRY(comm_strict_blocking(c, "broadcast", buf, bytes));
    COMM_CALL(c, c->ops->broadcast(c, host_dev_rw(buf), bytes, root));
}

dps_status comm_barrier(comm *c)
{
    if (c->nranks == 1) return c->failed ? failed(c) : DPS_OK;
    COMM_CALL(c, c->ops->barrier(c));
}

const char *const comm_op_names[COMM_OP_COUNT] = {"all-reduce", "reduce-scatter", "all-gather"};

/* Collective op's blocking implementation, or why there is none. */
static dps_status implemented(comm *c, comm_op op)
{
    if (comm_blocking(c, op)) return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "rank %d: the %s collectives have no %s yet; use --comm shm",
                    c->rank, c->ops->name, comm_op_names[op]);
}

/* A sharded collective in place, blocking. */
static dps_status sharded(comm *c, comm_op op, void *buf, size_t n, comm_dtype dt)
{
    if (c->nranks == 1 || n == 0) return c->failed ? failed(c) : DPS_OK;
    DPS_TRY(implemented(c, op));
    DPS_TRY(comm_strict_blocking(c, comm_op_names[op], buf, n * comm_dtype_bytes(dt)));
    COMM_CALL(c, comm_blocking(c, op)(c, host_dev_rw(buf), n, dt));
}

dps_status comm_reduce_scatter(comm *c, void *buf, size_t n, comm_dtype dt)
{
    return sharded(c, COMM_REDUCE_SCATTER, buf, n, dt);
}

dps_status comm_all_gather(comm *c, void *buf, size_t n, comm_dtype dt)
{
    return sharded(c, COMM_ALL_GATHER, buf, n, dt);
}

dps_status comm_collective_async(comm *c, comm_op op, void *buf, size_t n, comm_dtype dt,
                                 be_event *after, int *ticket)
{
    if (ticket) *ticket = -1;
    if (c->nranks == 1 || n == 0) return c->failed ? failed(c) : DPS_OK;
    if (c->failed) return failed(c);
    DPS_TRY(implemented(c, op));
    DPS_TRY(comm_strict_async(c, comm_op_names[op], buf, n * comm_dtype_bytes(dt), after, c->issued));
    buf = host_dev_rw(buf);
    dps_status rc = c->ops->collective_async ? c->ops->collective_async(c, op, buf, n, dt, after)
                                             : comm_async_push(c, op, buf, n, dt, after);
    if (rc) return comm_fail(c, rc);
    if (ticket) *ticket = c->issued;
    c->issued++;
    return DPS_OK;
}

dps_status comm_allreduce_async(comm *c, void *buf, size_t n, comm_dtype dt, be_event *after)
{
    return comm_collective_async(c, COMM_ALLREDUCE, buf, n, dt, after, NULL);
}

dps_status comm_wait_ticket(comm *c, be_stream *s, int ticket)
{
    if (ticket < 0) return c->failed ? failed(c) : DPS_OK;
    DPS_TRY(comm_strict_wait(c, s, ticket));
    if (c->ops->wait_ticket) COMM_CALL(c, c->ops->wait_ticket(c, s, ticket));
    COMM_CALL(c, comm_async_wait_ticket(c, ticket));
}

dps_status comm_wait_async(comm *c, be_stream *s)
{
    if (!c->waits++) { /* the step's first wait */
        if (c->trace) c->trace->n = 0;
        c->waited_ms = 0.0;
    }
    DPS_TRY(comm_strict_wait(c, s, c->issued - 1));
    if (c->ops->wait_async) COMM_CALL(c, c->ops->wait_async(c, s));
    COMM_CALL(c, comm_async_wait(c, &c->waited_ms));
}

dps_status comm_sync(comm *c, be_stream *s, double *busy_ms)
{
    if (c->failed) return failed(c);
    c->waits = 0;
    c->issued = 0;
    comm_async_step_end(c);
    DPS_TRY(comm_strict_sync(c));
    dps_status rc = c->ops->sync ? c->ops->sync(c, s, busy_ms) : c->be->ops->stream_sync(c->be, s);
    if (rc) return comm_fail(c, rc);
    *busy_ms += c->waited_ms; /* the host waited for comm_async.c's thread: times known then */
    c->waited_ms = 0.0;
    return DPS_OK;
}

void comm_trace(comm *c, comm_spans *t) { c->trace = t; }
