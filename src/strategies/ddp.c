/* A ddp rank (see ddp.h). Every step, as PyTorch 2.x DDP does it: load its
 * own shard -> forward -> loss -> backward, during which each layer's
 * gradients, once computed, are scaled by 1/N into their bucket and a full
 * bucket's all-reduce is issued at once, in bucket order, to start when its
 * gradients are in place (comm_allreduce_async) -> the compute stream waits
 * for the buckets (comm_wait_async: on the device with NCCL) -> optimizer,
 * on every rank -> the host waits for the step (comm_sync). Parameters are
 * broadcast from rank 0 once, before the first step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/batches.h"
#include "model/bucket.h"
#include "comm/comm.h"
#include "strategies/ddp.h"
#include "strategies/ptimer.h"
#include "strategies/scaler.h"
#include "strategies/sharded.h"
#include "model/net.h"
#include "core/nvtx.h"
#include "core/util.h"

typedef struct ddp_rank {
    const dps_config *cfg;
    backend *be;
    ddp_shared *sh;
    ddp_report *rep;
    rank_beat *beat;
    ddp_world *dw;            /* under a launcher: the joined world; NULL: forked */
    comm *comm;
    comm_spans spans;         /* the traced steps' all-reduces (comm_trace) */
    const net *net;           /* the model: cfg's file, or own_net */
    net own_net;              /* the MLP of cfg->shape */
    int rank, nranks, dev, samples, rows, rows_total; /* samples, rows: a micro-step's;
                                                        rows_total: the step's, all ranks */
    int64_t sample0;          /* in each micro-batch */
    int micro, syncing;       /* the running micro-step; whether it all-reduces */
    int step, taken;          /* the optimizer step running; the optimizer's steps taken */
    be_stream *st;
    size_t nparams;
    dps_buf params, grads, bucket_buf, opt_state[2];
    dps_buf micro_grads;      /* --accum: a later micro-step's gradients, added into grads */
    size_t acc_lo;            /* micro_grads at offsets >= this are added */
    grad_scaler scaler;
    dps_buf x, labels, logits, dlogits, row_loss, loss;
    /* the loss's fp32 logits and their gradient: the model's output, or
     * under autocast its fp32 cast (logits.float()), whose buffer the
     * gradient takes once log_softmax has read it (torch; dlogits unused) */
    float *logitsv, *dlogitsv;
    dps_buf logp, dlogp;      /* torch: log-probabilities and their gradient */
    batches batches;          /* the steps' shards, made on a helper thread */
    const float *h_x;         /* this step's shard (batches_get) */
    const int32_t *h_labels;
    float *h_loss;            /* [accum]: each micro-step's loss sum */
    net_acts acts;
    phase_timer *timers;      /* [accum]: a micro-step's phases each */
    phase_timer *timer;       /* the running micro-step's */
    op_trace optr;            /* the ops of the last timed step (ops.csv) */
    float *micro_ms;          /* [accum][PH_COUNT]: the last step's, for the trace */
    bucket bk[DPS_MAX_BUCKETS];
    be_event **bk_ev;           /* per all-reduce of a step (bucket, or micro-step and bucket
                                   without no_sync): its gradients are in place */
    int nbk, nbk_ev, next_launch;
    size_t ready_lo;            /* gradients at flat offsets >= this are final */
    double allreduce_ms;        /* this step: time the buckets' collectives ran */
    shard_rank shard;           /* zero1, zero2, fsdp: the shards (level SHARD_NONE: ddp) */
} ddp_rank;

/* Whether the rank's gradients pass through the sharded strategy's units
 * (zero2, fsdp), not ddp's buckets. */
static int units_reduce(const ddp_rank *R) { return R->shard.level >= SHARD_GRADIENTS; }

void ddp_shard_sizes(int batch, int n, int *sizes)
{
    for (int i = 0; i < n; i++) sizes[i] = batch / n + (i < batch % n);
}

static float *bucket_data(ddp_rank *R, int b)
{
    float *base = R->cfg->grad_view ? R->grads.ptr : R->bucket_buf.ptr;
    return base + R->bk[b].lo;
}

/* Bucket b's gradients scaled by 1/N into the bucket in one pass (in place
 * when the gradients are bucket views): PyTorch's reducer "divides while
 * copying into the bucket view to save one scan" (mul_out by 1/N). Then
 * its all-reduce, issued after them. */
static dps_status launch_bucket(ddp_rank *R, int b)
{
    const be_ops *o = R->be->ops;
    size_t n = R->bk[b].hi - R->bk[b].lo;
    float *dst = bucket_data(R, b);
    const float *grad = (const float *)R->grads.ptr + R->bk[b].lo; /* dst itself with views */
    be_event *ready = R->bk_ev[R->nbk_ev > R->nbk ? R->micro * R->nbk + b : b];
    DPS_TRY(o->scale_copy(R->be, R->st, (int64_t)n, dst, grad, 1.0f / (float)R->nranks));
    DPS_TRY(o->event_record(R->be, ready, R->st)); /* no host synchronisation */
    return comm_allreduce_async(R->comm, dst, n, COMM_F32, ready);
}

/* --accum: a later micro-step's gradients at offsets [lo, acc_lo) added into
 * the accumulated ones as they become final, as AccumulateGrad adds each
 * parameter's before DDP's hook sees it. */
