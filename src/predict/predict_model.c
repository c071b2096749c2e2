/* The predictor's model (see predict_model.h). Units: ms, bytes, GB/s
 * (1e9 B/s, so bytes / (gbps * 1e6) is ms). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "predict/predict_model.h"
#include "core/strategy.h"
#include "model/bucket.h"

const char *const predict_status_names[3] = {"ok", "oom", "skipped"};

#define MIB 1048576.0
#define GIB 1073741824.0

void predict_consts_default(predict_consts *c)
{
    *c = (predict_consts){
        /* The machine's busbw is what nccl-tests measured, efficiency included. */
        .bus_eff = 1.0,
        /* Uncalibrated: an all-reduce beside backward as fast as alone (GPUs
         * with copy engines or NVLink come close; the CPU does not) */
        .overlap_eff = 1.0,
        /* NCCL's baseLat for Ring/Simple (src/graph/tuning.cc, NCCL 2.7-2.18). */
        .base_latency_us = 8.4,
        /* Uncalibrated: 0 until --calibrate fits it from dpscale's measured runs. */
        .bucket_overhead_us = 0.0,
        .sync_ms = 0.0,
        .dp_sync_ms = 0.0,
        /* GPUs do not share their compute: 0 until --calibrate fits it (the
         * host backend's emulated devices share the CPU's memory) */
        .compute_scale = 0.0,
    };
}

static double ms_of(double bytes, double gbps)
{
    return gbps > 0 ? bytes / (gbps * 1e6) : 0.0;
}

/* Bytes an optimizer step reads and writes per parameter, all of
 * bytes_per_grad: SGD with momentum reads the parameter, its gradient and
 * the momentum and writes two (5); AdamW reads four and writes three (7)
 * (PyTorch's foreach implementations, memory-bound). */
static double optimizer_bytes(const predict_workload *w)
{
    return w->params * w->bytes_per_grad * (w->optimizer == OPT_ADAMW ? 7.0 : 5.0);
}

/* fp16's GradScaler: torch._amp_foreach_non_finite_check_and_unscale_
 * multiplies every gradient by 1/scale and looks for inf/NaN in one pass
 * (a read and a write of each, memory-bound); none without a scaler. */
static double unscale_ms(const predict_machine *m, const predict_workload *w)
{
    if (w->precision != PREC_FP16) return 0.0;
    return w->unscale_ms >= 0 ? w->unscale_ms
                              : ms_of(2.0 * w->params * w->bytes_per_grad, m->mem_gbps);
}

dps_status predict_split_step(const predict_machine *m, const predict_workload *w,
                              predict_split *s)
{
    s->load_ms = w->load_ms >= 0 ? w->load_ms
                                 : ms_of(w->batch_per_gpu * w->input_bytes_per_sample, m->h2d_gbps);
    s->optimizer_ms = w->optimizer_ms >= 0 ? w->optimizer_ms : ms_of(optimizer_bytes(w), m->mem_gbps);
    s->unscale_ms = unscale_ms(m, w);
    double rest = w->step_ms_1gpu - s->load_ms - s->optimizer_ms - s->unscale_ms;
    int f = w->forward_ms > 0, b = w->backward_ms > 0;
    s->forward_ms = f ? w->forward_ms : b ? rest - w->backward_ms : rest / 3.0; /* 1:2, the */
    s->backward_ms = b ? w->backward_ms : rest - s->forward_ms;  /* usual rule of thumb */
    if (s->forward_ms > 0 && s->backward_ms > 0 && rest >= s->forward_ms + s->backward_ms - 1e-9)
        return DPS_OK;
    if (w->source[0])
        return dps_fail(DPS_ERR_USAGE, "configuration %s: its phases (phases.csv) leave no time for "
                        "forward and backward (run it again)", w->source);
    return dps_fail(DPS_ERR_USAGE, "workload %s: step_ms_1gpu %g ms leaves no time for forward and "
                    "backward after load %.3g ms and optimizer %.3g ms%s (give forward_ms, "
                    "backward_ms, optimizer_ms or input_bytes_per_sample that fit)", w->name,
                    w->step_ms_1gpu, s->load_ms, s->optimizer_ms,
                    s->unscale_ms > 0 ? " and fp16's unscale" : "");
}

double predict_busbw_gbps(const predict_machine *m, int nodes, const predict_consts *c)
{
    double bw = m->intra_busbw_gbps;
    /* Across nodes every node's ring passes through its NICs at the bus
     * rate: the slower of the two bounds it (NCCL's tuning model). */
    if (nodes > 1 && m->inter_gbps < bw) bw = m->inter_gbps;
    return bw * c->bus_eff;
}

