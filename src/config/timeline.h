/* What the trace of a configuration's last timed steps holds (--trace-steps):
 * where each phase of a step began on its device, and each ddp bucket's
 * all-reduce; phase lengths are the step records' own (train_result's
 * phase_ms), so the trace and the CSVs agree by construction. Times are ms
 * after a reference event recorded on the device as the first traced step
 * began (ptimer_mark). */
#ifndef DPS_TIMELINE_H
#define DPS_TIMELINE_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"
#include "core/names.h"

/* A phase of one step on one device: where it began and on whose stream;
 * a phase run in two spans (dp's scatter to a replica: its input chunk, then
 * its rows of the logits' gradient) has its second span's begin and length. */
typedef struct tl_phase {
    float begin_ms;  /* after the reference of the device whose stream ran it */
    int on;          /* the slot (dp) whose stream ran it; -1: not run this step */
    float ms;        /* its length in this micro-step (the step's phase_ms summed over them) */
    float more_begin_ms; /* the second span's begin, on the same clock as begin_ms */
    float more_ms;   /* the second span's length, part of ms; 0: one span */
} tl_phase;

/* One bucket's all-reduce (ddp): its begin and how long the collective ran
 * (0 on one rank, which runs none), and when the bucket was ready: its
 * gradients final, copied into it and scaled (the event the all-reduce
 * waits for). */
typedef struct tl_span {
    double begin_ms, ms;
    uint64_t bytes;
    int bucket;
    double ready_ms;
    int micro;       /* the micro-step whose gradients it all-reduced */
    int op;          /* the collective (comm_op: 0 all-reduce, 1 reduce-scatter, 2 all-gather);
                        bucket is then a sharded strategy's unit */
    int phase;       /* the dps_phase that issued it (ddp's buckets: backward) */
} tl_span;

typedef struct timeline {
    int steps;          /* traced steps: the last `steps` timed ones; 0: no trace */
    int nranks;
    int max_spans;      /* per step and rank */
    int micro;          /* micro-steps a step (--accum), each with its phases */
    tl_phase *phase;    /* [steps][nranks][micro][PH_COUNT] */
    tl_span *span;      /* [steps][nranks][max_spans] */
    int *nspans;        /* [steps][nranks] */
    double ref_wall_ms[DPS_MAX_DEVICES]; /* each rank's reference on the wall clock (ddp) */
} timeline;

/* Room for `steps` traced steps of `micro` micro-steps on nranks ranks
 * with up to max_spans spans each; steps 0 allocates nothing. */
dps_status timeline_alloc(timeline *t, int steps, int nranks, int max_spans,
                          int micro) DPS_MUST_USE;
void timeline_free(timeline *t);
tl_phase *timeline_phases(const timeline *t, int step, int rank);   /* [micro][PH_COUNT] */
tl_phase *timeline_micro(const timeline *t, int step, int rank, int micro); /* [PH_COUNT] */
tl_span *timeline_spans(const timeline *t, int step, int rank);     /* [max_spans] */
int *timeline_nspans(const timeline *t, int step, int rank);
/* The traced steps of a run of `steps` timed ones asking for `want`. */
int timeline_steps(int want, int steps);

#endif
