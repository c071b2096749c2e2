/* The trace's spans of a wait's async all-reduces (see comm_impl.h), for
 * every implementation: kept during the wait, measured after the step. */
#include <stdlib.h>

#include "comm/comm_impl.h"

/* Room for one more span; 0 when there is no memory for it. */
static int room(comm *c)
{
    if (c->nspans < c->spans_cap) return 1;
    int cap = c->spans_cap ? 2 * c->spans_cap : 64;
    tl_span *s = realloc(c->spans, (size_t)cap * sizeof *s);
    if (s) c->spans = s;
    be_event **b = s ? realloc(c->span_begin, (size_t)cap * sizeof *b) : NULL;
    if (b) c->span_begin = b;
    if (!b) return 0;
    c->spans_cap = cap;
    return 1;
}

void comm_span_add(comm *c, be_event *begin, double ms, size_t bytes)
{
    if (!c->span_ref || !begin || !room(c)) return;
    c->span_begin[c->nspans] = begin;
    c->spans[c->nspans] = (tl_span){0.0, ms, bytes, c->nspans, 0.0};
    c->nspans++;
}

dps_status comm_spans_read(comm *c)
{
    for (int i = 0; c->span_ref && i < c->nspans; i++) {
        float at = 0.0f;
        DPS_TRY(c->be->ops->event_ms(c->be, c->span_ref, c->span_begin[i], &at));
        c->spans[i].begin_ms = at;
    }
    return DPS_OK;
}
