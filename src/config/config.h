/* What one configuration is (dps_config) and what running it produced
 * (train_result); the names of its choices are in names.h. */
#ifndef DPS_CONFIG_H
#define DPS_CONFIG_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"
#include "model/op_trace.h"
#include "core/names.h"
#include "config/timeline.h"
#include "config/world.h"

#define DPS_PATH_MAX 1024
#define DPS_NAME_MAX 128

struct net; /* model/net.h: a model file's model */

typedef struct dps_config {
    be_options be;
    dps_mode mode;
    int ngpus;
    int devices[DPS_MAX_DEVICES];
    char model[DPS_NAME_MAX];
    model_shape shape;        /* the MLP's; with net_file, the file's as net.h reports it */
    const struct net *net_file; /* a model file's model (net_load); NULL: the MLP of shape */
    int global_batch;         /* samples per step, all devices together */
    int strong;               /* sweeps: strong scaling (global batch fixed over GPU counts) */
    int accum;                /* micro-batches per optimizer step (1: none) */
    int no_sync;              /* ddp with accum > 1: micro-steps but the last under no_sync */
    dps_precision precision;
    dps_tf32 tf32;            /* --tf32: which fp32 GEMMs multiply in TF32 */
    int scaler;               /* --scaler: 0 auto (on for fp16), 1 off, 2 on (config_scaler) */
    double init_scale;        /* its first scale */
    int growth_interval;      /* its clean steps before the scale doubles */
    int overflow_step;        /* --inject-overflow: an inf planted at this step; -1 none */
    dps_optimizer optimizer;
    dps_opt_hparams hp;
    int steps, warmup;
    uint64_t seed;
    int check;
    int gemm_ref;             /* time the step's GEMMs alone for comparison */
    double bucket_mb;         /* ddp: bucket cap */
    double first_bucket_mb;   /* ddp: cap of the first bucket */
    int overlap;              /* ddp: all-reduce during backward */
    int grad_view;            /* ddp: gradients are views into the buckets */
    double timeout_s;         /* ddp: a step (or set-up) longer than this ends the group */
    int fault_rank, fault_step; /* ddp: --inject-fault, rank -1 = none */
    double inject_slowdown_pct; /* compute phases stretched by this percentage (a gate's test) */
    int slowdown_rank;          /* the rank (dp: device slot) stretched; -1: every one */
    world world;                /* ddp under a launcher: this process's rank; WORLD_NONE: forked */
    dps_comm comm;              /* ddp: --comm */
    int profile_first, profile_last; /* --profile-steps A:B, -1 = none */
    int trace_steps;          /* --trace-steps: the last N timed steps into trace/; 0 none */
    int no_nvml;              /* --no-nvml: no sampler thread */
    dps_dp_comm dp_comm;
    dps_dp_impl dp_impl;      /* dp: DataParallel's implementation or the lean one */
    dps_dp_impl ddp_impl;     /* ddp: nn.CrossEntropyLoss's three operations or the fused loss */
    dps_fault fault_kind;
    char out_dir[DPS_PATH_MAX];
    char name[DPS_NAME_MAX];
    char save_params[DPS_PATH_MAX]; /* --save-params: .npy of the final parameters; "" none */
} dps_config;

/* Fills the defaults of settings.c's table (small preset, dp, 1 device, fp32,
 * SGD, host capacity off). */
void config_defaults(dps_config *c);
/* The model c trains: c->net_file, or the MLP of c->shape made in *own
 * (net_free it after: safe either way). */
dps_status config_net(const dps_config *c, struct net *own, const struct net **out) DPS_MUST_USE;
/* Samples a device of a model file that is no preset, unless --batch says. */
#define CONFIG_FILE_BATCH_PER_GPU 8
/* c's model (c->model, c->shape, c->net_file): a preset (an MLP, or a model
 * file of the models folder) or a model file's path, relative to dir (NULL:
 * the working directory), read once a process (net_load: its refusals are
 * FILE:LINE); *per_gpu: its default samples a device. */
dps_status config_set_model(dps_config *c, const char *model, const char *dir,
                            int *per_gpu) DPS_MUST_USE;
/* A results folder's copy of a model file its configurations trained
 * (results/model_copy.h writes it, predict --from reads it):
 * MODEL_COPY_DIR/NAME.model, NAME runs.csv's model (c->model: the file's
 * `name`, or its preset's) with '/' written '_'. Writes "NAME.model" into
 * buf and returns it; "" when it does not fit. */
