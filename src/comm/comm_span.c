/* The trace's spans of a wait's async all-reduces (comm_spans in comm.h),
 * for every implementation: kept during the wait, measured after the step. */
#include <stdlib.h>

#include "comm/comm_impl.h"

/* Room for one more span in t; 0 when there is no memory for it. */
static int room(comm_spans *t)
{
    if (t->n < t->cap) return 1;
    int cap = t->cap ? 2 * t->cap : 64;
    comm_span *s = realloc(t->span, (size_t)cap * sizeof *s);
    if (s) t->span = s;
    be_event **b = s ? realloc(t->begin, (size_t)cap * sizeof *b) : NULL;
    if (b) t->begin = b;
    if (!b) return 0;
    t->cap = cap;
    return 1;
}

void comm_span_add(comm *c, be_event *begin, double ms, size_t bytes, comm_op op)
{
    comm_spans *t = c->trace;
    if (!t || !t->ref || !begin || !room(t)) return;
    t->begin[t->n] = begin;
    t->span[t->n] = (comm_span){0.0, ms, bytes, op};
    t->n++;
}

dps_status comm_spans_read(backend *be, comm_spans *t)
{
    for (int i = 0; t->ref && i < t->n; i++) {
        float at = 0.0f;
        DPS_TRY(be->ops->event_ms(be, t->ref, t->begin[i], &at));
        t->span[i].begin_ms = at;
    }
    return DPS_OK;
}

void comm_spans_free(comm_spans *t)
{
    free(t->span);
    free(t->begin);
    *t = (comm_spans){0};
}
