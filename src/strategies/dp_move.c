/* dp's replicate and reduce (see dp_state.h), two ways:
 * - torch, as torch.nn.parallel does it: broadcast_coalesced and
 *   reduce_add_coalesced over groups of whole tensors of at most 10 MiB,
 *   each group flattened into a coalescing buffer, one NCCL call per group
 *   (or peer copies), the reduce summing into a new parameter-sized buffer
 *   on device 0 while replica 0's gradients are still alive;
 * - lean: the lower bound, straight from the parameters and into replica
 *   0's gradients, one NCCL call over the whole buffer or 10 MiB peer copies. */
#include <stdlib.h>

#include "model/bucket.h"
#include "strategies/dp.h"
#include "strategies/dp_state.h"

void dp_count(dp_state *st, int slot, dps_phase ph, dps_link link, size_t bytes)
{
    st->traffic[slot].phase_bytes[ph] += (double)bytes;
    st->traffic[slot].link_bytes[link] += (double)bytes;
}

dps_status dp_p2p(dp_state *st, dps_phase ph, int dst, void *dptr, int src, const void *sptr,
                  size_t bytes, be_stream *on)
{
    DPS_TRY(st->be->ops->copy(st->be, on, dptr, st->s[dst].dev, sptr, st->s[src].dev, bytes));
    if (dst != src) {
        dp_count(st, src, ph, LINK_P2P_SENT, bytes);
        dp_count(st, dst, ph, LINK_P2P_RECV, bytes);
    }
    return DPS_OK;
}

/* torch's _take_tensors over the model's tensors: runs of whole tensors of
 * at most DP_COALESCE_BYTES, a larger one alone. Fills out (n + 1 at most)
 * and returns the number of groups. */
static int group_tensors(const size_t *counts, int n, dp_group *out)
{
    size_t limit = DP_COALESCE_BYTES / sizeof(float), lo = 0;
    int ngroups = 0;
    for (int t = 0; t < n; t++) {
        dp_group *g = ngroups ? &out[ngroups - 1] : NULL;
        if (g && g->hi - g->lo + counts[t] <= limit) g->hi += counts[t];
        else out[ngroups++] = (dp_group){lo, lo + counts[t]};
        lo += counts[t];
    }
    return ngroups;
}

dps_status dp_make_groups(dp_state *st)
{
    const net *n = st->net;
    st->groups = calloc((size_t)n->ntensors + 1, sizeof *st->groups);
    if (!st->groups) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for dp's groups");
    st->ngroups = group_tensors(n->counts, n->ntensors, st->groups);
    return DPS_OK;
}

size_t dp_largest_group_floats(const net *n)
{
    dp_group *groups = malloc(((size_t)n->ntensors + 1) * sizeof *groups);
    size_t most = 0;
    if (!groups) return DP_COALESCE_BYTES / sizeof(float); /* no host memory: the coalescing unit */
    int ng = group_tensors(n->counts, n->ntensors, groups);
    for (int k = 0; k < ng; k++)
        if (groups[k].hi - groups[k].lo > most) most = groups[k].hi - groups[k].lo;
    free(groups);
    return most;
}

/* An NCCL broadcast (replicate) or reduce of `bytes` over every slot, in
 * nccl-tests' bus bytes (its busbw factor is 1 for both): the buffer
 * leaves device 0 once and reaches every other device once (broadcast), or
 * leaves every other device once and reaches device 0 once (reduce). How
 * NCCL relays it among the others (its ring forwards it on) is the
 * algorithm's and cannot be known here: not counted; NVML's counters are
 * what the links carried. */
static void count_nccl(dp_state *st, dps_phase ph, size_t bytes)
{
    int bcast = ph == PH_REPLICATE;
    if (st->nslots > 1) dp_count(st, 0, ph, bcast ? LINK_P2P_SENT : LINK_P2P_RECV, bytes);
    for (int i = 1; i < st->nslots; i++)
        dp_count(st, i, ph, bcast ? LINK_P2P_RECV : LINK_P2P_SENT, bytes);
}

/* A device-local copy (flatten) of n floats. */
static dps_status flatten(dp_state *st, int slot, float *dst, const float *src, size_t n)
{
    dp_slot *s = &st->s[slot];
    return st->be->ops->copy(st->be, s->st, dst, s->dev, src, s->dev, n * sizeof(float));
}

