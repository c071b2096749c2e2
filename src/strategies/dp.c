/* The dp mode (see dp.h). Every step, as PyTorch 2.x DataParallel does it:
 * load -> scatter -> replicate -> forward (one thread per device) -> gather
 * -> loss on device 0 -> backward -> reduce onto device 0 -> optimizer on
 * device 0 (--dp-impl lean: replicate before scatter, as it always could).
 * Slot 0 is device 0, the primary, which also holds the master parameters,
 * the whole batch, the gathered logits and the optimizer state. Replicate
 * and reduce are in dp_move.c, the loss in dp_loss.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/nvtx.h"
#include "core/util.h"
#include "strategies/dp.h"
#include "strategies/dp_state.h"

enum { JOB_FORWARD, JOB_BACKWARD };

int dp_chunk_sizes(int batch, int n, int *sizes)
{
    int chunk = (batch + n - 1) / n, nchunks = 0;
    for (int i = 0; i < n; i++) {
        int left = batch - i * chunk;
        sizes[i] = left <= 0 ? 0 : (left < chunk ? left : chunk);
        if (sizes[i]) nchunks++;
    }
    return nchunks;
}

static dps_status alloc_slot(dp_state *st, int i, size_t pbytes)
{
    backend *be = st->be;
    dp_slot *s = &st->s[i];
    const net *m = st->net;
    size_t rows = (size_t)s->rows;
    DPS_TRY(be_buf_alloc(be, s->dev, pbytes, i ? "replica parameters" : "parameters", &s->params));
    DPS_TRY(be_buf_alloc(be, s->dev, pbytes, "gradients", &s->grads));
    if (i) { /* slot 0's are device 0's batch and logits gradient (alloc_primary) */
        DPS_TRY(be_buf_alloc(be, s->dev, (size_t)s->samples * m->input * sizeof(float), "input chunk",
                             &s->x));
        if (!dp_autocast(st)) /* under autocast they are the model's half ones */
            DPS_TRY(be_buf_alloc(be, s->dev, rows * (size_t)m->classes * sizeof(float),
                                 "replica logits, then their gradient", &s->logits));
        s->xv = s->x.ptr;
        s->logitsv = s->dlogitsv = s->logits.ptr;
    }
    DPS_TRY(net_acts_alloc(be, s->dev, m, s->samples, st->cfg->precision, st->cfg->tf32, &s->acts));
    s->acts.mlp.logits16_out = s->acts.mlp.half != BE_F32; /* gathered in bf16 */
    return DPS_OK;
}

/* The bytes of one logit as the replicas hand them over: bf16 under
 * autocast, fp32 otherwise. */
static size_t logit_bytes(const dp_state *st)
{
    return dp_autocast(st) ? 2 : sizeof(float);
}

/* Whether replicate and reduce run (DataParallel over one device calls the
 * module directly). */
static int coalesced(const dp_state *st)
{
    return st->cfg->dp_impl == DPIMPL_TORCH && st->nslots > 1;
}

/* DataParallel's own memory (torch): on device 0 the log-probabilities and
 * their gradient (n x C each) and the reduce's output (parameter-sized), on
 * every device a coalescing buffer of one group, and the groups. */
static dps_status alloc_torch(dp_state *st, size_t pbytes)
{
    backend *be = st->be;
    int d0 = st->s[0].dev;
    size_t nc = (size_t)st->rows_total * (size_t)st->net->classes * sizeof(float);
    DPS_TRY(be_buf_alloc(be, d0, nc, "log-probabilities", &st->logp));
    DPS_TRY(be_buf_alloc(be, d0, nc, "log-probabilities gradient", &st->dlogp));
    if (!coalesced(st)) return DPS_OK;
    DPS_TRY(dp_make_groups(st));
    size_t most = dp_largest_group_floats(st->net) * sizeof(float);
    DPS_TRY(be_buf_alloc(be, d0, pbytes, "reduce output", &st->reduce_out));
    for (int i = 0; i < st->nslots; i++) {
        dp_slot *s = &st->s[i];
        DPS_TRY(be_buf_alloc(be, s->dev, most, "coalescing buffer", &s->flat));
        if (!i) continue; /* the replicas' buffers are ordered against device 0's copies */
        DPS_TRY(be->ops->event_create(be, s->dev, &s->flat_ev));
        DPS_TRY(be->ops->event_create(be, d0, &s->taken_ev));
    }
    return DPS_OK;
}

/* The loss's logits on device 0, n x C each (dp_state.h): fp32 ones and
 * their gradient, one buffer under torch's autocast (logits.float(), freed
 * once log_softmax has read it: the MLP's cast in the loss, a model file's
 * its own, as ddp's); the gathered half ones when the MLP gathers. */
