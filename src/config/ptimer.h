/* Per-device phase timers built on backend events: begin and end of each
 * (slot, phase) of a step, read once the streams are synchronised. */
#ifndef DPS_PTIMER_H
#define DPS_PTIMER_H

#include "backend/backend.h"
#include "core/names.h"

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
    /* --inject-slowdown: each compute phase (forward, loss, backward,
     * optimizer) is stretched, before its end event, by this fraction of
     * its unstretched time in the slot's previous step */
    double slowdown;
    float base_ms[DPS_MAX_DEVICES][PH_COUNT]; /* the previous step's, unstretched */
    float spun_ms[DPS_MAX_DEVICES][PH_COUNT]; /* added in this step */
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
/* Every compute phase stretched by fraction (0: none) from the second step. */
void ptimer_set_slowdown(phase_timer *t, double fraction);
/* After the slot's stream is synchronised: ms per phase. */
dps_status ptimer_read(phase_timer *t, int slot, float *ms) DPS_MUST_USE;

#endif