/* One NCCL collective over every slot: broadcast from or reduce onto slot 0. */
static dps_status nccl_whole(dp_state *st, dps_phase ph)
{
    void *bufs[DPS_MAX_DEVICES], *streams[DPS_MAX_DEVICES];
    size_t bytes = st->nparams * sizeof(float);
    for (int i = 0; i < st->nslots; i++) {
        dp_slot *s = &st->s[i];
        bufs[i] = ph == PH_REPLICATE ? s->params.ptr : s->grads.ptr;
        streams[i] = st->be->ops->native_stream(st->be, s->st);
        if (i && ph == PH_REPLICATE)
            DPS_TRY(st->be->ops->stream_wait(st->be, s->st, st->timer->ev[0][PH_LOAD][1]));
        DPS_TRY(ptimer_begin(st->timer, i, ph));
    }
    count_nccl(st, ph, bytes);
    DPS_TRY(ph == PH_REPLICATE ? comm_group_broadcast(st->nccl, bufs, st->nparams, streams)
                               : comm_group_reduce(st->nccl, bufs, NULL, st->nparams, streams));
    for (int i = 0; i < st->nslots; i++) DPS_TRY(ptimer_end(st->timer, i, ph));
    return DPS_OK;
}

/* lean, peer copies: each replica pulls the parameters, 10 MiB at a time. */
static dps_status replicate_lean(dp_state *st)
{
    size_t total = st->nparams * sizeof(float);
    DPS_TRY(ptimer_begin(st->timer, 0, PH_REPLICATE));
    for (int i = 1; i < st->nslots; i++) {
        dp_slot *s = &st->s[i];
        DPS_TRY(st->be->ops->stream_wait(st->be, s->st, st->timer->ev[0][PH_LOAD][1]));
        DPS_TRY(ptimer_begin(st->timer, i, PH_REPLICATE));
        for (size_t off = 0; off < total; off += DP_COALESCE_BYTES) {
            size_t len = total - off < DP_COALESCE_BYTES ? total - off : DP_COALESCE_BYTES;
            DPS_TRY(dp_p2p(st, PH_REPLICATE, i, (char *)s->params.ptr + off, 0,
                           (char *)st->s[0].params.ptr + off, len, s->st));
        }
        DPS_TRY(ptimer_end(st->timer, i, PH_REPLICATE));
    }
    return ptimer_end(st->timer, 0, PH_REPLICATE);
}

/* torch, one group: flattened on device 0, then to every replica's
 * parameters (which are views of the broadcast's output in PyTorch). */
static dps_status replicate_group(dp_state *st, const dp_group *g, void *const *streams)
{
    dp_slot *s0 = &st->s[0];
    size_t n = g->hi - g->lo;
    DPS_TRY(flatten(st, 0, s0->flat.ptr, (const float *)s0->params.ptr + g->lo, n));
    if (st->nccl) {
        void *bufs[DPS_MAX_DEVICES];
        bufs[0] = s0->flat.ptr;
        for (int i = 1; i < st->nslots; i++) bufs[i] = (float *)st->s[i].params.ptr + g->lo;
        count_nccl(st, PH_REPLICATE, n * sizeof(float));
        return comm_group_broadcast(st->nccl, bufs, n, streams);
    }
    for (int i = 1; i < st->nslots; i++)
        DPS_TRY(dp_p2p(st, PH_REPLICATE, i, (float *)st->s[i].params.ptr + g->lo, 0, s0->flat.ptr,
                       n * sizeof(float), s0->st));
    return DPS_OK;
}

/* torch: every group; with peer copies the whole phase runs on device 0's
 * stream (each replica's time is the phase's), with NCCL on every stream. */
static dps_status replicate_torch(dp_state *st)
{
    void *streams[DPS_MAX_DEVICES];
    int where[DPS_MAX_DEVICES];
    for (int i = 0; i < st->nslots; i++) {
        streams[i] = st->be->ops->native_stream(st->be, st->s[i].st);
        where[i] = st->nccl ? i : 0;
        DPS_TRY(ptimer_begin_on(st->timer, i, PH_REPLICATE, where[i]));
    }
    for (int k = 0; k < st->ngroups; k++) DPS_TRY(replicate_group(st, &st->groups[k], streams));
    for (int i = st->nslots - 1; i >= 0; i--) /* slot 0's end last: the replicas wait for it */
        DPS_TRY(ptimer_end_on(st->timer, i, PH_REPLICATE, where[i]));
    return DPS_OK;
}

dps_status dp_replicate(dp_state *st)
{
    if (st->cfg->dp_impl == DPIMPL_TORCH) return replicate_torch(st);
    return st->nccl ? nccl_whole(st, PH_REPLICATE) : replicate_lean(st);
}

/* lean, peer copies: 10 MiB at a time through a staging buffer into replica
 * 0's gradients, on device 0's stream. */