/* A ring collective of `rounds` passes around the ring (all-reduce 2: a
 * reduce-scatter then an all-gather; reduce-scatter or all-gather alone 1):
 * rounds (n-1)/n of the buffer through each rank's link, rounds (n-1) ring
 * steps of latency, NCCL's alpha-beta cost. 0 for one rank. */
static double ring_ms(double bytes, int n, int nodes, int rounds, const predict_machine *m,
                      const predict_consts *c)
{
    if (n < 2) return 0.0; /* NCCL's cost table: 0 for one rank */
    double steps = rounds * (n - 1.0), inter = nodes > 1 ? rounds * (nodes - 1.0) : 0.0;
    double lat = c->base_latency_us + (steps - inter) * m->intra_latency_us +
                 inter * m->inter_latency_us;
    /* tuning.cc, ncclTopoGetAlgoTime: the "plateau effect of ring" across nodes */
    if (nodes > 1 && bytes >= n / 16.0 * 65536) lat *= 1.9;
    return steps / n * ms_of(bytes, predict_busbw_gbps(m, nodes, c)) + lat / 1000.0;
}

double predict_allreduce_ms(double bytes, int n, int nodes, const predict_machine *m,
                            const predict_consts *c)
{
    return ring_ms(bytes, n, nodes, 2, m, c);
}

double predict_halfring_ms(double bytes, int n, int nodes, const predict_machine *m,
                           const predict_consts *c)
{
    return ring_ms(bytes, n, nodes, 1, m, c);
}

#define PIECES 4096 /* without tensor_params: this many equal pieces, buckets within 1/4096 */

/* The parameters cut into equal pieces (a workload without tensor_params):
 * their element counts into *pieces (malloc'd). Returns the count, or -1. */
static int equal_pieces(const predict_workload *w, size_t **pieces)
{
    size_t total = (size_t)llround(w->params);
    int np = total < PIECES ? (int)total : PIECES;
    *pieces = malloc((size_t)(np > 0 ? np : 1) * sizeof **pieces);
    if (!*pieces) return -1;
    for (int i = 0; i < np; i++) (*pieces)[i] = total / np + ((size_t)i < total % np);
    return np;
}

/* When a bucket is ready: once the last of its tensors is, by the model file's layers. */
static double bucket_ready_at(const predict_workload *w, const bucket *b)
{
    double at = 0;
    for (int t = b->first_param; t < b->first_param + b->nparams; t++) at = fmax(at, w->tensor_ready[t]);
    return at;
}

int predict_buckets(const predict_workload *w, double *bytes, double *ready, int max)
{
    size_t *pieces = NULL, total = 0;
    int np = w->ntensors ? w->ntensors : equal_pieces(w, &pieces);
    const size_t *counts = w->ntensors ? w->tensors : pieces; /* in model order */
    bucket *bk = malloc((size_t)max * sizeof *bk);
    int nb = -1;
    for (int i = 0; i < np; i++) total += counts[i];
    if (np > 0 && bk)
        nb = bucket_assign(counts, np, (size_t)w->bytes_per_grad, (size_t)(w->first_bucket_mb * MIB),
                           (size_t)(w->bucket_mb * MIB), bk, max);
    for (int i = 0; i < nb; i++) {
        bytes[i] = (double)(bk[i].hi - bk[i].lo) * w->bytes_per_grad;
        /* backward runs from the last parameter to the first, at a pace
         * proportional to the parameters it has passed; a bucket is ready
         * once its first (lowest) tensor's gradient is */
        ready[i] = (double)(total - bk[i].lo) / (double)total;
        if (w->tensor_ready) ready[i] = bucket_ready_at(w, &bk[i]); /* a model file's layers */
        if (w->nready == nb) ready[i] = w->ready[i]; /* measured (predict --from) */
    }
    free(pieces);
    free(bk);
    return nb;
}

/* A new unit at tensor t: a given unit that changes, a model file's op
 * (a ready time that changes), or every tensor. */
static int unit_starts(const predict_workload *w, int t)
{
    if (t == 0) return 1;
    if (w->tensor_unit) return w->tensor_unit[t] != w->tensor_unit[t - 1];
    if (w->tensor_ready) return w->tensor_ready[t] != w->tensor_ready[t - 1];
    return 1;
}