static const char *loss_logits_name(const dp_state *st, int reuse)
{
    if (st->half == BE_F32) return dp_gathers(st) ? "gathered logits" : "logits";
    if (!reuse) return "loss's fp32 logits";
    return dp_gathers(st) && !dp_autocast(st) ? "gathered fp32 logits, then their gradient"
                                             : "loss's fp32 logits, then their gradient";
}

static dps_status alloc_loss_logits(dp_state *st, size_t nc)
{
    backend *be = st->be;
    int d0 = st->s[0].dev, reuse = st->half != BE_F32 && st->cfg->dp_impl == DPIMPL_TORCH;
    const char *what = loss_logits_name(st, reuse);
    DPS_TRY(be_buf_alloc(be, d0, nc * sizeof(float), what, &st->logits_full));
    if (!reuse) DPS_TRY(be_buf_alloc(be, d0, nc * sizeof(float), "logits gradient", &st->dlogits_full));
    st->logitsv = st->logits_full.ptr;
    st->dlogitsv = reuse ? st->logits_full.ptr : st->dlogits_full.ptr;
    if (!dp_autocast(st)) return DPS_OK;
    st->logits16v = st->s[0].acts.mlp.logits16_at;
    if (!dp_gathers(st)) return DPS_OK;
    DPS_TRY(be_buf_alloc(be, d0, nc * be_dtype_bytes(st->half), "gathered half logits, then their "
                         "gradient", &st->logits16_full));
    st->logits16v = st->logits16_full.ptr;
    /* device 0's replica writes its rows there: its output freed by the
     * gather and its gradient a view in PyTorch, neither a buffer of its own */
    model_acts_logits16_in(be, &st->s[0].acts.mlp, st->logits16v);
    return DPS_OK;
}

/* Device 0's extra memory: the whole batch, the gathered logits and their
 * gradient, the loss, the reduce staging buffer and the optimizer state. */
static dps_status alloc_primary(dp_state *st, size_t pbytes)
{
    backend *be = st->be;
    int d0 = st->s[0].dev;
    size_t n = (size_t)st->rows_total, samples = (size_t)st->micro_batch;
    const net *m = st->net;
    DPS_TRY(be_buf_alloc(be, d0, pbytes, "optimizer state", &st->opt_state[0]));
    if (st->cfg->optimizer == OPT_ADAMW)
        DPS_TRY(be_buf_alloc(be, d0, pbytes, "optimizer state", &st->opt_state[1]));
    DPS_TRY(be_buf_alloc(be, d0, samples * m->input * sizeof(float), "input batch", &st->x_full));
    if (st->cfg->accum > 1)
        DPS_TRY(be_buf_alloc(be, d0, pbytes, "accumulated gradients", &st->grad_acc));
    DPS_TRY(be_buf_alloc(be, d0, n * sizeof(int32_t), "labels", &st->labels_full));
    DPS_TRY(alloc_loss_logits(st, n * (size_t)m->classes));
    DPS_TRY(be_buf_alloc(be, d0, n * sizeof(float), "per-token loss", &st->row_loss));
    DPS_TRY(be_buf_alloc(be, d0, (size_t)st->cfg->accum * sizeof(float), "loss", &st->loss));
    if (st->nslots > 1) { /* lean copies 10 MiB at a time, torch a whole group */
        size_t stage = pbytes < DP_COALESCE_BYTES ? pbytes : DP_COALESCE_BYTES;
        if (coalesced(st)) stage = dp_largest_group_floats(m) * sizeof(float);
        DPS_TRY(be_buf_alloc(be, d0, stage, "reduce staging buffer", &st->staging));
    }
    st->s[0].xv = st->x_full.ptr;
    /* gathered: its rows come first in the gradient; alone: the loss's own */
    st->s[0].logitsv = dp_gathers(st) ? st->dlogitsv : st->logitsv;
    st->s[0].dlogitsv = st->dlogitsv;
    return st->cfg->dp_impl == DPIMPL_TORCH ? alloc_torch(st, pbytes) : DPS_OK;
}

/* NCCL for replicate and reduce when asked for (or by default) on GPUs that
 * are all distinct; otherwise peer copies and reduce-add kernels. */
static dps_status dp_comm_setup(dp_state *st, const int *devs)
{
    const dps_config *c = st->cfg;
    if (c->dp_comm == DPCOMM_P2P || st->be->kind != BE_CUDA || st->nslots < 2 ||
        config_shares_device(c))
        return DPS_OK;
    if (!comm_group_available()) return DPS_OK;
    return comm_group_open(&st->nccl, devs, st->nslots, c->timeout_s * 1e3);
}

