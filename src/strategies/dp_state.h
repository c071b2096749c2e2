/* What dp's files share (dp.c runs the step; dp_move.c replicates and
 * reduces; dp_loss.c computes the loss on device 0): the state of one dp
 * run. Private to the dp strategy. */
#ifndef DPS_DP_STATE_H
#define DPS_DP_STATE_H

#include "comm/comm_group.h"
#include "config/config.h"
#include "strategies/ptimer.h"
#include "strategies/scaler.h"
#include "core/pool.h"
#include "model/batches.h"
#include "model/net.h"

typedef struct dp_slot {
    int dev;
    int samples;       /* its chunk */
    int64_t sample0;   /* its first sample in the global batch */
    int rows;          /* the loss rows of its chunk */
    int64_t row0;      /* its first loss row in the global batch */
    be_stream *st;
    dps_buf params, grads;                 /* slot 0: the master copies */
    dps_buf x;                             /* slot 0: a view of the batch (xv) */
    /* Its logits, then their gradient, as DataParallel frees a replica's
     * output after the gather and its gradient comes after the loss: one
     * buffer on a replica; on slot 0 both are rows of device 0's logits
     * gradient, which the loss writes only after the gather read them. */
    dps_buf logits;                        /* the replicas' buffer; none on slot 0 */
    float *xv, *logitsv, *dlogitsv;
    dps_buf flat;      /* torch: the coalescing buffer of one group (the largest) */
    be_event *flat_ev, *taken_ev; /* torch, p2p reduce: flat filled / copied to device 0 */
    net_acts acts;
} dp_slot;

/* A run of whole parameter tensors of at most DP_COALESCE_BYTES (a larger
 * tensor alone), as torch's _take_tensors groups them: [lo, hi) floats. */
typedef struct dp_group { size_t lo, hi; } dp_group;

typedef struct dp_state {
    const dps_config *cfg;
    backend *be;
    const net *net;        /* the model: cfg's file, or own_net */
    net own_net;           /* the MLP of cfg->shape */
    be_dtype half;         /* autocast's type, bf16 or fp16 (dp_autocast); BE_F32: none */
    size_t nparams;
    int nslots, rows_total; /* rows_total: one micro-batch's loss rows (the step's without --accum) */
    int micro_batch;       /* samples a micro-step: the global batch / accum */
    int rows_step;         /* loss rows of the whole optimizer step */
    int micro;             /* the micro-step running, 0 .. accum - 1 */
    int step;              /* the optimizer step running (warm-up included) */
    dp_slot s[DPS_MAX_DEVICES];
    dps_buf x_full, labels_full, logits_full, dlogits_full, row_loss, loss, staging;
    /* the loss's fp32 logits and their gradient (device 0): the gathered
     * logits, or their fp32 cast under autocast (logits.float()); under
     * autocast, as nn.CrossEntropyLoss frees the cast once log_softmax has
     * read it, its gradient takes the same buffer (dlogits_full unused) */
    float *logitsv, *dlogitsv;
    dps_buf logp, dlogp;   /* torch: log-probabilities and their gradient (device 0) */
    /* half: the replicas' half logits gathered, then their gradient cast
     * to half for the scatter (device 0), as DataParallel under autocast;
     * over one device (no gather) slot 0's own half logits (logits16v) */
    dps_buf logits16_full;
    void *logits16v;
    dps_buf reduce_out;    /* torch: the summed gradients, a new buffer on device 0 */
    dps_buf opt_state[2];
    dps_buf grad_acc;      /* --accum: the gradients accumulated over the micro-steps (device 0) */
    grad_scaler scaler;
    dp_group *groups;      /* torch: replicate's and reduce's coalescing groups */
    int ngroups;
    batches batches;       /* the steps' batches, made on a helper thread */
    const float *h_x;      /* this step's batch (batches_get) */
    const int32_t *h_labels;
    float *h_loss;         /* [accum]: each micro-step's loss sum */
    phase_timer *timers;   /* [accum]: a micro-step's phases each */
    phase_timer *timer;    /* the running micro-step's */
    op_trace optr;         /* device 0's ops in the last timed step (ops.csv) */
    worker_pool pool;
    int pool_up;
    comm_group *nccl;      /* replicate and reduce through NCCL; NULL: peer copies */
    dev_stats *traffic;    /* res->dev, indexed by slot */
} dp_state;

/* Whether the replicas hand on half-precision logits: the MLP under
 * autocast (a model file widens its own, graph.h). */
static inline int dp_autocast(const dp_state *st)
{
    return st->half != BE_F32 && !net_is_file(st->net);
}

/* Whether outputs are gathered to device 0 and their gradient scattered
 * back: DataParallel over one device calls the module directly. */
static inline int dp_gathers(const dp_state *st) { return st->nslots > 1; }

/* dp_move.c: bytes over a link, counted for a slot in a phase. */
void dp_count(dp_state *st, int slot, dps_phase ph, dps_link link, size_t bytes);
/* Copy between two slots' devices, issued on `on`, counted on both sides. */
dps_status dp_p2p(dp_state *st, dps_phase ph, int dst, void *dptr, int src, const void *sptr,
                  size_t bytes, be_stream *on) DPS_MUST_USE;
/* The coalescing groups of the model's parameters (torch). */
dps_status dp_make_groups(dp_state *st) DPS_MUST_USE;
/* Parameters from device 0 to every replica. */
dps_status dp_replicate(dp_state *st) DPS_MUST_USE;
/* Gradients summed onto device 0 (torch: into reduce_out). */
dps_status dp_reduce(dp_state *st) DPS_MUST_USE;
/* dp_loss.c: mean cross-entropy over the whole batch and the logits'
 * gradient, on device 0. */
dps_status dp_loss(dp_state *st) DPS_MUST_USE;

#endif
