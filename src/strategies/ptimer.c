/* Phase timers on backend events (see ptimer.h). */
#include <stdlib.h>
#include <string.h>

#include "strategies/ptimer.h"
#include "core/util.h"

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
                for (int on = 0; on < 3; on++) {
                    be_event *e = on == 2 ? t->ev_more[s][p][k]
                                : on ? t->ev_on[s][p][k] : t->ev[s][p][k];
                    if (e) t->be->ops->event_destroy(t->be, e);
                }
    for (int s = 0; s < t->nslots; s++)
        if (t->ref[s]) t->be->ops->event_destroy(t->be, t->ref[s]);
    memset(t->ref, 0, sizeof t->ref);
    memset(t->ev, 0, sizeof t->ev);
    memset(t->ev_on, 0, sizeof t->ev_on);
    memset(t->ev_more, 0, sizeof t->ev_more);
}

void ptimer_reset(phase_timer *t)
{
    memset(t->used, 0, sizeof t->used);
    memset(t->on_other, 0, sizeof t->on_other);
    memset(t->more, 0, sizeof t->more);
}

dps_status ptimer_begin(phase_timer *t, int slot, dps_phase ph)
{
    t->used[slot][ph] = 1;
    be_mem_phase(t->be, t->dev[slot], (int)ph);
    t->where[slot][ph] = (unsigned char)slot;
    return t->be->ops->event_record(t->be, t->ev[slot][ph][0], t->stream[slot]);
}

void ptimer_set_slowdown(phase_timer *t, double fraction, int slot)
{
    t->slowdown = fraction;
    t->slow_slot = slot;
}

static int is_compute(dps_phase ph)
{
    return ph == PH_FORWARD || ph == PH_LOSS || ph == PH_BACKWARD || ph == PH_OPTIMIZER;
}

dps_status ptimer_end(phase_timer *t, int slot, dps_phase ph)
{
    if (t->slowdown > 0 && (t->slow_slot < 0 || t->slow_slot == slot) && is_compute(ph) &&
        t->base_ms[slot][ph] > 0) {
        t->spun_ms[slot][ph] = (float)(t->slowdown * t->base_ms[slot][ph]);
        DPS_TRY(t->be->ops->spin(t->be, t->stream[slot], 1e3 * t->spun_ms[slot][ph]));
    }
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
    t->where[slot][ph] = (unsigned char)where;
    return t->be->ops->event_record(t->be, t->ev_on[slot][ph][0], t->stream[where]);
}

dps_status ptimer_end_on(phase_timer *t, int slot, dps_phase ph, int where)
{
    if (where == slot) return ptimer_end(t, slot, ph);
    return t->be->ops->event_record(t->be, t->ev_on[slot][ph][1], t->stream[where]);
}

dps_status ptimer_begin_more(phase_timer *t, int slot, dps_phase ph)
{
    if (!t->used[slot][ph]) return ptimer_begin(t, slot, ph);
    for (int k = 0; k < 2; k++)
        if (!t->ev_more[slot][ph][k])
            DPS_TRY(t->be->ops->event_create(t->be, t->dev[slot], &t->ev_more[slot][ph][k]));
    t->more[slot][ph] = 1;
    be_mem_phase(t->be, t->dev[slot], (int)ph);
    return t->be->ops->event_record(t->be, t->ev_more[slot][ph][0], t->stream[slot]);
}

dps_status ptimer_end_more(phase_timer *t, int slot, dps_phase ph)
{
    if (!t->more[slot][ph]) return ptimer_end(t, slot, ph);
    return t->be->ops->event_record(t->be, t->ev_more[slot][ph][1], t->stream[slot]);
}

dps_status ptimer_read(phase_timer *t, int slot, float *ms)
{
    for (int p = 0; p < PH_COUNT; p++) {
        ms[p] = 0.0f;
        if (!t->used[slot][p]) continue;
        be_event *const *ev = t->on_other[slot][p] ? t->ev_on[slot][p] : t->ev[slot][p];
        DPS_TRY(t->be->ops->event_ms(t->be, ev[0], ev[1], &ms[p]));
        if (t->more[slot][p]) {
            float second = 0.0f;
            DPS_TRY(t->be->ops->event_ms(t->be, t->ev_more[slot][p][0], t->ev_more[slot][p][1],
                                         &second));
            ms[p] += second;
        }
        float base = ms[p] - t->spun_ms[slot][p];
        t->base_ms[slot][p] = base > 0 ? base : 0.0f;
        t->spun_ms[slot][p] = 0.0f;
    }
    return DPS_OK;
}

dps_status ptimer_mark(phase_timer *t)
{
    for (int s = 0; s < t->nslots; s++)
        if (!t->ref[s]) DPS_TRY(t->be->ops->event_create(t->be, t->dev[s], &t->ref[s]));
    for (int s = 0; s < t->nslots; s++) {
        DPS_TRY(t->be->ops->event_record(t->be, t->ref[s], t->stream[s]));
        t->ref_host_ms[s] = dps_now_ms();
    }
    return DPS_OK;
}

dps_status ptimer_begins(phase_timer *t, int slot, tl_phase *out)
{
    for (int p = 0; p < PH_COUNT; p++) {
        out[p] = (tl_phase){.on = -1};
        int w = t->where[slot][p];
        if (!t->used[slot][p] || !t->ref[w]) continue;
        float host_ms = (float)(t->ref_host_ms[w] - t->ref_host_ms[0]);
        be_event *begin = t->on_other[slot][p] ? t->ev_on[slot][p][0] : t->ev[slot][p][0];
        DPS_TRY(t->be->ops->event_ms(t->be, t->ref[w], begin, &out[p].begin_ms));
        out[p].begin_ms += host_ms;
        out[p].on = w;
        if (!t->more[slot][p] || !t->ref[slot]) continue;
        be_event *const *more = t->ev_more[slot][p]; /* on the slot's own stream */
        DPS_TRY(t->be->ops->event_ms(t->be, t->ref[slot], more[0], &out[p].more_begin_ms));
        out[p].more_begin_ms += (float)(t->ref_host_ms[slot] - t->ref_host_ms[0]);
        DPS_TRY(t->be->ops->event_ms(t->be, more[0], more[1], &out[p].more_ms));
    }
    return DPS_OK;
}

dps_status ptimer_init_n(phase_timer **out, int n, backend *be, int nslots, const int *devs,
                         be_stream *const *streams, double slowdown, int slow_slot)
{
    *out = calloc((size_t)n, sizeof **out);
    if (!*out) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for %d phase timers", n);
    for (int k = 0; k < n; k++) {
        DPS_TRY(ptimer_init(&(*out)[k], be, nslots, devs, streams));
        ptimer_set_slowdown(&(*out)[k], slowdown, slow_slot);
    }
    return DPS_OK;
}

void ptimer_free_n(phase_timer **t, int n)
{
    if (!*t) return;
    for (int k = 0; k < n; k++)
        if ((*t)[k].be) ptimer_free(&(*t)[k]);
    free(*t);
    *t = NULL;
}

dps_status ptimer_read_n(phase_timer *t, int n, int slot, float *ms, float *micro_ms)
{
    float one[PH_COUNT];
    memset(ms, 0, PH_COUNT * sizeof *ms);
    for (int k = 0; k < n; k++) {
        DPS_TRY(ptimer_read(&t[k], slot, one));
        for (int p = 0; p < PH_COUNT; p++) ms[p] += one[p];
        if (micro_ms) memcpy(micro_ms + (size_t)k * PH_COUNT, one, sizeof one);
    }
    return DPS_OK;
}