static dps_status accumulate_to(ddp_rank *R, size_t lo)
{
    if (!R->micro || lo >= R->acc_lo) return DPS_OK;
    float *g = (float *)R->grads.ptr + lo;
    const float *m = (const float *)R->micro_grads.ptr + lo;
    DPS_TRY(R->be->ops->add(R->be, R->st, (int64_t)(R->acc_lo - lo), g, m));
    R->acc_lo = lo;
    return DPS_OK;
}

/* Launches, in index order, every bucket whose gradients are all final. */
static dps_status launch_ready(ddp_rank *R)
{
    while (R->next_launch < R->nbk && R->bk[R->next_launch].lo >= R->ready_lo)
        DPS_TRY(launch_bucket(R, R->next_launch++));
    return DPS_OK;
}

/* Backward's hook: gradients above ready_lo are final. Under no_sync
 * (micro-steps but the last) they only accumulate. */
static dps_status grad_hook(void *ctx, size_t ready_lo)
{
    ddp_rank *R = ctx;
    R->ready_lo = ready_lo;
    if (units_reduce(R)) return shard_grad_ready(&R->shard, ready_lo);
    DPS_TRY(accumulate_to(R, ready_lo));
    return R->cfg->overlap && R->syncing ? launch_ready(R) : DPS_OK;
}

static void set_phase(ddp_rank *R, dps_phase ph) { atomic_store(&R->rep->phase, (int)ph); }

static void inject_fault(ddp_rank *R, int step)
{
    const dps_config *c = R->cfg;
    rank_fault f = {c->fault_rank, c->fault_step, c->fault_kind};
    ranks_inject_fault(&f, R->rank, step);
}

/* Under autocast the MLP hands its half logits on (logits16_out) and the
 * loss casts them: as dp does, and as `logits.float()` runs in the loss; a
 * model file widens its own (graph.h). */
static int autocast(const ddp_rank *R) { return R->acts.mlp.half != BE_F32 && !net_is_file(R->net); }

/* The loss's fp32 logits and their gradient (bytes each), one buffer under
 * torch's autocast (see ddp_rank). */
static dps_status alloc_loss_logits(ddp_rank *R, size_t bytes)
{
    backend *be = R->be;
    int reuse = R->cfg->precision != PREC_FP32 && R->cfg->ddp_impl == DPIMPL_TORCH;
    const char *what = R->cfg->precision == PREC_FP32 ? "logits"
                       : reuse ? "loss's fp32 logits, then their gradient" : "loss's fp32 logits";
    DPS_TRY(be_buf_alloc(be, R->dev, bytes, what, &R->logits));
    if (!reuse) DPS_TRY(be_buf_alloc(be, R->dev, bytes, "logits gradient", &R->dlogits));
    R->logitsv = R->logits.ptr;
    R->dlogitsv = reuse ? R->logits.ptr : R->dlogits.ptr;
    return DPS_OK;
}

static dps_status alloc_buffers(ddp_rank *R)
{
    backend *be = R->be;
    const net *m = R->net;
    size_t pbytes = R->nparams * sizeof(float), rows = (size_t)R->rows, C = (size_t)m->classes;
    int d = R->dev;
    shard_level level = R->shard.level;
    if (level < SHARD_PARAMETERS) DPS_TRY(be_buf_alloc(be, d, pbytes, "parameters", &R->params));
    if (level < SHARD_GRADIENTS) {
        DPS_TRY(be_buf_alloc(be, d, pbytes, "gradients", &R->grads));
        if (!R->cfg->grad_view)
            DPS_TRY(be_buf_alloc(be, d, pbytes, "gradient buckets", &R->bucket_buf));
        if (R->cfg->accum > 1)
            DPS_TRY(be_buf_alloc(be, d, pbytes, "micro-step gradients", &R->micro_grads));
    }
    if (level == SHARD_NONE) {
        DPS_TRY(be_buf_alloc(be, d, pbytes, "optimizer state", &R->opt_state[0]));
        if (R->cfg->optimizer == OPT_ADAMW)
            DPS_TRY(be_buf_alloc(be, d, pbytes, "optimizer state", &R->opt_state[1]));
    }
    DPS_TRY(be_buf_alloc(be, d, (size_t)R->samples * m->input * sizeof(float), "input shard", &R->x));
    DPS_TRY(be_buf_alloc(be, d, rows * sizeof(int32_t), "labels", &R->labels));
    DPS_TRY(alloc_loss_logits(R, rows * C * sizeof(float)));
    if (R->cfg->ddp_impl == DPIMPL_TORCH) { /* nn.CrossEntropyLoss's, kept for backward */
        DPS_TRY(be_buf_alloc(be, d, rows * C * sizeof(float), "log-probabilities", &R->logp));
        DPS_TRY(be_buf_alloc(be, d, rows * C * sizeof(float),
                             "log-probabilities gradient", &R->dlogp));
    }
    DPS_TRY(be_buf_alloc(be, d, rows * sizeof(float), "per-token loss", &R->row_loss));
    size_t accum = (size_t)R->cfg->accum;
    DPS_TRY(be_buf_alloc(be, d, accum * sizeof(float), "loss", &R->loss));
    DPS_TRY(net_acts_alloc(be, d, m, R->samples, R->cfg->precision, R->cfg->tf32, &R->acts));
    R->acts.mlp.logits16_out = autocast(R); /* cast in the loss, as dp's */
    DPS_TRY(be->ops->host_alloc(be, accum * sizeof(float), (void **)&R->h_loss));
    R->micro_ms = calloc(accum * PH_COUNT, sizeof *R->micro_ms);
    if (!R->micro_ms) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory", R->rank);
    DPS_TRY(scaler_init(&R->scaler, R->cfg, be, d));
    /* each next step's shards (one a micro-batch) made during the step, but
     * not on the host backend, whose devices are the cores that would make it */
    return batches_start(&R->batches, be, m, R->cfg->seed, R->sample0, R->samples, R->cfg->accum,
                         R->cfg->global_batch / R->cfg->accum, R->cfg->warmup + R->cfg->steps,
                         !be->emulated);
}

