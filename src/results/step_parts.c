/* A step's partition per rank and a collective's waiting vs moving (see step_parts.h). */
#include <math.h>
#include <stdlib.h>

#include "core/stats.h"
#include "core/strategy.h"
#include "results/step_parts.h"

const char *const step_part_names[PART_COUNT] = {
    "compute", "overlap", "comm_exposed", "copies", "wait_peer", "idle_host"};

static double sum_of(const float *ph, const dps_phase *which, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += ph[which[i]];
    return s;
}

/* dp: what device 0 runs while the replicas have nothing to do (the
 * outputs' gather, the loss, the GradScaler's unscale, the optimizer). */
static double dp_serial_ms(const train_result *res, int k)
{
    static const dps_phase serial[] = {PH_GATHER, PH_LOSS, PH_UNSCALE, PH_OPTIMIZER};
    return sum_of(res->phase_ms + (size_t)k * res->nranks * PH_COUNT, serial, 4);
}

void step_partition(const dps_config *c, const train_result *res, int k, int rank,
                    double out[PART_COUNT])
{
    static const dps_phase compute[] = {PH_FORWARD, PH_LOSS, PH_BACKWARD, PH_UNSCALE, PH_OPTIMIZER};
    static const dps_phase comm[] = {PH_ALLREDUCE_EXPOSED, PH_REPLICATE, PH_REDUCE};
    static const dps_phase copies[] = {PH_LOAD, PH_SCATTER, PH_GATHER};
    const float *ph = res->phase_ms + ((size_t)k * res->nranks + rank) * PH_COUNT;
    double step = res->step_ms[k], own = res->rank_step_ms[(size_t)k * res->nranks + rank];
    double busy = sum_of(ph, compute, 5);
    /* the collectives' time outside their exposed wait ran beside compute */
    double overlap = ph[PH_ALLREDUCE] - ph[PH_ALLREDUCE_EXPOSED];
    overlap = overlap < 0.0 ? 0.0 : overlap > busy ? busy : overlap;
    out[PART_COMPUTE] = busy - overlap;
    out[PART_OVERLAP] = overlap;
    out[PART_COMM_EXPOSED] = sum_of(ph, comm, 3);
    out[PART_COPIES] = sum_of(ph, copies, 3);
    double idle = step - busy - out[PART_COMM_EXPOSED] - out[PART_COPIES];
    double peer = dps_strategy_of(c->mode)->per_rank ? step - own
                : rank > 0 ? dp_serial_ms(res, k) : 0.0;
    peer = peer < idle ? peer : idle;
    out[PART_WAIT_PEER] = peer > 0.0 ? peer : 0.0;
    out[PART_IDLE_HOST] = idle - out[PART_WAIT_PEER];
}

/* Where rank's traced step t began, in ms after its reference: its first phase's begin. */
static double step_begin(const timeline *tl, int t, int rank)
{
    const tl_phase *p = timeline_micro(tl, t, rank, 0);
    double first = NAN;
    for (int i = 0; i < PH_COUNT; i++)
        if (p[i].on >= 0 && !(p[i].begin_ms >= first)) first = p[i].begin_ms;
    return first;
}

static int has_span(const timeline *tl, int t, int rank, int i)
{
    return i < *timeline_nspans(tl, t, rank);
}

span_parts step_span_parts(const timeline *tl, int t, int rank, int i)
{
    span_parts out = {NAN, NAN, NAN, NAN};
    int n = tl->nranks, others = 0;
    if (!has_span(tl, t, rank, i)) return out;
    const tl_span *mine = &timeline_spans(tl, t, rank)[i];
    out.ready_step_ms = mine->ready_ms - step_begin(tl, t, rank);
    if (n < 2) return out;
    double shortest = INFINITY, late[DPS_MAX_DEVICES];
    for (int r = 0; r < n; r++) {
        if (!has_span(tl, t, r, i)) return out;
        const tl_span *sp = &timeline_spans(tl, t, r)[i];
        if (sp->ms < shortest) shortest = sp->ms;
        if (r != rank) late[others++] = sp->ready_ms - step_begin(tl, t, r);
    }
    out.transfer_ms = shortest;
    out.wait_ms = mine->ms - shortest;
    out.late_ms = out.ready_step_ms - stats_median_or(late, others, NAN);
    return out;
}
