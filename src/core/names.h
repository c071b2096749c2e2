/* The words every layer shares, with no dependency: the phases of a
 * training step and the links bytes cross (timers, NVTX ranges, results
 * columns), and a configuration's choices as the command line, suite files
 * and results spell them (the settings table reads these arrays). */
#ifndef DPS_NAMES_H
#define DPS_NAMES_H

typedef enum dps_phase {
    PH_LOAD, PH_REPLICATE, PH_SCATTER, PH_FORWARD, PH_GATHER, PH_LOSS,
    PH_BACKWARD, PH_REDUCE, PH_ALLREDUCE, PH_ALLREDUCE_EXPOSED, PH_UNSCALE, PH_OPTIMIZER, PH_COUNT
} dps_phase;
extern const char *const dps_phase_names[PH_COUNT];

/* Bytes a device moved, by the link they crossed. */
typedef enum dps_link { LINK_H2D, LINK_D2H, LINK_P2P_SENT, LINK_P2P_RECV, LINK_COUNT } dps_link;
extern const char *const dps_link_names[LINK_COUNT];


/* The strategies (core/strategy.h describes each). */
typedef enum dps_mode { MODE_DP, MODE_DDP, MODE_ZERO1, MODE_ZERO2, MODE_FSDP, MODE_COUNT } dps_mode;
typedef enum dps_precision { PREC_FP32, PREC_BF16, PREC_FP16, PREC_COUNT } dps_precision;
typedef enum dps_optimizer { OPT_SGD, OPT_ADAMW, OPT_COUNT } dps_optimizer;
/* The words of the command line, suite files and results, by enum value
 * (settings.c's table reads these arrays too). */
extern const char *const dps_mode_names[MODE_COUNT];
extern const char *const dps_precision_names[PREC_COUNT];
extern const char *const dps_optimizer_names[OPT_COUNT];

const char *dps_mode_name(dps_mode m);
const char *dps_precision_name(dps_precision p);
/* Whether p runs as under autocast in a half type (bf16, fp16). */
static inline int dps_precision_is_half(dps_precision p) { return p == PREC_BF16 || p == PREC_FP16; }
const char *dps_optimizer_name(dps_optimizer o);

/* --inject-fault's kinds (a fault is injected when fault_rank >= 0) */
typedef enum dps_fault { FAULT_EXIT, FAULT_HANG, FAULT_COUNT } dps_fault;
extern const char *const dps_fault_names[FAULT_COUNT];
/* dp's replicate and reduce: NCCL where it can (auto), or peer copies + reduce-add */
typedef enum dps_dp_comm { DPCOMM_AUTO, DPCOMM_NCCL, DPCOMM_P2P, DPCOMM_COUNT } dps_dp_comm;
extern const char *const dps_dp_comm_names[DPCOMM_COUNT];
/* dp's implementation: as torch.nn.DataParallel does it (torch), or the
 * lean lower bound of a scatter/gather strategy (lean); ddp's the same two
 * words: PyTorch's loss (torch) or the fused one (lean) */
typedef enum dps_dp_impl { DPIMPL_TORCH, DPIMPL_LEAN, DPIMPL_COUNT } dps_dp_impl;
extern const char *const dps_dp_impl_names[DPIMPL_COUNT];

/* --tf32: which fp32 GEMMs multiply in TF32, as PyTorch's two flags choose:
 * default, convolutions (torch.backends.cudnn.allow_tf32, True) but not
 * matmuls (torch.backends.cuda.matmul.allow_tf32, False); on, both; off,
 * neither */
typedef enum dps_tf32 { TF32_DEFAULT, TF32_ON, TF32_OFF, TF32_COUNT } dps_tf32;
extern const char *const dps_tf32_names[TF32_COUNT];
/* Whether mode m multiplies a convolution's (conv 1) or a matmul's (conv 0)
 * fp32 GEMM in TF32. */
static inline int dps_tf32_for(dps_tf32 m, int conv)
{
    return m == TF32_ON || (m == TF32_DEFAULT && conv);
}

/* --launcher: who starts ddp's ranks (auto: a launcher when its variables are set) */
typedef enum dps_launch { LAUNCH_AUTO, LAUNCH_FORK, LAUNCH_ENV, LAUNCH_COUNT } dps_launch;
extern const char *const dps_launch_names[LAUNCH_COUNT];

/* --comm: ddp's collectives (auto: nccl on GPUs, shm when every rank shares
 * a host, gloo otherwise) */
typedef enum dps_comm { DPS_COMM_AUTO, DPS_COMM_SHM, DPS_COMM_GLOO, DPS_COMM_NCCL, DPS_COMM_COUNT } dps_comm;
extern const char *const dps_comm_names[DPS_COMM_COUNT];
/* The comm implementation's name (comm_params.impl) for c, its --comm word;
 * NULL for auto. */
const char *dps_comm_impl(dps_comm c);
/* Scaling of a sweep's batch, by dps_config.strong: weak (per-device batch
 * fixed) or strong (global batch fixed). */
extern const char *const dps_scaling_names[2];

#endif
