/* The trace's records (see timeline.h). */
#include <stdlib.h>
#include <string.h>

#include "config/timeline.h"

int timeline_steps(int want, int steps) { return want < steps ? (want > 0 ? want : 0) : steps; }

dps_status timeline_alloc(timeline *t, int steps, int nranks, int max_spans, int micro)
{
    memset(t, 0, sizeof *t);
    if (steps <= 0) return DPS_OK;
    size_t cells = (size_t)steps * (size_t)nranks, phases = cells * (size_t)micro * PH_COUNT;
    t->phase = calloc(phases, sizeof *t->phase);
    t->span = calloc(cells * (size_t)max_spans + 1, sizeof *t->span);
    t->nspans = calloc(cells, sizeof *t->nspans);
    if (!t->phase || !t->span || !t->nspans) {
        timeline_free(t);
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory for the trace of %d steps on %d "
                        "ranks; ask for fewer --trace-steps", steps, nranks);
    }
    for (size_t i = 0; i < phases; i++) t->phase[i].on = -1;
    t->steps = steps;
    t->micro = micro;
    t->nranks = nranks;
    t->max_spans = max_spans;
    return DPS_OK;
}

void timeline_free(timeline *t)
{
    free(t->phase);
    free(t->span);
    free(t->nspans);
    memset(t, 0, sizeof *t);
}

tl_phase *timeline_phases(const timeline *t, int step, int rank)
{
    return t->phase + ((size_t)step * (size_t)t->nranks + (size_t)rank) * (size_t)t->micro * PH_COUNT;
}

tl_phase *timeline_micro(const timeline *t, int step, int rank, int micro)
{
    return timeline_phases(t, step, rank) + (size_t)micro * PH_COUNT;
}

tl_span *timeline_spans(const timeline *t, int step, int rank)
{
    return t->span + ((size_t)step * (size_t)t->nranks + (size_t)rank) * (size_t)t->max_spans;
}

int *timeline_nspans(const timeline *t, int step, int rank)
{
    return t->nspans + (size_t)step * (size_t)t->nranks + (size_t)rank;
}