static dps_status dp_setup(dp_state *st)
{
    const dps_config *c = st->cfg;
    backend *be = st->be;
    int samples[DPS_MAX_DEVICES];
    st->micro_batch = c->global_batch / c->accum;
    st->nslots = dp_chunk_sizes(st->micro_batch, c->ngpus, samples);
    DPS_TRY(config_net(c, &st->own_net, &st->net));
    st->rows_total = st->micro_batch * st->net->rows;
    st->rows_step = c->global_batch * st->net->rows;
    st->nparams = st->net->params;
    size_t pbytes = st->nparams * sizeof(float);
    be_stream *streams[DPS_MAX_DEVICES];
    int devs[DPS_MAX_DEVICES];
    int64_t sample0 = 0;
    for (int i = 0; i < st->nslots; i++) {
        dp_slot *s = &st->s[i];
        s->dev = devs[i] = c->devices[i];
        s->samples = samples[i];
        s->sample0 = sample0;
        s->rows = samples[i] * st->net->rows;
        s->row0 = sample0 * st->net->rows;
        sample0 += samples[i];
        DPS_TRY(be->ops->stream_create(be, s->dev, &s->st));
        char name[32];
        snprintf(name, sizeof name, "compute-%d", s->dev);
        be->ops->name_stream(be, s->st, name);
        streams[i] = s->st;
        DPS_TRY(be_mark_baseline(be, s->dev));
    }
    DPS_TRY(ptimer_init_n(&st->timers, c->accum, be, st->nslots, devs, streams,
                          c->inject_slowdown_pct / 100.0, c->slowdown_rank));
    st->timer = &st->timers[0];
    DPS_TRY(scaler_init(&st->scaler, c, be, st->s[0].dev));
    /* device 0 first: its extra memory is what runs out first */
    DPS_TRY(alloc_slot(st, 0, pbytes));
    op_trace_init(&st->optr, be, st->s[0].dev, st->s[0].st);
    net_acts_trace(st->net, &st->s[0].acts, &st->optr);
    DPS_TRY(alloc_primary(st, pbytes));
    for (int i = 1; i < st->nslots; i++) DPS_TRY(alloc_slot(st, i, pbytes));
    DPS_TRY(dp_comm_setup(st, devs));
    DPS_TRY(be->ops->host_alloc(be, (size_t)c->accum * sizeof(float), (void **)&st->h_loss));
    /* each next batch made during the step, but not on the host backend,
     * whose devices are the cores that would make it */
    return batches_start(&st->batches, be, st->net, c->seed, 0, c->global_batch, 1, 0,
                         c->warmup + c->steps, !be->emulated);
}

/* Frees everything; `run` is the run's status (a failed run's NCCL
 * communicators are aborted, never destroyed). */
static void dp_teardown(dp_state *st, dps_status run)
{
    backend *be = st->be;
    if (st->pool_up) pool_stop(&st->pool);
    batches_stop(&st->batches);
    comm_group_close(st->nccl, run);
    ptimer_free_n(&st->timers, st->cfg->accum);
    if (st->optr.be) op_trace_free(&st->optr);
    scaler_free(&st->scaler, be);
    for (int i = 0; i < st->nslots; i++) {
        dp_slot *s = &st->s[i];
        if (st->net) net_acts_free(be, st->net, &s->acts);
        be_buf_free(be, &s->params);
        be_buf_free(be, &s->grads);
        be_buf_free(be, &s->x);
        be_buf_free(be, &s->logits);
        be_buf_free(be, &s->flat);
        if (s->flat_ev) be->ops->event_destroy(be, s->flat_ev);
        if (s->taken_ev) be->ops->event_destroy(be, s->taken_ev);
        if (s->st) be->ops->stream_destroy(be, s->st);
    }
    dps_buf *bufs[] = {&st->x_full, &st->labels_full, &st->logits_full, &st->dlogits_full,
                       &st->logits16_full,
                       &st->row_loss, &st->loss, &st->staging, &st->opt_state[0],
                       &st->opt_state[1], &st->logp, &st->dlogp, &st->reduce_out, &st->grad_acc};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be_buf_free(be, bufs[i]);
    if (st->h_loss) be->ops->host_free(be, st->h_loss);
    free(st->groups);
    net_free(&st->own_net);
}

/* Forward of one replica: with torch's replicate its parameters arrive on
 * device 0's stream, so it waits for that before its forward begins. */
static dps_status worker_forward(dp_state *st, int slot)
{
    dp_slot *s = &st->s[slot];
    backend *be = st->be;
    if (slot && coalesced(st))
        DPS_TRY(be->ops->stream_wait(be, s->st, st->timer->ev[0][PH_REPLICATE][1]));
    DPS_TRY(ptimer_begin(st->timer, slot, PH_FORWARD));
    float *params = slot && dps_test_plant("dp_foreign_params") ? st->s[0].params.ptr : s->params.ptr;
    DPS_TRY(net_forward(be, s->st, st->net, params, &s->acts, s->samples, s->xv, s->logitsv));
    return ptimer_end(st->timer, slot, PH_FORWARD);
}