int predict_units(const predict_workload *w, double *bytes, double *ready, int max)
{
    double total = w->params, lo = 0;
    if (w->units > 0) {
        if (w->units > max) return -1;
        for (int u = 0; u < w->units; u++) {
            bytes[u] = total / w->units * w->bytes_per_grad;
            ready[u] = 1.0 - (double)u / w->units; /* its first parameter's: the pace's */
        }
        return w->units;
    }
    int nu = 0;
    total = 0;
    for (int t = 0; t < w->ntensors; t++) total += (double)w->tensors[t];
    for (int t = 0; t < w->ntensors; t++) {
        if (unit_starts(w, t)) {
            if (nu == max) return -1;
            bytes[nu] = 0.0;
            ready[nu++] = w->tensor_ready ? w->tensor_ready[t] : (total - lo) / total;
        }
        bytes[nu - 1] += (double)w->tensors[t] * w->bytes_per_grad;
        if (w->tensor_ready) ready[nu - 1] = fmax(ready[nu - 1], w->tensor_ready[t]);
        lo += (double)w->tensors[t];
    }
    return nu ? nu : -1;
}

/* When an all-reduce of ms (at full speed) that starts at `start` ends:
 * at overlap_eff of its speed until backward_ms, at full speed after. */
static double overlap_one(double start, double ms, double backward_ms, double overlap_eff)
{
    if (start >= backward_ms) return start + ms;
    double shared = backward_ms - start; /* wall time beside backward */
    if (ms <= shared * overlap_eff) return start + ms / overlap_eff;
    return backward_ms + (ms - shared * overlap_eff);
}

double predict_overlap_end(const double *ready, const double *ar_ms, int nb, double backward_ms,
                           double overlap_eff, double *busy)
{
    double end = 0.0;
    *busy = 0.0;
    for (int i = 0; i < nb; i++) {
        double start = fmax(ready[i] * backward_ms, end);
        end = overlap_one(start, ar_ms[i], backward_ms, overlap_eff);
        *busy += end - start;
    }
    return end;
}

/* Forward and backward of one of n devices training at once. */
static predict_split scaled_split(const predict_machine *m, const predict_split *s,
                                  const predict_consts *c, int n)
{
    predict_split t = *s;
    int together = n < m->gpus_per_node ? n : m->gpus_per_node;
    double f = 1.0 + c->compute_scale * (together - 1);
    t.forward_ms *= f;
    t.backward_ms *= f;
    return t;
}

int predict_syncs(const predict_workload *w, dps_mode mode)
{
    return dps_strategy_of(mode)->per_rank ? 1 : predict_accum(w);
}

static void finish_row(const predict_workload *w, const predict_consts *c, double step_1,
                       predict_row *r)
{
    double per = dps_strategy_of(r->mode)->per_rank ? c->sync_ms : c->dp_sync_ms;
    r->sync_ms = r->ngpus < 2 ? 0.0 : per * predict_syncs(w, r->mode);
    r->step_ms += r->sync_ms;
    r->samples_per_s = (double)r->ngpus * w->batch_per_gpu * 1000.0 / r->step_ms;
    r->efficiency = step_1 / r->step_ms; /* weak scaling: per-device throughput against one device's */
}

/* ddp's micro-steps that all-reduce: the last (no_sync, PyTorch's loop
 * under `with model.no_sync()` but the last), or every one (sync_all). */
static int syncing_steps(const predict_workload *w)
{
    return w->sync_all ? predict_accum(w) : 1;
}

/* The buckets' all-reduces on n ranks (each bucket's bytes times the
 * strategy's allreduce_x) into ar; their count, or -1 (r skipped) when
 * there are too many. */
static int bucket_allreduces(const predict_machine *m, const predict_workload *w,
                             const predict_consts *c, double x, predict_row *r, double *ready,
                             double *ar)
{
    static double bytes[PREDICT_MAX_BUCKETS];
    int nb = predict_buckets(w, bytes, ready, PREDICT_MAX_BUCKETS);
    if (nb < 0) {
        r->status = PRED_SKIPPED;
        snprintf(r->note, sizeof r->note, "more than %d buckets (or out of host memory): raise "
                 "bucket_mb", PREDICT_MAX_BUCKETS);
        return -1;
    }
    for (int i = 0; i < nb; i++)
        ar[i] = predict_allreduce_ms(x * bytes[i], r->ngpus, r->nodes, m, c) +
                c->bucket_overhead_us / 1000.0;
    return nb;
}

/* DDP's buckets (ddp, zero1): an optimizer step of accum micro-steps of
 * batch_per_gpu / accum samples each, the micro-steps that all-reduce (the
 * last, or every one: syncing_steps) with the buckets' all-reduces behind
 * that micro-step's backward alone. A micro-step under no_sync only
 * accumulates .grad: no hook, no bucket. Without gradient_as_bucket_view
 * PyTorch's reducer copies each gradient into its bucket and back (read +
 * write, twice: 4 x the gradients over mem_gbps), half during backward, in
 * each micro-step that all-reduces. */
