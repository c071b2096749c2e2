/* The trace's spans of a wait's async all-reduces (see comm_impl.h), for
 * every implementation: their own file, as comm.c calls the implementations. */
#include <stdlib.h>

#include "comm/comm_impl.h"

dps_status comm_span_add(comm *c, be_event *begin, double ms, size_t bytes)
{
    if (!c->span_ref || !begin) return DPS_OK;
    if (c->nspans == c->spans_cap) {
        int cap = c->spans_cap ? 2 * c->spans_cap : 64;
        tl_span *s = realloc(c->spans, (size_t)cap * sizeof *s);
        if (!s) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory for the trace", c->rank);
        c->spans = s;
        c->spans_cap = cap;
    }
    float at = 0.0f;
    DPS_TRY(c->be->ops->event_ms(c->be, c->span_ref, begin, &at));
    c->spans[c->nspans] = (tl_span){at, ms, bytes, c->nspans, 0.0};
    c->nspans++;
    return DPS_OK;
}