/* Where replica `slot`'s rows of the logits' gradient are on device 0, and
 * where they go: fp32 into its buffer, bf16 into its autocast one. */
static void dlogits_rows(dp_state *st, int slot, const void **from, void **to)
{
    dp_slot *s = &st->s[slot];
    size_t first = (size_t)s->row0 * (size_t)st->net->classes;
    if (dp_autocast(st)) {
        *from = (const uint16_t *)st->logits16v + first;
        *to = s->acts.mlp.logits16_at;
    } else {
        *from = st->dlogitsv + first;
        *to = s->dlogitsv;
    }
}

/* Backward of one replica. A replica other than device 0's first waits for
 * the loss and receives its rows of the logits' gradient: the gather's
 * backward, which is a scatter from device 0 (torch's Gather.backward is
 * Scatter.apply), timed as the second part of its scatter phase. Under
 * autocast the rows are bf16 (device 0's first take theirs locally). */
static dps_status worker_backward(dp_state *st, int slot)
{
    dp_slot *s = &st->s[slot];
    backend *be = st->be;
    const void *from;
    void *to;
    dlogits_rows(st, slot, &from, &to);
    size_t bytes = (size_t)s->rows * (size_t)st->net->classes * logit_bytes(st);
    if (slot) {
        DPS_TRY(be->ops->stream_wait(be, s->st, st->timer->ev[0][PH_LOSS][1]));
        DPS_TRY(ptimer_begin_more(st->timer, slot, PH_SCATTER));
        DPS_TRY(be->ops->copy(be, s->st, to, s->dev, from, st->s[0].dev, bytes));
        DPS_TRY(ptimer_end_more(st->timer, slot, PH_SCATTER));
    }
    DPS_TRY(ptimer_begin(st->timer, slot, PH_BACKWARD));
    if (!slot && to != from) /* device 0's rows under autocast, from the gathered ones */
        DPS_TRY(be->ops->copy(be, s->st, to, s->dev, from, s->dev, bytes));
    DPS_TRY(net_backward(be, s->st, st->net, s->params.ptr, &s->acts, s->samples, s->xv,
                         dp_autocast(st) ? NULL : s->dlogitsv, s->grads.ptr, NULL, NULL));
    return ptimer_end(st->timer, slot, PH_BACKWARD);
}

/* Forward or backward of one replica, on its own thread. */
static dps_status dp_worker(void *ctx, int slot, int job)
{
    dp_state *st = ctx;
    DPS_TRY(st->be->ops->set_device(st->be, st->s[slot].dev));
    nvtx_push_phase(job == JOB_FORWARD ? PH_FORWARD : PH_BACKWARD);
    dps_status rc = job == JOB_FORWARD ? worker_forward(st, slot) : worker_backward(st, slot);
    nvtx_pop();
    return rc;
}

static dps_status phase_load(dp_state *st)
{
    backend *be = st->be;
    dp_slot *s0 = &st->s[0];
    size_t n = (size_t)st->rows_total;
    size_t xb = (size_t)st->micro_batch * st->net->input * sizeof(float);
    const float *x = st->h_x + (size_t)st->micro * st->micro_batch * st->net->input;
    const int32_t *labels = st->h_labels + (size_t)st->micro * n;
    DPS_TRY(ptimer_begin(st->timer, 0, PH_LOAD));
    DPS_TRY(be->ops->copy(be, s0->st, st->x_full.ptr, s0->dev, x, DPS_HOST, xb));
    DPS_TRY(be->ops->copy(be, s0->st, st->labels_full.ptr, s0->dev, labels, DPS_HOST, n * sizeof(int32_t)));
    dp_count(st, 0, PH_LOAD, LINK_H2D, xb + n * sizeof(int32_t));
    return ptimer_end(st->timer, 0, PH_LOAD);
}

static dps_status phase_scatter(dp_state *st)
{
    size_t input = st->net->input;
    DPS_TRY(ptimer_begin(st->timer, 0, PH_SCATTER));
    for (int i = 1; i < st->nslots; i++) {
        dp_slot *s = &st->s[i];
        DPS_TRY(st->be->ops->stream_wait(st->be, s->st, st->timer->ev[0][PH_LOAD][1]));
        DPS_TRY(ptimer_begin(st->timer, i, PH_SCATTER));
        DPS_TRY(dp_p2p(st, PH_SCATTER, i, s->x.ptr, 0, (float *)st->x_full.ptr + (size_t)s->sample0 * input,
                       (size_t)s->samples * input * sizeof(float), s->st));
        DPS_TRY(ptimer_end(st->timer, i, PH_SCATTER));
    }
    return ptimer_end(st->timer, 0, PH_SCATTER);
}