static dps_status make_buckets(ddp_rank *R)
{
    R->nbk = net_buckets(R->net, R->cfg->first_bucket_mb, R->cfg->bucket_mb, R->bk, DPS_MAX_BUCKETS);
    if (R->nbk < 0)
        return dps_fail(DPS_ERR_RUNTIME, "more than %d gradient buckets; raise --bucket-mb",
                        DPS_MAX_BUCKETS);
    R->nbk_ev = R->nbk * (R->cfg->no_sync ? 1 : R->cfg->accum);
    R->bk_ev = calloc((size_t)R->nbk_ev, sizeof *R->bk_ev);
    if (!R->bk_ev) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for bucket events");
    for (int b = 0; b < R->nbk_ev; b++)
        DPS_TRY(R->be->ops->event_create(R->be, R->dev, &R->bk_ev[b]));
    return DPS_OK;
}

/* Rank 0 initialises the parameters; DDP's constructor broadcasts them
 * (device to device: the host collectives' device memory is host memory). */
static dps_status init_params(ddp_rank *R)
{
    const be_ops *o = R->be->ops;
    size_t pbytes = R->nparams * sizeof(float);
    float *h = calloc(R->nparams, sizeof(float));
    if (!h) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for %zu parameters", R->nparams);
    int full_shard = R->shard.level == SHARD_PARAMETERS; /* every rank makes its own chunks */
    if (R->rank == 0 || full_shard) net_init_params(R->net, R->cfg->seed, h);
    dps_status rc = full_shard ? DPS_OK : o->copy(R->be, R->st, R->params.ptr, R->dev, h, DPS_HOST, pbytes);
    if (!rc) rc = o->stream_sync(R->be, R->st);
    if (!rc && !full_shard) rc = comm_broadcast(R->comm, R->params.ptr, pbytes, 0);
    if (!rc && R->shard.level) rc = shard_init_params(&R->shard, h);
    for (int k = 0; !rc && k < 2; k++)
        if (R->opt_state[k].ptr) rc = o->memset0(R->be, R->st, R->opt_state[k].ptr, R->opt_state[k].bytes);
    if (!rc) rc = o->stream_sync(R->be, R->st);
    free(h);
    return rc;
}

/* zero1, zero2, fsdp: the shards, and the model reaching its units
 * through them. */
static dps_status open_shards(ddp_rank *R)
{
    shard_rank *S = &R->shard;
    S->cfg = R->cfg;
    S->be = R->be;
    S->st = R->st;
    S->comm = R->comm;
    S->net = R->net;
    S->rank = R->rank;
    S->nranks = R->nranks;
    S->dev = R->dev;
    DPS_TRY(shard_open(S));
    if (units_reduce(R)) net_acts_window(R->net, &R->acts, &S->window);
    return DPS_OK;
}

static dps_status rank_setup(ddp_rank *R)
{
    const dps_config *c = R->cfg;
    int shards[DPS_MAX_DEVICES];
    ddp_shard_sizes(c->global_batch / c->accum, R->nranks, shards); /* one micro-batch's */
    DPS_TRY(config_net(c, &R->own_net, &R->net));
    for (int i = 0; i < R->rank; i++) R->sample0 += shards[i];
    R->samples = shards[R->rank];
    R->rows = R->samples * R->net->rows;
    R->rep->dev.samples = shards[R->rank];
    R->rows_total = c->global_batch * R->net->rows;
    R->nparams = R->net->params;
    R->shard.level = shard_level_of(c->mode);
    DPS_TRY(R->be->ops->set_device(R->be, R->dev));
    DPS_TRY(R->be->ops->stream_create(R->be, R->dev, &R->st));
    char sname[32];
    snprintf(sname, sizeof sname, "compute-%d", R->dev);
    R->be->ops->name_stream(R->be, R->st, sname);
    DPS_TRY(be_mark_baseline(R->be, R->dev));
    int slowed = c->slowdown_rank < 0 || c->slowdown_rank == R->rank;
    DPS_TRY(ptimer_init_n(&R->timers, c->accum, R->be, 1, &R->dev, &R->st,
                          slowed ? c->inject_slowdown_pct / 100.0 : 0.0, -1));
    R->timer = &R->timers[0];
    DPS_TRY(make_buckets(R));
    DPS_TRY(alloc_buffers(R));
    op_trace_init(&R->optr, R->be, R->dev, R->st);
    net_acts_trace(R->net, &R->acts, &R->optr);
    comm_params cp = {ddp_shared_comm(R->sh), R->rank, R->be, R->dev, c->timeout_s * 1e3,
                      dps_comm_impl(c->comm), R->dw ? R->dw->store : NULL};
    if (R->dw) ddp_world_opening(R->dw, cp.sh); /* a lost peer ends the set-up */
    dps_status rc = comm_open(&cp, &R->comm);
    if (R->dw) ddp_world_set_comm(R->dw, R->comm); /* its watch may abort it */
    DPS_TRY(rc);
    if (R->shard.level) DPS_TRY(open_shards(R));
    return init_params(R);
}