#define MODEL_COPY_DIR "models"
const char *config_model_copy_name(const char *model, char *buf, size_t len);
/* Parameters, and forward GEMM FLOPs of one sample, of c's model. */
size_t config_params(const dps_config *c);
/* Loss rows of one sample of c's model. */
int config_rows(const dps_config *c);
double config_fwd_flops(const dps_config *c);
/* Starts or stops the profiler's capture range around step `step` (call
 * with before = 1 ahead of the step, 0 after it). */
dps_status config_profile_hook(const dps_config *c, backend *be, int step, int before);
/* Whether a device is listed twice (dp replicas sharing one GPU). */
int config_shares_device(const dps_config *c);
/* Whether c trains with a GradScaler (dynamic loss scaling). */
int config_scaler(const dps_config *c);
/* Samples on the most loaded device: ceil(global / ngpus), torch.chunk's size. */
int config_batch_per_gpu(const dps_config *c);
/* Stable identity of a configuration, e.g. "dp-tiny-fp32-sgd-g4-b32"; an
 * fp32 one with --tf32 on or off ends in -tf32on or -tf32off. */
void config_id(const dps_config *c, char *buf, size_t len);
/* Checks a configuration against the backend: device count and indices,
 * precision, then config_check_values. DPS_ERR_USAGE with a one-line message. */
dps_status config_check(const dps_config *c, const backend *be);
/* What no machine can run, whatever its devices: --profile-steps past the
 * run, a batch or model over the sizes' limits, a batch below the device
 * count, --inject-fault past the ranks or steps. DPS_ERR_USAGE. */
dps_status config_check_values(const dps_config *c);
/* Optimizer defaults as PyTorch's (lr per optimizer). */
void config_optimizer_defaults(dps_config *c);

/* Per device: memory peaks and bytes moved per timed step. */
typedef struct dev_stats {
    int dev;                          /* backend device index */
    char name[128];
    int samples;                      /* of each step, as the strategy split the batch:
                                         its chunk (dp) or shard (ddp); 0: none */
    uint64_t alloc_peak, device_peak, capacity;
    uint64_t device_base;             /* device's used memory before the run allocated */
    struct {                          /* what the allocation peak was made of */
        char what[64];                /* a category: be_buf_alloc's `what` */
        uint64_t bytes;
    } mem_cat[BE_MEM_CATEGORIES];
    int nmem_cat;
    int peak_phase;                   /* dps_phase at the allocation peak; -1: setting up */
    double phase_bytes[PH_COUNT];     /* per step, sent + received */
    double link_bytes[LINK_COUNT];    /* per step */
    /* NVML over the whole configuration (NaN / 0 where not sampled) */
    double nvml_pcie_tx, nvml_pcie_rx, nvml_nvlink_tx, nvml_nvlink_rx;
    unsigned sm_clock_min_mhz, sm_clock_max_mhz;
    unsigned long long throttle_reasons;
    int nvml_clock;                   /* the clock fields were sampled */
} dev_stats;

/* A step's GradScaler: the scale its loss was multiplied by, and whether
 * it found an inf or NaN and skipped the optimizer (1 without a scaler: 0). */
typedef struct step_scaler {
    float scale;
    int32_t skipped;
} step_scaler;

typedef struct train_result {
    dps_status status;
    char error[DPS_ERRMSG_MAX];
    int nranks;            /* devices (dp) or ranks (ddp) with records */
    int steps_done;        /* timed steps completed */
    double *step_ms;       /* [steps] slowest rank's step time */
    double *rank_step_ms;  /* [steps][nranks] each rank's own (dp: the step's) */
    float *phase_ms;       /* [steps][nranks][PH_COUNT] */
    float *loss;           /* [warmup + steps] */
    step_scaler *scaler;   /* [steps] */
    int losses_done;
    dev_stats dev[DPS_MAX_DEVICES];
    float *final_params;   /* host copy after training, for --check */
    size_t nparams;
    int check;             /* -1 not run, 0 failed, 1 passed */
    double check_max_rel_diff;
    double gemm_ref_tflops; /* 0 when not measured */
    double allreduce_bytes; /* per step and rank (ddp) */
    timeline tl;           /* the last timed steps' trace (tl.steps 0: none) */
    op_rows ops;           /* the last timed step's ops on device 0 (dp) or rank 0, by kind
                              and direction (ops.n 0: none) */
} train_result;

/* Device dev's memory figures from the backend's accounting into d: the
 * peaks, the baseline, the capacity and the categories at the peak. */
void dev_stats_memory(dev_stats *d, const backend *be, int dev);

dps_status train_result_init(train_result *r, const dps_config *c, int nranks) DPS_MUST_USE;
/* A result without step records, for a configuration that did not run. */
dps_status train_result_init_empty(train_result *r, int nranks) DPS_MUST_USE;
void train_result_free(train_result *r);
float *train_result_phases(train_result *r, int step, int rank);

#endif