/* Outputs of every replica copied to device 0 and concatenated: half precision
 * under autocast (the loss casts them to fp32), fp32 otherwise. */
static dps_status phase_gather(dp_state *st)
{
    size_t row = (size_t)st->net->classes * logit_bytes(st);
    int half = dp_autocast(st);
    char *into = half ? st->logits16v : (char *)st->logitsv;
    dp_slot *s0 = &st->s[0];
    DPS_TRY(ptimer_begin(st->timer, 0, PH_GATHER));
    for (int i = 0; dp_gathers(st) && i < st->nslots; i++) {
        dp_slot *s = &st->s[i];
        if (!dps_test_plant("dp_gather_unwaited"))
            DPS_TRY(st->be->ops->stream_wait(st->be, s0->st, st->timer->ev[i][PH_FORWARD][1]));
        if (i) DPS_TRY(ptimer_begin_on(st->timer, i, PH_GATHER, 0)); /* copies run on slot 0's stream */
        char *to = into + (size_t)s->row0 * row;
        const void *from = half ? s->acts.mlp.logits16_at : (const void *)s->logitsv;
        if (from != to) /* device 0's half rows are written in place (alloc_loss_logits) */
            DPS_TRY(dp_p2p(st, PH_GATHER, 0, to, i, from, (size_t)s->rows * row, s0->st));
        if (i) DPS_TRY(ptimer_end_on(st->timer, i, PH_GATHER, 0));
    }
    return ptimer_end(st->timer, 0, PH_GATHER);
}

/* Backward on every replica; the logits gradient's rows each one received
 * are its scatter's bytes (worker_backward). */
static dps_status phase_backward(dp_state *st)
{
    DPS_TRY(pool_run(&st->pool, JOB_BACKWARD));
    size_t row_bytes = (size_t)st->net->classes * logit_bytes(st);
    for (int i = 1; i < st->nslots; i++) {
        dp_count(st, 0, PH_SCATTER, LINK_P2P_SENT, (size_t)st->s[i].rows * row_bytes);
        dp_count(st, i, PH_SCATTER, LINK_P2P_RECV, (size_t)st->s[i].rows * row_bytes);
    }
    return DPS_OK;
}

/* The gradients the optimizer reads: accumulated over the micro-steps,
 * else the reduce's output (torch) or device 0's own. */
static float *step_grads(dp_state *st)
{
    if (st->cfg->accum > 1) return st->grad_acc.ptr;
    return coalesced(st) ? st->reduce_out.ptr : st->s[0].grads.ptr;
}

/* --accum: this micro-step's gradients into the accumulated ones, on
 * device 0 after its reduce, as AccumulateGrad does with .grad: the first
 * micro-step's buffer becomes them (.grad takes the tensor, no copy: the
 * two buffers trade places, the next micro-step's are written into the
 * other), a later one's is added, timed as reduce's second span. */
static dps_status accumulate(dp_state *st)
{
    backend *be = st->be;
    dp_slot *s0 = &st->s[0];
    dps_buf *g = coalesced(st) ? &st->reduce_out : &s0->grads;
    if (st->micro == 0) {
        dps_buf first = *g;
        *g = st->grad_acc;
        st->grad_acc = first;
        return DPS_OK;
    }
    DPS_TRY(ptimer_begin_more(st->timer, 0, PH_REDUCE));
    DPS_TRY(be->ops->add(be, s0->st, (int64_t)st->nparams, st->grad_acc.ptr, g->ptr));
    return ptimer_end_more(st->timer, 0, PH_REDUCE);
}

/* GradScaler's unscale_ and inf check on device 0's gradients; *skip when found. */
static dps_status phase_unscale(dp_state *st, int *skip)
{
    dp_slot *s0 = &st->s[0];
    *skip = 0;
    if (!st->scaler.on) return DPS_OK;
    DPS_TRY(ptimer_begin(st->timer, 0, PH_UNSCALE));
    DPS_TRY(scaler_unscale(&st->scaler, st->be, s0->st, step_grads(st), (int64_t)st->nparams, NULL,
                           skip));
    return ptimer_end(st->timer, 0, PH_UNSCALE);
}