static void rank_teardown(ddp_rank *R)
{
    backend *be = R->be;
    if (R->dw) ddp_world_set_comm(R->dw, NULL);
    if (R->shard.own_lo) shard_close(&R->shard);
    comm_close(R->comm);
    comm_spans_free(&R->spans);
    for (int b = 0; R->bk_ev && b < R->nbk_ev; b++)
        if (R->bk_ev[b]) be->ops->event_destroy(be, R->bk_ev[b]);
    free(R->bk_ev);
    free(R->micro_ms);
    ptimer_free_n(&R->timers, R->cfg->accum);
    if (R->optr.be) op_trace_free(&R->optr);
    scaler_free(&R->scaler, be);
    if (R->net) net_acts_free(be, R->net, &R->acts);
    dps_buf *bufs[] = {&R->params, &R->grads, &R->bucket_buf, &R->opt_state[0], &R->opt_state[1],
                       &R->x, &R->labels, &R->logits, &R->dlogits, &R->row_loss, &R->loss,
                       &R->logp, &R->dlogp, &R->micro_grads};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be_buf_free(be, bufs[i]);
    batches_stop(&R->batches);
    if (R->h_loss) be->ops->host_free(be, R->h_loss);
    if (R->st) be->ops->stream_destroy(be, R->st);
    net_free(&R->own_net);
}

static dps_status phase_load(ddp_rank *R)
{
    size_t xb = (size_t)R->samples * R->net->input * sizeof(float), lb = (size_t)R->rows * sizeof(int32_t);
    const be_ops *o = R->be->ops;
    const float *x = R->h_x + (size_t)R->micro * R->samples * R->net->input;
    const int32_t *labels = R->h_labels + (size_t)R->micro * R->rows;
    DPS_TRY(ptimer_begin(R->timer, 0, PH_LOAD));
    DPS_TRY(o->copy(R->be, R->st, R->x.ptr, R->dev, x, DPS_HOST, xb));
    DPS_TRY(o->copy(R->be, R->st, R->labels.ptr, R->dev, labels, DPS_HOST, lb));
    R->rep->dev.phase_bytes[PH_LOAD] += (double)(xb + lb);
    R->rep->dev.link_bytes[LINK_H2D] += (double)(xb + lb);
    return ptimer_end(R->timer, 0, PH_LOAD);
}

/* The local loss and the logits' gradient, scaled by N / global rows (the
 * whole step's, over its micro-steps) and by the GradScaler's scale: the
 * 1/N average of the ranks' gradients is then the gradient of the global
 * mean even for uneven shards (with even shards this is PyTorch's local
 * mean, divided by the micro-steps: `loss / accum`). torch: as nn.CrossEntropyLoss runs under DDP, three operations on
 * rows x C tensors: log-softmax, kept for backward; the negative
 * log-likelihood and its gradient; log-softmax's backward into the logits'
 * gradient. lean: one fused pass writing only the logits' gradient. */
static dps_status fp32_loss(ddp_rank *R, float scale)
{
    const be_ops *o = R->be->ops;
    int rows = R->rows, classes = R->net->classes;
    if (R->cfg->ddp_impl == DPIMPL_LEAN)
        return o->xent(R->be, R->st, rows, classes, R->logitsv, R->labels.ptr, scale,
                       R->dlogitsv, R->row_loss.ptr);
    DPS_TRY(o->log_softmax(R->be, R->st, rows, classes, R->logitsv, R->logp.ptr));
    DPS_TRY(o->nll(R->be, R->st, rows, classes, R->logp.ptr, R->labels.ptr, scale,
                   R->row_loss.ptr, R->dlogp.ptr));
    return o->log_softmax_bwd(R->be, R->st, rows, classes, R->logp.ptr, R->dlogp.ptr,
                              R->dlogitsv);
}

/* The loss and its gradient in fp32 (plant: with GradScaler's test inf in
 * the gradient); under autocast the model's half logits cast to fp32 first
 * (logits.float()) and the gradient cast back into the model's half buffer
 * last (that cast's backward), as dp's loss does. */
static dps_status rank_loss(ddp_rank *R, int plant)
{
    const be_ops *o = R->be->ops;
    float scale = scaler_loss_factor(&R->scaler) * (float)R->nranks / (float)R->rows_total;
    int64_t nc = (int64_t)R->rows * R->net->classes;
    void *half = R->acts.mlp.logits16_at;
    if (autocast(R)) DPS_TRY(o->cast(R->be, R->st, nc, half, R->acts.mlp.half, R->logitsv, BE_F32));
    DPS_TRY(fp32_loss(R, scale));
    if (plant) DPS_TRY(scaler_plant_inf(&R->scaler, R->be, R->st, R->dlogitsv, R->dev));
    if (!autocast(R)) return DPS_OK;
    return o->cast(R->be, R->st, nc, R->dlogitsv, BE_F32, half, R->acts.mlp.half);
}