static dps_status reduce_lean(dp_state *st)
{
    backend *be = st->be;
    dp_slot *s0 = &st->s[0];
    size_t total = st->nparams * sizeof(float);
    DPS_TRY(ptimer_begin(st->timer, 0, PH_REDUCE));
    for (int i = 1; i < st->nslots; i++) {
        dp_slot *s = &st->s[i];
        DPS_TRY(be->ops->stream_wait(be, s0->st, st->timer->ev[i][PH_BACKWARD][1]));
        DPS_TRY(ptimer_begin_on(st->timer, i, PH_REDUCE, 0)); /* copies and adds on slot 0's stream */
        for (size_t off = 0; off < total; off += DP_COALESCE_BYTES) {
            size_t len = total - off < DP_COALESCE_BYTES ? total - off : DP_COALESCE_BYTES;
            DPS_TRY(dp_p2p(st, PH_REDUCE, 0, st->staging.ptr, i, (char *)s->grads.ptr + off, len,
                           s0->st));
            DPS_TRY(be->ops->add(be, s0->st, (int64_t)(len / sizeof(float)),
                                 (float *)((char *)s0->grads.ptr + off), st->staging.ptr));
        }
        DPS_TRY(ptimer_end_on(st->timer, i, PH_REDUCE, 0));
    }
    return ptimer_end(st->timer, 0, PH_REDUCE);
}

/* torch, peer copies, one group (reduce_add): each device flattens its part;
 * device 0's becomes the sum's first term in the new buffer, every other one
 * is copied to device 0 and added. Events order each device's coalescing
 * buffer between its flatten and device 0's copy. */
static dps_status reduce_group_p2p(dp_state *st, const dp_group *g)
{
    backend *be = st->be;
    dp_slot *s0 = &st->s[0];
    size_t n = g->hi - g->lo;
    float *out = (float *)st->reduce_out.ptr + g->lo;
    DPS_TRY(flatten(st, 0, s0->flat.ptr, (const float *)s0->grads.ptr + g->lo, n));
    DPS_TRY(flatten(st, 0, out, s0->flat.ptr, n));
    for (int i = 1; i < st->nslots; i++) {
        dp_slot *s = &st->s[i];
        if (g != st->groups) DPS_TRY(be->ops->stream_wait(be, s->st, s->taken_ev));
        DPS_TRY(flatten(st, i, s->flat.ptr, (const float *)s->grads.ptr + g->lo, n));
        DPS_TRY(be->ops->event_record(be, s->flat_ev, s->st));
        DPS_TRY(be->ops->stream_wait(be, s0->st, s->flat_ev));
        DPS_TRY(dp_p2p(st, PH_REDUCE, 0, st->staging.ptr, i, s->flat.ptr, n * sizeof(float), s0->st));
        DPS_TRY(be->ops->event_record(be, s->taken_ev, s0->st));
        DPS_TRY(be->ops->add(be, s0->st, (int64_t)n, out, st->staging.ptr));
    }
    return DPS_OK;
}

/* torch, NCCL, one group: flattened on every device, one ncclReduce into the
 * new buffer on device 0. */
static dps_status reduce_group_nccl(dp_state *st, const dp_group *g, void *const *streams)
{
    void *bufs[DPS_MAX_DEVICES];
    size_t n = g->hi - g->lo;
    for (int i = 0; i < st->nslots; i++) {
        dp_slot *s = &st->s[i];
        DPS_TRY(flatten(st, i, s->flat.ptr, (const float *)s->grads.ptr + g->lo, n));
        bufs[i] = s->flat.ptr;
    }
    count_nccl(st, PH_REDUCE, n * sizeof(float));
    return comm_group_reduce(st->nccl, bufs, (float *)st->reduce_out.ptr + g->lo, n, streams);
}

static dps_status reduce_torch(dp_state *st)
{
    void *streams[DPS_MAX_DEVICES];
    int where[DPS_MAX_DEVICES];
    for (int i = 0; i < st->nslots; i++) {
        streams[i] = st->be->ops->native_stream(st->be, st->s[i].st);
        where[i] = st->nccl ? i : 0;
        if (i && !st->nccl)
            DPS_TRY(st->be->ops->stream_wait(st->be, st->s[0].st, st->timer->ev[i][PH_BACKWARD][1]));
        DPS_TRY(ptimer_begin_on(st->timer, i, PH_REDUCE, where[i]));
    }
    for (int k = 0; k < st->ngroups; k++)
        DPS_TRY(st->nccl ? reduce_group_nccl(st, &st->groups[k], streams)
                         : reduce_group_p2p(st, &st->groups[k]));
    for (int i = st->nslots - 1; i >= 0; i--)
        DPS_TRY(ptimer_end_on(st->timer, i, PH_REDUCE, where[i]));
    return DPS_OK;
}

dps_status dp_reduce(dp_state *st)
{
    if (st->cfg->dp_impl == DPIMPL_TORCH) return reduce_torch(st);
    return st->nccl ? nccl_whole(st, PH_REDUCE) : reduce_lean(st);
}
