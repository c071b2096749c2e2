/* The ddp mode: DistributedDataParallel's step, one process and one device
 * per rank (DESIGN.md, "The step" and "Launching ranks"). ddp.c is what a
 * rank runs; launch.c starts the ranks, watches them and collects their
 * records from the shared region described here. */
#ifndef DPS_DDP_H
#define DPS_DDP_H

#include <stdatomic.h>
#include <stdint.h>

#include "comm.h"
#include "config.h"

typedef enum rank_state { RANK_NEW, RANK_RUNNING, RANK_DONE, RANK_FAILED } rank_state;

/* What a rank tells the launcher, live and at the end. */
typedef struct ddp_report {
    _Atomic int state;
    _Atomic int step;          /* step being run; -1 while setting up */
    _Atomic int phase;         /* dps_phase being run */
    _Atomic int64_t beat_us;   /* CLOCK_MONOTONIC when that step (or set-up) began */
    dps_status status;
    int secondary;             /* failed because another rank had failed first */
    char error[DPS_ERRMSG_MAX];
    int steps_done, losses_done;
    dev_stats dev;
    double allreduce_bytes;    /* per step */
} ddp_report;

/* One anonymous MAP_SHARED mapping made before fork: this header, then the
 * per-rank step records, rank 0's final parameters and the comm mailboxes. */
typedef struct ddp_shared {
    int nranks, steps, warmup;
    size_t nparams;
    size_t off_step_ms, off_phase_ms, off_loss, off_params, off_comm, total;
    ddp_report rank[DPS_MAX_DEVICES];
} ddp_shared;

/* Sizes the region for cfg (total bytes in sh->total) and fills the header. */
void ddp_shared_layout(const dps_config *cfg, ddp_shared *sh);
double *ddp_step_ms(ddp_shared *sh, int rank);   /* [steps] */
float *ddp_phase_ms(ddp_shared *sh, int rank);   /* [steps][PH_COUNT] */
double *ddp_loss_sum(ddp_shared *sh, int rank);  /* [warmup + steps], sum over the rank's rows */
float *ddp_final_params(ddp_shared *sh);         /* rank 0's, [nparams] */
comm_shared *ddp_comm(ddp_shared *sh);

/* The global batch split over ranks as numpy.array_split: sizes differ by
 * at most one, the larger first (10 over 4: 3, 3, 2, 2). */
void ddp_shard_sizes(int batch, int n, int *sizes);

/* Runs rank `rank` to the end; fills sh->rank[rank]. In the rank process. */
dps_status ddp_rank_main(const dps_config *cfg, ddp_shared *sh, int rank);

/* Starts the ranks (fork launcher), watches them, fills res. In the parent,
 * which never opens a device. */
dps_status ddp_train(const dps_config *cfg, train_result *res);

#endif