static dps_status phase_forward_loss(ddp_rank *R, int step)
{
    const be_ops *o = R->be->ops;
    set_phase(R, PH_FORWARD);
    inject_fault(R, step);
    DPS_TRY(ptimer_begin(R->timer, 0, PH_FORWARD));
    DPS_TRY(net_forward(R->be, R->st, R->net, R->params.ptr, &R->acts, R->samples, R->x.ptr,
                        R->logitsv));
    DPS_TRY(ptimer_end(R->timer, 0, PH_FORWARD));
    set_phase(R, PH_LOSS);
    DPS_TRY(ptimer_begin(R->timer, 0, PH_LOSS));
    DPS_TRY(op_trace_loss(&R->optr, R->rows, R->net->classes));
    DPS_TRY(rank_loss(R, R->rank == 0 && step == R->cfg->overflow_step &&
                             R->micro == R->cfg->accum - 1));
    float *loss = (float *)R->loss.ptr + R->micro;
    DPS_TRY(o->sum(R->be, R->st, R->rows, R->row_loss.ptr, loss));
    DPS_TRY(o->copy(R->be, R->st, R->h_loss + R->micro, DPS_HOST, loss, R->dev, sizeof(float)));
    DPS_TRY(op_trace_end(&R->optr));
    return ptimer_end(R->timer, 0, PH_LOSS);
}

/* Backward: the first micro-step's gradients into grads, a later one's
 * into micro_grads, added into grads as they become final. */
static dps_status phase_backward(ddp_rank *R)
{
    set_phase(R, PH_BACKWARD);
    R->next_launch = 0;
    R->ready_lo = R->acc_lo = R->nparams;
    float *into = R->micro ? R->micro_grads.ptr : R->grads.ptr;
    if (units_reduce(R)) shard_backward_begin(&R->shard, R->micro); /* into a unit at a time */
    DPS_TRY(ptimer_begin(R->timer, 0, PH_BACKWARD));
    nvtx_push_phase(PH_BACKWARD);
    dps_status rc = net_backward(R->be, R->st, R->net, R->params.ptr, &R->acts, R->samples,
                                 R->x.ptr, autocast(R) ? NULL : R->dlogitsv, into, grad_hook, R);
    if (!rc && !units_reduce(R)) rc = accumulate_to(R, 0);
    nvtx_pop();
    DPS_TRY(rc);
    return ptimer_end(R->timer, 0, PH_BACKWARD);
}

/* What all-reduce adds to the step: launching what backward did not, waiting
 * for the last bucket, and copying buckets back into the gradients. With
 * NCCL the wait is the compute stream's, on the device (the host goes on to
 * issue the optimizer), so the phase's events time it there. */
static dps_status phase_exposed(ddp_rank *R)
{
    set_phase(R, PH_ALLREDUCE_EXPOSED);
    DPS_TRY(ptimer_begin(R->timer, 0, PH_ALLREDUCE_EXPOSED));
    if (units_reduce(R)) {
        DPS_TRY(shard_grads_done(&R->shard));
        return ptimer_end(R->timer, 0, PH_ALLREDUCE_EXPOSED);
    }
    R->ready_lo = 0;
    DPS_TRY(launch_ready(R));
    if (!dps_test_plant("ddp_no_bucket_wait")) DPS_TRY(comm_wait_async(R->comm, R->st));
    if (!R->cfg->grad_view)
        DPS_TRY(R->be->ops->copy(R->be, R->st, R->grads.ptr, R->dev, R->bucket_buf.ptr, R->dev,
                                 R->nparams * sizeof(float)));
    return ptimer_end(R->timer, 0, PH_ALLREDUCE_EXPOSED);
}

/* GradScaler's unscale_ and inf check on the all-reduced gradients: the
 * same on every rank, so every rank decides the same (ZeRO-2 and FSDP: on
 * this rank's gradient shard, what each found all-reduced); *skip when found. */
static dps_status phase_unscale(ddp_rank *R, int *skip)
{
    *skip = 0;
    if (!R->scaler.on) return DPS_OK;
    set_phase(R, PH_UNSCALE);
    DPS_TRY(ptimer_begin(R->timer, 0, PH_UNSCALE));
    if (units_reduce(R))
        DPS_TRY(scaler_unscale(&R->scaler, R->be, R->st, R->shard.grad_shard.ptr,
                               (int64_t)R->shard.shard_n, R->comm, skip));
    else
        DPS_TRY(scaler_unscale(&R->scaler, R->be, R->st, R->grads.ptr, (int64_t)R->nparams, NULL,
                               skip));
    return ptimer_end(R->timer, 0, PH_UNSCALE);
}