static dps_status phase_optimizer(dp_state *st, int taken)
{
    backend *be = st->be;
    dp_slot *s0 = &st->s[0];
    dps_opt_hparams hp = st->cfg->hp;
    hp.step = taken + 1;
    int64_t n = (int64_t)st->nparams;
    const float *grads = step_grads(st);
    DPS_TRY(ptimer_begin(st->timer, 0, PH_OPTIMIZER));
    DPS_TRY(op_trace_optimizer(&st->optr, st->cfg->optimizer != OPT_SGD, n));
    if (st->cfg->optimizer == OPT_SGD)
        DPS_TRY(be->ops->sgd(be, s0->st, n, s0->params.ptr, grads,
                             st->opt_state[0].ptr, hp));
    else
        DPS_TRY(be->ops->adamw(be, s0->st, n, s0->params.ptr, grads,
                               st->opt_state[0].ptr, st->opt_state[1].ptr, hp));
    DPS_TRY(op_trace_end(&st->optr));
    return ptimer_end(st->timer, 0, PH_OPTIMIZER);
}

/* Every device idle: the host waits on each stream; with NCCL a watchdog
 * thread meanwhile checks its asynchronous errors and --timeout (a hung
 * collective ends the configuration instead of the process). */
static dps_status dp_sync(dp_state *st)
{
    if (st->nccl) {
        void *streams[DPS_MAX_DEVICES];
        for (int i = 0; i < st->nslots; i++) streams[i] = st->be->ops->native_stream(st->be, st->s[i].st);
        return comm_group_sync(st->nccl, streams, st->cfg->timeout_s * 1e3);
    }
    for (int i = 0; i < st->nslots; i++) DPS_TRY(st->be->ops->stream_sync(st->be, st->s[i].st));
    return DPS_OK;
}

typedef dps_status (*phase_fn)(dp_state *);

static dps_status run_forward(dp_state *st) { return pool_run(&st->pool, JOB_FORWARD); }

/* One micro-step (the whole step without --accum): DataParallel's forward
 * and backward, every part of them each time, then its gradients into
 * the accumulated ones. */
static dps_status dp_micro_step(dp_state *st)
{
    typedef struct { dps_phase ph; phase_fn fn; } phase_entry;
    /* DataParallel.forward scatters before it replicates */
    static const phase_entry torch[] = {
        {PH_LOAD, phase_load}, {PH_SCATTER, phase_scatter}, {PH_REPLICATE, dp_replicate},
        {PH_FORWARD, run_forward}, {PH_GATHER, phase_gather}, {PH_LOSS, dp_loss},
        {PH_BACKWARD, phase_backward}, {PH_REDUCE, dp_reduce},
    };
    static const phase_entry lean[] = {
        {PH_LOAD, phase_load}, {PH_REPLICATE, dp_replicate}, {PH_SCATTER, phase_scatter},
        {PH_FORWARD, run_forward}, {PH_GATHER, phase_gather}, {PH_LOSS, dp_loss},
        {PH_BACKWARD, phase_backward}, {PH_REDUCE, dp_reduce},
    };
    const phase_entry *phases = st->cfg->dp_impl == DPIMPL_TORCH ? torch : lean;
    dps_status rc = DPS_OK;
    for (size_t i = 0; !rc && i < sizeof torch / sizeof torch[0]; i++) {
        nvtx_push_phase(phases[i].ph);
        rc = phases[i].fn(st);
        nvtx_pop();
    }
    if (!rc && st->cfg->accum > 1) rc = accumulate(st);
    return rc;
}

/* One optimizer step of accum micro-steps; *step_ms is the wall time until
 * every device is idle, *skipped whether the GradScaler skipped it, and
 * *taken counts the optimizer's steps (AdamW's bias correction). */
static dps_status dp_step(dp_state *st, int step, double *step_ms, int *skipped, int *taken)
{
    for (int k = 0; k < st->cfg->accum; k++) ptimer_reset(&st->timers[k]);
    st->step = step;
    nvtx_push_step(step);
    double t0 = dps_now_ms();
    dps_status rc = DPS_OK;
    for (int k = 0; !rc && k < st->cfg->accum; k++) {
        st->micro = k;
        st->timer = &st->timers[k];
        rc = dp_micro_step(st);
    }
    *skipped = 0;
    if (!rc && st->scaler.on) rc = dp_sync(st); /* the reduce's wait, watched, before the flag's */
    if (!rc) rc = phase_unscale(st, skipped);
    if (!rc && !*skipped) {
        nvtx_push_phase(PH_OPTIMIZER);
        rc = phase_optimizer(st, (*taken)++);
        nvtx_pop();
    }
    if (!rc) rc = dp_sync(st);
    *step_ms = dps_now_ms() - t0;
    nvtx_pop();
    return rc;
}

