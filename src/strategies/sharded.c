/* Sharded data parallel's part of a rank's step (see sharded.h): the
 * shards' layout, the units' gathered parameters and gradients through the
 * model's window, their collectives, and the optimizer on the shards. */
#include <stdlib.h>
#include <string.h>

#include "strategies/sharded.h"
#include "core/strategy.h"

#define FLOATS(b) ((float *)(b).ptr)

shard_level shard_level_of(dps_mode m) { return (shard_level)dps_strategy_of(m)->shard; }

int shard_max_collectives(shard_level level, int nunits, int nbk, int accum, int no_sync)
{
    int ddp = nbk * (no_sync ? 1 : accum);
    switch (level) {
    case SHARD_NONE: return ddp;
    case SHARD_OPTIMIZER: return ddp + nunits;
    case SHARD_GRADIENTS: return accum * nunits + nunits;
    case SHARD_PARAMETERS: return 3 * accum * nunits;
    }
    return ddp;
}

size_t shard_floats(const net *n, int nranks, int rank)
{
    size_t total = 0, b, e;
    for (int u = 0; u < n->nunits; u++) {
        comm_chunk_range(n->units[u].hi - n->units[u].lo, nranks, rank, &b, &e);
        total += e - b;
    }
    return total;
}

/* An async collective of unit u issued in phase ph: kept for the trace;
 * its place in the step's list (-1: not kept). */
static int note_issued(shard_rank *S, int ticket, int u, dps_phase ph)
{
    if (ticket < 0 || S->nissued >= S->max_issued) return -1;
    shard_issue *is = &S->issued[S->nissued];
    is->unit = u;
    is->phase = (int)ph;
    is->micro = S->micro;
    is->ready_set = 0;
    return S->nissued++;
}

/* Issued collective k's ready time: now, on the compute stream (once a step). */
static dps_status mark_ready(shard_rank *S, int k)
{
    if (k < 0 || S->issued[k].ready_set) return DPS_OK;
    S->issued[k].ready_set = 1;
    return S->be->ops->event_record(S->be, S->issued[k].ready, S->st);
}

static size_t unit_len(const shard_rank *S, int u)
{
    return S->net->units[u].hi - S->net->units[u].lo;
}

/* This rank's chunk of every unit, and where each lies in the shards. */
static dps_status lay_out(shard_rank *S)
{
    int U = S->net->nunits;
    S->own_lo = calloc((size_t)U, sizeof *S->own_lo);
    S->own_hi = calloc((size_t)U, sizeof *S->own_hi);
    S->shard_at = calloc((size_t)U, sizeof *S->shard_at);
    if (!S->own_lo || !S->own_hi || !S->shard_at)
        return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory for %d units", S->rank, U);
    S->shard_n = 0;
    for (int u = 0; u < U; u++) {
        comm_chunk_range(unit_len(S, u), S->nranks, S->rank, &S->own_lo[u], &S->own_hi[u]);
        S->shard_at[u] = S->shard_n;
        S->shard_n += S->own_hi[u] - S->own_lo[u];
    }
    return DPS_OK;
}

/* One more slot of the largest unit's size. */
static dps_status add_slot(shard_rank *S, shard_slot *slots, int *n, const char *what)
{
    if (*n == SHARD_MAX_SLOTS)
        return dps_fail(DPS_ERR_RUNTIME, "rank %d: more than %d units' %s at once", S->rank,
                        SHARD_MAX_SLOTS, what);
    shard_slot *s = &slots[*n];
    *s = (shard_slot){.unit = -1, .ticket = -1, .issue = -1};
    DPS_TRY(be_buf_alloc(S->be, S->dev, net_unit_max(S->net) * sizeof(float), what, &s->buf));
    DPS_TRY(S->be->ops->event_create(S->be, S->dev, &s->ev));
    (*n)++;
    return DPS_OK;
}

static dps_status shard_enter(void *ctx, int unit, int backward, const float **params,
                              float **grads);

