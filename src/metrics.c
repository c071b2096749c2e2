/* Statistics, phase timers and bandwidth definitions (see metrics.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double stats_percentile_sorted(const double *sorted, int n, double q)
{
    if (n <= 0) return NAN;
    double pos = q * (double)(n - 1);
    int lo = (int)floor(pos);
    int hi = lo + 1 < n ? lo + 1 : lo;
    double frac = pos - lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

void stats_compute(const double *x, int n, dps_stats *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n <= 0) {
        out->median = out->p10 = out->p90 = out->mean = out->stdev = NAN;
        out->min = out->max = NAN;
        return;
    }
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) {
        out->n = 0;
        return;
    }
    memcpy(s, x, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += s[i];
    out->mean = sum / n;
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (s[i] - out->mean) * (s[i] - out->mean);
    out->stdev = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
    out->median = stats_percentile_sorted(s, n, 0.5);
    out->p10 = stats_percentile_sorted(s, n, 0.1);
    out->p90 = stats_percentile_sorted(s, n, 0.9);
    out->min = s[0];
    out->max = s[n - 1];
    free(s);
}

double busbw_allreduce(double algbw_gbps, int nranks)
{
    if (nranks <= 1) return 0.0;
    return algbw_gbps * 2.0 * (nranks - 1) / nranks;
}

dps_status ptimer_init(phase_timer *t, backend *be, int nslots, const int *devs,
                       be_stream *const *streams)
{
    memset(t, 0, sizeof *t);
    t->be = be;
    t->nslots = nslots;
    for (int s = 0; s < nslots; s++) {
        t->stream[s] = streams[s];
        t->dev[s] = devs[s];
        for (int p = 0; p < PH_COUNT; p++)
            for (int k = 0; k < 2; k++) {
                dps_status rc = be->ops->event_create(be, devs[s], &t->ev[s][p][k]);
                if (rc) {
                    ptimer_free(t);
                    return rc;
                }
            }
    }
    return DPS_OK;
}

void ptimer_free(phase_timer *t)
{
    for (int s = 0; s < t->nslots; s++)
        for (int p = 0; p < PH_COUNT; p++)
            for (int k = 0; k < 2; k++)
                for (int on = 0; on < 2; on++) {
                    be_event *e = on ? t->ev_on[s][p][k] : t->ev[s][p][k];
                    if (e) t->be->ops->event_destroy(t->be, e);
                }
    memset(t->ev, 0, sizeof t->ev);
    memset(t->ev_on, 0, sizeof t->ev_on);
}

void ptimer_reset(phase_timer *t)
{
    memset(t->used, 0, sizeof t->used);
    memset(t->on_other, 0, sizeof t->on_other);
}

dps_status ptimer_begin(phase_timer *t, int slot, dps_phase ph)
{
    t->used[slot][ph] = 1;
    return t->be->ops->event_record(t->be, t->ev[slot][ph][0], t->stream[slot]);
}

dps_status ptimer_end(phase_timer *t, int slot, dps_phase ph)
{
    return t->be->ops->event_record(t->be, t->ev[slot][ph][1], t->stream[slot]);
}

/* Events of (slot, ph) on slot `where`'s device: an event is recorded
 * only on a stream of its own device. Made on first use. */
static dps_status events_on(phase_timer *t, int slot, dps_phase ph, int where)
{
    for (int k = 0; k < 2; k++)
        if (!t->ev_on[slot][ph][k])
            DPS_TRY(t->be->ops->event_create(t->be, t->dev[where], &t->ev_on[slot][ph][k]));
    return DPS_OK;
}

dps_status ptimer_begin_on(phase_timer *t, int slot, dps_phase ph, int where)
{
    if (where == slot) return ptimer_begin(t, slot, ph);
    DPS_TRY(events_on(t, slot, ph, where));
    t->used[slot][ph] = 1;
    t->on_other[slot][ph] = 1;
    return t->be->ops->event_record(t->be, t->ev_on[slot][ph][0], t->stream[where]);
}

dps_status ptimer_end_on(phase_timer *t, int slot, dps_phase ph, int where)
{
    if (where == slot) return ptimer_end(t, slot, ph);
    return t->be->ops->event_record(t->be, t->ev_on[slot][ph][1], t->stream[where]);
}

dps_status ptimer_read(phase_timer *t, int slot, float *ms)
{
    for (int p = 0; p < PH_COUNT; p++) {
        ms[p] = 0.0f;
        if (!t->used[slot][p]) continue;
        be_event *const *ev = t->on_other[slot][p] ? t->ev_on[slot][p] : t->ev[slot][p];
        DPS_TRY(t->be->ops->event_ms(t->be, ev[0], ev[1], &ms[p]));
    }
    return DPS_OK;
}
