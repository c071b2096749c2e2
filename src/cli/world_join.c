/* What the launcher's variables say about this process's place in ddp,
 * checked against the options, and the ranks joined (see world_join.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/world_join.h"
#include "core/strategy.h"
#include "comm/comm.h"
#include "strategies/ddp_world.h"

static dps_status check_world(const cli_args *a, const world *w)
{
    const char *who = world_launcher_name(w->launcher);
    if (!dps_strategy_of(a->cfg.mode)->per_rank)
        return dps_fail(DPS_ERR_USAGE, "%s started %d processes: %s runs in one; give --mode ddp "
                        "(or another strategy of a process a device: zero1, zero2, fsdp), or "
                        "--launcher fork to ignore the launcher", who, w->size,
                        dps_mode_name(a->cfg.mode));
    if (a->gpus_set && a->cfg.ngpus != w->size)
        return dps_fail(DPS_ERR_USAGE, "--gpus %d, but %s started %d ranks: leave --gpus out under "
                        "a launcher", a->cfg.ngpus, who, w->size);
    if (a->devices_set)
        return dps_fail(DPS_ERR_USAGE, "--devices: under %s each rank's device is its local rank",
                        who);
    if (w->size > DPS_MAX_DEVICES)
        return dps_fail(DPS_ERR_USAGE, "%s started %d ranks; dpscale runs ddp on %d at most",
                        who, w->size, DPS_MAX_DEVICES);
    return DPS_OK;
}

/* --comm against the backend, the build and who starts the ranks. */
static dps_status check_comm(const cli_args *a, const backend *be, int launched)
{
    dps_comm c = a->cfg.comm;
    const char *name = dps_comm_names[c], *impl = dps_comm_impl(c);
    if (c == DPS_COMM_AUTO) return DPS_OK;
    if ((c == DPS_COMM_NCCL) != (be->kind == BE_CUDA))
        return dps_fail(DPS_ERR_USAGE, "--comm %s cannot move %s-backend buffers: %s", name,
                        be->ops->name, c == DPS_COMM_NCCL ? "NCCL is for GPUs" : "use --comm nccl");
    if (c == DPS_COMM_GLOO && !launched)
        return dps_fail(DPS_ERR_USAGE, "--comm gloo: the ranks meet through rank 0's store, which "
                        "a launcher's variables locate: start dpscale with torchrun, mpirun or "
                        "srun (forked ranks use shm)");
    if (!comm_have(impl))
        return dps_fail(DPS_ERR_USAGE, "--comm %s: this build has no %s (scripts/setup.sh installs "
                        "it; then `meson setup --reconfigure build`)", name, impl);
    return DPS_OK;
}

/* --local-rank, for LOCAL_RANK when the launcher passes it as an option. */
static char local_rank_text[16];

static const char *env_lookup(const char *name)
{
    const char *v = getenv(name);
    if (!v && local_rank_text[0] && strcmp(name, "LOCAL_RANK") == 0) return local_rank_text;
    return v;
}

dps_status cli_join_world(cli_args *a, const backend *be)
{
    world w = {.launcher = WORLD_NONE};
    if (a->local_rank >= 0) snprintf(local_rank_text, sizeof local_rank_text, "%d", a->local_rank);
    if (a->launcher != LAUNCH_FORK) DPS_TRY(world_from_env(&w, env_lookup));
    if (w.launcher == WORLD_NONE && a->launcher == LAUNCH_ENV)
        return dps_fail(DPS_ERR_USAGE, "--launcher env: no launcher's variables are set (RANK, "
                        "OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID); start dpscale with "
                        "torchrun, mpirun or srun");
    int launched = w.launcher != WORLD_NONE && w.size > 1;
    DPS_TRY(check_comm(a, be, launched));
    if (!launched) return DPS_OK;
    DPS_TRY(check_world(a, &w));
    a->cfg.ngpus = w.size; /* what build_from_lists takes when --gpus is not given */
    a->cfg.world = w;
    return ddp_world_new(&w, &a->dw);
}

void cli_leave_world(cli_args *a)
{
    ddp_world_leave(a->dw, a->cfg.timeout_s);
    a->dw = NULL;
}
