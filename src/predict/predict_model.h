/* The predictor's model: a step of a strategy (dp, ddp and the sharded
 * zero1, zero2, fsdp, by their rows of core/strategy.h) on n devices from
 * one device's phases and the machine's links. Pure functions of their
 * arguments; every constant's source is in predict_model.c. */
#ifndef DPS_PREDICT_MODEL_H
#define DPS_PREDICT_MODEL_H

#include "predict/predict_input.h"

/* The constants a calibration would fit; predict_consts_default says where
 * each default comes from. */
typedef struct predict_consts {
    double bus_eff;            /* fraction of intra_busbw_gbps / inter_gbps an all-reduce reaches */
    double overlap_eff;        /* fraction of its speed an all-reduce keeps while backward runs */
    double base_latency_us;    /* per collective call */
    double bucket_overhead_us; /* per DDP bucket beyond the collective (hook, launch) */
    double sync_ms;            /* ddp, per step: the end-of-step synchronisation */
    double dp_sync_ms;         /* dp, per forward (a micro-step each with --accum): starting
                                * and joining the replicas' threads */
    double compute_scale;      /* forward and backward slow by this fraction per other device
                                * of the node training at once (shared memory bandwidth) */
} predict_consts;

void predict_consts_default(predict_consts *c);

/* One device's optimizer step (all its micro-steps with --accum), split
 * into phases that add up to step_ms_1gpu. */
typedef struct predict_split {
    double load_ms, forward_ms, backward_ms, unscale_ms, optimizer_ms;
} predict_split;

/* The split: load from input bytes over h2d_gbps, the optimizer as given or
 * from the parameter count over mem_gbps, fp16's unscale as given or one
 * read and write of the gradients over mem_gbps, forward and backward as
 * given or 1:2 of the rest. DPS_ERR_USAGE when the given parts leave
 * nothing. */
dps_status predict_split_step(const predict_machine *m, const predict_workload *w,
                              predict_split *s) DPS_MUST_USE;

/* Bus bandwidth of an all-reduce over `nodes` nodes, GB/s: the slower of the
 * intra-node bus and the per-node network, times bus_eff. */
double predict_busbw_gbps(const predict_machine *m, int nodes, const predict_consts *c);

/* Ring all-reduce of `bytes` over n ranks on `nodes` nodes, ms:
 * 2(n-1)/n bytes / busbw + latency (NCCL's: base + per-step latencies, the
 * steps that cross nodes at inter_latency_us). 0 for n = 1. */
double predict_allreduce_ms(double bytes, int n, int nodes, const predict_machine *m,
                            const predict_consts *c);

/* Ring reduce-scatter or all-gather of a buffer of `bytes` over n ranks:
 * (n-1)/n bytes / busbw, half an all-reduce's, and half its ring steps'
 * latency. 0 for n = 1. */
double predict_halfring_ms(double bytes, int n, int nodes, const predict_machine *m,
                           const predict_consts *c);

#define PREDICT_MAX_BUCKETS 8192
#define PREDICT_MAX_UNITS 8192

/* The sharded strategies' units (a layer each: FSDP's wrapped modules,
 * what dpscale's sharded ranks gather and reduce-scatter at a time), in
 * model order: w->units equal ones, else the tensors grouped by
 * w->tensor_unit, else by equal ready times (a model file's ops), else
 * each tensor one. bytes[u] its gradient bytes, ready[u] the fraction of
 * backward after which it is complete. Returns the count; -1 when the
 * workload has no tensors and no `units` (or more than max). */
int predict_units(const predict_workload *w, double *bytes, double *ready, int max);

/* DDP's buckets (bucket_assign: reverse parameter order, first_bucket_mb
 * then bucket_mb) of a model of w->params parameters taken as equal pieces;
 * bytes[i] its size, ready[i] the fraction of backward after which its
 * gradients are all ready (w->ready when it has one per bucket, as measured). Returns the count, -1 if more than max. */
int predict_buckets(const predict_workload *w, double *bytes, double *ready, int max);

/* One bucket after another on one stream: each all-reduce starts when its
 * gradients are ready (ready[i] * backward_ms) and the previous one ended,
 * and runs at overlap_eff of its speed (ar_ms[i] is its time alone) while
 * backward runs. Returns the end of the last, ms from the start of
 * backward; *busy the time the all-reduces ran. */
double predict_overlap_end(const double *ready, const double *ar_ms, int nb, double backward_ms,
                           double overlap_eff, double *busy);

typedef enum predict_status { PRED_OK, PRED_OOM, PRED_SKIPPED } predict_status;
extern const char *const predict_status_names[3]; /* as runs.csv: ok, oom, skipped */

/* One predicted configuration. */
typedef struct predict_row {
    const predict_workload *w;    /* the workload predicted */
    dps_mode mode;
    int ngpus, nodes, batch_per_gpu;
    predict_status status;
    char note[192];               /* why skipped or out of memory */
    double step_ms, samples_per_s, efficiency;
    double phase_ms[PH_COUNT];    /* PH_ALLREDUCE: the time the all-reduces ran */
    double gpu0_mem_bytes, other_mem_bytes;
    int max_batch_per_gpu;        /* the largest batch a device that fits gpu_mem_gib (a multiple
                                   * of accum; 0: not one); -1: no gpu_mem_gib given */
    double coll_bytes[3];         /* a step's buffers through each collective on a rank
                                   * (dps_collective_names' order, nccl-tests' sizes) */
    double comm_bytes;            /* what a rank's ring sends and receives a step (runs.csv's
                                   * comm_bytes_per_step) */
    double exposed_comm_ms;       /* communication the step waits for: dp's, ddp's after
                                   * backward, fsdp's forward gathers, the post-step gathers */
    int nunits;                   /* the sharded strategies: units gathered or reduce-scattered */
    /* the model's terms */
    int nbuckets;
    int allreduces;               /* ddp: all-reduce calls a step, nbuckets a micro-step that
                                   * all-reduces (the last, or every one with sync_all) */
    double busbw_gbps, allreduce_end_ms, bucket_copy_ms, sync_ms;
} predict_row;

/* The prediction of `mode` on n devices; rows for n a machine cannot hold
 * (too many nodes, dp across nodes) are PRED_SKIPPED with a note. */
void predict_config(const predict_machine *m, const predict_workload *w, const predict_split *s,
                    const predict_consts *c, dps_mode mode, int n, predict_row *r);

/* How many times a step pays mode's synchronisation constant: dp's once a
 * forward (accum times), the strategies of a process a device once. */
int predict_syncs(const predict_workload *w, dps_mode mode);

/* Device memory by memory.csv's categories, summed: device 0's and another
 * device's (the same for a process a device: ddp's whole model states,
 * the sharded strategies' shards and units, as strategies/footprint.c
 * sums them); with --accum each micro-batch's. */
void predict_memory(const predict_workload *w, dps_mode mode, int n, double *gpu0, double *other);

#endif