dps_status shard_open(shard_rank *S)
{
    size_t bytes = 0;
    DPS_TRY(lay_out(S));
    bytes = S->shard_n * sizeof(float);
    if (S->level == SHARD_PARAMETERS) {
        DPS_TRY(be_buf_alloc(S->be, S->dev, bytes, "parameters (this rank's shard)", &S->param_shard));
        for (int k = 0; k < 2; k++)
            DPS_TRY(add_slot(S, S->pslot, &S->npslots, "gathered unit parameters"));
    }
    if (S->level >= SHARD_GRADIENTS) {
        DPS_TRY(be_buf_alloc(S->be, S->dev, bytes, "gradients (this rank's shard)", &S->grad_shard));
        for (int k = 0; k < 2; k++) DPS_TRY(add_slot(S, S->gslot, &S->ngslots, "unit gradients"));
    }
    DPS_TRY(be_buf_alloc(S->be, S->dev, bytes, "optimizer state (this rank's shard)", &S->opt_state[0]));
    if (S->cfg->optimizer == OPT_ADAMW)
        DPS_TRY(be_buf_alloc(S->be, S->dev, bytes, "optimizer state (this rank's shard)",
                             &S->opt_state[1]));
    if (S->level < SHARD_PARAMETERS) {
        S->unit_ev = calloc((size_t)S->net->nunits, sizeof *S->unit_ev);
        if (!S->unit_ev) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory", S->rank);
        for (int u = 0; u < S->net->nunits; u++)
            DPS_TRY(S->be->ops->event_create(S->be, S->dev, &S->unit_ev[u]));
    }
    S->max_issued = shard_max_collectives(S->level, S->net->nunits, 0, S->cfg->accum, 1) + 1;
    S->issued = calloc((size_t)S->max_issued, sizeof *S->issued);
    if (!S->issued) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory", S->rank);
    for (int k = 0; k < S->max_issued; k++)
        DPS_TRY(S->be->ops->event_create(S->be, S->dev, &S->issued[k].ready));
    S->window = (net_window){shard_enter, S, NULL};
    return DPS_OK;
}

void shard_close(shard_rank *S)
{
    backend *be = S->be;
    shard_slot *all[] = {S->pslot, S->gslot};
    int n[] = {S->npslots, S->ngslots};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < n[k]; i++) {
            be_buf_free(be, &all[k][i].buf);
            if (all[k][i].ev) be->ops->event_destroy(be, all[k][i].ev);
        }
    for (int u = 0; S->unit_ev && u < S->net->nunits; u++)
        if (S->unit_ev[u]) be->ops->event_destroy(be, S->unit_ev[u]);
    free(S->unit_ev);
    S->unit_ev = NULL;
    be_buf_free(be, &S->param_shard);
    be_buf_free(be, &S->grad_shard);
    be_buf_free(be, &S->opt_state[0]);
    be_buf_free(be, &S->opt_state[1]);
    for (int k = 0; S->issued && k < S->max_issued; k++)
        if (S->issued[k].ready) be->ops->event_destroy(be, S->issued[k].ready);
    free(S->issued);
    S->issued = NULL;
    free(S->own_lo);
    free(S->own_hi);
    free(S->shard_at);
    S->own_lo = S->own_hi = S->shard_at = NULL;
}

dps_status shard_init_params(shard_rank *S, const float *h_params)
{
    const be_ops *o = S->be->ops;
    for (int k = 0; k < 2; k++)
        if (S->opt_state[k].ptr)
            DPS_TRY(o->memset0(S->be, S->st, S->opt_state[k].ptr, S->opt_state[k].bytes));
    for (int u = 0; S->level == SHARD_PARAMETERS && u < S->net->nunits; u++) {
        size_t n = S->own_hi[u] - S->own_lo[u];
        const float *src = h_params + S->net->units[u].lo + S->own_lo[u];
        if (n) DPS_TRY(o->copy(S->be, S->st, FLOATS(S->param_shard) + S->shard_at[u], S->dev, src,
                               DPS_HOST, n * sizeof(float)));
    }
    return o->stream_sync(S->be, S->st);
}

/* A slot free for another unit: its pending collective waited for first
 * (the compute stream's copies into it must not race it). */
static dps_status reuse(shard_rank *S, shard_slot *s)
{
    DPS_TRY(comm_wait_ticket(S->comm, S->st, s->ticket));
    s->ticket = -1;
    s->unit = -1;
    return DPS_OK;
}

/* Unit u's chunk of this rank into slot s, then the slot's all-gather,
 * after it on the stream. */
static dps_status issue_gather(shard_rank *S, shard_slot *s, int u, dps_phase ph)
{
    const be_ops *o = S->be->ops;
    size_t n = S->own_hi[u] - S->own_lo[u];
    DPS_TRY(reuse(S, s));
    s->unit = u;
    if (n) DPS_TRY(o->copy(S->be, S->st, FLOATS(s->buf) + S->own_lo[u], S->dev,
                           FLOATS(S->param_shard) + S->shard_at[u], S->dev, n * sizeof(float)));
    DPS_TRY(o->event_record(S->be, s->ev, S->st));
    DPS_TRY(comm_collective_async(S->comm, COMM_ALL_GATHER, s->buf.ptr, unit_len(S, u), COMM_F32,
                                  s->ev, &s->ticket));
    s->issue = note_issued(S, s->ticket, u, ph);
    return DPS_OK;
}