static void bucketed_backward(const predict_machine *m, const predict_workload *w,
                              const predict_split *s, const predict_consts *c,
                              const dps_strategy *st, predict_row *r)
{
    static double ready[PREDICT_MAX_BUCKETS], ar[PREDICT_MAX_BUCKETS];
    double *ph = r->phase_ms, busy;
    int k = syncing_steps(w);
    r->nbuckets = bucket_allreduces(m, w, c, st->allreduce_x, r, ready, ar);
    if (r->nbuckets < 0) return;
    r->allreduces = k * r->nbuckets;
    r->bucket_copy_ms = ms_of(4.0 * w->params * w->bytes_per_grad, m->mem_gbps);
    double bwd = s->backward_ms / predict_accum(w) + r->bucket_copy_ms / 2; /* one that syncs */
    r->allreduce_end_ms = predict_overlap_end(ready, ar, r->nbuckets, bwd, c->overlap_eff, &busy);
    ph[PH_BACKWARD] = s->backward_ms + k * r->bucket_copy_ms / 2;
    ph[PH_ALLREDUCE] = k * busy;
    ph[PH_ALLREDUCE_EXPOSED] = k * (fmax(0.0, r->allreduce_end_ms - bwd) + r->bucket_copy_ms / 2);
    r->coll_bytes[0] = k * st->allreduce_x * w->params * w->bytes_per_grad;
    r->exposed_comm_ms = ph[PH_ALLREDUCE_EXPOSED];
}

/* Whether the strategy shards the parameters: each unit gathered before
 * each pass that uses it (FSDP's FULL_SHARD), not once after the step. */
static int gathers_each_pass(const dps_strategy *st)
{
    return st->shard >= 3;
}

/* A collective of ms issued at `start` on the one communication stream,
 * free from *comm: its end (at overlap_eff beside the compute that runs
 * until compute_end), the stream busy until then. */
static double issue(double *comm, double start, double ms, double compute_end, double eff,
                    double *busy)
{
    start = fmax(start, *comm);
    *comm = ms > 0 ? overlap_one(start, ms, compute_end, eff) : start;
    *busy += *comm - start;
    return *comm;
}

/* One micro-step's backward over the units, from the last, as dpscale's
 * sharded ranks and FSDP run it on one communication stream in issue
 * order: entering a unit waits for its gathered parameters (ag[u], 0: held
 * from forward or not sharded) and issues the next unit's gather
 * (BACKWARD_PRE, _runtime_utils.py's _prefetch_handle), waits for the
 * reduce-scatter of the unit two before it (two gradient buffers), runs
 * its backward (to ready[u] of bwd_ms), then issues its reduce-scatter
 * (rs[u]). *wall: the backward's time, waits included; *tail: the
 * reduce-scatters after it; *busy: the stream's time. */
static void units_backward(const double *ready, const double *ag, const double *rs, int nu,
                           double bwd_ms, double eff, double *wall, double *tail, double *busy)
{
    static double gathered[PREDICT_MAX_UNITS], scattered[PREDICT_MAX_UNITS];
    double t = 0.0, comm = 0.0, done = 0.0;
    *busy = 0.0;
    for (int u = 0; u < nu; u++) gathered[u] = scattered[u] = 0.0;
    for (int u = nu - 1; u >= 0; u--) {
        t = fmax(t, gathered[u]);
        double end = t + (1.0 - done) * bwd_ms; /* of backward's compute, as far as known */
        if (u > 0 && ag[u - 1] > 0) gathered[u - 1] = issue(&comm, t, ag[u - 1], end, eff, busy);
        if (u + 2 < nu) t = fmax(t, scattered[u + 2]);
        t += fmax(0.0, ready[u] - done) * bwd_ms;
        done = fmax(done, ready[u]);
        if (rs[u] > 0) scattered[u] = issue(&comm, t, rs[u], t + (1.0 - done) * bwd_ms, eff, busy);
    }
    t += (1.0 - done) * bwd_ms; /* ops without parameters before the first unit */
    *wall = t;
    *tail = fmax(0.0, comm - t);
}

/* The units' reduce-scatters (zero2, fsdp) and fsdp's gathers, every
 * micro-step: forward gathers each unit as it enters it, exposed (no
 * forward prefetch); backward as units_backward, all but the last unit
 * gathered again (the one forward ended on is still held); each unit's
 * gradients scaled by 1/n in place before its reduce-scatter (a read and a
 * write over mem_gbps). */