static dps_status phase_optimizer(ddp_rank *R)
{
    const be_ops *o = R->be->ops;
    dps_opt_hparams hp = R->cfg->hp;
    hp.step = ++R->taken;
    set_phase(R, PH_OPTIMIZER);
    DPS_TRY(ptimer_begin(R->timer, 0, PH_OPTIMIZER));
    DPS_TRY(op_trace_optimizer(&R->optr, R->cfg->optimizer != OPT_SGD,
                               (int64_t)(R->shard.level ? R->shard.shard_n : R->nparams)));
    if (R->shard.level)
        DPS_TRY(shard_optimizer(&R->shard, R->params.ptr, R->grads.ptr, hp));
    else if (R->cfg->optimizer == OPT_SGD)
        DPS_TRY(o->sgd(R->be, R->st, (int64_t)R->nparams, R->params.ptr, R->grads.ptr,
                       R->opt_state[0].ptr, hp));
    else
        DPS_TRY(o->adamw(R->be, R->st, (int64_t)R->nparams, R->params.ptr, R->grads.ptr,
                         R->opt_state[0].ptr, R->opt_state[1].ptr, hp));
    DPS_TRY(op_trace_end(&R->optr));
    return ptimer_end(R->timer, 0, PH_OPTIMIZER);
}

/* Micro-step R->micro: load, forward, loss, backward, and, when it syncs
 * (the last, or every one with --no-sync off), the all-reduces' wait. */
static dps_status micro_step(ddp_rank *R, int step)
{
    R->timer = &R->timers[R->micro];
    R->shard.micro = R->micro;
    R->syncing = R->micro == R->cfg->accum - 1 || !R->cfg->no_sync || units_reduce(R);
    set_phase(R, PH_LOAD);
    dps_status rc = phase_load(R);
    if (!rc) rc = phase_forward_loss(R, step);
    if (!rc) rc = phase_backward(R);
    if (!rc && R->syncing) rc = phase_exposed(R);
    return rc;
}

/* One optimizer step of accum micro-steps; *skipped: the GradScaler skipped it. */
static dps_status rank_step(ddp_rank *R, int step, double *ms, int *skipped)
{
    for (int k = 0; k < R->cfg->accum; k++) ptimer_reset(&R->timers[k]);
    nvtx_push_step(step);
    double t0 = dps_now_ms();
    R->allreduce_ms = 0.0;
    R->shard.nissued = 0; /* the step's collectives, for its trace */
    dps_status rc = DPS_OK;
    for (R->micro = 0; !rc && R->micro < R->cfg->accum; R->micro++) rc = micro_step(R, step);
    R->micro = R->cfg->accum - 1;
    *skipped = 0;
    if (!R->scaler.on) {
        if (!rc) rc = phase_optimizer(R);
        if (!rc) rc = comm_sync(R->comm, R->st, &R->allreduce_ms); /* the host's one wait */
    } else { /* the all-reduces' wait, watched, before GradScaler's flag's */
        if (!rc) rc = comm_sync(R->comm, R->st, &R->allreduce_ms);
        if (!rc) rc = phase_unscale(R, skipped);
        if (!rc && !*skipped) rc = phase_optimizer(R);
        if (!rc) rc = R->be->ops->stream_sync(R->be, R->st);
    }
    if (R->shard.level) shard_step_end(&R->shard);
    *ms = dps_now_ms() - t0;
    nvtx_pop();
    return rc;
}

static void reset_traffic(ddp_rank *R)
{
    memset(R->rep->dev.phase_bytes, 0, sizeof R->rep->dev.phase_bytes);
    memset(R->rep->dev.link_bytes, 0, sizeof R->rep->dev.link_bytes);
    R->comm->bytes_sent = R->comm->bytes_received = 0;
}

/* Memory peaks into the report, so that a rank that is killed has them too. */
static void record_peaks(ddp_rank *R)
{
    dev_stats *d = &R->rep->dev;
    d->dev = R->dev;
    dps_strlcpy(d->name, R->be->info[R->dev].name, sizeof d->name);
    dev_stats_memory(d, R->be, R->dev);
}

/* Timed step k, traced: the reference as the first traced step begins
 * (in every micro-step's timer, recorded together), for the phases and the
 * buckets' spans, and its place on the wall clock. */
static dps_status trace_mark(ddp_rank *R, int k)
{
    if (!R->sh->trace_steps || k != R->cfg->steps - R->sh->trace_steps) return DPS_OK;
    for (int m = 0; m < R->cfg->accum; m++) DPS_TRY(ptimer_mark(&R->timers[m]));
    R->rep->trace_ref_wall_ms = dps_wall_ms();
    R->spans.ref = R->timers[0].ref[0];
    comm_trace(R->comm, &R->spans);
    return DPS_OK;
}

/* Where each micro-step's phases of traced step t began, and how long they ran. */
static dps_status trace_phases(ddp_rank *R, int t)
{
    ddp_shared *sh = R->sh;
    tl_phase *tp = ddp_shared_tl_phase(sh, R->rank) + (size_t)t * sh->micro * PH_COUNT;
    for (int m = 0; m < sh->micro; m++, tp += PH_COUNT) {
        DPS_TRY(ptimer_begins(&R->timers[m], 0, tp));
        for (int p = 0; p < PH_COUNT; p++) tp[p].ms = R->micro_ms[(size_t)m * PH_COUNT + p];
    }
    return DPS_OK;
}

/* A sharded strategy's traced step t: its collectives in issue order, each
 * with its unit (ZeRO-1's all-reduces: ddp's buckets, then its gathers). */