static shard_slot *holding(shard_slot *slots, int n, int unit)
{
    for (int i = 0; i < n; i++)
        if (slots[i].unit == unit) return &slots[i];
    return NULL;
}

/* Unit u's parameters gathered (or being gathered) into a slot other than
 * `keep`'s, the one the running unit reads. */
static dps_status gather(shard_rank *S, int u, const shard_slot *keep, dps_phase ph,
                         shard_slot **out)
{
    shard_slot *s = holding(S->pslot, S->npslots, u);
    for (int i = 0; !s && i < S->npslots; i++)
        if (&S->pslot[i] != keep) s = &S->pslot[i];
    if (s->unit != u) DPS_TRY(issue_gather(S, s, u, ph));
    *out = s;
    return DPS_OK;
}

/* Unit u's gradient slot: the open one, else a slot whose reduce-scatter
 * is folded into the shard first, else a new one (units open at once). */
static dps_status grad_slot(shard_rank *S, int u, shard_slot **out);

static dps_status shard_enter(void *ctx, int unit, int backward, const float **params,
                              float **grads)
{
    shard_rank *S = ctx;
    size_t lo = S->net->units[unit].lo;
    if (S->level == SHARD_PARAMETERS) {
        shard_slot *s, *next;
        dps_phase ph = backward ? PH_BACKWARD : PH_FORWARD;
        DPS_TRY(gather(S, unit, NULL, ph, &s));
        DPS_TRY(mark_ready(S, s->issue)); /* the compute needs it now */
        DPS_TRY(comm_wait_ticket(S->comm, S->st, s->ticket));
        *params = (const float *)FLOATS(s->buf) - lo;
        if (backward && unit > 0) DPS_TRY(gather(S, unit - 1, s, ph, &next)); /* BACKWARD_PRE */
    }
    if (!backward || S->level < SHARD_GRADIENTS) return DPS_OK;
    shard_slot *g;
    DPS_TRY(grad_slot(S, unit, &g));
    *grads = FLOATS(g->buf) - lo;
    return DPS_OK;
}

/* Slot s's reduce-scattered unit: this rank's chunk into the gradient
 * shard, copied by the micro-step's first fold, added by later ones. */
static dps_status fold(shard_rank *S, shard_slot *s)
{
    const be_ops *o = S->be->ops;
    int u = s->unit;
    size_t n = S->own_hi[u] - S->own_lo[u];
    float *dst = FLOATS(S->grad_shard) + S->shard_at[u];
    const float *src = FLOATS(s->buf) + S->own_lo[u];
    DPS_TRY(reuse(S, s));
    if (!n) return DPS_OK;
    if (S->micro == 0) return o->copy(S->be, S->st, dst, S->dev, src, S->dev, n * sizeof(float));
    return o->add(S->be, S->st, (int64_t)n, dst, src);
}

static dps_status grad_slot(shard_rank *S, int u, shard_slot **out)
{
    shard_slot *s = NULL;
    for (int i = 0; i < S->ngslots; i++)
        if (S->gslot[i].unit == u && S->gslot[i].open) s = &S->gslot[i];
    if (s) {
        *out = s;
        return DPS_OK;
    }
    for (int i = 0; !s && i < S->ngslots; i++)
        if (S->gslot[i].unit < 0) s = &S->gslot[i];
    for (int i = 0; !s && i < S->ngslots; i++) /* the oldest reduce-scatter issued */
        if (!S->gslot[i].open && (!s || S->gslot[i].ticket < s->ticket)) s = &S->gslot[i];
    if (s && s->unit >= 0) DPS_TRY(fold(S, s));
    if (!s) {
        DPS_TRY(add_slot(S, S->gslot, &S->ngslots, "unit gradients"));
        s = &S->gslot[S->ngslots - 1];
    }
    *s = (shard_slot){s->buf, s->ev, u, -1, 1, -1};
    DPS_TRY(S->be->ops->memset0(S->be, S->st, s->buf.ptr, unit_len(S, u) * sizeof(float)));
    *out = s;
    return DPS_OK;
}

void shard_backward_begin(shard_rank *S, int micro)
{
    S->micro = micro;
    S->next_rs = S->net->nunits - 1;
}

/* Unit u's gradients, complete: scaled by 1/N (the mean over ranks, as
 * ddp's buckets) and reduce-scattered in place, after them. */