static void unit_passes(const predict_machine *m, const predict_workload *w, const predict_split *s,
                        const predict_consts *c, const dps_strategy *st, const double *bytes,
                        const double *ready, predict_row *r)
{
    static double ag[PREDICT_MAX_UNITS], rs[PREDICT_MAX_UNITS];
    int N = predict_accum(w), nu = r->nunits;
    double G = w->params * w->bytes_per_grad, *ph = r->phase_ms, fwd_gather = 0.0;
    double fwd_x = gathers_each_pass(st) ? fmin(1.0, st->all_gather_x) : 0.0;
    double bwd_x = gathers_each_pass(st) ? st->all_gather_x - fwd_x : 0.0;
    for (int u = 0; u < nu; u++) {
        double one = predict_halfring_ms(bytes[u], r->ngpus, r->nodes, m, c);
        fwd_gather += fwd_x * one;
        ag[u] = u == nu - 1 ? 0.0 : bwd_x * one;
        rs[u] = predict_halfring_ms(st->reduce_scatter_x * bytes[u], r->ngpus, r->nodes, m, c);
    }
    r->bucket_copy_ms = st->reduce_scatter_x > 0 ? ms_of(2.0 * G, m->mem_gbps) : 0.0;
    double bwd = s->backward_ms / N + r->bucket_copy_ms, wall, tail, busy;
    units_backward(ready, ag, rs, nu, bwd, c->overlap_eff, &wall, &tail, &busy);
    ph[PH_FORWARD] = s->forward_ms + N * fwd_gather;
    ph[PH_BACKWARD] = N * wall;
    ph[PH_ALLREDUCE_EXPOSED] = N * tail;
    ph[PH_ALLREDUCE] = N * (fwd_gather + busy);
    r->allreduce_end_ms = wall + tail;
    r->coll_bytes[1] = N * st->reduce_scatter_x * G;
    r->coll_bytes[2] = N * (fwd_x * G + (nu > 0 ? bwd_x * (G - bytes[nu - 1]) : 0.0));
    r->exposed_comm_ms = N * (fwd_gather + wall - bwd + tail);
}

/* zero1's and zero2's parameters after the step: each unit's updated
 * chunks all-gathered into every rank's parameters (ZeroRedundancyOptimizer's
 * _broadcast_params, here an all-gather a unit), waited for before the next
 * forward: exposed, timed in the optimizer's phase as phases.csv's. */
static void post_step_gather(const predict_machine *m, const predict_workload *w,
                             const predict_consts *c, const dps_strategy *st,
                             const double *bytes, predict_row *r)
{
    if (gathers_each_pass(st) || st->all_gather_x <= 0) return;
    double ms = 0.0;
    for (int u = 0; u < r->nunits; u++)
        ms += predict_halfring_ms(st->all_gather_x * bytes[u], r->ngpus, r->nodes, m, c);
    r->phase_ms[PH_OPTIMIZER] += ms;
    r->phase_ms[PH_ALLREDUCE] += ms;
    r->exposed_comm_ms += ms;
    r->coll_bytes[2] += st->all_gather_x * w->params * w->bytes_per_grad;
}

/* A rank's ring sends and receives (n-1)/n of a reduce-scatter's or
 * all-gather's buffer each, twice that of an all-reduce's; nothing on one
 * rank, where no collective runs. */
static void ring_volume(predict_row *r)
{
    int n = r->ngpus;
    if (n < 2) {
        r->coll_bytes[0] = r->coll_bytes[1] = r->coll_bytes[2] = 0.0;
        r->comm_bytes = 0.0;
        return;
    }
    r->comm_bytes = 2.0 * (n - 1) / n * (2.0 * r->coll_bytes[0] + r->coll_bytes[1] + r->coll_bytes[2]);
}

/* A step of a strategy of a process a device, by its row of the table
 * (core/strategy.h): DDP's buckets all-reduced beside backward (ddp,
 * zero1), or each unit's gradients reduce-scattered as backward completes
 * it (zero2, fsdp); the parameters gathered after the step (zero1, zero2)
 * or before each pass (fsdp); the optimizer on the whole model (ddp) or on
 * this rank's 1/n of it (every shard level). Phases are the step's,
 * summed over its micro-steps, as phases.csv's. */
static void predict_ranks(const predict_machine *m, const predict_workload *w, const predict_split *s,
                          const predict_consts *c, predict_row *r)
{
    static double bytes[PREDICT_MAX_UNITS], ready[PREDICT_MAX_UNITS];
    const dps_strategy *st = dps_strategy_of(r->mode);
    double *ph = r->phase_ms;
    if (st->shard && (r->nunits = predict_units(w, bytes, ready, PREDICT_MAX_UNITS)) < 0) {
        r->status = PRED_SKIPPED;
        snprintf(r->note, sizeof r->note, "%s shards by units: give the workload tensor_params, "
                 "a model file or units = N (at most %d)", st->name, PREDICT_MAX_UNITS);
        return;
    }
    r->busbw_gbps = predict_busbw_gbps(m, r->nodes, c);
    ph[PH_LOAD] = s->load_ms;
    ph[PH_FORWARD] = s->forward_ms;
    if (st->buckets) bucketed_backward(m, w, s, c, st, r);
    else unit_passes(m, w, s, c, st, bytes, ready, r);
    if (r->status == PRED_SKIPPED) return;
    ph[PH_UNSCALE] = s->unscale_ms;
    ph[PH_OPTIMIZER] = s->optimizer_ms / (st->shard ? r->ngpus : 1); /* this rank's chunks */
    post_step_gather(m, w, c, st, bytes, r);
    ring_volume(r);
    r->step_ms = ph[PH_LOAD] + ph[PH_FORWARD] + ph[PH_BACKWARD] + ph[PH_ALLREDUCE_EXPOSED] +
                 ph[PH_UNSCALE] + ph[PH_OPTIMIZER];
}

