/* Measurement: statistics over step samples, per-device phase timers built
 * on backend events, and the bus-bandwidth definition. */
#ifndef DPS_METRICS_H
#define DPS_METRICS_H

#include "backend.h"
#include "config.h"

typedef struct dps_stats {
    int n;
    double median, p10, p90, mean, stdev, min, max;
} dps_stats;

/* Summary of x[0..n); percentiles by linear interpolation between closest
 * ranks (numpy's default); stdev is the sample standard deviation (n - 1). */
void stats_compute(const double *x, int n, dps_stats *out);
double stats_percentile_sorted(const double *sorted, int n, double q);

/* nccl-tests' all-reduce bus bandwidth: algbw * 2 (n - 1) / n. */
double busbw_allreduce(double algbw_gbps, int nranks);

/* Begin/end events per (slot, phase) on the slot's stream, or on the
 * stream where that slot's part of the phase runs (dp's gather and reduce
 * copies run on slot 0's); a phase not recorded in a step reads as 0 ms. */
typedef struct phase_timer {
    backend *be;
    int nslots;
    int dev[DPS_MAX_DEVICES];
    be_stream *stream[DPS_MAX_DEVICES];
    be_event *ev[DPS_MAX_DEVICES][PH_COUNT][2];
    unsigned char used[DPS_MAX_DEVICES][PH_COUNT];
    /* (slot, phase) timed on another slot's stream: events on that device */
    be_event *ev_on[DPS_MAX_DEVICES][PH_COUNT][2];
    unsigned char on_other[DPS_MAX_DEVICES][PH_COUNT];
} phase_timer;

dps_status ptimer_init(phase_timer *t, backend *be, int nslots, const int *devs,
                       be_stream *const *streams) DPS_MUST_USE;
void ptimer_free(phase_timer *t);
void ptimer_reset(phase_timer *t);
dps_status ptimer_begin(phase_timer *t, int slot, dps_phase ph) DPS_MUST_USE;
dps_status ptimer_end(phase_timer *t, int slot, dps_phase ph) DPS_MUST_USE;
/* slot's part of ph, run on slot `where`'s stream (the same `where` for
 * begin and end within a step). */
dps_status ptimer_begin_on(phase_timer *t, int slot, dps_phase ph, int where) DPS_MUST_USE;
dps_status ptimer_end_on(phase_timer *t, int slot, dps_phase ph, int where) DPS_MUST_USE;
/* After the slot's stream is synchronised: ms per phase. */
dps_status ptimer_read(phase_timer *t, int slot, float *ms) DPS_MUST_USE;

#endif
