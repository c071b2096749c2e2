/* The region a ddp run shares between its rank processes and the parent:
 * one anonymous MAP_SHARED mapping made before fork (under a launcher, a
 * named one that global rank 0 makes, ddp_launched_shm.c), holding a header
 * with each rank's report, then the per-rank step records, rank 0's final
 * parameters and the collectives' region (comm_shared.h). */
#ifndef DPS_DDP_SHARED_H
#define DPS_DDP_SHARED_H

#include <stdatomic.h>
#include <stdint.h>

#include "comm/comm_shared.h"
#include "config/config.h"

/* What a rank tells the launcher, live and at the end. */
typedef struct ddp_report {
    _Atomic int phase;         /* dps_phase being run */
    dps_status status;
    int secondary;             /* failed because another rank had failed first */
    char error[DPS_ERRMSG_MAX];
    int steps_done, losses_done;
    dev_stats dev;
    double allreduce_bytes;    /* per step */
    int pid;                   /* under a launcher: the rank's process */
    _Atomic int ended;         /* under a launcher: the rank got to its end */
    double trace_ref_wall_ms;  /* the trace's reference on the wall clock */
    op_rows ops;               /* the last timed step's ops, by kind and direction */
} ddp_report;

typedef struct ddp_shared {
    /* under a launcher (ddp_launched_shm.c): the region's maker, and the
     * ranks that have mapped it and that have finished */
    int owner_pid;
    _Atomic int ready, arrived, finished;
    int nranks, steps, warmup;
    size_t nparams;
    int trace_steps, max_spans; /* the trace's last timed steps; spans (buckets) per step */
    int micro;                  /* micro-steps a step (--accum): the trace's phases each */
    size_t off_step_ms, off_phase_ms, off_loss, off_params, off_comm, total;
    size_t off_tl_phase, off_tl_span, off_tl_nspans, off_scaler;
    ddp_report rank[DPS_MAX_DEVICES];
} ddp_shared;

/* Sizes the region for cfg (total bytes in sh->total) and fills the header. */
void ddp_shared_layout(const dps_config *cfg, ddp_shared *sh);
double *ddp_shared_step_ms(ddp_shared *sh, int rank);   /* [steps] */
float *ddp_shared_phase_ms(ddp_shared *sh, int rank);   /* [steps][PH_COUNT] */
double *ddp_shared_loss_sum(ddp_shared *sh, int rank);  /* [warmup + steps], sum over the rank's rows */
float *ddp_shared_params(ddp_shared *sh);               /* rank 0's final parameters, [nparams] */
tl_phase *ddp_shared_tl_phase(ddp_shared *sh, int rank); /* [trace_steps][micro][PH_COUNT] */
step_scaler *ddp_shared_scaler(ddp_shared *sh, int rank); /* [steps]: its GradScaler's */
tl_span *ddp_shared_tl_span(ddp_shared *sh, int rank);   /* [trace_steps][max_spans] */
int *ddp_shared_tl_nspans(ddp_shared *sh, int rank);     /* [trace_steps] */
comm_shared *ddp_shared_comm(ddp_shared *sh);

/* The ranks' records as one result: a step's time is the slowest rank's,
 * a step's loss the global mean over every rank's rows; the trace's records
 * too (none, with a warning, when there is no memory for them). */
void ddp_collect(const dps_config *c, ddp_shared *sh, train_result *res);
/* Rank r's report and records as one buffer (malloc'd, *len bytes), to
 * reach rank 0 on another host; unpack puts them into rank 0's region. */
void *ddp_shared_pack(ddp_shared *sh, int r, size_t *len);
/* The bytes pack makes of one rank's records (every rank's alike). */
size_t ddp_shared_pack_bytes(ddp_shared *sh);
dps_status ddp_shared_unpack(ddp_shared *sh, int r, const void *buf, size_t len) DPS_MUST_USE;
/* Whether every rank's GradScaler skipped the same steps of the first
 * `steps` (they check the same all-reduced gradients); DPS_ERR_RUNTIME
 * naming the first step where two differ. */
dps_status ddp_scalers_agree(ddp_shared *sh, int steps) DPS_MUST_USE;
/* Rank 0's final parameters into res (for --check and --save-params). */
dps_status ddp_copy_params(ddp_shared *sh, train_result *res) DPS_MUST_USE;

#endif