/* The loss on `rows` samples' outputs, memory-bound: log-softmax (read,
 * write), nll (read), their backward (two reads, one write): 6 passes. */
static double loss_ms(const predict_machine *m, const predict_workload *w, double rows)
{
    return ms_of(6.0 * rows * w->output_bytes_per_sample, m->mem_gbps);
}

/* A ring broadcast or reduce from/to device 0 over n devices, pipelined:
 * the bytes once over p2p_gbps, NCCL's latency (base + n steps). */
static double rooted_ms(const predict_machine *m, const predict_consts *c, double bytes, int n)
{
    if (n < 2) return 0.0;
    return ms_of(bytes, m->p2p_gbps) + (c->base_latency_us + n * m->intra_latency_us) / 1000.0;
}

/* dp, DataParallel's order, serial where it is: the whole batch to device 0,
 * replicate, scatter, forward in parallel, gather, the loss on device 0,
 * the logits' gradient back, backward in parallel, reduce onto device 0
 * (flattened first: read + write over mem_gbps), optimizer on device 0.
 * With accum N each of the N micro-steps is a DataParallel forward and
 * backward of B/N samples a device: replicate and reduce N times a step,
 * the batch's bytes and compute the same in all. */
static void predict_dp(const predict_machine *m, const predict_workload *w, const predict_split *s,
                       const predict_consts *c, predict_row *r)
{
    int n = r->ngpus, N = predict_accum(w);
    double B = w->batch_per_gpu, P = w->params * w->bytes_per_grad, *ph = r->phase_ms;
    double out_rest = (n - 1) * B * w->output_bytes_per_sample; /* what the others hold */
    ph[PH_LOAD] = n * s->load_ms;
    ph[PH_REPLICATE] = N * rooted_ms(m, c, P, n);
    ph[PH_SCATTER] = ms_of((n - 1) * B * w->input_bytes_per_sample, m->p2p_gbps);
    ph[PH_FORWARD] = fmax(0.0, s->forward_ms - loss_ms(m, w, B));
    ph[PH_GATHER] = ms_of(out_rest, m->p2p_gbps);
    ph[PH_LOSS] = loss_ms(m, w, n * B);
    ph[PH_BACKWARD] = ms_of(out_rest, m->p2p_gbps) + s->backward_ms;
    ph[PH_REDUCE] = n > 1 ? N * (rooted_ms(m, c, P, n) + ms_of(2.0 * P, m->mem_gbps)) : 0.0;
    ph[PH_UNSCALE] = s->unscale_ms;
    ph[PH_OPTIMIZER] = s->optimizer_ms;
    r->exposed_comm_ms = ph[PH_REPLICATE] + ph[PH_REDUCE];
    r->step_ms = 0.0;
    for (int p = 0; p < PH_COUNT; p++) r->step_ms += ph[p];
}

/* The largest unit's gradient bytes (0: the workload has no units). */
static double largest_unit(const predict_workload *w)
{
    static double bytes[PREDICT_MAX_UNITS], ready[PREDICT_MAX_UNITS];
    double most = 0.0;
    int nu = predict_units(w, bytes, ready, PREDICT_MAX_UNITS);
    for (int u = 0; u < nu; u++) most = fmax(most, bytes[u]);
    return most;
}

/* A rank's model states (strategies/footprint.c's model_states): the ZeRO
 * formulas of the strategy's shard level (dps_strategy_state_bytes, at
 * the workload's bytes a parameter), DDP's gradient buckets, the two
 * units' gradients before their reduce-scatter (shard 2 and up) and two
 * units' gathered parameters (shard 3), and with --accum the accumulated
 * gradients dpscale keeps apart where the gradients are whole. */
static double rank_states(const predict_workload *w, const dps_strategy *st, int n)
{
    double P = w->params * w->bytes_per_grad, opt = w->optimizer == OPT_ADAMW ? 8.0 : 4.0;
    double states = dps_strategy_state_bytes(st, P / 4.0, opt, n);
    double unit = st->shard >= 2 ? largest_unit(w) : 0.0;
    if (st->buckets) states += P;
    if (st->shard >= 2) states += 2 * unit;
    if (st->shard >= 3) states += 2 * unit;
    if (st->shard < 2 && predict_accum(w) > 1) states += P;
    return states;
}