static dps_status trace_units(ddp_rank *R, int t)
{
    ddp_shared *sh = R->sh;
    tl_span *dst = ddp_shared_tl_span(sh, R->rank) + (size_t)t * sh->max_spans;
    int n = R->spans.n < sh->max_spans ? R->spans.n : sh->max_spans, k = 0;
    for (int i = 0; i < n; i++) {
        const comm_span *sp = &R->spans.span[i];
        int ar = sp->op == COMM_ALLREDUCE;
        const shard_issue *is = !ar && k < R->shard.nissued ? &R->shard.issued[k] : NULL;
        float ready = (float)sp->begin_ms;
        if (is && is->ready_set)
            DPS_TRY(R->be->ops->event_ms(R->be, R->timers[0].ref[0], is->ready, &ready));
        k += !ar;
        dst[i] = (tl_span){sp->begin_ms, sp->ms, sp->bytes, ar ? i % R->nbk : is ? is->unit : -1,
                           ready, is ? is->micro : R->cfg->accum - 1, (int)sp->op,
                           is ? is->phase : PH_BACKWARD};
    }
    ddp_shared_tl_nspans(sh, R->rank)[t] = n;
    return DPS_OK;
}

/* Timed step k, traced, its stream synchronised: where its phases began,
 * and the buckets' all-reduces: one a bucket, or, every micro-step
 * all-reducing, one a micro-step and bucket, in issue order. */
static dps_status trace_read(ddp_rank *R, int k)
{
    ddp_shared *sh = R->sh;
    int t = k - (R->cfg->steps - sh->trace_steps);
    if (!sh->trace_steps || t < 0) return DPS_OK;
    DPS_TRY(trace_phases(R, t));
    DPS_TRY(comm_spans_read(R->be, &R->spans));
    if (R->shard.level) return trace_units(R, t);
    int n = R->spans.n < sh->max_spans ? R->spans.n : sh->max_spans;
    int first_micro = R->nbk_ev > R->nbk ? 0 : R->cfg->accum - 1; /* the first that syncs */
    tl_span *dst = ddp_shared_tl_span(sh, R->rank) + (size_t)t * sh->max_spans;
    for (int i = 0; i < n; i++) { /* bucket = issue order within a micro-step */
        const comm_span *sp = &R->spans.span[i];
        dst[i] = (tl_span){sp->begin_ms, sp->ms, sp->bytes, i % R->nbk, 0.0,
                           first_micro + i / R->nbk, 0, PH_BACKWARD};
    }
    int nb = R->nbk_ev < sh->max_spans ? R->nbk_ev : sh->max_spans;
    for (int e = 0; e < nb; e++) {
        float ready = 0.0f;
        int b = e % R->nbk;
        DPS_TRY(R->be->ops->event_ms(R->be, R->timers[0].ref[0], R->bk_ev[e], &ready));
        if (e >= n) /* one rank: no collective ran */
            dst[e] = (tl_span){ready, 0.0, (R->bk[b].hi - R->bk[b].lo) * sizeof(float), b, 0.0,
                               first_micro + e / R->nbk, 0, PH_BACKWARD};
        dst[e].ready_ms = ready;
    }
    ddp_shared_tl_nspans(sh, R->rank)[t] = n > nb ? n : nb;
    return DPS_OK;
}

/* Escalation (a second SIGINT or SIGTERM, or the first's grace) during
 * step `step` failed its next device operation. */
static dps_status cut_short(const ddp_rank *R, int step)
{
    int kept = R->rep->steps_done;
    return dps_fail(DPS_ERR_RUNTIME, "rank %d: interrupted by %s during step %d, which %s cut "
                    "short (the %d timed step%s before it kept)", R->rank,
                    dps_signal_name(dps_interrupted()), step, dps_escalation_cause(), kept,
                    kept == 1 ? "" : "s");
}

/* Escalation in the rank's set-up, before its first step. */
static dps_status cut_in_setup(const ddp_rank *R)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "rank %d: ", R->rank);
    return dps_fail_cut_in_setup(prefix);
}