static dps_status launch_rs(shard_rank *S, int u)
{
    const be_ops *o = S->be->ops;
    shard_slot *s;
    size_t n = unit_len(S, u);
    DPS_TRY(grad_slot(S, u, &s));
    DPS_TRY(o->scale_copy(S->be, S->st, (int64_t)n, FLOATS(s->buf), FLOATS(s->buf),
                          1.0f / (float)S->nranks));
    DPS_TRY(o->event_record(S->be, s->ev, S->st));
    s->open = 0;
    DPS_TRY(comm_collective_async(S->comm, COMM_REDUCE_SCATTER, s->buf.ptr, n, COMM_F32, s->ev,
                                  &s->ticket));
    return mark_ready(S, note_issued(S, s->ticket, u, PH_BACKWARD));
}

dps_status shard_grad_ready(shard_rank *S, size_t ready_lo)
{
    if (S->level < SHARD_GRADIENTS) return DPS_OK;
    while (S->next_rs >= 0 && S->net->units[S->next_rs].lo >= ready_lo)
        DPS_TRY(launch_rs(S, S->next_rs--));
    return DPS_OK;
}

dps_status shard_grads_done(shard_rank *S)
{
    if (S->level < SHARD_GRADIENTS) return DPS_OK;
    DPS_TRY(shard_grad_ready(S, 0));
    DPS_TRY(comm_wait_async(S->comm, S->st));
    for (int i = 0; i < S->ngslots; i++)
        if (S->gslot[i].unit >= 0) DPS_TRY(fold(S, &S->gslot[i]));
    return DPS_OK;
}

/* The optimizer on unit u's chunk. */
static dps_status update_unit(shard_rank *S, int u, float *params, const float *grads,
                              dps_opt_hparams hp)
{
    const be_ops *o = S->be->ops;
    size_t n = S->own_hi[u] - S->own_lo[u], flat = S->net->units[u].lo + S->own_lo[u];
    if (!n) return DPS_OK;
    float *p = S->level == SHARD_PARAMETERS ? FLOATS(S->param_shard) + S->shard_at[u] : params + flat;
    const float *g = S->level >= SHARD_GRADIENTS ? FLOATS(S->grad_shard) + S->shard_at[u] : grads + flat;
    float *m = FLOATS(S->opt_state[0]) + S->shard_at[u];
    if (S->cfg->optimizer == OPT_SGD) return o->sgd(S->be, S->st, (int64_t)n, p, g, m, hp);
    return o->adamw(S->be, S->st, (int64_t)n, p, g, m, FLOATS(S->opt_state[1]) + S->shard_at[u], hp);
}

dps_status shard_optimizer(shard_rank *S, float *params, const float *grads, dps_opt_hparams hp)
{
    for (int u = 0; u < S->net->nunits; u++) DPS_TRY(update_unit(S, u, params, grads, hp));
    if (S->level == SHARD_PARAMETERS) return DPS_OK;
    /* every rank's updated chunks into every rank's parameters */
    for (int u = 0; u < S->net->nunits; u++) {
        DPS_TRY(S->be->ops->event_record(S->be, S->unit_ev[u], S->st));
        int ticket;
        DPS_TRY(comm_collective_async(S->comm, COMM_ALL_GATHER, params + S->net->units[u].lo,
                                      unit_len(S, u), COMM_F32, S->unit_ev[u], &ticket));
        DPS_TRY(mark_ready(S, note_issued(S, ticket, u, PH_OPTIMIZER)));
        }
    return comm_wait_async(S->comm, S->st);
}

void shard_step_end(shard_rank *S)
{
    for (int i = 0; i < S->npslots; i++) /* the optimizer changed what they gathered */
        S->pslot[i] = (shard_slot){S->pslot[i].buf, S->pslot[i].ev, -1, -1, 0, -1};
    for (int i = 0; i < S->ngslots; i++) S->gslot[i].ticket = -1;
}

dps_status shard_gather_all(shard_rank *S, float *h_params)
{
    const be_ops *o = S->be->ops;
    shard_slot *s = &S->pslot[0];
    for (int u = 0; u < S->net->nunits; u++) {
        size_t n = S->own_hi[u] - S->own_lo[u], len = unit_len(S, u);
        DPS_TRY(reuse(S, s));
        if (n) DPS_TRY(o->copy(S->be, S->st, FLOATS(s->buf) + S->own_lo[u], S->dev,
                               FLOATS(S->param_shard) + S->shard_at[u], S->dev, n * sizeof(float)));
        DPS_TRY(o->stream_sync(S->be, S->st));
        DPS_TRY(comm_all_gather(S->comm, s->buf.ptr, len, COMM_F32));
        if (S->rank == 0)
            DPS_TRY(o->copy(S->be, S->st, h_params + S->net->units[u].lo, DPS_HOST, s->buf.ptr,
                            S->dev, len * sizeof(float)));
        DPS_TRY(o->stream_sync(S->be, S->st));
    }
    for (int i = 0; i < S->npslots; i++) S->pslot[i].unit = -1;
    return DPS_OK;
}