static dps_status dp_upload_params(dp_state *st)
{
    backend *be = st->be;
    dp_slot *s0 = &st->s[0];
    size_t pbytes = st->nparams * sizeof(float);
    float *h = malloc(pbytes);
    if (!h) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for %zu parameters", st->nparams);
    net_init_params(st->net, st->cfg->seed, h);
    dps_status rc = be->ops->copy(be, s0->st, s0->params.ptr, s0->dev, h, DPS_HOST, pbytes);
    if (!rc) rc = be->ops->memset0(be, s0->st, st->opt_state[0].ptr, st->opt_state[0].bytes);
    if (!rc && st->opt_state[1].ptr)
        rc = be->ops->memset0(be, s0->st, st->opt_state[1].ptr, st->opt_state[1].bytes);
    if (!rc) rc = be->ops->stream_sync(be, s0->st);
    free(h);
    return rc;
}

static dps_status dp_download_params(dp_state *st, train_result *res)
{
    dp_slot *s0 = &st->s[0];
    res->nparams = st->nparams;
    res->final_params = malloc(st->nparams * sizeof(float));
    if (!res->final_params)
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory for the final parameters");
    DPS_TRY(st->be->ops->copy(st->be, s0->st, res->final_params, DPS_HOST, s0->params.ptr,
                              s0->dev, st->nparams * sizeof(float)));
    return st->be->ops->stream_sync(st->be, s0->st);
}

/* Timed step k, traced: the reference as the first traced step begins (in
 * every micro-step's timer, recorded together). */
static dps_status trace_mark(dp_state *st, const train_result *res, int k)
{
    if (!res->tl.steps || k != st->cfg->steps - res->tl.steps) return DPS_OK;
    for (int m = 0; m < st->cfg->accum; m++) DPS_TRY(ptimer_mark(&st->timers[m]));
    return DPS_OK;
}

/* Timed step k, traced, its streams synchronised: where each slot's phases
 * began in each micro-step, and how long they ran (micro_ms: [slot][micro][PH_COUNT]). */
static dps_status trace_read(dp_state *st, train_result *res, int k, const float *micro_ms)
{
    int t = k - (st->cfg->steps - res->tl.steps);
    if (!res->tl.steps || t < 0) return DPS_OK;
    for (int i = 0; i < st->nslots; i++)
        for (int m = 0; m < st->cfg->accum; m++) {
            tl_phase *tp = timeline_micro(&res->tl, t, i, m);
            const float *ms = micro_ms + ((size_t)i * st->cfg->accum + m) * PH_COUNT;
            DPS_TRY(ptimer_begins(&st->timers[m], i, tp));
            for (int p = 0; p < PH_COUNT; p++) tp[p].ms = ms[p];
        }
    return DPS_OK;
}

/* Every slot's phases of the step just synchronised: summed into phases
 * (train_result_phases' layout, or a scratch one in warm-up), each
 * micro-step's into micro_ms. */
static dps_status read_phases(dp_state *st, train_result *res, int k, float *micro_ms)
{
    float warm[PH_COUNT]; /* read in warm-up too: --inject-slowdown stretches by them */
    for (int i = 0; i < st->nslots; i++)
        DPS_TRY(ptimer_read_n(st->timers, st->cfg->accum, i,
                              k >= 0 ? train_result_phases(res, k, i) : warm,
                              micro_ms + (size_t)i * st->cfg->accum * PH_COUNT));
    return DPS_OK;
}

/* The step's loss, the mean over its micro-steps' rows, and its GradScaler's record. */
static void record_step(dp_state *st, train_result *res, int step, float scale, int skipped)
{
    const dps_config *c = st->cfg;
    double sum = 0.0;
    for (int m = 0; m < c->accum; m++) sum += st->h_loss[m];
    res->loss[step] = (float)(sum / (double)st->rows_step);
    res->losses_done = step + 1;
    if (step >= c->warmup) res->scaler[step - c->warmup] = (step_scaler){scale, skipped};
    if (st->scaler.on) scaler_update(&st->scaler, skipped);
}

/* Escalation (a second SIGINT or SIGTERM, or the first's grace) during
 * step `step` failed its next device operation. */
static dps_status cut_short(const train_result *res, int step)
{
    return dps_fail(DPS_ERR_RUNTIME, "interrupted by %s during step %d, which %s cut short "
                    "(the %d timed step%s before it kept)", dps_signal_name(dps_interrupted()),
                    step, dps_escalation_cause(), res->steps_done,
                    res->steps_done == 1 ? "" : "s");
}

