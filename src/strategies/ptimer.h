/* Per-device phase timers built on backend events: begin and end of each
 * (slot, phase) of a step, read once the streams are synchronised. */
#ifndef DPS_PTIMER_H
#define DPS_PTIMER_H

#include "backend/backend.h"
#include "config/timeline.h"
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
    unsigned char where[DPS_MAX_DEVICES][PH_COUNT]; /* the slot whose stream ran it */
    /* (slot, phase) run a second time in a step, on the slot's own stream
     * (ptimer_begin_more): events on its device, added to the first span */
    be_event *ev_more[DPS_MAX_DEVICES][PH_COUNT][2];
    unsigned char more[DPS_MAX_DEVICES][PH_COUNT];
    /* the trace's reference per slot, recorded on its stream (ptimer_mark) */
    be_event *ref[DPS_MAX_DEVICES];
    double ref_host_ms[DPS_MAX_DEVICES]; /* the host clock as each was recorded */
    /* --inject-slowdown: each compute phase (forward, loss, backward,
     * optimizer) is stretched, before its end event, by this fraction of
     * its unstretched time in the slot's previous step; on slot slow_slot
     * alone, or every slot where it is -1 */
    double slowdown;
    int slow_slot;
    float base_ms[DPS_MAX_DEVICES][PH_COUNT]; /* the previous step's, unstretched */
    float spun_ms[DPS_MAX_DEVICES][PH_COUNT]; /* added in this step */
} phase_timer;

dps_status ptimer_init(phase_timer *t, backend *be, int nslots, const int *devs,
                       be_stream *const *streams) DPS_MUST_USE;
void ptimer_free(phase_timer *t);
/* n timers, one a micro-step of an optimizer step (gradient accumulation),
 * in *out (free with ptimer_free_n, safe on a failed or zeroed one). */
dps_status ptimer_init_n(phase_timer **out, int n, backend *be, int nslots, const int *devs,
                         be_stream *const *streams, double slowdown,
                         int slow_slot) DPS_MUST_USE;
void ptimer_free_n(phase_timer **t, int n);
/* After the streams are synchronised: slot's ms per phase over the n
 * micro-steps' timers, summed into ms; each micro-step's own into
 * micro_ms[k * PH_COUNT + p] when micro_ms is not NULL. */
dps_status ptimer_read_n(phase_timer *t, int n, int slot, float *ms,
                         float *micro_ms) DPS_MUST_USE;
void ptimer_reset(phase_timer *t);
dps_status ptimer_begin(phase_timer *t, int slot, dps_phase ph) DPS_MUST_USE;
dps_status ptimer_end(phase_timer *t, int slot, dps_phase ph) DPS_MUST_USE;
/* slot's part of ph, run on slot `where`'s stream (the same `where` for
 * begin and end within a step). */
dps_status ptimer_begin_on(phase_timer *t, int slot, dps_phase ph, int where) DPS_MUST_USE;
dps_status ptimer_end_on(phase_timer *t, int slot, dps_phase ph, int where) DPS_MUST_USE;
/* A second span of slot's ph in the same step, on the slot's own stream
 * (dp's scatter to a replica: its input chunk in forward, its rows of the
 * logits' gradient in backward): its time is added to the first span's;
 * where the phase began (ptimer_begins) stays the first span's. A phase
 * not begun yet in the step is begun by it. */
dps_status ptimer_begin_more(phase_timer *t, int slot, dps_phase ph) DPS_MUST_USE;
dps_status ptimer_end_more(phase_timer *t, int slot, dps_phase ph) DPS_MUST_USE;
/* Every compute phase of slot (-1: of every slot) stretched by fraction
 * (0: none) from the second step. */
void ptimer_set_slowdown(phase_timer *t, double fraction, int slot);
/* After the slot's stream is synchronised: ms per phase. */
dps_status ptimer_read(phase_timer *t, int slot, float *ms) DPS_MUST_USE;
/* The trace's reference: an event on every slot's stream, recorded now (as
 * the first traced step begins, every stream idle). */
dps_status ptimer_mark(phase_timer *t) DPS_MUST_USE;
/* After the step's streams are synchronised: where each phase of slot
 * began (on -1: not run), in ms after slot 0's reference: after the
 * reference on the stream that ran it (an event's time is read against one
 * of its own device), plus how much later the host recorded that reference
 * than slot 0's. */
dps_status ptimer_begins(phase_timer *t, int slot, tl_phase *out) DPS_MUST_USE;

#endif
