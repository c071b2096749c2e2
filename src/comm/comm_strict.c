/* The collectives as strict mode sees them (DPSCALE_STRICT=1, backend.h):
 * a group's collectives run on a stream of their own, as NCCL's do; an
 * async one starts after the event it is given and reads and writes its
 * buffer there, a wait orders the waiting stream after the collective's
 * end event, a blocking one and comm_sync make the host wait. */
#include <stdlib.h>

#include "comm/comm.h"
#include "comm/comm_strict.h"

dps_status comm_strict_open(comm *c)
{
    if (!be_strict_on(c->be)) return DPS_OK;
    DPS_TRY(c->be->ops->stream_create(c->be, c->dev, &c->strict_st));
    c->be->ops->name_stream(c->be, c->strict_st, "collectives");
    return DPS_OK;
}

void comm_strict_close(comm *c)
{
    if (!c->strict_st) return;
    /* a failed step leaves collectives queued: done before their buffers are freed
     * (cudaFree would wait for them); a failure here is the step's, reported already */
    dps_status drained = c->be->ops->stream_sync(c->be, c->strict_st);
    (void)drained;
    for (int i = 0; i < c->strict_nev; i++) c->be->ops->event_destroy(c->be, c->strict_ev[i]);
    free(c->strict_ev);
    c->be->ops->stream_destroy(c->be, c->strict_st);
    c->strict_st = NULL;
}

/* The end event of the step's collective number ticket, made when first needed. */
static dps_status end_event(comm *c, int ticket, be_event **e)
{
    while (c->strict_nev <= ticket) {
        be_event **ev = realloc(c->strict_ev, (size_t)(c->strict_nev + 1) * sizeof *ev);
        if (!ev) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory for strict "
                                 "mode's collective events", c->rank);
        c->strict_ev = ev;
        DPS_TRY(c->be->ops->event_create(c->be, c->dev, &c->strict_ev[c->strict_nev]));
        c->strict_nev++;
    }
    *e = c->strict_ev[ticket];
    return DPS_OK;
}

dps_status comm_strict_async(comm *c, const char *op, void *buf, size_t bytes, be_event *after,
                             int ticket)
{
    if (!c->strict_st) return DPS_OK;
    backend *be = c->be;
    if (after) DPS_TRY(be->ops->stream_wait(be, c->strict_st, after));
    be_access acc = {buf, (int64_t)bytes, c->dev, 1};
    DPS_TRY(be_strict_op(be, c->strict_st, op, &acc, 1));
    be_event *end;
    DPS_TRY(end_event(c, ticket, &end));
    return be->ops->event_record(be, end, c->strict_st);
}

dps_status comm_strict_wait(comm *c, be_stream *s, int ticket)
{
    if (!c->strict_st || ticket < 0) return DPS_OK;
    be_event *end;
    DPS_TRY(end_event(c, ticket, &end));
    return c->be->ops->stream_wait(c->be, s, end);
}

dps_status comm_strict_blocking(comm *c, const char *op, void *buf, size_t bytes)
{
    if (!c->strict_st) return DPS_OK;
    be_access acc = {buf, (int64_t)bytes, c->dev, 1};
    DPS_TRY(be_strict_op(c->be, c->strict_st, op, &acc, 1));
    return c->be->ops->stream_sync(c->be, c->strict_st);
}

dps_status comm_strict_sync(comm *c)
{
    return c->strict_st ? c->be->ops->stream_sync(c->be, c->strict_st) : DPS_OK;
}