/* The warm-up and timed steps, each recorded as it ends. */
static dps_status dp_steps(dp_state *st, train_result *res, float *micro_ms)
{
    const dps_config *c = st->cfg;
    int devs[DPS_MAX_DEVICES], taken = 0;
    for (int i = 0; i < st->nslots; i++) devs[i] = st->s[i].dev;
    DPS_TRY(pool_start(&st->pool, st->nslots, dp_worker, st, "dp-worker-", devs));
    st->pool_up = 1;
    for (int step = 0; step < c->warmup + c->steps; step++) {
        int timed = step >= c->warmup;
        if (dps_interrupted())
            return dps_fail(DPS_ERR_RUNTIME, "interrupted by %s before step %d",
                            dps_signal_name(dps_interrupted()), step);
        if (step == c->warmup) /* count bytes over the timed steps only */
            for (int i = 0; i < st->nslots; i++) {
                memset(st->traffic[i].phase_bytes, 0, sizeof st->traffic[i].phase_bytes);
                memset(st->traffic[i].link_bytes, 0, sizeof st->traffic[i].link_bytes);
            }
        batches_get(&st->batches, step, &st->h_x, &st->h_labels);
        double ms = 0.0;
        DPS_TRY(config_profile_hook(c, st->be, step, 1));
        if (timed) DPS_TRY(trace_mark(st, res, step - c->warmup));
        int skipped = 0, traced = step == c->warmup + c->steps - 1;
        float scale = scaler_loss_factor(&st->scaler);
        if (traced) op_trace_start(&st->optr); /* the last timed step: its ops into ops.csv */
        dps_status rc = dp_step(st, step, &ms, &skipped, &taken);
        if (rc) return dps_escalated() ? cut_short(res, step) : rc;
        if (traced) DPS_TRY(op_trace_finish(&st->optr, &res->ops));
        DPS_TRY(config_profile_hook(c, st->be, step, 0));
        record_step(st, res, step, scale, skipped);
        for (int i = 0; i < st->nslots; i++) DPS_TRY(be_sample_mem(st->be, st->s[i].dev));
        int k = step - c->warmup;
        DPS_TRY(read_phases(st, res, k, micro_ms));
        if (!timed) continue;
        DPS_TRY(trace_read(st, res, k, micro_ms));
        res->step_ms[k] = ms;
        for (int i = 0; i < c->ngpus; i++) res->rank_step_ms[(size_t)k * res->nranks + i] = ms;
        res->steps_done = k + 1;
    }
    return DPS_OK;
}

static dps_status dp_loop(dp_state *st, train_result *res)
{
    const dps_config *c = st->cfg;
    float *micro_ms = calloc((size_t)st->nslots * c->accum * PH_COUNT, sizeof *micro_ms);
    if (!micro_ms) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for the phase timers");
    dps_status rc = dp_steps(st, res, micro_ms);
    free(micro_ms);
    DPS_TRY(rc);
    return dp_download_params(st, res);
}

dps_status dp_train(const dps_config *cfg, backend *be, train_result *res)
{
    dp_state *st = calloc(1, sizeof *st);
    if (!st) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for the dp state");
    st->cfg = cfg;
    st->be = be;
    st->half = cfg->precision == PREC_FP16 ? BE_F16 : cfg->precision == PREC_BF16 ? BE_BF16 : BE_F32;
    st->traffic = res->dev;
    dps_status rc = timeline_alloc(&res->tl, timeline_steps(cfg->trace_steps, cfg->steps),
                                   res->nranks, 0, cfg->accum);
    if (!rc) rc = dp_setup(st);
    if (!rc) rc = dp_upload_params(st);
    if (rc && dps_escalated()) rc = dps_fail_cut_in_setup(""); /* not a copy's own failure */
    if (!rc) rc = dp_loop(st, res);
    for (int i = 0; i < cfg->ngpus; i++) {
        int dev = cfg->devices[i];
        /* the peak of a failed run too; a device that got no chunk is left
         * alone (sampling it would make a CUDA context there, ~0.5 GB) */
        dps_status sampled = i < st->nslots ? be_sample_mem(be, dev) : DPS_OK;
        if (!rc) rc = sampled;
        res->dev[i].dev = dev;
        res->dev[i].samples = i < st->nslots ? st->s[i].samples : 0;
        dps_strlcpy(res->dev[i].name, be->info[dev].name, sizeof res->dev[i].name);
        dev_stats_memory(&res->dev[i], be, dev);
        if (rc == DPS_OK && res->steps_done > 0)
            for (int p = 0; p < PH_COUNT; p++) res->dev[i].phase_bytes[p] /= res->steps_done;
        if (rc == DPS_OK && res->steps_done > 0)
            for (int l = 0; l < LINK_COUNT; l++) res->dev[i].link_bytes[l] /= res->steps_done;
    }
    if (rc) dps_strlcpy(res->error, dps_errmsg(), sizeof res->error);
    dp_teardown(st, rc);
    free(st);
    return rc;
}
