/* Under a launcher (torchrun, mpirun, srun): this process's place in ddp
 * from the launcher's variables, checked against the options, and the
 * ranks joined for the whole command (strategies/ddp_world.h); and the
 * --comm choice checked against the backend and the build. */
#ifndef DPS_WORLD_JOIN_H
#define DPS_WORLD_JOIN_H

#include "cli/cli.h"

/* Reads the world (--launcher auto|env), checks it and --comm, and joins
 * the ranks: a->cfg.world, a->dw and --gpus are set. Without a
 * launcher only --comm is checked. */
dps_status cli_join_world(cli_args *a, const backend *be) DPS_MUST_USE;
/* Leaves the joined ranks (rank 0 waits for the others to end). */
void cli_leave_world(cli_args *a);

#endif
