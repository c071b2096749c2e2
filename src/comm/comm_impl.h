/* For the files that implement the collectives (comm_shm.c, comm_nccl.c, comm_gloo.c)
 * and for comm.c's chooser: an implementation is one file that defines a
 * comm_impl. A new one is that file plus one line in comm.c's list. */
#ifndef DPS_COMM_IMPL_H
#define DPS_COMM_IMPL_H

#include "comm/comm.h"

typedef struct comm_impl {
    const char *name;
    int (*suits)(const backend *be);   /* moves this backend's device buffers */
    /* Fills c->ops and c->impl; collective with the other ranks. */
    dps_status (*open)(comm *c);
    int needs_store;                   /* only when asked for by name, with the store */
} comm_impl;

extern const comm_impl comm_shm_impl;
/* A blocking collective of the table, and the one that runs op (NULL
 * where the implementation has none). */
typedef dps_status (*comm_blocking_fn)(comm *c, void *buf, size_t n, comm_dtype dt);
static inline comm_blocking_fn comm_blocking(const comm *c, comm_op op)
{
    return op == COMM_ALLREDUCE ? c->ops->allreduce
         : op == COMM_REDUCE_SCATTER ? c->ops->reduce_scatter
         : op == COMM_ALL_GATHER ? c->ops->all_gather : NULL;
}

/* comm_async.c: the thread that runs a blocking implementation's async
 * collectives in issue order (comm.c calls these). */
dps_status comm_async_push(comm *c, comm_op op, void *buf, size_t n, comm_dtype dt,
                           be_event *after) DPS_MUST_USE;
dps_status comm_async_wait(comm *c, double *busy_ms) DPS_MUST_USE;
/* Until the step's item `ticket` has run (and the failure of any before it). */
dps_status comm_async_wait_ticket(comm *c, int ticket) DPS_MUST_USE;
void comm_async_stop(comm *c);
/* The step's end (comm_sync): the items waited for are forgotten, and the
 * next step's are numbered, and their begin events reused, from 0. */
void comm_async_step_end(comm *c);

/* comm_span.c: one async collective of the wait into c->trace when traced:
 * it began at event `begin` (on c's device) and ran ms. Nothing is measured
 * here, inside the wait; a span there is no memory for is left out. */
void comm_span_add(comm *c, be_event *begin, double ms, size_t bytes, comm_op op);

extern const comm_impl comm_nccl_impl;
extern const comm_impl comm_gloo_impl;

#endif