static dps_status rank_loop(ddp_rank *R)
{
    DPS_TRY(be_sample_mem(R->be, R->dev));
    record_peaks(R);
    const dps_config *c = R->cfg;
    ddp_shared *sh = R->sh;
    for (int step = 0; step < c->warmup + c->steps; step++) {
        ranks_beat_step(R->beat, step);
        if (step == c->warmup) reset_traffic(R);
        batches_get(&R->batches, step, &R->h_x, &R->h_labels);
        double ms = 0.0;
        DPS_TRY(config_profile_hook(c, R->be, step, 1));
        if (step >= c->warmup) DPS_TRY(trace_mark(R, step - c->warmup));
        int skipped = 0, traced = step == c->warmup + c->steps - 1;
        float scale = scaler_loss_factor(&R->scaler);
        if (traced) op_trace_start(&R->optr); /* the last timed step: its ops into ops.csv */
        dps_status rc = rank_step(R, step, &ms, &skipped);
        if (rc) return dps_escalated() ? cut_short(R, step) : rc;
        if (traced) DPS_TRY(op_trace_finish(&R->optr, &R->rep->ops));
        DPS_TRY(config_profile_hook(c, R->be, step, 0));
        double loss = 0.0;
        for (int m = 0; m < c->accum; m++) loss += R->h_loss[m];
        ddp_shared_loss_sum(sh, R->rank)[step] = loss;
        if (R->scaler.on) scaler_update(&R->scaler, skipped);
        R->rep->losses_done = step + 1;
        DPS_TRY(be_sample_mem(R->be, R->dev));
        record_peaks(R);
        int k = step - c->warmup;
        float warm[PH_COUNT]; /* read in warm-up too: --inject-slowdown stretches by them */
        float *ph = k < 0 ? warm : ddp_shared_phase_ms(sh, R->rank) + (size_t)k * PH_COUNT;
        DPS_TRY(ptimer_read_n(R->timers, c->accum, 0, ph, R->micro_ms));
        if (k < 0) continue;
        ddp_shared_scaler(sh, R->rank)[k] = (step_scaler){scale, skipped};
        DPS_TRY(trace_read(R, k));
        ddp_shared_step_ms(sh, R->rank)[k] = ms;
        ph[PH_ALLREDUCE] = (float)R->allreduce_ms; /* the buckets' collectives, summed */
        R->rep->steps_done = k + 1;
    }
    if (R->shard.level == SHARD_PARAMETERS) { /* the result's gather is not the steps' traffic */
        uint64_t sent = R->comm->bytes_sent, received = R->comm->bytes_received;
        DPS_TRY(shard_gather_all(&R->shard, ddp_shared_params(sh)));
        R->comm->bytes_sent = sent;
        R->comm->bytes_received = received;
    } else if (R->rank == 0)
        DPS_TRY(R->be->ops->copy(R->be, R->st, ddp_shared_params(sh), DPS_HOST, R->params.ptr,
                                 R->dev, R->nparams * sizeof(float)));
    return R->be->ops->stream_sync(R->be, R->st);
}

/* Per-step averages of what the rank moved, and its memory peaks. */
static void rank_report_final(ddp_rank *R)
{
    dev_stats *d = &R->rep->dev;
    int n = R->rep->steps_done;
    record_peaks(R);
    if (n <= 0) return;
    if (R->comm) {
        d->link_bytes[LINK_P2P_SENT] = (double)R->comm->bytes_sent;
        d->link_bytes[LINK_P2P_RECV] = (double)R->comm->bytes_received;
        d->phase_bytes[PH_ALLREDUCE] = (double)(R->comm->bytes_sent + R->comm->bytes_received);
    }
    for (int p = 0; p < PH_COUNT; p++) d->phase_bytes[p] /= n;
    for (int l = 0; l < LINK_COUNT; l++) d->link_bytes[l] /= n;
    R->rep->allreduce_bytes = (double)R->nparams * sizeof(float);
}

/* This rank's failure into its report; whether another rank failed first
 * (then this one failed because of it) decides which message the run gives. */
static void report_failure(ddp_rank *R, dps_status rc)
{
    R->rep->status = rc;
    snprintf(R->rep->error, sizeof R->rep->error, "rank %d: %s", R->rank, dps_errmsg());
    if (R->comm && R->comm->failed) R->rep->secondary = R->comm->secondary;
    else R->rep->secondary = comm_shared_abort(ddp_shared_comm(R->sh));
}

/* Under a launcher: this rank's device on its host (the launcher may show
 * each rank its own GPU alone, through CUDA_VISIBLE_DEVICES). */
static dps_status local_device(ddp_rank *R)
{
    const world *w = &R->cfg->world;
    int local = w->local_rank, ndev = R->be->ndev;
    if (local < ndev) R->dev = local;
    else if (ndev == 1) R->dev = 0;
    else return dps_fail(DPS_ERR_USAGE, "rank %d: local rank %d, but this process sees %d "
                         "device%s: start at most %d ranks a host, or show each rank its own "
                         "(CUDA_VISIBLE_DEVICES)", R->rank, local, ndev, ndev == 1 ? "" : "s", ndev);
    return DPS_OK;
}

dps_status ddp_rank_main(const dps_config *cfg, ddp_shared *sh, int rank, rank_beat *beat,
                         ddp_world *dw)
{
    ddp_rank *R = calloc(1, sizeof *R);
    if (!R) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory", rank);
    *R = (ddp_rank){.cfg = cfg, .sh = sh, .rank = rank, .nranks = sh->nranks,
                    .dev = cfg->devices[rank], .rep = &sh->rank[rank], .beat = beat, .dw = dw};
    char name[32];
    snprintf(name, sizeof name, "ddp-rank-%d", rank);
    nvtx_name_thread(name);
    be_options bo = cfg->be;
    bo.quiet = 1;
    /* a launcher placed this process (mpirun binds it; emulated hosts share
     * one box, where every rank is its host's device 0) */
    bo.unpinned = dw != NULL;
    dps_status rc = be_open(&bo, &R->be);
    if (!rc && dw) rc = local_device(R);
    if (!rc) rc = rank_setup(R);
    if (rc && dps_escalated()) rc = cut_in_setup(R);
    if (!rc) rc = rank_loop(R);
    if (R->be) {
        dps_status sampled = be_sample_mem(R->be, R->dev); /* the peak of a failed run too */
        if (!rc) rc = sampled;
        rank_report_final(R);
    }
    if (rc) report_failure(R, rc);
    if (rc && R->comm) comm_abort(R->comm); /* whatever failed: comm_close then aborts NCCL */
    if (R->be) {
        rank_teardown(R);
        be_close(R->be);
    }
    free(R);
    return rc;
}