void predict_memory(const predict_workload *w, dps_mode mode, int n, double *gpu0, double *other)
{
    double B = (double)w->batch_per_gpu / predict_accum(w), P = w->params * w->bytes_per_grad;
    double state = P * (w->optimizer == OPT_ADAMW ? 2.0 : 1.0);
    double in = B * w->input_bytes_per_sample, out = B * w->output_bytes_per_sample;
    double act = B * w->activation_bytes_per_sample;
    double acc = predict_accum(w) > 1 ? P : 0.0; /* dpscale's accumulated gradients, apart */
    if (dps_strategy_of(mode)->per_rank) {
        /* model states (rank_states), input shard, logits, logits
         * gradient, log-probabilities and their gradient
         * (nn.CrossEntropyLoss's), activations (a micro-batch's) */
        *gpu0 = *other = rank_states(w, dps_strategy_of(mode), n) + in + 4 * out + act;
        return;
    }
    /* device 0: parameters (the master copy), gradients, optimizer state,
     * the input batch, the gathered logits and their gradient, the
     * log-probabilities and their gradient (its replica's logits live in
     * the gathered ones), activations (a micro-batch's) */
    *gpu0 = 2 * P + acc + state + n * in + 4.0 * n * out + act;
    *other = 0.0;
    if (n < 2) return;
    /* broadcast_coalesced's groups of at most 10 MiB, a larger tensor alone:
     * the coalescing buffer holds the largest, on every device and once
     * more on device 0 for reduce_add_coalesced, whose output is device
     * 0's reduced gradients */
    double flat = fmin(P, 10 * MIB);
    for (int t = 0; t < w->ntensors; t++) flat = fmax(flat, (double)w->tensors[t] * w->bytes_per_grad);
    *gpu0 += 2 * flat + P;
    /* another: replica parameters, gradients, coalescing buffer, input
     * chunk, logits gradient chunk, activations */
    *other = 2 * P + flat + in + out + act;
}

#define MAX_BATCH (1 << 24) /* the most batch_per_gpu a workload file takes */

/* The micro-batches (of accum samples) a device's memory, linear in the
 * batch (at0 with none, at1 with one), leaves room for under cap. */
static double groups_fitting(double at0, double at1, double cap)
{
    if (at0 > cap) return 0.0;
    return at1 > at0 ? floor((cap - at0) / (at1 - at0)) : (double)MAX_BATCH;
}

/* The largest batch per device (a multiple of accum) whose memory fits
 * gpu_mem_gib on every device; -1 without gpu_mem_gib. */
static int max_batch(const predict_machine *m, const predict_workload *w, dps_mode mode, int n)
{
    double cap = m->gpu_mem_gib * GIB, g0[2], other[2];
    if (cap <= 0) return -1;
    predict_workload t = *w;
    int N = predict_accum(w);
    for (int k = 0; k < 2; k++) {
        t.batch_per_gpu = k * N;
        predict_memory(&t, mode, n, &g0[k], &other[k]);
    }
    double groups = fmin(groups_fitting(g0[0], g0[1], cap), groups_fitting(other[0], other[1], cap));
    return (int)fmin((double)MAX_BATCH, groups * N);
}

static void forecast_oom(const predict_machine *m, predict_row *r)
{
    double cap = m->gpu_mem_gib * GIB, top = fmax(r->gpu0_mem_bytes, r->other_mem_bytes);
    if (cap <= 0 || top <= cap) return;
    r->status = PRED_OOM;
    snprintf(r->note, sizeof r->note, "device %s needs %.2f GiB, more than gpu_mem_gib %g; "
             "batch_per_gpu %d fits", r->gpu0_mem_bytes >= r->other_mem_bytes ? "0" : "1",
             top / GIB, m->gpu_mem_gib, r->max_batch_per_gpu);
}

/* Why the machine cannot run it, or 0 when it can: dp across nodes, or
 * several nodes without a network between them. */
static int refuse(const predict_machine *m, dps_mode mode, predict_row *r)
{
    if (!dps_strategy_of(mode)->per_rank && r->nodes > 1)
        snprintf(r->note, sizeof r->note, "dp runs on one node (%d devices)", m->gpus_per_node);
    else if (r->nodes > 1 && m->inter_gbps <= 0)
        snprintf(r->note, sizeof r->note, "%d devices need %d nodes of %d and the machine has no "
                 "network between nodes (give inter_gbps, GB/s per node, in a --machine file)",
                 r->ngpus, r->nodes, m->gpus_per_node);
    else
        return 0;
    r->status = PRED_SKIPPED;
    return 1;
}

