/* The predictor's model (see predict_model.h). Units: ms, bytes, GB/s
 * (1e9 B/s, so bytes / (gbps * 1e6) is ms). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "predict/predict_model.h"
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

double predict_allreduce_ms(double bytes, int n, int nodes, const predict_machine *m,
                            const predict_consts *c)
{
    if (n < 2) return 0.0; /* NCCL's cost table: 0 for one rank */
    double steps = 2.0 * (n - 1), inter = nodes > 1 ? 2.0 * (nodes - 1) : 0.0;
    double lat = c->base_latency_us + (steps - inter) * m->intra_latency_us +
                 inter * m->inter_latency_us;
    /* tuning.cc, ncclTopoGetAlgoTime: the "plateau effect of ring" across nodes */
    if (nodes > 1 && bytes >= n / 16.0 * 65536) lat *= 1.9;
    return steps / n * ms_of(bytes, predict_busbw_gbps(m, nodes, c)) + lat / 1000.0;
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
    return mode == MODE_DP ? predict_accum(w) : 1;
}

static void finish_row(const predict_workload *w, const predict_consts *c, double step_1,
                       predict_row *r)
{
    double per = r->mode == MODE_DP ? c->dp_sync_ms : c->sync_ms;
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

/* The buckets' all-reduce times on n ranks into ar; their count, or -1
 * (r skipped) when there are too many. */
static int ddp_allreduces(const predict_machine *m, const predict_workload *w,
                          const predict_consts *c, predict_row *r, double *ready, double *ar)
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
        ar[i] = predict_allreduce_ms(bytes[i], r->ngpus, r->nodes, m, c) +
                c->bucket_overhead_us / 1000.0;
    return nb;
}

/* ddp, an optimizer step of accum micro-steps of batch_per_gpu / accum
 * samples each: forward and backward, the micro-steps that all-reduce (the
 * last, or every one: syncing_steps) with the buckets' all-reduces behind
 * that micro-step's backward alone, the optimizer on every rank. A micro-
 * step under no_sync only accumulates .grad: no hook, no bucket. Without
 * gradient_as_bucket_view PyTorch's reducer copies each gradient into its
 * bucket and back (read + write, twice: 4 x the gradients over mem_gbps),
 * half during backward, in each micro-step that all-reduces. Phases are
 * the step's, summed over its micro-steps, as phases.csv's. */
static void predict_ddp(const predict_machine *m, const predict_workload *w, const predict_split *s,
                        const predict_consts *c, predict_row *r)
{
    static double ready[PREDICT_MAX_BUCKETS], ar[PREDICT_MAX_BUCKETS];
    double *ph = r->phase_ms, busy;
    int k = syncing_steps(w);
    r->nbuckets = ddp_allreduces(m, w, c, r, ready, ar);
    if (r->nbuckets < 0) return;
    r->allreduces = k * r->nbuckets;
    r->busbw_gbps = predict_busbw_gbps(m, r->nodes, c);
    r->bucket_copy_ms = ms_of(4.0 * w->params * w->bytes_per_grad, m->mem_gbps);
    double bwd = s->backward_ms / predict_accum(w) + r->bucket_copy_ms / 2; /* one that syncs */
    r->allreduce_end_ms = predict_overlap_end(ready, ar, r->nbuckets, bwd, c->overlap_eff, &busy);
    ph[PH_LOAD] = s->load_ms;
    ph[PH_FORWARD] = s->forward_ms;
    ph[PH_BACKWARD] = s->backward_ms + k * r->bucket_copy_ms / 2;
    ph[PH_ALLREDUCE] = k * busy;
    ph[PH_ALLREDUCE_EXPOSED] = k * (fmax(0.0, r->allreduce_end_ms - bwd) + r->bucket_copy_ms / 2);
    ph[PH_UNSCALE] = s->unscale_ms;
    ph[PH_OPTIMIZER] = s->optimizer_ms;
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
    r->step_ms = 0.0;
    for (int p = 0; p < PH_COUNT; p++) r->step_ms += ph[p];
}

void predict_memory(const predict_workload *w, dps_mode mode, int n, double *gpu0, double *other)
{
    double B = (double)w->batch_per_gpu / predict_accum(w), P = w->params * w->bytes_per_grad;
    double state = P * (w->optimizer == OPT_ADAMW ? 2.0 : 1.0);
    double in = B * w->input_bytes_per_sample, out = B * w->output_bytes_per_sample;
    double act = B * w->activation_bytes_per_sample;
    double acc = predict_accum(w) > 1 ? P : 0.0; /* dpscale's accumulated gradients, apart */
    if (mode == MODE_DDP) {
        /* parameters, gradients, gradient buckets, optimizer state, input
         * shard, logits, logits gradient, log-probabilities and their
         * gradient (nn.CrossEntropyLoss's), activations (a micro-batch's) */
        *gpu0 = *other = 3 * P + acc + state + in + 4 * out + act;
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

static void forecast_oom(const predict_machine *m, predict_row *r)
{
    double cap = m->gpu_mem_gib * GIB, top = fmax(r->gpu0_mem_bytes, r->other_mem_bytes);
    if (cap <= 0 || top <= cap) return;
    r->status = PRED_OOM;
    snprintf(r->note, sizeof r->note, "device %s needs %.2f GiB, more than gpu_mem_gib %g",
             r->gpu0_mem_bytes >= r->other_mem_bytes ? "0" : "1", top / GIB, m->gpu_mem_gib);
}

/* Why the machine cannot run it, or 0 when it can: dp across nodes, or
 * several nodes without a network between them. */
static int refuse(const predict_machine *m, dps_mode mode, predict_row *r)
{
    if (mode == MODE_DP && r->nodes > 1)
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
        {"sync_ms", r->sync_ms, 0}};
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
    r->nodes = (n + m->gpus_per_node - 1) / m->gpus_per_node;
    if (refuse(m, mode, r)) return;
    predict_split t = scaled_split(m, s, c, n);
    if (mode == MODE_DDP) predict_ddp(m, w, &t, c, r);
    else predict_dp(m, w, &t, c, r);
    if (r->status == PRED_SKIPPED) return;
    finish_row(w, c, w->step_ms_1gpu, r);
    predict_memory(w, mode, n, &r->gpu0_mem_bytes, &r->other_mem_bytes);
    forecast_oom(m, r);
    note_beyond_nodes(m, r);
    skip_unwritable(r);
}
