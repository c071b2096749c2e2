/* The strategies behind one table, as devices (backend.h) and collectives
 * (comm.h) are: each row says how the strategy trains (one process, or one
 * process a device), what it moves a step and what each device holds, so
 * that every layer asks the row, not the strategy's name. Adding a
 * strategy is a row here and its folder of files under src/strategies/. */
#ifndef DPS_STRATEGY_H
#define DPS_STRATEGY_H

#include "core/names.h"

typedef struct dps_strategy {
    dps_mode mode;
    const char *name;        /* as --mode and results spell it */
    const char *like;        /* what it is in PyTorch or DeepSpeed */
    int per_rank;            /* one process a device, started by the rank launchers, meeting
                                through the collectives (else one process drives every device) */
    int buckets;             /* gradients all-reduced in DDP's buckets (--bucket-mb and its
                                kin apply, buckets.csv has their rows) */
    int shard;               /* what is split over the ranks: 0 nothing, 1 the optimizer state,
                                2 also the gradients, 3 also the parameters */
    /* A step's collectives, each as times the model's gradient bytes
     * through it on every rank (nccl-tests' sizes): */
    double allreduce_x, reduce_scatter_x, all_gather_x;
} dps_strategy;

extern const dps_strategy dps_strategies[MODE_COUNT];
/* The collectives as results name them (timeline spans' op, comm_op's order). */
extern const char *const dps_collective_names[3];
static inline const dps_strategy *dps_strategy_of(dps_mode m) { return &dps_strategies[m]; }

/* The strategies a sweep or a prediction compares when not told which: those
 * that shard nothing (dp and ddp), in table order, into out; their count. */
int dps_strategies_compared(dps_mode out[MODE_COUNT]);

/* Model-state bytes per parameter each device holds (fp32 parameters and
 * gradients, opt_bytes of optimizer state per parameter), over ranks:
 * the ZeRO paper's and DeepSpeed's estimator's formulas, for n ranks. */
double dps_strategy_state_bytes(const dps_strategy *s, double params, double opt_bytes, int n);

#endif