/* A row needing more nodes than the machine file's `nodes` is predicted
 * all the same (the network scales by node), and says so in its note. */
static void note_beyond_nodes(const predict_machine *m, predict_row *r)
{
    if (!m->nodes || r->nodes <= m->nodes) return;
    size_t used = strlen(r->note);
    snprintf(r->note + used, sizeof r->note - used, "%s%d nodes of %d, more than the machine "
             "file's nodes = %d", used ? "; " : "", r->nodes, m->gpus_per_node, m->nodes);
}

/* What predictions.csv holds of a figure, the readers' range (docs/results.md:
 * dpstools/results.py refuses a non-zero magnitude below 1e-9 or from 2^64 on, and
 * predict_out.c writes a figure above 0 with as many of 9 decimals as it
 * needs): finite, at least 0, under 1e19; at least 1e-9 where it must be
 * above 0 (step_ms, samples_per_s). */
#define FIGURE_MIN 1e-9
#define FIGURE_MAX 1e19

static int figure_fits(double x, int above_0)
{
    return isfinite(x) && x >= 0 && x < FIGURE_MAX && (!above_0 || x >= FIGURE_MIN);
}

/* Whether r has a figure the file cannot hold: its column's name into name
 * and its value into *value. */
static int unwritable_figure(const predict_row *r, char *name, size_t len, double *value)
{
    const struct { const char *name; double x; int above_0; } figs[] = {
        {"step_ms", r->step_ms, 1}, {"samples_per_s", r->samples_per_s, 1},
        {"efficiency", r->efficiency, 0}, {"gpu0_mem_bytes", r->gpu0_mem_bytes, 0},
        {"other_mem_bytes", r->other_mem_bytes, 0}, {"busbw_gbps", r->busbw_gbps, 0},
        {"allreduce_end_ms", r->allreduce_end_ms, 0}, {"bucket_copy_ms", r->bucket_copy_ms, 0},
        {"sync_ms", r->sync_ms, 0}, {"allreduce_bytes", r->coll_bytes[0], 0},
        {"reduce_scatter_bytes", r->coll_bytes[1], 0}, {"all_gather_bytes", r->coll_bytes[2], 0},
        {"comm_bytes_per_step", r->comm_bytes, 0}};
    for (size_t i = 0; i < sizeof figs / sizeof figs[0]; i++) {
        if (figure_fits(figs[i].x, figs[i].above_0)) continue;
        snprintf(name, len, "%s", figs[i].name);
        *value = figs[i].x;
        return 1;
    }
    for (int p = 0; p < PH_COUNT; p++) {
        if (figure_fits(r->phase_ms[p], 0)) continue;
        snprintf(name, len, "%s_ms", dps_phase_names[p]);
        *value = r->phase_ms[p];
        return 1;
    }
    return 0;
}

/* A prediction whose figures predictions.csv cannot hold (from inputs far
 * from any machine's: a bandwidth of 1e-9 GB/s, an efficiency of 1e-300) is
 * skipped, its note naming the figure, so that what predict accepts it
 * writes as its readers take it. */
static void skip_unwritable(predict_row *r)
{
    double x;
    char name[48];
    if (!unwritable_figure(r, name, sizeof name, &x)) return;
    r->status = PRED_SKIPPED;
    snprintf(r->note, sizeof r->note, "%s would be %.4g, beyond what predictions.csv holds "
             "(0, or 1e-09 to 1e+19): check the machine's bandwidths and calibration", name, x);
}

void predict_config(const predict_machine *m, const predict_workload *w, const predict_split *s,
                    const predict_consts *c, dps_mode mode, int n, predict_row *r)
{
    memset(r, 0, sizeof *r);
    r->w = w;
    r->mode = mode;
    r->ngpus = n;
    r->batch_per_gpu = w->batch_per_gpu;
    r->max_batch_per_gpu = -1;
    r->nodes = (n + m->gpus_per_node - 1) / m->gpus_per_node;
    if (refuse(m, mode, r)) return;
    predict_split t = scaled_split(m, s, c, n);
    if (dps_strategy_of(mode)->per_rank) predict_ranks(m, w, &t, c, r);
    else predict_dp(m, w, &t, c, r);
    if (r->status == PRED_SKIPPED) return;
    finish_row(w, c, w->step_ms_1gpu, r);
    predict_memory(w, mode, n, &r->gpu0_mem_bytes, &r->other_mem_bytes);
    r->max_batch_per_gpu = max_batch(m, w, mode, n);
    forecast_oom(m, r);
    note_beyond_nodes(m, r);
    skip_unwritable(r);
}
