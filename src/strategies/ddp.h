/* The ddp mode: DistributedDataParallel's step, one process and one device
 * per rank (docs/DESIGN.md, "The ddp step"). ddp.c is what a rank runs;
 * ddp_launch.c starts the ranks through the rank launcher (ranks.h) and
 * collects their records from the shared region (ddp_shared.h). */
#ifndef DPS_DDP_H
#define DPS_DDP_H

#include "config/config.h"
#include "strategies/ddp_shared.h"
#include "launch/ranks.h"
#include "strategies/ddp_world.h"

/* The global batch split over ranks as numpy.array_split: sizes differ by
 * at most one, the larger first (10 over 4: 3, 3, 2, 2). */
void ddp_shard_sizes(int batch, int n, int *sizes);

/* Runs rank `rank` to the end; fills sh->rank[rank]. In the rank process.
 * Under a launcher dw is the joined world (its store, its watch), else NULL. */
dps_status ddp_rank_main(const dps_config *cfg, ddp_shared *sh, int rank, rank_beat *beat,
                         ddp_world *dw) DPS_MUST_USE;

/* Starts the ranks, watches them, fills res. In the parent, which never
 * opens a device. Under a launcher (cfg->world) dw is the joined world
 * (NULL: dpscale forks the ranks), and global rank 0 runs its rank itself
 * and collects the others' records (ddp_launched_shm.c). */
dps_status ddp_train(const dps_config *cfg, ddp_world *dw, train_result *res) DPS_MUST_USE;


/* Under a launcher (dw, the joined world): every rank is a process the launcher
 * started. With --comm shm they meet in a named shared region that global
 * rank 0 makes (ddp_launched_shm.c); else each trains on its own and sends
 * its records to rank 0 through the store (ddp_launched_store.c).
 * ddp_launched_train is rank 0's part (it fills res); ddp_launched_rank the
 * others'. */
dps_status ddp_launched_train(const dps_config *cfg, ddp_world *dw, train_result *res)
    DPS_MUST_USE;
dps_status ddp_launched_rank(const dps_config *cfg, ddp_world *dw) DPS_MUST_USE;
dps_status ddp_launched_store_train(const dps_config *cfg, ddp_world *dw, train_result *res)
    DPS_MUST_USE;
dps_status ddp_launched_store_rank(const dps_config *cfg, ddp_world *dw) DPS_MUST_USE;

#endif
